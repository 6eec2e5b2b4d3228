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
from array import array
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from itertools import chain
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
        order and with repeats (see :meth:`of_chunks`)."""
        return cls.of_chunks([lambda: (values, counts)])

    @classmethod
    def of_chunks(cls, chunks: Sequence[Callable[[], tuple[np.ndarray, np.ndarray]]]
                  ) -> Distribution:
        """The distribution of a multiset of non-negative values given in pieces, each a
        function returning ``(values, counts)`` (called twice, so that no more than one piece
        is held at a time). Percentiles as ``Distribution.of`` on the expanded sample; the
        mean is the exact sum rounded once, divided by the count, so any grouping or order of
        the same multiset gives the same bits.

        Pieces of up to ``_SORT_AT_ONCE`` entries in all are kept from the first pass and
        sorted together. Larger multisets are not sorted whole: the first pass counts the
        values per coarse bucket of their bit pattern (which orders non-negative doubles), a
        second sorts only the buckets the wanted ranks fall in."""
        histogram = np.zeros(0)  # the coarse buckets' counts, once the pieces are large
        # the pieces while they hold at most _SORT_AT_ONCE entries in all: the order
        # statistics then come from one sort, without the buckets' fixed cost
        kept: list[tuple[np.ndarray, np.ndarray]] | None = []
        num_kept = 0
        n = 0

        def count(values: np.ndarray, counts: np.ndarray) -> None:
            histogram[:] += np.bincount(_bucket(values), weights=counts,
                                        minlength=_NUM_BUCKETS)

        def products():
            nonlocal n, kept, num_kept, histogram
            for chunk in chunks:
                values, counts = _checked(*chunk())
                if not values.size:
                    continue
                n += int(counts.sum())
                if kept is None:
                    count(values, counts)
                else:
                    kept.append((values, counts))
                    num_kept += values.size
                    if num_kept > _SORT_AT_ONCE:  # too many to hold: the buckets from here
                        histogram = np.zeros(_NUM_BUCKETS, dtype=np.float64)  # exact < 2**53
                        for piece in kept:
                            count(*piece)
                        kept = None
                for start in range(0, len(values), _TERMS_AT_ONCE):  # bounded Python floats
                    stop = start + _TERMS_AT_ONCE
                    yield _exact_terms(values[start:stop], counts[start:stop]).tolist()

        total = math.fsum(chain.from_iterable(products()))
        if n == 0:
            return cls(None, None, None, None, None, 0)
        wanted: dict[int, float] = {}
        plan = []
        for p in PERCENTILES:
            virtual = (n - 1) * (p / 100)
            if virtual >= n - 1:
                plan.append((n - 1, None, 0.0))
                wanted[n - 1] = math.nan
                continue
            below = math.floor(virtual)
            plan.append((below, below + 1, virtual - below))
            wanted[below] = wanted[below + 1] = math.nan
        if kept is not None:
            _sorted_order_statistics(kept, wanted)
        else:
            _order_statistics(chunks, np.cumsum(histogram), wanted)
        quantiles = [wanted[lo] if hi is None else _lerp(wanted[lo], wanted[hi], t)
                     for lo, hi, t in plan]
        p50, p90, p95, p99 = quantiles
        return cls(total / n, p50, p90, p95, p99, n)

    def percentile(self, p: int) -> float | None:
        return getattr(self, f"p{p}")

    def to_json(self) -> dict[str, float | int | None]:
        return {"mean": self.mean, "p50": self.p50, "p90": self.p90, "p95": self.p95,
                "p99": self.p99, "count": self.count}


_SORT_AT_ONCE = 1 << 18
"""Distinct entries (values with their counts) a distribution sorts in one piece; beyond
that it finds its order statistics in buckets, holding one piece at a time."""
_TERMS_AT_ONCE = 1 << 16
"""Values turned into Python floats for ``math.fsum`` at a time."""
_BUCKET_BITS = 18
_FINE_SHIFT = 63 - 2 * _BUCKET_BITS
"""Order statistics are located in two levels of 2**18 buckets of the values' bit patterns
(which order non-negative doubles): the top 18 bits, then the next 18."""
_COARSE_SHIFT = _FINE_SHIFT + _BUCKET_BITS
_NUM_BUCKETS = 1 << _BUCKET_BITS
_FINE_MASK = _NUM_BUCKETS - 1


def _bucket(values: np.ndarray) -> np.ndarray:
    return values.view(np.int64) >> _COARSE_SHIFT


def _checked(values: Any, counts: Any) -> tuple[np.ndarray, np.ndarray]:
    values = np.ascontiguousarray(values, dtype=np.float64)
    counts = np.asarray(counts, dtype=np.int64)
    keep = counts > 0
    if not keep.all():
        values, counts = values[keep], counts[keep]
    if values.size and not (values >= 0).all():  # also refuses NaN
        raise ValueError("a multiset of gaps holds only non-negative values")
    return values, counts


def _sorted_order_statistics(pieces: list[tuple[np.ndarray, np.ndarray]],
                             wanted: dict[int, float]) -> None:
    """Fill ``wanted`` (0-based rank -> value of the sorted expanded multiset) from all the
    pieces at once: one sort of the values, the counts summed along it."""
    values = np.concatenate([v for v, _ in pieces])
    counts = np.concatenate([c for _, c in pieces])
    order = np.argsort(values, kind="stable")
    values, within = values[order], np.cumsum(counts[order])
    ranks = np.fromiter(wanted, dtype=np.int64)
    at = np.searchsorted(within, ranks, side="right")
    for rank, index in zip(ranks.tolist(), at.tolist(), strict=True):
        wanted[rank] = float(values[index])


def _order_statistics(chunks, cumulative: np.ndarray, wanted: dict[int, float]) -> None:
    """Fill ``wanted`` (0-based rank -> value of the sorted expanded multiset), given the
    cumulative counts of the coarse buckets: a pass for the fine buckets inside the coarse
    ones the ranks fall in, a pass collecting (distinct) values of the fine ones."""
    coarse: dict[int, list[int]] = {}
    for rank in wanted:
        coarse.setdefault(int(np.searchsorted(cumulative, rank, side="right")), []).append(rank)
    fine_counts = {b: np.zeros(_NUM_BUCKETS) for b in coarse}
    coarse_keys = np.fromiter(coarse, dtype=np.int64)
    for chunk in chunks:
        values, counts = _checked(*chunk())
        bits = values.view(np.int64)
        top = bits >> _COARSE_SHIFT
        for b in coarse_keys[np.isin(coarse_keys, top)]:
            inside = top == b
            fine_counts[int(b)] += np.bincount((bits[inside] >> _FINE_SHIFT) & _FINE_MASK,
                                               weights=counts[inside], minlength=_NUM_BUCKETS)
    located: dict[int, list[tuple[int, float]]] = {}  # fine key -> (rank, count before it)
    for b, ranks in coarse.items():
        within = np.cumsum(fine_counts[b])
        before = cumulative[b - 1] if b else 0.0
        for rank in ranks:
            f = int(np.searchsorted(within, rank - before, side="right"))
            key = (b << _BUCKET_BITS) | f
            located.setdefault(key, []).append((rank, before + (within[f - 1] if f else 0.0)))
    keys = np.fromiter(located, dtype=np.int64)
    picked: dict[int, tuple[list[np.ndarray], list[np.ndarray]]] = {k: ([], []) for k in located}
    for chunk in chunks:
        values, counts = _checked(*chunk())
        fine = values.view(np.int64) >> _FINE_SHIFT
        for key in keys[np.isin(keys, fine)]:
            inside = fine == key
            distinct, index = np.unique(values[inside], return_inverse=True)
            picked[int(key)][0].append(distinct)
            picked[int(key)][1].append(np.bincount(index, weights=counts[inside]))
    for key, targets in located.items():
        values = np.concatenate(picked[key][0])
        counts = np.concatenate(picked[key][1])
        order = np.argsort(values, kind="stable")
        values, within = values[order], np.cumsum(counts[order])
        for rank, before in targets:
            wanted[rank] = float(values[np.searchsorted(within, rank - before, side="right")])


_SPLIT = 134217729.0  # 2**27 + 1: Veltkamp's split of a double into two 26-bit halves
_LOW_BITS = (1 << 26) - 1


def _exact_terms(values: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Doubles whose exact sum is ``sum(values * counts)``: every value split into two halves
    of at most 26 significant bits (and counts of 2**26 or more into two parts), so that
    every product is exact."""
    scaled = values * _SPLIT
    high = scaled - (scaled - values)
    low = values - high
    if int(counts.max()) <= _LOW_BITS:
        weight = counts.astype(float)
        return np.concatenate((high * weight, low * weight))
    counts_low = (counts & _LOW_BITS).astype(float)
    counts_high = (counts - (counts & _LOW_BITS)).astype(float)
    return np.concatenate((high * counts_low, low * counts_low,
                           high * counts_high, low * counts_high))


