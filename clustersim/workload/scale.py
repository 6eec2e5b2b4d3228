"""One knob for the offered load of any open-loop workload: ``scale_rate`` and ``offered_rate``.

The planner bisects on the offered rate while the traffic keeps its shape, so scaling touches
only what sets the pace of arrivals and keeps every length, window and count::

    poisson, gamma, constant   rate_per_s x f                 (gamma keeps its cv)
    on_off                     both rates x f                 (on_s, off_s kept)
    rate_curve                 every rate x f                 (knot times kept)
    replay                     rate_multiplier x f            (window in trace time kept)
    explicit                   arrival_s / f, from time 0
    benchmark                  request_rate x f               (only without max_concurrency)
    prompt_pool                its arrivals, as synthetic's
    sessions                   the sessions' arrivals (offered_rate refuses them)
"""

from __future__ import annotations

import math
import os
from typing import Any

from clustersim.errors import ConfigError
from clustersim.validation import validate
from clustersim.workload import _table
from clustersim.workload.arrivals import rate_curve
from clustersim.workload.kinds import Workload
from clustersim.workload.replay import replay_requests
from clustersim.workload.spec import (
    Arrivals,
    BenchmarkWorkload,
    ClosedLoopArrivals,
    OnOffArrivals,
    PoissonWorkload,
    RateCurveArrivals,
    ReplayWorkload,
    SyntheticWorkload,
)
from clustersim.workload.spec_reuse import PromptPoolWorkload, SessionsWorkload

_CLOSED_LOOP = ("closed_loop arrivals have no offered rate (each user sends its next request "
                "when its answer is back): rate planning needs open-loop arrivals (poisson, "
                "gamma, constant, on_off or rate_curve)")
_BENCHMARK = ("a fixed-concurrency benchmark has no offered rate (its clients send when a "
              "concurrency slot frees up, at the server's pace): rate planning needs "
              "open-loop traffic (a finite request_rate and no max_concurrency, or a poisson "
              "or synthetic workload)")


_SESSIONS = ("sessions have no offered request rate (each request after a session's first is "
             "sent when the answer before it is back, at the server's pace): rate planning "
             "needs open-loop traffic (a prompt_pool, synthetic or poisson workload)")


def _open_benchmark(workload: BenchmarkWorkload) -> None:
    """Refuse a benchmark whose pace is not its own (ConfigError with the field)."""
    if workload.max_concurrency is not None:
        raise ConfigError("workload.max_concurrency", _BENCHMARK)
    if math.isinf(workload.request_rate):
        raise ConfigError("workload.request_rate", "an infinite request rate dispatches every "
                          "request at once: it has no offered rate to scale (give a finite "
                          "request_rate)")


def scale_rate(workload: Workload, factor: float) -> Workload:
    """``workload`` with its arrival rate multiplied by ``factor`` (> 0, finite), validated again.

    A burst of ``on_off`` keeps its duration and its intensity scales: the shape of the traffic
    over time (how long a spike lasts, when a diurnal peak comes) is part of the workload, and
    only its height is the load. ``num_requests`` and ``duration_s`` stay as given, so a
    count-bounded workload takes 1/factor as long, while a duration-bounded one keeps its length
    and brings about factor times as many requests. With the same seed, a count-bounded
    synthetic workload keeps its requests' lengths; a duration-bounded one in general does not
    (its arrivals are drawn first, from the same generator, and how many depends on the rate).
    Closed-loop arrivals, and a benchmark with ``max_concurrency`` or an infinite rate, have
    no offered rate (their pace is the server's): ConfigError.
    """
    if not (math.isfinite(factor) and factor > 0):
        raise ValueError(f"a rate factor must be positive and finite, got {factor}")
    if isinstance(workload, PoissonWorkload):
        return _revalidated(workload, rate_per_s=workload.rate_per_s * factor)
    if isinstance(workload, SyntheticWorkload | PromptPoolWorkload | SessionsWorkload):
        return _revalidated(workload, arrivals=_scaled_arrivals(workload.arrivals, factor))
    if isinstance(workload, ReplayWorkload):
        return _revalidated(workload, rate_multiplier=workload.rate_multiplier * factor)
    if isinstance(workload, BenchmarkWorkload):
        _open_benchmark(workload)
        return _revalidated(workload, request_rate=workload.request_rate * factor)
    # explicit
    return _revalidated(workload, requests=[
        request.model_copy(update={"arrival_s": request.arrival_s / factor})
        for request in workload.requests
    ])


