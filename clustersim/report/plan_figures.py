"""Figures of a plan's ledger: attainment against offered rate per simulated candidate (every
bisection probe with its Wilson interval; one attainment axis for all panels), goodput against
the P:D ratio (the ratios simulated, as points; per GPU where sizes differ), the Pareto front
of output tokens/s per GPU against tokens/s per user, and N+1 (each loss's requests against
the target, red where it fails). ``numbers`` maps candidate ids to the row numbers of the
report's candidates table, which label the points. A caption's "Here" sentence reads its
numbers off what the figure draws."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import TYPE_CHECKING

from clustersim.plan import story
from clustersim.plan.day import DayPlan
from clustersim.plan.generations import against, dollars
from clustersim.plan.result import CandidateResult, LossCheck, NPlusOne, PlanResult
from clustersim.plan.sensitivity import Sensitivity
from clustersim.report import fmt
from clustersim.report.document import Figure
from clustersim.report.figures import (
    COLOCATED,
    FAILS,
    FINISHED_LATE,
    HOLDS,
    LATE,
    LOST,
    MET_HOLDS,
    MET_SHORT,
    NEVER_FINISHED,
    PALETTE,
    SHARES,
    TARGET,
    canvas,
    figure,
    layout_color,
    legend_outside,
    place_labels,
)
from clustersim.report.run_figures import WINDOW_LEGEND, window_shares

if TYPE_CHECKING:
    from clustersim.scenario import SLO

COLUMNS = 3
DASHES = ("--", ":", "-.", (0, (5, 1, 1, 1, 1, 1)))


def _with_probes(result: PlanResult) -> list[CandidateResult]:
    return [c for c in result.measured if c.probes]


def attainment_vs_rate(result: PlanResult, numbers: dict[str, int], target: float,
                       name: str = "attainment-vs-rate") -> Figure | None:
    """One panel per simulated candidate: each probe's attainment at its offered rate with the
    Wilson 95 % interval (a band through the first seed's probes), the target, the goodput."""
    shown = _with_probes(result)
    if not shown:
        return None
    columns = min(COLUMNS, len(shown))
    rows = math.ceil(len(shown) / columns)
    floor = max(0, min(p.attainment_low for c in shown for p in c.probes) * 100 - 5)
    with canvas(11 * max(columns, 2) / COLUMNS, 2.9 * rows + 0.8) as fig:
        axes = fig.subplots(rows, columns, squeeze=False, sharey=True)  # one y range: compared
        for ax in axes.flat[len(shown):]:
            ax.set_visible(False)
        for ax, c in zip(axes.flat, shown, strict=False):
            by_seed: dict[int, list] = defaultdict(list)
            for p in c.probes:
                by_seed[p.seed].append(p)
            for seed, probes in sorted(by_seed.items()):
                probes.sort(key=lambda p: p.rate_per_s)
                rates = [p.rate_per_s for p in probes]
                color = PALETTE[seed % len(PALETTE)]
                if seed == min(by_seed):
                    ax.fill_between(rates, [p.attainment_low * 100 for p in probes],
                                    [p.attainment_high * 100 for p in probes], color=color,
                                    alpha=0.2, linewidth=0, step=None)
                    ax.plot(rates, [p.attainment * 100 for p in probes], "-", color=color,
                            linewidth=0.8)
                ax.errorbar(rates, [p.attainment * 100 for p in probes],
                            # clipped: Wilson's bound can miss the share by a rounding error
                            yerr=[[max(0.0, p.attainment - p.attainment_low) * 100
                                   for p in probes],
                                  [max(0.0, p.attainment_high - p.attainment) * 100
                                   for p in probes]],
                            fmt="o", markersize=3, color=color, elinewidth=0.8, capsize=1.5,
                            label=f"seed {result.seeds[seed]}")
                failed = [p for p in probes if not p.met]
                ax.plot([p.rate_per_s for p in failed], [p.attainment * 100 for p in failed],
                        "x", color="black", markersize=4, label="probe failing the SLO")
            ax.axhline(target * 100, color=TARGET, linestyle=":", linewidth=1,
                       label=f"target {target:.0%}")
            g = c.goodput
            if g is not None and g.mean_per_s > 0:
                ax.axvline(g.mean_per_s, color="black", linestyle="--", linewidth=1,
                           label="goodput (mean over seeds)")
                if g.high_per_s > g.low_per_s:
                    ax.axvspan(g.low_per_s, g.high_per_s, color="grey", alpha=0.15,
                               linewidth=0, label="its 95 % interval")
            ax.set_title(f"#{numbers[c.id]} {c.candidate.label()}", fontsize=7, wrap=True)
            ax.set_xlabel("offered rate (req/s)")
            ax.set_ylabel("SLO attainment (%)")
            ax.yaxis.set_tick_params(labelleft=True)
        axes.flat[0].set_ylim(floor, 101)
        legend_outside(fig, where="below", ncols=4,
                       order=[f"seed {seed}" for seed in result.seeds])
        caption = ("Every simulation of each candidate's goodput bisection: its attainment "
                   "(share of requests meeting the SLO) at the offered rate, with the Wilson "
                   "95 % interval over its requests (bars; the band joins the first seed's "
                   "probes), failing probes crossed. The dotted line is the target "
                   f"({target:.0%}); the dashed line is the goodput (mean over seeds)"
                   + (" and the grey span its 95 % interval" if any(
                       c.goodput is not None and c.goodput.high_per_s > c.goodput.low_per_s
                       for c in shown) else "")
                   + ". Every panel has the same attainment axis. What to see: goodput is "
                   "where the attainment curve crosses the target; a wide band or seeds far "
                   "apart mean a noisy estimate.")
        return figure(fig, name, "SLO attainment against offered rate per candidate", caption)


def goodput_vs_pd(result: PlanResult, numbers: dict[str, int],
                  name: str = "goodput-vs-pd") -> Figure | None:
    """Each simulated disaggregated candidate's goodput as a point at its P:D ratio (only the
    ratios simulated; points, no line: the axis is categorical), the colocated candidates as
    horizontal lines with their intervals. Per GPU when the candidates differ in size."""
    split = [c for c in result.measured if c.candidate.layout == "disaggregated"]
    if not split:
        return None
    colocated = [c for c in result.measured if c.candidate.layout == "colocated"]
    per_gpu = len({c.candidate.num_gpus for c in split + colocated}) > 1

    def value(c: CandidateResult, per_s: float) -> float:
        return _scaled(c, per_s, per_gpu)

    ratios = sorted({c.candidate.pd_ratio for c in split},
                    key=lambda r: (int(r.split(":")[0]) / sum(map(int, r.split(":"))), r))
    where = {r: i for i, r in enumerate(ratios)}
    families: dict[tuple, list[CandidateResult]] = defaultdict(list)
    for c in split:
        families[c.candidate.family].append(c)
    spread = 0.5 / max(len(families), 1)  # families side by side within a ratio's slot
    points, texts = [], []
    with canvas(9, 4.6) as fig:
        ax = fig.subplots()
        for j, c in enumerate(colocated):
            g = c.goodput
            ax.axhline(value(c, g.mean_per_s), color=COLOCATED, alpha=0.8,
                       linestyle=DASHES[j % len(DASHES)], linewidth=1,
                       label=f"colocated #{numbers[c.id]} {c.candidate.label()}"
                       + (f" ({c.candidate.num_gpus} GPUs)" if per_gpu else ""))
            if g.high_per_s > g.low_per_s:
                ax.axhspan(value(c, g.low_per_s), value(c, g.high_per_s), color=COLOCATED,
                           alpha=0.07, linewidth=0)
        for i, members in enumerate(families.values()):
            pools = ", ".join(f"{p.role} {p.gpu} {p.parallel}"
                              for p in members[0].candidate.pools)
            budget = members[0].candidate.max_num_batched_tokens
            label = pools + ("" if budget is None else f", mnbt {budget}")
            xs = [where[c.candidate.pd_ratio] + (i - (len(families) - 1) / 2) * spread
                  for c in members]
            ys = [value(c, c.goodput.mean_per_s) for c in members]
            ax.errorbar(xs, ys,
                        yerr=[[max(0.0, y - value(c, c.goodput.low_per_s))
                               for y, c in zip(ys, members, strict=True)],
                              [max(0.0, value(c, c.goodput.high_per_s) - y)
                               for y, c in zip(ys, members, strict=True)]],
                        fmt="o", linestyle="none", color=PALETTE[(i + 1) % len(PALETTE)],
                        capsize=3, markersize=5, label=label)
            for x, y, c in zip(xs, ys, members, strict=True):
                points.append((x, y))
                texts.append(f"#{numbers[c.id]}" + (f" ({c.candidate.num_gpus} GPUs)"
                                                    if per_gpu else ""))
        ax.set_xticks(range(len(ratios)), [f"{r}" for r in ratios])
        ax.set_xlim(-0.5, len(ratios) - 0.5)
        ax.set_xlabel("P:D ratio (prefill : decode instances; only the ratios simulated)")
        ax.set_ylabel("goodput per GPU (req/s per GPU)" if per_gpu else "goodput (req/s)")
        ax.grid(False, axis="x")
        legend_outside(fig, where="below", ncols=2)
        place_labels(ax, points, texts)
        caption = ("Goodput of each simulated disaggregated candidate at its P:D ratio, with "
                   "its 95 % interval over seeds (one colour per pool and engine "
                   "configuration; #n are rows of the candidates table); the colocated "
                   "candidates' goodput as horizontal lines, their intervals shaded. "
                   + ("The candidates differ in size, so every goodput is divided by its "
                      "GPUs (per GPU). " if per_gpu else "")
                   + "What to see: the ratio where a split peaks, and whether that peak "
                   "clears the colocated lines by more than the intervals' width. "
                   + _pd_reading(result, split, colocated, numbers, per_gpu))
        return figure(fig, name, "goodput against P:D ratio", caption)


def _scaled(c: CandidateResult, per_s: float, per_gpu: bool) -> float:
    """A rate as the P:D figure plots it: per GPU of the candidate, or as is."""
    return per_s / c.candidate.num_gpus if per_gpu else per_s


def _pd_reading(result: PlanResult, split: list[CandidateResult],
                colocated: list[CandidateResult], numbers: dict[str, int], per_gpu: bool) -> str:
    """The figure's answer in a sentence: the plan's best split against its best colocated
    layout (``PlanResult.best``, named as the text names them), whether their intervals
    overlap, and any point drawn higher than the plan's pick with what chose the pick."""

    def per(c: CandidateResult, per_s: float) -> float:
        return _scaled(c, per_s, per_gpu)

    def shown(c: CandidateResult) -> str:
        g = c.goodput
        unit = "req/s per GPU" if per_gpu else "req/s"
        number = fmt.per_gpu if per_gpu else fmt.rate
        text = f"{number(per(c, g.mean_per_s))}"
        if g.high_per_s > g.low_per_s:
            text += f" [{number(per(c, g.low_per_s))}-{number(per(c, g.high_per_s))}]"
        return (f"#{numbers[c.id]} {c.candidate.label()} "
                f"({c.candidate.pd_ratio or 'colocated'}, {text} {unit})")

    def pick(layout: str, drawn: list[CandidateResult]) -> CandidateResult | None:
        cid = result.best.get(layout)
        return next((c for c in drawn if c.id == cid), None)

    best, rival = pick("disaggregated", split), pick("colocated", colocated)
    if best is None:
        return "The plan recommends nothing, so it names no best split or colocated layout."
    text = f"Here the plan's {story.kind_name('disaggregated')} is {shown(best)}"
    higher = []
    for drawn, chosen in ((split, best), (colocated, rival)):
        top = max(drawn, key=lambda c: per(c, c.goodput.mean_per_s), default=None)
        if (top is not None and chosen is not None and top.id != chosen.id
                and per(top, top.goodput.mean_per_s) > per(chosen, chosen.goodput.mean_per_s)):
            higher.append(top)
    note = ""
    if higher:
        note = (" " + "; ".join(f"#{numbers[c.id]} is drawn higher" for c in higher)
                + f": the plan picks each kind as it picked the recommendation, by "
                f"{result.chosen_by or 'its objective'}.")
    if rival is None:
        return text + "; no colocated candidate was simulated." + note
    a, b = best.goodput, rival.goodput
    side = "above" if per(best, a.mean_per_s) > per(rival, b.mean_per_s) else (
        "below" if per(best, a.mean_per_s) < per(rival, b.mean_per_s) else "level with")
    text += f", {side} its {story.kind_name('colocated')} {shown(rival)}"
    if len(a.per_seed_per_s) < 2 or len(b.per_seed_per_s) < 2:
        return text + "; one of them was measured on one traffic draw, with no interval." + note
    overlap = (per(best, a.low_per_s) <= per(rival, b.high_per_s)
               and per(rival, b.low_per_s) <= per(best, a.high_per_s))
    return text + ("; their intervals overlap, so the seeds cannot tell them apart."
                   if overlap else "; their intervals do not overlap.") + note


def n_plus_one(n1: NPlusOne, slo: SLO, name: str = "n-plus-one") -> Figure | None:
    """N+1 at a glance: for every loss tried, the requests over the run and from the failure
    on (met the SLO, red when that reading fails; finished outside it; never finished)
    against the target; below, the worst losses' requests per window of arrivals."""
    checks = [c for c in n1.tried if c.attainment is not None]
    if not checks:
        return None
    timelines = [c for c in (n1.instance, n1.node) if c is not None and c.summary is not None
                 and c.summary.faults is not None and c.summary.faults.timeline]
    target = slo.attainment_target
    top_in = 1.2 + 0.42 * 2 * len(checks)
    with canvas(10, top_in + 2.3 * len(timelines)) as fig:
        if timelines:  # subfigures: the top panel's long labels do not narrow the timelines
            top, below = fig.subfigures(2, 1, height_ratios=[top_in, 2.3 * len(timelines)])
            _loss_bars(top.subplots(), n1, checks, target)
            _loss_timelines(below.subplots(len(timelines), 1, sharex=True, sharey=True,
                                           squeeze=False)[:, 0], timelines, target)
        else:
            _loss_bars(fig.subplots(), n1, checks, target)
        legend_outside(fig, order=SHARES)
        rule = ("a reading holds when its coloured part reaches the dotted target "
                f"({target:.0%})" if slo.criterion == "joint" else
                f"the coloured part is the joint share against the dotted target ({target:.0%}); "
                f"a reading's colour follows the plan's {slo.criterion} criterion")
        caption = (f"N+1 at {fmt.rate(n1.rate_per_s)} req/s ({n1.rate_basis}). Top: every loss "
                   "tried, read over the whole run and over the requests that arrived from the "
                   "failure on; each bar is all those requests: met the SLO (blue where the "
                   "reading holds, red where it fails), finished outside it (light grey), never "
                   "finished (dark grey, hatched). "
                   + ("Below: the worst loss" + ("es" if len(timelines) > 1 else "")
                      + " over time, each bar a window of arrivals: " + WINDOW_LEGEND + ". "
                      if timelines else "")
                   + f"What to see: {rule}; red anywhere is a share short of it. Here "
                   + _n1_reading(checks))
        return figure(fig, name, "N+1: SLO attainment and lost requests for each loss",
                      caption)


def _loss_bars(ax, n1: NPlusOne, checks: list[LossCheck], target: float) -> None:
    """One horizontal bar per loss and reading, its requests stacked, the target a line."""
    ticks = []
    for i, c in enumerate(checks):
        for j, (reading, met, meets, shares) in enumerate(_readings(c)):
            y = -(2 * i + j) - 0.25 * i  # a gap between losses
            _share_bar(ax, y, met, meets, shares)
            ticks.append((y, f"lose {c.kind} {c.lost}: {reading}"
                          + (f"\n({c.num_lost:,} attempts lost, {c.num_failed:,} requests "
                             "failed)" if j == 0 else "")))
    ax.set_yticks([y for y, _ in ticks], [text for _, text in ticks])
    ax.axvline(target * 100, color=TARGET, linestyle=":", linewidth=1.5, zorder=5,
               label=f"target {target:.0%}")
    ax.set_xlim(0, 100)
    ax.set_xlabel("share of the requests (%)")
    ax.set_ylabel("part lost (reading)")
    ax.grid(False, axis="y")
    ax.set_title(f"N+1 at {fmt.rate(n1.rate_per_s)} req/s: "
                 f"{'holds' if n1.holds else 'FAILS'}", color=HOLDS if n1.holds else FAILS,
                 fontweight="bold")


def _loss_timelines(axes, timelines: list[LossCheck], target: float) -> None:
    """The worst losses over time: each window of arrivals' requests, the failure marked."""
    for ax, c in zip(axes, timelines, strict=True):
        window_shares(ax, c.summary.faults.timeline, target)
        ax.axvline(c.at_s, color="black", linestyle="--", linewidth=1.2, label="the failure")
        ax.set_title(f"losing {c.kind} {c.lost} at {c.at_s:g} s "
                     f"({'holds' if c.holds else 'fails'}): the requests of each window of "
                     "arrivals", color=HOLDS if c.holds else FAILS)
    axes[-1].set_xlabel("simulated time of the requests' first arrival (s)")


def _readings(c: LossCheck) -> list[tuple[str, float, bool, tuple[float, float] | None]]:
    """A loss check's two readings: name, joint attainment, verdict and, when its run is at
    hand, the shares (finished outside the SLO, never finished)."""
    summary = c.summary
    whole = after = None
    if summary is not None and summary.slo is not None:
        whole = summary.slo
    if summary is not None and summary.faults is not None:
        after = summary.faults.after
    out = []
    for reading, met, meets, slo in (("over the run", c.attainment, c.meets, whole),
                                     ("from the failure on", c.attainment_after,
                                      c.meets_after, after)):
        shares = None
        if slo is not None and slo.attainment is not None:
            shares = (max(0.0, 1 - slo.rejected_share - slo.attainment), slo.rejected_share)
        out.append((reading, 0.0 if met is None else met, meets, shares))
    return out


def _share_bar(ax, y: float, met: float, meets: bool,
               shares: tuple[float, float] | None) -> None:
    color = HOLDS if meets else FAILS
    ax.barh(y, met * 100, color=color, height=0.8, label=MET_HOLDS if meets else MET_SHORT)
    if shares is not None:
        late, lost = shares
        if late > 0:
            ax.barh(y, late * 100, left=met * 100, color=LATE, height=0.8,
                    label=FINISHED_LATE)
        if lost > 0:
            ax.barh(y, lost * 100, left=(met + late) * 100, color=LOST, hatch="///",
                    edgecolor="white", linewidth=0, height=0.8, label=NEVER_FINISHED)
    ax.annotate(fmt.share(met), (met * 100, y), xytext=(3, 0), textcoords="offset points",
                va="center", fontsize=7, fontweight="bold", color="black",
                bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "linewidth": 0,
                      "alpha": 0.8})


