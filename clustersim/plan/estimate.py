"""The analytic screen applied to candidates: each pool's engine as vLLM would start it, its
capacity from ``screen`` (cached: a pool of one kind, size and engine is priced once), and the
instance counts the screen expects a target rate to need.

``screen.py`` is the queueing and step-time arithmetic over plain numbers; this module turns a
:class:`Candidate` into those numbers and back into an estimate with a reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from clustersim.catalog import load_gpu
from clustersim.catalog.specs import ModelSpec
from clustersim.cost.roofline import CostModel
from clustersim.engine.defaults import resolve_engine
from clustersim.errors import ClusterSimError, ConfigError
from clustersim.plan.fleet import NodeTemplate, fleet_for
from clustersim.plan.screen import (
    Engine,
    Estimate,
    TrafficStats,
    capacity,
    colocated_state,
    decode_state,
    prefill_state,
)
from clustersim.plan.space import Candidate, variant
from clustersim.scenario import SLO, Scenario

MAX_INSTANCES = 4096


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

    def __init__(self, scenario: Scenario, model: ModelSpec, traffic: TrafficStats, slo: SLO,
                 templates: dict[str, NodeTemplate], base_rate_per_s: float) -> None:
        self.scenario = scenario
        self.model = model
        self.traffic = traffic
        self.slo = slo
        self.templates = templates
        self.base_rate = base_rate_per_s
        self._engines: dict[tuple, Engine | str] = {}
        self._capacities: dict[tuple, Estimate] = {}

    def engine(self, gpu_id: str, tp: int, candidate: Candidate) -> Engine | str:
        """The pool's engine as the screen prices it, or why it cannot start."""
        key = (gpu_id, tp, candidate.max_num_batched_tokens, candidate.enable_chunked_prefill)
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
            setup = resolve_engine(probe, self.model, gpu, tp)
            config = setup.scheduler
            result = Engine(CostModel(self.model, gpu, tp), config.max_num_batched_tokens,
                            config.max_num_seqs, (setup.num_gpu_blocks - 1) * config.block_size,
                            config.enable_chunked_prefill)
        except ClusterSimError as error:
            result = f"{gpu_id} TP{tp}: {error.message}"
        self._engines[key] = result
        return result

    def _capacity(self, kind: str, engine: Engine, servers: int = 1,
                  extra: tuple = ()) -> Estimate:
        """Requests/s per instance of a pool of ``servers`` instances behind one router."""
        key = (kind, id(engine), servers, *extra)
        if key not in self._capacities:
            q = self.slo.attainment_target if self.slo.criterion != "mean" else 0.5
            traffic, slo = self.traffic, self.slo
            if kind == "colocated":
                state = lambda lam: colocated_state(  # noqa: E731
                    engine, traffic, slo, q, lam, servers)
            elif kind == "decode":
                state = lambda lam: decode_state(engine, traffic, slo, lam)  # noqa: E731
            else:
                handoff_s, first_s = extra
                state = lambda lam: prefill_state(  # noqa: E731
                    engine, traffic, slo, q, lam, handoff_s, first_s, servers)
            self._capacities[key] = capacity(state, max(self.base_rate, 1e-3))
        return self._capacities[key]

    def __call__(self, candidate: Candidate) -> Screened:
        engines = {}
        for pool in candidate.pools:
            engine = self.engine(pool.gpu, pool.tensor_parallel_size, candidate)
            if isinstance(engine, str):
                return Screened(candidate, 0.0, None, engine)
            engines[pool.role] = engine
        if not candidate.baseline:
            try:
                fleet_for(candidate, self.templates)
            except ClusterSimError as error:
                return Screened(candidate, 0.0, None, error.message)
        if candidate.layout == "colocated":
            pool = candidate.pool("colocated")
            est = self._capacity("colocated", engines["colocated"], pool.instances)
            return Screened(candidate, pool.instances * est.rate_per_s, est.binding, None)
        if candidate.layout == "disaggregated":
            prefill, decode = candidate.pool("prefill"), candidate.pool("decode")
            d = self._capacity("decode", engines["decode"])
            handoff_s = self._handoff_estimate_s(candidate)
            p = self._capacity("prefill", engines["prefill"], prefill.instances,
                               (handoff_s, d.step_s))
            p_rate, d_rate = prefill.instances * p.rate_per_s, decode.instances * d.rate_per_s
            binding = f"prefill {p.binding}" if p_rate <= d_rate else f"decode {d.binding}"
            return Screened(candidate, min(p_rate, d_rate), binding, None)
        return Screened(candidate, 0.0, None, "three_pool candidates are not screened yet: "
                         "plan colocated and disaggregated layouts")

    def _handoff_estimate_s(self, candidate: Candidate) -> float:
        """The median prompt's KV over the link prefill and decode share: one node's fabric
        when the whole candidate fits one node of its type, else the NIC."""
        decode = candidate.pool("decode")
        template = self.templates.get(decode.gpu)
        if template is None:
            return 0.0
        one_node = (len(candidate.gpus_by_type) == 1
                    and candidate.num_gpus <= template.gpus_per_node)
        bandwidth = template.intra_bytes_per_s if one_node else template.inter_bytes_per_s
        if not bandwidth:
            return math.inf
        tokens = self.traffic.prompt_at(0.5)
        return tokens * self.model.kv_bytes_per_token(1) / bandwidth

    def sized_for(self, family: Candidate, target_per_s: float) -> Candidate:
        """The family at the smallest size the screen expects to reach ``target_per_s`` (each
        pool sized on its own; a pool's queue shares its instances); the family itself when it
        cannot run."""
        if self(family).reason is not None:
            return family
        return family.resized({p.role: self._instances_for(family, p.role, target_per_s)
                               for p in family.pools})

    def _instances_for(self, family: Candidate, role: str, target: float) -> int:
        """Fewest instances of the pool whose screened capacity reaches ``target`` (req/s)."""
        def total(n: int) -> float:
            return n * self._pool_rate(family.resized({role: n}), role)

        per = self._pool_rate(family, role)
        if per <= 0:
            return 1
        n = min(MAX_INSTANCES, max(1, math.ceil(target / per)))
        while n > 1 and total(n - 1) >= target:  # pooled queues need fewer than n x one
            n -= 1
        return n

    def _pool_rate(self, candidate: Candidate, role: str) -> float:
        """Requests/s one instance of the candidate's pool sustains (the screen's)."""
        pool = candidate.pool(role)
        engine = self.engine(pool.gpu, pool.tensor_parallel_size, candidate)
        if isinstance(engine, str):
            return 0.0
        if role == "colocated":
            return self._capacity("colocated", engine, pool.instances).rate_per_s
        if role == "decode":
            return self._capacity("decode", engine).rate_per_s
        decode = candidate.pool("decode")
        d_engine = self.engine(decode.gpu, decode.tensor_parallel_size, candidate)
        first = 0.0 if isinstance(d_engine, str) else self._capacity("decode", d_engine).step_s
        return self._capacity("prefill", engine, pool.instances,
                              (self._handoff_estimate_s(candidate), first)).rate_per_s

