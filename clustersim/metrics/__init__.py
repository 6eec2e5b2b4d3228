"""Metrics over run records (definitions in reference/metrics.md); pure functions."""

from clustersim.metrics.summary import RequestMetrics, request_metrics, summarize

__all__ = ["RequestMetrics", "request_metrics", "summarize"]
