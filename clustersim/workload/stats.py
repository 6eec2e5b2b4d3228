"""What a trace looks like: size, arrival rate and burstiness, lengths, request mix (pure)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from clustersim.workload.classify import count_classes
from clustersim.workload.replay import chain_block_hashes
from clustersim.workload.traces import Trace

PEAK_WINDOW_S = 60.0
REUSE_REQUESTS = (1, 10, 100, 1_000, 10_000)
"""How far back (in requests) ``prefix_reuse`` looks, cumulative."""
REUSE_SECONDS = (1.0, 10.0, 60.0, 600.0, 3600.0)
"""How far back (in seconds) ``prefix_reuse`` looks, cumulative."""


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
        **({} if trace.hash_ids is None or trace.arrival_s is None else {
            "prefix_reuse": prefix_reuse(trace.hash_ids, trace.prompt_tokens, trace.arrival_s,
                                         trace.hash_block_tokens)}),
    }


def prefix_reuse(
    block_ids: Sequence[Sequence[int]], prompt_tokens: np.ndarray, arrival_s: np.ndarray,
    block_tokens: int,
) -> dict[str, Any]:
    """How much of the prompts an unbounded prefix cache could serve: the share of prompt
    tokens in blocks that open an earlier prompt too (the same ids up to and including that
    block, as chained block hashes match), and that share counting only blocks last seen at
    most n requests or t seconds before (a cache that keeps blocks that long)::

        request 7   | a | b | c | d |     blocks a, b last seen in request 5 (2 back, 3 s);
        request 5   | a | b | x |         c, d in no earlier prompt: 2 of 4 blocks reused

    A prompt's last block may be partial: its tokens count, not ``block_tokens``."""
    last_request: dict[int, int] = {}
    last_s: dict[int, float] = {}
    back_requests: list[int] = []
    back_s: list[float] = []
    tokens: list[int] = []
    prompts = np.asarray(prompt_tokens).tolist()
    times = np.asarray(arrival_s, dtype=float).tolist()
    for i, ids in enumerate(block_ids):
        keys = chain_block_hashes(ids)
        now = times[i]
        for j, key in enumerate(keys):
            before = last_request.get(key)
            if before is None:
                break
            back_requests.append(i - before)
            back_s.append(now - last_s[key])
            tokens.append(min(block_tokens, prompts[i] - j * block_tokens))
        for key in keys:
            last_request[key] = i
            last_s[key] = now
    total = float(sum(prompts))
    reused = np.asarray(tokens, dtype=np.int64)
    requests_back = np.asarray(back_requests, dtype=np.int64)
    seconds_back = np.asarray(back_s, dtype=float)

    def share(mask: np.ndarray | None = None) -> float:
        return float(reused.sum() if mask is None else reused[mask].sum()) / total

    return {
        "block_tokens": block_tokens,
        "reused_share": share(),
        "within_requests": {str(n): share(requests_back <= n) for n in REUSE_REQUESTS},
        "within_s": {f"{t:g}": share(seconds_back <= t) for t in REUSE_SECONDS},
    }
