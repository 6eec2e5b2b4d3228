"""The simulation clock: a SimPy environment whose events can stand in for skipped ones.

A coalesced run of decode steps (``engine.instance``) waits once for many step ends. For the
run to be exactly the step-by-step loop, every other event must still be processed in the
same order relative to the step ends it skipped, including events at the very same time.
SimPy orders events by ``(time, priority, order scheduled)``; the loop schedules the end of
step ``j`` while it processes the end of step ``j - 1``. So here:

* every event's order key is ``(time scheduled, sequence)``: the same order as SimPy's own
  counter, since the sequence grows with the clock;
* a stand-in for the end of step ``j`` carries the key the loop's event would have had
  (:class:`StepEndOrder`): scheduled at the end of step ``j - 1``, after every event scheduled
  up to then, and, against another such key from the same moment, in the order of the two
  steps before (back to the last moment the run was really processed, whose key is real);
* a step end a run skips has no event at all, and counts as processed after every event at
  its time. That is wrong only if an event is scheduled at exactly that time later on, or a
  stand-in of another run already sits there; the clock then tells the run (``on_tie``), which
  ends at that step and so gives it a stand-in of its own. (The clock keeps a superset of the
  skipped step ends in one open-addressing hash table of the ends' own float objects, indexed
  by their nanoseconds, the live stand-ins beside them: a time no run skips any more only
  costs the runs a look, and a run meets a stand-in at one of its ends while it adds it.)::

      time ->     end 0     end 1     end 2 ... end K-1
      loop        e0        e1        e2        eK-1        one event per step
      coalesced   .         .         .         stand-in    one event per run
      event X at exactly end 1:  the run stops at end 1 (a stand-in there), keys order it

Everything else is plain SimPy, whose ``step`` :meth:`Clock.run` inlines (so that the event
loop compiles with the core, ``clustersim.native``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Iterable
from typing import Any, Final, Protocol, cast

import simpy
from simpy.core import NORMAL as _SIMPY_NORMAL
from simpy.core import URGENT as _SIMPY_URGENT
from simpy.core import EmptySchedule, StopSimulation
from simpy.events import PENDING as _SIMPY_PENDING

PENDING: Final = _SIMPY_PENDING
"""SimPy's value of an event not yet triggered (bound once: compiled code reads a Final
name directly, another module's name through its dictionary)."""
URGENT: Final = 0
NORMAL: Final = 1
"""SimPy's two priorities (a literal Final is a constant in compiled code)."""
assert (URGENT, NORMAL) == (_SIMPY_URGENT, _SIMPY_NORMAL)

Env = Any
"""What the engines and the cluster run on: a :class:`Clock`, or a plain ``simpy.Environment``
(a stepped run in a test); SimPy's interface (``now``, ``schedule``, ``process``, ``timeout``,
``event``, ``run``)."""

Waitable = Any
"""What the engines and the cluster wait on: a ``simpy.Event``, or one of the kinds below
(which SimPy's environment, processes and this clock treat alike: they read ``callbacks``,
``_ok`` and ``_value``)."""


class Alarm:
    """A ``simpy.Timeout`` without the rest: an event that succeeds, with no value, when it is
    processed; made by :func:`alarm` (or scheduled by a run as its stand-in). Built in
    compiled code, it costs a fraction of SimPy's own Python events.

    It is also what the clock's heap holds: an alarm is its own entry there (``event`` None;
    it is scheduled once), and any other event sits in an alarm of its own (``event``, with
    no callbacks). Entries are processed in the order of ``(at, priority, order key)``, as
    SimPy orders its ``(time, priority, id)``; the order key is ``(when, eid)``, the moment
    and the number it was scheduled with (numbers grow with the clock, so two such keys
    compare by ``eid`` alone), or a stand-in's :class:`StepEndOrder`. (One class, with no
    subclass: the heap's entries are then checked by their exact type.)"""

    def __init__(self, callbacks: list[Callable[[Any], None]] | None,
                 call: Callable[[Any], None] | None = None) -> None:
        """``callbacks``: what it calls when processed (None: a heap entry for another
        event, which holds its own, or an alarm with ``call``). ``call``: its one callback,
        when nothing else can wait on it (a :class:`Clock` calls it; no list is built for
        it, and taking it back, ``call = None``, cancels the alarm)."""
        self.at = 0.0
        self.priority: int = NORMAL
        self.eid = 0
        self.when = 0.0
        self.order: StepEndOrder | None = None
        self.event: Any = None
        """The event this entry stands for (None: this alarm itself)."""
        self.callbacks = callbacks
        self.call = call
        self._ok = True
        self._value: Any = None


