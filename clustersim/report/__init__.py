"""The SLO report: what an infra review reads, rendered from typed results.

    PlanResult (+ full runs)             ->  plan_document      \\
    RunResult + RunSummary               ->  simulate_document   >  Document  ->  report.md + PNGs
    two runs + the split's Verdict       ->  compare_document   /               report.html (inline)

Figures are matplotlib on its Agg canvas, text is Jinja2 templates (package data). Nothing
here computes a figure of merit: every number comes from the results it is handed, formatted
(``fmt``). The simulation core never imports this package.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from clustersim.report.plan_report import plan_document
from clustersim.report.render import ReportFiles, write_report
from clustersim.report.run_report import compare_document, simulate_document

if TYPE_CHECKING:
    from clustersim.metrics import RunSummary
    from clustersim.plan.compare import Verdict
    from clustersim.plan.result import PlanResult
    from clustersim.scenario import Scenario
    from clustersim.sim import RunResult


def write_plan_report(result: PlanResult, scenario: Scenario, runs: dict[str, RunResult],
                      folder: Path, operating: dict[str, RunResult] | None = None
                      ) -> ReportFiles:
    """``report.md`` (figures beside it) and ``report.html`` of a plan. ``runs``: full runs
    at goodput by candidate id; ``operating``: at the operating rate."""
    return write_report(plan_document(result, scenario, runs, operating), folder)


def write_simulate_report(run: RunResult, summary: RunSummary, folder: Path) -> ReportFiles:
    return write_report(simulate_document(run, summary), folder)


def write_compare_report(runs: dict[str, tuple[RunResult, RunSummary]], verdict: Verdict,
                         handoff_budget_s: float, scenario: Scenario,
                         folder: Path, notes: tuple[str, ...] = ()) -> ReportFiles:
    """``notes``: how compare built both sides from the scenario, one line each."""
    return write_report(compare_document(runs, verdict, handoff_budget_s, scenario, notes),
                        folder)


__all__ = ["ReportFiles", "write_compare_report", "write_plan_report", "write_simulate_report"]
