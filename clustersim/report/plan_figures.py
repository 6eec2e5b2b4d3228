"""Figures of a plan's ledger: attainment against offered rate per simulated candidate (every
bisection probe with its Wilson interval), goodput against the P:D ratio, and the Pareto front
of output tokens/s per GPU against tokens/s per user. ``numbers`` maps candidate ids to the
row numbers of the report's candidates table, which label the points."""

from __future__ import annotations

import math
from collections import defaultdict

from clustersim.plan.result import CandidateResult, PlanResult
from clustersim.report.document import Figure
from clustersim.report.figures import (
    COLOCATED,
    PALETTE,
    TARGET,
    canvas,
    figure,
    layout_color,
)

COLUMNS = 3
DASHES = ("--", ":", "-.", (0, (5, 1, 1, 1, 1, 1)))


def _with_probes(result: PlanResult) -> list[CandidateResult]:
    return [c for c in result.candidates if c.probes]


def attainment_vs_rate(result: PlanResult, numbers: dict[str, int], target: float,
                       name: str = "attainment-vs-rate") -> Figure | None:
    """One panel per simulated candidate: each probe's attainment at its offered rate with the
    Wilson 95 % interval (a band through the first seed's probes), the target, the goodput."""
    shown = _with_probes(result)
    if not shown:
        return None
    rows = math.ceil(len(shown) / COLUMNS)
    with canvas(11, 2.9 * rows + 0.4) as fig:
        axes = fig.subplots(rows, COLUMNS, squeeze=False)
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
                        "x", color="black", markersize=4)
            ax.axhline(target * 100, color=TARGET, linestyle=":", linewidth=1)
            g = c.goodput
            if g is not None and g.mean_per_s > 0:
                ax.axvline(g.mean_per_s, color="black", linestyle="--", linewidth=1)
                if g.high_per_s > g.low_per_s:
                    ax.axvspan(g.low_per_s, g.high_per_s, color="grey", alpha=0.15,
                               linewidth=0)
            ax.set_title(f"#{numbers[c.id]} {c.candidate.label()}", fontsize=7, wrap=True)
            ax.set_xlabel("offered rate (req/s)")
            ax.set_ylabel("SLO attainment (%)")
            ax.set_ylim(max(0, min(p.attainment_low for p in c.probes) * 100 - 5), 101)
            if ax is axes.flat[0]:
                ax.legend(loc="lower left", fontsize=6)
        caption = ("Every simulation of each candidate's goodput bisection: its attainment "
                   "(share of requests meeting the SLO) at the offered rate, with the Wilson "
                   "95 % interval over its requests (bars; the band joins the first seed's "
                   "probes), failing probes crossed. The dotted line is the target "
                   f"({target:.0%}); the dashed line is the goodput (mean over seeds) and the "
                   "grey span its 95 % interval. What to see: goodput is where the attainment "
                   "curve crosses the target; a wide band or seeds far apart mean a noisy "
                   "estimate.")
        return figure(fig, name, "SLO attainment against offered rate per candidate", caption)


