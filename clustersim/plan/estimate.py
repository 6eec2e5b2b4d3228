"""The analytic screen applied to candidates: each pool's engine as vLLM would start it, its
capacity from ``screen`` (cached: a pool of one kind, size and engine is priced once), and the
instance counts the screen expects a target rate to need.

``screen.py`` is the queueing and step-time arithmetic over plain numbers; this module turns a
:class:`Candidate` into those numbers and back into an estimate with a reason.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from clustersim.catalog import load_gpu
from clustersim.catalog.specs import GpuSpec, ModelSpec
from clustersim.cluster.build import expert_imbalance
from clustersim.cost.collectives import FP8_DISPATCH_BYTES, AllToAll
from clustersim.cost.roofline import CostModel
from clustersim.engine.defaults import resolve_engine
from clustersim.errors import ClusterSimError, ConfigError
from clustersim.plan.fleet import NodeTemplate, fleet_for
from clustersim.plan.screen import (
    ColocatedSteps,
    Engine,
    Estimate,
    InstanceState,
    TrafficStats,
    capacity,
    colocated_state,
    colocated_steps,
    decode_state,
    prefill_state,
)
from clustersim.plan.space import Candidate, variant
from clustersim.scenario import SLO, Scenario

MAX_INSTANCES = 4096


@dataclass(frozen=True)
class TrafficClass:
    """One class of a three-pool layout's traffic: its share of requests and its lengths."""

    share: float
    stats: TrafficStats


@dataclass(frozen=True)
class Screened:
    """A candidate as the screen sees it: its estimated goodput and what limits it."""

    candidate: Candidate
    estimate_per_s: float
    binding: str | None
    reason: str | None
    """Why the candidate cannot run at all (pruned), else None."""


