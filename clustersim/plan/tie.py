"""When two measured figures are a statistical tie, and the rule that breaks one.

One rule for every ranking a plan makes (its candidates by the objective, the GPU generations
by cost per token): the better one is tied with another when it wins by no more than the
plan's tolerance, or when its margin, draw by draw, cannot be told from none. Seed k is the
same traffic draw for every candidate, so draws compare in pairs (the 95 % t-interval of the
per-draw differences holds zero); figures on different numbers of draws compare their
intervals. Pure functions over goodputs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from clustersim.plan.bisect import mean_interval

if TYPE_CHECKING:
    from clustersim.plan.result import Goodput

TIE_RULE = ("a tie goes to the layout with fewer pools (fewer failure domains: colocated "
            "before a split), then the cheaper per hour, then the fewer GPUs, then the higher "
            "mean goodput")


def tie_reason(best: Goodput, best_scale: float, other: Goodput, other_scale: float,
               tolerance: float) -> str | None:
    """Why ``best`` is statistically tied with ``other``, or None. Each goodput is read times
    its scale (1 / GPUs for goodput per GPU; output tokens per dollar per req/s for cost per
    token; 1 for goodput itself): the larger product is the better. A capped goodput (a
    bound, not a measurement) ties nothing."""
    if best.capped or other.capped:
        return None
    sa, sb = best_scale, other_scale
    if best.mean_per_s * sa <= other.mean_per_s * sb * (1 + tolerance):
        return f"a gain under the {tolerance:.0%} tolerance"
    a, b = best.per_seed_per_s, other.per_seed_per_s
    if len(a) == len(b) > 1:
        diffs = [x * sa - y * sb for x, y in zip(a, b, strict=True)]
        _, low, _ = mean_interval(diffs, clip=False)
        return "per-draw differences that cannot be told from zero at 95 %" if low <= 0 else None
    return ("overlapping 95 % intervals" if best.low_per_s * sa <= other.high_per_s * sb
            else None)
