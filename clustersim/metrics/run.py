"""The typed summary of one run, built in one pass over its records.

Everything that reads a run's figures (``simulate``'s printout and ``summary.json``,
``compare``, the planner, the report) reads a :class:`RunSummary`; ``to_json`` is
``summary.json``. Definitions are reference/metrics.md's (``DEFINITIONS`` below is written into
every summary).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from clustersim.metrics.benchmark import BenchmarkSummary, benchmark_summary
from clustersim.metrics.goodput import SloVerdict, good_mask, slo_verdict
from clustersim.metrics.records import RequestRecords
from clustersim.metrics.requests import Distribution, RequestTable
from clustersim.metrics.timeline import Window, slo_timeline
from clustersim.scenario.layout import topology_label
from clustersim.workload.spec import BenchmarkWorkload

if TYPE_CHECKING:
    from collections.abc import Mapping

    from clustersim.cluster.build import InstanceInfo
    from clustersim.cluster.faults import FaultLog, FaultTally
    from clustersim.engine.offload import HostLink
    from clustersim.engine.request import Request
    from clustersim.engine.steplog import StepRecord, StepTotals
    from clustersim.scenario import SLO
    from clustersim.sim import RunResult

DEFINITIONS = (
    "TTFT = first output token - arrival; TPOT = (E2E - TTFT) / (output tokens - 1), "
    "one-token outputs excluded; ITL = gaps between consecutive tokens of a request, pooled; "
    "E2E = last token - arrival; percentiles numpy linear; attainment = share of all arrived "
    "requests meeting every SLO term (rejected requests miss); throughput over first to last "
    "arrival (first arrival to last finish when they coincide); over_makespan: the same over "
    "first arrival to last finish (makespan_s), and good requests (finished within every SLO "
    "term) per second, what compare's keep-or-reject rule reads; utilization and KV usage over "
    "first arrival to end of the last step; per GPU = over every GPU of the layout."
)


FAULT_DEFINITIONS = (
    " Faults: a request a failure lost is sent again by its client (a new attempt from "
    "scratch) while it has retries left; it is judged on its final attempt, its TTFT and E2E "
    "from its first arrival; a lost request with no retry left is rejected and misses. "
    "lost = attempts lost (one request may lose several); retried requests = those sent more "
    "than once; failed = requests rejected because of a failure; every count is of measured "
    "requests, what the failures did to a benchmark's warm-ups is counted apart (warmups); "
    "before/after = requests "
    "whose first arrival is before / at or after the first failure; timeline windows group "
    "requests by first arrival."
)


PREFIX_CACHE_DEFINITIONS = (
    " Prefix cache hit rate = prompt tokens found in the prefix cache by each request's first "
    "prefill (vLLM's num_cached_tokens: whole blocks, at least one token computed; a "
    "disaggregated request's on its prefill instance) / prompt tokens of the requests "
    "admitted; shown when the requests carry prefix-cache keys."
)


@dataclass(frozen=True, slots=True)
class FaultImpact:
    """What one failure did (``cluster.faults.FaultTally``)."""

    fault: str
    at_s: float
    repair_s: float | None
    num_lost: int
    num_retried: int
    num_failed: int
    num_kv_load_failures: int
    num_recomputed: int


@dataclass(frozen=True)
class FaultSummary:
    """A run's failures and the requests they cost, the SLO before and after the first one,
    and attainment/TTFT/TPOT over time windows."""

    faults: tuple[FaultImpact, ...]
    num_lost: int
    """Attempts lost to failures (a request lost twice counts twice)."""
    num_retried_requests: int
    """Requests their clients sent more than once."""
    num_retries: int
    """Attempts sent again, all requests together."""
    num_failed: int
    """Requests rejected because of a failure."""
    num_kv_load_failures: int
    num_recomputed: int
    num_rerouted: int
    """KV sub-flows a failed link moved to another path."""
    warmups: FaultImpact | None
    """What the failures did to a benchmark's warm-ups, which are not measured and so in
    none of the counts above (None: they met none)."""
    first_fault_s: float | None
    num_requests_before: int
    attainment_before: float | None
    """Joint attainment of the requests that first arrived before the first failure."""
    after: SloVerdict | None
    """The SLO verdict of the requests that first arrived at or after the first failure."""
    timeline: tuple[Window, ...]

    def to_json(self) -> dict[str, Any]:
        after = self.after
        return {
            "num_lost": self.num_lost,
            "num_retried_requests": self.num_retried_requests,
            "num_retries": self.num_retries,
            "num_failed": self.num_failed,
            "num_kv_load_failures": self.num_kv_load_failures,
            "num_recomputed": self.num_recomputed,
            "num_rerouted": self.num_rerouted,
            "warmups": None if self.warmups is None else {
                k: v for k, v in asdict(self.warmups).items()
                if k not in ("fault", "at_s", "repair_s")},
            "first_fault_s": self.first_fault_s,
            "before_first_fault": {"num_requests": self.num_requests_before,
                                   "attainment": self.attainment_before},
            "after_first_fault": None if after is None else {
                "num_requests": after.num_requests, "attainment": after.attainment,
                "attainment_ci95": (None if after.attainment_interval is None
                                    else list(after.attainment_interval)),
                "meets": after.meets},
            "by_fault": [asdict(f) for f in self.faults],
            "timeline": [w.to_json() for w in self.timeline],
        }


@dataclass(frozen=True, slots=True)
class Throughput:
    """Finished requests, their prompt tokens and the output tokens per second over a span
    (the measured window, or the makespan); None when the span is empty."""

    requests_per_s: float | None
    prompt_tokens_per_s: float | None
    output_tokens_per_s: float | None


@dataclass(frozen=True, slots=True)
class PrefixCacheSummary:
    """How much of the prompts the prefix cache served: of the prompt tokens of every
    admitted request, those its first prefill found cached (vLLM's ``num_cached_tokens``,
    summed)."""

    cached_tokens: int
    prompt_tokens: int

    @property
    def hit_rate(self) -> float | None:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else None

    def to_json(self) -> dict[str, Any]:
        return {"hit_rate": self.hit_rate, "cached_tokens": self.cached_tokens,
                "prompt_tokens": self.prompt_tokens}


CPU_TIER_DEFINITIONS = (
    " CPU tier hit rate = prompt tokens each admitted request's first prefill loaded from "
    "its engine's CPU tier (past its HBM prefix hit) / prompt tokens of the requests "
    "admitted; HBM + CPU = the share either served; loaded / stored bytes = KV copied over "
    "the engines' PCIe links from / to host memory; link busy = copy seconds each way over "
    "the span (first arrival to end of the last step), summed over engines."
)


@dataclass(frozen=True, slots=True)
class CpuTierSummary:
    """What the engines' CPU tiers below HBM did (``engine.offload``)."""

    hit_tokens: int
    """Prompt tokens first prefills loaded from a CPU tier."""
    cached_tokens: int
    """Prompt tokens first prefills found in HBM."""
    prompt_tokens: int
    loaded_bytes: int
    stored_bytes: int
    num_loads: int
    num_stores: int
    load_busy_s: float
    store_busy_s: float
    load_wait_s: float
    """Summed time loads queued behind earlier loads on their engine's link."""

    @property
    def hit_rate(self) -> float | None:
        return self.hit_tokens / self.prompt_tokens if self.prompt_tokens else None

    @property
    def hbm_and_cpu_hit_rate(self) -> float | None:
        if not self.prompt_tokens:
            return None
        return (self.hit_tokens + self.cached_tokens) / self.prompt_tokens

    def to_json(self) -> dict[str, Any]:
        return {"hit_rate": self.hit_rate, "hbm_and_cpu_hit_rate": self.hbm_and_cpu_hit_rate,
                "hit_tokens": self.hit_tokens, "prompt_tokens": self.prompt_tokens,
                "loaded_bytes": self.loaded_bytes, "stored_bytes": self.stored_bytes,
                "num_loads": self.num_loads, "num_stores": self.num_stores,
                "load_busy_s": self.load_busy_s, "store_busy_s": self.store_busy_s,
                "load_wait_s": self.load_wait_s}


