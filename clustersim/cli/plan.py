"""``clustersim plan``: size the cluster against the scenario's SLO; print and write the plan."""

from __future__ import annotations

import csv
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from clustersim.cli.common import check_out_dir, default_report_dir, ms, user_errors, writing
from clustersim.errors import ClusterSimError
from clustersim.plan.answer import (
    binding_rate,
    cliff_text,
    goodput_text,
    headroom_text,
    loss_line,
    operating_text,
    same_outcome,
    survival_text,
)
from clustersim.plan.generations import against, cost_text
from clustersim.plan.generations import sentence as generation_sentence
from clustersim.plan.generations import verdict as gen_verdict
from clustersim.plan.outcome import outcome_of
from clustersim.plan.result import (
    LEDGER_COLUMNS,
    CandidateResult,
    NPlusOne,
    PlanResult,
    ledger_rows,
)
from clustersim.plan.story import handoff_sentence, kind_name, role, split_rule_sentence
from clustersim.safe_write import atomic_file

if TYPE_CHECKING:
    from clustersim.plan.day import DayPlan
    from clustersim.plan.planner import Planner
    from clustersim.plan.sensitivity import LinkReading, Sensitivity
    from clustersim.sim import RunResult

EXIT_CODES = {"no_runnable": 3, "no_feasible": 4}
"""``clustersim plan``'s exit code when it ends without a recommendation (0: with one; 2: bad
input, as every command): 3 when no candidate can run at all, 4 when none meets the SLO, the
target rate or plan.require. The plan, its ledger and its report are written all the same."""


@user_errors
def plan_cmd(
    scenario: Annotated[Path, typer.Argument(help="Scenario YAML file with a plan: section.")],
    out: Annotated[Path | None, typer.Option(
        "--out", help="Directory for plan.json and ledger.csv; default runs/plan/<scenario>.")
    ] = None,
    executor: Annotated[str, typer.Option(
        help="Where simulations run: process (local pool), serial, or ray.")] = "process",
    workers: Annotated[int | None, typer.Option(
        min=1, help="Worker processes of the local pool; default one per core.")] = None,
    address: Annotated[str | None, typer.Option(
        help="Ray cluster address (only with --executor ray): HOST:PORT, ray://HOST:PORT or "
        "auto; default a local Ray. One that does not answer as a Ray cluster ends the plan "
        "in one line within 90 s.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print plan.json to stdout.")] = False,
    report: Annotated[Path | None, typer.Option(
        "--report", help="Folder for the SLO report (report.md with its figures, report.html); "
        "default reports/<scenario>-<YYYYmmdd-HHMMSS>.")] = None,
    no_report: Annotated[bool, typer.Option("--no-report", help="Write no report.")] = False,
    n_plus_one: Annotated[bool, typer.Option(
        "--n-plus-one/--no-n-plus-one", help="Check the recommendation and the best "
        "alternative of the other layout kind at their operating rates with one instance and "
        "one node lost (a few more simulations; plan.require makes it a constraint).")] = True,
) -> None:
    """Find the deployment that meets the SLO best: colocated or disaggregated, GPUs and TP per
    pool, the P:D ratio and max_num_batched_tokens, with goodput intervals and costs.

    Exit code 0: a recommendation; 2: bad input; 3: no candidate can run (each pruned: it
    does not fit the GPU, spans servers, is over the budget); 4: none meets the SLO, the
    target rate or plan.require. With 3 or 4 the reasons follow on stderr, one line per kind,
    and plan.json, ledger.csv and the report are written as with 0."""
    from clustersim.plan.executors import make_executor
    from clustersim.plan.run import run_plan
    from clustersim.scenario import load_scenario

    if report is not None and no_report:
        raise ClusterSimError("--no-report", "cannot be given with --report")
    most = 4 * (os.cpu_count() or 1)
    if workers is not None and workers > most:
        raise ClusterSimError("--workers", f"{workers:,} is more than {most} (4 per core of "
                              "this machine): each worker is a process holding a simulation")
    spec = load_scenario(scenario)
    folder = check_out_dir(out or Path("runs/plan") / spec.name)
    report_dir = None if no_report else check_out_dir(report or default_report_dir(spec.name))
    pool = make_executor(executor, workers=workers, address=address)
    started = time.perf_counter()
    try:
        with _progress(enabled=not as_json) as progress:
            result, planner = run_plan(spec, pool, progress, n_plus_one=n_plus_one)
    finally:
        pool.close()
    wall_s = time.perf_counter() - started
    with writing(folder):
        write_plan(result, folder)
    if as_json:
        for chunk in result.json_chunks():
            typer.echo(chunk, nl=False)
        typer.echo()
    else:
        print_plan(result, wall_s, pool.workers)
        typer.echo(f"wrote {folder}/plan.json, {folder}/ledger.csv")
    if report_dir is not None:
        from clustersim.report import write_plan_report

        runs, operating = full_runs(planner, result)
        with writing(report_dir):
            files = write_plan_report(result, spec, runs, report_dir, operating)
        typer.echo(files.describe(), err=as_json)
    ending = outcome_of(result)
    if ending.kind in EXIT_CODES:
        typer.echo(f"{scenario}: {ending.headline}", err=True)
        for reason in ending.reasons:
            typer.echo(f"  {reason}", err=True)
        raise typer.Exit(EXIT_CODES[ending.kind])