def exact_sum(values: np.ndarray, counts: np.ndarray) -> float:
    """``sum(v * c)`` correctly rounded (``math.fsum`` over exact products)."""
    values, counts = _checked(values, counts)
    if not values.size:
        return 0.0
    return math.fsum(_exact_terms(values, counts).tolist())


# -------------------------------------------------------------- token times
def token_gaps(request: Request) -> np.ndarray:
    """Gaps between the request's consecutive output tokens, in order."""
    kept = request.kept_token_times()
    if kept:
        return np.diff(np.asarray(kept))
    return streak_gaps(request.token_clock, request.token_streaks)


def streak_gaps(clock: Any, streaks: Any) -> np.ndarray:
    """Gaps between consecutive output tokens of a lean run's request: its runs of tokens
    ``streaks`` (first, last step index pairs) on its engine's ``clock``."""
    if not streaks:
        return np.empty(0)
    times = np.asarray(clock)
    return np.diff(np.concatenate([times[streaks[k]:streaks[k + 1] + 1]
                                   for k in range(0, len(streaks), 2)]))


def pooled_gaps(requests: Iterable[Request]) -> list[Callable[[], tuple[np.ndarray, np.ndarray]]]:
    """Every gap between consecutive output tokens of the finished requests
    (:class:`PooledGaps`)."""
    gaps = PooledGaps()
    for r in requests:
        if r.status is RequestStatus.FINISHED:
            gaps.add(r)
    return gaps.pieces()