def cpu_tier_summary(links: Mapping[str, HostLink],
                     records: RequestRecords) -> CpuTierSummary | None:
    """The CPU tiers' figures (None: no engine had one)."""
    if not links:
        return None
    ordered = [links[name] for name in sorted(links)]
    return CpuTierSummary(
        hit_tokens=records.num_cpu_hit_tokens,
        cached_tokens=records.num_cached_tokens,
        prompt_tokens=records.num_admitted_prompt_tokens,
        loaded_bytes=sum(link.loaded_bytes for link in ordered),
        stored_bytes=sum(link.stored_bytes for link in ordered),
        num_loads=sum(link.num_loads for link in ordered),
        num_stores=sum(link.num_stores for link in ordered),
        load_busy_s=sum(link.load_busy_s for link in ordered),
        store_busy_s=sum(link.store_busy_s for link in ordered),
        load_wait_s=sum(link.load_wait_s for link in ordered),
    )


@dataclass(frozen=True, slots=True)
class InstanceSummary:
    name: str
    num_steps: int
    busy_s: float
    utilization: float | None
    kv_usage_mean: float | None
    kv_usage_peak: float
    usable_kv_blocks: int
    num_preemptions: int


@dataclass(frozen=True)
class RunSummary:
    """A run's figures. Latencies in seconds; ``*_s`` distributions over requests (ITL over
    every gap); the SLO verdict when the scenario has an SLO."""

    scenario: str
    seed: int
    model: str
    layout: str
    topology: str | None
    num_gpus: int
    engines: tuple[InstanceInfo, ...]
    num_requests: int
    num_finished: int
    num_rejected: int
    rejections: dict[str, int]
    window_s: float
    makespan_s: float
    throughput: Throughput
    """Over the measured window, first to last arrival."""
    over_makespan: Throughput
    """Over the makespan, first arrival to last finish: a layout that drains the same
    traffic sooner scores higher even when neither is saturated."""
    num_good: int | None
    """Requests finished within every limit of the SLO (None without an SLO)."""
    ttft_s: Distribution
    tpot_s: Distribution
    itl_s: Distribution
    e2e_s: Distribution
    num_preemptions: int
    num_preempted_requests: int
    instances: tuple[InstanceSummary, ...]
    handoff_s: Distribution | None = None
    handoff_bytes: int = 0
    slo: SloVerdict | None = None
    link_utilization: dict[str, float] = field(default_factory=dict)
    """The ten busiest links, busiest first."""
    num_transfers: int = 0
    faults: FaultSummary | None = None
    """Set when the scenario injects failures."""
    benchmark: BenchmarkSummary | None = None
    """Set for a ``benchmark`` workload: the run as ``vllm bench serve`` reports it."""
    prefix_cache: PrefixCacheSummary | None = None
    """Set when the workload's requests carry prefix-cache keys."""
    cpu_tier: CpuTierSummary | None = None
    """Set when the engines have a CPU tier below HBM (``engine.kv_offloading_size``)."""

    @property
    def gpus_by_type(self) -> dict[str, int]:
        counts: Counter[str] = Counter()
        for info in self.engines:
            counts[info.gpu] += info.num_gpus
        return dict(sorted(counts.items()))

    @property
    def output_tokens_per_s_per_gpu(self) -> float | None:
        rate = self.throughput.output_tokens_per_s
        return None if rate is None or not self.num_gpus else rate / self.num_gpus

    @property
    def good_requests_per_s(self) -> float | None:
        """Requests finished within every SLO limit per second over the makespan (None without
        an SLO or a makespan)."""
        if self.num_good is None or self.makespan_s <= 0:
            return None
        return self.num_good / self.makespan_s

    @property
    def tokens_per_s_per_user(self) -> float | None:
        """1 / mean TPOT: how fast one stream reads (aiconfigurator's and InferenceX's axis)."""
        mean = self.tpot_s.mean
        return None if not mean else 1.0 / mean

    def to_json(self) -> dict[str, Any]:
        """``summary.json``: plain JSON types, keys in a fixed order."""
        out: dict[str, Any] = {
            "scenario": self.scenario,
            "seed": self.seed,
            "model": self.model,
            "layout": self.layout,
            "topology": self.topology,
            "num_gpus": self.num_gpus,
            "engine": [_engine_json(info) for info in self.engines],
            "num_requests": self.num_requests,
            "num_finished": self.num_finished,
            "num_rejected": self.num_rejected,
            "rejections": self.rejections,
            "window_s": self.window_s,
            "makespan_s": self.makespan_s,
            "throughput": asdict(self.throughput),
            "over_makespan": {**asdict(self.over_makespan),
                              "good_requests_per_s": self.good_requests_per_s},
            "output_tokens_per_s_per_gpu": self.output_tokens_per_s_per_gpu,
            "tokens_per_s_per_user": self.tokens_per_s_per_user,
        }
        for key in ("ttft_s", "tpot_s", "itl_s", "e2e_s"):
            out[key] = getattr(self, key).to_json()
        out["num_preemptions"] = self.num_preemptions
        out["num_preempted_requests"] = self.num_preempted_requests
        if self.prefix_cache is not None:
            out["prefix_cache"] = self.prefix_cache.to_json()
        if self.cpu_tier is not None:
            out["cpu_tier"] = self.cpu_tier.to_json()
        if self.handoff_s is not None:
            out["handoff_s"] = self.handoff_s.to_json()
            out["handoff_bytes"] = self.handoff_bytes
        if self.slo is not None:
            out["slo"] = self.slo.to_json()
        out["instances"] = [asdict(i) for i in self.instances]
        if self.link_utilization:
            out["link_utilization"] = self.link_utilization
            out["num_transfers"] = self.num_transfers
        if self.faults is not None:
            out["faults"] = self.faults.to_json()
        if self.benchmark is not None:
            out["benchmark"] = self.benchmark.to_json()
        out["definitions"] = (DEFINITIONS
                              + (FAULT_DEFINITIONS if self.faults is not None else "")
                              + (PREFIX_CACHE_DEFINITIONS if self.prefix_cache is not None
                                 else "")
                              + (CPU_TIER_DEFINITIONS if self.cpu_tier is not None else ""))
        return out


