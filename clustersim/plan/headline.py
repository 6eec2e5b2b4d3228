"""The plan's answer in a few lines, the first thing the printout and the report say: what to
deploy and what chose it, what it serves, what it costs, whether it survives a loss, and the
best alternative with the split rule's verdict. Each line is made from the figures it states,
by the functions that state them in the detail below it. Pure functions over results.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from clustersim.plan import generations, story
from clustersim.plan.answer import LABELS, answer_parts, goodput_text, n_plus_one_sentence

if TYPE_CHECKING:
    from clustersim.plan.result import CandidateResult, PlanResult
    from clustersim.scenario import SLO


def slo_terms(slo: SLO) -> str:
    """The SLO in a few words: its limits, target and criterion."""
    limits = " and ".join(f"{LABELS[k]} <= {_limit(v)}" for k, v in slo.model_dump().items()
                          if k in LABELS and v is not None)
    return f"{limits} for {slo.attainment_target:.0%} of requests, {slo.criterion}"


def _limit(seconds: float) -> str:
    return f"{seconds * 1e3:,.0f} ms" if seconds < 1 else f"{seconds:g} s"


def _gpus(r: CandidateResult) -> str:
    by_type = r.candidate.gpus_by_type
    return " + ".join(f"{n} x {gpu}" for gpu, n in by_type.items())


def short_answer(result: PlanResult, slo: SLO) -> tuple[str, ...]:
    """Three to five lines; without a recommendation, why there is none (the answer's first
    sentences)."""
    rec = result.recommended
    if rec is None:
        return tuple(answer_parts(result, slo)[:1])
    lines = [f"Deploy {rec.candidate.label()} on {_gpus(rec)} GPUs, chosen as "
             f"{result.chosen_by}."]
    rate = rec.operating_rate_per_s
    serves = (f"It serves {rate:,.2f} req/s at its operating rate" if rate is not None
              else "It has no operating rate")
    lines.append(f"{serves} with {slo_terms(slo)}; goodput {goodput_text(rec)}.")
    lines.append(_cost(rec, result))
    if result.n_plus_one is not None:
        lines.append(n_plus_one_sentence(result.n_plus_one, "it"))
    else:
        lines.append("Losing an instance or a node was not checked (--no-n-plus-one).")
    alternative = _alternative(result)
    if alternative:
        lines.append(alternative)
    return tuple(lines)


def _cost(rec: CandidateResult, result: PlanResult) -> str:
    if rec.cost_per_hour is None:
        unpriced = [g for g in rec.candidate.gpus_by_type if g not in result.prices]
        return ("Its cost is not known" + (f": the plan has no price for {', '.join(unpriced)}"
                                           if unpriced else "") + ".")
    text = f"It costs ${rec.cost_per_hour:,.2f}/h"
    if rec.cost_per_million_output_tokens is not None:
        text += f", ${rec.cost_per_million_output_tokens:,.3f} per 1M output tokens at goodput"
    if result.generations is not None:
        text += f": {generations.brief(result.generations)}"
    return text + "."


def _alternative(result: PlanResult) -> str | None:
    """The best of another layout kind and the split rule's verdict; for a split with
    nothing to weigh it against, its handoff statistic."""
    ru, rule = result.runner_up, story.split_rule_brief(result)
    if ru is not None:
        text = (f"The {story.kind_name(ru.candidate.layout)} is {ru.candidate.label()}: "
                f"{goodput_text(ru)}")
        return f"{text}; {rule}." if rule else f"{text}."
    rec = result.recommended
    assert rec is not None
    handoff = story.handoff_sentence(rec, result.handoff_budget_s or 0.0)
    return None if handoff is None else f"{handoff[0].upper()}{handoff[1:]}."