class Screen:
    """Screens the candidates of one plan: one scenario's model, traffic and SLO."""

    def __init__(self, scenario: Scenario, model: ModelSpec, sample: tuple[np.ndarray, np.ndarray],
                 arrival_cv: float, slo: SLO, templates: dict[str, NodeTemplate],
                 base_rate_per_s: float) -> None:
        """``sample``: (prompt, output) tokens of the scenario's requests."""
        self.scenario = scenario
        self.model = model
        self.sample = sample
        self.traffic = TrafficStats.of(*sample, arrival_cv)
        self.slo = slo
        self.templates = templates
        self.base_rate = base_rate_per_s
        self._engines: dict[tuple, Engine | str] = {}
        self._capacities: dict[tuple, Estimate] = {}
        self._handoffs: dict[tuple, float] = {}
        """The median prompt's KV handoff by (decode GPU, within one node, traffic)."""
        self._steps: dict[tuple, dict[float, ColocatedSteps | InstanceState]] = {}
        """A colocated engine's steps by rate, by (engine, traffic)."""
        """The median prompt's KV handoff by (decode GPU, within one node, traffic)."""
        self._classes: dict[str, TrafficClass | None] | None = None

    def engine(self, gpu_id: str, tp: int, candidate: Candidate, pp: int = 1, dp: int = 1,
               role: str = "colocated") -> Engine | str:
        """The pool's engine as the screen prices it, or why it cannot start. With ``pp``
        pipeline stages its KV capacity is the stages' (each holds its layers' KV of the same
        tokens) and its step the whole model's on ``tp`` GPUs: what one batch waits for a
        token, every stage in turn (the batches the other stages run meanwhile, the bubbles
        and the activation sends are left to the simulation). With ``dp`` data-parallel ranks
        it is one rank: its share of the experts, its MoE layers seeing every rank's tokens
        (as busy as itself), their all-gather inside a server or DeepEP's all-to-all across
        servers (``_parallel_cost``)."""
        key = (gpu_id, tp, candidate.max_num_batched_tokens, candidate.enable_chunked_prefill,
               candidate.quantization, candidate.kv_cache_dtype, candidate.speculative, pp,
               dp, role if dp > 1 else "")
        if key in self._engines:
            return self._engines[key]
        scenario = self.scenario
        gpu = load_gpu(gpu_id)
        template = self.templates.get(gpu_id)
        result: Engine | str
        try:
            if template is not None and tp > template.gpus_per_node:
                raise ConfigError("tensor_parallel_size", f"TP{tp} spans nodes: a "
                                  f"{template.name} node has {template.gpus_per_node} GPUs")
            self.model.check_tp(tp)
            gpu.tp_link(tp)
            probe = variant(scenario, candidate, None).engine
            setup = resolve_engine(probe, self.model, gpu, tp, dp, pp)
            config = setup.scheduler
            served = setup.model
            # one rank prices its experts sliced TP ways, unless vLLM could not load them so
            # and the scenario runs whole experts a GPU (FP8 blocks: expert_slice_refusal)
            whole = (bool(scenario.enable_expert_parallel)
                     and served.expert_slice_refusal(tp, False) is not None)
            cost = (CostModel(served, gpu, tp, expert_parallel=whole) if dp == 1
                    else self._parallel_cost(served, gpu, tp, dp, role))
            result = Engine(cost, config.max_num_batched_tokens,
                            config.max_num_seqs, (setup.num_gpu_blocks - 1) * config.block_size,
                            config.enable_chunked_prefill,
                            0.0 if served.sliding_window is None else float(
                                served.kv_window_groups
                                * (served.sliding_window + config.block_size)))
        except ClusterSimError as error:
            where = (f"TP{tp}" + (f" x PP{pp}" if pp > 1 else "")
                     + (f" x DP{dp}" if dp > 1 else ""))
            result = f"{gpu_id} {where}: {error.message}"
        self._engines[key] = result
        return result

    def _parallel_cost(self, model: ModelSpec, gpu: GpuSpec, tp: int, dp: int,
                       role: str) -> CostModel:
        """One rank of a ``dp``-way data-parallel, expert-parallel instance, as the cluster
        prices it: an all-gather and reduce-scatter over the server's fabric when its dp x tp
        GPUs fit one server, DeepEP's all-to-all over the NICs when they span servers
        (low-latency kernels on a decode pool, normal ones elsewhere)."""
        if not model.is_moe:
            raise ConfigError("data_parallel_size", f"{model.id} is dense: its data-parallel "
                              "ranks are instances (plan instances instead)")
        template = self.templates.get(gpu.id)
        gpus = dp * tp
        node = (template.gpus_per_node if template is not None
                else max(gpu.link.max_gpus, gpu.pcie.max_gpus))
        a2a: AllToAll | None = None
        link: dict[str, float] = {}
        if gpus > node:
            if template is None or template.inter_bytes_per_s is None:
                raise ConfigError("data_parallel_size", f"DP{dp} x TP{tp} spans {gpu.id} "
                                  "servers, which need NICs (plan.nodes: a networked server)")
            fp8 = model.quantization is not None and model.quantization.method == "fp8"
            a2a = AllToAll(gpus, node, template.intra_bytes_per_s, template.inter_bytes_per_s,
                           dispatch_bytes=FP8_DISPATCH_BYTES if fp8 else model.dtype_bytes,
                           combine_bytes=model.dtype_bytes,
                           mode="low_latency" if role == "decode" else "normal",
                           expert_groups=model.expert_group_limit)
        elif template is not None:
            link["dp_link_bytes_per_s"] = min(template.intra_bytes_per_s,
                                              gpu.tp_link(gpus).effective_bytes_per_s)
        settings = self.scenario.engine
        cost = CostModel(model, gpu, tp, dp=dp, expert_parallel=True, all_to_all=a2a,
                         expert_imbalance=expert_imbalance(settings, a2a is not None), **link)
        cost.prices.moe_token_scale = float(dp)
        return cost

    def _capacity(self, kind: str, engine: Engine, traffic: TrafficStats, servers: int = 1,
                  extra: tuple = ()) -> Estimate:
        """Requests/s per instance of a pool of ``servers`` instances behind one router, for
        ``traffic`` (the whole scenario's, or one class of it in a three-pool layout)."""
        key = (kind, id(engine), id(traffic), servers, *extra)
        if key not in self._capacities:
            q = self.slo.attainment_target if self.slo.criterion != "mean" else 0.5
            slo = self.slo
            if kind == "colocated":
                steps = self._colocated_steps(engine, traffic)
                state = lambda lam: colocated_state(  # noqa: E731
                    engine, traffic, slo, q, lam, servers, steps(lam))
            elif kind == "decode":
                state = lambda lam: decode_state(engine, traffic, slo, lam)  # noqa: E731
            else:
                handoff_s, first_s = extra
                state = lambda lam: prefill_state(  # noqa: E731
                    engine, traffic, slo, q, lam, handoff_s, first_s, servers)
            self._capacities[key] = capacity(state, max(self.base_rate, 1e-3))
        return self._capacities[key]

    def _colocated_steps(self, engine: Engine, traffic: TrafficStats
                         ) -> Callable[[float], ColocatedSteps | InstanceState]:
        """:func:`colocated_steps` of ``engine`` for ``traffic``, each rate priced once: a
        pool's capacity is searched for every size its candidates give it, and those
        searches try the same few rates (the queue in front of the instances is all that
        the size changes)."""
        key = (id(engine), id(traffic))
        known = self._steps.get(key)
        if known is None:
            known = self._steps[key] = {}

        def steps(lam: float) -> ColocatedSteps | InstanceState:
            found = known.get(lam)
            if found is None:
                found = known[lam] = colocated_steps(engine, traffic, lam)
            return found

        return steps

    def __call__(self, candidate: Candidate) -> Screened:
        for pool in candidate.pools:
            engine = self.engine(pool.gpu, pool.tensor_parallel_size, candidate,
                                 pool.pipeline_parallel_size, pool.data_parallel_size, pool.role)
            if isinstance(engine, str):
                return Screened(candidate, 0.0, None, engine)
            if pool.pipeline_parallel_size > 1 and not candidate.baseline and not isinstance(
                    self.engine(pool.gpu, pool.tensor_parallel_size, candidate), str):
                return Screened(candidate, 0.0, None, (
                    f"{pool.gpu} TP{pool.tensor_parallel_size} holds the model without "
                    f"pipeline stages: PP{pool.pipeline_parallel_size} is tried only where "
                    "tensor parallelism alone cannot fit"))
        if not candidate.baseline:
            try:
                fleet_for(candidate, self.templates)
            except ClusterSimError as error:
                return Screened(candidate, 0.0, None, error.message)
        loads = self._loads(candidate)
        limits = {role: pool_rate * candidate.pool(role).instances / share
                  for role, (share, pool_rate, _) in loads.items() if share > 0}
        role = min(limits, key=lambda r: (limits[r], r))
        binding = loads[role][2]
        if candidate.layout != "colocated":
            binding = f"{role} {binding}"
        return Screened(candidate, limits[role], binding, None)

    def _loads(self, candidate: Candidate) -> dict[str, tuple[float, float, str]]:
        """Per pool: (the share of the traffic it carries, requests/s one of its instances
        sustains, the limit that stops it). A disaggregated request passes both pools; a
        three-pool layout routes each class (prefill-heavy, decode-heavy, mixed) to its path,
        as the cluster does."""
        loads = self._engine_loads(candidate)
        # (an instance of data-parallel ranks carries its ranks' rates)
        return {role: (share, rate * candidate.pool(role).data_parallel_size, binding)
                for role, (share, rate, binding) in loads.items()}

    def _engine_loads(self, candidate: Candidate) -> dict[str, tuple[float, float, str]]:
        """:meth:`_loads` per engine rank (an instance, or one data-parallel rank of one)."""
        engine = {p.role: self.engine(p.gpu, p.tensor_parallel_size, candidate,
                                      p.pipeline_parallel_size, p.data_parallel_size, p.role)
                  for p in candidate.pools}
        size = {p.role: p.num_engines for p in candidate.pools}
        if candidate.layout == "colocated":
            est = self._capacity("colocated", engine["colocated"], self.traffic,
                                 size["colocated"])
            return {"colocated": (1.0, est.rate_per_s, est.binding)}
        if candidate.layout == "disaggregated":
            d = self._capacity("decode", engine["decode"], self.traffic)
            p = self._capacity("prefill", engine["prefill"], self.traffic, size["prefill"],
                               (self._handoff_estimate_s(candidate, self.traffic), d.step_s))
            return {"prefill": (1.0, p.rate_per_s, p.binding),
                    "decode": (1.0, d.rate_per_s, d.binding)}
        classes = self.classes()
        share = {name: t.share if t is not None else 0.0 for name, t in classes.items()}
        loads: dict[str, tuple[float, float, str]] = {}
        split, direct, shared = (classes[k] for k in ("prefill_heavy", "decode_heavy",
                                                      "mixed"))
        if split is not None:  # prefill-heavy: prefill pool, then the decode pool decodes
            d = self._capacity("decode", engine["decode"], split.stats)
            p = self._capacity("prefill", engine["prefill"], split.stats, size["prefill"],
                               (self._handoff_estimate_s(candidate, split.stats), d.step_s))
            loads["prefill"] = (share["prefill_heavy"], p.rate_per_s, p.binding)
        else:
            loads["prefill"] = (0.0, math.inf, "idle")
        # the decode pool decodes the split requests and serves the decode-heavy ones whole:
        # instance time adds up, so its capacity for the mix is the share-weighted harmonic one
        parts = []
        if split is not None:
            parts.append((share["prefill_heavy"], d))
        if direct is not None:
            parts.append((share["decode_heavy"], self._capacity(
                "colocated", engine["decode"], direct.stats, size["decode"])))
        carried = sum(w for w, _ in parts)
        if carried > 0:
            time_per_request = sum(w / carried / est.rate_per_s if est.rate_per_s > 0
                                   else math.inf for w, est in parts)
            worst = min(parts, key=lambda part: part[1].rate_per_s)[1]
            loads["decode"] = (carried, 1 / time_per_request, worst.binding)
        else:
            loads["decode"] = (0.0, math.inf, "idle")
        if shared is not None:
            c = self._capacity("colocated", engine["colocated"], shared.stats,
                               size["colocated"])
            loads["colocated"] = (share["mixed"], c.rate_per_s, c.binding)
        else:
            loads["colocated"] = (0.0, math.inf, "idle")
        return loads

    def classes(self) -> dict[str, TrafficClass | None]:
        """The traffic split the way a three-pool layout routes it (None: an empty class)."""
        if self._classes is None:
            layout = self.scenario.layout
            long_prompt = layout.long_prompt_tokens if layout is not None else 2048
            long_output = layout.long_output_tokens if layout is not None else 256
            prompts, outputs = self.sample
            is_long_prompt, is_long_output = prompts > long_prompt, outputs > long_output
            masks = {"prefill_heavy": is_long_prompt & ~is_long_output,
                     "decode_heavy": is_long_output & ~is_long_prompt}
            masks["mixed"] = ~(masks["prefill_heavy"] | masks["decode_heavy"])
            self._classes = {
                name: TrafficClass(float(mask.mean()), TrafficStats.of(
                    prompts[mask], outputs[mask], self.traffic.arrival_cv)) if mask.any()
                else None
                for name, mask in masks.items()}
        return self._classes

    def _handoff_estimate_s(self, candidate: Candidate, traffic: TrafficStats) -> float:
        """The median prompt's KV over the link prefill and decode share: one node's fabric
        when the whole candidate fits one node of its type, else the NIC."""
        decode = candidate.pool("decode")
        template = self.templates.get(decode.gpu)
        if template is None:
            return 0.0
        one_node = (len(candidate.gpus_by_type) == 1
                    and candidate.num_gpus <= template.gpus_per_node)
        key = (decode.gpu, one_node, id(traffic))
        handoff_s = self._handoffs.get(key)
        if handoff_s is None:
            handoff_s = self._handoffs[key] = self._handoff_s(
                template.intra_bytes_per_s if one_node else template.inter_bytes_per_s,
                traffic)
        return handoff_s

    def _handoff_s(self, bandwidth: float, traffic: TrafficStats) -> float:
        if not bandwidth:
            return math.inf
        tokens = traffic.prompt_at(0.5)
        kv = self.model.model_copy(update={"kv_cache_dtype": self.scenario.engine.kv_cache_dtype})
        if kv.sliding_window is not None:
            return kv.kv_cached_bytes(math.ceil(tokens)) / bandwidth
        return tokens * kv.kv_bytes_per_token(1) / bandwidth

    def sized_for(self, family: Candidate, target_per_s: float) -> Candidate:
        """The family at the smallest size the screen expects to reach ``target_per_s`` (each
        pool sized on its own for the share of the traffic it carries; a pool's queue shares
        its instances); the family itself when it cannot run."""
        if self(family).reason is not None:
            return family
        return family.resized({p.role: self._instances_for(family, p.role, target_per_s)
                               for p in family.pools})

    def _instances_for(self, family: Candidate, role: str, target: float) -> int:
        """Fewest instances of the pool whose screened capacity carries its share of
        ``target`` (req/s)."""
        def carried(n: int) -> tuple[float, float]:
            share, rate, _ = self._loads(family.resized({role: n}))[role]
            return share, n * rate

        share, per = carried(1)
        if share <= 0:
            return 1
        if per <= 0:
            return 1
        n = min(MAX_INSTANCES, max(1, math.ceil(share * target / per)))
        while n > 1 and carried(n - 1)[1] >= share * target:  # pooled queues need fewer
            n -= 1
        return n
