"""The report of a plan: the recommendation, the ledger as tables, the evidence as figures,
each simulated configuration in ``vllm bench serve``'s words, the assumptions.

It renders a :class:`PlanResult` and, for the recommendation and its runner-up, the full run
at goodput (``Planner.full_run`` of the very probe that gave ``at_goodput``), which the
timelines and CDFs draw from. Candidates are numbered in the ledger's order; the figures use
those numbers.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from clustersim.plan import generations, story
from clustersim.plan.result import CandidateResult, NPlusOne, PlanResult
from clustersim.plan.space import ROLE_LETTER
from clustersim.report import assumptions, blocks, fmt, plan_figures, run_figures
from clustersim.report.document import Block, Bullets, Document, Pre, Section, Span, Table, Text

if TYPE_CHECKING:
    from clustersim.plan.day import DayPlan
    from clustersim.plan.sensitivity import Sensitivity
    from clustersim.scenario import Scenario
    from clustersim.sim import RunResult

SIMULATED_HEADER = (
    "#", "candidate", "layout", "GPUs", "TP per pool", "P:D", "max_num_batched_tokens",
    "goodput req/s [95% CI]", "goodput per GPU", "TTFT p50 / p90 / p99 (ms)",
    "TPOT p50 / p90 / p99 (ms)", "ITL p50 / p90 / p99 (ms)", "attainment", "$/h",
    "$/1M output tokens", "status",
)
OTHER_HEADER = ("#", "candidate", "layout", "GPUs", "TP per pool", "P:D",
                "max_num_batched_tokens", "status", "screen estimate req/s", "$/h", "reason")


REPORT_OTHERS = 1_000
"""Rows of the report's table of candidates not simulated (the best ranked by the screen);
``ledger.csv`` and ``plan.json`` hold every one."""


def shown(result: PlanResult) -> Iterator[tuple[int, CandidateResult]]:
    """The rows the report shows, with their numbers in the ledger: every simulated one and
    the first ``REPORT_OTHERS`` of the others (the simulated come first in the ledger)."""
    others = 0
    for i, c in enumerate(result.candidates):
        if c.goodput is None:
            if others == REPORT_OTHERS:
                return
            others += 1
        yield i + 1, c


def numbers(result: PlanResult) -> dict[str, int]:
    """Candidate id -> its row number in the report's tables (the ledger's order)."""
    return {c.id: i for i, c in shown(result)}


def _gpus(c: CandidateResult) -> str:
    return " + ".join(f"{n} x {gpu}" for gpu, n in c.candidate.gpus_by_type.items())


def _tp(c: CandidateResult) -> str:
    return ", ".join(f"{ROLE_LETTER[p.role]} {p.parallel}".strip()
                     for p in c.candidate.pools)


def _goodput(c: CandidateResult) -> str:
    g = c.goodput
    if g is None:
        return fmt.DASH
    if g.short_window_s is not None:
        return f"at most {fmt.rate(g.mean_per_s)} (window too short)"
    if g.capped:
        return f"at least {fmt.rate(g.lower_per_s)} (not measured)"
    about = "" if g.converged else "about "
    if len(g.per_seed_per_s) == 1:
        return f"{about}{fmt.rate(g.mean_per_s)}"
    return (f"{about}{fmt.rate(g.mean_per_s)} [{fmt.rate(g.low_per_s)}-"
            f"{fmt.rate(g.high_per_s)}]")


def _cliff(c: CandidateResult) -> str:
    if not c.cliff:
        return fmt.DASH
    return " / ".join(f"{fmt.share(p.attainment)} ({p.num_meeting} of {len(p.attainments)})"
                      for p in c.cliff)


def _survives(n1: NPlusOne | None) -> str:
    if n1 is None:
        return fmt.DASH
    return " / ".join(f"{c.kind} {'holds' if c.holds else 'fails'}"
                      for c in (n1.instance, n1.node) if c is not None) or fmt.DASH


def _status(c: CandidateResult, result: PlanResult) -> str:
    if c.reason:
        return f"{c.status}, {c.reason}"
    if result.recommended is not None and c.id == result.recommended.id:
        return f"{c.status}, recommended"
    named = story.role(result, c.id)
    if named is not None:
        return f"{c.status}, {named}"
    if result.tie is not None and c.id in result.tie.tied:
        return f"{c.status}, tied for first"
    return c.status


def _mnbt(c: CandidateResult) -> str:
    budget = c.candidate.max_num_batched_tokens
    return "scenario's" if budget is None else str(budget)


def candidate_tables(result: PlanResult) -> list[Block]:
    simulated, others = [], []
    for i, c in shown(result):
        s = c.at_goodput
        common = (str(i), c.candidate.label(), c.candidate.layout, _gpus(c), _tp(c),
                  c.candidate.pd_ratio or fmt.DASH, _mnbt(c))
        if c.goodput is not None:
            lat = [fmt.DASH] * 3 if s is None else [
                fmt.triple(d.p50, d.p90, d.p99) for d in (s.ttft_s, s.tpot_s, s.itl_s)]
            attainment = None if s is None or s.slo is None else s.slo.attainment
            simulated.append((*common, _goodput(c), fmt.per_gpu(c.goodput_per_gpu), *lat,
                              fmt.share(attainment), fmt.dollars_per_hour(c.cost_per_hour),
                              fmt.dollars_per_million(c.cost_per_million_output_tokens),
                              _status(c, result)))
        else:
            others.append((*common, c.status, fmt.rate(c.screen_per_s),
                           fmt.dollars_per_hour(c.cost_per_hour), c.reason or ""))
    out: list[Block] = []
    if simulated:
        spread = ("goodput with its 95 % interval over seeds" if len(result.seeds) > 1
                  else "goodput on one seed (no interval)")
        out += [Text.of(f"Simulated: {spread}, and the figures of the run at goodput "
                        "(latencies in ms as p50 / p90 / p99; attainment is the joint share of "
                        "requests meeting the SLO; cost at goodput)."),
                Table(SIMULATED_HEADER, tuple(simulated), "llllllrrrrrrrrrl")]
    if others:
        rest = len(result.candidates) - len(simulated) - len(others)
        more = (f" The first {len(others):,} in the ledger's order are shown; {rest:,} more "
                "are in ledger.csv." if rest > 0 else "")
        out += [Text.of("Not simulated, each with its reason (screen estimate: the analytic "
                        f"screen's goodput):{more}"),
                Table(OTHER_HEADER, tuple(others), "llllllrlrrl")]
    return out


def _comparison(result: PlanResult, rec: CandidateResult, other: CandidateResult | None
                ) -> Table:
    pair = [rec] + ([other] if other is not None else [])
    checks = {rec.id: result.n_plus_one,
              **({other.id: result.runner_up_n_plus_one} if other is not None else {})}

    def row(label: str, cell) -> tuple[str, ...]:
        return (label, *(cell(c) for c in pair))

    def at(getter):
        return lambda c: fmt.DASH if c.at_goodput is None else getter(c.at_goodput)

    rows = (
        row("configuration", lambda c: c.candidate.label()),
        row("goodput req/s [95% CI]", _goodput),
        row("goodput per GPU", lambda c: fmt.per_gpu(c.goodput_per_gpu)),
        row("operating rate req/s (every draw met the SLO)",
            lambda c: fmt.rate(c.operating_rate_per_s)),
        row("attainment +5 % / +10 % above goodput (draws meeting)", _cliff),
        row("N+1 at the operating rate", lambda c: _survives(checks.get(c.id))),
        row("TTFT p90 (ms)", at(lambda s: fmt.ms(s.ttft_s.p90))),
        row("TPOT p90 (ms)", at(lambda s: fmt.ms(s.tpot_s.p90))),
        row("ITL p99 (ms)", at(lambda s: fmt.ms(s.itl_s.p99))),
        row("attainment at goodput", at(lambda s: fmt.share(s.slo.attainment if s.slo else None))),
        row("$ per 1M output tokens", lambda c: fmt.dollars_per_million(
            c.cost_per_million_output_tokens)),
        row("KV handoff p95 at the operating rate", lambda c: _handoff(c, result)),
        row("binding just above goodput (the lowest failing probe)", _binding),
    )
    header = ("", "recommendation") + ((story.kind_name(other.candidate.layout),) if other
                                       else ())
    return Table(header, rows, "l" * len(header))


def _handoff(c: CandidateResult, result: PlanResult) -> str:
    p95, budget = c.handoff_p95_s, result.handoff_budget_s
    if p95 is None or budget is None:
        return fmt.DASH
    verdict = "within" if p95 <= budget else "over"
    return f"{fmt.ms(p95)} ms, {verdict} the {fmt.ms(budget)} ms budget"


def _binding(c: CandidateResult) -> str:
    if not c.binding:
        return fmt.DASH
    rate = c.above_goodput_rate_per_s
    return c.binding if rate is None else f"at {fmt.rate(rate)} req/s: {c.binding}"


def short_answer(result: PlanResult) -> list[Block]:
    """The answer in a few lines, first in the report: the printout's and plan.json's."""
    return [Text.of(line) for line in result.short_answer]


def recommendation(result: PlanResult) -> list[Block]:
    verdict, rule = result.split_verdict, story.split_rule_sentence(result)
    # the split rule's part comes after the table, with its readings listed
    parts = [p for p in result.answer_parts or (result.answer,)
             if rule is None or not p.startswith(rule)]
    out: list[Block] = [Bullets.of(*parts) if len(parts) > 1 else Text.of(parts[0])]
    rec = result.recommended
    if rec is None:
        return out
    out.append(_comparison(result, rec, result.runner_up))
    if verdict is not None and rule is not None:
        out += [Text.of(rule), Bullets.of(*verdict.reasons)]
    if result.serve_commands:
        out += [Text.of("Deploy it:"), Pre("\n".join(result.serve_commands), "commands")]
    if result.bench_command:
        out += [Text.of("Check it on real GPUs (its output holds next to the Serving "
                        "Benchmark Result blocks below):"), Pre(result.bench_command, "commands")]
    return out


GENERATIONS_HEADER = ("GPU", "best layout", "#", "GPUs", "goodput req/s [95% CI]",
                      "goodput per GPU", "tokens/s per user", "$ per GPU-hour", "$/h",
                      "$/1M output tokens [95% CI]", "verdict")


def generations_section(result: PlanResult) -> list[Block]:
    """``plan.gpus``: each generation's best layout side by side, the comparison in words,
    the figure, and each best layout's launch lines."""
    gens = result.generations
    assert gens is not None
    num = numbers(result)
    winner = None if gens.winner is None else gens.entry(gens.winner)
    rows = []
    for g in gens.entries:
        r = g.best
        at = None if r is None else r.at_goodput
        verdict = generations.verdict(gens, g.gpu)
        if winner is not None and g.gpu != gens.winner and g.eligible:
            verdict += f" ({generations.against(g, winner, gens.tolerance)})"
        if g.shortfall is not None and g.shortfall != generations.UNPRICED:
            verdict += f": {g.shortfall}"
        rows.append((
            g.gpu, fmt.DASH if r is None else r.candidate.label(),
            fmt.DASH if r is None or r.id not in num else f"#{num[r.id]}",
            fmt.DASH if r is None else str(r.candidate.num_gpus),
            fmt.DASH if r is None else _goodput(r),
            fmt.per_gpu(None if r is None else r.goodput_per_gpu),
            fmt.tokens_per_s(None if at is None else at.tokens_per_s_per_user),
            "unpriced" if g.price_usd_per_gpu_hour is None
            else fmt.dollars_per_hour(g.price_usd_per_gpu_hour),
            fmt.dollars_per_hour(g.cost_per_hour), generations.cost_text(g), verdict))
    out: list[Block] = [
        Text.of("Each GPU generation planned on its own for the same traffic, SLO and seeds "
                "(every pool on that GPU), its best layout its plan's recommendation; cost "
                "per 1M output tokens at goodput, its interval from the goodput's 95 % "
                "interval over the traffic draws."),
        Table(GENERATIONS_HEADER, tuple(rows), "lllrlrrrrll"),
        Text.of(generations.sentence(gens)),
    ]
    figure = plan_figures.cost_vs_interactivity(result, num)
    if figure is not None:
        out.append(figure)
    for g in gens.entries:
        if g.serve_commands:
            who = "the recommendation" if g.gpu == gens.winner else "its best layout"
            out += [Text.of(f"{g.gpu}, {who}, launched:"),
                    Pre("\n".join(g.serve_commands), "commands")]
    return out


