"""Metrics over run records (definitions in reference/metrics.md); pure functions.

``requests``: per-request latencies and distributions; ``goodput``: SLO verdicts and cost;
``run``: the typed :class:`RunSummary` of a run.
"""

from clustersim.metrics.goodput import SloVerdict, slo_verdict
from clustersim.metrics.requests import Distribution, RequestMetrics, RequestTable, request_metrics
from clustersim.metrics.run import RunSummary, summarize, summarize_run

__all__ = [
    "Distribution", "RequestMetrics", "RequestTable", "RunSummary", "SloVerdict",
    "request_metrics", "slo_verdict", "summarize", "summarize_run",
]
