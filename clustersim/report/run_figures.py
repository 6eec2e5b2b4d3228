"""Figures of one run's records (a ``RunResult``): latency CDFs against the SLO, the per-step
timeline around the longest prompt's arrival (golden S10), KV-cache use and the waiting queue
over time, and the KV links of a disaggregated layout.

They plot the records as recorded: per-request latencies as the metrics layer defines them
(``RequestTable``), step start and end times, token times, transfer times.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

import numpy as np

from clustersim.metrics.requests import RequestTable
from clustersim.report.document import Figure
from clustersim.report.figures import PALETTE, TARGET, canvas, figure
from clustersim.report.fmt import limit_ms

if TYPE_CHECKING:
    from clustersim.engine.request import Request
    from clustersim.metrics import RunSummary
    from clustersim.scenario import SLO
    from clustersim.sim import RunResult

MAX_LEGEND_INSTANCES = 8


def latency_cdfs(runs: list[tuple[str, RunResult]], slo: SLO | None, name: str = "latency-cdf",
                 what: str = "") -> Figure:
    """TTFT and TPOT CDFs of each run (one line per run) with the SLO limits and target."""
    with canvas(10, 3.6) as fig:
        axes = fig.subplots(1, 2)
        for ax, metric, title in ((axes[0], "ttft_s", "TTFT"), (axes[1], "tpot_s", "TPOT")):
            for i, (label, run) in enumerate(runs):
                values = np.sort(RequestTable.of(run.requests).defined(metric)) * 1e3
                if values.size == 0:
                    continue
                fraction = np.arange(1, values.size + 1) / values.size * 100
                ax.step(values, fraction, where="post", color=PALETTE[i % len(PALETTE)],
                        label=f"{label} ({values.size:,} requests)")
            limit = getattr(slo, metric) if slo is not None else None
            if limit is not None:
                ax.axvline(limit * 1e3, color="black", linestyle="--", linewidth=1,
                           label=f"SLO {title} {limit_ms(limit)}")
            if slo is not None:
                ax.axhline(slo.attainment_target * 100, color=TARGET, linestyle=":",
                           linewidth=1, label=f"target {slo.attainment_target:.0%}")
            ax.set_xscale("log")
            ax.set_xlabel(f"{title} (ms, log scale)")
            ax.set_ylabel("requests at or below (%)")
            ax.set_ylim(0, 101)
            ax.set_title(f"{title} CDF")
            if ax.get_legend_handles_labels()[0]:
                ax.legend(loc="lower right")
            else:
                ax.text(0.5, 0.5, f"no request has a {title}", transform=ax.transAxes,
                        ha="center")
        subject = what or " and ".join(label for label, _ in runs)
        caption = (f"TTFT (left) and TPOT (right) of every finished request of {subject}, as "
                   "cumulative shares (TPOT leaves out one-token outputs). What to see: ")
        caption += ("where a curve crosses the dashed SLO line is the share of requests within "
                    "that limit; above the dotted target line, that limit alone is met."
                    if slo is not None else "the spread of each latency; the scenario sets no "
                    "SLO to hold it against.")
        return figure(fig, name, "TTFT and TPOT cumulative distributions", caption)


def longest_prompt(requests: list[Request]) -> Request | None:
    """The longest prompt that got its first token (the earliest of equals)."""
    served = [r for r in requests if r.first_token_s is not None]
    if not served:
        return None
    return max(served, key=lambda r: (r.num_prompt_tokens, -r.arrival_s))


def step_timeline(label: str, run: RunResult, name: str = "timeline") -> Figure | None:
    """Golden S10: step latency and each running stream's ITL on the instance that emits the
    longest prompt's tokens (a split's decode instance), around that prompt's arrival."""
    long = longest_prompt(run.requests)
    if long is None or long.decode_instance is None:
        return None
    instance = long.decode_instance
    t0, first = long.arrival_s, long.first_token_s
    assert first is not None
    pad = max(0.25, 0.25 * (first - t0))
    lo, hi = t0 - pad, first + pad
    steps = [s for s in run.steps if s.instance == instance and s.end_s >= lo and s.start_s <= hi]
    with canvas(10, 5.6) as fig:
        top, bottom = fig.subplots(2, 1, sharex=True)
        starts = np.array([s.start_s - t0 for s in steps])
        durations = np.array([(s.end_s - s.start_s) * 1e3 for s in steps])
        chunked = np.array([any(rid == long.request_id for rid, _ in s.prefill_chunks)
                            for s in steps], dtype=bool)
        ends = np.array([s.end_s - t0 for s in steps])
        if steps:  # each step a bar from its start to its end, at its latency
            top.hlines(durations[~chunked], starts[~chunked], ends[~chunked], color=PALETTE[0],
                       linewidth=2, label=f"step of {instance}")
            if chunked.any():
                top.hlines(durations[chunked], starts[chunked], ends[chunked], color=PALETTE[1],
                           linewidth=3, label="step carrying a chunk of the long prompt")
        top.set_ylabel("step latency (ms)")
        top.set_ylim(bottom=0)
        top.set_title(f"{label}: {instance}, {len(steps):,} steps around the "
                      f"{long.num_prompt_tokens:,}-token prompt of request {long.request_id}")
        num_streams = 0
        for r in run.requests:
            if r.decode_instance != instance or len(r.token_times_s) < 2:
                continue
            times = np.frombuffer(r.token_times_s, dtype=float)
            gaps = np.diff(times) * 1e3
            inside = (times[1:] >= lo) & (times[1:] <= hi)
            if not inside.any():
                continue
            num_streams += 1
            # a gap spans the time from the previous token to this one
            bottom.step(times[1:][inside] - t0, gaps[inside], where="pre", linewidth=0.7,
                        alpha=0.45, color=PALETTE[1] if r is long else PALETTE[0])
        bottom.set_ylabel("inter-token latency (ms)")
        bottom.set_ylim(bottom=0)
        bottom.set_xlabel(f"time since request {long.request_id} arrived (s)")
        bottom.set_title(f"ITL of each of the {num_streams:,} streams emitting tokens there "
                         "(one line per request)")
        marks = [(0.0, "long prompt arrives", "black")]
        if long.handoff_start_s is not None and long.handoff_end_s is not None:
            marks += [(long.handoff_start_s - t0, "its prefill ends", PALETTE[3]),
                      (long.handoff_end_s - t0, "its KV arrives", PALETTE[4])]
        marks.append((first - t0, "its first token", PALETTE[2]))
        for ax in (top, bottom):
            for x, text, color in marks:
                ax.axvline(x, color=color, linestyle="--", linewidth=1,
                           label=text if ax is top else None)
        top.legend(loc="upper left", fontsize=7)
        split = long.handoff_start_s is not None
        what = ("the decode instance never runs the prompt: its steps and the streams' ITL "
                "stay flat, and the prompt reaches it only as a KV handoff" if split else
                "each step that carries a chunk of the long prompt (red) also carries every "
                "running decode, so those steps stretch and every stream's ITL spikes with them")
        caption = (f"Golden S10 on {label}: every engine step of {instance} (top, a bar "
                   "from its start to its end at its latency) and the gap before each token of "
                   "every request it emits (bottom, over the time it spans), from "
                   f"{pad:.2f} s before the longest prompt ({long.num_prompt_tokens:,} tokens) "
                   f"arrives to {pad:.2f} s after its first token. What to see: {what}.")
        return figure(fig, name, "step latency and ITL around the arrival of request "
                      f"{long.request_id}", caption)


