"""Per-request latencies and the run summary, as defined in reference/metrics.md.

* TTFT = first output token - arrival; E2E = last output token - arrival.
* TPOT = (E2E - TTFT) / (output_tokens - 1), undefined for one-token outputs.
* ITL samples = gaps between consecutive output tokens of a request.
* Percentiles: numpy ``percentile(..., method="linear")``.
* SLO attainment: share of *all* arrived requests meeting every SLO term; rejected ones miss.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from clustersim.engine.instance import StepRecord
from clustersim.engine.request import Request, RequestStatus
from clustersim.scenario import SLO

PERCENTILES = (50, 90, 95, 99)
DEFINITIONS = (
    "TTFT = first output token - arrival; TPOT = (E2E - TTFT) / (output tokens - 1), "
    "one-token outputs excluded; ITL = gaps between consecutive tokens of a request, pooled; "
    "E2E = last token - arrival; percentiles numpy linear; attainment = share of all arrived "
    "requests meeting every SLO term (rejected requests miss); throughput over first to last "
    "arrival (first arrival to last finish when they coincide); utilization and KV usage over "
    "first arrival to end of the last step."
)


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


def distribution(values: Any) -> dict[str, float | None]:
    data = np.asarray(values, dtype=float)
    if data.size == 0:
        return {"mean": None, **{f"p{p}": None for p in PERCENTILES}, "count": 0}
    stats: dict[str, float | None] = {"mean": float(data.mean())}
    for p, v in zip(PERCENTILES, np.percentile(data, PERCENTILES, method="linear"), strict=True):
        stats[f"p{p}"] = float(v)
    stats["count"] = int(data.size)
    return stats


def attains(metrics: RequestMetrics, slo: SLO) -> bool:
    if metrics.ttft_s is None:
        return False
    if slo.ttft_s is not None and metrics.ttft_s > slo.ttft_s:
        return False
    if slo.tpot_s is not None and metrics.tpot_s is not None and metrics.tpot_s > slo.tpot_s:
        return False
    return not (
        slo.itl_s is not None and metrics.itl_p99_s is not None and metrics.itl_p99_s > slo.itl_s
    )


def summarize(
    requests: list[Request],
    steps: list[StepRecord],
    usable_blocks: dict[str, int],
    slo: SLO | None = None,
) -> dict[str, Any]:
    """The run's summary.json content."""
    per_request = [request_metrics(r) for r in requests]
    finished = [r for r in requests if r.status is RequestStatus.FINISHED]
    rejected = Counter(r.reject_reason for r in requests if r.status is RequestStatus.REJECTED)

    arrivals = [r.arrival_s for r in requests]
    first_arrival = min(arrivals) if arrivals else 0.0
    last_arrival = max(arrivals) if arrivals else 0.0
    last_finish = max((r.finish_s for r in requests if r.finish_s is not None), default=0.0)
    end_s = max([last_finish, *(s.end_s for s in steps)], default=0.0)
    window = last_arrival - first_arrival
    if window <= 0:
        window = last_finish - first_arrival
    span = end_s - first_arrival

    prompt_tokens = sum(r.num_prompt_tokens for r in finished)
    output_tokens = sum(r.num_output_tokens for r in finished)
    itl_samples = (
        np.concatenate([np.diff(r.token_times_s) for r in finished if len(r.token_times_s) > 1])
        if any(len(r.token_times_s) > 1 for r in finished)
        else np.empty(0)
    )

    summary: dict[str, Any] = {
        "num_requests": len(requests),
        "num_finished": len(finished),
        "num_rejected": sum(rejected.values()),
        "rejections": dict(sorted(rejected.items())),
        "window_s": window,
        "makespan_s": span,
        "throughput": {
            "requests_per_s": len(finished) / window if window > 0 else None,
            "prompt_tokens_per_s": prompt_tokens / window if window > 0 else None,
            "output_tokens_per_s": output_tokens / window if window > 0 else None,
        },
        "ttft_s": distribution([m.ttft_s for m in per_request if m.ttft_s is not None]),
        "tpot_s": distribution([m.tpot_s for m in per_request if m.tpot_s is not None]),
        "itl_s": distribution(itl_samples),
        "e2e_s": distribution([m.e2e_s for m in per_request if m.e2e_s is not None]),
        "num_preemptions": sum(r.num_preemptions for r in requests),
        "num_preempted_requests": sum(1 for r in requests if r.num_preemptions),
    }
    handed_off = [r for r in requests if r.handoff_end_s is not None]
    if handed_off:
        summary["handoff_s"] = distribution(
            [r.handoff_end_s - r.handoff_start_s for r in handed_off]
        )
        summary["handoff_bytes"] = sum(r.handoff_bytes for r in handed_off)
    if slo is not None:
        met = sum(1 for m in per_request if attains(m, slo))
        summary["slo"] = {
            **slo.model_dump(exclude_none=True),
            "attainment": met / len(requests) if requests else None,
        }
    summary["instances"] = [
        _instance_summary(name, [s for s in steps if s.instance == name], blocks, span)
        for name, blocks in usable_blocks.items()
    ]
    summary["definitions"] = DEFINITIONS
    return summary


def _instance_summary(
    name: str, steps: list[StepRecord], usable_blocks: int, span_s: float
) -> dict[str, Any]:
    busy = sum(s.end_s - s.start_s for s in steps)
    kv_time = sum(s.kv_blocks_used * (s.end_s - s.start_s) for s in steps)
    peak = max((s.kv_blocks_used for s in steps), default=0)
    return {
        "name": name,
        "num_steps": len(steps),
        "busy_s": busy,
        "utilization": busy / span_s if span_s > 0 else None,
        "kv_usage_mean": kv_time / (span_s * usable_blocks) if span_s > 0 else None,
        "kv_usage_peak": peak / usable_blocks,
        "usable_kv_blocks": usable_blocks,
        "num_preemptions": sum(s.num_preempted for s in steps),
    }
