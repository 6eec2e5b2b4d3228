"""Figures of one run's records (a ``RunResult``): latency CDFs against the SLO, the per-step
timeline around the longest prompt's arrival, KV-cache use and the waiting queue over time, the
KV links of a disaggregated layout, and the SLO over time around failures.

They plot the records as recorded: per-request latencies as the metrics layer defines them
(``RequestTable``), step start and end times, token times, transfer times. A caption's "Here"
sentence reads its numbers off what the figure draws.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

import numpy as np

from clustersim.metrics.requests import RequestTable
from clustersim.plan.compare import handoff_text
from clustersim.report.document import Figure
from clustersim.report.figures import (
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
    legend_outside,
)
from clustersim.report.fmt import limit_ms

if TYPE_CHECKING:
    from matplotlib.axes import Axes

    from clustersim.engine.request import Request
    from clustersim.metrics import RunSummary
    from clustersim.metrics.timeline import Window
    from clustersim.scenario import SLO
    from clustersim.sim import RunResult

MAX_LEGEND_INSTANCES = 8
STRETCH = 1.5
"""A step this many times the median of the others (or more) stretched; below, it held."""


def latency_cdfs(runs: list[tuple[str, RunResult]], slo: SLO | None, name: str = "latency-cdf",
                 what: str = "") -> Figure:
    """TTFT and TPOT CDFs of each run (one line per run) with the SLO limits and target."""
    tables = [(label, RequestTable.of(run.requests)) for label, run in runs]
    with canvas(10, 4.0) as fig:
        axes = fig.subplots(1, 2, sharey=True)
        for ax, metric, title in ((axes[0], "ttft_s", "TTFT"), (axes[1], "tpot_s", "TPOT")):
            drawn = False
            for i, (label, table) in enumerate(tables):
                values = np.sort(table.defined(metric)) * 1e3
                if values.size == 0:
                    continue
                drawn = True
                fraction = np.arange(1, values.size + 1) / values.size * 100
                ax.step(values, fraction, where="post", color=PALETTE[i % len(PALETTE)],
                        label=f"{label} ({table.defined('ttft_s').size:,} requests with a "
                        "first token)")
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
            if not drawn:
                ax.text(0.5, 0.5, f"no request has a {title}", transform=ax.transAxes,
                        ha="center")
        legend_outside(fig, where="below", ncols=3)
        subject = what or " and ".join(label for label, _ in runs)
        caption = (f"TTFT (left) and TPOT (right) of every finished request of {subject}, as "
                   "cumulative shares (TPOT leaves out one-token outputs). What to see: ")
        caption += ("where a curve crosses the dashed SLO line is the share of requests within "
                    "that limit; above the dotted target line, that limit alone is met."
                    if slo is not None else "the spread of each latency; the scenario sets no "
                    "SLO to hold it against.")
        return figure(fig, name, "TTFT and TPOT cumulative distributions", caption)


STEADY = (0.25, 0.75)
"""The step timeline looks for its long prompt among the arrivals of the middle half of the
run: past the first quarter, while the batch still fills (short steps no loaded moment has),
and before the last, while it drains."""


def longest_prompt(requests: list[Request]) -> tuple[Request | None, tuple[float, float] | None]:
    """The longest prompt that got its first token (the earliest of equals) among the
    arrivals of the run's middle half (``STEADY``), with that window; of the whole run, and
    no window, when none arrived there."""
    served = [r for r in requests if r.first_token_s is not None]
    if not served:
        return None, None
    first = min(r.arrival_s for r in requests)
    span = max(r.arrival_s for r in requests) - first
    lo, hi = (first + f * span for f in STEADY)
    middle = [r for r in served if lo <= r.arrival_s <= hi]

    def key(r: Request) -> tuple[int, float]:
        return r.num_prompt_tokens, -r.arrival_s

    if middle:
        return max(middle, key=key), (lo, hi)
    return max(served, key=key), None


def step_timeline(label: str, run: RunResult, name: str = "timeline") -> Figure | None:
    """Step latency and each running stream's ITL on the instance that emits the longest
    prompt's tokens (a split's decode instance), around that prompt's arrival, the prompt
    chosen among the run's middle half of arrivals (``STEADY``): what a long prompt's chunks
    do to every stream sharing its steps at a representative load."""
    long, window = longest_prompt(run.requests)
    if long is None or long.decode_instance is None:
        return None
    instance = long.decode_instance
    t0, first = long.arrival_s, long.first_token_s
    assert first is not None
    pad = max(0.25, 0.25 * (first - t0))
    lo, hi = t0 - pad, first + pad
    mine = [s for s in run.steps if s.instance == instance]
    steps = [s for s in mine if s.end_s >= lo and s.start_s <= hi]
    whole_ms = float(np.median([(s.end_s - s.start_s) * 1e3 for s in mine])) if mine else None
    with canvas(10, 5.6) as fig:
        top, bottom = fig.subplots(2, 1, sharex=True, sharey=True)  # both in ms, compared
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
        top.set_title(f"{label}\n{instance}: {len(steps):,} steps around the "
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
        legend_outside(fig)
        what = _timeline_reading(instance, durations, chunked,
                                 split=long.handoff_start_s is not None)
        where = (f"the longest prompt ({long.num_prompt_tokens:,} tokens) of those arriving in "
                 f"the middle half of the run ({window[0]:,.1f}-{window[1]:,.1f} s), past "
                 "the start's filling batch and before the end's drain, arriving at "
                 f"{t0:,.2f} s" if window is not None else
                 f"the longest prompt ({long.num_prompt_tokens:,} tokens), arriving at "
                 f"{t0:,.2f} s")
        typical = ("" if whole_ms is None else f" Over the whole run {instance}'s steps take "
                   f"{whole_ms:.1f} ms at the median.")
        caption = (f"{label}: every engine step of {instance} (top, a bar from its start "
                   "to its end at its latency) and the gap before each token of every request "
                   f"it emits (bottom, over the time it spans), from {pad:.2f} s before "
                   f"{where} to {pad:.2f} s after its first token. What to see: {what}."
                   f"{typical}")
        return figure(fig, name, "step latency and ITL around the arrival of request "
                      f"{long.request_id}", caption)


def _timeline_reading(instance: str, durations_ms: np.ndarray, chunked: np.ndarray,
                      split: bool) -> str:
    """What the timeline shows, from its steps' latencies: how far the steps that carry the
    long prompt stretch against the median of the others (``STRETCH``)."""
    if durations_ms.size == 0:
        return f"no step of {instance} falls in this window"
    others = durations_ms[~chunked]
    if not chunked.any():
        median, longest = float(np.median(others)), float(others.max())
        head = (f"no step of {instance} carries the prompt"
                + (" (it arrives as a KV handoff)" if split else ""))
        if longest < STRETCH * median:
            return (f"{head}; its steps take {median:.1f} ms at the median and at most "
                    f"{longest:.1f} ms here, so the streams' ITL stays flat")
        return (f"{head}; its steps take {median:.1f} ms at the median and up to "
                f"{longest:.1f} ms here, from other requests' work")
    longest = float(durations_ms[chunked].max())
    if others.size == 0:
        return (f"every step here carries a chunk of the long prompt (red), the longest "
                f"{longest:.1f} ms")
    median = float(np.median(others))
    if longest >= STRETCH * median:
        return (f"the steps that carry a chunk of the long prompt (red) take up to "
                f"{longest:.1f} ms against {median:.1f} ms at the median for the others "
                f"({longest / median:.1f}x); every stream decoding in them waits as long, so "
                "its ITL spikes with them")
    return (f"the steps that carry a chunk of the long prompt (red) take up to {longest:.1f} "
            f"ms against {median:.1f} ms at the median for the others: the prompt barely "
            "stretches the running decodes")


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
        peak_kv: tuple[float, str] | None = None
        peak_queue: tuple[int, str] | None = None
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
            if peak_kv is None or kv.max() > peak_kv[0]:
                peak_kv = (float(kv.max()), instance)
            if peak_queue is None or waiting.max() > peak_queue[0]:
                peak_queue = (int(waiting.max()), instance)
        top.set_ylabel("KV blocks in use (% of usable)")
        top.set_ylim(0, 105)
        bottom.set_ylabel("waiting requests (count)")
        bottom.set_xlabel("simulated time (s)")
        top.set_title(f"{label}: KV cache per instance")
        bottom.set_title("waiting queue per instance (requests not yet scheduled)")
        if not legend:
            for r, color in colors.items():
                if r in role.values():
                    top.plot([], [], color=color, label=f"{r} instances")
        legend_outside(fig)
        caption = (f"{label}: the KV blocks each instance holds, as a share of its usable "
                   "blocks, and its waiting queue, after every engine step. What to see: a "
                   "queue that keeps growing means the offered rate is above what the instance "
                   "serves; KV near 100 % means admissions wait for memory (and preemptions "
                   "follow); a flat queue near zero with KV headroom is a comfortable load.")
        if peak_kv is not None and peak_queue is not None:
            caption += (f" Here KV use peaks at {peak_kv[0]:.0f} % ({peak_kv[1]}) and the "
                        f"longest queue holds {peak_queue[0]:,} request"
                        f"{'' if peak_queue[0] == 1 else 's'} ({peak_queue[1]}).")
        return figure(fig, name, "KV cache use and waiting queue over time", caption)


def kv_links(label: str, run: RunResult, summary: RunSummary,
             handoff_budget_s: float | None = None, name: str = "kv-links",
             rate_per_s: float | None = None) -> Figure | None:
    """A disaggregated run's KV links: each busy link's mean utilization; each request's KV
    handoff (prefill finished -> KV resident on the decode instance, the sample whose p95 is
    ``summary.handoff_s.p95``) against the budget, beside each transfer alone on idle links.
    ``rate_per_s``: the operating rate the run is at, where a plan reads its handoff
    statistic."""
    if not run.transfers:
        return None
    handed = [r for r in run.requests
              if r.handoff_start_s is not None and r.handoff_end_s is not None]
    with canvas(10, 3.8) as fig:
        left, right = fig.subplots(1, 2, width_ratios=(1, 1.4))
        links = list(summary.link_utilization.items())[::-1]
        if links:
            left.barh([n for n, _ in links], [u * 100 for _, u in links], color=PALETTE[0])
        left.set_xlabel("mean utilization over the run (%)")
        left.set_ylabel("link (source > destination)")
        left.set_title("busiest links (per direction)")
        left.tick_params(axis="y", labelsize=6)
        starts = np.array([r.handoff_start_s for r in handed])
        took = np.array([(r.handoff_end_s - r.handoff_start_s) * 1e3 for r in handed])
        ideal = np.array([t.ideal_s * 1e3 for t in run.transfers if t.ideal_s is not None])
        requested = np.array([t.requested_s for t in run.transfers if t.ideal_s is not None])
        right.plot(starts, took, ".", markersize=3, color=PALETTE[1],
                   label="handoff as it ran (prefill end -> KV resident)")
        if ideal.size:
            right.plot(requested, ideal, ".", markersize=2, color=PALETTE[2],
                       label="its transfer alone on idle links")
        p95 = None if summary.handoff_s is None else summary.handoff_s.p95
        if p95 is not None:
            right.axhline(p95 * 1e3, color=PALETTE[1], linestyle=":", linewidth=1,
                          label=f"handoff p95 {p95 * 1e3:,.1f} ms")
        if handoff_budget_s is not None:
            right.axhline(handoff_budget_s * 1e3, color="black", linestyle="--", linewidth=1,
                          label=f"handoff budget {limit_ms(handoff_budget_s)}")
        right.set_xlabel("simulated time the prefill ended (s)")
        right.set_ylabel("handoff time (ms)")
        right.set_title(f"{len(handed):,} KV handoffs, prefill -> decode")
        legend_outside(fig, [right], where="below", ncols=2)
        caption = (f"{label}: the prefill -> decode KV handoffs. Left: the mean utilization "
                   "of the busiest links over the run. Right: each request's handoff, from "
                   "its prefill's end to its KV resident on the decode instance (red), and its "
                   "transfer alone on idle links (green). What to see: the gap between the two "
                   "is time spent queueing and sharing links; the keep-or-reject rule for a "
                   "split holds the handoffs' p95 (dotted) to the budget (dashed). Here the "
                   f"handoffs took {np.median(took):,.2f} ms at the median")
        if ideal.size:
            caption += f", against {np.median(ideal):,.2f} ms for a transfer alone"
        if handoff_budget_s is None:
            caption += "."
        else:
            over = int((took > handoff_budget_s * 1e3).sum())
            caption += (f"; {over:,} of {took.size:,} took longer than the budget; the "
                        + handoff_text(p95, handoff_budget_s, rate_per_s) + ".")
        return figure(fig, name, "KV link utilization and handoff times", caption)


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
        window_shares(top, windows, None if slo is None else slo.attainment_target)
        top.set_title(f"{label}: the requests of each {width:.2f} s window of arrivals")
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
        for i, impact in enumerate(faults.faults):
            color = FAULT_MARKS[i % len(FAULT_MARKS)]
            for ax in (top, middle, bottom):
                ax.axvline(impact.at_s, color=color, linestyle="--", linewidth=1.2,
                           label=impact.fault if ax is top else None)
                if impact.repair_s is not None:
                    ax.axvline(impact.repair_s, color=color, linestyle=":", linewidth=1.2,
                               label="  ... back" if ax is top else None)
        legend_outside(fig, order=SHARES)
        caption = (f"{label}: the requests grouped by the window of their first arrival; each "
                   "is judged as the summary judges it (a retried request on its final "
                   "attempt, its TTFT from its first arrival; a lost one that was not retried "
                   "misses). Dashed lines: failures; dotted: repairs. What to see: the windows "
                   "just before a failure hold the requests it caught mid-stream (retried, so "
                   "their TTFT includes the lost attempt); the windows after it show what the "
                   "cluster serves with the failed part gone, and a repair the recovery. Each "
                   "bar is all the window's requests: " + WINDOW_LEGEND + ".")
        return figure(fig, name, "SLO attainment, TTFT and TPOT over time around failures",
                      caption)


FAULT_MARKS = ("#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#bcbd22")
"""Failure lines: none of the colours that judge a share (blue, red, green, greys)."""
WINDOW_LEGEND = ("met the SLO (blue, or red where the window falls short of the target), "
                 "finished outside it (light grey), never finished (dark grey, hatched: lost "
                 "to a failure with no retry left, or rejected)")


def window_shares(ax: Axes, windows: tuple[Window, ...], target: float | None) -> None:
    """Each window of arrivals as one bar of all its requests (100 %), stacked: met the SLO
    (``HOLDS``, or ``FAILS`` below ``target``), finished outside it (``LATE``), never
    finished (``LOST``, hatched); the target as a line. Without an SLO: finished and not."""
    shown = [w for w in windows if w.num_requests]
    mids = np.array([(w.start_s + w.end_s) / 2 for w in shown])
    width = (windows[0].end_s - windows[0].start_s) * 0.9 if windows else 1.0
    done = np.array([w.num_finished / w.num_requests for w in shown]) * 100
    if target is None:
        met = done
        if mids.size:
            ax.bar(mids, met, width=width, color=HOLDS, label="finished")
    else:
        met = np.array([0.0 if w.attainment is None else w.attainment for w in shown]) * 100
        short = np.array([w.attainment is not None and w.attainment < target for w in shown],
                         dtype=bool)
        for mask, color, label in ((~short, HOLDS, MET_HOLDS), (short, FAILS, MET_SHORT)):
            if mask.any():
                ax.bar(mids[mask], met[mask], width=width, color=color, label=label)
        late = np.clip(done - met, 0, None)
        if (late > 0).any():
            ax.bar(mids, late, bottom=met, width=width, color=LATE, label=FINISHED_LATE)
        ax.axhline(target * 100, color=TARGET, linestyle=":", linewidth=1.5, zorder=5,
                   label=f"target {target:.0%}")
    lost = 100 - done
    if (lost > 0).any():
        ax.bar(mids, lost, bottom=done, width=width, color=LOST, hatch="///", edgecolor="white",
               linewidth=0, label=NEVER_FINISHED)
    ax.set_ylim(0, 105)
    ax.set_ylabel("window's requests (%)")