def full_runs(planner: Planner, result: PlanResult
              ) -> tuple[dict[str, RunResult], dict[str, RunResult]]:
    """The recommendation's and the runner-up's runs again, with every record, which the
    report's figures draw from: at goodput (the very probe that gave ``at_goodput``: same
    rate, same seed) and at the operating rate (``at_operating``); each must reproduce the
    summary the plan holds."""
    from clustersim.metrics import summarize_run

    at_goodput: dict[str, RunResult] = {}
    at_operating: dict[str, RunResult] = {}
    for c in (result.recommended, result.runner_up):
        if c is None or c.at_goodput is None or c.at_goodput_rate_per_s is None:
            continue
        seed = c.at_goodput.seed - result.seeds[0]
        for runs, rate, summary in ((at_goodput, c.at_goodput_rate_per_s, c.at_goodput),
                                    (at_operating, c.operating_rate_per_s, c.at_operating)):
            if rate is None or summary is None:
                continue
            if rate == c.at_goodput_rate_per_s and c.id in at_goodput:
                runs[c.id] = at_goodput[c.id]  # one run: the operating rate is goodput's
                continue
            run = planner.full_run(c.candidate, rate, seed)
            if summarize_run(run).to_json() != summary.to_json():
                raise AssertionError(f"the full run of {c.id} at {rate} req/s does not "
                                     "reproduce the plan's run there")
            runs[c.id] = run
    return at_goodput, at_operating


def write_plan(result: PlanResult, folder: Path) -> None:
    with atomic_file(folder / "plan.json") as f:
        f.writelines(result.json_chunks())
        f.write("\n")
    with atomic_file(folder / "ledger.csv") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(LEDGER_COLUMNS)
        for row in ledger_rows(result):
            writer.writerow("" if v is None else f"{v:.6g}" if isinstance(v, float) else v
                            for v in row)


class _progress:
    """The plan's progress on stderr: a rich bar per round on a terminal; elsewhere (CI, nohup,
    a pipe) one plain line when a round ends, with its simulations and time and the plan's so
    far, and a line every ``LINE_EVERY_S`` within a long round with its count and time left."""

    LINE_EVERY_S = 30.0

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.terminal = enabled and sys.stderr.isatty()
        self._bar = None
        self._tasks: dict[str, int] = {}
        self._started = time.perf_counter()
        self._round_started: dict[str, float] = {}
        self._last_line = 0.0
        self._finished = 0

    def __enter__(self) -> _progress:
        if self.terminal:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._bar = Progress("{task.description}", BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), TimeRemainingColumn(),
                                 console=Console(stderr=True), transient=True)
            self._bar.start()
        return self

    def __call__(self, stage: str, done: int, total: int) -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        if done == 0:
            self._round_started[stage] = now
        began = self._round_started.setdefault(stage, now)
        if self._bar is not None:
            if stage not in self._tasks:
                self._tasks[stage] = self._bar.add_task(stage, total=total)
            self._bar.update(self._tasks[stage], completed=done, total=total)
            return
        if done == total and total:
            self._finished += total
            noun = "simulation" if total == 1 else "simulations"
            typer.echo(f"plan: {stage}: {total} {noun} in {now - began:,.1f} s "
                       f"({self._finished:,} in {now - self._started:,.0f} s so far)", err=True)
            self._last_line = now
        elif done and now - max(self._last_line, began) >= self.LINE_EVERY_S:
            left = (now - began) / done * (total - done)
            typer.echo(f"plan: {stage}: {done}/{total} simulations, about {left:,.0f} s left "
                       "in this round", err=True)
            self._last_line = now

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()