def _entry(at: float, priority: int, eid: int, when: float, order: StepEndOrder | None,
           event: Any) -> Alarm:
    """The heap entry of an event that is not an alarm."""
    entry = Alarm(None)
    entry.at = at
    entry.priority = priority
    entry.eid = eid
    entry.when = when
    entry.order = order
    entry.event = event
    return entry


class Signal:
    """A ``simpy.Event`` that can only succeed: waited on, then triggered by ``succeed()``
    (scheduled now, as SimPy's) or processed at once by ``Clock.fire_now``."""

    def __init__(self, env: Env) -> None:
        self.env = env
        self.callbacks: list[Callable[[Any], None]] | None = []
        self._ok = True
        self._value: Any = PENDING

    @property
    def triggered(self) -> bool:
        return self._value is not PENDING

    def succeed(self, value: Any = None) -> Signal:
        if self._value is not PENDING:
            raise RuntimeError(f"{self} has already been triggered")
        self._value = value
        _schedule(self.env, self, NORMAL, 0.0)
        return self


class Outcome(Signal):
    """A :class:`Signal` that can also fail with an exception (a KV transfer's), read as a
    process reads what it yielded (``ok``, ``value``) and as SimPy reads a failed event
    (``_defused`` exists once a waiter has handled the failure)."""

    _defused: bool

    @property
    def ok(self) -> bool:
        return self._ok

    @property
    def value(self) -> Any:
        if self._value is PENDING:
            raise AttributeError(f"Value of {self} is not yet available")
        return self._value

    def fail(self, exception: BaseException) -> Outcome:
        if self._value is not PENDING:
            raise RuntimeError(f"{self} has already been triggered")
        if not isinstance(exception, BaseException):
            raise TypeError(f"{exception} is not an exception.")
        self._ok = False
        self._value = exception
        _schedule(self.env, self, NORMAL, 0.0)
        return self


def alarm(env: Env, delay: float,
          callback: Callable[[Any], None] | None = None, priority: int = NORMAL) -> Alarm:
    """``env.timeout(delay)`` (the same place in the event order), calling ``callback`` with
    it when it is processed. ``priority=URGENT`` with no delay: where a process started now
    would first run (SimPy's ``Initialize``). On a :class:`Clock`, an alarm with a callback
    holds it as its ``call`` (cancelled by ``call = None``), and nothing else may wait on it;
    one without, a process can wait on."""
    event: Alarm
    if callback is None:
        event = Alarm([])
    elif isinstance(env, Clock):
        event = Alarm(None, callback)
    else:
        event = Alarm([callback])  # (SimPy's own loop reads only the callbacks)
    _schedule(env, event, priority, delay)
    return event


def _schedule(env: Env, event: Waitable, priority: int, delay: float) -> None:
    """``env.schedule(event, priority, delay)``: a :class:`Clock`'s called natively (the
    same call on an environment typed Any would go through Python's method lookup)."""
    if isinstance(env, Clock):
        env.schedule(event, priority, delay)
    else:
        env.schedule(event, priority, delay)


def now_of(env: Env) -> float:
    """``env.now``: read straight from a :class:`Clock` (compiled, a generic attribute read
    of its property costs ten times more), else from the SimPy environment."""
    if isinstance(env, Clock):
        return env._now
    return float(env.now)


def call_soon(env: Env, callback: Callable[[Any], None]) -> None:
    """Call ``callback`` (with the event that calls it) exactly where a process started now
    would first run: from an urgent event at now, as SimPy's ``Initialize`` (the same place in
    the event order), without a process, a generator or the event a finished process leaves
    behind."""
    alarm(env, 0.0, callback, URGENT)


def on_event(event: Waitable, callback: Callable[[Any], None]) -> None:
    """Call ``callback(event)`` when ``event`` is processed, where a process that yields it
    now would resume (at once if it was processed already). A failed event counts as
    handled: the callback reads ``event.ok`` and ``event.value``, as a process catches it."""
    if event.callbacks is None:
        callback(event)
        return

    def resume(event: Any) -> None:
        if not event._ok:
            event._defused = True
        callback(event)

    event.callbacks.append(resume)


