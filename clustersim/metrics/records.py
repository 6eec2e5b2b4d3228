"""What a summary keeps of each request, filled one request at a time as each is done.

A run of a million requests need not keep a million ``Request`` objects (with their token
times) until its end: :class:`RequestRecords` takes each request once it is done, by its place
in the workload, and keeps a few numbers of it in typed columns (about 60 bytes a request),
and of its token times only where its runs of tokens sit on its engine's step clock. The
summary reads the columns; it is the same whether the records were filled during the run
(``run_scenario(..., sink=...)``) or from the requests after it (:meth:`RequestRecords.of`)::

    request done ──> add(index, request) ──> columns[index]      (arrival, TTFT, TPOT, E2E, ...)
                                        └──> token runs by clock (the pooled ITL, read at the end)
"""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from clustersim.engine.request import Request, RequestStatus
from clustersim.metrics.requests import (
    PooledGaps,
    RequestMetrics,
    RequestTable,
    linear_percentile,
    request_metrics,
    streak_gaps,
    token_gaps,
)

_NAN = float("nan")


class RequestRecords:
    """The per-request columns of a run's ``num_requests`` measured requests (NaN where a
    metric is undefined or the request is not yet added), and the counts a summary sums."""

    def __init__(self, num_requests: int, with_itl: bool = False) -> None:
        """``with_itl``: also each request's p99 token gap (read only by an ITL limit)."""
        n = num_requests
        self.num_requests = n
        self.with_itl = with_itl
        self.num_added = 0
        self.arrival_s = array("d", [_NAN]) * n
        self.finished = array("b", [0]) * n
        self.ttft_s = array("d", [_NAN]) * n
        self.tpot_s = array("d", [_NAN]) * n
        self.e2e_s = array("d", [_NAN]) * n
        self.itl_p99_s = array("d", [_NAN]) * n if with_itl else None
        self.finish_s = array("d", [_NAN]) * n
        self.prompt_tokens = array("q", [0]) * n
        self.output_tokens = array("q", [0]) * n
        self.retries: array | None = None
        """Times each was sent again after a failure lost it (None: none ever was)."""
        self.dispatch_s: array | None = None
        """A benchmark client's dispatch before its wait for a slot (None: no request had
        one)."""
        self.handoff_s: array | None = None
        """Prefill done -> KV resident on the decode side (None: no request was handed off)."""
        self.handoff_bytes = 0
        self.num_preemptions = 0
        self.num_preempted_requests = 0
        self.rejections: Counter[str | None] = Counter()
        self.num_keyed = 0
        """Requests that carried prefix-cache keys."""
        self.num_cached_tokens = 0
        """Prompt tokens the admitted requests' first prefills found in the prefix cache."""
        self.num_admitted_prompt_tokens = 0
        """Prompt tokens of the requests ever admitted (those a prefix cache was asked for)."""
        self.num_cpu_hit_tokens = 0
        """Prompt tokens the admitted requests' first prefills loaded from a CPU tier."""
        self.last_finish_s: float | None = None
        self._gaps = PooledGaps()
        """The pooled token gaps, read once the run has ended."""
        self._itl_later: list[tuple[int, Any, Any]] = []
        """Lean run, ITL limit: (index, clock, token runs) of each request whose p99 gap is
        read from its clock once the run has ended."""

    @classmethod
    def of(cls, requests: Iterable[Request], with_itl: bool = False) -> RequestRecords:
        """The records of ``requests``, in their order."""
        requests = list(requests)
        records = cls(len(requests), with_itl)
        for i, r in enumerate(requests):
            records.add(i, r)
        return records

    def add(self, index: int, r: Request, metrics: RequestMetrics | None = None) -> None:
        """Request ``index`` (0-based, in the workload's order) is done: keep what the summary
        reads of it (the request itself is not kept). ``metrics``: its ``request_metrics``
        without ITL, when already read."""
        self.num_added += 1
        self.arrival_s[index] = r.arrival_s
        self.prompt_tokens[index] = r.num_prompt_tokens
        if r.num_retries:
            if self.retries is None:
                self.retries = array("q", [0]) * self.num_requests
            self.retries[index] = r.num_retries
        if r.dispatch_s is not None:
            if self.dispatch_s is None:
                self.dispatch_s = array("d", [_NAN]) * self.num_requests
            self.dispatch_s[index] = r.dispatch_s
        if r.block_hashes:
            self.num_keyed += 1
        if r.num_cached_tokens >= 0:
            self.num_cached_tokens += r.num_cached_tokens
            self.num_admitted_prompt_tokens += r.num_prompt_tokens
            self.num_cpu_hit_tokens += r.num_cpu_hit_tokens
        if r.num_preemptions:
            self.num_preemptions += r.num_preemptions
            self.num_preempted_requests += 1
        if r.handoff_end_s is not None:
            assert r.handoff_start_s is not None
            if self.handoff_s is None:
                self.handoff_s = array("d", [_NAN]) * self.num_requests
            self.handoff_s[index] = r.handoff_end_s - r.handoff_start_s
            self.handoff_bytes += r.handoff_bytes
        finish = r.finish_s
        if finish is not None:
            self.finish_s[index] = finish
            if self.last_finish_s is None or finish > self.last_finish_s:
                self.last_finish_s = finish
        if r.status is RequestStatus.REJECTED:
            self.rejections[r.reject_reason] += 1
        elif r.status is RequestStatus.FINISHED:
            self._gaps.add(r)
        m = metrics if metrics is not None else request_metrics(r, with_itl=False)
        if m.ttft_s is None:
            return
        self.finished[index] = 1
        self.output_tokens[index] = r.num_output_tokens
        self.ttft_s[index] = m.ttft_s
        self.e2e_s[index] = m.e2e_s  # type: ignore[assignment]
        if m.tpot_s is not None:
            self.tpot_s[index] = m.tpot_s
        if self.itl_p99_s is not None and r.num_output_tokens > 1:
            if r.kept_token_times():
                self.itl_p99_s[index] = linear_percentile(token_gaps(r), 99)
            else:  # its engine's clock may not hold its last steps' times yet
                self._itl_later.append((index, r.token_clock, r.token_streaks))

    # ------------------------------------------------------------------ reading
    def _column(self, values: array | None, dtype: Any) -> np.ndarray | None:
        return None if values is None else np.frombuffer(values, dtype=dtype)

    def table(self) -> RequestTable:
        """The columns as a :class:`RequestTable` (views, not copies; call once the run has
        ended)."""
        n = self.num_requests
        for index, clock, runs in self._itl_later:
            self.itl_p99_s[index] = linear_percentile(  # type: ignore[index]
                streak_gaps(clock, runs), 99)
        self._itl_later = []
        itl = self._column(self.itl_p99_s, np.float64)
        return RequestTable(
            np.frombuffer(self.arrival_s, dtype=np.float64),
            np.frombuffer(self.finished, dtype=np.int8).view(bool),
            np.frombuffer(self.ttft_s, dtype=np.float64),
            np.frombuffer(self.tpot_s, dtype=np.float64),
            np.frombuffer(self.e2e_s, dtype=np.float64),
            itl if itl is not None else np.full(n, _NAN),
            np.frombuffer(self.prompt_tokens, dtype=np.int64),
            np.frombuffer(self.output_tokens, dtype=np.int64),
            self._column(self.retries, np.int64),
        )

    def finish_times(self) -> np.ndarray:
        return np.frombuffer(self.finish_s, dtype=np.float64)

    def dispatch_times(self) -> np.ndarray | None:
        return self._column(self.dispatch_s, np.float64)

    def handoff_times(self) -> np.ndarray | None:
        """Each handed-off request's handoff time, in the requests' order."""
        values = self._column(self.handoff_s, np.float64)
        return None if values is None else values[~np.isnan(values)]

    def gap_pieces(self) -> list[Callable[[], tuple[np.ndarray, np.ndarray]]]:
        """Every gap between consecutive output tokens of the finished requests
        (``metrics.requests.PooledGaps``; call once the run has ended)."""
        return self._gaps.pieces()