N1_HEADER = ("lost", "GPUs", "at (s)", "attainment over the run",
             "attainment from the failure on", "verdict", "attempts lost", "requests retried",
             "requests failed", "a spare $/h", "a spare $/1M output tokens")


def n_plus_one(result: PlanResult, slo) -> list[Block]:
    """The recommendation and the best alternative, each with one instance and one node lost:
    the checks, the verdicts, and a figure of every loss against the target with the worst
    losses over time."""
    out: list[Block] = []
    other = ("The best alternative" if result.runner_up is None
             else f"The {story.kind_name(result.runner_up.candidate.layout)}")
    for who, n1, name in (
            ("The recommendation", result.n_plus_one, "n-plus-one"),
            (other, result.runner_up_n_plus_one, "n-plus-one-alternative")):
        if n1 is not None:
            out += _n_plus_one_check(who, n1, result, slo, name)
    return out


def _n_plus_one_check(who: str, n1: NPlusOne, result: PlanResult, slo, name: str
                      ) -> list[Block]:
    several = sum(c.kind == "instance" for c in n1.tried) > 1
    rows = tuple(
        (f"{c.kind} {c.lost}" + (" (worst)" if several and c is n1.instance else ""),
         ", ".join(f"{n} x {gpu}" for gpu, n in c.gpus.items()), f"{c.at_s:g}",
         fmt.share(c.attainment), fmt.share(c.attainment_after),
         "holds" if c.holds else "fails", str(c.num_lost), str(c.num_retried_requests),
         str(c.num_failed), fmt.dollars_per_hour(c.spare_cost_per_hour),
         fmt.dollars_per_million(c.spare_cost_per_million_output_tokens))
        for c in n1.tried)
    verdict = ("holds its SLO" if n1.holds else "does not hold its SLO")
    times = sorted({c.at_s for c in n1.tried})
    when = (f"lost at {times[0]:g} s into the run" if len(times) == 1
            else "lost at the time the table gives")
    label = result.by_id(n1.candidate).candidate.label()
    out: list[Block] = [
        Text.of(Span(label, "strong"),
                f". {who} at its operating rate, {fmt.rate(n1.rate_per_s)} req/s "
                f"({n1.rate_basis}; the seed of its run at goodput), with one part {when} and "
                f"for the rest of the run, its clients retrying each lost request up to "
                f"{n1.max_retries} times: it {verdict} with N+1. Each role's first instance is "
                "lost in turn (the worst counts), and the node whose loss takes down the most "
                "instances. A spare is one more of what was lost, at the plan's prices; per 1M "
                "output tokens it is that spare's cost over the candidate's output at goodput."),
        Table(N1_HEADER, rows, "llrrrlrrrrr"),
    ]
    out += [Text.of(note) for note in n1.notes]
    figure = plan_figures.n_plus_one(n1, slo, name)
    if figure is not None:
        out.append(figure)
    return out


