"""A plan across a day: the recommended deployment sized window by window of a daily traffic
curve, a fleet sized for the peak against one scaled per window.

Capacity is bought for a day, not for a rate. The recommendation is read as a family: its
smallest repeating unit (the deployment divided by the greatest common divisor of its pools'
instance counts: two colocated instances are two units of one, 2P + 6D two units of 1P + 3D)
serves the recommendation's operating rate divided by the number of units, and units add
linearly (each behind the same router, on its share of the traffic). From the curve::

    needed(w)     ceil(rate(w) / unit rate), at least one unit
    static        the peak window's units, all day
    autoscaled    each window's units; units it adds over the window before serve only
                  ``scale_up_delay_s`` after it begins (until then the window's traffic falls
                  on the window before's units); units it removes go at once

Each window's SLO attainment is read off the recommendation's own probes, not simulated
again: every probe (rate, attainment) of every traffic draw, made non-increasing in the rate
(pool-adjacent violators) and interpolated linearly, at the deployment rate the window puts on
the recommended deployment (``units x`` the load per unit). Below the lowest probe the lowest
probe's attainment holds, above the highest the highest's, which a note flags. Over the day,
attainment is weighted by requests (each window's rate times its length); GPU-hours and cost
by the units each window runs.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from functools import reduce
from pathlib import Path
from typing import Any

from clustersim.errors import ConfigError
from clustersim.inputs import read_bytes
from clustersim.scenario.plan import SHIPPED_CURVES, TrafficCurve

CURVES_DIR = Path(__file__).resolve().parent.parent / "data" / "traces"
RATE_COLUMNS = ("total_rate_rps", "rate_per_s")


@dataclass(frozen=True, slots=True)
class DayWindow:
    """One window of the day and what each fleet runs in it."""

    start_s: float
    rate_per_s: float
    needed_units: int
    static_attainment: float
    autoscaled_units: int
    autoscaled_attainment: float

    def to_json(self) -> dict[str, Any]:
        return {"start_s": self.start_s, "rate_per_s": self.rate_per_s,
                "needed_units": self.needed_units,
                "static_attainment": self.static_attainment,
                "autoscaled_units": self.autoscaled_units,
                "autoscaled_attainment": self.autoscaled_attainment}


@dataclass(frozen=True, slots=True)
class Fleet:
    """A fleet over the day: its size, GPU-hours, cost and SLO attainment."""

    name: str
    min_gpus: int
    max_gpus: int
    gpu_hours: float
    cost_usd: float | None
    attainment: float
    meets: bool
    """Whether the day's attainment reaches the SLO's target."""

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "min_gpus": self.min_gpus, "max_gpus": self.max_gpus,
                "gpu_hours": self.gpu_hours, "cost_usd": self.cost_usd,
                "attainment": self.attainment, "meets": self.meets}


@dataclass(frozen=True, slots=True)
class DayPlan:
    """The recommended family over a day of traffic (:mod:`clustersim.plan.day`)."""

    curve: str
    window_s: float
    peak_rate_per_s: float
    mean_rate_per_s: float
    unit: str
    unit_gpus: int
    unit_rate_per_s: float
    scale_up_delay_s: float
    windows: tuple[DayWindow, ...]
    static: Fleet
    autoscaled: Fleet
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"curve": self.curve, "window_s": self.window_s,
                "peak_rate_per_s": self.peak_rate_per_s,
                "mean_rate_per_s": self.mean_rate_per_s, "unit": self.unit,
                "unit_gpus": self.unit_gpus, "unit_rate_per_s": self.unit_rate_per_s,
                "scale_up_delay_s": self.scale_up_delay_s,
                "static": self.static.to_json(), "autoscaled": self.autoscaled.to_json(),
                "windows": [w.to_json() for w in self.windows], "notes": list(self.notes)}

    @property
    def saving(self) -> float | None:
        """The autoscaled fleet's GPU-hours saved against the static one, as a share."""
        if self.static.gpu_hours <= 0:
            return None
        return 1 - self.autoscaled.gpu_hours / self.static.gpu_hours


