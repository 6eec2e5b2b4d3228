"""``clustersim compare``: the scenario colocated and disaggregated on the same traffic and
GPUs, side by side, with the verdict of the keep-or-reject rule for a split."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from clustersim.cli.common import (
    check_out_dir,
    describe_calibration,
    describe_layout,
    ms,
    user_errors,
    writing,
)
from clustersim.metrics import Distribution, RunSummary
from clustersim.plan.compare import counterparts, split_verdict, throughput


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
    colocated_spec, split_spec = counterparts(spec)
    labels = ("colocated", "disaggregated")
    check_out_dir(out, subfolders=labels)
    # the report's step timelines and KV figures read every step: kept for it, written only
    # with --steps
    record_steps = steps or report_dir is not None
    results = {label: run_scenario(variant, record_steps=record_steps, ideal_times=True)
               for label, variant in zip(labels, (colocated_spec, split_spec), strict=True)}
    summaries, instances, runs = {}, [], {}
    with writing(out, subfolders=labels):  # both runs' files under one lock: never mixed
        for label, result in results.items():
            summaries[label] = write_run(result, out / label, steps=steps)
    for label, result in results.items():
        instances += result.instances
        runs[label] = (result, summaries[label])
        typer.echo(describe_layout(f"{label}", spec.model, result.instances))
    colocated, split = summaries["colocated"], summaries["disaggregated"]
    typer.echo(f"{'':<22}{'colocated':>16}{'disaggregated':>30}")
    for metric, left, right in comparison_rows(colocated, split):
        typer.echo(f"{metric:<22}{left:>16}{right:>30}")
    handoff = (split.handoff_s.p95 if split.handoff_s is not None else None) or 0.0
    verdict = split_verdict(
        throughput(colocated),
        throughput(split),
        {m: getattr(colocated, m).p95 or 0.0 for m in ("ttft_s", "tpot_s")},
        {m: getattr(split, m).p95 or 0.0 for m in ("ttft_s", "tpot_s")},
        handoff,
        handoff_budget_ms / 1e3,
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
                                         report_dir)
        typer.echo(files.describe())


def comparison_rows(colocated: RunSummary, split: RunSummary) -> list[tuple[str, str, str]]:
    """(metric, colocated, disaggregated) rows for the side-by-side table."""

    def cell(d: Distribution | None, stat: str) -> str:
        return "-" if d is None else ms(d.percentile(int(stat[1:])))

    rows = [("GPUs", str(colocated.num_gpus), str(split.num_gpus))]
    for key, label in (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("itl_s", "ITL"),
                       ("e2e_s", "E2E")):
        for stat in ("p50", "p95", "p99"):
            rows.append((f"{label} {stat} (ms)", cell(getattr(colocated, key), stat),
                         cell(getattr(split, key), stat)))
    rows.append(
        ("throughput (req/s)", f"{throughput(colocated):,.2f}", f"{throughput(split):,.2f}")
    )
    rows.append(("output tok/s", f"{colocated.throughput.output_tokens_per_s or 0:,.0f}",
                 f"{split.throughput.output_tokens_per_s or 0:,.0f}"))
    if colocated.slo is not None and split.slo is not None:
        rows.append(("SLO attainment", f"{colocated.slo.attainment:.1%}",
                     f"{split.slo.attainment:.1%}"))
    rows.append(("preemptions", str(colocated.num_preemptions), str(split.num_preemptions)))
    rows.append(("handoff p50 (ms)", "-", cell(split.handoff_s, "p50")))
    rows.append(("handoff p95 (ms)", "-", cell(split.handoff_s, "p95")))
    rows.append(("handoff GB", "-", f"{split.handoff_bytes / 1e9:,.2f}"))
    busiest = next(iter(split.link_utilization.items()), None)
    rows.append(("busiest link", "-", "-" if busiest is None else f"{busiest[0]} {busiest[1]:.1%}"))
    return rows