def _slo_terms(scenario: Scenario) -> str:
    slo = scenario.slo
    assert slo is not None
    limits = ", ".join(f"{blocks.LIMIT_MEANING[k]} <= {fmt.limit_ms(getattr(slo, k))}"
                       for k in blocks.LIMIT_NAMES if getattr(slo, k) is not None)
    return f"{limits} for {slo.attainment_target:.0%} of requests ({slo.criterion})"


def evidence(result: PlanResult, scenario: Scenario, runs: dict[str, RunResult],
             operating: dict[str, RunResult] | None = None) -> list[Block]:
    """The figures: at goodput (latency CDFs, KV and queue) from ``runs``, at the operating
    rate (step timeline, KV links and the handoff statistic) from ``operating``, each
    labelled with the row number and the name the answer gives it."""
    slo = scenario.slo
    assert slo is not None and scenario.plan is not None
    operating = operating or {}
    num = numbers(result)
    picked = [c for c in (result.recommended, result.runner_up)
              if c is not None and c.id in runs]

    def label(c: CandidateResult) -> str:
        return f"#{num[c.id]} {story.role(result, c.id) or c.candidate.label()}"

    def name(c: CandidateResult) -> str:
        return ("recommendation" if c is result.recommended
                else "runner-up")

    out: list[Block] = []
    if picked:
        out.append(run_figures.latency_cdfs(
            [(label(c), runs[c.id]) for c in picked], slo,
            what=" and ".join(f"{label(c)} ({c.candidate.label()})" for c in picked)
            + " at goodput"))
    for figure in (plan_figures.attainment_vs_rate(result, num, slo.attainment_target),
                   plan_figures.goodput_vs_pd(result, num), plan_figures.pareto(result, num)):
        if figure is not None:
            out.append(figure)
    for c in picked:
        run = operating.get(c.id)
        if run is None or c.operating_rate_per_s is None:
            continue
        timeline = run_figures.step_timeline(
            f"{label(c)} at its operating rate, {fmt.rate(c.operating_rate_per_s)} req/s",
            run, name=f"timeline-{name(c)}")
        if timeline is not None:
            out.append(timeline)
    for c in picked:
        assert c.at_goodput is not None
        out.append(run_figures.kv_and_queue(f"{label(c)} at goodput", runs[c.id], c.at_goodput,
                                            name=f"kv-queue-{name(c)}"))
    for c in picked:
        run = operating.get(c.id)
        if run is None or c.at_operating is None or c.operating_rate_per_s is None:
            continue
        links = run_figures.kv_links(
            f"{label(c)} at its operating rate, {fmt.rate(c.operating_rate_per_s)} req/s",
            run, c.at_operating, scenario.plan.handoff_budget_s, name=f"kv-links-{name(c)}",
            rate_per_s=c.operating_rate_per_s)
        if links is not None:
            out.append(links)
    if not picked:
        out.append(Text.of("No recommendation, so no run at goodput to draw latencies, "
                           "timelines and KV use from."))
    return out