def _figures(r: CandidateResult) -> str:
    s = r.at_goodput
    if s is None or s.slo is None or r.at_goodput_rate_per_s is None:
        return ""
    return (f"probe at {r.at_goodput_rate_per_s:,.2f} req/s offered (the median draw's highest "
            f"passing one): TTFT p50/p90/p99 {ms(s.ttft_s.p50)}/{ms(s.ttft_s.p90)}/"
            f"{ms(s.ttft_s.p99)} ms, TPOT {ms(s.tpot_s.p50)}/{ms(s.tpot_s.p90)}/"
            f"{ms(s.tpot_s.p99)} ms, ITL p99 {ms(s.itl_s.p99)} ms, attainment "
            f"{s.slo.attainment:.1%}")


LEGEND = (("~", "not converged"), (">=", "at least: capped at the highest rate tried"),
          ("<=", "at most: a window too short to judge"))


def _goodput(r: CandidateResult) -> str:
    g = r.goodput
    if g is None:
        return "-"
    if g.short_window_s is not None:
        return f"<= {g.mean_per_s:,.2f}"
    if g.capped:
        return f">= {g.lower_per_s:,.2f}"
    mark = "" if g.converged else "~"
    if len(g.per_seed_per_s) == 1:
        return f"{mark}{g.mean_per_s:,.2f}"
    return f"{mark}{g.mean_per_s:,.2f} [{g.low_per_s:,.2f}-{g.high_per_s:,.2f}]"


SHOWN_ROWS = 12
"""Simulated rows the printed table shows at least (and every row the answer names)."""


def legend(result: PlanResult) -> str:
    """One line that spells out the candidates' names where a reader first meets them (every
    term of the printout is in docs/glossary.md)."""
    shown = [c.candidate for c in result.measured]
    if not shown:
        return ""
    pools = [p for c in shown for p in c.pools]
    parts = []
    if any(p.role != "colocated" for p in pools):
        parts.append("xP + yD = x prefill and y decode instances")
    parts.append("TPn = n GPUs per instance (tensor parallel)")
    if any(p.pipeline_parallel_size > 1 for p in pools):
        parts.append("TPn x PPk = k pipeline stages of n GPUs")
    if any(p.data_parallel_size > 1 for p in pools):
        parts.append("TPn x DPk EP = k data-parallel ranks of n GPUs sharing the experts")
    if any(c.max_num_batched_tokens is not None and not c.baseline for c in shown):
        parts.append("mnbt = max_num_batched_tokens, the most tokens one engine step takes")
    return "terms: " + "; ".join(parts) + "; every term: docs/glossary.md"