def _n1_reading(checks: list[LossCheck]) -> str:
    failing = [c for c in checks if not c.holds]
    if not failing:
        low = min(checks, key=lambda c: min(c.attainment or 0, c.attainment_after or 0))
        return (f"every loss holds; the closest is losing {low.lost}, "
                f"{fmt.share(low.attainment)} over the run and "
                f"{fmt.share(low.attainment_after)} from the failure on.")
    worst = min(failing, key=lambda c: (c.attainment_after or 0, c.attainment or 0))
    return (f"{len(failing)} of {len(checks)} losses fail; the worst, losing {worst.lost}, "
            f"leaves {fmt.share(worst.attainment)} of the run's requests and "
            f"{fmt.share(worst.attainment_after)} of those from the failure on within the "
            f"SLO; {worst.num_failed:,} requests failed outright.")


def pareto(result: PlanResult, numbers: dict[str, int], name: str = "pareto") -> Figure | None:
    """Output tokens/s per GPU against tokens/s per user at goodput, the front joined, each
    point labelled by its row number where no other label or point is."""
    points = [c for c in result.measured if c.at_goodput is not None
              and c.at_goodput.tokens_per_s_per_user is not None
              and c.at_goodput.output_tokens_per_s_per_gpu is not None]
    if not points:
        return None
    with canvas(8, 4.6) as fig:
        ax = fig.subplots()
        draw_pareto(ax, result, points, numbers)
        parts = ["Each simulated candidate at its goodput: how fast one stream reads "
                 "(tokens/s per user) against how much the fleet produces per GPU"]
        kinds = [f"{marker} {layout} ({'blue' if layout == 'colocated' else 'red'})"
                 for layout, marker in (("colocated", "circles"), ("disaggregated", "triangles"))
                 if any(c.candidate.layout == layout for c in points)]
        parts.append("; " + ", ".join(kinds))
        if result.recommended is not None and any(c.id == result.recommended.id for c in points):
            parts.append(", the star the recommendation")
        parts.append(", #n rows of the candidates table. What to see: ")
        front = [c for c in points if c.id in set(result.pareto)]
        if len(front) > 1:
            parts.append(f"the front (black line) holds the {len(front)} candidates no other "
                         "beats on both axes; up and to the right is better.")
        elif front:
            parts.append(f"#{numbers[front[0].id]} beats every other candidate on both axes "
                         "(a front of one); up and to the right is better.")
        else:
            parts.append("up and to the right is better.")
        return figure(fig, name, "Pareto front of throughput per GPU and per user",
                      "".join(parts))


