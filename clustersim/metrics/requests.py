"""Per-request latencies and the distributions over them, as defined in reference/metrics.md.

* TTFT = first output token - arrival; E2E = last output token - arrival.
* TPOT = (E2E - TTFT) / (output_tokens - 1), undefined for one-token outputs.
* ITL samples = gaps between consecutive output tokens of a request.
* Percentiles: numpy ``percentile(..., method="linear")``.

Every verdict of a run (joint attainment, marginal percentiles, means) reads the same
:class:`RequestTable`, built in one pass over the requests.

A request's token times come in one of two forms: every time kept (``token_times_s``, a full
run), or, in a lean run, its tokens as runs of consecutive steps of its engine's
``token_clock`` (the end time of every step the engine applied). :func:`token_gaps` and
:func:`pooled_gaps` read either, and give the same gaps bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from clustersim.engine.request import Request, RequestStatus

PERCENTILES = (50, 90, 95, 99)


@dataclass(frozen=True, slots=True)
class RequestMetrics:
    ttft_s: float | None
    tpot_s: float | None
    e2e_s: float | None
    itl_p99_s: float | None


def request_metrics(request: Request, with_itl: bool = True) -> RequestMetrics:
    """``with_itl=False`` skips the p99 inter-token gap (``itl_p99_s`` None)."""
    if request.status is not RequestStatus.FINISHED or request.first_token_s is None:
        return RequestMetrics(None, None, None, None)
    ttft = request.first_token_s - request.arrival_s
    e2e = request.finish_s - request.arrival_s
    n = request.num_output_tokens
    tpot = (e2e - ttft) / (n - 1) if n > 1 else None
    itl_p99 = None
    if n > 1 and with_itl:
        itl_p99 = linear_percentile(token_gaps(request), 99)
    return RequestMetrics(ttft, tpot, e2e, itl_p99)


def linear_percentile(data: np.ndarray, p: float) -> float:
    """``float(np.percentile(data, p))`` (method "linear") of a non-empty 1-d float array, bit
    for bit, from the two order statistics it interpolates between (no full sort)."""
    n = len(data)
    virtual = (n - 1) * (p / 100)
    if virtual >= n - 1:
        return float(data.max())
    below = math.floor(virtual)
    part = np.partition(data, (below, below + 1))
    return _lerp(float(part[below]), float(part[below + 1]), virtual - below)


def _lerp(a: float, b: float, t: float) -> float:
    """numpy's ``_lerp``: from ``a`` for t < 0.5, back from ``b`` otherwise."""
    diff = b - a
    if t >= 0.5:
        return b - diff * (1 - t)
    return a + diff * t


@dataclass(frozen=True, slots=True)
class Distribution:
    """Mean and p50/p90/p95/p99 of a sample (all None when it is empty)."""

    mean: float | None
    p50: float | None
    p90: float | None
    p95: float | None
    p99: float | None
    count: int

    @classmethod
    def of(cls, values: Any) -> Distribution:
        data = np.asarray(values, dtype=float)
        if data.size == 0:
            return cls(None, None, None, None, None, 0)
        p50, p90, p95, p99 = (
            float(v) for v in np.percentile(data, PERCENTILES, method="linear")
        )
        return cls(float(data.mean()), p50, p90, p95, p99, int(data.size))

    @classmethod
    def of_counts(cls, values: np.ndarray, counts: np.ndarray) -> Distribution:
        """The distribution of a multiset: ``values[i]`` occurring ``counts[i]`` times, in any
        order and with repeats. Percentiles as ``Distribution.of`` on the expanded sample; the
        mean is the exactly rounded one, so any grouping of the same multiset gives the same
        bits."""
        values, counts = _canonical(values, counts)
        n = int(counts.sum())
        if n == 0:
            return cls(None, None, None, None, None, 0)
        cumulative = np.cumsum(counts)

        def at(rank: int) -> float:  # the value at 0-based position ``rank`` of the sorted sample
            return float(values[np.searchsorted(cumulative, rank, side="right")])

        quantiles = []
        for p in PERCENTILES:
            virtual = (n - 1) * (p / 100)
            if virtual >= n - 1:
                quantiles.append(float(values[-1]))
                continue
            below = math.floor(virtual)
            quantiles.append(_lerp(at(below), at(below + 1), virtual - below))
        p50, p90, p95, p99 = quantiles
        return cls(exact_sum(values, counts) / n, p50, p90, p95, p99, n)

    def percentile(self, p: int) -> float | None:
        return getattr(self, f"p{p}")

    def to_json(self) -> dict[str, float | int | None]:
        return {"mean": self.mean, "p50": self.p50, "p90": self.p90, "p95": self.p95,
                "p99": self.p99, "count": self.count}


