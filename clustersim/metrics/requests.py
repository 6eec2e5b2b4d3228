"""Per-request latencies and the distributions over them, as defined in reference/metrics.md.

* TTFT = first output token - arrival; E2E = last output token - arrival.
* TPOT = (E2E - TTFT) / (output_tokens - 1), undefined for one-token outputs.
* ITL samples = gaps between consecutive output tokens of a request.
* Percentiles: numpy ``percentile(..., method="linear")``.

Every verdict of a run (joint attainment, marginal percentiles, means) reads the same
:class:`RequestTable`, built in one pass over the requests.
"""

from __future__ import annotations

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


def request_metrics(request: Request) -> RequestMetrics:
    if request.status is not RequestStatus.FINISHED or request.first_token_s is None:
        return RequestMetrics(None, None, None, None)
    ttft = request.first_token_s - request.arrival_s
    e2e = request.finish_s - request.arrival_s
    n = request.num_output_tokens
    tpot = (e2e - ttft) / (n - 1) if n > 1 else None
    itl_p99 = None
    if n > 1:
        itl_p99 = float(np.percentile(np.diff(request.token_times_s), 99))
    return RequestMetrics(ttft, tpot, e2e, itl_p99)


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

    def percentile(self, p: int) -> float | None:
        return getattr(self, f"p{p}")

    def to_json(self) -> dict[str, float | int | None]:
        return {"mean": self.mean, "p50": self.p50, "p90": self.p90, "p95": self.p95,
                "p99": self.p99, "count": self.count}


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
    def of(cls, requests: list[Request]) -> RequestTable:
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
            m = request_metrics(r)
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
    """Every gap between consecutive output tokens of the finished requests, pooled."""
    gaps = [np.diff(r.token_times_s) for r in requests
            if r.status is RequestStatus.FINISHED and len(r.token_times_s) > 1]
    return np.concatenate(gaps) if gaps else np.empty(0)