def print_plan(result: PlanResult, wall_s: float, workers: int) -> None:
    counts: dict[str, int] = {}
    for c in result.candidates:
        counts[c.status] = counts.get(c.status, 0) + 1
    budget = f", budget {result.gpu_budget} GPUs" if result.gpu_budget else ""
    target = (f", target {result.target_rate_per_s:g} req/s" if result.target_rate_per_s
              else "")
    typer.echo(f"plan {result.scenario}: {result.objective}{budget}{target}, SLO verdict "
               f"{result.criterion}, {len(result.seeds)} seed{'s' if len(result.seeds) > 1 else ''}"
               f", tolerance {result.tolerance:.0%}")
    typer.echo(f"candidates: {len(result.candidates)} ("
               + ", ".join(f"{n} {status}" for status, n in counts.items())
               + f"); {result.num_simulations} simulations in {wall_s:,.1f} s on {workers} worker"
               f"{'s' if workers != 1 else ''}")
    terms = legend(result)
    if terms:
        typer.echo(terms)
    typer.echo("")
    typer.echo("answer:")
    for line in result.short_answer or (result.answer,):
        typer.echo(f"  {line}")
    typer.echo("")
    rec = result.recommended
    target = _attainment_target(result)
    if rec is None:  # the rest of the answer (the short one is its first part)
        for part in result.answer_parts[len(result.short_answer):]:
            typer.echo(part)
    else:
        _print_choice("recommendation", rec, result, target)
        print_tie(result)
        survival = survival_text(result)
        if survival:
            typer.echo(f"  {survival}")
        if result.n_plus_one is not None:
            print_n_plus_one(result.n_plus_one, target)
        if result.runner_up is not None:
            _print_choice(kind_name(result.runner_up.candidate.layout), result.runner_up,
                          result, target)
            if result.runner_up_n_plus_one is not None:
                print_n_plus_one(result.runner_up_n_plus_one, target)
        rule = split_rule_sentence(result)
        if rule is not None and result.split_verdict is not None:
            typer.echo(f"split rule: {rule}")
            for reason in result.split_verdict.reasons:
                typer.echo(f"  - {reason}")
    if result.generations is not None:
        print_generations(result)
    for note in result.traffic_notes:
        typer.echo(f"traffic: {note}")
    if result.sensitivity is not None:
        print_sensitivity(result.sensitivity, _attainment_target(result))
    if result.day is not None:
        print_day(result.day)
    typer.echo("")
    print_table(result)
    if result.pareto:
        typer.echo("Pareto front (tokens/s per user vs output tokens/s per GPU, at goodput): "
                   + "; ".join(result.by_id(i).candidate.label() for i in result.pareto))
    if result.serve_commands:
        typer.echo("deploy it:")
        for line in result.serve_commands:
            typer.echo(f"  {line}")
    if result.bench_command:
        typer.echo(f"check it on real GPUs:\n  {result.bench_command}")


def shown_rows(result: PlanResult) -> list[tuple[int, CandidateResult]]:
    """The simulated rows the table prints, with their numbers (the ledger's order, as the
    report numbers them): the first ``SHOWN_ROWS`` and every row the answer names."""
    named = {c.id for c in (result.recommended, result.runner_up) if c is not None}
    named |= set(result.best.values()) | set(result.tie.tied if result.tie else ())
    return [(i, c) for i, c in enumerate(result.measured, 1)
            if i <= SHOWN_ROWS or c.id in named]


def _ranges(numbers: list[int]) -> str:
    """#13-#15, #18: runs of row numbers."""
    runs: list[list[int]] = []
    for n in numbers:
        if runs and n == runs[-1][-1] + 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    return ", ".join(f"#{r[0]}" if len(r) == 1 else f"#{r[0]}-#{r[-1]}" for r in runs)


def print_table(result: PlanResult) -> None:
    """Every simulated row up to ``SHOWN_ROWS`` and the rows the answer names, numbered as
    the report numbers them; how many are left out, and where they are."""
    rows = shown_rows(result)
    if not rows:
        return
    rec = result.recommended
    typer.echo(f"{'#':>3} {'candidate':<56}{'GPUs':>5}{'goodput req/s [95% CI]':>26}"
               f"{'per GPU':>9}{'TTFT p90':>10}{'TPOT p90':>10}{'$/1M tok':>10}  status")
    for i, c in rows:
        s = c.at_goodput
        cost = ("-" if c.cost_per_million_output_tokens is None
                else f"{c.cost_per_million_output_tokens:,.3f}")
        mark = "*" if rec is not None and c.id == rec.id else " "
        named = role(result, c.id)
        status = c.status + (f", {named}" if named else "")
        typer.echo(
            f"{i:>3}{mark}{c.candidate.label()[:55]:<55}{c.candidate.num_gpus:>5}"
            f"{_goodput(c):>26}{c.goodput_per_gpu or 0:>9.3f}"
            f"{ms(s.ttft_s.p90 if s else None):>10}{ms(s.tpot_s.p90 if s else None):>10}"
            f"{cost:>10}  {status}")
    marks = [(mark, meaning) for mark, meaning in LEGEND if any(
        _goodput(c).startswith(mark) for _, c in rows)]
    if marks:
        typer.echo("    goodput " + "; ".join(f"{m} {what}" for m, what in marks)
                   + " (not measured: see ledger.csv's goodput_quality)")
    shown = {i for i, _ in rows}
    left = [i for i in range(1, len(result.measured) + 1) if i not in shown]
    if left:
        typer.echo(f"    ... and {len(left)} more simulated ({_ranges(left)}), ranked in "
                   "ledger.csv and the report's Candidates table")
    others = len(result.candidates) - len(result.measured)
    if others:
        typer.echo(f"    ... and {others} not simulated (screened or pruned, each with its "
                   "reason in ledger.csv)")
    typer.echo("")