def draw_pareto(ax, result: PlanResult, points: list[CandidateResult],
                numbers: dict[str, int]) -> list:
    """The Pareto axes; returns the point labels (``place_labels``)."""
    front = set(result.pareto)
    for layout, marker in (("colocated", "o"), ("disaggregated", "^")):
        mine = [c for c in points if c.candidate.layout == layout]
        if mine:
            ax.scatter([c.at_goodput.tokens_per_s_per_user for c in mine],
                       [c.at_goodput.output_tokens_per_s_per_gpu for c in mine],
                       marker=marker, s=36, color=layout_color(layout), label=layout,
                       zorder=3)
    on_front = sorted((c for c in points if c.id in front),
                      key=lambda c: c.at_goodput.tokens_per_s_per_user)
    if len(on_front) > 1:
        ax.plot([c.at_goodput.tokens_per_s_per_user for c in on_front],
                [c.at_goodput.output_tokens_per_s_per_gpu for c in on_front], "-",
                color="black", linewidth=1, label="Pareto front", zorder=2)
    rec = result.recommended
    if rec is not None and rec.at_goodput is not None and any(c.id == rec.id for c in points):
        ax.scatter([rec.at_goodput.tokens_per_s_per_user],
                   [rec.at_goodput.output_tokens_per_s_per_gpu], marker="*", s=220,
                   facecolors="none", edgecolors="black", linewidths=1.2,
                   label="recommendation", zorder=4)
    ax.set_xlabel("per-user speed (tokens/s per user = 1 / mean TPOT)")
    ax.set_ylabel("output throughput per GPU (tokens/s)")
    ax.margins(0.12)  # room for the labels inside the axes
    legend_outside(ax.get_figure(root=True))
    return place_labels(ax, [(c.at_goodput.tokens_per_s_per_user,
                              c.at_goodput.output_tokens_per_s_per_gpu) for c in points],
                        [f"#{numbers[c.id]}" for c in points], marker_pt=12)


