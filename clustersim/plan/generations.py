"""GPU generations side by side (``plan.gpus``): each generation's best layout, its cost per
1M output tokens, and the cheapest that meets the target.

    plan.gpus [h100-sxm, h200, b200]
        -> one plan per generation, every pool on that GPU (clustersim.plan.run)
        -> each generation's best layout: its plan's recommendation
        -> its $ per 1M output tokens at goodput, the interval its goodput's draws give
        -> the cheapest of those that meet the target, a statistical tie broken by the tie
           rule (clustersim.plan.tie: the same rule and tolerance as within a plan)

Within one generation every layout pays the same price per GPU, so its best layout does not
move with the price: :func:`compare` reprices a comparison without simulating again. Pure
functions over plan results.
"""

from __future__ import annotations

import math

from clustersim.plan.change import Change
from clustersim.plan.result import Generation, Generations, PlanResult
from clustersim.plan.tie import TIE_RULE, tie_reason

UNPRICED = ("unpriced: no rental price in the catalog's prices.yaml or the scenario's "
            "plan.prices_usd_per_gpu_hour, so its cost per token is not known")


def shortfall(gpu: str, result: PlanResult, price: float | None, headline: str) -> str | None:
    """Why a generation's plan cannot be named: no recommendation (``headline``: the plan's
    own reason), no price, no output to price, or a best layout short of the target (a
    max_goodput_per_gpu plan recommends one all the same; the others require it)."""
    rec = result.recommended
    if rec is None:
        return headline or "no layout meets the SLO"
    if price is None:
        return UNPRICED
    g = rec.goodput
    if rec.at_goodput is None or not rec.at_goodput.throughput.output_tokens_per_s:
        return "its run at goodput produced no output tokens to price"
    target = result.target_rate_per_s
    if target is not None and g is not None:
        usable = g.lower_per_s * (1 - result.headroom)
        if g.short_window_s is not None:
            return (f"its goodput is an upper bound (a window too short to judge), which "
                    f"cannot show that it carries the target {target:g} req/s")
        if usable < target:
            return (f"its best, {rec.candidate.label()}, carries {usable:,.2f} req/s on its "
                    f"lowest draw, short of the target {target:g} req/s")
    return None


def compare(entries: list[Generation], objective: str, tolerance: float) -> Generations:
    """Name the cheapest eligible generation per 1M output tokens. The cheapest is tied with
    another when it is cheaper by no more than ``tolerance`` or its saving, draw by draw,
    cannot be told from none (:func:`clustersim.plan.tie.tie_reason` on output tokens per
    dollar); the tie rule chooses among the tied."""
    order = {g.gpu: i for i, g in enumerate(entries)}
    ranked = sorted((g for g in entries if g.eligible),
                    key=lambda g: (g.cost_per_million_output_tokens, order[g.gpu]))
    if not ranked:
        return Generations(tuple(entries), None, tolerance=tolerance, objective=objective)
    top = ranked[0]
    assert top.best is not None and top.best.goodput is not None
    why: dict[str, str] = {}
    for g in ranked[1:]:
        assert g.best is not None and g.best.goodput is not None
        reason = tie_reason(top.best.goodput, top.tokens_per_dollar or 0.0,
                            g.best.goodput, g.tokens_per_dollar or 0.0, tolerance)
        if reason is not None:
            why[g.gpu] = reason
    group = [top, *(g for g in ranked[1:] if g.gpu in why)]

    def rule(g: Generation) -> tuple:
        r = g.best
        assert r is not None and r.goodput is not None
        per = r.goodput.mean_per_s / (r.candidate.num_gpus
                                      if objective == "max_goodput_per_gpu" else 1)
        return (len(r.candidate.pools), g.cost_per_hour, r.candidate.num_gpus, -per,
                order[g.gpu])

    chosen = min(group, key=rule)
    tied = (chosen.gpu, *(g.gpu for g in group if g is not chosen)) if len(group) > 1 else ()
    return Generations(tuple(entries), chosen.gpu, top.gpu, tied,
                       tuple(dict.fromkeys(why.values())), tolerance,
                       tuple(g.gpu for g in ranked), objective, TIE_RULE if tied else "")


def dollars(value: float | None) -> str:
    return "-" if value is None else f"${value:,.3f}"


