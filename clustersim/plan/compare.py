"""The keep-or-reject rule for a split, between a colocated and a disaggregated run on the same
traffic and GPUs (``plan.counterparts`` builds the two): keep it only if throughput rises, p95
latency does not get worse, and the KV handoff stays within its budget. No single metric
decides.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from clustersim.metrics import RunSummary
from clustersim.plan.result import CandidateResult, SplitVerdict
from clustersim.plan.space import Candidate
from clustersim.scenario import Scenario


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


THROUGHPUT_UNIT = "good req/s over the makespan"
"""What :func:`throughput` counts, as the table and the verdict name it."""
THROUGHPUT_UNIT_NO_SLO = "req/s over the makespan"


def throughput(summary: RunSummary) -> float:
    """The rule's throughput: requests finished within the SLO per second when the scenario
    has one, else finished requests per second; both over the makespan (first arrival to last
    finish), so a layout that drains the same traffic sooner scores higher even when neither
    is saturated. summary.json's ``over_makespan``."""
    rate = (summary.good_requests_per_s if summary.slo is not None
            else summary.over_makespan.requests_per_s)
    return rate or 0.0


def throughput_unit(summary: RunSummary) -> str:
    """How the table and the verdict name :func:`throughput` for this run."""
    return THROUGHPUT_UNIT if summary.slo is not None else THROUGHPUT_UNIT_NO_SLO


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