GENERATION_MARKERS = {"colocated": "o", "disaggregated": "^", "three_pool": "s"}


def cost_vs_interactivity(result: PlanResult, numbers: dict[str, int],
                          name: str = "generations") -> Figure | None:
    """``plan.gpus``: every simulated candidate of every priced generation at its goodput,
    $ per 1M output tokens against output tokens/s per user, a colour per generation, each
    generation's best layout ringed, the recommendation starred."""
    gens = result.generations
    if gens is None:
        return None
    colours = {gpu: PALETTE[i % len(PALETTE)] for i, gpu in enumerate(gens.gpus)}
    points = [c for c in result.measured if c.at_goodput is not None
              and c.at_goodput.tokens_per_s_per_user is not None
              and c.cost_per_million_output_tokens is not None
              and _generation(c) in colours]
    if not points:
        return None
    bests = {g.best.id: g for g in gens.entries if g.best is not None
             and g.cost_per_million_output_tokens is not None}

    def xy(c: CandidateResult) -> tuple[float, float]:
        assert c.at_goodput is not None and c.at_goodput.tokens_per_s_per_user is not None
        assert c.cost_per_million_output_tokens is not None
        return c.at_goodput.tokens_per_s_per_user, c.cost_per_million_output_tokens

    with canvas(8, 4.6) as fig:
        ax = fig.subplots()
        for gpu in gens.gpus:
            for layout, marker in GENERATION_MARKERS.items():
                mine = [c for c in points if _generation(c) == gpu
                        and c.candidate.layout == layout]
                if mine:
                    label = gpu if layout == "colocated" else f"{gpu}, {layout}"
                    ax.scatter([xy(c)[0] for c in mine], [xy(c)[1] for c in mine],
                               marker=marker, s=36, color=colours[gpu], label=label, zorder=3)
        ringed = [c for c in points if c.id in bests]
        if ringed:
            ax.scatter([xy(c)[0] for c in ringed], [xy(c)[1] for c in ringed], marker="o",
                       s=150, facecolors="none", edgecolors="black", linewidths=0.9,
                       label="each generation's best layout", zorder=4)
        rec = result.recommended
        if rec is not None and any(c.id == rec.id for c in points):
            ax.scatter([xy(rec)[0]], [xy(rec)[1]], marker="*", s=260, facecolors="none",
                       edgecolors="black", linewidths=1.2, label="recommendation", zorder=5)
        ax.set_xlabel("interactivity (output tokens/s per user = 1 / mean TPOT)")
        ax.set_ylabel("cost ($ per 1M output tokens at goodput)")
        ax.margins(x=0.12)
        ax.set_ylim(0, max(xy(c)[1] for c in points) * 1.18)  # from zero: costs compare
        legend_outside(fig)
        place_labels(ax, [xy(c) for c in points], [f"#{numbers[c.id]}" for c in points],
                     marker_pt=14)
        caption = ("Every simulated candidate of each priced GPU generation at its goodput: "
                   "what 1M output tokens cost against how fast one stream reads (output "
                   "tokens/s per user); a colour per generation, circles colocated"
                   + (", triangles split" if any(c.candidate.layout == "disaggregated"
                                                 for c in points) else "")
                   + (", squares three-pool" if any(c.candidate.layout == "three_pool"
                                                    for c in points) else "")
                   + ", each generation's best layout ringed, the star the recommendation, "
                   "#n rows of the candidates table. What to see: lower is cheaper per token, "
                   "right is faster for each user; the plan names the lowest ringed point "
                   "among the generations that meet the target. " + _generations_reading(
                       result, numbers, points))
        return figure(fig, name, "Cost per 1M output tokens against interactivity, per GPU "
                      "generation", caption)


