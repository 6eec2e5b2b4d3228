"""Open-loop arrival times, drawn from one random generator (pure functions).

Renewal processes (poisson, gamma, constant) add independent gaps. Time-varying ones (on_off,
rate_curve) are Poisson processes with a rate r(t): unit-rate arrival "times" x_k are mapped
back through the cumulative rate, t_k = Λ⁻¹(x_k) with Λ(t) = ∫₀ᵗ r, which is exact and needs
no thinning::

    Λ(t)  ^            ___/      x_3 ----------------+
          |        ___/          x_2 ----------+     |
          |   ____/              x_1 ---+      |     |
          +--/------------> t          t_1    t_2   t_3
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from clustersim.workload.spec import (
    ConstantArrivals,
    GammaArrivals,
    OnOffArrivals,
    PoissonArrivals,
    RateCurveArrivals,
)

OpenArrivals = (
    PoissonArrivals | GammaArrivals | ConstantArrivals | OnOffArrivals | RateCurveArrivals
)


@dataclass(frozen=True)
class RateCurve:
    """A piecewise rate r(t) through knots, ramping (linear) or holding (step) between them.

    Without a period the last rate holds for ever; with one the knots repeat every
    ``period_s`` and the last knot leads back to the first.
    """

    times_s: np.ndarray
    rates_per_s: np.ndarray
    linear: bool
    period_s: float | None = None

    def __post_init__(self) -> None:
        times, rates = self.times_s, self.rates_per_s
        if self.period_s is not None:
            times = np.append(times, self.period_s)
            rates = np.append(rates, rates[0])
        widths = np.diff(times)
        areas = (rates[:-1] + rates[1:]) / 2 * widths if self.linear else rates[:-1] * widths
        object.__setattr__(self, "_times", times)
        object.__setattr__(self, "_rates", rates)
        object.__setattr__(self, "_knot_area", np.concatenate(([0.0], np.cumsum(areas))))

    @property
    def total(self) -> float:
        """Λ over all time: finite only without a period and with a last rate of 0."""
        if self.period_s is None and self.rates_per_s[-1] == 0:
            return float(self._knot_area[-1])
        return float("inf")

    def cumulative(self, t: float) -> float:
        """Λ(t), the expected number of arrivals in [0, t]."""
        times, rates, area = self._times, self._rates, self._knot_area
        periods = 0.0
        if self.period_s is not None:
            periods, t = divmod(t, self.period_s)
        i = min(int(np.searchsorted(times, t, side="right")) - 1, len(times) - 1)
        dt = t - times[i]
        if i == len(times) - 1:  # past the last knot (no period): the last rate holds
            within = rates[i] * dt
        elif self.linear:
            slope = (rates[i + 1] - rates[i]) / (times[i + 1] - times[i])
            within = rates[i] * dt + slope * dt * dt / 2
        else:
            within = rates[i] * dt
        return periods * area[-1] + area[i] + within

    def inverse(self, x: np.ndarray) -> np.ndarray:
        """Λ⁻¹(x) for sorted x below :attr:`total`."""
        times, rates, area = self._times, self._rates, self._knot_area
        periods = np.zeros_like(x)
        if self.period_s is not None:
            periods, x = np.divmod(x, area[-1])
        last = len(times) - 1
        # side="right" steps over zero-rate segments, whose area is 0.
        i = np.minimum(np.searchsorted(area, x, side="right") - 1, last)
        if self.period_s is not None:
            i = np.minimum(i, last - 1)
        d = x - area[i]
        r0 = rates[i]
        nxt = np.minimum(i + 1, last)
        width = np.where(i < last, times[nxt] - times[i], 1.0)
        slope = np.where((i < last) & self.linear, (rates[nxt] - r0) / width, 0.0)
        # Solve r0*τ + slope*τ²/2 = d in its cancellation-free form.
        with np.errstate(divide="ignore", invalid="ignore"):
            root = np.sqrt(np.maximum(r0 * r0 + 2 * slope * d, 0.0))
            tau = np.where(d > 0, 2 * d / (r0 + root), 0.0)
        t = times[i] + tau
        if self.period_s is not None:
            t = t + periods * self.period_s
        return t


def rate_curve(spec: OnOffArrivals | RateCurveArrivals) -> RateCurve:
    if isinstance(spec, OnOffArrivals):
        return RateCurve(np.array([0.0, spec.on_s]),
                         np.array([spec.on_rate_per_s, spec.off_rate_per_s]),
                         linear=False, period_s=spec.on_s + spec.off_s)
    points = np.array(spec.points, dtype=float)
    return RateCurve(points[:, 0], points[:, 1], linear=spec.interpolation == "linear",
                     period_s=spec.period_s)


def _accumulate(
    draw: Callable[[int], np.ndarray], num: int | None, bound: float, chunk: int
) -> np.ndarray:
    """Running sums of drawn increments: ``num`` of them, or as many as stay below ``bound``.

    With ``num`` and no finite bound the increments are drawn in one call, so a Poisson stream
    of n requests takes the same draws as ``rng.exponential(1/rate, n)``.
    """
    if num is not None and bound == float("inf"):
        return np.cumsum(draw(num))
    parts: list[np.ndarray] = []
    total, count = 0.0, 0
    while (num is None or count < num) and total < bound:
        size = chunk if num is None else min(chunk, num - count)
        sums = total + np.cumsum(draw(size))
        parts.append(sums)
        total, count = float(sums[-1]), count + size
    sums = np.concatenate(parts)
    return sums[sums < bound][:num]


def arrival_times(
    spec: OpenArrivals,
    rng: np.random.Generator,
    *,
    num_requests: int | None,
    duration_s: float | None = None,
    start_s: float = 0.0,
) -> np.ndarray:
    """Arrival times from ``start_s`` on: ``num_requests`` of them, those within ``duration_s``,
    or both limits at once (whichever ends first). The first arrival is one gap after start."""
    if num_requests is None and duration_s is None:
        raise ValueError("give num_requests or duration_s")
    horizon = float("inf") if duration_s is None else duration_s
    if isinstance(spec, OnOffArrivals | RateCurveArrivals):
        curve = rate_curve(spec)
        bound = min(curve.total, horizon if duration_s is None else curve.cumulative(horizon))
        chunk = 1024 if bound == float("inf") else int(bound * 1.05) + 64
        unit = _accumulate(lambda k: rng.exponential(1.0, size=k), num_requests, bound, chunk)
        return start_s + curve.inverse(unit)
    rate = spec.rate_per_s
    if isinstance(spec, PoissonArrivals):
        def draw(k: int) -> np.ndarray:
            return rng.exponential(1.0 / rate, size=k)
    elif isinstance(spec, GammaArrivals):
        shape = 1.0 / (spec.cv * spec.cv)
        def draw(k: int) -> np.ndarray:
            return rng.gamma(shape, 1.0 / (rate * shape), size=k)
    else:
        def draw(k: int) -> np.ndarray:
            return np.full(k, 1.0 / rate)
    chunk = 1024 if duration_s is None else int(rate * duration_s * 1.05) + 64
    return start_s + _accumulate(draw, num_requests, horizon, chunk)
