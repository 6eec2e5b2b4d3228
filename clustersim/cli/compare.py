"""``clustersim compare``: the scenario colocated and disaggregated on the same traffic and
GPUs (``plan.counterparts`` derives both), side by side as each run's summary.json holds them
(``plan.compare_table``), with the verdict of the keep-or-reject rule for a split."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from clustersim.cli.common import (
    check_out_dir,
    describe_calibration,
    describe_layout,
    user_errors,
    writing,
)
from clustersim.plan.compare import split_verdict, throughput, throughput_unit
from clustersim.plan.compare_table import comparison_rows, render
from clustersim.plan.counterparts import counterparts


@user_errors
def compare_cmd(
    scenario: Annotated[Path, typer.Argument(help="Scenario YAML file.")],
    out: Annotated[Path, typer.Option("--out", help="Directory for both runs' files.")] = Path(
        "runs/compare"
    ),
    handoff_budget_ms: Annotated[
        float, typer.Option(min=0.0, help="Largest acceptable p95 KV handoff.")
    ] = 10.0,
    report: Annotated[Path | None, typer.Option(
        "--report", help="Also write the comparison's report (report.md with its figures, "
        "report.html) to this folder.")] = None,
    steps: Annotated[bool, typer.Option(
        "--steps", help="Also write each run's steps.csv, every engine step of every instance "
        "(large: one row per step).")] = False,
) -> None:
    """Run the scenario colocated and disaggregated on the same traffic and GPUs; compare."""
    from clustersim.output import write_run
    from clustersim.scenario import load_scenario
    from clustersim.sim import run_scenario

    spec = load_scenario(scenario)
    report_dir = None if report is None else check_out_dir(report)
    sides = counterparts(spec)
    labels = ("colocated", "disaggregated")
    check_out_dir(out, subfolders=labels)
    for note in sides.notes:
        typer.echo(note)
    # the report's step timelines and KV figures read every step: kept for it, written only
    # with --steps
    record_steps = steps or report_dir is not None
    results = {label: run_scenario(variant, record_steps=record_steps, ideal_times=True)
               for label, variant in zip(labels, (sides.colocated, sides.disaggregated),
                                         strict=True)}
    summaries, instances, runs = {}, [], {}
    with writing(out, subfolders=labels):  # both runs' files under one lock: never mixed
        for label, result in results.items():
            summaries[label] = write_run(result, out / label, steps=steps)
    for label, result in results.items():
        instances += result.instances
        runs[label] = (result, summaries[label])
        typer.echo(describe_layout(f"{label}", spec.model, result.instances))
    colocated, split = summaries["colocated"], summaries["disaggregated"]
    for line in render(comparison_rows(colocated, split)):
        typer.echo(line)
    handoff = (split.handoff_s.p95 if split.handoff_s is not None else None) or 0.0
    verdict = split_verdict(
        throughput(colocated),
        throughput(split),
        {m: getattr(colocated, m).p95 or 0.0 for m in ("ttft_s", "tpot_s")},
        {m: getattr(split, m).p95 or 0.0 for m in ("ttft_s", "tpot_s")},
        handoff,
        handoff_budget_ms / 1e3,
        unit=throughput_unit(colocated),
    )
    decision = "keep the disaggregated layout" if verdict.keep_split else "stay colocated"
    typer.echo(f"verdict: {decision}")
    for reason in verdict.reasons:
        typer.echo(f"  - {reason}")
    typer.echo(describe_calibration(instances))
    typer.echo(f"wrote {out}/colocated and {out}/disaggregated")
    if report_dir is not None:
        from clustersim.report import write_compare_report

        with writing(report_dir):
            files = write_compare_report(runs, verdict, handoff_budget_ms / 1e3, spec,
                                         report_dir, sides.notes)
        typer.echo(files.describe())