def kv_and_queue(label: str, run: RunResult, summary: RunSummary,
                 name: str = "kv-queue") -> Figure:
    """KV blocks in use (% of each instance's usable blocks) and waiting requests over time."""
    usable = {i.name: i.usable_kv_blocks for i in summary.instances}
    role = {info.name: info.role for info in run.instances}
    per_instance: dict[str, list] = defaultdict(list)
    for s in run.steps:
        per_instance[s.instance].append(s)
    names = [info.name for info in run.instances if per_instance.get(info.name)]
    with canvas(10, 5.0) as fig:
        top, bottom = fig.subplots(2, 1, sharex=True)
        legend = len(names) <= MAX_LEGEND_INSTANCES
        colors = {r: PALETTE[i] for i, r in enumerate(("colocated", "prefill", "decode"))}
        for i, instance in enumerate(names):
            steps = per_instance[instance]
            ends = np.array([s.end_s for s in steps])
            kv = np.array([s.kv_blocks_used for s in steps]) / max(usable[instance], 1) * 100
            waiting = np.array([s.num_waiting for s in steps])
            color = PALETTE[i % len(PALETTE)] if legend else colors.get(role[instance], "grey")
            tag = instance if legend else None
            top.plot(ends, kv, linewidth=0.8, color=color, label=tag, drawstyle="steps-post")
            bottom.plot(ends, waiting, linewidth=0.8, color=color, label=tag,
                        drawstyle="steps-post")
        top.set_ylabel("KV blocks in use (% of usable)")
        top.set_ylim(0, 105)
        bottom.set_ylabel("waiting requests (count)")
        bottom.set_xlabel("simulated time (s)")
        top.set_title(f"{label}: KV cache per instance")
        bottom.set_title("waiting queue per instance (requests not yet scheduled)")
        if legend and names:  # (no engine stepped: no line to name)
            top.legend(loc="upper left", fontsize=7, ncols=min(len(names), 4))
        else:
            for r, color in colors.items():
                if r in role.values():
                    top.plot([], [], color=color, label=f"{r} instances")
            top.legend(loc="upper left", fontsize=7)
        caption = (f"{label}: the KV blocks each instance holds, as a share of its usable "
                   "blocks, and its waiting queue, after every engine step. What to see: a "
                   "queue that keeps growing means the offered rate is above what the instance "
                   "serves; KV near 100 % means admissions wait for memory (and preemptions "
                   "follow); a flat queue near zero with KV headroom is a comfortable load.")
        return figure(fig, name, "KV cache use and waiting queue over time", caption)