def _generation(c: CandidateResult) -> str:
    """The one GPU a generation's candidate runs on."""
    return next(iter(c.candidate.gpus_by_type))


def _generations_reading(result: PlanResult, numbers: dict[str, int],
                         points: list[CandidateResult]) -> str:
    """The figure's answer in a sentence, read off what it draws: the recommendation's point
    against each other generation's best, and what is not drawn."""
    gens = result.generations
    assert gens is not None
    drawn = {c.id for c in points}
    parts = []
    if gens.winner is not None:
        win = gens.entry(gens.winner)
        assert win.best is not None and win.best.at_goodput is not None
        text = (f"Here the recommendation, #{numbers[win.best.id]} ({gens.winner}), costs "
                f"{dollars(win.cost_per_million_output_tokens)} per 1M output tokens at "
                f"{fmt.tokens_per_s(win.best.at_goodput.tokens_per_s_per_user)} tokens/s per "
                "user")
        others = [e for e in gens.entries if e.gpu != gens.winner and e.eligible
                  and e.best is not None and e.best.id in drawn]
        if others:
            text += "; the other generations' best: " + "; ".join(
                f"#{numbers[e.best.id]} ({e.gpu}) {dollars(e.cost_per_million_output_tokens)} "
                f"({against(e, win, gens.tolerance)})" for e in others if e.best is not None)
        parts.append(text + ".")
        if gens.tied and gens.by_cost != gens.winner:
            parts.append(f"The star is not the lowest ringed point: {gens.by_cost} is "
                         "cheaper by a margin the draws cannot tell from none, and the tie "
                         "rule chose the recommendation.")
    else:
        parts.append("Here no generation meets the SLO and the plan's target at a price, so "
                     "none is starred.")
    lower = [c for c in points if c.id not in {g.best.id for g in gens.entries if g.best}
             and any(g.best is not None and g.gpu == _generation(c)
                     and c.cost_per_million_output_tokens
                     < (g.best.cost_per_million_output_tokens or 0) for g in gens.entries)]
    if lower:
        parts.append(", ".join(f"#{numbers[c.id]}" for c in lower)
                     + (" sits" if len(lower) == 1 else " sit")
                     + " below its generation's ringed best: within a generation the plan "
                     f"picks by {result.objective} (and its tie rule), not by this axis.")
    missing = [e.gpu for e in gens.entries if e.price_usd_per_gpu_hour is None]
    if missing:
        parts.append(f"Not drawn: {', '.join(missing)}, unpriced.")
    return " ".join(parts)


