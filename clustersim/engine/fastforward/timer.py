"""The waiting side of a coalesced run: when its steps end, and the one event that ends it.

An engine (or a lockstep data-parallel group) that takes a run of steps in one wait hands the
steps' durations to a :class:`RunTimer`. The timer holds the end time of every planned step,
one stand-in event at the end of the last one (ordered as the step loop's own event would
have been, ``engine.event_queue``), and grows the run a chunk at a time: when the stand-in fires
and the run was not cut short, it asks its owner for more steps (``plan_more``) and waits
again; otherwise it wakes the owner's process (``wake``), which applies the run.

Anything that changes the engine from outside cuts the run at the step in progress
(:meth:`settle`); an event landing exactly on a skipped step end cuts it there
(:meth:`on_tie`).
"""

from __future__ import annotations

from bisect import bisect_left as _bisect_left
from collections.abc import Callable
from typing import Final

from clustersim.engine.clock import Clock
from clustersim.engine.event_queue import Alarm, StepEndOrder
from clustersim.engine.events import Signal, fire

bisect_left: Final = _bisect_left

MAX_CHUNK_STEPS: Final = 64
"""The most steps a run plans at once; each chunk is twice the one before. Every step planned
is priced and watched for ties, used or not, and a run cut short wastes the rest of its last
chunk: doubling up to 64 took the fewest instructions on ``benchmarks/sim_speed.py``'s cases."""


def append_ends(ends_s: list[float], start_s: float, durations: list[float]) -> None:
    """Append the ends of steps that follow one another from ``start_s``: each ends at the
    previous end plus its duration, as a timeout adds it."""
    end = start_s
    for duration in durations:
        end += duration
        ends_s.append(end)


class RunTimer:
    """End times of a run's steps and the stand-in event at the end of its last one."""

    __slots__ = ("clock", "plan_more", "start_s", "ends_s", "last", "anchor_step",
                 "anchor_order", "timer", "wake", "truncated", "chunk")

    def __init__(self, clock: Clock, start_s: float, ends_s: list[float], chunk: int,
                 plan_more: Callable[[int, int, list[float]], int]) -> None:
        """``ends_s``: the end times of the steps planned first (at least 2), the run's own
        from now on; ``plan_more(first, n, ends_s)`` appends the ends of up to ``n`` more
        steps from step ``first`` and says how many (fewer or none: the run is complete)."""
        self.clock = clock
        self.plan_more = plan_more
        self.start_s = start_s
        self.ends_s = ends_s
        self.last = len(ends_s) - 1
        """The step the run ends with, unless it grows."""
        self.anchor_step = 0
        self.anchor_order = clock.order_now()
        """The first step that had not ended at the last moment the run was processed (its
        start, or a chunk's end), and the order key its end event would have had: the step
        loop scheduled it at that moment."""
        self.timer: Alarm | None = None
        self.wake = Signal(clock)
        """Succeeds when the run is over (its last step ended)."""
        self.truncated = False
        self.chunk = 2 * chunk
        self._set_timer()
        # (may end the run at once, at a tie)
        clock.watches.watch(self, self.ends_s, 0, self.last)

    def start_of(self, step: int) -> float:
        return self.start_s if step == 0 else self.ends_s[step - 1]

    def step_in_progress(self, time_s: float) -> int:
        """The step whose end is the first at or after ``time_s`` (an event at exactly a
        skipped step end comes before it: see ``engine.watch``)."""
        return bisect_left(self.ends_s, time_s, self.anchor_step, self.last)

    def settle(self) -> int:
        """Something changes the engine now: the run ends with the step in progress (no
        more chunks), which is returned."""
        step = self.step_in_progress(self.clock.now)
        if step < self.last:
            self._truncate(step)
        self.truncated = True
        return step

    def release(self) -> None:
        """The owner applied the run."""
        self.clock.watches.release(self)

    # ------------------------------------------------- the clock's callbacks
    def on_tie(self, time_s: float) -> None:
        """The clock will hold an event at exactly ``time_s``: a skipped step end there gets
        an event of its own (the run ends with that step), so the two keep their order."""
        step = self.step_in_progress(time_s)
        if step < self.last and self.ends_s[step] == time_s:
            self._truncate(step)

    def watched_times(self) -> list[float]:
        """The step ends the run still skips."""
        return self.ends_s[self.anchor_step:self.last]

    # ---------------------------------------------------------------- events
    def _set_timer(self) -> None:
        last = self.last
        order = (self.anchor_order if last == self.anchor_step
                 else StepEndOrder(self.ends_s, last, self.anchor_step, self.anchor_order))
        timer = self.timer = Alarm(None, self)  # the run itself is its call (__call__)
        self.clock.schedule_stand_in(timer, self.ends_s[last], order)

    def __call__(self, timer: Alarm) -> None:
        """A stand-in fired (the run is its only callback, and it is a normal event:
        ``events.fire``'s condition holds)."""
        if timer is not self.timer:
            return  # the run was cut shorter; this stand-in counted as gone then
        clock = self.clock
        clock.watches.remove_stand_in(self.ends_s[self.last])
        self.timer = None
        if not self.truncated and self._grow():
            return
        fire(self.wake)

    def _grow(self) -> bool:
        """The run got to its planned end unchanged: plan and wait for its next chunk."""
        first = self.last + 1
        ends = self.ends_s
        if not self.plan_more(first, self.chunk, ends):
            return False
        self.last = len(ends) - 1
        self.anchor_step = first
        self.anchor_order = self.clock.order_now()
        self.chunk = min(2 * self.chunk, MAX_CHUNK_STEPS)
        self._set_timer()
        self.clock.watches.watch(self, ends, first, self.last)
        return True

    def _truncate(self, step: int) -> None:
        """End the run with ``step`` (which has not ended yet)."""
        assert self.anchor_step <= step < self.last
        clock = self.clock
        clock.watches.remove_stand_in(self.ends_s[self.last])
        clock.watches.unwatch(self.ends_s, step, self.last)
        self.last = step
        self.truncated = True
        self._set_timer()
