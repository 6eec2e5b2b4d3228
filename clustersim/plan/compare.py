"""The keep-or-reject rule for a split, between a colocated and a disaggregated run on the same
traffic and GPUs (``plan.counterparts`` builds the two): keep it only if throughput rises, p95
latency does not get worse, and the KV handoff stays within its budget. No single metric
decides.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from clustersim.metrics import RunSummary
from clustersim.plan.change import HOLDS_WITHIN, Change
from clustersim.plan.result import CandidateResult, SplitVerdict
from clustersim.plan.space import Candidate
from clustersim.scenario import Scenario


@dataclass(frozen=True, slots=True)
class Verdict:
    keep_split: bool
    reasons: tuple[str, ...]
    against: tuple[str, ...] = ()
    """The reasons that reject the split (empty when it is kept)."""


METRIC_NAMES = {"ttft_s": "TTFT", "tpot_s": "TPOT", "itl_s": "ITL", "e2e_s": "E2E latency"}


def split_verdict(
    colocated_throughput: float,
    split_throughput: float,
    colocated_p95_s: dict[str, float],
    split_p95_s: dict[str, float],
    handoff_p95_s: float | None,
    handoff_budget_s: float,
    unit: str = "",
    within: float = HOLDS_WITHIN,
    handoff_rate_per_s: float | None = None,
) -> Verdict:
    """The keep-or-reject rule for a split: throughput must rise, no p95 may worsen, the
    handoff must fit its budget. A change of ``within`` (a share) or less holds
    (:class:`~clustersim.plan.change.Change`): throughput that holds does not rise, a p95 that
    holds does not worsen. ``unit`` names the throughput in the reasons (the planner compares
    goodput per GPU); ``handoff_rate_per_s``: the split's operating rate, where the planner
    reads the handoff p95."""
    reasons, against = [], []
    moved = Change(colocated_throughput, split_throughput, within)
    reasons.append(moved.text(f"throughput ({unit})" if unit else "throughput"))
    if moved.word != "rises":
        against.append(reasons[-1])
    for metric, before in colocated_p95_s.items():
        change = Change(before * 1e3, split_p95_s[metric] * 1e3, within)
        reasons.append(change.text(f"p95 {METRIC_NAMES.get(metric, metric)}", "{:,.1f}", "ms"))
        if change.word == "rises":
            reasons[-1] += ": worsens"
            against.append(reasons[-1])
    reasons.append(handoff_text(handoff_p95_s, handoff_budget_s, handoff_rate_per_s))
    if handoff_p95_s is not None and handoff_p95_s > handoff_budget_s:
        against.append(reasons[-1])
    return Verdict(not against, tuple(reasons), tuple(against))


def handoff_text(p95_s: float | None, budget_s: float, rate_per_s: float | None = None) -> str:
    """The KV handoff statistic against its budget, in the one wording every consumer prints;
    ``rate_per_s``: the split's operating rate, where the plan reads it."""
    where = "" if rate_per_s is None else f" at its operating rate, {rate_per_s:,.2f} req/s"
    if p95_s is None:
        return f"KV handoff p95{where}: no handoff measured (budget {budget_s * 1e3:,.1f} ms)"
    verdict = "within" if p95_s <= budget_s else "over"
    return (f"KV handoff p95 {p95_s * 1e3:,.1f} ms{where}, {verdict} its "
            f"{budget_s * 1e3:,.1f} ms budget")


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
    colocated: CandidateResult | None, split: CandidateResult | None, handoff_budget_s: float,
    within: float, job: Callable[[Candidate, int, float], Scenario],
    run: Callable[[str, list[Scenario]], list[RunSummary | str]],
) -> SplitVerdict | None:
    """The keep-or-reject rule between the plan's best colocated layout and its best split
    (None unless it has both): goodput per GPU from the plan; p95 TTFT and TPOT with both run
    at the lower of their operating rates (the same offered traffic, the first seed's, which
    both carry within the SLO); the KV handoff p95 of the split's own run at its operating rate
    (``at_operating``), against the budget."""
    if colocated is None or split is None:
        return None
    assert colocated.operating_rate_per_s is not None and split.operating_rate_per_s is not None
    rate = min(colocated.operating_rate_per_s, split.operating_rate_per_s)
    outcomes = run("keep-or-reject rule: both at a common rate",
                   [job(colocated.candidate, 0, rate), job(split.candidate, 0, rate)])
    if any(isinstance(o, str) for o in outcomes):
        return None
    co, sp = outcomes
    assert not isinstance(co, str) and not isinstance(sp, str)
    handoff = split.handoff_p95_s
    v = split_verdict(
        colocated.goodput_per_gpu or 0.0, split.goodput_per_gpu or 0.0,
        {m: getattr(co, m).p95 or 0.0 for m in ("ttft_s", "tpot_s")},
        {m: getattr(sp, m).p95 or 0.0 for m in ("ttft_s", "tpot_s")},
        handoff, handoff_budget_s,
        unit="goodput req/s per GPU", within=within,
        handoff_rate_per_s=split.operating_rate_per_s)
    return SplitVerdict(v.keep_split, v.reasons, rate, against=v.against,
                        colocated=colocated.id, split=split.id,
                        handoff_p95_s=handoff, handoff_budget_s=handoff_budget_s,
                        handoff_rate_per_s=split.operating_rate_per_s, within=within)