def kv_links(label: str, run: RunResult, summary: RunSummary,
             handoff_budget_s: float | None = None, name: str = "kv-links") -> Figure | None:
    """A disaggregated run's KV links: each busy link's mean utilization and each transfer's
    time, as it ran and alone on idle links."""
    if not run.transfers:
        return None
    with canvas(10, 3.8) as fig:
        left, right = fig.subplots(1, 2, width_ratios=(1, 1.4))
        links = list(summary.link_utilization.items())[::-1]
        if links:
            left.barh([n for n, _ in links], [u * 100 for _, u in links], color=PALETTE[0])
        left.set_xlabel("mean utilization over the run (%)")
        left.set_ylabel("link (source > destination)")
        left.set_title("busiest links (per direction)")
        left.tick_params(axis="y", labelsize=6)
        requested = np.array([t.requested_s for t in run.transfers])
        took = np.array([(t.end_s - t.requested_s) * 1e3 for t in run.transfers])
        ideal = np.array([t.ideal_s * 1e3 for t in run.transfers])
        right.plot(requested, took, ".", markersize=3, color=PALETTE[1],
                   label="as it ran (sharing links)")
        right.plot(requested, ideal, ".", markersize=2, color=PALETTE[2],
                   label="alone on idle links")
        if handoff_budget_s is not None:
            right.axhline(handoff_budget_s * 1e3, color="black", linestyle="--", linewidth=1,
                          label=f"handoff budget {limit_ms(handoff_budget_s)}")
        right.set_xlabel("simulated time the transfer was requested (s)")
        right.set_ylabel("transfer time (ms)")
        right.set_title(f"{len(run.transfers):,} KV transfers, prefill -> decode")
        right.legend(loc="upper right", fontsize=7)
        caption = (f"{label}: the prefill -> decode KV handoffs. Left: the mean utilization "
                   "of the busiest links over the run. Right: each transfer's time from its "
                   "request to its last byte (red) and what it would take alone on idle links "
                   "(green). What to see: the gap between the two is time lost to other "
                   "transfers on the same links; points above the budget line are handoffs "
                   "golden S7 counts against the split.")
        return figure(fig, name, "KV link utilization and transfer times", caption)


