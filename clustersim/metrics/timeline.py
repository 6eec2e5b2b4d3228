"""SLO attainment, TTFT and TPOT over time: the dip a failure makes and the recovery after.

The run's arrival span is cut into equal windows; each request counts in the window of its
(first) arrival, judged as the summary judges it: a lost request that was not retried misses,
a retried one is judged on its final attempt, its TTFT and E2E measured from its first
arrival (so the retry delay and the lost attempt's time count against it)::

    arrivals   |....:....:..X.:....:....|      X: a decode instance fails
    attainment  99%  99%  71%  93%  99%        the requests that arrived while it happened
                                               wait for a retry, or for a full instance
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from clustersim.metrics.goodput import good_mask
from clustersim.metrics.requests import RequestTable
from clustersim.scenario import SLO

DEFAULT_NUM_WINDOWS = 40


@dataclass(frozen=True, slots=True)
class Window:
    """The requests that arrived in ``[start_s, end_s)`` (the last window includes its end)."""

    start_s: float
    end_s: float
    num_requests: int
    num_finished: int
    num_retried: int
    """Requests sent more than once (a failure lost an attempt)."""
    attainment: float | None
    """Share meeting every SLO limit (None without an SLO or without requests)."""
    ttft_p50_s: float | None
    ttft_p90_s: float | None
    tpot_p50_s: float | None
    tpot_p90_s: float | None

    def to_json(self) -> dict:
        return {"start_s": self.start_s, "end_s": self.end_s,
                "num_requests": self.num_requests, "num_finished": self.num_finished,
                "num_retried": self.num_retried, "attainment": self.attainment,
                "ttft_p50_s": self.ttft_p50_s, "ttft_p90_s": self.ttft_p90_s,
                "tpot_p50_s": self.tpot_p50_s, "tpot_p90_s": self.tpot_p90_s}


def slo_timeline(table: RequestTable, slo: SLO | None,
                 num_windows: int = DEFAULT_NUM_WINDOWS) -> tuple[Window, ...]:
    """``num_windows`` equal windows over first to last arrival (none without requests)."""
    if not len(table):
        return ()
    first, last = float(table.arrival_s.min()), float(table.arrival_s.max())
    width = (last - first) / num_windows if last > first else 1.0
    edges = [first + k * width for k in range(num_windows)] + [max(last, first + width)]
    which = np.minimum(((table.arrival_s - first) // width).astype(np.int64), num_windows - 1)
    good = good_mask(table, slo) if slo is not None else None
    retried = table.retries > 0 if table.retries is not None else np.zeros(len(table), bool)
    out = []
    for k in range(num_windows):
        inside = which == k
        n = int(inside.sum())
        out.append(Window(
            start_s=edges[k], end_s=edges[k + 1], num_requests=n,
            num_finished=int(table.finished[inside].sum()),
            num_retried=int(retried[inside].sum()),
            attainment=float(good[inside].sum()) / n if good is not None and n else None,
            ttft_p50_s=_percentile(table.ttft_s[inside], 50),
            ttft_p90_s=_percentile(table.ttft_s[inside], 90),
            tpot_p50_s=_percentile(table.tpot_s[inside], 50),
            tpot_p90_s=_percentile(table.tpot_s[inside], 90),
        ))
    return tuple(out)


def _percentile(values: np.ndarray, p: int) -> float | None:
    values = values[~np.isnan(values)]
    return float(np.percentile(values, p, method="linear")) if values.size else None
