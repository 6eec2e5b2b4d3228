"""The watch table: the step ends coalesced runs skip, so that an event landing on one is told.

A step end a run skips has no event; it counts as processed after every event at its time.
That is wrong only if an event is scheduled at exactly that time later on, or a stand-in of
another run already sits there. The clock asks this table on every event it schedules, and
tells the runs watching that time (``Coalescer.on_tie``): such a run ends at that step and
gets a stand-in of its own, whose order key (``engine.event_queue``) orders the two.::

    time ->     end 0     end 1     end 2 ... end K-1
    loop        e0        e1        e2        eK-1        one event per step
    coalesced   .         .         .         stand-in    one event per run
    event X at exactly end 1:  the run stops at end 1 (a stand-in there), keys order it

The table is one open-addressing hash table (linear probing) of the ends' own float objects,
indexed by their nanoseconds, with the entries of the live stand-ins beside them: a run meets
a stand-in at one of its ends while it adds the end. It holds a superset of the skipped ends:
an end no run skips any more (a run cut short takes its ends out; a finished run's are past)
only costs a look, until the table is rebuilt from the live runs.
"""

from __future__ import annotations

from typing import Final, Protocol, cast

from clustersim.engine.event_queue import Alarm


class Coalescer(Protocol):
    """The owner of a run whose skipped step ends the table watches."""

    def on_tie(self, time_s: float) -> None:
        """An event will sit at exactly ``time_s``: if that is a step end the run skips, the run
        must end there."""

    def watched_times(self) -> list[float]:
        """The step ends its run still skips."""


NS_PER_S: Final = 1e9

GONE: Final = object()
"""A slot whose end or stand-in was taken out (probing goes on past it)."""
MIN_SLOTS: Final = 1 << 16
"""The table's least size (a power of 2, 512 KB); it is rebuilt, at least eight times the
size of what the runs still skip, whenever more than half its slots were ever filled (so at
most once every 32,768 step ends)."""


class WatchTable:
    """The skipped step ends of every live run, and the live stand-ins, by time.

    A time's probe starts at the slot given by the low bits of its nanoseconds,
    ``int(at_s * NS_PER_S) & mask``: equal times start at the same slot. (A float's own hash
    takes its low bits from the top of the mantissa, nearly the same for nearby times:
    thousands of step ends a few milliseconds apart would share a few dozen slots.)"""

    def __init__(self) -> None:
        self.slots: list[object] = [None] * MIN_SLOTS
        """A skipped end (a float), a live stand-in (its heap entry), :data:`GONE`, or None
        for a slot never filled."""
        self.mask = MIN_SLOTS - 1
        self.filled = 0
        """Slots ever filled since the table was built (taken-out ones included): 0 while no
        run has skipped anything, when the clock need not look."""
        self.owners: dict[Coalescer, None] = {}

    def holds_end(self, at_s: float) -> bool:
        """Whether some run may skip a step end at ``at_s``."""
        if at_s - at_s != 0.0:
            return False  # not finite: never a step end
        slots = self.slots
        mask = self.mask
        slot = int(at_s * NS_PER_S) & mask
        while True:
            held = slots[slot]
            if held is None:
                return False
            if isinstance(held, float) and held == at_s:
                return True  # (a stand-in's entry is no skipped end)
            slot = (slot + 1) & mask

    def tie(self, at_s: float) -> None:
        """An event will sit at ``at_s``: every run is told (each checks its own ends)."""
        for owner in list(self.owners):
            owner.on_tie(at_s)

    def watch(self, owner: Coalescer, times_s: list[float], lo: int, hi: int) -> None:
        """``owner`` skips the step ends ``times_s[lo:hi]`` (ascending: all it skips now); it
        is told at once of any live stand-in at one of them."""
        if self.filled + hi - lo > (self.mask + 1) >> 1:
            self._rebuild(owner, hi - lo)
        if owner not in self.owners:  # (a run's later chunks: already in)
            self.owners[owner] = None
        slots = self.slots
        mask = self.mask
        ends: list[object] = times_s  # type: ignore[assignment]  # (the ends' own objects)
        ties: list[float] | None = None
        for i in range(lo, hi):
            end = ends[i]
            slot = int(cast(float, end) * NS_PER_S) & mask
            tied = False
            while True:
                held = slots[slot]
                if held is None:
                    break
                if not tied and isinstance(held, Alarm) and held.at == times_s[i]:
                    tied = True  # a stand-in at this very time (any on the probe's way)
                slot = (slot + 1) & mask
            slots[slot] = end
            if tied:
                if ties is None:
                    ties = []
                ties.append(times_s[i])
        self.filled += hi - lo
        if ties is not None:
            for at_s in ties:
                owner.on_tie(at_s)

    def unwatch(self, times_s: list[float], lo: int, hi: int) -> None:
        """Step ends ``times_s[lo:hi]`` no longer skipped (the run ends before them)."""
        slots = self.slots
        mask = self.mask
        for i in range(lo, hi):
            at_s = times_s[i]
            slot = int(at_s * NS_PER_S) & mask
            while True:
                held = slots[slot]
                if held is None:
                    break  # not there (the table was rebuilt since)
                if isinstance(held, float) and held == at_s:
                    slots[slot] = GONE
                    break
                slot = (slot + 1) & mask

    def release(self, owner: Coalescer) -> None:
        """``owner``'s run is over (the step ends it skipped are all in the past)."""
        del self.owners[owner]

    def add_stand_in(self, entry: Alarm) -> None:
        """A stand-in scheduled at ``entry.at``: a run that later skips an end there meets it."""
        if self.filled + 1 > (self.mask + 1) >> 1:
            self._rebuild(None, 1)
        slots = self.slots
        mask = self.mask
        slot = int(entry.at * NS_PER_S) & mask
        while slots[slot] is not None:
            slot = (slot + 1) & mask
        slots[slot] = entry
        self.filled += 1

    def remove_stand_in(self, at_s: float) -> None:
        """A stand-in at ``at_s`` fired or no longer matters: one of the stand-in entries at
        that time leaves."""
        slots = self.slots
        mask = self.mask
        slot = int(at_s * NS_PER_S) & mask
        while True:
            held = slots[slot]
            if held is None:
                raise AssertionError(f"no stand-in at {at_s}")
            if isinstance(held, Alarm) and held.at == at_s:
                slots[slot] = GONE
                return
            slot = (slot + 1) & mask

    def _rebuild(self, watcher: Coalescer | None, room: int) -> None:
        """A fresh table of what the live runs other than ``watcher`` still skip and of the
        live stand-ins, with room for ``room`` more (``watcher``'s, or a new stand-in's)."""
        live: list[object] = [held for held in self.slots if isinstance(held, Alarm)]
        for owner in self.owners:
            if owner is not watcher:
                live.extend(owner.watched_times())
        size = MIN_SLOTS
        while size < 8 * (len(live) + room):
            size *= 2
        slots: list[object] = [None] * size
        mask = size - 1
        for held in live:
            at_s = held.at if isinstance(held, Alarm) else float(held)  # type: ignore[arg-type]
            slot = int(at_s * NS_PER_S) & mask
            while slots[slot] is not None:
                slot = (slot + 1) & mask
            slots[slot] = held
        self.slots = slots
        self.mask = mask
        self.filled = len(live)
