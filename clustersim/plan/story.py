"""One story for every consumer of a plan: which candidate is the plan's best of each layout
kind, what chose the recommendation, and the split rule's verdict in one sentence.

The planner picks the best of each kind once (:func:`best_of_each_kind`) and stores the ids in
``PlanResult.best``; the printout, ``plan.json``, the report's text and its figures read them
from there and name them with :func:`kind_name`, so no two of them can name a different
"best colocated". Pure functions over results.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from clustersim.plan.change import threshold_text
from clustersim.plan.compare import handoff_text

if TYPE_CHECKING:
    from clustersim.plan.result import CandidateResult, PlanResult

KIND_NAMES = {"colocated": "best colocated", "disaggregated": "best split",
              "three_pool": "best three-pool"}
"""How the printout, the report and its figures name the plan's best of each layout kind."""


def kind_name(layout: str) -> str:
    return KIND_NAMES.get(layout, f"best {layout}")


def best_of_each_kind(recommended: CandidateResult, ranked: Iterable[CandidateResult],
                      simulated: Iterable[CandidateResult],
                      closest: Callable[[list[CandidateResult]], CandidateResult | None]
                      ) -> dict[str, str]:
    """The plan's pick of each layout kind, by the one ranking that chose the recommendation:
    the recommendation for its own kind; for another kind its first candidate in ``ranked``
    (those that meet the objective's requirement, by the objective, a tie at the top broken);
    for a kind none of whose candidates meets it, ``closest`` of them (the best by the
    objective's key). Kinds in the order first seen."""
    picks = {recommended.candidate.layout: recommended.id}
    for r in ranked:
        picks.setdefault(r.candidate.layout, r.id)
    simulated = list(simulated)
    for layout in dict.fromkeys(r.candidate.layout for r in simulated):
        if layout not in picks:
            pick = closest([r for r in simulated if r.candidate.layout == layout])
            if pick is not None:
                picks[layout] = pick.id
    return picks


def role(result: PlanResult, candidate_id: str) -> str | None:
    """What the answer calls a candidate: the recommendation, the best of its kind, another
    GPU generation's best layout (``plan.gpus``), or None."""
    if result.recommended is not None and result.recommended.id == candidate_id:
        return "recommendation"
    for layout, cid in result.best.items():
        if cid == candidate_id:
            return kind_name(layout)
    if result.generations is not None:
        for g in result.generations.entries:
            if g.best is not None and g.best.id == candidate_id:
                return f"best of {g.gpu}"
    return None


def chosen_by(result: PlanResult) -> str:
    """What chose the recommendation, in words: the objective, then a tie rule or the
    plan's survival requirement where they decided; across GPU generations, first the
    generation's cost per token."""
    rec = result.recommended
    if rec is None:
        return ""
    reserve = f" less the {result.headroom:.0%} headroom" if result.headroom else ""
    target = result.target_rate_per_s
    if result.objective == "min_gpus":
        text = (f"the fewest GPUs whose lowest traffic draw{reserve} carries the target "
                f"{target:g} req/s within the SLO")
    elif result.objective == "min_cost":
        text = (f"the lowest cost per hour whose lowest traffic draw{reserve} carries the "
                f"target {target:g} req/s within the SLO")
    else:
        text = "the most goodput per GPU within the SLO"
    tie = result.tie
    if tie is not None and tie.chose(rec):
        text += (", from a statistical tie broken by the tie rule, which prefers fewer pools, "
                 "then the cheaper per hour, then fewer GPUs")
    sv = result.survival
    if sv is not None and sv.met:
        loss = ("one instance" if sv.requirement == "n_plus_one_instance"
                else "one instance or one node")
        text += (f", the best by that order that keeps its SLO with {loss} lost (plan.require)"
                 if sv.unconstrained != rec.id else f", and it keeps its SLO with {loss} lost")
    gens = result.generations
    if gens is not None and gens.winner is not None:
        tie = "; a statistical tie broken by the tie rule" if gens.tied else ""
        text = (f"the generation whose best layout costs least per 1M output tokens at goodput "
                f"(of {', '.join(gens.gpus)}{tie}), and within {gens.winner} as {text}")
    return text


def verdict_word(keep_split: bool) -> str:
    return "keep the split" if keep_split else "stay colocated"


def split_rule_sentence(result: PlanResult) -> str | None:
    """The keep-or-reject rule between the plan's best colocated layout and its best split:
    who, at which rates, the verdict, the thresholds, and whether the recommendation agrees."""
    v = result.split_verdict
    if v is None:
        return None
    colocated, split = result.by_id(v.colocated), result.by_id(v.split)
    text = (f"The keep-or-reject rule for a split, between the best colocated "
            f"({colocated.candidate.label()}) and the best split ({split.candidate.label()}): "
            f"{verdict_word(v.keep_split)}. It keeps a split only if goodput per GPU rises, "
            f"no p95 latency worsens (both run at {v.rate_per_s:,.2f} req/s, the lower "
            "operating rate) and the KV handoff p95 at the split's operating rate fits its "
            f"budget; {threshold_text(v.within)}.")
    rec = result.recommended
    if rec is None:
        return text
    layout = rec.candidate.layout
    if layout not in ("colocated", "disaggregated"):
        return text + (f" The recommendation is {layout}, neither side of this comparison; "
                       f"it was chosen as {result.chosen_by}.")
    if v.keep_split == (layout == "disaggregated"):
        return text + (f" The recommendation is {layout} and agrees; it was chosen as "
                       f"{result.chosen_by}.")
    return text + (f" The recommendation is {layout} and overrules it: it was chosen as "
                   f"{result.chosen_by}, and the rule weighs p95 latency and the handoff on "
                   "their own.")


def split_rule_brief(result: PlanResult) -> str | None:
    """The rule's verdict and what decided it, for the short answer."""
    v = result.split_verdict
    if v is None:
        return None
    return (f"the split rule says {verdict_word(v.keep_split)} ("
            + "; ".join(v.against or v.reasons) + ")")


def handoff_sentence(r: CandidateResult, budget_s: float) -> str | None:
    """A split's handoff statistic, where the answer states it."""
    if r.at_operating is None or r.at_operating.handoff_s is None:
        return None
    return handoff_text(r.handoff_p95_s, budget_s, r.operating_rate_per_s)
