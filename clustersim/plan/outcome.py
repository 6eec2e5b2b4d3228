"""How a plan ends: with a recommendation, or without one and why, in a few lines.

::

    recommended   a candidate meets the SLO and the plan's target and requirements
    no_runnable   no candidate can run at all: every one was pruned (it does not fit the GPU's
                  memory, its TP spans servers, it is over the budget) or failed to simulate
    no_feasible   some can run, none is good enough: each fails the SLO even at a trickle of
                  traffic, falls short of target_rate_per_s, or loses its SLO with an
                  instance or a node lost where plan.require asks it to survive that

``clustersim plan`` exits with a code of its own for each of the last two (the plan, its
ledger and its report are written all the same) and prints the headline and the reasons on
stderr.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from clustersim.plan.result import CandidateResult, PlanResult

MAX_REASONS = 8
"""Most reason lines printed; the rest are counted (ledger.csv holds every candidate's)."""

_FIGURE = re.compile(r"-?\d+(?:[.,]\d+)*")


@dataclass(frozen=True)
class Outcome:
    kind: Literal["recommended", "no_runnable", "no_feasible"]
    headline: str = ""
    """Why there is no recommendation, in one sentence (empty when there is one)."""
    reasons: tuple[str, ...] = ()
    """One line per group of candidates that failed alike, most common first."""


def outcome_of(result: PlanResult) -> Outcome:
    """The plan's :class:`Outcome`. Reads the whole ledger only when nothing was measured."""
    if result.recommended is not None:
        return Outcome("recommended")
    measured = result.measured
    gens = result.generations
    if gens is not None and measured:
        return Outcome("no_feasible", "no GPU generation can be named the cheapest that meets "
                       "the SLO and the plan's target:",
                       tuple(f"{e.gpu}: {e.shortfall}" for e in gens.entries))
    if not measured:
        total = len(result.candidates)
        if total == 0:
            return Outcome("no_runnable", "no candidate can run: the plan's choices make none")
        reasons, pruned = _grouped(r for r in result.candidates if r.status == "pruned")
        which = ("the only one was" if total == 1 else f"all {total:,} were" if pruned == total
                 else f"{pruned:,} of the {total:,} were")
        return Outcome("no_runnable", f"no candidate can run: {which} pruned (each one's "
                       "reason is in ledger.csv):", reasons)
    if result.survival is not None and not result.survival.met:
        return _no_survivor(result)
    if result.target_rate_per_s is not None and any(
            r.goodput is not None and r.goodput.lower_per_s > 0 for r in measured):
        return Outcome("no_feasible", f"no candidate reaches the target "
                       f"{result.target_rate_per_s:g} req/s within the SLO on every traffic "
                       "draw:", _limited([_short_of_target(r, result) for r in measured]))
    return Outcome("no_feasible", "no candidate meets the SLO on every traffic draw, even at "
                   "a trickle of traffic:", _grouped(measured)[0])


def _no_survivor(result: PlanResult) -> Outcome:
    """plan.require: the candidates checked, best first, none of which survived."""
    sv = result.survival
    assert sv is not None
    loss = ("an instance" if sv.requirement == "n_plus_one_instance"
            else "an instance or a node")
    lines = []
    for n1 in sv.failed:
        lost = [c.lost for c in (n1.instance, n1.node) if c is not None and not c.holds]
        lines.append(f"{result.by_id(n1.candidate).candidate.label()} at "
                     f"{n1.rate_per_s:,.2f} req/s: loses its SLO with "
                     f"{' or '.join(lost) or 'a loss that could not be simulated'} lost")
    lines += [f"repaired with {r.added}: {r.detail}" for r in sv.repairs]
    return Outcome("no_feasible", f"no candidate keeps its SLO with {loss} lost "
                   f"(plan.require: {sv.requirement}); {sv.num_checked or len(sv.failed)} "
                   "checked, best first:", _limited(lines))


def _short_of_target(r: CandidateResult, result: PlanResult) -> str:
    g = r.goodput
    assert g is not None and result.target_rate_per_s is not None
    label = r.candidate.label()
    if g.lower_per_s <= 0:
        return f"{label}: {r.reason or 'a traffic draw meets the SLO at no rate'}"
    if g.short_window_s is not None:
        return (f"{label}: at most {g.mean_per_s:,.2f} req/s, an upper bound (the traffic at "
                f"that rate spans {g.short_window_s:,.2f} s, too short to judge the SLO)")
    usable = g.lower_per_s * (1 - result.headroom)
    reserve = f" less the {result.headroom:.0%} headroom" if result.headroom else ""
    short = 1 - usable / result.target_rate_per_s
    return (f"{label}: its lowest traffic draw{reserve} carries {usable:,.2f} req/s, "
            f"{short:.0%} short of {result.target_rate_per_s:g}")


def _grouped(rows: Iterable[CandidateResult]) -> tuple[tuple[str, ...], int]:
    """One line per kind of reason (the same words, whatever the figures in them): how many
    candidates gave it, the first of them and its reason in full; and how many rows there
    were. Holds one row per kind: a plan's ledger can hold a million."""
    groups: dict[str, tuple[int, CandidateResult]] = {}
    num_rows = 0
    for r in rows:
        num_rows += 1
        key = _kind_of_reason(_why_not(r))
        count, first = groups.get(key, (0, r))
        groups[key] = (count + 1, first)
    lines = []
    for count, first in sorted(groups.values(), key=lambda g: -g[0]):  # (stable: ledger order)
        who = (first.candidate.label() if count == 1
               else f"{count:,} candidates ({first.candidate.label()}, ...)")
        lines.append(f"{who}: {_why_not(first)}")
    return _limited(lines), num_rows


def _kind_of_reason(reason: str) -> str:
    """The reason with its figures masked, but for what precedes its first ": ", which names
    the pool that fails where there is one (``rtx4090 TP2: ... does not fit ...``): TP1 and
    TP2 stay apart, the activations each step budget needs do not."""
    head, colon, rest = reason.partition(": ")
    return head + colon + _FIGURE.sub("#", rest) if colon else _FIGURE.sub("#", reason)


def _why_not(r: CandidateResult) -> str:
    g = r.goodput
    if r.reason:
        return r.reason
    if g is not None and g.lower_per_s <= 0:
        draws = ", ".join(f"{x:,.2f}" for x in g.per_seed_per_s)
        return f"one of its traffic draws meets the SLO at no rate (goodput per draw: {draws})"
    return "no reason recorded"


def _limited(lines: list[str]) -> tuple[str, ...]:
    if len(lines) <= MAX_REASONS:
        return tuple(lines)
    return (*lines[:MAX_REASONS - 1], f"... and {len(lines) - MAX_REASONS + 1:,} more: see "
            "ledger.csv")
