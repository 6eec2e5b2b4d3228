"""Goodput by bisection: the highest offered rate at which a configuration meets its SLO.

Pure: a :class:`RateSearch` proposes the next rate to try and is told whether the run at that
rate met the SLO; whoever runs the simulations (an executor, in rounds) stays outside. It
brackets first, stepping up from a pass or down from a fail by a factor that squares each time
the same way is taken again (a good start costs two probes, a bad one few more), then narrows
the bracket until ``(fail - pass) / pass <= tolerance``::

    rate  ->   x0 pass   1.25 x0 pass   1.95 x0 FAIL         bracket [1.25 x0, 1.95 x0]
               sqrt(1.25 x0 * 1.95 x0) pass ...          until fail / pass - 1 <= tolerance

Where both ends carry a margin (how far the run's attainment lay above or below its target,
in log-odds), the next probe goes where the line between the two margins crosses zero, a third
of the tolerance past it on the side of the farther end, so that one verdict each way closes
the bracket when the line is right (attainment falls off a cliff near goodput much as a
logistic does, whose log-odds are a line). A probe that did not halve the bracket is followed
by a geometric midpoint, so the search never takes more than twice the probes of plain
bisection.

Attainment is assumed to fall with the rate (more load never helps); a noisy reversal only
moves the answer inside the bracket. A search that fails even at ``min_rate`` (a trickle)
ends with goodput 0: the SLO cannot be met at any load.

The seeds of one configuration give independent goodputs; :func:`mean_interval` is their mean
with a 95 % Student-t interval, each seed's bracket counted in the spread.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

# Two-sided 95 % Student-t quantiles by degrees of freedom (1..30); beyond, the normal's.
_T95 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)


@dataclass
class RateSearch:
    """One configuration, one seed: bracket, then bisect on the offered rate (req/s)."""

    start_rate: float
    tolerance: float
    max_probes: int = 24
    step: float = 1.25
    """Factor of the first bracketing step (it squares with every further one)."""
    min_rate: float | None = None
    """Below this the search gives up: the SLO fails at a trickle. Default start / 256."""
    max_rate: float | None = None
    """Above this the search stops climbing. Default start x 256."""
    passed: list[tuple[float, Any]] = field(default_factory=list)
    failed: list[tuple[float, Any]] = field(default_factory=list)
    margins: dict[float, float] = field(default_factory=dict)
    """Rate -> how far its run lay above (>= 0) or below its target, where known."""
    widths: list[float] = field(default_factory=list)
    """``log(hi / lo)`` after each probe once bracketed."""

    def __post_init__(self) -> None:
        if not self.start_rate > 0 or not math.isfinite(self.start_rate):
            raise ValueError(f"start_rate must be positive and finite, got {self.start_rate}")
        if not 0 < self.tolerance < 1:
            raise ValueError(f"tolerance must be in (0, 1), got {self.tolerance}")
        if self.min_rate is None:
            self.min_rate = self.start_rate / 256
        if self.max_rate is None:
            self.max_rate = self.start_rate * 256

    @property
    def lo(self) -> float | None:
        """The highest rate that met the SLO."""
        return max((r for r, _ in self.passed), default=None)

    @property
    def hi(self) -> float | None:
        """The lowest rate that failed it."""
        return min((r for r, _ in self.failed), default=None)

    @property
    def bracket_width(self) -> float:
        """How far the goodput may lie above :attr:`goodput`: the lowest failing rate less the
        highest passing one (0 before both are known)."""
        lo, hi = self.lo, self.hi
        return hi - lo if lo is not None and hi is not None else 0.0

    @property
    def num_probes(self) -> int:
        return len(self.passed) + len(self.failed)

    @property
    def converged(self) -> bool:
        lo, hi = self.lo, self.hi
        return lo is not None and hi is not None and (hi - lo) / lo <= self.tolerance

    @property
    def infeasible(self) -> bool:
        """Failed at the trickle rate: no load is light enough."""
        return self.lo is None and self.hi is not None and self.hi <= self.min_rate

    @property
    def capped(self) -> bool:
        """Met the SLO at max_rate: goodput is at least that (the search stopped climbing)."""
        lo = self.lo
        return lo is not None and self.hi is None and lo >= self.max_rate

    def next_rate(self) -> float | None:
        """The next rate to try, or None when done."""
        if self.converged or self.infeasible or self.capped or self.num_probes >= self.max_probes:
            return None
        lo, hi = self.lo, self.hi
        if lo is None and hi is None:
            return self.start_rate
        if lo is None:
            return max(hi / self.step ** 2 ** (len(self.failed) - 1), self.min_rate)
        if hi is None:
            return min(lo * self.step ** 2 ** (len(self.passed) - 1), self.max_rate)
        return self._crossing(lo, hi) or math.sqrt(lo * hi)

    def _crossing(self, lo: float, hi: float) -> float | None:
        """The probe where the margins' line crosses zero (None: bisect instead)."""
        if len(self.widths) >= 2 and self.widths[-1] > self.widths[-2] / 2:
            return None  # the last probe did not halve the bracket
        m_lo, m_hi = self.margins.get(lo), self.margins.get(hi)
        if m_lo is None or m_hi is None or not m_lo >= 0 > m_hi:
            return None
        x = lo + (hi - lo) * m_lo / (m_lo - m_hi)
        past = 1 + self.tolerance / 3
        x = x / past if x / lo > hi / x else x * past  # toward the farther end
        edge = (hi / lo) ** 0.1  # never at the ends: each verdict must narrow the bracket
        return min(max(x, lo * edge), hi / edge)

    def record(self, rate: float, meets: bool, outcome: Any = None,
               margin: float | None = None) -> None:
        """``margin``: how far the run lay from its verdict flipping (>= 0 when it meets;
        the log-odds of its attainment less its target's), if the verdict is read from a
        share; it guides the next probe."""
        (self.passed if meets else self.failed).append((rate, outcome))
        if margin is not None and (margin >= 0) == meets:
            self.margins[rate] = margin
        lo, hi = self.lo, self.hi
        if lo is not None and hi is not None:
            self.widths.append(math.log(hi / lo))

    @property
    def goodput(self) -> float:
        """The highest passing rate (0 when none passed)."""
        return self.lo or 0.0

    def outcome_at(self, rate: float | None) -> Any:
        for r, outcome in (*self.passed, *self.failed):
            if r == rate:
                return outcome
        return None


def mean_interval(values: list[float], clip: bool = True,
                  widths: list[float] | None = None) -> tuple[float, float, float]:
    """(mean, low, high): the mean and its two-sided 95 % Student-t interval (one value: the
    value itself, no spread to estimate); ``clip``: the low end no lower than 0 (a rate).

    ``widths``: each value's bracket, where a value is only known to lie in ``[v, v + w)`` (a
    bisection's last pass and first fail). The bracket counts in the spread as a uniform's
    variance, ``w^2 / 12``: draws whose searches end on the same probe rate would otherwise
    claim a zero-width interval however far apart their true goodputs lie inside it."""
    n = len(values)
    if n == 0:
        raise ValueError("no values")
    mean = sum(values) / n
    if n == 1:
        return mean, mean, mean
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    if widths:
        var += sum(w * w for w in widths) / (12 * len(widths))
    t = _T95[n - 2] if n - 1 <= len(_T95) else 1.959963984540054
    half = t * math.sqrt(var / n)
    return mean, max(0.0, mean - half) if clip else mean - half, mean + half
