"""Colocated versus disaggregated on the same traffic and GPU count, and the keep-or-reject
rule for a split: keep it only if throughput rises, p95 latency does not get worse, and the KV
handoff stays within its budget. No single metric decides.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from clustersim.errors import ConfigError
from clustersim.metrics import RunSummary
from clustersim.plan.result import CandidateResult, SplitVerdict
from clustersim.plan.space import Candidate
from clustersim.scenario import Scenario
from clustersim.scenario.layout import LayoutSpec, PoolSpec, RouterSpec


@dataclass(frozen=True, slots=True)
class Verdict:
    keep_split: bool
    reasons: tuple[str, ...]


def split_verdict(
    colocated_throughput: float,
    split_throughput: float,
    colocated_p95_s: dict[str, float],
    split_p95_s: dict[str, float],
    handoff_p95_s: float,
    handoff_budget_s: float,
    unit: str = "",
) -> Verdict:
    """The keep-or-reject rule for a split: throughput must rise, no p95 may worsen, the
    handoff must fit its budget.
    ``unit`` names the throughput in the reasons (the planner compares goodput per GPU)."""
    reasons = []
    ok = True
    what = f"throughput ({unit})" if unit else "throughput"
    if split_throughput > colocated_throughput:
        reasons.append(f"{what} rises {colocated_throughput:,.2f} -> {split_throughput:,.2f}")
    else:
        ok = False
        reasons.append(
            f"{what} does not rise ({colocated_throughput:,.2f} -> {split_throughput:,.2f})"
        )
    for metric, before in colocated_p95_s.items():
        after = split_p95_s[metric]
        if after > before:
            ok = False
            reasons.append(f"p95 {metric} worsens {before * 1e3:,.1f} -> {after * 1e3:,.1f} ms")
        else:
            reasons.append(f"p95 {metric} holds {before * 1e3:,.1f} -> {after * 1e3:,.1f} ms")
    if handoff_p95_s <= handoff_budget_s:
        reasons.append(
            f"handoff p95 {handoff_p95_s * 1e3:,.1f} ms within budget "
            f"{handoff_budget_s * 1e3:,.1f} ms"
        )
    else:
        ok = False
        reasons.append(
            f"handoff p95 {handoff_p95_s * 1e3:,.1f} ms over budget "
            f"{handoff_budget_s * 1e3:,.1f} ms"
        )
    return Verdict(ok, tuple(reasons))


def counterparts(scenario: Scenario) -> tuple[Scenario, Scenario]:
    """(colocated, disaggregated) versions of the scenario with the same GPUs and traffic.

    From a disaggregated scenario, the colocated side runs the decode pool's GPU type and
    tensor parallelism on all of the split's GPUs with the scenario's top-level engine. From a
    colocated scenario, the split gives half of the instances (rounded down, at least one) to
    prefill and the rest to decode.
    """
    layout = scenario.layout
    if layout is None or layout.kind == "colocated":
        pools = layout.pools if layout is not None else [PoolSpec(name="main")]
        if len(pools) != 1:
            raise ConfigError("layout.pools", "compare needs a single colocated pool to split")
        pool = pools[0]
        if (pool.data_parallel_size or scenario.data_parallel_size) > 1:
            where = ("layout.pools[0].data_parallel_size" if pool.data_parallel_size
                     else "data_parallel_size")
            raise ConfigError(
                where,
                "compare splits instances into prefill and decode pools, which are modelled "
                "without data parallelism; compare with data_parallel_size 1 and instances: N",
            )
        if pool.instances < 2:
            raise ConfigError(
                "layout.pools[0].instances",
                "compare needs at least 2 colocated instances to split into prefill and decode",
            )
        num_prefill = max(1, pool.instances // 2)
        split = LayoutSpec(
            kind="disaggregated",
            pools=[
                pool.model_copy(update={"name": "prefill", "role": "prefill",
                                        "instances": num_prefill}),
                pool.model_copy(update={"name": "decode", "role": "decode",
                                        "instances": pool.instances - num_prefill}),
            ],
            router=layout.router if layout is not None else RouterSpec(),
        )
        colocated = scenario
        disaggregated = scenario.model_copy(update={"layout": split})
        return colocated, disaggregated
    if layout.kind != "disaggregated":
        raise ConfigError(
            "layout.kind", f"compare takes colocated or disaggregated, not {layout.kind}"
        )
    decode = layout.pools_with_role("decode")[0]
    tp = decode.tensor_parallel_size or scenario.tensor_parallel_size
    gpus = sum(
        p.instances * (p.tensor_parallel_size or scenario.tensor_parallel_size)
        for p in layout.pools
    )
    colocated_layout = LayoutSpec(
        kind="colocated",
        pools=[PoolSpec(name="colocated", gpu=decode.gpu, tensor_parallel_size=tp,
                        instances=max(1, gpus // tp))],
        router=layout.router,
    )
    return scenario.model_copy(update={"layout": colocated_layout}), scenario


def throughput(summary: RunSummary) -> float:
    """Requests meeting the SLO per second when the scenario has one, else finished req/s.

    Both over first arrival to last finish, so a layout that drains the same traffic sooner
    scores higher even when neither is saturated.
    """
    span = summary.makespan_s
    if not span:
        return 0.0
    if summary.slo is not None:
        return (summary.slo.attainment or 0.0) * summary.num_requests / span
    return summary.num_finished / span


def common_rate_verdict(
    recommended: CandidateResult, runner_up: CandidateResult | None, handoff_budget_s: float,
    job: Callable[[Candidate, int, float], Scenario],
    run: Callable[[str, list[Scenario]], list[RunSummary | str]],
) -> SplitVerdict | None:
    """The keep-or-reject rule between the best split and the best colocated layout of a plan,
    both run at the lowest goodput any seed of either found (the same offered traffic, which
    both carry within the SLO); None unless one of the two is each."""
    if runner_up is None:
        return None
    pair = {recommended.candidate.layout: recommended, runner_up.candidate.layout: runner_up}
    colocated, split = pair.get("colocated"), pair.get("disaggregated")
    if colocated is None or split is None:
        return None
    assert colocated.goodput is not None and split.goodput is not None
    rate = min(*colocated.goodput.per_seed_per_s, *split.goodput.per_seed_per_s)
    outcomes = run("keep-or-reject rule: both at a common rate",
                   [job(colocated.candidate, 0, rate), job(split.candidate, 0, rate)])
    if any(isinstance(o, str) for o in outcomes):
        return None
    co, sp = outcomes
    assert not isinstance(co, str) and not isinstance(sp, str)
    handoff = (sp.handoff_s.p95 if sp.handoff_s is not None else None) or 0.0
    v = split_verdict(
        colocated.goodput_per_gpu or 0.0, split.goodput_per_gpu or 0.0,
        {m: getattr(co, m).p95 or 0.0 for m in ("ttft_s", "tpot_s")},
        {m: getattr(sp, m).p95 or 0.0 for m in ("ttft_s", "tpot_s")},
        handoff, handoff_budget_s, unit="goodput req/s per GPU")
    return SplitVerdict(v.keep_split, v.reasons, rate)