def _canonical(values: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct values in increasing order, each with its total count (zero counts dropped)."""
    values = np.asarray(values, dtype=float)
    counts = np.asarray(counts, dtype=np.int64)
    keep = counts > 0
    values, counts = values[keep], counts[keep]
    if not values.size:
        return values, counts
    order = np.argsort(values, kind="stable")
    values, counts = values[order], counts[order]
    starts = np.flatnonzero(np.concatenate(([True], values[1:] != values[:-1])))
    return values[starts], np.add.reduceat(counts, starts)


_SPLIT = 134217729.0  # 2**27 + 1: Veltkamp's split of a double into two 26-bit halves
_LOW_BITS = (1 << 26) - 1


def exact_sum(values: np.ndarray, counts: np.ndarray) -> float:
    """``sum(v * c)`` correctly rounded: each product is written as four exact doubles (values
    and counts each split into halves of at most 26 significant bits) and ``math.fsum`` adds
    them without error."""
    if not values.size:
        return 0.0
    scaled = values * _SPLIT
    high = scaled - (scaled - values)
    low = values - high
    counts = np.asarray(counts, dtype=np.int64)
    counts_low = (counts & _LOW_BITS).astype(float)
    counts_high = (counts - (counts & _LOW_BITS)).astype(float)
    return math.fsum(np.concatenate((high * counts_low, low * counts_low,
                                     high * counts_high, low * counts_high)))


# -------------------------------------------------------------- token times
def token_gaps(request: Request) -> np.ndarray:
    """Gaps between the request's consecutive output tokens, in order."""
    if len(request.token_times_s):
        return np.diff(np.asarray(request.token_times_s))
    streaks = request.token_streaks
    if not streaks:
        return np.empty(0)
    clock = np.asarray(request.token_clock)
    return np.diff(np.concatenate([clock[streaks[k]:streaks[k + 1] + 1]
                                   for k in range(0, len(streaks), 2)]))


def pooled_gaps(requests: Iterable[Request]) -> tuple[np.ndarray, np.ndarray]:
    """Every gap between consecutive output tokens of the finished requests, as a multiset
    (values, counts). Kept token times contribute their gaps one by one; a lean run's
    requests contribute, per engine clock, how many of them produced tokens in each pair of
    consecutive steps (a difference array over their runs), plus one gap per break."""
    singles: list[np.ndarray] = []
    odd: list[float] = []
    by_clock: dict[int, tuple[Any, list[int], list[int]]] = {}
    for r in requests:
        if r.status is not RequestStatus.FINISHED:
            continue
        if len(r.token_times_s) > 1:
            singles.append(np.diff(np.asarray(r.token_times_s)))
            continue
        streaks = r.token_streaks
        if not streaks:
            continue
        entry = by_clock.get(id(r.token_clock))
        if entry is None:
            entry = by_clock[id(r.token_clock)] = (r.token_clock, [], [])
        clock, firsts, lasts = entry
        for k in range(0, len(streaks), 2):
            first, last = streaks[k], streaks[k + 1]
            if last > first:
                firsts.append(first)
                lasts.append(last)
            if k:
                odd.append(clock[first] - clock[streaks[k - 1]])
    values = [*singles, np.asarray(odd, dtype=float)]
    counts = [np.ones(len(v), dtype=np.int64) for v in values]
    for clock, firsts, lasts in by_clock.values():
        times = np.asarray(clock)
        cover = np.zeros(len(times), dtype=np.int64)
        np.add.at(cover, firsts, 1)
        np.add.at(cover, lasts, -1)
        values.append(np.diff(times))
        counts.append(np.cumsum(cover)[:-1])
    return np.concatenate(values), np.concatenate(counts)


@dataclass(frozen=True, slots=True)
class RequestTable:
    """One row per arrived request, columns as arrays; NaN where a metric is undefined
    (rejected requests have no latencies, one-token outputs no TPOT or ITL)."""

    arrival_s: np.ndarray
    finished: np.ndarray
    """bool: finished (the others were rejected)."""
    ttft_s: np.ndarray
    tpot_s: np.ndarray
    e2e_s: np.ndarray
    itl_p99_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray

    @classmethod
    def of(cls, requests: list[Request], with_itl: bool = True) -> RequestTable:
        """``with_itl=False`` leaves ``itl_p99_s`` NaN (it is only read by an ITL limit)."""
        n = len(requests)
        nan = float("nan")
        arrival = np.empty(n)
        finished = np.zeros(n, dtype=bool)
        ttft, tpot, e2e, itl = (np.full(n, nan) for _ in range(4))
        prompt = np.empty(n, dtype=np.int64)
        output = np.zeros(n, dtype=np.int64)
        for i, r in enumerate(requests):
            arrival[i] = r.arrival_s
            prompt[i] = r.num_prompt_tokens
            m = request_metrics(r, with_itl)
            if m.ttft_s is None:
                continue
            finished[i] = True
            output[i] = r.num_output_tokens
            ttft[i], e2e[i] = m.ttft_s, m.e2e_s
            if m.tpot_s is not None:
                tpot[i] = m.tpot_s
            if m.itl_p99_s is not None:
                itl[i] = m.itl_p99_s
        return cls(arrival, finished, ttft, tpot, e2e, itl, prompt, output)

    def __len__(self) -> int:
        return len(self.arrival_s)

    def column(self, metric: str) -> np.ndarray:
        """``ttft_s``, ``tpot_s``, ``e2e_s`` or ``itl_s`` (each request's p99 ITL)."""
        return self.itl_p99_s if metric == "itl_s" else getattr(self, metric)

    def defined(self, metric: str) -> np.ndarray:
        values = self.column(metric)
        return values[~np.isnan(values)]


def itl_samples(requests: list[Request]) -> np.ndarray:
    """Every gap between consecutive output tokens of the finished requests, expanded (in no
    particular order); :func:`pooled_gaps` gives the same sample as a multiset."""
    values, counts = pooled_gaps(requests)
    return np.repeat(values, counts)