def summarize_run(result: RunResult, records: RequestRecords | None = None) -> RunSummary:
    """The summary of a run, full or lean (``record_steps=False``): both give the same one.
    ``records``: the requests' records, when the run handed them over as it went (its
    ``requests`` then empty); else they are read from ``result.requests``."""
    scenario = result.scenario
    layout = scenario.layout
    busiest = sorted(result.link_utilization.items(), key=lambda kv: (-kv[1], kv[0]))
    if records is None:
        records = RequestRecords.of(result.requests, with_itl=_with_itl(scenario.slo))
    summary = summarize_records(
        records,
        result.steps,
        result.instances,
        scenario.slo,
        totals=result.step_totals or None,
        scenario=scenario.name,
        seed=scenario.seed,
        model=scenario.model,
        layout=layout.kind if layout is not None else "colocated",
        topology=topology_label(scenario.topology),
        link_utilization=dict(busiest[:10]),
        num_transfers=result.num_transfers,
        faults=result.faults,
        span_start_s=result.warmup_start_s,
    )
    if result.host_links:
        summary = replace(summary, cpu_tier=cpu_tier_summary(result.host_links, records))
    workload = scenario.workload
    if isinstance(workload, BenchmarkWorkload) and result.measured_start_s is not None:
        summary = replace(summary, benchmark=benchmark_summary(
            records, result.measured_start_s, workload))
    return summary