class StepEndOrder:
    """The order key of the end of step ``step`` of a run whose steps end at ``ends_s``, as
    the step loop would have scheduled it: while processing the end of ``step - 1``. The end
    of ``anchor_step`` (the first step after the run was last really processed) has the real
    key ``anchor_order``."""

    __slots__ = ("ends_s", "step", "anchor_step", "anchor_order")

    def __init__(self, ends_s: list[float], step: int, anchor_step: int,
                 anchor_order: tuple) -> None:
        if step <= anchor_step:
            raise ValueError("the anchor step's end has a real order key")
        self.ends_s = ends_s
        self.step = step
        self.anchor_step = anchor_step
        self.anchor_order = anchor_order

    def _compare(self, other: Any) -> int:
        """-1, 1: whether this key comes before or after ``other`` (never equal)."""
        ends, step, anchor, real = self.ends_s, self.step, self.anchor_step, self.anchor_order
        if isinstance(other, StepEndOrder):
            o_ends, o_step, o_anchor, o_real = (other.ends_s, other.step, other.anchor_step,
                                                other.anchor_order)
        else:
            o_ends, o_step, o_anchor, o_real = None, 0, 0, other
        while True:
            # each side: scheduled at ``when``, either a real key or "after all then"
            mine_real = step == anchor
            theirs_real = o_ends is None or o_step == o_anchor
            if mine_real and theirs_real:
                return -1 if real < o_real else 1
            when = real[0] if mine_real else ends[step - 1]
            o_when = o_real[0] if theirs_real else o_ends[o_step - 1]  # type: ignore[index]
            if when != o_when:
                return -1 if when < o_when else 1
            if mine_real:
                return -1  # a real event scheduled then precedes "after every event then"
            if theirs_real:
                return 1
            step -= 1  # both scheduled while processing the step end before: compare those
            o_step -= 1

    def __lt__(self, other: Any) -> bool:
        return self._compare(other) < 0

    def __gt__(self, other: Any) -> bool:
        return self._compare(other) > 0


class Coalescer(Protocol):
    """What the clock calls back: the owner of a run whose skipped step ends it watches."""

    def on_tie(self, time_s: float) -> None:
        """An event will sit at exactly ``time_s``: if that is a step end the run skips, the run
        must end there."""

    def watched_times(self) -> list[float]:
        """The step ends its run still skips."""


NS_PER_S: Final = 1e9

_GONE: Final = object()
"""A slot of the watch table whose step end was taken out (probing goes on past it)."""
MIN_TABLE_SLOTS: Final = 1 << 16
"""The watch table's least size (a power of 2, 512 KB); it is rebuilt, at least eight times
the size of what the runs still skip, whenever more than half its slots were ever filled (a
rebuild every 32,768 step ends at least: measured, 1 % of ``benchmarks/sim_speed.py``'s case b
went to rebuilding 8,192 slots)."""


def _slot(at_s: float, mask: int) -> int:
    """Where a time's probe starts in the watch table: the low bits of its nanoseconds. (A
    float's own hash takes its low bits from the top of the mantissa, nearly the same for
    nearby times: thousands of step ends a few milliseconds apart would share a few dozen
    slots.) Equal times start at the same slot."""
    return int(at_s * NS_PER_S) & mask


def _take_callbacks(event: Waitable) -> list[Callable[[Any], None]]:
    """An event's callbacks, leaving None (processed) in their place. The clock's own
    kinds, most of the events, are read as what they are (compiled fields, not Python
    attribute lookups)."""
    callbacks: list[Callable[[Any], None]] | None
    if isinstance(event, Alarm):
        callbacks = event.callbacks
        event.callbacks = None
        return callbacks  # type: ignore[return-value]  # (scheduled once, processed once)
    if isinstance(event, Signal):  # (an Outcome too)
        callbacks = event.callbacks
        event.callbacks = None
        return callbacks  # type: ignore[return-value]
    callbacks, event.callbacks = event.callbacks, None
    return callbacks  # type: ignore[return-value]


def _ok(event: Waitable) -> bool:
    """Whether the processed event succeeded (read as :func:`_take_callbacks` reads it)."""
    if isinstance(event, Alarm):
        return event._ok
    if isinstance(event, Signal):
        return event._ok
    return bool(event._ok)