def day_plan(day: DayPlan, target: float, name: str = "day") -> Figure:
    """A day of traffic: the demand per window against what each fleet can carry at its
    operating rate (top), and each fleet's SLO attainment per window against the target
    (below)."""
    hours = [w.start_s / 3600 for w in day.windows]
    step = day.window_s / 3600
    edges = [*hours, hours[-1] + step]
    static_cap = [max(w.needed_units for w in day.windows) * day.unit_rate_per_s] * len(hours)
    auto_cap = [w.autoscaled_units * day.unit_rate_per_s for w in day.windows]
    with canvas(10, 5.2) as fig:
        top, below = fig.subplots(2, 1, sharex=True, height_ratios=[3, 2])
        top.stairs([w.rate_per_s for w in day.windows], edges, baseline=None,
                   color="black", label="demand (req/s)")
        top.stairs(static_cap, edges, baseline=None, color=PALETTE[0], linestyle="--",
                   label=f"capacity, {day.static.name}")
        top.stairs(auto_cap, edges, baseline=None, color=PALETTE[1],
                   label=f"capacity, {day.autoscaled.name}")
        top.set_ylabel("rate (req/s)")
        top.set_ylim(bottom=0)
        below.stairs([w.static_attainment for w in day.windows], edges, baseline=None,
                     color=PALETTE[0], linestyle="--", label=f"attainment, {day.static.name}")
        below.stairs([w.autoscaled_attainment for w in day.windows], edges, baseline=None,
                     color=PALETTE[1], label=f"attainment, {day.autoscaled.name}")
        below.axhline(target, color=TARGET, linestyle=":", label=f"target {target:.0%}")
        below.set_ylabel("SLO attainment (share)")
        below.set_xlabel("time of day (h)")
        low = min(min(w.static_attainment, w.autoscaled_attainment) for w in day.windows)
        below.set_ylim(min(low, target) - 0.05, 1.01)
        legend_outside(fig, where="below", ncols=2)
        worst = min(day.windows, key=lambda w: w.autoscaled_attainment)
        caption = (f"A day of {day.curve} traffic scaled to a {fmt.rate(day.peak_rate_per_s)} "
                   f"req/s peak, in {day.window_s / 60:g} min windows; the recommendation read "
                   f"as units of {day.unit} ({day.unit_gpus} GPUs, "
                   f"{fmt.rate(day.unit_rate_per_s)} req/s each at its operating rate). Top: "
                   "the demand against the capacity of a fleet sized for the peak (dashed) and "
                   f"of one scaled every window (solid; units it adds serve "
                   f"{day.scale_up_delay_s:g} s into their window). Below: each window's SLO "
                   "attainment, read off the recommendation's probes at the load per unit. "
                   f"Here the static fleet runs {day.static.gpu_hours:,.0f} GPU-hours for "
                   f"{day.static.attainment:.1%} attainment over the day, the autoscaled one "
                   f"{day.autoscaled.gpu_hours:,.0f} for {day.autoscaled.attainment:.1%}; its "
                   f"worst window starts at hour {worst.start_s / 3600:g} "
                   f"({worst.autoscaled_attainment:.1%}).")
        return figure(fig, name, "A day of traffic: demand, capacity and attainment of a "
                      "static and an autoscaled fleet", caption)