def goodput_vs_pd(result: PlanResult, numbers: dict[str, int],
                  name: str = "goodput-vs-pd") -> Figure | None:
    """Disaggregated candidates' goodput by P:D ratio (one line per family), the colocated
    candidates as horizontal reference lines."""
    split = [c for c in result.candidates if c.candidate.layout == "disaggregated"
             and c.goodput is not None]
    if not split:
        return None
    colocated = [c for c in result.candidates if c.candidate.layout == "colocated"
                 and c.goodput is not None]
    ratios = sorted({c.candidate.pd_ratio for c in split},
                    key=lambda r: (int(r.split(":")[0]) / sum(map(int, r.split(":"))), r))
    where = {r: i for i, r in enumerate(ratios)}
    families: dict[tuple, list[CandidateResult]] = defaultdict(list)
    for c in split:
        families[c.candidate.family].append(c)
    with canvas(9, 4.2) as fig:
        ax = fig.subplots()
        for i, members in enumerate(families.values()):
            members.sort(key=lambda c: where[c.candidate.pd_ratio])
            pools = ", ".join(f"{p.role} {p.gpu} TP{p.tensor_parallel_size}"
                              for p in members[0].candidate.pools)
            budget = members[0].candidate.max_num_batched_tokens
            label = pools + ("" if budget is None else f", mnbt {budget}")
            xs = [where[c.candidate.pd_ratio] + (i - len(families) / 2) * 0.04 for c in members]
            ax.errorbar(xs, [c.goodput.mean_per_s for c in members],
                        yerr=[[max(0.0, c.goodput.mean_per_s - c.goodput.low_per_s)
                               for c in members],
                              [max(0.0, c.goodput.high_per_s - c.goodput.mean_per_s)
                               for c in members]],
                        fmt="o-", color=PALETTE[(i + 1) % len(PALETTE)], capsize=3,
                        markersize=4, linewidth=1, label=label)
            for x, c in zip(xs, members, strict=True):
                ax.annotate(f"#{numbers[c.id]}", (x, c.goodput.mean_per_s),
                            textcoords="offset points", xytext=(5, 3), fontsize=7)
        for j, c in enumerate(colocated):
            ax.axhline(c.goodput.mean_per_s, color=COLOCATED, alpha=0.8,
                       linestyle=DASHES[j % len(DASHES)], linewidth=1,
                       label=f"colocated #{numbers[c.id]} {c.candidate.label()}")
        ax.set_xticks(range(len(ratios)), [f"{r}" for r in ratios])
        ax.set_xlabel("P:D ratio (prefill : decode instances)")
        ax.set_ylabel("goodput (req/s)")
        ax.legend(loc="best", fontsize=7)
        caption = ("Goodput of each disaggregated candidate at its P:D ratio, with its 95 % "
                   "interval over seeds (one line per pool and engine configuration; #n are "
                   "rows of the candidates table); the colocated candidates' goodput as "
                   "horizontal lines. What to see: the ratio where a split peaks, and whether "
                   "that peak clears the colocated lines by more than the intervals' width.")
        return figure(fig, name, "goodput against P:D ratio", caption)


def pareto(result: PlanResult, numbers: dict[str, int], name: str = "pareto") -> Figure | None:
    """Output tokens/s per GPU against tokens/s per user at goodput, the front joined."""
    points = [c for c in result.candidates if c.at_goodput is not None
              and c.at_goodput.tokens_per_s_per_user is not None
              and c.at_goodput.output_tokens_per_s_per_gpu is not None]
    if not points:
        return None
    front = set(result.pareto)
    with canvas(8, 4.6) as fig:
        ax = fig.subplots()
        for layout, marker in (("colocated", "o"), ("disaggregated", "^")):
            mine = [c for c in points if c.candidate.layout == layout]
            if mine:
                ax.scatter([c.at_goodput.tokens_per_s_per_user for c in mine],
                           [c.at_goodput.output_tokens_per_s_per_gpu for c in mine],
                           marker=marker, s=36, color=layout_color(layout), label=layout,
                           zorder=3)
        on_front = sorted((c for c in points if c.id in front),
                          key=lambda c: c.at_goodput.tokens_per_s_per_user)
        if on_front:
            ax.plot([c.at_goodput.tokens_per_s_per_user for c in on_front],
                    [c.at_goodput.output_tokens_per_s_per_gpu for c in on_front], "-",
                    color="black", linewidth=1, label="Pareto front", zorder=2)
        rec = result.recommended
        if rec is not None and rec.at_goodput is not None:
            ax.scatter([rec.at_goodput.tokens_per_s_per_user],
                       [rec.at_goodput.output_tokens_per_s_per_gpu], marker="*", s=220,
                       facecolors="none", edgecolors="black", linewidths=1.2,
                       label="recommendation", zorder=4)
        for c in points:
            ax.annotate(f"#{numbers[c.id]}", (c.at_goodput.tokens_per_s_per_user,
                                              c.at_goodput.output_tokens_per_s_per_gpu),
                        textcoords="offset points", xytext=(5, 4), fontsize=7)
        ax.set_xlabel("per-user speed (tokens/s per user = 1 / mean TPOT)")
        ax.set_ylabel("output throughput per GPU (tokens/s)")
        ax.legend(loc="best", fontsize=7)
        caption = ("Each simulated candidate at its goodput: how fast one stream reads "
                   "(tokens/s per user) against how much the fleet produces per GPU; circles "
                   "colocated (blue), triangles disaggregated (red), the star the "
                   "recommendation, #n rows of the candidates table. What to see: the front "
                   "(black line) holds the candidates no other beats on both axes; up and to "
                   "the right is better.")
        return figure(fig, name, "Pareto front of throughput per GPU and per user", caption)

