"""``clustersim simulate``: run one scenario, write its records, print its figures."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from clustersim.cli.common import (
    check_out_dir,
    describe_calibration,
    describe_layout,
    ms,
    user_errors,
    writing,
)
from clustersim.metrics import RunSummary
from clustersim.safe_write import folder_lock

if TYPE_CHECKING:
    from clustersim.scenario import Scenario


@user_errors
def simulate_cmd(
    scenario: Annotated[Path, typer.Argument(help="Scenario YAML file.")],
    out: Annotated[Path, typer.Option("--out", help="Directory for the run's files.")] = Path(
        "runs/latest"
    ),
    report: Annotated[Path | None, typer.Option(
        "--report", help="Also write the run's report (report.md with its figures, "
        "report.html) to this folder.")] = None,
    steps: Annotated[bool, typer.Option(
        "--steps", help="Also write steps.csv, every engine step of every instance (large: "
        "one row per step).")] = False,
    output_format: Annotated[str, typer.Option(
        "--format", help="How the tables (requests, steps, transfers) are written: csv, or "
        "parquet (needs pyarrow: pip install 'clustersim[parquet]').")] = "csv",
) -> None:
    """Simulate a scenario; write requests.csv, summary.json (steps.csv: --steps) to --out.

    Also transfers.csv when KV moved between instances. Without --report, requests.csv is
    written as the run goes and no request is kept once written, so that memory holds the
    requests in flight and the summary's columns."""
    from clustersim.output import check_format, run_files, simulate_run, write_run
    from clustersim.scenario import load_scenario
    from clustersim.sim import run_scenario

    check_format(output_format)
    spec = load_scenario(scenario)
    report_dir = None if report is None else check_out_dir(report)
    folder = check_out_dir(out)
    if report_dir is None:
        # the run writes requests.csv as it goes, outside the folder's lock; the files are
        # put in place with it held
        with writing(folder, locked=False):
            result, summary = simulate_run(spec, folder, steps=steps,
                                           output_format=output_format,
                                           lock=partial(folder_lock, folder))
    else:
        # the report reads every request and step: kept for it (steps written only with
        # --steps)
        result = run_scenario(spec, record_steps=True, ideal_times=True)
        with writing(folder):
            summary = write_run(result, folder, steps=steps, output_format=output_format)
    print_summary(summary, describe_layout(spec.name, spec.model, result.instances))
    note = closed_loop_note(spec)
    if note is not None:
        typer.echo(note)
    typer.echo(describe_calibration(result.instances))
    typer.echo(f"wrote {out}/" + ", ".join(run_files(result, steps=steps,
                                                       output_format=output_format)))
    if report_dir is not None:
        from clustersim.report import write_simulate_report

        with writing(report_dir):
            typer.echo(write_simulate_report(result, summary, report_dir).describe())


def print_summary(summary: RunSummary, header: str) -> None:
    typer.echo(header)
    typer.echo(
        f"requests: {summary.num_requests} arrived, {summary.num_finished} finished, "
        f"{summary.num_rejected} rejected, {summary.num_preemptions} preemptions"
    )
    typer.echo(f"{'latency (ms)':<14}{'mean':>12}{'p50':>12}{'p90':>12}{'p99':>12}")
    for label, d in (("TTFT", summary.ttft_s), ("TPOT", summary.tpot_s),
                     ("ITL", summary.itl_s), ("E2E", summary.e2e_s)):
        typer.echo(f"{label:<14}{ms(d.mean):>12}{ms(d.p50):>12}{ms(d.p90):>12}{ms(d.p99):>12}")
    t = summary.throughput
    if t.requests_per_s is not None:
        typer.echo(
            f"throughput: {t.requests_per_s:.2f} req/s, {t.prompt_tokens_per_s:,.0f} prompt "
            f"tok/s, {t.output_tokens_per_s:,.0f} output tok/s over {summary.window_s:.2f} s"
        )
    cache = summary.prefix_cache
    if cache is not None and cache.hit_rate is not None:
        typer.echo(f"prefix cache: {cache.hit_rate:.1%} of prompt tokens hit "
                   f"({cache.cached_tokens:,} of {cache.prompt_tokens:,})")
    tier = summary.cpu_tier
    if tier is not None and tier.hit_rate is not None:
        typer.echo(
            f"CPU KV tier: {tier.hit_rate:.1%} of prompt tokens loaded from it "
            f"({tier.hit_tokens:,}; HBM + CPU {tier.hbm_and_cpu_hit_rate:.1%}), "
            f"{tier.loaded_bytes / 1e9:,.1f} GB loaded in {tier.num_loads:,} loads, "
            f"{tier.stored_bytes / 1e9:,.1f} GB stored over PCIe")
    for inst in summary.instances:
        util, kv_mean = inst.utilization, inst.kv_usage_mean
        typer.echo(
            f"instance {inst.name}: {inst.num_steps} steps, busy "
            f"{'-' if util is None else f'{util:.0%}'}, KV mean "
            f"{'-' if kv_mean is None else f'{kv_mean:.0%}'} / peak {inst.kv_usage_peak:.0%} "
            f"of {inst.usable_kv_blocks} blocks"
        )
    if summary.handoff_s is not None:
        h = summary.handoff_s
        typer.echo(
            f"KV handoff: {summary.handoff_bytes / 1e9:,.2f} GB moved, p50 {ms(h.p50)} ms, "
            f"p99 {ms(h.p99)} ms (prefill done -> KV resident on the decode instance)"
        )
    if summary.slo is not None:
        slo = summary.slo
        terms = ", ".join(f"{k} <= {v}" for k, v in slo.limits().items())
        typer.echo(f"SLO attainment ({terms}): {slo.attainment:.1%}")
    if summary.faults is not None:
        print_faults(summary)
    if summary.benchmark is not None:
        print_benchmark(summary)


