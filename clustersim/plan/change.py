"""How a figure moved between two layouts, in words decided by one stated threshold.

A relative change no larger than ``within`` (the plan's tolerance: the precision its goodputs
are measured to) *holds*; a larger one *rises* or *falls*, with its percentage. Every sentence
that says a figure holds, rises or falls reads it from here, so "holds" never describes a 36 %
change.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

HOLDS_WITHIN = 0.02
"""The relative change that still holds where no plan states its own tolerance (``clustersim
compare``): the plan's default bisection tolerance (``plan.search.tolerance``)."""


@dataclass(frozen=True, slots=True)
class Change:
    """``before -> after``, judged against ``within`` (a share: 0.02 is 2 %)."""

    before: float
    after: float
    within: float = HOLDS_WITHIN

    @property
    def relative(self) -> float:
        """after / before - 1 (infinite when a figure grows from zero)."""
        if self.before == 0:
            return 0.0 if self.after == 0 else math.copysign(math.inf, self.after)
        return self.after / self.before - 1

    @property
    def word(self) -> str:
        """holds (within the threshold), rises or falls."""
        r = self.relative
        if abs(r) <= self.within:
            return "holds"
        return "rises" if r > 0 else "falls"

    def percent(self) -> str:
        r = self.relative
        return "from zero" if math.isinf(r) else f"{r:+.1%}"

    def text(self, what: str, number: str = "{:,.2f}", unit: str = "") -> str:
        """``p95 TTFT rises 120.0 -> 180.0 ms (+50.0 %)``; a change that holds says it is
        within the threshold."""
        before, after = number.format(self.before), number.format(self.after)
        unit = f" {unit}" if unit else ""
        within = f", within {self.within:.0%}" if self.word == "holds" else ""
        return f"{what} {self.word} {before} -> {after}{unit} ({self.percent()}{within})"


def threshold_text(within: float, source: str = "the plan's tolerance") -> str:
    """The rule that decides the words, stated once where they are read."""
    return f"a change of {within:.0%} or less holds ({source}); a larger one rises or falls"
