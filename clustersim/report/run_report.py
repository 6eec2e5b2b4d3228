"""The reports of ``simulate`` (one run) and ``compare`` (the scenario colocated and
disaggregated on the same traffic, with the keep-or-reject rule's verdict on the split): each
run in ``vllm bench serve``'s words, its SLO verdict, the figures of its records, the
assumptions."""

from __future__ import annotations

from typing import TYPE_CHECKING

from clustersim.plan.change import HOLDS_WITHIN, threshold_text
from clustersim.plan.compare import Verdict
from clustersim.plan.compare_table import comparison_rows
from clustersim.report import assumptions, blocks, fmt, run_figures
from clustersim.report.document import Block, Bullets, Document, Pre, Section, Span, Table, Text

if TYPE_CHECKING:
    from clustersim.metrics import RunSummary
    from clustersim.scenario import Scenario
    from clustersim.sim import RunResult


def _overview(label: str, summary: RunSummary) -> Text:
    return Text.of(
        Span(label, "strong"), f": {summary.model} on {summary.num_gpus} GPU"
        f"{'s' if summary.num_gpus != 1 else ''} ({summary.layout}"
        f"{', topology ' + summary.topology if summary.topology else ''}); "
        f"{summary.num_requests:,} requests arrived, {summary.num_finished:,} finished, "
        f"{summary.num_rejected:,} rejected, {summary.num_preemptions:,} preemptions.")


def _run_blocks(label: str, run: RunResult, summary: RunSummary) -> list[Block]:
    out: list[Block] = [_overview(label, summary),
                        blocks.benchmark_block(summary, assumptions.configured_rate(run.scenario))]
    if summary.slo is not None:
        out.append(Pre(blocks.slo_text(summary.slo, summary,
                                       assumptions.configured_rate(run.scenario), label)))
    return out


def _figures(pairs: list[tuple[str, RunResult, RunSummary]], slo,
             handoff_budget_s: float | None = None) -> list[Block]:
    out: list[Block] = [run_figures.latency_cdfs([(label, run) for label, run, _ in pairs], slo)]
    for i, (label, _, summary) in enumerate(pairs):
        dip = run_figures.slo_over_time(label, summary, slo, name=f"slo-over-time-{i + 1}")
        if dip is not None:
            out.append(dip)
    for i, (label, run, _) in enumerate(pairs):
        timeline = run_figures.step_timeline(label, run, name=f"timeline-{i + 1}")
        if timeline is not None:
            out.append(timeline)
    for i, (label, run, summary) in enumerate(pairs):
        out.append(run_figures.kv_and_queue(label, run, summary, name=f"kv-queue-{i + 1}"))
        links = run_figures.kv_links(label, run, summary, handoff_budget_s,
                                     name=f"kv-links-{i + 1}")
        if links is not None:
            out.append(links)
    return out


def _assumptions(scenario: Scenario,
                 pairs: list[tuple[str, RunResult, RunSummary]]) -> list[Block]:
    out: list[Block] = [
        Text.of(Span("Engine settings", "strong"), " of the scenario:"),
        assumptions.engine_settings(scenario),
    ]
    for label, run, summary in pairs:
        out += [Text.of(Span("Engines that ran", "strong"), f" in {label} (KV blocks as "
                        "vLLM's memory arithmetic sizes them):"),
                blocks.engines_table(summary)]
        table = assumptions.kv_transfer(run)
        if table is not None:
            out += [Text.of(Span("KV handoff", "strong"), f" of {label} (vLLM version switches "
                            "of the disaggregated flow):"), table]
        out += [Text.of(Span("Links", "strong"), f" of {label}:"), *assumptions.topology(run)]
    out.append(Text.of(Span("Calibration", "strong"), ": the GPU profile that priced the "
                       "steps."))
    out += assumptions.calibration([run for _, run, _ in pairs])
    out.append(Text.of(Span("Workload", "strong"), f" as the scenario gives it (seed "
                       f"{scenario.seed}):"))
    out += assumptions.workload(scenario)
    if scenario.slo is not None:
        slo = scenario.slo
        limits = ", ".join(f"{blocks.LIMIT_MEANING[k]} <= {fmt.limit_ms(v)}"
                           for k, v in slo.model_dump().items()
                           if k in blocks.LIMIT_NAMES and v is not None)
        out.append(Text.of(Span("SLO: ", "strong"), f"{limits} for "
                           f"{slo.attainment_target:.0%} of requests ({slo.criterion})."))
    return out