def cost_text(g: Generation) -> str:
    """``$0.051 (95% CI 0.049-0.054)`` per 1M output tokens, 'at most' where the goodput is a
    bound from below."""
    cost = g.cost_per_million_output_tokens
    if cost is None:
        return "-"
    goodput = None if g.best is None else g.best.goodput
    if goodput is not None and goodput.capped:
        return f"at most {dollars(cost)}"
    ci = g.cost_interval()
    if ci is None:
        return dollars(cost)
    high = "inf" if math.isinf(ci[1]) else f"{ci[1]:,.3f}"
    return f"{dollars(cost)} (95% CI {ci[0]:,.3f}-{high})"


def against(g: Generation, winner: Generation, tolerance: float) -> str:
    """How a generation's cost per token compares with the winner's: its percentage, or
    within the tolerance (:class:`clustersim.plan.change.Change`'s threshold)."""
    mine, theirs = g.cost_per_million_output_tokens, winner.cost_per_million_output_tokens
    if mine is None or theirs is None:
        return "-"
    change = Change(theirs, mine, tolerance)
    if change.word == "holds":
        return f"{change.percent()}, within the {tolerance:.0%} tolerance"
    return change.percent()


def verdict(g: Generations, gpu: str) -> str:
    """A generation's place in the comparison, in a few words."""
    entry = g.entry(gpu)
    if gpu == g.winner:
        return "recommended" + (", won a tie" if g.tied else "")
    if not entry.eligible:
        return "unpriced" if entry.shortfall == UNPRICED else "does not qualify"
    if gpu in g.tied:
        return "tied, lost to the tie rule"
    return "dearer per token"


def sentence(g: Generations) -> str:
    """The comparison in a sentence or two: the winner's cost against each other generation's,
    the tie and its rule, and why the others could not be named."""
    if g.winner is None:
        return ("No generation can be named the cheapest: "
                + "; ".join(f"{e.gpu}: {e.shortfall}" for e in g.entries) + ".")
    win = g.entry(g.winner)
    assert win.best is not None
    others = [e for e in g.entries if e.gpu != g.winner and e.eligible]
    text = (f"Of the generations {', '.join(g.gpus)}, {g.winner}'s best layout "
            f"({win.best.candidate.label()}) costs {cost_text(win)} per 1M output tokens at "
            "goodput")
    if others:
        text += (", against " + "; ".join(
            f"{e.gpu}'s {dollars(e.cost_per_million_output_tokens)} "
            f"({against(e, win, g.tolerance)})" for e in others))
    text += "."
    if g.tied:
        text += (f" It is a statistical tie with {', '.join(g.tied[1:])} ("
                 + " or ".join(g.tie_reasons) + f"); {g.rule}")
        if g.by_cost != g.winner:
            text += f"; the cost per token alone would pick {g.by_cost}"
        text += "."
    hourly = per_hour_note(g)
    if hourly:
        text += " " + hourly
    rest = [e for e in g.entries if not e.eligible]
    if rest:
        text += " " + "; ".join(f"{e.gpu}: {e.shortfall}" for e in rest) + "."
    return text


def per_hour_note(g: Generations) -> str | None:
    """Where every generation's best is sized to the target (min_gpus, min_cost) and another
    carries it for fewer dollars an hour than the winner, that generation and why it is not
    named: a token at goodput counts the capacity beyond the target as served."""
    if g.winner is None or g.objective == "max_goodput_per_gpu":
        return None
    win = g.entry(g.winner)
    cheaper = min((e for e in g.entries if e.eligible), key=lambda e: (e.cost_per_hour or 0.0))
    if cheaper.gpu == g.winner or (cheaper.cost_per_hour or 0.0) >= (win.cost_per_hour or 0.0):
        return None
    return (f"At the target rate, which each generation's best carries, {cheaper.gpu}'s costs "
            f"less an hour (${cheaper.cost_per_hour:,.2f}/h against "
            f"${win.cost_per_hour:,.2f}/h): the cost per token at goodput counts each "
            "deployment's capacity beyond the target as served.")


def brief(g: Generations) -> str:
    """For the short answer's cost line: the others' percentages and who is not ranked."""
    if g.winner is None:
        return ""
    win = g.entry(g.winner)
    parts = [f"{e.gpu} {against(e, win, g.tolerance)}" for e in g.entries
             if e.gpu != g.winner and e.eligible]
    parts += [f"{e.gpu} {'unpriced' if e.shortfall == UNPRICED else 'does not qualify'}"
              for e in g.entries if not e.eligible]
    head = ("the least of the generations compared" if not g.tied
            else "tied for the least of the generations compared, chosen by the tie rule")
    return head + (f" ({'; '.join(parts)})" if parts else "")