def _which_probe(c: CandidateResult, result: PlanResult, seed: int) -> str:
    """Which of the bisection's probes the run at goodput is, read off the probes."""
    index = result.seeds.index(seed) if seed in result.seeds else None
    passing = [p.rate_per_s for p in c.probes if p.seed == index and p.met]
    if passing and c.at_goodput_rate_per_s == max(passing):
        return f"seed {seed}'s highest passing probe"
    return f"a probe of seed {seed}"


def benchmark_results(result: PlanResult) -> list[Block]:
    num = numbers(result)
    out: list[Block] = []
    for c in result.measured:
        s = c.at_goodput
        if s is None:
            continue
        out += [Text.of(Span(f"#{num[c.id]} {c.candidate.label()}", "strong"),
                        f", the run at goodput: {_which_probe(c, result, s.seed)}, offered "
                        f"{fmt.rate(c.at_goodput_rate_per_s)} req/s (goodput, over seeds: "
                        f"{_goodput(c)} req/s)"),
                blocks.benchmark_block(s, c.at_goodput_rate_per_s)]
    if out:
        out.append(blocks.BENCHMARK_NOTE)
    else:
        out.append(Text.of("No candidate met the SLO at any rate tried: there is no run at "
                           "goodput to show."))
    return out


def plan_assumptions(result: PlanResult, scenario: Scenario,
                     runs: dict[str, RunResult]) -> list[Block]:
    plan = scenario.plan
    assert plan is not None
    search = plan.search
    varied = tuple(name for name, choices in (("max_num_batched_tokens",
                                               plan.max_num_batched_tokens),
                                              ("enable_chunked_prefill",
                                               plan.enable_chunked_prefill)) if choices)
    budget = f", GPU budget {result.gpu_budget}" if result.gpu_budget else ""
    target = (f", target {fmt.rate(result.target_rate_per_s)} req/s"
              if result.target_rate_per_s else "")
    out: list[Block] = [
        Text.of(Span("SLO: ", "strong"), _slo_terms(scenario), "."),
        Text.of(Span("Search: ", "strong"),
                f"objective {result.objective}{budget}{target}; seeds "
                f"{', '.join(map(str, result.seeds))} (one independent traffic draw each); "
                f"bisection tolerance {result.tolerance:.0%}, at most {search.max_probes} "
                f"probes per seed; the {search.simulate_top} best of each layout kind by the "
                f"screen simulated{', then their neighbours' if search.neighbours else ''}; "
                f"every probe at least {search.min_requests:,} requests and "
                f"{search.min_duration_s:g} s of traffic; {result.num_simulations:,} "
                f"simulations of {result.num_simulated_requests:,} requests in all."),
        Text.of(Span("Engine settings", "strong"), " of the scenario (every candidate runs "
                "them, but for what the plan varies):"),
        assumptions.engine_settings(scenario, varied),
    ]
    for c in (result.recommended, result.runner_up):
        if c is None or c.at_goodput is None:
            continue
        out += [Text.of(Span("Engines that ran", "strong"), f" in {c.candidate.label()} (at "
                        "goodput; KV blocks as vLLM's memory arithmetic sizes them):"),
                blocks.engines_table(c.at_goodput)]
        if c.id in runs:
            table = assumptions.kv_transfer(runs[c.id])
            if table is not None:
                out += [Text.of(Span("KV handoff", "strong"), " (vLLM version switches of the "
                                "disaggregated flow):"), table]
            out += [Text.of(Span("Links", "strong"), f" of {c.candidate.label()}'s servers:"),
                    *assumptions.topology(runs[c.id])]
    out.append(Text.of(Span("Calibration", "strong"), ": the GPU profile that priced the "
                       "steps."))
    out += assumptions.calibration(list(runs.values()))
    out.append(Text.of(Span("Workload", "strong"), " as the scenario gives it:"))
    out += assumptions.workload(scenario, note=(
        f"Each probe offers this traffic at its own rate (the scenario's is "
        f"{fmt.rate(result.base_rate_per_s)} req/s), with its shape kept and, for a "
        "count-bounded workload, lengthened to the search's minimum requests and duration."))
    if result.prices:
        out += [Text.of(Span("Prices", "strong"), " (inputs, not measurements):"),
                Table(("GPU", "$ per GPU-hour", "source"),
                      tuple((gpu, f"${p['usd_per_gpu_hour']:,.2f}", str(p["source"]))
                            for gpu, p in result.prices.items()), "lrl")]
    return out