def simulate_document(run: RunResult, summary: RunSummary) -> Document:
    """The report of one run (``clustersim simulate --report``)."""
    scenario = run.scenario
    pairs = [(scenario.name, run, summary)]
    sections = [
        Section("Run", [*_run_blocks(scenario.name, run, summary), blocks.BENCHMARK_NOTE]
                + ([blocks.slo_note([("this run", summary.slo)])]
                   if summary.slo is not None else [])),
        *([Section("Faults", blocks.fault_blocks(summary))] if summary.faults is not None
          else []),
        Section("Figures", _figures(pairs, scenario.slo)),
        Section("Assumptions", _assumptions(scenario, pairs)),
        Section("Metric definitions", list(blocks.definitions())),
    ]
    return Document(f"clustersim simulate: {scenario.name}",
                    f"{blocks.lead(scenario)}Model {scenario.model}.",
                    sections)


def comparison_table(colocated: RunSummary, split: RunSummary) -> Table:
    """The two runs side by side, as ``compare`` prints them."""
    return Table(("", "colocated", "disaggregated"), tuple(comparison_rows(colocated, split)),
                 "lrr")


def compare_document(runs: dict[str, tuple[RunResult, RunSummary]], verdict: Verdict,
                     handoff_budget_s: float, scenario: Scenario,
                     notes: tuple[str, ...] = ()) -> Document:
    """The report of ``clustersim compare --report``: ``runs`` holds the colocated and the
    disaggregated run with their summaries; ``notes``, how compare built both sides from the
    scenario (``plan.counterparts``)."""
    pairs = [(label, run, summary) for label, (run, summary) in runs.items()]
    colocated, split = runs["colocated"][1], runs["disaggregated"][1]
    keep = "keep the disaggregated layout" if verdict.keep_split else "stay colocated"
    words = threshold_text(HOLDS_WITHIN, "the planner's default tolerance")
    verdict_blocks: list[Block] = [
        Text.of(f"The keep-or-reject rule for a split, on the same traffic and GPUs: {keep}. "
                "A split is kept only if throughput (requests meeting the SLO per second over "
                "the makespan, first arrival to last finish, or finished ones without an SLO) "
                "rises, no p95 latency worsens and the KV handoff p95 fits its "
                f"{fmt.limit_ms(handoff_budget_s)} budget; {words}."),
        Bullets.of(*verdict.reasons),
        comparison_table(colocated, split),
        *([Text.of("How both sides were built from the scenario:"), Bullets.of(*notes)]
          if notes else []),
    ]
    run_blocks: list[Block] = []
    for label, run, summary in pairs:
        run_blocks += _run_blocks(label, run, summary)
    run_blocks.append(blocks.BENCHMARK_NOTE)
    verdicts = [(f"the {label} run", summary.slo) for label, _, summary in pairs
                if summary.slo is not None]
    if verdicts:
        run_blocks.append(blocks.slo_note(verdicts))
    sections = [
        Section("Verdict", verdict_blocks),
        Section("Runs", run_blocks),
        Section("Figures", _figures(pairs, scenario.slo, handoff_budget_s)),
        Section("Assumptions", _assumptions(scenario, pairs)),
        Section("Metric definitions", list(blocks.definitions())),
    ]
    return Document(f"clustersim compare: {scenario.name}",
                    f"{blocks.lead(scenario)}Model {scenario.model}; "
                    "colocated against prefill/decode-disaggregated on the same traffic and "
                    "GPUs.", sections)
