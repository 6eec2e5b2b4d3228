"""How sensitive the recommendation is to the two things a review questions first: the KV
fabric (is a 400G network enough for this split?) and a busier day than planned.

``plan.sensitivity`` names the readings::

    link   the recommendation's goodput with every link a KV transfer crosses at half and at
           double its bandwidth (``layout.kv_transfer.link_bandwidth_scale``), and at its own
           bandwidth again, each traffic draw bisected by one search from the goodput the plan
           found (the three read alike: a bisection's answer depends on where it starts); a
           colocated recommendation moves no KV, so the best split (the plan's alternative of
           the other layout kind) is read instead, which a note says
    load   its SLO attainment with 20 % more traffic than its operating rate, one run per
           traffic draw

Each reading runs the plan's own probes (same seeds, same traffic, same search settings), so it
is what the plan would have measured on that fabric or at that rate.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from clustersim.metrics import RunSummary
from clustersim.plan.bisect import RateSearch, mean_interval
from clustersim.scenario import Scenario

LINK_SCALES = (0.5, 1.0, 2.0)
"""The KV fabric's bandwidth against the topology's: on either side of it, and at it again by
the same search, so that the three are read alike."""
LOAD_FACTOR = 1.2
"""Traffic against the operating rate for the load reading."""


@dataclass(frozen=True, slots=True)
class CliffPoint:
    """Every traffic draw run at a multiple of a rate: does attainment slide or fall? The
    cliff of a candidate (5 % and 10 % above its goodput, read for the answer's candidates) and
    the load reading (20 % above the operating rate) are each one."""

    factor: float
    """The offered rate over the rate it is read against (1.05: 5 % above it)."""
    rate_per_s: float
    attainments: tuple[float, ...]
    """Joint (or the criterion's) attainment of each draw at that rate."""
    num_meeting: int
    """How many of those draws still met the SLO."""

    @property
    def attainment(self) -> float:
        return sum(self.attainments) / len(self.attainments)

    @property
    def lowest(self) -> float:
        return min(self.attainments)

    def to_json(self) -> dict[str, Any]:
        return {"factor": self.factor, "rate_per_s": self.rate_per_s,
                "attainment_mean": self.attainment, "attainment_per_seed":
                list(self.attainments), "num_meeting": self.num_meeting}


@dataclass(frozen=True, slots=True)
class LinkReading:
    """The recommendation's goodput with its KV links scaled by ``scale``."""

    scale: float
    mean_per_s: float
    low_per_s: float
    high_per_s: float
    per_seed_per_s: tuple[float, ...]

    def to_json(self) -> dict[str, Any]:
        return {"scale": self.scale, "goodput_per_s": self.mean_per_s,
                "goodput_ci95_per_s": [self.low_per_s, self.high_per_s],
                "per_seed_per_s": list(self.per_seed_per_s)}


@dataclass(frozen=True, slots=True)
class Sensitivity:
    """The readings of ``plan.sensitivity`` for one candidate."""

    candidate: str
    goodput_per_s: float
    """Its goodput as the plan found it."""
    link: tuple[LinkReading, ...] = ()
    link_candidate: str | None = None
    """The split the link readings are of: the recommendation, or the best split when the
    recommendation is colocated."""
    load: CliffPoint | None = None
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"candidate": self.candidate, "goodput_per_s": self.goodput_per_s,
                "link": [r.to_json() for r in self.link],
                "link_candidate": self.link_candidate,
                "load": None if self.load is None else self.load.to_json(),
                "notes": list(self.notes)}


Job = Callable[[int, float], Scenario]
"""(traffic draw, rate) -> the recommendation's scenario at that rate."""
RunJobs = Callable[[str, list[Scenario]], list[RunSummary | str]]


def with_link_scale(job: Scenario, scale: float) -> Scenario:
    """``job`` with every link its KV transfers cross at ``scale`` times its bandwidth."""
    layout = job.layout
    assert layout is not None
    kv = layout.kv_transfer.model_copy(update={"link_bandwidth_scale": scale})
    return job.model_copy(update={"layout": layout.model_copy(update={"kv_transfer": kv})})


def link_readings(job: Job, run_jobs: RunJobs, goodputs: list[float],
                  searches: list[RateSearch], tolerance: float, max_probes: int,
                  step: float) -> tuple[LinkReading, ...]:
    """Each traffic draw's goodput bisected again at every scale of :data:`LINK_SCALES`, from
    the goodput it had at the topology's bandwidth, all scales and draws in each round."""
    runs = {(scale, k): RateSearch(goodputs[k] or searches[k].min_rate or 1e-3, tolerance,
                                   max_probes, step=step, min_rate=searches[k].min_rate,
                                   max_rate=searches[k].max_rate)
            for scale in LINK_SCALES for k in range(len(goodputs))}
    round_ = 0
    while True:
        batch = [(key, rate) for key, run in runs.items()
                 if (rate := run.next_rate()) is not None]
        if not batch:
            break
        round_ += 1
        jobs = [with_link_scale(job(k, rate), scale) for (scale, k), rate in batch]
        for (key, rate), outcome in zip(batch, run_jobs(
                f"sensitivity: KV links, round {round_}", jobs), strict=True):
            if isinstance(outcome, str):
                raise AssertionError(f"the recommendation failed to run: {outcome}")
            assert outcome.slo is not None
            runs[key].record(rate, outcome.slo.meets, outcome,
                             outcome.slo.margin)
    out = []
    for scale in LINK_SCALES:
        searches = [runs[scale, k] for k in range(len(goodputs))]
        values = [r.goodput for r in searches]
        mean, low, high = mean_interval(values, widths=[r.bracket_width for r in searches])
        out.append(LinkReading(scale, mean, low, high, tuple(values)))
    return tuple(out)


def load_reading(job: Job, run_jobs: RunJobs, operating_rate: float,
                 num_seeds: int) -> CliffPoint:
    """One run per traffic draw at :data:`LOAD_FACTOR` times the operating rate, read as a
    cliff point is (its factor is over the operating rate, not the goodput)."""
    rate = operating_rate * LOAD_FACTOR
    outcomes = run_jobs(f"sensitivity: load +{LOAD_FACTOR - 1:.0%}",
                        [job(k, rate) for k in range(num_seeds)])
    attainments = []
    meeting = 0
    for outcome in outcomes:
        if isinstance(outcome, str):
            raise AssertionError(f"the recommendation failed to run: {outcome}")
        assert outcome.slo is not None
        attainments.append(outcome.slo.attainment)
        meeting += bool(outcome.slo.meets)
    return CliffPoint(LOAD_FACTOR, rate, tuple(attainments), meeting)