def curve_rates(spec: TrafficCurve, base_dir: Path | None = None) -> tuple[str, list[float]]:
    """(what the curve is, one rate per window of ``spec.window_s`` over ``spec.span_s``),
    before scaling to the peak."""
    where = "plan.traffic_curve"
    if spec.rates_per_s is not None:
        rates = list(spec.rates_per_s)[: max(1, int(spec.span_s // spec.window_s))]
        return f"{len(rates)} rates given", rates
    assert spec.curve is not None
    if spec.curve in SHIPPED_CURVES:
        path = CURVES_DIR / f"servegen_rate_{spec.curve.removeprefix('servegen-')}.csv"
        name = spec.curve
    else:
        path = Path(spec.curve) if base_dir is None else base_dir / spec.curve
        name = spec.curve
        if not path.is_file():
            known = ", ".join(SHIPPED_CURVES)
            raise ConfigError(f"{where}.curve", f"{spec.curve!r} is neither a shipped curve "
                              f"({known}) nor a file")
    starts, values = _read_curve(read_bytes(path, f"{where}.curve").decode("utf-8"),
                                 f"{where}.curve")
    step = starts[1] - starts[0] if len(starts) > 1 else spec.window_s
    per_window = spec.window_s / step
    if per_window < 1 or abs(per_window - round(per_window)) > 1e-9:
        raise ConfigError(f"{where}.window_s", f"{spec.window_s:g} s is not a multiple of the "
                          f"curve's {step:g} s windows")
    k = round(per_window)
    keep = [v for s, v in zip(starts, values, strict=True) if s - starts[0] < spec.span_s]
    rates = [sum(keep[i:i + k]) / len(keep[i:i + k]) for i in range(0, len(keep), k)]
    return name, rates


def _read_curve(text: str, where: str) -> tuple[list[float], list[float]]:
    """Window starts and rates of a curve file, in equal windows."""
    rows = list(csv.DictReader(io.StringIO(text, newline="")))
    column = next((c for c in RATE_COLUMNS if rows and c in rows[0]), None)
    if not rows or "window_start_s" not in rows[0] or column is None:
        raise ConfigError(where, "a curve file needs a header with window_start_s and one of "
                          + ", ".join(RATE_COLUMNS))
    starts, values = [], []
    for line, row in enumerate(rows, start=2):
        try:
            start, rate = float(row["window_start_s"]), float(row[column])
        except (TypeError, ValueError):
            raise ConfigError(f"{where} line {line}", "window_start_s and the rate must be "
                              "numbers") from None
        if not (math.isfinite(start) and math.isfinite(rate)) or rate < 0:
            raise ConfigError(f"{where} line {line}", "a rate must be finite and >= 0")
        starts.append(start)
        values.append(rate)
    gaps = {round(b - a, 6) for a, b in zip(starts, starts[1:], strict=False)}
    if len(gaps) > 1 or (gaps and min(gaps) <= 0):
        raise ConfigError(where, "windows must be equal and in order")
    return starts, values


def attainment_curve(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """(rate, attainment) made non-increasing in the rate by pooling adjacent violators:
    more traffic never meets the SLO more often; each pooled block keeps its mean."""
    blocks: list[list[float]] = []  # [sum of rates, sum of attainments, count]
    for rate, att in sorted(points):
        blocks.append([rate, att, 1.0])
        while len(blocks) > 1 and blocks[-2][1] / blocks[-2][2] < blocks[-1][1] / blocks[-1][2]:
            r, a, n = blocks.pop()
            blocks[-1][0] += r
            blocks[-1][1] += a
            blocks[-1][2] += n
    return [(r / n, a / n) for r, a, n in blocks]


def read_attainment(curve: list[tuple[float, float]], rate: float) -> float:
    """The curve at ``rate``, linear between its points, flat beyond its ends."""
    if rate <= curve[0][0]:
        return curve[0][1]
    for (r0, a0), (r1, a1) in zip(curve, curve[1:], strict=False):
        if rate <= r1:
            return a0 + (a1 - a0) * (rate - r0) / (r1 - r0) if r1 > r0 else a1
    return curve[-1][1]


def plan_day(spec: TrafficCurve, recommended: Any, *, target: float, default_peak: float,
             base_dir: Path | None = None) -> DayPlan | None:
    """The day plan of ``recommended`` (a CandidateResult with its probes and operating rate),
    None when it has no operating rate. ``target``: the SLO's attainment target;
    ``default_peak``: the busiest window's rate when ``spec.peak_rate_per_s`` is unset."""
    if recommended is None or not recommended.operating_rate_per_s or not recommended.probes:
        return None
    name, raw = curve_rates(spec, base_dir)
    top = max(raw)
    if top <= 0:
        raise ConfigError("plan.traffic_curve", "the curve has no traffic in any window")
    peak = spec.peak_rate_per_s if spec.peak_rate_per_s is not None else default_peak
    rates = [r * peak / top for r in raw]
    candidate = recommended.candidate
    units_in = reduce(math.gcd, (p.instances for p in candidate.pools))
    unit_gpus = candidate.num_gpus // units_in
    unit_rate = recommended.operating_rate_per_s / units_in
    unit_cost = (None if recommended.cost_per_hour is None
                 else recommended.cost_per_hour / units_in)
    curve = attainment_curve([(p.rate_per_s, p.attainment) for p in recommended.probes])
    probed_max = curve[-1][0]

    def attainment(load_per_unit: float) -> float:
        return read_attainment(curve, load_per_unit * units_in)

    needed = [max(1, math.ceil(r / unit_rate - 1e-9)) for r in rates]
    peak_units = max(needed)
    windows = []
    beyond = False
    previous = needed[0]
    delay = min(spec.scale_up_delay_s, spec.window_s)
    for start, rate, units in zip(range(len(rates)), rates, needed, strict=True):
        static = attainment(rate / peak_units)
        if units > previous:  # the added units serve only after the delay
            late = delay / spec.window_s
            auto = late * attainment(rate / previous) + (1 - late) * attainment(rate / units)
            beyond = beyond or rate / previous * units_in > probed_max
        else:
            auto = attainment(rate / units)
        windows.append(DayWindow(start * spec.window_s, rate, units, static, units, auto))
        previous = units
    hours = spec.window_s / 3600
    weights = [r * spec.window_s for r in rates]
    total = sum(weights) or 1.0

    def fleet(label: str, units: list[int], atts: list[float]) -> Fleet:
        gpu_hours = sum(u * unit_gpus * hours for u in units)
        cost = None if unit_cost is None else sum(u * unit_cost * hours for u in units)
        day = sum(w * a for w, a in zip(weights, atts, strict=True)) / total
        return Fleet(label, min(units) * unit_gpus, max(units) * unit_gpus, gpu_hours, cost,
                     day, day >= target - 1e-12)

    static = fleet("static, sized for the peak", [peak_units] * len(rates),
                   [w.static_attainment for w in windows])
    auto = fleet(f"autoscaled per {spec.window_s / 60:g} min window", needed,
                 [w.autoscaled_attainment for w in windows])
    notes = []
    if beyond:
        notes.append(f"while added units start, a unit carries more than the highest rate "
                     f"probed ({probed_max:,.2f} req/s on the deployment); its attainment is "
                     "read as the highest probe's, which is optimistic")
    unit_label = " + ".join(f"{p.instances // units_in}{_letter(p.role)} {p.gpu} "
                            f"{p.parallel}" for p in candidate.pools)
    return DayPlan(name, spec.window_s, peak, sum(rates) / len(rates), unit_label, unit_gpus,
                   unit_rate, spec.scale_up_delay_s, tuple(windows), static, auto, tuple(notes))


def _letter(role: str) -> str:
    return {"prefill": "P", "decode": "D", "colocated": " x"}.get(role, f" {role}")