def sensitivity(sens: Sensitivity, target: float, name: str = "sensitivity") -> Figure | None:
    """The recommendation's goodput against its KV links' bandwidth (left) and its SLO
    attainment per traffic draw with 20 % more traffic (right), each where it was read."""
    panels = [p for p in ("link", "load") if (p == "link" and sens.link)
              or (p == "load" and sens.load is not None)]
    if not panels:
        return None
    with canvas(4.6 * len(panels) + 0.6, 3.4) as fig:
        axes = fig.subplots(1, len(panels), squeeze=False)[0]
        reading = []
        for ax, panel in zip(axes, panels, strict=True):
            if panel == "link":
                points = [(r.scale, r.mean_per_s, r.low_per_s, r.high_per_s)
                          for r in sens.link]
                xs = [p[0] for p in points]
                ys = [p[1] for p in points]
                errors = [[p[1] - p[2] for p in points], [p[3] - p[1] for p in points]]
                ax.errorbar(xs, ys, yerr=errors, color=PALETTE[1], marker="o", capsize=4,
                            label="goodput (95% CI over draws)")
                ax.set_xscale("log", base=2)
                ax.set_xticks(xs, [f"{x:g}x" for x in xs])
                ax.set_xlabel("KV link bandwidth (x the topology's)")
                ax.set_ylabel("goodput (req/s)")
                ax.set_ylim(bottom=0)
                low, same, high = sens.link
                reading.append(f"half the KV bandwidth gives {low.mean_per_s:,.2f} req/s and "
                               f"double {high.mean_per_s:,.2f}, against {same.mean_per_s:,.2f} "
                               "at the topology's")
            else:
                load = sens.load
                assert load is not None
                draws = list(range(1, len(load.attainments) + 1))
                colors = [HOLDS if a >= target else FAILS for a in load.attainments]
                ax.bar(draws, load.attainments, color=colors)
                ax.axhline(target, color=TARGET, linestyle=":", label=f"target {target:.0%}")
                ax.set_xticks(draws)
                ax.set_xlabel("traffic draw (#)")
                ax.set_ylabel("SLO attainment (share)")
                ax.set_ylim(0, 1.02)
                reading.append(f"at +{load.factor - 1:.0%} ({fmt.rate(load.rate_per_s)} req/s) "
                               f"{load.num_meeting} of {len(load.attainments)} draws meet the "
                               f"SLO, {load.attainment:.1%} on average")
        legend_outside(fig, where="below", ncols=2)
        caption = ("The recommendation beyond the plan: its goodput with every link a KV "
                   "transfer crosses at half and at double the topology's bandwidth (left, each "
                   "draw bisected again), and its SLO attainment per traffic draw with 20 % more "
                   "traffic than its operating rate (right, blue where a draw meets the target, "
                   "red where it does not). Here " + "; ".join(reading) + ".")
        return figure(fig, name, "Sensitivity: goodput against KV bandwidth, attainment at "
                      "more load", caption)