def _with_itl(slo: SLO | None) -> bool:
    """Only an ITL limit reads each request's p99 token gap."""
    return slo is not None and slo.itl_s is not None


def summarize(
    requests: list[Request],
    steps: list[StepRecord],
    engines: list[InstanceInfo],
    slo: SLO | None = None,
    **options: Any,
) -> RunSummary:
    """:func:`summarize_records` of ``requests``."""
    return summarize_records(RequestRecords.of(requests, with_itl=_with_itl(slo)), steps,
                             engines, slo, **options)


def summarize_records(
    records: RequestRecords,
    steps: list[StepRecord],
    engines: list[InstanceInfo],
    slo: SLO | None = None,
    *,
    totals: Mapping[str, StepTotals] | None = None,
    faults: FaultLog | None = None,
    span_start_s: float | None = None,
    **identity: Any,
) -> RunSummary:
    """The figures of a run's request records and engine trace; ``identity`` fills the
    scenario fields (name, seed, model, layout, topology, link utilization).

    The engine trace is read as per-instance :class:`StepTotals`: ``totals`` when the run
    accumulated them, else summed from ``steps`` (the same numbers either way). Token gaps
    are read from each request's kept token times or from its engine's step clock
    (``RequestRecords.gap_pieces``). ``faults``: the run's failures, when it had any.
    ``span_start_s``: when the engines' trace began, if before the first of the requests
    arrived (a benchmark's warm-ups): utilization and KV use are read from there."""
    from clustersim.engine.steplog import StepTotals

    if records.num_added != records.num_requests:
        raise ValueError(f"{records.num_requests - records.num_added} of "
                         f"{records.num_requests} requests were never recorded")
    table = records.table()
    finished = table.finished
    rejected = records.rejections

    first_arrival = float(table.arrival_s.min()) if len(table) else 0.0
    last_arrival = float(table.arrival_s.max()) if len(table) else 0.0
    last_finish = records.last_finish_s if records.last_finish_s is not None else 0.0
    if totals is None:
        totals = StepTotals.of_records(steps)
    end_s = last_finish
    for acc in totals.values():
        if acc.last_end_s is not None and acc.last_end_s > end_s:
            end_s = acc.last_end_s
    window = last_arrival - first_arrival
    if window <= 0:
        window = last_finish - first_arrival
    span = end_s - (first_arrival if span_start_s is None else min(span_start_s, first_arrival))

    def rate(amount: float, span_s: float = window) -> float | None:
        return amount / span_s if span_s > 0 else None

    handoffs = records.handoff_times()
    empty = StepTotals()
    return RunSummary(
        scenario=identity.get("scenario", ""),
        seed=identity.get("seed", 0),
        model=identity.get("model", ""),
        layout=identity.get("layout", "colocated"),
        topology=identity.get("topology"),
        num_gpus=sum(i.num_gpus for i in engines),
        engines=tuple(engines),
        num_requests=len(table),
        num_finished=int(finished.sum()),
        num_rejected=sum(rejected.values()),
        rejections=dict(sorted(rejected.items())),
        window_s=window,
        makespan_s=span,
        throughput=Throughput(
            requests_per_s=rate(int(finished.sum())),
            prompt_tokens_per_s=rate(int(table.prompt_tokens[finished].sum())),
            output_tokens_per_s=rate(int(table.output_tokens.sum())),
        ),
        over_makespan=Throughput(
            requests_per_s=rate(int(finished.sum()), span),
            prompt_tokens_per_s=rate(int(table.prompt_tokens[finished].sum()), span),
            output_tokens_per_s=rate(int(table.output_tokens.sum()), span),
        ),
        num_good=None if slo is None else int(good_mask(table, slo).sum()),
        ttft_s=Distribution.of(table.defined("ttft_s")),
        tpot_s=Distribution.of(table.defined("tpot_s")),
        itl_s=Distribution.of_chunks(records.gap_pieces()),
        e2e_s=Distribution.of(table.defined("e2e_s")),
        num_preemptions=records.num_preemptions,
        num_preempted_requests=records.num_preempted_requests,
        instances=tuple(
            _instance_summary(info.name, totals.get(info.name, empty), info.num_gpu_blocks - 1,
                              span)
            for info in engines
        ),
        handoff_s=Distribution.of(handoffs) if handoffs is not None else None,
        handoff_bytes=records.handoff_bytes,
        slo=slo_verdict(table, slo) if slo is not None else None,
        link_utilization=identity.get("link_utilization", {}),
        num_transfers=identity.get("num_transfers", 0),
        faults=None if faults is None else fault_summary(faults, table, slo),
        prefix_cache=(PrefixCacheSummary(records.num_cached_tokens,
                                         records.num_admitted_prompt_tokens)
                      if records.num_keyed else None),
    )


