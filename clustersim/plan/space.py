"""The search space: the deployments a plan considers, and each as a scenario to simulate.

A :class:`Candidate` is a layout kind, its pools (GPU type, tensor parallelism, instance
count per role) and the engine budget. The families come from the plan's choices (layouts x
GPUs x TP, PP and DP per pool x ``max_num_batched_tokens`` x chunked prefill x quantization x KV
dtype x speculative decoding x the CPU KV tier's size on colocated layouts); the sizes from the
objective::

    max_goodput_per_gpu   every layout that fills the GPU budget: colocated n = budget // tp;
                          disaggregated every x prefill + y decode instances with no room left
                          for another instance of either pool (each P:D ratio once)
    min_gpus, min_cost    the sizes the analytic screen estimates for the target rate (and, in
                          the search, their neighbours)

The scenario's own layout, when it has one, is always a candidate too (the user's baseline).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass, field

from clustersim.engine.settings import SpeculativeSettings
from clustersim.scenario import Scenario
from clustersim.scenario.layout import LayoutSpec, PoolSpec, RouterSpec
from clustersim.scenario.plan import PlanSpec

ROLE_LETTER = {"prefill": "P", "decode": "D", "colocated": ""}
DEFAULT_ROUTERS = {
    "router": RouterSpec(kind="least_outstanding_requests"),
    "prefill_router": RouterSpec(kind="least_outstanding_tokens"),
    "decode_router": RouterSpec(kind="least_outstanding_requests"),
}
"""Routers of generated layouts when the scenario names none: load-aware, as production
proxies are (round-robin would make the planner's answer depend on arrival order)."""


@dataclass(frozen=True, slots=True, order=True)
class PoolChoice:
    role: str
    gpu: str
    tensor_parallel_size: int
    instances: int
    pipeline_parallel_size: int = 1
    """Pipeline stages per instance, each of tensor_parallel_size GPUs (colocated pools)."""
    data_parallel_size: int = 1
    """Data-parallel ranks per instance, each of tensor_parallel_size GPUs, with expert
    parallelism over all of them (MoE models)."""

    @property
    def gpus_per_instance(self) -> int:
        return self.tensor_parallel_size * self.pipeline_parallel_size * self.data_parallel_size

    @property
    def num_gpus(self) -> int:
        return self.gpus_per_instance * self.instances

    @property
    def num_engines(self) -> int:
        """Engine ranks of the pool: each instance's data-parallel ranks."""
        return self.instances * self.data_parallel_size

    def family(self) -> tuple[str, str, int, int, int]:
        return (self.role, self.gpu, self.tensor_parallel_size, self.pipeline_parallel_size,
                self.data_parallel_size)

    @property
    def parallel(self) -> str:
        """'TP2', 'TP1 x PP2' with pipeline stages, 'TP1 x DP8 EP' with data-parallel ranks."""
        pp, dp = self.pipeline_parallel_size, self.data_parallel_size
        return (f"TP{self.tensor_parallel_size}" + (f" x PP{pp}" if pp > 1 else "")
                + (f" x DP{dp} EP" if dp > 1 else ""))

    def label(self) -> str:
        letter = ROLE_LETTER[self.role]
        if not letter:
            return f"{self.instances} x {self.gpu} {self.parallel}"
        return f"{self.instances}{letter} ({self.gpu} {self.parallel})"


@dataclass(frozen=True, slots=True)
class Candidate:
    """One deployment to judge."""

    layout: str
    pools: tuple[PoolChoice, ...]
    max_num_batched_tokens: int | None
    """None: the scenario's engine value (or vLLM's default for the GPU)."""
    enable_chunked_prefill: bool
    baseline: bool = False
    """The scenario's own layout, simulated as written."""
    quantization: str | None = None
    """vLLM's --quantization for every pool (None: the checkpoint's own)."""
    kv_cache_dtype: str = "auto"
    speculative: str | None = None
    """vLLM's --speculative-config for every pool, as the JSON of the scenario's
    ``engine.speculative`` form (:func:`speculative_json`; None: off)."""
    kv_offloading_gib: float = 0.0
    """GiB of host memory for each engine's CPU KV tier (0: none; colocated layouts)."""
    _num_gpus: int = field(init=False, repr=False, compare=False)
    _id: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # made once: a plan reads both several times for each of up to millions of candidates
        object.__setattr__(self, "_num_gpus", sum(p.num_gpus for p in self.pools))
        object.__setattr__(self, "_id", self._make_id())

    @property
    def num_gpus(self) -> int:
        return self._num_gpus

    @property
    def gpus_by_type(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for p in self.pools:
            counts[p.gpu] = counts.get(p.gpu, 0) + p.num_gpus
        return dict(sorted(counts.items()))

    def pool(self, role: str) -> PoolChoice:
        return next(p for p in self.pools if p.role == role)

    @property
    def family(self) -> tuple:
        """Everything but the instance counts: candidates of one family differ in size only."""
        return (self.layout, tuple(p.family() for p in self.pools), self.max_num_batched_tokens,
                self.enable_chunked_prefill, self.baseline, self.quantization, self.kv_cache_dtype,
                self.speculative, self.kv_offloading_gib)

    @property
    def num_engines(self) -> int:
        """Engines of the deployment: every instance's data-parallel ranks."""
        return sum(p.num_engines for p in self.pools)

    @property
    def host_memory_gib(self) -> float:
        """Host memory its CPU KV tiers take, every engine's."""
        return self.kv_offloading_gib * self.num_engines

    def with_tier(self, gib: float) -> Candidate:
        """The same deployment with a CPU KV tier of ``gib`` per engine (0: none)."""
        return Candidate(self.layout, self.pools, self.max_num_batched_tokens,
                         self.enable_chunked_prefill, quantization=self.quantization,
                         kv_cache_dtype=self.kv_cache_dtype, speculative=self.speculative,
                         kv_offloading_gib=gib)

    def resized(self, counts: dict[str, int]) -> Candidate:
        pools = tuple(
            PoolChoice(p.role, p.gpu, p.tensor_parallel_size, counts.get(p.role, p.instances),
                       p.pipeline_parallel_size, p.data_parallel_size)
            for p in self.pools)
        return Candidate(self.layout, pools, self.max_num_batched_tokens,
                         self.enable_chunked_prefill, quantization=self.quantization,
                         kv_cache_dtype=self.kv_cache_dtype, speculative=self.speculative,
                         kv_offloading_gib=self.kv_offloading_gib)

    @property
    def pd_ratio(self) -> str | None:
        if self.layout != "disaggregated":
            return None
        return f"{self.pool('prefill').instances}:{self.pool('decode').instances}"

    @property
    def id(self) -> str:
        """Stable and unique: the ledger's key."""
        return self._id

    def _make_id(self) -> str:
        pools = "+".join(
            f"{ROLE_LETTER[p.role] or 'C'}{p.instances}x{p.gpu}-tp{p.tensor_parallel_size}"
            + (f"-pp{p.pipeline_parallel_size}" if p.pipeline_parallel_size > 1 else "")
            + (f"-dp{p.data_parallel_size}-ep" if p.data_parallel_size > 1 else "")
            for p in self.pools)
        budget = "default" if self.max_num_batched_tokens is None else self.max_num_batched_tokens
        chunk = "chunked" if self.enable_chunked_prefill else "unchunked"
        prefix = "baseline/" if self.baseline else ""
        precision = "".join(
            f"/{name}-{value}" for name, value in (("q", self.quantization),
                                                   ("kv", self.kv_cache_dtype))
            if value not in (None, "auto"))
        spec = "" if self.speculative is None else f"/spec-{_spec_tag(self.speculative)}"
        tier = f"/cpu-kv-{self.kv_offloading_gib:g}gib" if self.kv_offloading_gib else ""
        return f"{prefix}{self.layout}/{pools}/mnbt-{budget}/{chunk}{precision}{spec}{tier}"

    def label(self) -> str:
        """How an infra review writes it: '8 x h100-sxm TP2, mnbt 8192' or
        '3P (h100-sxm TP2) + 2D (h100-sxm TP1)' (the engine budget when the plan sets one)."""
        text = " + ".join(p.label() for p in self.pools)
        if self.max_num_batched_tokens is not None and not self.baseline:
            text += f", mnbt {self.max_num_batched_tokens}"
        if not self.enable_chunked_prefill:
            text += ", no chunking"
        if self.quantization is not None and not self.baseline:
            text += f", {self.quantization}"
        if self.kv_cache_dtype != "auto" and not self.baseline:
            text += f", {self.kv_cache_dtype} KV"
        if self.speculative is not None and not self.baseline:
            text += f", {_spec_label(self.speculative)}"
        if self.kv_offloading_gib and not self.baseline:
            text += f", {self.kv_offloading_gib:g} GiB CPU KV tier"
        return f"{text} (scenario's layout)" if self.baseline else text


def speculative_json(spec: SpeculativeSettings | None) -> str | None:
    """A speculative-decoding choice as a candidate holds it (hashable, one text per
    choice): the settings' JSON without unset fields; None: off."""
    return None if spec is None else json.dumps(spec.model_dump(exclude_none=True))


def speculative_settings(text: str | None) -> SpeculativeSettings | None:
    return None if text is None else SpeculativeSettings.model_validate_json(text)


def _spec_tag(text: str) -> str:
    """The speculative choice in a candidate id: 'eagle-k3-a0.7' (acceptance lengths: 'L'
    and their values; a draft cost: '-d' and its layers)."""
    spec = speculative_settings(text)
    assert spec is not None
    tag = f"{spec.method}-k{spec.num_speculative_tokens}"
    if spec.acceptance_rate is not None:
        tag += f"-a{spec.acceptance_rate:g}"
    else:
        tag += "-L" + "_".join(f"{p:g}" for p in spec.acceptance_lengths or ())
    if spec.draft_layers is not None:
        tag += f"-d{spec.draft_layers:g}"
    return tag


def _spec_label(text: str) -> str:
    spec = speculative_settings(text)
    assert spec is not None
    accept = (f"acceptance {spec.acceptance_rate:g}" if spec.acceptance_rate is not None
              else "measured acceptance")
    return f"{spec.method} k{spec.num_speculative_tokens} ({accept})"


def pool_options(plan: PlanSpec, scenario: Scenario, role: str
                 ) -> tuple[list[str], list[int], list[int], list[int]]:
    """(GPUs, TP sizes, PP sizes, DP sizes) of the role's pools; pipeline stages default to
    the scenario's on a colocated pool, 1 on a prefill or decode pool."""
    choices = getattr(plan, role)
    gpus = choices.gpus or [scenario.gpu]
    tps = choices.tensor_parallel_sizes or [scenario.tensor_parallel_size]
    pps = choices.pipeline_parallel_sizes or [
        scenario.pipeline_parallel_size if role == "colocated" else 1]
    dps = choices.data_parallel_sizes or [scenario.data_parallel_size]
    return gpus, tps, pps, dps


def engine_options(plan: PlanSpec, scenario: Scenario
                   ) -> list[tuple[int | None, bool, str | None, str, str | None]]:
    """(max_num_batched_tokens, enable_chunked_prefill, quantization, kv_cache_dtype,
    speculative) to try; each the scenario's own when the plan does not vary it (the CPU KV
    tier: :func:`tier_options`)."""
    budgets: list[int | None] = list(plan.max_num_batched_tokens or [None])
    chunked = plan.enable_chunked_prefill or [scenario.engine.enable_chunked_prefill]
    quantization = plan.quantization or [scenario.engine.quantization]
    kv = plan.kv_cache_dtype or [scenario.engine.kv_cache_dtype]
    speculative = [speculative_json(s) for s in (plan.speculative
                                                 or [scenario.engine.speculative])]
    return list(itertools.product(budgets, chunked, quantization, kv, speculative))


def tier_options(plan: PlanSpec, scenario: Scenario, layout: str) -> list[float]:
    """CPU KV tier sizes to try on ``layout`` (GiB per engine, 0: none): the plan's on a
    colocated layout, else the scenario's own (the tier runs on colocated pools)."""
    own = scenario.engine.kv_offloading_size or 0.0
    if layout != "colocated" or plan.kv_offloading_sizes is None:
        return [own]
    return [float(size) for size in plan.kv_offloading_sizes]


def families(plan: PlanSpec, scenario: Scenario) -> list[Candidate]:
    """One size-1 candidate per family (every pool one instance), in a stable order."""
    out: list[Candidate] = []
    for layout in plan.layouts:
        roles = {"colocated": ("colocated",), "disaggregated": ("prefill", "decode"),
                 "three_pool": ("prefill", "decode", "colocated")}[layout]
        per_role = [
            [PoolChoice(role, gpu, tp, 1, pp, dp)
             for gpu, tp, pp, dp in itertools.product(*pool_options(plan, scenario, role))]
            for role in roles
        ]
        for pools in itertools.product(*per_role):
            for budget, chunked, quantization, kv, spec in engine_options(plan, scenario):
                for tier in tier_options(plan, scenario, layout):
                    out.append(Candidate(layout, tuple(pools), budget, chunked,
                                         quantization=quantization, kv_cache_dtype=kv,
                                         speculative=spec, kv_offloading_gib=tier))
    return out


def fill_budget(family: Candidate, budget: int, plan: PlanSpec) -> Iterator[Candidate]:
    """Every size of ``family`` that fills ``budget`` GPUs (no room for one more instance of
    any pool), one at a time in the order of their instance counts; instance lists given in
    the plan restrict the sizes (each count once)."""
    pools = family.pools
    allowed = {p.role: _once(getattr(plan, p.role).instances) for p in pools}
    if len(pools) == 1:
        pool = pools[0]
        counts = allowed[pool.role] or [budget // pool.gpus_per_instance]
        for n in counts:
            if 0 < n * pool.gpus_per_instance <= budget:
                yield family.resized({pool.role: n})
        return
    for counts in _count_combinations(pools, budget, allowed):
        yield family.resized({p.role: n for p, n in zip(pools, counts, strict=True)})


def _once(counts: list[int] | None) -> list[int] | None:
    """The plan's instance counts, each once, in the plan's order (None: not given)."""
    return list(dict.fromkeys(counts)) if counts else None


def _count_combinations(pools: tuple[PoolChoice, ...], budget: int,
                        allowed: dict[str, list[int] | None]) -> Iterator[tuple[int, ...]]:
    """The instance counts of ``pools`` that fit ``budget`` and, unless every pool's counts
    are the plan's, leave no room for one more instance of the smallest pool, in
    lexicographic order (each pool's counts ascending, or in the plan's order). Only those
    are made: a count that cannot be completed within the budget ends its loop, and the last
    pool's count is the one that fills what the others leave (or none)."""
    tps = [p.gpus_per_instance for p in pools]  # GPUs per instance
    choices: list[list[int] | None] = [allowed[p.role] for p in pools]
    explicit = all(c is not None for c in choices)
    smallest = min(tps)
    most = [(budget - (sum(tps) - tp)) // tp for tp in tps]
    # the fewest GPUs the pools after each one need
    least_after = [sum(tp * (min(c) if c else 1)
                       for tp, c in zip(tps[i + 1:], choices[i + 1:], strict=True))
                   for i in range(len(pools))]
    last = len(pools) - 1

    def fills(used: int) -> bool:
        return used <= budget and (explicit or budget - used < smallest)

    def walk(i: int, used: int, prefix: tuple[int, ...]) -> Iterator[tuple[int, ...]]:
        tp, given = tps[i], choices[i]
        if i == last:
            if given is not None:
                for n in given:
                    if fills(used + n * tp):
                        yield (*prefix, n)
                return
            # the counts that fill the budget: budget - smallest < used + n * tp <= budget
            low = max(1, (budget - smallest - used) // tp + 1)
            high = min(most[i], (budget - used) // tp)
            for n in range(low, high + 1):
                yield (*prefix, n)
            return
        if given is not None:
            for n in given:
                if used + n * tp + least_after[i] <= budget:
                    yield from walk(i + 1, used + n * tp, (*prefix, n))
            return
        for n in range(1, most[i] + 1):
            if used + n * tp + least_after[i] > budget:
                break
            yield from walk(i + 1, used + n * tp, (*prefix, n))

    yield from walk(0, 0, ())


def baseline(scenario: Scenario) -> Candidate | None:
    """The scenario's own layout as a candidate (None without an explicit ``layout:``: the
    default single instance is not a deployment anyone asked about)."""
    layout = scenario.layout
    if layout is None:
        return None
    pools = tuple(
        PoolChoice(p.role, p.gpu or scenario.gpu,
                   p.tensor_parallel_size or scenario.tensor_parallel_size, p.instances,
                   p.pipeline_parallel_size or scenario.pipeline_parallel_size,
                   p.data_parallel_size or scenario.data_parallel_size)
        for p in layout.pools)
    return Candidate(layout.kind, pools, scenario.engine.max_num_batched_tokens,
                     scenario.engine.enable_chunked_prefill, baseline=True,
                     quantization=scenario.engine.quantization,
                     kv_cache_dtype=scenario.engine.kv_cache_dtype,
                     speculative=speculative_json(scenario.engine.speculative),
                     kv_offloading_gib=scenario.engine.kv_offloading_size or 0.0)


def variant(scenario: Scenario, candidate: Candidate, topology: object) -> Scenario:
    """The scenario with the candidate's layout, engine budget and ``topology`` (the
    scenario's own layout and topology for the baseline)."""
    if candidate.baseline:
        return scenario
    engine_update: dict[str, object] = {"enable_chunked_prefill": candidate.enable_chunked_prefill,
                                        "quantization": candidate.quantization,
                                        "kv_cache_dtype": candidate.kv_cache_dtype}
    if candidate.speculative is not None or scenario.engine.speculative is not None:
        engine_update["speculative"] = speculative_settings(candidate.speculative)
    if candidate.max_num_batched_tokens is not None:
        engine_update["max_num_batched_tokens"] = candidate.max_num_batched_tokens
    if candidate.kv_offloading_gib or scenario.engine.kv_offloading_size is not None:
        engine_update["kv_offloading_size"] = candidate.kv_offloading_gib or None
    settings = scenario.engine.model_dump(exclude_unset=True) | engine_update
    engine = type(scenario.engine)(**settings)
    own = scenario.layout
    routers = {name: getattr(own, name) if own is not None and name in own.model_fields_set
               else default for name, default in DEFAULT_ROUTERS.items()}
    extra = {}
    if own is not None:
        extra = {k: getattr(own, k) for k in ("kv_transfer", "long_prompt_tokens",
                                                "long_output_tokens") if k in own.model_fields_set}
    layout = LayoutSpec(
        kind=candidate.layout,
        pools=[PoolSpec(name=p.role, role=p.role, gpu=p.gpu,
                        tensor_parallel_size=p.tensor_parallel_size, instances=p.instances,
                        **({"pipeline_parallel_size": p.pipeline_parallel_size}
                           if p.pipeline_parallel_size > 1 else {}),
                        **({"data_parallel_size": p.data_parallel_size,
                            "enable_expert_parallel": True}
                           if p.data_parallel_size > 1 else {}))
               for p in candidate.pools],
        **routers, **extra,
    )
    update = {"engine": engine, "layout": layout, "topology": topology, "data_parallel_size": 1}
    if scenario.pipeline_parallel_size != 1:  # each pool names its own stages
        update["pipeline_parallel_size"] = 1
    return scenario.model_copy(update=update)