class PooledGaps:
    """Every gap between consecutive output tokens of the requests added, as pieces of a
    multiset (``Distribution.of_chunks``, whose figures do not depend on the order): kept
    token times give their gaps one by one; a lean run's requests give, per engine clock, how
    many of them produced tokens in each pair of consecutive steps (a difference array over
    their runs), plus one gap per break. The clocks are read by :meth:`pieces`, once the run
    has ended; requests may be added as they finish and dropped."""

    def __init__(self) -> None:
        self._kept: list[array] = []
        self._by_clock: dict[int, tuple[Any, array, array, array]] = {}
        """id(clock) -> (clock, run firsts, run lasts, (last, next first) of each break):
        typed arrays, for a million requests."""

    def add(self, r: Request) -> None:
        """A finished request's tokens."""
        kept = r.kept_token_times()
        if kept:
            if len(kept) > 1:
                self._kept.append(kept)
            return
        if r.token_run_last < 0:
            return
        entry = self._by_clock.get(id(r.token_clock))
        if entry is None:
            entry = self._by_clock[id(r.token_clock)] = (
                r.token_clock, array("q"), array("q"), array("q"))
        _, firsts, lasts, breaks = entry
        if r.token_runs_before:
            runs = r.token_streaks
            assert runs is not None
            for k in range(0, len(runs), 2):
                first, last = runs[k], runs[k + 1]
                if last > first:
                    firsts.append(first)
                    lasts.append(last)
                if k:
                    breaks.append(runs[k - 1])
                    breaks.append(first)
        elif r.token_run_last > r.token_run_first:
            firsts.append(r.token_run_first)
            lasts.append(r.token_run_last)

    def pieces(self) -> list[Callable[[], tuple[np.ndarray, np.ndarray]]]:
        odd = []
        for clock, _, _, breaks in self._by_clock.values():
            if breaks:
                times, ends = np.asarray(clock), np.frombuffer(breaks, dtype=np.int64)
                odd.append(times[ends[1::2]] - times[ends[0::2]])
        pieces: list[Callable[[], tuple[np.ndarray, np.ndarray]]] = []
        singles = self._kept
        if singles or odd:
            values = np.empty(sum(len(t) - 1 for t in singles) + sum(len(o) for o in odd))
            start = 0
            for times in singles:  # each request's gaps, written in place
                t = np.asarray(times)
                np.subtract(t[1:], t[:-1], out=values[start:start + len(t) - 1])
                start += len(t) - 1
            for o in odd:
                values[start:start + len(o)] = o
                start += len(o)
            pieces.append(lambda: (values, np.ones(len(values), dtype=np.int64)))
        for clock, firsts, lasts, _ in self._by_clock.values():
            pieces.append(partial(_clock_gaps, clock, firsts, lasts))
        return pieces