def sensitivity_section(sens: Sensitivity, target: float) -> list[Block]:
    """The readings as a table, then the figure."""
    rows = [("the plan's goodput", f"{fmt.rate(sens.goodput_per_s)} req/s")]
    rows += [(f"KV links at {r.scale:g}x", f"goodput {fmt.rate(r.mean_per_s)} req/s "
              f"(95% CI {r.low_per_s:,.2f}-{r.high_per_s:,.2f})") for r in sens.link]
    if sens.load is not None:
        load = sens.load
        rows.append((f"load +{load.factor - 1:.0%} ({fmt.rate(load.rate_per_s)} req/s)",
                     f"attainment {load.attainment:.1%}, {load.num_meeting} of "
                     f"{len(load.attainments)} draws meet {target:.0%}"))
    out: list[Block] = [Table(("reading", "result"), tuple(rows), "ll")]
    figure = plan_figures.sensitivity(sens, target)
    if figure is not None:
        out.append(figure)
    if sens.notes:
        out.append(Bullets.of(*sens.notes))
    return out


def day_section(day: DayPlan, target: float) -> list[Block]:
    """The recommendation over a day: the two fleets side by side, then the figure."""
    rows = []
    for fleet in (day.static, day.autoscaled):
        gpus = (str(fleet.max_gpus) if fleet.min_gpus == fleet.max_gpus
                else f"{fleet.min_gpus}-{fleet.max_gpus}")
        rows.append((fleet.name, gpus, f"{fleet.gpu_hours:,.0f}",
                     "-" if fleet.cost_usd is None else f"${fleet.cost_usd:,.0f}",
                     f"{fleet.attainment:.1%}", "yes" if fleet.meets else "no"))
    out: list[Block] = [
        Table(("fleet", "GPUs", "GPU-hours", "cost", "attainment over the day",
               f"meets {target:.0%}"), tuple(rows), "lrrrrl"),
        plan_figures.day_plan(day, target),
    ]
    if day.notes:
        out.append(Bullets.of(*day.notes))
    return out