def print_generations(result: PlanResult) -> None:
    """Each generation's best layout side by side, the comparison's verdict, and each best
    layout's launch lines."""
    gens = result.generations
    assert gens is not None
    typer.echo("generations (each planned on its own; cost per 1M output tokens at goodput):")
    typer.echo(f"  {'GPU':<10}{'best layout':<44}{'GPUs':>5}{'per GPU':>9}{'tok/s/user':>11}"
               f"{'$/h':>9}  {'$/1M output tokens [95% CI]':<31}verdict")
    winner = None if gens.winner is None else gens.entry(gens.winner)
    for g in gens.entries:
        r = g.best
        at = None if r is None else r.at_goodput
        user = None if at is None else at.tokens_per_s_per_user
        cost = "-" if g.cost_per_hour is None else f"{g.cost_per_hour:,.2f}"
        verdict = gen_verdict(gens, g.gpu)
        if winner is not None and g.gpu != gens.winner and g.eligible:
            verdict += f" ({against(g, winner, gens.tolerance)})"
        typer.echo(f"  {g.gpu:<10}{'-' if r is None else r.candidate.label()[:43]:<44}"
                   f"{'-' if r is None else r.candidate.num_gpus:>5}"
                   f"{'-' if r is None else f'{r.goodput_per_gpu or 0:.3f}':>9}"
                   f"{'-' if user is None else f'{user:,.1f}':>11}{cost:>9}  "
                   f"{cost_text(g):<31}{verdict}")
    typer.echo(f"  {generation_sentence(gens)}")
    for g in gens.entries:
        if g.serve_commands and g.gpu != gens.winner:
            typer.echo(f"  {g.gpu}'s best, launched:")
            for line in g.serve_commands:
                typer.echo(f"    {line}")


def print_sensitivity(sens: Sensitivity, target: float) -> None:
    """The recommendation on another KV fabric and at a busier rate."""
    typer.echo("sensitivity of the recommendation:")
    for note in sens.notes:
        typer.echo(f"  {note}")
    if sens.link:
        low, same, high = sens.link
        typer.echo(f"  KV links at {low.scale:g}x / {same.scale:g}x / {high.scale:g}x bandwidth: "
                   f"goodput {low.mean_per_s:,.2f} / {same.mean_per_s:,.2f} / "
                   f"{high.mean_per_s:,.2f} req/s ({_change(low, same)} at half the bandwidth, "
                   f"{_change(high, same)} at double)")
    if sens.load is not None:
        load = sens.load
        n = len(load.attainments)
        verdict = "holds" if load.num_meeting == n else "FAILS" if not load.num_meeting else (
            "holds on some draws")
        typer.echo(f"  load +{load.factor - 1:.0%} ({load.rate_per_s:,.2f} req/s): attainment "
                   f"{load.attainment:.1%} against {target:.0%}, {load.num_meeting} of {n} "
                   f"draws met the SLO: {verdict}")


def _change(reading: LinkReading, reference: LinkReading) -> str:
    if reference.mean_per_s <= 0:
        return "-"
    return f"{reading.mean_per_s / reference.mean_per_s - 1:+.0%}"