def fault_summary(log: FaultLog, table: RequestTable, slo: SLO | None) -> FaultSummary:
    """What a run's failures cost (see ``FAULT_DEFINITIONS``)."""
    impacts = tuple(_impact(t) for t in sorted(log.tallies.values(), key=lambda t: t.at_s))
    first = min((t.at_s for t in impacts), default=None)
    before = table.arrival_s < first if first is not None else np.ones(len(table), bool)
    num_before = int(before.sum())
    attainment_before = None
    if slo is not None and num_before:
        attainment_before = float(good_mask(table, slo)[before].sum()) / num_before
    after = None
    if slo is not None and first is not None and num_before < len(table):
        after = slo_verdict(table.where(~before), slo)
    retries = table.retries
    return FaultSummary(
        faults=impacts,
        num_lost=sum(t.num_lost for t in impacts),
        num_retried_requests=0 if retries is None else int((retries > 0).sum()),
        num_retries=0 if retries is None else int(retries.sum()),
        num_failed=sum(t.num_failed for t in impacts),
        num_kv_load_failures=sum(t.num_kv_load_failures for t in impacts),
        num_recomputed=sum(t.num_recomputed for t in impacts),
        num_rerouted=log.num_rerouted,
        warmups=_impact(log.warmups) if log.warmups.num_lost or log.warmups.num_kv_load_failures
        else None,
        first_fault_s=first,
        num_requests_before=num_before,
        attainment_before=attainment_before,
        after=after,
        timeline=slo_timeline(table, slo),
    )


