"""What every figure shares: matplotlib on the Agg canvas (set per figure, no pyplot and no
global backend switch), one pinned style, PNG bytes without metadata that varies, and the
checks every figure passes before it is written: each axis names its unit, and no legend sits
on an axes (legends go outside, where they hide nothing). Point labels are placed beside
their points without overlapping one another::

    candidate offsets, nearest first        taken: every marker and every label placed
         NW   N   NE                        a label goes to the first offset whose box
          W   *   E                         stays inside the axes and meets nothing taken;
         SW   S   SE                        farther rings get a thin leader line
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import matplotlib
from matplotlib.axes import Axes
from matplotlib.backend_bases import RendererBase
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure as MplFigure
from matplotlib.text import Annotation, Text
from matplotlib.transforms import Bbox

from clustersim.report.document import Figure

DPI = 110
STYLE = {
    "font.family": "DejaVu Sans",  # ships with matplotlib: the same glyphs on every machine
    "font.size": 9,
    "axes.titlesize": 9,
    "axes.labelsize": 9,
    "legend.fontsize": 8,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "figure.facecolor": "white",
    "savefig.facecolor": "white",
}
COLOCATED = "#1f77b4"
DISAGGREGATED = "#d62728"
TARGET = "#2ca02c"
FAILS = "#d62728"
"""A share below its target, a check that fails."""
HOLDS = "#1f77b4"
"""A share at or above its target, a check that holds (neutral: the target line is green)."""
LATE = "#c7c7c7"
"""Requests that finished outside the SLO."""
LOST = "#4d4d4d"
"""Requests that never finished (lost to a failure and not retried, or rejected)."""
MET_HOLDS = "met the SLO, holding the target"
MET_SHORT = "met the SLO, short of the target"
FINISHED_LATE = "finished outside the SLO"
NEVER_FINISHED = "never finished (lost with no retry left, or rejected)"
SHARES = (MET_HOLDS, MET_SHORT, FINISHED_LATE, NEVER_FINISHED)
"""Legend labels of a share of requests, the same in every figure that stacks them."""
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf")


@contextmanager
def canvas(width_in: float, height_in: float) -> Iterator[MplFigure]:
    """A figure on its own Agg canvas, drawn under the pinned style."""
    with matplotlib.rc_context(STYLE):
        fig = MplFigure(figsize=(width_in, height_in), dpi=DPI, layout="constrained")
        FigureCanvasAgg(fig)
        yield fig


def png(fig: MplFigure) -> bytes:
    """The figure as PNG bytes; the only metadata matplotlib writes (its version as
    'Software') is dropped, so the same figure gives the same bytes."""
    buffer = io.BytesIO()
    with matplotlib.rc_context(STYLE):
        fig.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
    return buffer.getvalue()


_UNIT = re.compile(r"\(.+\)")


def check_labels(fig: MplFigure) -> None:
    """Every visible axes names both of its axes with a unit in parentheses (an x axis shared
    with the panel below may leave the label to it)."""
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        shared = ax.get_shared_x_axes().get_siblings(ax)
        xlabel = next((a.get_xlabel() for a in shared if _UNIT.search(a.get_xlabel())), "")
        for axis, label in (("x", xlabel), ("y", ax.get_ylabel())):
            if not _UNIT.search(label):
                raise ValueError(f"figure axes {ax.get_title()!r}: the {axis} axis needs a "
                                 f"label with its unit in parentheses, got {label!r}")


def legend_outside(fig: MplFigure, axes: Sequence[Axes] | None = None, where: str = "right",
                   ncols: int = 1, order: Sequence[str] = ()) -> None:
    """One legend for ``axes`` (default: every axes), each label once, outside them: to the
    right (``where="right"``) or below (``"below"``); constrained layout makes room. Labels
    in ``order`` come first, in that order."""
    handles, labels = [], []
    for ax in fig.axes if axes is None else axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            if label not in labels:
                handles.append(handle)
                labels.append(label)
    rank = {label: i for i, label in enumerate(order)}
    ranked = sorted(range(len(labels)), key=lambda i: (rank.get(labels[i], len(rank)), i))
    handles, labels = [handles[i] for i in ranked], [labels[i] for i in ranked]
    if handles:
        loc = "outside right upper" if where == "right" else "outside lower center"
        fig.legend(handles, labels, loc=loc, ncols=ncols)


def check_legends(fig: MplFigure) -> None:
    """No legend covers any part of a visible axes (where it could hide data)."""
    renderer = fig.canvas.get_renderer()
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    stack = [fig]  # the figure and its subfigures, each with its own legends
    while stack:
        current = stack.pop()
        legends += current.legends
        stack += current.subfigs
    for legend in legends:
        box = legend.get_window_extent(renderer)
        for ax in fig.axes:
            if ax.get_visible() and _overlap_px(box, ax.get_window_extent(renderer)) > 0:
                raise ValueError(f"figure axes {ax.get_title()!r}: a legend covers it "
                                 "(place it outside the axes)")


def _overlap_px(a: Bbox, b: Bbox) -> float:
    """The area two boxes share, in square pixels (touching edges share none)."""
    width = min(a.x1, b.x1) - max(a.x0, b.x0)
    height = min(a.y1, b.y1) - max(a.y0, b.y0)
    return max(width, 0.0) * max(height, 0.0)


_DIRECTIONS = ((1, 1), (1, -1), (-1, 1), (-1, -1), (1, 0), (0, 1), (-1, 0), (0, -1))
_RINGS_PT = (4, 10, 18, 28, 40, 55)
_LEADER_FROM_PT = 18
"""Labels this far from their point or farther get a leader line."""


def label_box(label: Annotation, renderer: RendererBase) -> Bbox:
    """The text's own box (an annotation's extent also holds its leader line)."""
    label.get_window_extent(renderer)  # places it
    return Text.get_window_extent(label, renderer)


def place_labels(ax: Axes, points: Sequence[tuple[float, float]], texts: Sequence[str],
                 marker_pt: float = 8.0, fontsize: float = 7) -> list[Annotation]:
    """Label each point (data coordinates) without a label overlapping another label or a
    marker (a square of ``marker_pt`` around each point): the nearest free offset on rings
    around the point that keeps the label inside the axes; farther ones draw a leader line.
    A label with no free place takes the nearest. The figure is laid out first and its
    layout then frozen, so the boxes measured here are the boxes drawn: add everything that
    moves the layout (titles, legends) before."""
    fig = ax.get_figure(root=True)
    fig.canvas.draw()
    fig.set_layout_engine("none")
    renderer = fig.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    half = marker_pt / 2 * fig.dpi / 72
    taken = []
    for x, y in points:
        px, py = ax.transData.transform((x, y))
        taken.append(Bbox.from_extents(px - half, py - half, px + half, py + half))
    placed = []
    for (x, y), text in zip(points, texts, strict=True):
        label = None
        for ring in _RINGS_PT:
            for dx, dy in _DIRECTIONS:
                label = _label(ax, (x, y), text, (dx * ring, dy * ring), fontsize,
                               leader=ring >= _LEADER_FROM_PT)
                box = label_box(label, renderer)
                inside = frame.contains(box.x0, box.y0) and frame.contains(box.x1, box.y1)
                if inside and all(_overlap_px(box, other) == 0 for other in taken):
                    break
                label.remove()
                label = None
            if label is not None:
                break
        if label is None:  # nowhere free: the nearest place, overlapping
            label = _label(ax, (x, y), text, (_RINGS_PT[0], _RINGS_PT[0]), fontsize, False)
        taken.append(label_box(label, renderer))
        placed.append(label)
    return placed


def _label(ax: Axes, xy: tuple[float, float], text: str, offset: tuple[float, float],
           fontsize: float, leader: bool) -> Annotation:
    dx, dy = offset
    return ax.annotate(
        text, xy, xytext=offset, textcoords="offset points", fontsize=fontsize,
        ha="left" if dx > 0 else "right" if dx < 0 else "center",
        va="bottom" if dy > 0 else "top" if dy < 0 else "center",
        arrowprops={"arrowstyle": "-", "color": "grey", "linewidth": 0.5,
                    "shrinkA": 0, "shrinkB": 3} if leader else None)


def figure(fig: MplFigure, name: str, alt: str, caption: str) -> Figure:
    check_labels(fig)
    data = png(fig)  # laid out and drawn: the legends' places are final
    check_legends(fig)
    return Figure(name=name, png=data, alt=alt, caption=caption)


def layout_color(layout: str) -> str:
    return DISAGGREGATED if layout == "disaggregated" else COLOCATED