def slo_over_time(label: str, summary: RunSummary, slo: SLO | None,
                  name: str = "slo-over-time") -> Figure | None:
    """A run with failures: attainment, TTFT and TPOT per window of first arrivals
    (``summary.faults.timeline``), with each failure and repair marked."""
    faults = summary.faults
    if faults is None or not faults.timeline:
        return None
    windows = faults.timeline
    mids = np.array([(w.start_s + w.end_s) / 2 for w in windows])
    width = windows[0].end_s - windows[0].start_s

    def column(key: str) -> np.ndarray:
        return np.array([np.nan if getattr(w, key) is None else getattr(w, key)
                         for w in windows], dtype=float)

    with canvas(10, 7.0) as fig:
        top, middle, bottom = fig.subplots(3, 1, sharex=True)
        if slo is not None:
            top.bar(mids, column("attainment") * 100, width=width * 0.9, color=PALETTE[0],
                    label="requests meeting the SLO")
            top.axhline(slo.attainment_target * 100, color=TARGET, linestyle=":", linewidth=1,
                        label=f"target {slo.attainment_target:.0%}")
            top.set_ylim(0, 105)
        retried = np.array([w.num_retried for w in windows], dtype=float)
        counts = np.array([max(w.num_requests, 1) for w in windows], dtype=float)
        some = retried > 0
        if some.any():
            top.plot(mids[some], retried[some] / counts[some] * 100, "o", markersize=4,
                     color="black", label="requests retried after a failure")
        top.set_ylabel("share of the window's requests (%)")
        top.set_title(f"{label}: SLO attainment per {width:.2f} s window of arrivals")
        for ax, metric, title in ((middle, "ttft", "TTFT"), (bottom, "tpot", "TPOT")):
            for p, style in ((50, "-"), (90, "--")):
                ax.plot(mids, column(f"{metric}_p{p}_s") * 1e3, style, color=PALETTE[0],
                        linewidth=1.2, marker=".", label=f"p{p}")
            limit = getattr(slo, f"{metric}_s") if slo is not None else None
            if limit is not None:
                ax.axhline(limit * 1e3, color="black", linestyle=":", linewidth=1,
                           label=f"SLO {title} {limit_ms(limit)}")
            ax.set_ylabel(f"{title} (ms)")
            ax.set_ylim(bottom=0)
            ax.set_title(f"{title} of the requests that arrived in each window")
        bottom.set_xlabel("simulated time of the requests' first arrival (s)")
        marks = [c for c in PALETTE[1:] if c != TARGET]  # not the blue bars, not the target
        for i, impact in enumerate(faults.faults):
            color = marks[i % len(marks)]
            for ax in (top, middle, bottom):
                ax.axvline(impact.at_s, color=color, linestyle="--", linewidth=1.2,
                           label=impact.fault if ax is top else None)
                if impact.repair_s is not None:
                    ax.axvline(impact.repair_s, color=color, linestyle=":", linewidth=1.2,
                               label="  ... back" if ax is top else None)
        top.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7)
        middle.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7)
        bottom.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7)
        caption = (f"{label}: the requests grouped by the window of their first arrival; each "
                   "is judged as the summary judges it (a retried request on its final "
                   "attempt, its TTFT from its first arrival; a lost one that was not retried "
                   "misses). Dashed lines: failures; dotted: repairs. What to see: the windows "
                   "just before a failure hold the requests it caught mid-stream (retried, so "
                   "their TTFT includes the lost attempt); the windows after it show what the "
                   "cluster serves with the failed part gone, and a repair the recovery.")
        return figure(fig, name, "SLO attainment, TTFT and TPOT over time around failures",
                      caption)
