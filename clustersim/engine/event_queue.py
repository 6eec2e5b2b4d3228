"""The clock's event queue: its entries, the order they are processed in, and the heap.

SimPy processes events in the order of ``(time, priority, order scheduled)``. Here every entry
carries an order key instead of SimPy's counter: ``(when, eid)``, the moment it was scheduled
and its number (numbers grow with the clock, so two such keys compare by ``eid`` alone), or,
for the stand-in of a step end a coalesced run skipped, a :class:`StepEndOrder`: the key the
step loop's own event would have had. The loop schedules the end of step ``j`` while it
processes the end of step ``j - 1``, so that key says "scheduled at the end of step ``j - 1``,
after every event scheduled up to then", and, against another such key from the same moment,
defers to the order of the two steps before (back to the last moment the run was really
processed, whose key is real).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

URGENT: Final = 0
NORMAL: Final = 1
"""SimPy's two priorities (``simpy.core.URGENT``, ``NORMAL``)."""


class Event:
    """What the clock's own kinds of event share with SimPy's: the callbacks to call when it
    is processed (None once it was), whether it succeeded, and its value."""

    def __init__(self, callbacks: list[Callable[[Any], None]] | None) -> None:
        self.callbacks = callbacks
        self._ok = True
        self._value: Any = None


class Alarm(Event):
    """A ``simpy.Timeout`` without the rest: an event that succeeds, with no value, when it is
    processed (made by ``engine.events.alarm``, or scheduled by a run as its stand-in).

    It is also what the heap holds: an alarm is its own entry (``event`` None; it is scheduled
    once), and any other event sits in an alarm of its own (``event``, with no callbacks). One
    class, with no subclass: the heap's entries are checked by their exact type."""

    def __init__(self, callbacks: list[Callable[[Any], None]] | None,
                 call: Callable[[Any], None] | None = None) -> None:
        """``callbacks``: what it calls when processed (None: a heap entry for another
        event, which holds its own, or an alarm with ``call``). ``call``: its one callback,
        when nothing else can wait on it (the clock calls it; taking it back, ``call =
        None``, cancels the alarm)."""
        super().__init__(callbacks)
        self.at = 0.0
        self.priority: int = NORMAL
        self.eid = 0
        self.when = 0.0
        self.order: StepEndOrder | None = None
        self.event: Any = None
        """The event this entry stands for (None: this alarm itself)."""
        self.call = call

    def place(self, at: float, priority: int, eid: int, when: float,
              order: StepEndOrder | None) -> None:
        """Where the entry sits in the order: processed at ``at`` with ``priority``, with the
        order key ``order``, or ``(when, eid)`` where that is None."""
        self.at = at
        self.priority = priority
        self.eid = eid
        self.when = when
        self.order = order


def entry_for(event: Any) -> Alarm:
    """The heap entry of an event that is not an alarm."""
    entry = Alarm(None)
    entry.event = event
    return entry


class StepEndOrder:
    """The order key of the end of step ``step`` of a run whose steps end at ``ends_s``, as
    the step loop would have scheduled it: while processing the end of ``step - 1``. The end
    of ``anchor_step`` (the first step after the run was last really processed) has the real
    key ``anchor_order``."""

    __slots__ = ("ends_s", "step", "anchor_step", "anchor_order")

    def __init__(self, ends_s: list[float], step: int, anchor_step: int,
                 anchor_order: tuple[float, int]) -> None:
        if step <= anchor_step:
            raise ValueError("the anchor step's end has a real order key")
        self.ends_s = ends_s
        self.step = step
        self.anchor_step = anchor_step
        self.anchor_order = anchor_order

    def compare(self, other: StepEndOrder | tuple[float, int]) -> int:
        """-1, 1: whether this key comes before or after ``other`` (never equal)."""
        ends, step, anchor, real = self.ends_s, self.step, self.anchor_step, self.anchor_order
        o_ends: list[float] | None
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


def before(a: Alarm, b: Alarm) -> bool:
    """Whether ``a`` is processed before ``b``."""
    if a.at != b.at:
        return a.at < b.at
    if a.priority != b.priority:
        return a.priority < b.priority
    order, other = a.order, b.order
    if order is None:
        if other is None:
            return a.eid < b.eid
        return other.compare((a.when, a.eid)) > 0
    return order.compare(other if other is not None else (b.when, b.eid)) < 0


def push(heap: list[Alarm], entry: Alarm) -> None:
    """``heapq.heappush`` with :func:`before` (the same algorithm, so the same heap)."""
    heap.append(entry)
    _sift_up(heap, len(heap) - 1, entry)


def pop(heap: list[Alarm]) -> Alarm:
    """``heapq.heappop`` with :func:`before` (its leaf-first sift, then back up)."""
    last = heap.pop()
    if not heap:
        return last
    top = heap[0]
    end = len(heap)
    pos = 0
    child = 1
    while child < end:
        right = child + 1
        if right < end and not before(heap[child], heap[right]):
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
        if not before(entry, parent):
            break
        heap[pos] = parent
        pos = parent_pos
    heap[pos] = entry


class NowQueue:
    """Entries of events scheduled now with no delay and one priority, from ``head`` on:
    already in the order of their keys (same time, same priority, growing ``eid``), so a
    queue, not a heap."""

    __slots__ = ("entries", "head")

    def __init__(self) -> None:
        self.entries: list[Alarm] = []
        self.head = 0

    def pending(self) -> bool:
        return self.head < len(self.entries)

    def first(self) -> Alarm:
        return self.entries[self.head]

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
