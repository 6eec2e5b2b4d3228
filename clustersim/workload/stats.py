"""What a trace looks like: size, arrival rate and burstiness, lengths, request mix (pure)."""

from __future__ import annotations

from typing import Any

import numpy as np

from clustersim.workload.classify import count_classes
from clustersim.workload.traces import Trace

PEAK_WINDOW_S = 60.0


def _summary(values: np.ndarray) -> dict[str, float]:
    # numpy's default (linear) percentiles, as pandas computes them.
    return {
        "mean": float(values.mean()),
        "p50": float(np.percentile(values, 50)),
        "p99": float(np.percentile(values, 99)),
        "max": float(values.max()),
    }


def trace_stats(trace: Trace, long_prompt_threshold: int = 2048) -> dict[str, Any]:
    """The figures ``clustersim trace stats`` prints, as plain data.

    The mean rate is requests / (last arrival - first arrival); the peak minute counts arrivals
    in 60 s buckets aligned to the first arrival; burstiness is the coefficient of variation of
    the gaps between arrivals (1 for Poisson). Arrival figures are None for a length-only table.
    """
    n = len(trace)
    arrival: dict[str, Any] = dict.fromkeys(
        ("span_s", "mean_rate_per_s", "peak_minute_requests", "peak_minute_rate_per_s",
         "interarrival_cv"))
    if trace.arrival_s is not None:
        times = trace.arrival_s
        span = float(times[-1] - times[0])
        peak = int(np.bincount(((times - times[0]) // PEAK_WINDOW_S).astype(np.int64)).max())
        gaps = np.diff(times)
        arrival = {
            "span_s": span,
            "mean_rate_per_s": n / span if span > 0 else None,
            "peak_minute_requests": peak,
            "peak_minute_rate_per_s": peak / PEAK_WINDOW_S,
            "interarrival_cv": float(gaps.std() / gaps.mean()) if gaps.size and gaps.mean() > 0
            else None,
        }
    return {
        "source": trace.source,
        "format": trace.format,
        "num_requests": n,
        "num_dropped": trace.num_dropped,
        **arrival,
        "prompt_tokens": _summary(trace.prompt_tokens),
        "output_tokens": _summary(trace.output_tokens),
        "mix": {"long_prompt_threshold": long_prompt_threshold,
                **count_classes(trace.prompt_tokens, trace.output_tokens, long_prompt_threshold)},
    }
