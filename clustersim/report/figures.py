"""What every figure shares: matplotlib on the Agg canvas (set per figure, no pyplot and no
global backend switch), one pinned style, and PNG bytes without metadata that varies."""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from contextlib import contextmanager

import matplotlib
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure as MplFigure

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


def figure(fig: MplFigure, name: str, alt: str, caption: str) -> Figure:
    check_labels(fig)
    return Figure(name=name, png=png(fig), alt=alt, caption=caption)


def layout_color(layout: str) -> str:
    return DISAGGREGATED if layout == "disaggregated" else COLOCATED