def plan_document(result: PlanResult, scenario: Scenario, runs: dict[str, RunResult],
                  operating: dict[str, RunResult] | None = None) -> Document:
    """The plan's report; ``runs`` holds full runs at goodput by candidate id (the
    recommendation's and the runner-up's), ``operating`` their full runs at the operating
    rate."""
    sections = [
        Section("Answer", short_answer(result)),
        Section("Recommendation", recommendation(result)),
    ]
    if result.generations is not None:
        sections.append(Section("GPU generations", generations_section(result)))
    rec = result.recommended
    if rec is not None and rec.at_goodput is not None and rec.at_goodput.slo is not None:
        sections.append(Section("SLO verdict at goodput", [
            Pre(blocks.slo_text(rec.at_goodput.slo, rec.at_goodput, rec.at_goodput_rate_per_s,
                                "the recommendation")),
            blocks.slo_note([("the recommendation's run at goodput", rec.at_goodput.slo)],
                            at_goodput=True)]))
    if result.n_plus_one is not None or result.runner_up_n_plus_one is not None:
        sections.append(Section("N+1: one instance or one node lost",
                                n_plus_one(result, scenario.slo)))
    if result.sensitivity is not None:
        sections.append(Section("Sensitivity", sensitivity_section(
            result.sensitivity, scenario.slo.attainment_target)))
    if result.day is not None:
        sections.append(Section("A day of traffic", day_section(result.day,
                                                                scenario.slo.attainment_target)))
    sections += [
        Section("Candidates", candidate_tables(result)),
        Section("Evidence", evidence(result, scenario, runs, operating)),
        Section("Serving Benchmark Result per configuration", benchmark_results(result)),
        Section("Assumptions", plan_assumptions(result, scenario, runs)),
        Section("Metric definitions", list(blocks.definitions())),
    ]
    subtitle = (f"{blocks.lead(scenario)}Model {scenario.model}; SLO "
                f"{_slo_terms(scenario)}; objective {result.objective}.")
    return Document(f"clustersim plan: {result.scenario}", subtitle, sections)