def _copy_of(error: BaseException) -> BaseException:
    """What a failed event nobody defused raises: a copy of its exception, caused by it (as
    SimPy's ``step``)."""
    copy = type(error)(*error.args)
    copy.__cause__ = error
    return copy


def _before(a: Alarm, b: Alarm) -> bool:
    """Whether ``a`` is processed before ``b``."""
    if a.at != b.at:
        return a.at < b.at
    if a.priority != b.priority:
        return a.priority < b.priority
    order, other = a.order, b.order
    if order is None:
        if other is None:
            return a.eid < b.eid
        return other._compare((a.when, a.eid)) > 0
    return order._compare(other if other is not None else (b.when, b.eid)) < 0


def _push(heap: list[Alarm], entry: Alarm) -> None:
    """``heapq.heappush`` with :func:`_before` (the same algorithm, so the same heap)."""
    heap.append(entry)
    _sift_up(heap, len(heap) - 1, entry)


def _pop(heap: list[Alarm]) -> Alarm:
    """``heapq.heappop`` with :func:`_before` (its leaf-first sift, then back up)."""
    last = heap.pop()
    if not heap:
        return last
    top = heap[0]
    end = len(heap)
    pos = 0
    child = 1
    while child < end:
        right = child + 1
        if right < end and not _before(heap[child], heap[right]):
            child = right
        heap[pos] = heap[child]
        pos = child
        child = 2 * pos + 1
    _sift_up(heap, pos, last)
    return top


def _sift_up(heap: list[Alarm], pos: int, entry: Alarm) -> None:
    """Put ``entry`` at ``pos`` or above it, moving down the parents it comes before
    (heapq's ``_siftdown``)."""
    while pos > 0:
        parent_pos = (pos - 1) >> 1
        parent = heap[parent_pos]
        if not _before(entry, parent):
            break
        heap[pos] = parent
        pos = parent_pos
    heap[pos] = entry


class _NowQueue:
    """Heap entries of events scheduled now with no delay and one priority, from ``head`` on:
    already in the order of their keys (same time, same priority, growing ``eid``), so a
    queue, not a heap."""

    __slots__ = ("entries", "head")

    def __init__(self) -> None:
        self.entries: list[Alarm] = []
        self.head = 0

    def take(self) -> Alarm:
        """The first entry, taken off (there is one)."""
        entries = self.entries
        head = self.head
        entry = entries[head]
        head += 1
        if head == len(entries):
            entries.clear()
            head = 0
        self.head = head
        return entry


