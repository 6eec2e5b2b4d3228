"""The simulation clock: SimPy's event loop, whose events can stand in for skipped ones.

A coalesced run of decode steps (``engine.fastforward``) waits once for many step ends. For
the run to be exactly the step-by-step loop, every other event must still be processed in the
same order relative to the step ends it skipped, including events at the very same time. So
the :class:`Clock` keeps SimPy's order with order keys that a stand-in can borrow
(``engine.event_queue``), and a table of the skipped step ends that tells a run when an event
lands on one of them (``engine.watch``). Everything else is plain SimPy: its events, processes
and timeouts run on a clock as on ``simpy.Environment``.
"""

from __future__ import annotations

import math
from collections.abc import Generator, Iterable
from typing import Any

import simpy
from simpy.core import EmptySchedule, StopSimulation

from clustersim.engine.environment import Environment
from clustersim.engine.event_queue import (
    NORMAL,
    URGENT,
    Alarm,
    Event,
    NowQueue,
    StepEndOrder,
    before,
    entry_for,
    pop,
    push,
)
from clustersim.engine.watch import WatchTable

Env = Environment
"""A :class:`Clock`, or a plain ``simpy.Environment`` (``engine.environment``)."""

Waitable = Any
"""What the engines and the cluster wait on: a ``simpy.Event``, an :class:`Alarm`, or one of
``engine.events``' kinds, which SimPy's processes and this clock treat alike: they read
``callbacks``, ``_ok`` and ``_value``."""


def take_callbacks(event: Waitable) -> Any:
    """An event's callbacks, leaving None (processed) in their place."""
    if isinstance(event, Event):  # (the same words: clustersim.native)
        callbacks = event.callbacks
        event.callbacks = None
        return callbacks
    callbacks = event.callbacks
    event.callbacks = None
    return callbacks


def succeeded(event: Waitable) -> bool:
    """Whether a processed event succeeded (read as :func:`take_callbacks` reads it)."""
    if isinstance(event, Event):  # (the same words: clustersim.native)
        return event._ok
    return bool(event._ok)


def _copy_of(error: BaseException) -> BaseException:
    """What a failed event nobody defused raises: a copy of its exception, caused by it (as
    SimPy's ``step``)."""
    copy = type(error)(*error.args)
    copy.__cause__ = error
    return copy