def print_benchmark(summary: RunSummary) -> None:
    """The figures ``vllm bench serve`` prints that the lines above do not."""
    b = summary.benchmark
    assert b is not None
    rate = "inf" if b.request_rate == float("inf") else f"{b.request_rate:g} req/s"
    limit = "none" if b.max_concurrency is None else str(b.max_concurrency)
    typer.echo(
        f"benchmark (vllm bench serve: max concurrency {limit}, request rate {rate}, "
        f"{b.num_warmups} warm-ups not measured): {b.completed} completed, {b.failed} failed "
        f"in {b.duration_s:.2f} s")
    if b.request_throughput is not None:
        typer.echo(
            f"  {b.request_throughput:.2f} req/s, {b.output_throughput:,.0f} output tok/s, "
            f"{b.total_token_throughput:,.0f} total tok/s; peak concurrent requests "
            f"{b.max_concurrent_requests}")
    q = b.client_queue_s
    if q.count:
        typer.echo(f"  client queue (dispatch -> send, not in TTFT) ms: mean {ms(q.mean)}, "
                   f"p50 {ms(q.p50)}, p99 {ms(q.p99)}")


def closed_loop_note(spec: Scenario) -> str | None:
    """A line for a benchmark whose clients all start at once and get answers of one length:
    they keep the groups the cold first round formed (every running request gains one token
    a step, so requests that start together finish together), as a real server's do; a
    measured sweep whose client drew its lengths spreads out after it and needs those draws
    replayed (docs/benchmarks.md). None for any other workload."""
    from clustersim.workload.spec import BenchmarkWorkload, FixedLength, IndependentLengths

    w = spec.workload
    if not (isinstance(w, BenchmarkWorkload) and w.max_concurrency is not None
            and 1 < w.max_concurrency < w.num_prompts and w.request_rate == float("inf")
            and w.ramp_up_s == 0 and w.turnaround_s == 0
            and isinstance(w.lengths, IndependentLengths)
            and isinstance(w.lengths.output_tokens, FixedLength)):
        return None
    return (f"note: the {w.max_concurrency} clients start at once and every answer is "
            f"{w.lengths.output_tokens.value} tokens long: requests that start in one engine "
            "step finish in one and are sent again together, so the first round's groups "
            "persist, as on a real server with answers of one length (evalscope PR #1641). "
            "A sweep whose client drew its lengths spreads out after its first round "
            "(InferenceX's, behind NVIDIA's silicon rows, drew every prompt and answer from "
            "0.8 to 1 x the named length; fixed, they put TTFT at mostly 2-5x theirs: "
            "docs/benchmarks.md): to replay one, give the lengths as its client drew them; "
            "workload.ramp_up_s opens the slots spread out.")


def print_faults(summary: RunSummary) -> None:
    f = summary.faults
    assert f is not None
    typer.echo(
        f"faults: {f.num_lost} attempts lost, {f.num_retried_requests} requests retried "
        f"({f.num_retries} retries), {f.num_failed} failed; {f.num_kv_load_failures} KV loads "
        f"failed ({f.num_recomputed} recomputed), {f.num_rerouted} KV flows rerouted")
    for impact in f.faults:
        back = "" if impact.repair_s is None else f", back at {impact.repair_s:g} s"
        typer.echo(f"  {impact.fault}{back}: {impact.num_lost} lost, {impact.num_retried} "
                   f"retried, {impact.num_failed} failed, {impact.num_kv_load_failures} KV "
                   f"loads failed")
    if f.warmups is not None:
        w = f.warmups
        typer.echo(f"  warm-ups (not measured, in none of the counts above): {w.num_lost} lost, "
                   f"{w.num_retried} retried, {w.num_failed} failed, {w.num_kv_load_failures} "
                   f"KV loads failed")
    if f.first_fault_s is not None and summary.slo is not None:
        before = "-" if f.attainment_before is None else f"{f.attainment_before:.1%}"
        after = "-" if f.after is None else f"{f.after.attainment:.1%}"
        typer.echo(f"  SLO attainment of requests arriving before the first failure {before}, "
                   f"from it on {after}")
