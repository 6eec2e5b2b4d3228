"""SLO verdicts from one per-request table, and what a deployment costs per token.

Three readings of "meets the SLO", all computed, one chosen by ``slo.criterion``::

    joint     share of all arrived requests meeting every limit at once >= target
              (DistServe's attainment, vLLM bench serve --goodput, AIPerf)
    marginal  for each limit alone, the share of requests within it >= target: at target 0.9
              that is "p90 of each metric within its limit" (DistServe's search code), at 0.99
              MLPerf's p99 rule; weaker than joint (both marginals can pass while the joint
              share fails)
    mean      each metric's mean within its limit, and no more than 1 - target of the requests
              rejected (aiconfigurator's reading; blind to tails)

A rejected request misses every limit. A one-token output has no TPOT and no ITL and meets
those limits by definition (reference/metrics.md). ITL limits bound each request's p99 gap.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from clustersim.metrics.requests import RequestTable
from clustersim.scenario import SLO

CRITERIA = ("joint", "marginal", "mean")
LIMITS = ("ttft_s", "tpot_s", "itl_s")
_Z95 = 1.959963984540054  # two-sided 95 % normal quantile


@dataclass(frozen=True, slots=True)
class SloVerdict:
    """How a run fares against its SLO, read three ways."""

    slo: SLO
    num_requests: int
    attainment: float | None
    """Joint: share of all arrived requests meeting every limit."""
    attainment_interval: tuple[float, float] | None
    """Wilson 95 % interval of the joint attainment (requests as independent trials)."""
    marginal: dict[str, float]
    """Per limit set: share of all arrived requests within that limit alone."""
    means: dict[str, float | None]
    """Per limit set: the metric's mean over the requests where it is defined."""
    rejected_share: float
    passes: dict[str, bool]
    """criterion -> verdict."""
    marginal_interval: dict[str, tuple[float, float]] = field(default_factory=dict)
    """Per limit set: Wilson 95 % interval of its marginal share (not in ``to_json``)."""

    @property
    def meets(self) -> bool:
        """The verdict of the scenario's own criterion."""
        return self.passes[self.slo.criterion]

    @property
    def margin(self) -> float | None:
        """How far the verdict lay from flipping, in log-odds: ``logit(share) -
        logit(target)`` of the joint attainment, or of the smallest marginal share (each share
        held within 0.001 of 0 and 1); positive when it meets. None for the mean criterion
        (not read from a share). Attainment falls with load much as a logistic does, so the
        log-odds fall about linearly across the cliff: a line between two probes finds it."""
        criterion, target = self.slo.criterion, self.slo.attainment_target
        if criterion == "joint" and self.attainment is not None:
            share = self.attainment
        elif criterion == "marginal" and self.marginal:
            share = min(self.marginal.values())
        else:
            return None
        return log_odds(share) - log_odds(target)

    def meets_limit(self, metric: str) -> bool:
        """That limit alone: the share of requests within it reaches the target."""
        return self.marginal[metric] >= self.slo.attainment_target

    def limits(self) -> dict[str, float]:
        return {k: getattr(self.slo, k) for k in LIMITS if getattr(self.slo, k) is not None}

    def to_json(self) -> dict:
        interval = self.attainment_interval
        return {
            **self.limits(),
            "attainment_target": self.slo.attainment_target,
            "criterion": self.slo.criterion,
            "attainment": self.attainment,
            "attainment_ci95": None if interval is None else list(interval),
            "marginal_attainment": self.marginal,
            "means": self.means,
            "verdicts": self.passes,
            "meets": self.meets,
        }


def log_odds(share: float) -> float:
    """``log(share / (1 - share))``, the share held within 0.001 of 0 and 1."""
    share = min(max(share, 1e-3), 1 - 1e-3)
    return math.log(share / (1 - share))


def within(table: RequestTable, metric: str, limit: float) -> np.ndarray:
    """Per request: finished and within ``limit`` on ``metric`` (undefined counts as within)."""
    values = table.column(metric)
    return table.finished & ~(values > limit)  # NaN > limit is False


def good_mask(table: RequestTable, slo: SLO) -> np.ndarray:
    """Per request: finished and within every limit the SLO sets (joint)."""
    good = table.finished.copy()
    for metric in LIMITS:
        limit = getattr(slo, metric)
        if limit is not None:
            good &= within(table, metric, limit)
    return good


def slo_verdict(table: RequestTable, slo: SLO) -> SloVerdict:
    n = len(table)
    limits = {k: getattr(slo, k) for k in LIMITS if getattr(slo, k) is not None}
    good = table.finished.copy()
    marginal: dict[str, float] = {}
    marginal_interval: dict[str, tuple[float, float]] = {}
    means: dict[str, float | None] = {}
    for metric, limit in limits.items():
        ok = within(table, metric, limit)
        good &= ok
        marginal[metric] = float(ok.sum()) / n if n else 0.0
        if n:
            marginal_interval[metric] = wilson_interval(int(ok.sum()), n)
        defined = table.defined(metric)
        means[metric] = float(defined.mean()) if defined.size else None
    target = slo.attainment_target
    rejected_share = float((~table.finished).sum()) / n if n else 0.0
    attainment = float(good.sum()) / n if n else None
    passes = {
        "joint": attainment is not None and attainment >= target,
        "marginal": n > 0 and all(share >= target for share in marginal.values()),
        "mean": n > 0 and rejected_share <= 1 - target and all(
            mean is None or mean <= limits[metric] for metric, mean in means.items()
        ),
    }
    return SloVerdict(
        slo=slo,
        num_requests=n,
        attainment=attainment,
        attainment_interval=None if attainment is None else wilson_interval(int(good.sum()), n),
        marginal=marginal,
        means=means,
        rejected_share=rejected_share,
        passes=passes,
        marginal_interval=marginal_interval,
    )


def wilson_interval(successes: int, trials: int, z: float = _Z95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion (sound near 0 and 1, unlike p +- z se)."""
    if trials <= 0:
        raise ValueError("an interval needs at least one trial")
    p = successes / trials
    denom = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denom
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def cost_per_million_tokens(
    gpu_hours_per_hour: dict[str, float], price_per_gpu_hour: dict[str, float],
    tokens_per_s: float,
) -> float | None:
    """$ per 1M tokens of a deployment running ``gpu_hours_per_hour[gpu]`` GPUs of each type
    at ``tokens_per_s`` (reference/metrics.md: GPU-hours x price / tokens x 1e6)."""
    if tokens_per_s <= 0:
        return None
    dollars_per_hour = sum(n * price_per_gpu_hour[gpu] for gpu, n in gpu_hours_per_hour.items())
    return dollars_per_hour / (tokens_per_s * 3600.0) * 1e6