def _impact(t: FaultTally) -> FaultImpact:
    return FaultImpact(t.label, t.at_s, t.repair_s, t.num_lost, t.num_retried, t.num_failed,
                       t.num_kv_load_failures, t.num_recomputed)


def _instance_summary(name: str, acc: StepTotals, usable_blocks: int,
                      span_s: float) -> InstanceSummary:
    return InstanceSummary(
        name=name,
        num_steps=acc.num_steps,
        busy_s=acc.busy_s,
        utilization=acc.busy_s / span_s if span_s > 0 else None,
        kv_usage_mean=acc.kv_block_s / (span_s * usable_blocks) if span_s > 0 else None,
        kv_usage_peak=acc.peak_kv_blocks / usable_blocks,
        usable_kv_blocks=usable_blocks,
        num_preemptions=acc.num_preemptions,
    )


def _engine_json(info: InstanceInfo) -> dict[str, Any]:
    """An engine's resolved configuration, ``pipeline_parallel_size`` only when it pipelines
    (a summary without pipeline parallelism reads as before)."""
    out = asdict(info)
    if out.get("pipeline_parallel_size") == 1:
        del out["pipeline_parallel_size"]
    if not out.get("cpu_kv_blocks"):  # (no CPU tier: as before there was one)
        for key in ("cpu_kv_blocks", "cpu_kv_gib", "host_link_gb_per_s"):
            out.pop(key, None)
    return out