def _scaled_arrivals(arrivals: Arrivals, factor: float) -> Arrivals:
    if isinstance(arrivals, ClosedLoopArrivals):
        raise ConfigError("workload.arrivals", _CLOSED_LOOP)
    if isinstance(arrivals, OnOffArrivals):
        return arrivals.model_copy(update={"on_rate_per_s": arrivals.on_rate_per_s * factor,
                                           "off_rate_per_s": arrivals.off_rate_per_s * factor})
    if isinstance(arrivals, RateCurveArrivals):
        points = [(time_s, rate * factor) for time_s, rate in arrivals.points]
        return arrivals.model_copy(update={"points": points})
    return arrivals.model_copy(update={"rate_per_s": arrivals.rate_per_s * factor})


def _revalidated(workload: Workload, **update: Any) -> Workload:
    """``workload`` with ``update`` applied and checked as a user's ``workload:`` would be."""
    copy = workload.model_copy(update=update)
    return validate(type(copy), copy.model_dump(), root="workload")


def offered_rate(
    workload: Workload,
    *,
    base_dir: str | os.PathLike | None = None,
    block_size: int = 16,
) -> float:
    """The mean arrival rate, requests/s, of the traffic the simulator generates from ``workload``.

    The rate of the arrival process, whatever ``num_requests`` or ``duration_s`` cut from it:
    ``rate_per_s``; for ``on_off`` the average over one on + off period; for ``rate_curve`` the
    average of r(t) over the traffic's span (``duration_s``, else the period, else up to the
    last point). ``replay`` and ``explicit`` count their requests: the inverse of the mean gap
    between the first and the last arrival, (n - 1) / span, which is exactly the rate of evenly
    spaced arrivals. An open-loop ``benchmark`` offers its ``request_rate``. ``base_dir`` and
    ``block_size`` are :func:`build_requests`'s.
    """
    if isinstance(workload, PoissonWorkload):
        return workload.rate_per_s
    if isinstance(workload, SyntheticWorkload | PromptPoolWorkload):
        return _process_rate(workload)
    if isinstance(workload, SessionsWorkload):
        raise ConfigError("workload.kind", _SESSIONS)
    if isinstance(workload, ReplayWorkload):
        requests = replay_requests(workload, _table(workload, base_dir), block_size)
        return _rate_of([r.arrival_s for r in requests], "workload")
    if isinstance(workload, BenchmarkWorkload):
        _open_benchmark(workload)
        return workload.request_rate
    # explicit
    return _rate_of([r.arrival_s for r in workload.requests], "workload.requests")


def _process_rate(workload: SyntheticWorkload | PromptPoolWorkload) -> float:
    arrivals = workload.arrivals
    if isinstance(arrivals, ClosedLoopArrivals):
        raise ConfigError("workload.arrivals", _CLOSED_LOOP)
    if isinstance(arrivals, OnOffArrivals):
        period_s = arrivals.on_s + arrivals.off_s
        return (arrivals.on_rate_per_s * arrivals.on_s
                + arrivals.off_rate_per_s * arrivals.off_s) / period_s
    if isinstance(arrivals, RateCurveArrivals):
        span_s = workload.duration_s or arrivals.period_s or arrivals.points[-1][0]
        if span_s == 0:  # one point at time 0 and no period: its rate holds for ever
            return arrivals.points[0][1]
        return rate_curve(arrivals).cumulative(span_s) / span_s
    return arrivals.rate_per_s


def _rate_of(arrivals_s: list[float], path: str) -> float:
    if len(arrivals_s) < 2:
        raise ConfigError(path, "a single request has no arrival rate: give two or more")
    span_s = max(arrivals_s) - min(arrivals_s)
    if span_s == 0:
        raise ConfigError(path, f"all {len(arrivals_s)} requests arrive at {arrivals_s[0]} s: "
                          "requests arriving at one time have no rate")
    return (len(arrivals_s) - 1) / span_s