class Clock:
    """A SimPy environment (SimPy's events, processes and timeouts run on it as on
    ``simpy.Environment``, whose interface it implements) with order keys, stand-ins at
    exact times, and tie watching. It does not inherit from ``simpy.Environment`` so that it
    compiles as a native class (``clustersim.native``): its state is read and written at C
    speed on every event."""

    def __init__(self, initial_time: float = 0) -> None:
        self._now: float = initial_time
        self._queue: list[Alarm] = []
        """The events to process, a heap (SimPy's holds ``(time, priority, id, event)``),
        but for those below."""
        self._urgent_now = _NowQueue()
        self._normal_now = _NowQueue()
        """Events scheduled with no delay, urgent and normal (a callback's follow-ups: a
        third of a run's events): :meth:`_next` takes the first of a queue's head and the
        heap's top. Both are empty before the clock moves on (their events are at now)."""
        self._eid = 0
        """Events (and reserved order keys) numbered so far: the next one's number."""
        self._active_proc: Any = None
        """The SimPy process running now (SimPy's processes set it)."""
        self._table: list[object] = [None] * MIN_TABLE_SLOTS
        """Every step end a run skips (the float objects of the runs' ``ends_s``, once per
        run that skips it), and some no run skips any more (times now past, kept until the
        table is rebuilt from the live runs), and the heap entry of every live stand-in, at
        its time: open addressing, linear probing, None for a slot never filled,
        :data:`_GONE` for one whose end or stand-in was taken out."""
        self._mask = MIN_TABLE_SLOTS - 1
        self._filled = 0
        """Slots ever filled since the table was built (taken-out ones included)."""
        self._coalescers: dict[Coalescer, None] = {}
        # (live stand-ins sit in the table too, as their heap entries: see schedule_stand_in)
        self._num_reserved = 0
        self._num_stand_ins = 0

    # ---------------------------------------------------------------- events
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
        if (self._urgent_now.head < len(self._urgent_now.entries)
                or self._normal_now.head < len(self._normal_now.entries)):
            return self._now
        return self._queue[0].at if self._queue else math.inf

    def step(self) -> None:
        """Process the next event (``simpy.Environment.step``)."""
        entry = self._next()
        if entry is None:
            raise EmptySchedule()
        self._process(entry)

    def _next(self) -> Alarm | None:
        """Take the next event's entry off the queues (None: none is left)."""
        urgent = self._urgent_now
        if urgent.head < len(urgent.entries):
            return self._before_heap(urgent)  # (the heap's top, if first, precedes both)
        normal = self._normal_now
        if normal.head < len(normal.entries):
            return self._before_heap(normal)
        return _pop(self._queue) if self._queue else None

    def _before_heap(self, now_queue: _NowQueue) -> Alarm:
        """The first of ``now_queue``'s head (there is one) and the heap's top, taken off."""
        queue = self._queue
        if queue and not _before(now_queue.entries[now_queue.head], queue[0]):
            return _pop(queue)
        return now_queue.take()

    def run(self, until: Any = None) -> Any:
        """``simpy.Environment.run``: to the end of the schedule, or until the event (or the
        time) ``until``, each event processed by :meth:`_process`; a ``StopSimulation``
        ends the run with its value."""
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
        callbacks = _take_callbacks(event)
        done = 0
        try:
            for callback in callbacks:
                done += 1
                callback(event)
        except StopSimulation:
            event.callbacks = callbacks[done:]
            self.schedule(event, URGENT - 1)
            raise
        if not _ok(event) and not hasattr(event, "_defused"):
            raise _copy_of(event._value)

    def schedule(self, event: Waitable, priority: int = NORMAL, delay: float = 0.0) -> None:
        now = self._now
        at = now + delay
        if self._filled and self._watched(at):
            self._tie(at)
        eid = self._eid
        self._eid = eid + 1
        entry: Alarm
        if isinstance(event, Alarm):  # its own entry
            entry = event
            entry.at = at
            entry.priority = priority
            entry.eid = eid
            entry.when = now
            entry.order = None
        else:
            entry = _entry(at, priority, eid, now, None, event)
        if at == now:  # (no delay: after every event at now of its priority)
            if priority == NORMAL:
                self._normal_now.entries.append(entry)
                return
            if priority == URGENT:
                self._urgent_now.entries.append(entry)
                return
        _push(self._queue, entry)

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

    def schedule_stand_in(self, event: Waitable, at_s: float,
                          order: tuple | StepEndOrder) -> None:
        """Schedule ``event`` at exactly ``at_s`` with the given order key."""
        if at_s < self._now:
            raise ValueError(f"stand-in at {at_s} is in the past (now {self._now})")
        if self._filled and self._watched(at_s):
            self._tie(at_s)
        self._num_stand_ins += 1
        entry: Alarm
        if isinstance(event, Alarm):  # (a run's stand-in: its own entry)
            entry = event
            entry.at = at_s
            entry.priority = NORMAL
            if isinstance(order, StepEndOrder):
                entry.eid = 0
                entry.when = 0.0
                entry.order = order
            else:
                entry.eid = order[1]
                entry.when = order[0]
                entry.order = None
        elif isinstance(order, StepEndOrder):
            entry = _entry(at_s, NORMAL, 0, 0.0, order, event)
        else:
            entry = _entry(at_s, NORMAL, order[1], order[0], None, event)
        _push(self._queue, entry)
        # its entry goes into the watch table as well, beside the skipped step ends: a run
        # that later skips an end at its time meets it while probing (watch)
        if self._filled + 1 > (self._mask + 1) >> 1:
            self._rebuild(None, 1)
        table = self._table
        mask = self._mask
        slot = _slot(at_s, mask)
        while table[slot] is not None:
            slot = (slot + 1) & mask
        table[slot] = entry
        self._filled += 1

    def stand_in_gone(self, at_s: float) -> None:
        """A stand-in at ``at_s`` fired or no longer matters: one of the stand-in entries at
        that time leaves the watch table."""
        table = self._table
        mask = self._mask
        slot = _slot(at_s, mask)
        while True:
            held = table[slot]
            if held is None:
                raise AssertionError(f"no stand-in at {at_s}")
            if isinstance(held, Alarm) and held.at == at_s:
                table[slot] = _GONE
                return
            slot = (slot + 1) & mask

    def fire_now(self, event: Waitable) -> None:
        """Trigger ``event`` and process it at once, from the last callback of the event
        being processed: a process waiting on it resumes straight from that event, as if it
        had waited on that one. (Scheduling it urgently at now would make it the very next
        event anyway, when no urgent event is pending at now: true while a normal event at
        now is processed, since those come first.)"""
        if isinstance(event, Signal):  # a run's wake, read as compiled fields
            event._ok = True
            event._value = None
        else:
            event._ok = True
            event._value = None
        for callback in _take_callbacks(event):
            callback(event)

    # --------------------------------------------------------------- watching
    def watch(self, owner: Coalescer, times_s: list[float], lo: int, hi: int) -> None:
        """``owner`` skips the step ends ``times_s[lo:hi]`` (ascending: all it skips now);
        tell it when an event lands on one."""
        if self._filled + hi - lo > (self._mask + 1) >> 1:
            self._rebuild(owner, hi - lo)
        if owner not in self._coalescers:  # (a run's later chunks: already in)
            self._coalescers[owner] = None
        table = self._table
        mask = self._mask
        ends: list[object] = times_s  # type: ignore[assignment]  # (the objects, unboxed once)
        ties: list[float] | None = None  # (rare: no list unless one is met)
        for i in range(lo, hi):
            end = ends[i]
            slot = int(cast(float, end) * NS_PER_S) & mask  # (_slot, inline: 1.2 M a run)
            tied = False
            while True:
                held = table[slot]
                if held is None:
                    break
                if not tied and isinstance(held, Alarm) and held.at == times_s[i]:
                    tied = True  # a stand-in at this very time (any on the probe's way)
                slot = (slot + 1) & mask
            table[slot] = end
            if tied:
                if ties is None:
                    ties = []
                ties.append(times_s[i])
        self._filled += hi - lo
        if ties is not None:
            for at_s in ties:
                owner.on_tie(at_s)  # a stand-in already there: the keys must order the two

    def unwatch(self, times_s: list[float], lo: int, hi: int) -> None:
        """Step ends ``times_s[lo:hi]`` no longer skipped (the run ends before them): an event
        at one of them need not ask the runs any more, unless another run skips it too."""
        table = self._table
        mask = self._mask
        gone = _GONE
        for i in range(lo, hi):
            at_s = times_s[i]
            slot = int(at_s * NS_PER_S) & mask  # (_slot, inline)
            while True:
                held = table[slot]
                if held is None:
                    break  # not there (the table was rebuilt since)
                if isinstance(held, float) and held == at_s:
                    table[slot] = gone
                    break
                slot = (slot + 1) & mask

    def _watched(self, at_s: float) -> bool:
        """Whether the table holds ``at_s``: a run may skip a step end there."""
        if at_s - at_s != 0.0:
            return False  # not finite: never a step end
        table = self._table
        mask = self._mask
        slot = int(at_s * NS_PER_S) & mask  # (_slot, inline)
        while True:
            held = table[slot]
            if held is None:
                return False
            if isinstance(held, float) and held == at_s:
                return True  # (a stand-in's entry is no skipped end)
            slot = (slot + 1) & mask

    def _rebuild(self, watcher: Coalescer | None, room: int) -> None:
        """A fresh table of what the live runs other than ``watcher`` still skip and of the
        live stand-ins, with room for ``room`` more (``watcher``'s, or a new stand-in's)."""
        live: list[object] = [held for held in self._table if isinstance(held, Alarm)]
        for owner in self._coalescers:
            if owner is not watcher:
                live.extend(owner.watched_times())
        size = MIN_TABLE_SLOTS
        while size < 8 * (len(live) + room):
            size *= 2
        table: list[object] = [None] * size
        mask = size - 1
        for held in live:
            at_s = held.at if isinstance(held, Alarm) else cast(float, held)
            slot = _slot(at_s, mask)
            while table[slot] is not None:
                slot = (slot + 1) & mask
            table[slot] = held
        self._table = table
        self._mask = mask
        self._filled = len(live)

    def release(self, owner: Coalescer) -> None:
        """``owner``'s run is over (the step ends it skipped are all in the past)."""
        del self._coalescers[owner]

    def _tie(self, at_s: float) -> None:
        for owner in list(self._coalescers):
            owner.on_tie(at_s)