def print_day(day: DayPlan) -> None:
    """The day plan: the unit, then the two fleets side by side."""
    typer.echo(f"a day of {day.curve} traffic (peak {day.peak_rate_per_s:,.2f} req/s, mean "
               f"{day.mean_rate_per_s:,.2f}, {day.window_s / 60:g} min windows), in units of "
               f"{day.unit} ({day.unit_gpus} GPU{'s' if day.unit_gpus > 1 else ''}, "
               f"{day.unit_rate_per_s:,.2f} req/s each):")
    for fleet in (day.static, day.autoscaled):
        cost = "" if fleet.cost_usd is None else f", ${fleet.cost_usd:,.0f}"
        gpus = (f"{fleet.max_gpus} GPUs" if fleet.min_gpus == fleet.max_gpus
                else f"{fleet.min_gpus}-{fleet.max_gpus} GPUs")
        typer.echo(f"  {fleet.name}: {gpus}, {fleet.gpu_hours:,.0f} GPU-hours{cost}, "
                   f"SLO attainment over the day {fleet.attainment:.1%}"
                   f"{'' if fleet.meets else ' (below the target)'}")
    if day.saving is not None:
        typer.echo(f"  autoscaling ({day.scale_up_delay_s:g} s to add units) saves "
                   f"{day.saving:.0%} of the GPU-hours")
    for note in day.notes:
        typer.echo(f"  note: {note}")


def print_tie(result: PlanResult) -> None:
    """The tie at the top, one candidate a line: who, why, by which rule."""
    tie = result.tie
    if tie is None or result.recommended is None:
        return
    won = tie.chose(result.recommended)
    others = tie.tied[1:] if won else tie.tied
    head = ("won a statistical tie with" if won
            else "the best by the objective was a statistical tie among")
    typer.echo(f"  {head} ({tie.why}):")
    for cid in others:
        mark = ("  (the mean goodput alone would pick it)"
                if cid == tie.by_goodput and tie.by_goodput != tie.tied[0] else "")
        typer.echo(f"    - {result.by_id(cid).candidate.label()}{mark}")
    if won:
        typer.echo(f"    broken by the rule: {tie.rule}")


def _attainment_target(result: PlanResult) -> float:
    for r in result.measured:
        if r.at_goodput is not None and r.at_goodput.slo is not None:
            return r.at_goodput.slo.slo.attainment_target
    return 0.9


def print_n_plus_one(n1: NPlusOne, target: float) -> None:
    verdict = "holds" if n1.holds else "FAILS"
    if not n1.holds and n1.instance is not None and n1.instance.holds:
        verdict = "holds an instance loss, FAILS a node loss"
    typer.echo(f"  N+1 at {n1.rate_per_s:,.2f} req/s ({n1.rate_basis}; a failure a third into "
               f"the run, for the rest of it; clients retry {n1.max_retries}x): {verdict}")
    for check in (n1.instance, n1.node):
        if check is n1.node and same_outcome(n1.instance, n1.node):
            assert check is not None and n1.instance is not None
            typer.echo(f"    lose {check.lost}: the same outcome as losing {n1.instance.lost} "
                       "(every figure equal)")
        elif check is not None:
            typer.echo(f"    {loss_line(check, target)}")
    for note in n1.notes:
        typer.echo(f"    {note}")


def _print_choice(title: str, r: CandidateResult, result: PlanResult, target: float) -> None:
    c, g = r.candidate, r.goodput
    assert g is not None
    typer.echo(f"{title}: {c.label()} on {c.num_gpus} GPU{'s' if c.num_gpus != 1 else ''}")
    typer.echo(f"  goodput {goodput_text(r)}")
    operate = operating_text(r, result.target_rate_per_s, result.headroom)
    if operate:
        typer.echo(f"  {operate}")
    if result.target_rate_per_s:
        typer.echo(f"  {headroom_text(r, result.target_rate_per_s)}")
    cliff = cliff_text(r, target)
    if cliff:
        typer.echo(f"  {cliff}")
    if r.cost_per_million_output_tokens is not None:
        typer.echo(f"  cost ${r.cost_per_hour:,.2f}/h, ${r.cost_per_million_output_tokens:,.3f} "
                   "per 1M output tokens at goodput")
    handoff = handoff_sentence(r, result.handoff_budget_s or 0.0)
    if handoff:
        typer.echo(f"  {handoff}")
    if r.binding:
        typer.echo(f"  binding just above goodput{binding_rate(r)}: {r.binding}")
    figures = _figures(r)
    if figures:
        typer.echo(f"  {figures}")