def _clock_gaps(clock: Any, firsts: array, lasts: array) -> tuple[np.ndarray, np.ndarray]:
    """One engine's step gaps and how many runs of tokens span each."""
    times = np.asarray(clock)
    cover = np.zeros(len(times), dtype=np.int64)
    np.add.at(cover, np.frombuffer(firsts, dtype=np.int64), 1)
    np.add.at(cover, np.frombuffer(lasts, dtype=np.int64), -1)
    return np.diff(times), np.cumsum(cover)[:-1]


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
    retries: np.ndarray | None = None
    """Times each request was sent again after a failure lost it (None: none ever was)."""

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
        retries = None
        for i, r in enumerate(requests):
            arrival[i] = r.arrival_s
            prompt[i] = r.num_prompt_tokens
            if r.num_retries:
                if retries is None:
                    retries = np.zeros(n, dtype=np.int64)
                retries[i] = r.num_retries
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
        return cls(arrival, finished, ttft, tpot, e2e, itl, prompt, output, retries)

    def __len__(self) -> int:
        return len(self.arrival_s)

    def where(self, mask: np.ndarray) -> RequestTable:
        """The rows where ``mask`` holds."""
        return RequestTable(self.arrival_s[mask], self.finished[mask], self.ttft_s[mask],
                            self.tpot_s[mask], self.e2e_s[mask], self.itl_p99_s[mask],
                            self.prompt_tokens[mask], self.output_tokens[mask],
                            None if self.retries is None else self.retries[mask])

    def column(self, metric: str) -> np.ndarray:
        """``ttft_s``, ``tpot_s``, ``e2e_s`` or ``itl_s`` (each request's p99 ITL)."""
        return self.itl_p99_s if metric == "itl_s" else getattr(self, metric)

    def defined(self, metric: str) -> np.ndarray:
        values = self.column(metric)
        return values[~np.isnan(values)]


def itl_samples(requests: list[Request]) -> np.ndarray:
    """Every gap between consecutive output tokens of the finished requests, expanded (in no
    particular order); :func:`pooled_gaps` gives the same sample in pieces."""
    pieces = [piece() for piece in pooled_gaps(requests)]
    if not pieces:
        return np.empty(0)
    return np.concatenate([np.repeat(v, c) for v, c in pieces])
