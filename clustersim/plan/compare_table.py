"""The side-by-side table of ``clustersim compare``: every cell a field of the run's
:class:`~clustersim.metrics.RunSummary`, the one each side's ``summary.json`` is written from,
named as summary.json names it, in the report's precision (``report.fmt``)."""

from __future__ import annotations

from clustersim.metrics import Distribution, RunSummary
from clustersim.plan.compare import throughput_unit

DASH = "-"
Row = tuple[str, str, str]
"""(figure, colocated, disaggregated)."""


def _ms(seconds: float | None) -> str:
    return DASH if seconds is None else f"{seconds * 1e3:,.1f}"


def _rate(per_s: float | None) -> str:
    return DASH if per_s is None else f"{per_s:,.2f}"


def _tokens(per_s: float | None) -> str:
    return DASH if per_s is None else f"{per_s:,.1f}"


def _share(fraction: float | None) -> str:
    return DASH if fraction is None else f"{fraction:.1%}"


def comparison_rows(colocated: RunSummary, split: RunSummary) -> list[Row]:
    """The two runs' figures side by side; the rule's throughput row is named as the verdict
    names it (:func:`~clustersim.plan.compare.throughput_unit`)."""
    runs = (colocated, split)

    def row(label: str, cell) -> Row:
        return (label, cell(colocated), cell(split))

    def stat(d: Distribution | None, name: str) -> str:
        return DASH if d is None else _ms(getattr(d, name))

    rows = [row("GPUs", lambda s: str(s.num_gpus)),
            row("requests finished", lambda s: f"{s.num_finished:,} of {s.num_requests:,}")]
    for key, name in (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("itl_s", "ITL"),
                      ("e2e_s", "E2E")):
        for p in ("p50", "p95", "p99"):
            rows.append(row(f"{name} {p} (ms)", lambda s, k=key, p=p: stat(getattr(s, k), p)))
    rows += [
        row("req/s, first to last arrival", lambda s: _rate(s.throughput.requests_per_s)),
        row("makespan (s)", lambda s: f"{s.makespan_s:,.2f}"),
        row("req/s over the makespan", lambda s: _rate(s.over_makespan.requests_per_s)),
    ]
    if all(s.slo is not None for s in runs):
        rows.append(row(throughput_unit(colocated), lambda s: _rate(s.good_requests_per_s)))
    rows.append(row("output tok/s over the makespan",
                    lambda s: _tokens(s.over_makespan.output_tokens_per_s)))
    if all(s.slo is not None for s in runs):
        rows.append(row("SLO attainment", lambda s: _share(s.slo.attainment)))
    rows.append(row("preemptions", lambda s: f"{s.num_preemptions:,}"))
    handoff = split.handoff_s
    rows += [("handoff p50 (ms)", DASH, stat(handoff, "p50")),
             ("handoff p95 (ms)", DASH, stat(handoff, "p95")),
             ("handoff GB", DASH, f"{split.handoff_bytes / 1e9:,.2f}")]
    busiest = next(iter(split.link_utilization.items()), None)
    rows.append(("busiest link", DASH,
                 DASH if busiest is None else f"{busiest[0]} {_share(busiest[1])}"))
    return rows


def render(rows: list[Row], header: Row = ("", "colocated", "disaggregated")) -> list[str]:
    """The rows as aligned text lines, labels left, figures right."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(3)]
    return [f"{r[0]:<{widths[0]}}  {r[1]:>{widths[1]}}  {r[2]:>{widths[2]}}"
            for r in [header, *rows]]