class Clock:
    """A SimPy environment with order keys, stand-ins at exact times, and a watch table.

    It implements ``simpy.Environment``'s interface rather than inheriting it, so that it
    compiles as a native class (``clustersim.native``)."""

    def __init__(self, initial_time: float = 0) -> None:
        self._now: float = initial_time
        self._queue: list[Alarm] = []
        """The events to process, a heap (SimPy's holds ``(time, priority, id, event)``),
        but for those below."""
        self._urgent_now = NowQueue()
        self._normal_now = NowQueue()
        """Events scheduled with no delay, urgent and normal (a third of a run's events): the
        next event is the first of a queue's head and the heap's top. Both are empty before
        the clock moves on (their events are at now)."""
        self._eid = 0
        """Events (and reserved order keys) numbered so far: the next one's number."""
        self._active_proc: Any = None
        """The SimPy process running now (SimPy's processes set it)."""
        self.watches = WatchTable()
        """The step ends the runs skip, and the live stand-ins."""
        self._num_reserved = 0
        self._num_stand_ins = 0

    # ----------------------------------------------------- simpy.Environment
    @property
    def now(self) -> float:
        """The current simulation time."""
        return self._now

    @property
    def active_process(self) -> Any:
        """The SimPy process running now (None between processes)."""
        return self._active_proc

    def process(self, generator: Generator[Any, Any, Any]) -> simpy.Process:
        return simpy.Process(self, generator)  # type: ignore[arg-type]

    def timeout(self, delay: float = 0, value: Any = None) -> simpy.Timeout:
        return simpy.Timeout(self, delay, value)  # type: ignore[arg-type]

    def event(self) -> simpy.Event:
        return simpy.Event(self)  # type: ignore[arg-type]

    def all_of(self, events: Iterable[Any]) -> simpy.AllOf:
        return simpy.AllOf(self, events)  # type: ignore[arg-type]

    def any_of(self, events: Iterable[Any]) -> simpy.AnyOf:
        return simpy.AnyOf(self, events)  # type: ignore[arg-type]

    def peek(self) -> float:
        """The time of the next event (infinity when none is left)."""
        if self._urgent_now.pending() or self._normal_now.pending():
            return self._now
        return self._queue[0].at if self._queue else math.inf

    def schedule(self, event: Waitable, priority: int = NORMAL, delay: float = 0.0) -> None:
        now = self._now
        at = now + delay
        if self.watches.filled and self.watches.holds_end(at):
            self.watches.tie(at)
        eid = self._eid
        self._eid = eid + 1
        entry = event if isinstance(event, Alarm) else entry_for(event)
        entry.place(at, priority, eid, now, None)
        if at == now:  # (no delay: after every event at now of its priority)
            if priority == NORMAL:
                self._normal_now.entries.append(entry)
                return
            if priority == URGENT:
                self._urgent_now.entries.append(entry)
                return
        push(self._queue, entry)

    def step(self) -> None:
        """Process the next event (``simpy.Environment.step``)."""
        entry = self._next()
        if entry is None:
            raise EmptySchedule()
        self._process(entry)

    def run(self, until: Any = None) -> Any:
        """``simpy.Environment.run``: to the end of the schedule, or until the event (or the
        time) ``until``; a ``StopSimulation`` ends the run with its value."""
        if until is not None:
            if not isinstance(until, simpy.Event):
                at = float(until)
                if at <= self._now:
                    raise ValueError(
                        f"until ({at}) must be greater than the current simulation time")
                until = simpy.Event(self)  # type: ignore[arg-type]
                until._ok = True
                until._value = None
                self.schedule(until, URGENT, at - self._now)
            elif until.callbacks is None:
                return until.value
            until.callbacks.append(StopSimulation.callback)
        try:
            while True:
                entry = self._next()
                if entry is None:
                    break
                self._process(entry)
        except StopSimulation as stop:
            return stop.args[0]
        if until is not None:
            raise RuntimeError(
                f'No scheduled events left but "until" event was not triggered: {until}')
        return None

    # ------------------------------------------------------------- the loop
    def _next(self) -> Alarm | None:
        """Take the next event's entry off the queues (None: none is left)."""
        urgent = self._urgent_now
        if urgent.head < len(urgent.entries):
            return self._before_heap(urgent)
        normal = self._normal_now
        if normal.head < len(normal.entries):
            return self._before_heap(normal)
        return pop(self._queue) if self._queue else None

    def _before_heap(self, now_queue: NowQueue) -> Alarm:
        """The first of ``now_queue``'s head (there is one) and the heap's top, taken off
        (the heap's top, if it comes first, precedes the whole queue)."""
        queue = self._queue
        if queue and not before(now_queue.first(), queue[0]):
            return pop(queue)
        return now_queue.take()

    def _process(self, entry: Alarm) -> None:
        """Process one event as SimPy does: its callbacks in order; a ``StopSimulation``
        from one leaves the callbacks after it on the event, rescheduled for a later run,
        and goes on to the caller; a failed event nobody defused raises a copy of its
        exception."""
        self._now = entry.at
        event: Any = entry.event
        if event is None:  # an alarm: its own entry
            call = entry.call
            if call is not None:  # (its one callback, most of the events)
                entry.call = None
                call(entry)
                return
            if entry.callbacks is None:
                return  # its call was taken back
            event = entry
        callbacks = take_callbacks(event)
        done = 0
        try:
            for callback in callbacks:
                done += 1
                callback(event)
        except StopSimulation:
            event.callbacks = callbacks[done:]
            self.schedule(event, URGENT - 1)
            raise
        if not succeeded(event) and not hasattr(event, "_defused"):
            raise _copy_of(event._value)

    # ------------------------------------------------------ coalesced runs
    def order_now(self) -> tuple[float, int]:
        """The order key of an event scheduled at this moment."""
        self._num_reserved += 1
        eid = self._eid
        self._eid = eid + 1
        return (self._now, eid)

    @property
    def num_events(self) -> int:
        """Events scheduled so far (stand-ins included)."""
        return self._eid - self._num_reserved + self._num_stand_ins

    def schedule_stand_in(self, entry: Alarm, at_s: float,
                          order: tuple[float, int] | StepEndOrder) -> None:
        """Schedule the alarm ``entry`` at exactly ``at_s`` with the order key ``order``."""
        if at_s < self._now:
            raise ValueError(f"stand-in at {at_s} is in the past (now {self._now})")
        watches = self.watches
        if watches.filled and watches.holds_end(at_s):
            watches.tie(at_s)
        self._num_stand_ins += 1
        if isinstance(order, StepEndOrder):
            entry.place(at_s, NORMAL, 0, 0.0, order)
        else:
            entry.place(at_s, NORMAL, order[1], order[0], None)
        push(self._queue, entry)
        watches.add_stand_in(entry)
