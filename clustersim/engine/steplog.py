"""An instance's engine trace: the totals a run summary needs, and optionally every step.

Every step an instance runs passes through :class:`StepLog`. It always accumulates the
:class:`StepTotals` that ``metrics.summarize`` reads (in step order, with the same float
operations a pass over the records would do, so both give the same bits); with
``record_steps`` it also keeps the ``steps.csv`` columns in flat arrays, from which
:class:`StepRecord` rows are built on demand. A run of coalesced decode steps is appended in
one call and read back as one row per step.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import repeat
from typing import Final

from clustersim.engine.step_plan import StepPlan


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One row of the engine trace (``steps.csv``)."""

    instance: str
    step: int
    start_s: float
    end_s: float
    num_decode_tokens: int
    prefill_chunks: tuple[tuple[str, int], ...]
    num_scheduled_tokens: int
    num_running: int
    num_waiting: int
    kv_blocks_used: int
    num_preempted: int


@dataclass(slots=True)
class StepTotals:
    """One instance's steps summed up: what a run summary reads from its engine trace."""

    num_steps: int = 0
    busy_s: float = 0.0
    """Sum of step durations (``end_s - start_s``), in step order."""
    kv_block_s: float = 0.0
    """Sum of ``kv_blocks_used x duration``: block-seconds of KV held while stepping."""
    peak_kv_blocks: int = 0
    num_preemptions: int = 0
    last_end_s: float | None = None

    def add(self, start_s: float, end_s: float, kv_blocks_used: int, num_preempted: int) -> None:
        duration = end_s - start_s
        self.num_steps += 1
        self.busy_s += duration
        self.kv_block_s += kv_blocks_used * duration
        if kv_blocks_used > self.peak_kv_blocks:
            self.peak_kv_blocks = kv_blocks_used
        self.num_preemptions += num_preempted
        if self.last_end_s is None or end_s > self.last_end_s:
            self.last_end_s = end_s

    @classmethod
    def of_records(cls, steps: Iterable[StepRecord]) -> dict[str, StepTotals]:
        """Per instance name, from a list of rows (any order of instances, steps in order)."""
        totals: dict[str, StepTotals] = {}
        for s in steps:
            acc = totals.get(s.instance)
            if acc is None:
                acc = totals[s.instance] = cls()
            acc.add(s.start_s, s.end_s, s.kv_blocks_used, s.num_preempted)
        return totals


_EMPTY: Final[tuple[tuple[str, int], ...]] = ()


class StepLog:
    """The steps of one instance, appended in order."""

    __slots__ = ("name", "record_steps", "totals", "_start", "_end", "_decode", "_chunks",
                 "_scheduled", "_running", "_waiting", "_kv_used", "_preempted")

    def __init__(self, name: str, record_steps: bool = True) -> None:
        self.name = name
        self.record_steps = record_steps
        self.totals = StepTotals()
        self._start = array("d")
        self._end = array("d")
        self._decode = array("q")
        self._chunks: list[tuple[tuple[str, int], ...]] = []
        self._scheduled = array("q")
        self._running = array("q")
        self._waiting = array("q")
        self._kv_used = array("q")
        self._preempted = array("q")

    def __len__(self) -> int:
        return self.totals.num_steps

    def add(
        self,
        start_s: float,
        end_s: float,
        num_decode_tokens: int,
        prefill_chunks: tuple[tuple[str, int], ...],
        num_scheduled_tokens: int,
        num_running: int,
        num_waiting: int,
        kv_blocks_used: int,
        num_preempted: int,
    ) -> None:
        """One step."""
        self.totals.add(start_s, end_s, kv_blocks_used, num_preempted)
        if self.record_steps:
            self._start.append(start_s)
            self._end.append(end_s)
            self._decode.append(num_decode_tokens)
            self._chunks.append(prefill_chunks)
            self._scheduled.append(num_scheduled_tokens)
            self._running.append(num_running)
            self._waiting.append(num_waiting)
            self._kv_used.append(kv_blocks_used)
            self._preempted.append(num_preempted)

    def add_plan(self, plan: StepPlan, start_s: float, end_s: float) -> None:
        """One step, of ``plan``."""
        chunks = (tuple((r.request_id, n) for r, n in plan.prefill_chunks)
                  if self.record_steps else ())
        self.add(start_s, end_s, plan.num_decode_tokens, chunks, plan.num_scheduled_tokens,
                 plan.num_running, plan.num_waiting, plan.kv_blocks_used, len(plan.preempted))

    def add_decodes(
        self,
        start_s: float,
        ends_s: list[float],
        first: int,
        stop: int,
        blocks_before: int,
        takers: list[int],
        phase: int,
        num_decodes: int,
        num_running: int,
        num_waiting: int,
    ) -> None:
        """Consecutive pure-decode steps ``first .. stop - 1`` of a run: the first starts at
        ``start_s``, each later one when the previous ends; step ``m`` ends at ``ends_s[m]``.
        Blocks in use: ``blocks_before`` before step ``first``, and each step's schedule
        takes ``takers[phase]`` more, the phase one further each step (cyclically)."""
        if stop <= first:
            return
        if stop > len(ends_s) or not 0 <= phase < len(takers):
            raise ValueError(f"steps up to {stop} of {len(ends_s)} step ends, phase {phase} "
                             f"of {len(takers)}")
        totals = self.totals
        # the same float operations, in the same order, as adding the steps one by one
        busy = totals.busy_s
        block_s = totals.kv_block_s
        peak = totals.peak_kv_blocks
        previous = start_s
        used = blocks_before
        num_phases = len(takers)
        recording = self.record_steps
        kv_used = self._kv_used
        for m in range(first, stop):
            end = ends_s[m]
            duration = end - previous
            used += takers[phase]
            phase += 1
            if phase == num_phases:
                phase = 0
            busy += duration
            block_s += used * duration
            if used > peak:
                peak = used
            if recording:
                kv_used.append(used)
            previous = end
        totals.busy_s = busy
        totals.kv_block_s = block_s
        totals.peak_kv_blocks = peak
        totals.num_steps += stop - first
        if totals.last_end_s is None or previous > totals.last_end_s:
            totals.last_end_s = previous
        if self.record_steps:
            n = stop - first
            self._start.append(start_s)
            self._start.extend(ends_s[first:stop - 1])
            self._end.extend(ends_s[first:stop])
            self._decode.extend(repeat(num_decodes, n))
            self._chunks.extend(repeat(_EMPTY, n))
            self._scheduled.extend(repeat(num_decodes, n))
            self._running.extend(repeat(num_running, n))
            self._waiting.extend(repeat(num_waiting, n))
            self._preempted.extend(repeat(0, n))

    def take_records(self) -> list[StepRecord]:
        """Every step as a row, dropping the columns (the totals stay): the rows then are
        the only copy."""
        rows = self.records()
        for column in (self._start, self._end, self._decode, self._scheduled, self._running,
                       self._waiting, self._kv_used, self._preempted):
            del column[:]
        self._chunks = []
        return rows

    def records(self) -> list[StepRecord]:
        """Every step as a row (empty unless ``record_steps``)."""
        name = self.name
        return [
            StepRecord(name, i, start, end, decode, chunks, scheduled, running, waiting, used,
                       preempted)
            for i, (start, end, decode, chunks, scheduled, running, waiting, used, preempted)
            in enumerate(zip(self._start, self._end, self._decode, self._chunks,
                             self._scheduled, self._running, self._waiting, self._kv_used,
                             self._preempted, strict=True))
        ]
