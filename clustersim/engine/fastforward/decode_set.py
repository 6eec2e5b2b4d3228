"""The running requests that decode every step, advanced together without touching each.

Most of a busy engine's running requests are decodes that get one token in every step: their
schedule (one more computed token, now and then a new block) and their output (one more
token) are the same arithmetic for all of them. A :class:`DecodeSet` holds such requests as
members and applies a step to all of them at once; each member's counters are brought up to
date (``sync``) only when something reads it: when it leaves (it finishes, is aborted, or the
set is dissolved before a step it cannot take in bulk) or at the end of the run.

While a request is a member, its ``num_computed_tokens``, ``num_output_tokens`` and token
record are stale by the steps the set took since it joined::

    true computed = stored + (set.num_scheduled - joined_scheduled)
    true outputs  = stored + (set.num_updated   - joined_updated)
    its tokens    = every position of the token clock since it joined

Members are the running list's first ``len(set)`` requests, in order (the order their blocks
are taken in). A request joins after a step in which it sampled and from which it decodes,
if every request before it in the running list is a member.

With async scheduling (spec section 2) the schedule of step N+1 comes before the output of
step N, so a step is in flight at every schedule, and the set's steps are counted the same
way: schedule ``s`` and update ``s`` are the same step, the update coming after schedule
``s + 1``. Then also::

    true placeholders = stored + (set.num_scheduled - joined_scheduled)
                               - (set.num_updated   - joined_updated)

A request joins after the output of step N if it sampled in step N+1, already scheduled (its
one placeholder): that token comes alone, as any request's (it is counted from its join:
``joined_updated`` is the first update of the set's own steps it takes part in, and an update
before that one brings it nothing), and from step N+2 on it decodes with the set. A member
whose last token is the one in flight is not scheduled again (vLLM skips a request certain
to finish on its placeholder): at the schedule it is *retired* (it keeps its seat in the
running prefix, takes no block, no token and no budget) and it finishes with the output of
the step in flight. If the set is dissolved while its step is in flight, the members have
that step's token to come: the scheduler applies it as to a request scheduled alone.
"""

from __future__ import annotations

from array import array
from heapq import heappop as _heappop
from heapq import heappush as _heappush
from struct import pack as _struct_pack
from typing import Final

from clustersim.engine.config import SchedulerConfig
from clustersim.engine.kv_manager import KVCacheManager
from clustersim.engine.request import Request
from clustersim.engine.step_plan import NOTHING, listed

pack: Final = _struct_pack
heappop: Final = _heappop
heappush: Final = _heappush


def bulk_decodes_allowed(config: SchedulerConfig) -> bool:
    """Whether a scheduler with ``config`` may advance its decodes as a :class:`DecodeSet`
    (and so its engine take coalesced runs): the FCFS policy and no speculative decoding
    (why: ``engine.fastforward``)."""
    return config.policy == "fcfs" and config.speculative is None


PACK_FORMATS: Final = tuple(f"{n}d" for n in range(2048))
"""``struct`` formats of up to 2,047 doubles, built once (a batch for the clock is nearly
always shorter; longer ones build theirs)."""
CLOCK_BATCH: Final = 256
"""End times a :class:`StepClock` holds in a list before it packs them into its array."""


class StepClock:
    """The end time of every step an engine applied, in order (the token clock): the array
    ``times``, and the latest times in a list until a batch of them is packed into it at once
    (an array parses each double it appends on its own: hundreds of instructions a step).

    ``len`` counts both; ``times`` is complete after :meth:`flush` (a reader's slice does it,
    and the scheduler's ``sync_members`` at the end of a run)."""

    __slots__ = ("times", "_batch")

    def __init__(self) -> None:
        self.times = array("d")
        self._batch: list[float] = []

    def __len__(self) -> int:
        return len(self.times) + len(self._batch)

    def append(self, end_s: float) -> None:
        batch = self._batch
        batch.append(end_s)
        if len(batch) >= CLOCK_BATCH:
            self.flush()

    def extend(self, ends_s: list[float]) -> None:
        batch = self._batch
        batch.extend(ends_s)
        if len(batch) >= CLOCK_BATCH:
            self.flush()

    def flush(self) -> array:
        """``times``, with every end appended so far."""
        batch = self._batch
        n = len(batch)
        if n:
            fmt = PACK_FORMATS[n] if n < len(PACK_FORMATS) else f"{n}d"
            self.times.frombytes(pack(fmt, *batch))
            batch.clear()
        return self.times

    def between(self, first: int, stop: int) -> array:
        """Ends ``first .. stop - 1``."""
        return self.flush()[first:stop]


class DecodeSet:
    """Members, their lazily applied steps, and the aggregates a step of all of them needs."""

    __slots__ = ("kv", "block_size", "max_model_len", "clock", "keep_token_times",
                 "async_scheduling", "num_scheduled", "num_updated", "sum_computed", "joined",
                 "phases", "phase_sizes", "finishes", "retired", "_seq")

    def __init__(self, kv: KVCacheManager, max_model_len: int, clock: StepClock,
                 keep_token_times: bool, async_scheduling: bool = False) -> None:
        self.kv = kv
        self.block_size = kv.block_size
        self.max_model_len = max_model_len
        self.clock = clock
        """The scheduler's token clock: one end time per step applied."""
        self.keep_token_times = keep_token_times
        self.async_scheduling = async_scheduling
        """Members count their placeholders (tokens scheduled, not yet output)."""
        self.num_scheduled = 0
        """Steps scheduled for all members so far."""
        self.num_updated = 0
        """Steps whose output all members got so far."""
        self.sum_computed = 0
        """Sum of the members' true computed tokens."""
        self.joined: dict[Request, tuple[int, int, int, int, int]] = {}
        """Member -> (num_scheduled, num_updated, clock position) when it joined or was
        last synced, its phase and its join number; in running order (the join numbers'
        order)."""
        self.phases: list[dict[Request, None]] = [{} for _ in range(kv.block_size)]
        """Per phase p: members that take a new block in the step scheduled as number
        ``num_scheduled = p (mod block_size)``, in running order."""
        self.phase_sizes = [0] * kv.block_size
        """``len(phases[p])`` per phase."""
        self.finishes: list[tuple[int, int, Request]] = []
        """Heap of (num_updated at which it finishes, join order, member)."""
        self.retired: list[tuple[int, int, Request]] = []
        """Async scheduling: the finish entries of members whose last token is in flight
        (retired: their phase is -1), taken off the heap."""
        self._seq = 0

    def __len__(self) -> int:
        return len(self.joined)

    def __contains__(self, request: Request) -> bool:
        return request in self.joined

    @property
    def num_active(self) -> int:
        """Members a step schedules (all but the retired)."""
        return len(self.joined) - len(self.retired)

    # ------------------------------------------------------------ membership
    def join(self, request: Request) -> None:
        """``request`` (true counters, at the end of the running prefix) decodes from the
        set's next schedule on; it just got a token at the clock's last position (sync), or
        gets one alone from the step in flight, at the next position (async: its
        placeholder)."""
        computed = request.num_computed_tokens
        in_flight = request.num_output_placeholders  # (0 with sync scheduling)
        self.sum_computed += computed
        blocks = len(self.kv.req_to_blocks[request.request_id])
        # its blocks cover what it computed; it takes the next one when it computes past them
        first = self.num_scheduled  # (sync: == num_updated; async: its first update too)
        assert in_flight == 1 or self.num_updated == first, "a request joins between steps"
        phase = (first + blocks * self.block_size - computed) % self.block_size
        self._seq += 1
        self.joined[request] = (first, first, len(self.clock) - 1 + in_flight, phase,
                                self._seq)
        self.phases[phase][request] = None
        self.phase_sizes[phase] += 1
        left = (min(request.max_tokens, self.max_model_len - request.num_prompt_tokens)
                - request.num_output_tokens - in_flight)
        heappush(self.finishes, (first + left, self._seq, request))

    def sync(self, request: Request) -> None:
        """Bring a member's counters and token record up to date (it stays a member)."""
        scheduled, updated, position, phase, seq = self.joined[request]
        steps_scheduled = self.num_scheduled - scheduled if phase >= 0 else 0  # (retired: none)
        steps_updated = self.num_updated - updated  # (< 0: its first update is to come)
        if steps_scheduled:
            request.num_computed_tokens += steps_scheduled
            scheduled += steps_scheduled
            if self.async_scheduling:
                request.num_output_placeholders += steps_scheduled
        if steps_updated > 0:
            request.num_output_tokens += steps_updated
            if self.async_scheduling:
                request.num_output_placeholders -= steps_updated
            last = position + steps_updated
            if self.keep_token_times:
                request.token_times_s.extend(self.clock.between(position + 1, last + 1))
            else:
                request.token_run_last = last  # its run of consecutive tokens goes on
            position = last
            updated = self.num_updated
        self.joined[request] = (scheduled, updated, position, phase, seq)

    def leave(self, request: Request) -> None:
        """Sync ``request`` and take it out (its finish entry is dropped when popped)."""
        self.sync(request)
        phase = self.joined[request][3]
        del self.joined[request]
        if phase < 0:  # retired: out of the phases and the sum already
            self.retired = [entry for entry in self.retired if entry[2] is not request]
            return
        self.sum_computed -= request.num_computed_tokens
        del self.phases[phase][request]
        self.phase_sizes[phase] -= 1

    def dissolve(self) -> list[Request]:
        """Sync every member and empty the set. Returns those whose step in flight (async
        scheduling) has yet to give them its token, in running order (to read only:
        :data:`~clustersim.engine.step_plan.NOTHING` when none)."""
        pending: list[Request] = NOTHING
        for request in list(self.joined):
            self.sync(request)
            entry = self.joined[request]
            if entry[0] > entry[1]:  # (scheduled > updated)
                pending = listed(pending, request)
        self.joined.clear()
        for phase in self.phases:
            phase.clear()
        self.phase_sizes = [0] * self.block_size
        self.finishes.clear()
        self.retired = []
        self.sum_computed = 0
        return pending

    def retire_finishing(self) -> None:
        """Async scheduling, before a schedule: retire the members whose last token comes with
        the step in flight (it is the set's step ``num_scheduled - 1``), as vLLM's scheduler
        skips a request certain to finish on its placeholder (spec section 2). With sync
        scheduling there is none: every finish is applied before the next schedule."""
        finishes = self.finishes
        due = self.num_scheduled
        joined = self.joined
        while finishes and finishes[0][0] <= due:
            entry = heappop(finishes)
            request = entry[2]
            if request not in joined:
                continue  # left earlier
            self.sync(request)
            scheduled, updated, position, phase, seq = joined[request]
            joined[request] = (scheduled, updated, position, -1, seq)
            del self.phases[phase][request]
            self.phase_sizes[phase] -= 1
            self.sum_computed -= request.num_computed_tokens
            self.retired.append(entry)

    # ----------------------------------------------------------------- steps
    def takers(self, step: int) -> dict[Request, None]:
        """The members that take a block when step number ``step`` is scheduled."""
        return self.phases[step % self.block_size]

    def schedule(self, num_steps: int = 1) -> None:
        """Schedule ``num_steps`` steps for every member: each computes one token per step,
        and members crossing into a new block take one, in running order. The caller has
        checked that the free blocks cover them."""
        first = self.num_scheduled
        phases = self.phases
        block_size = self.block_size
        if num_steps == 1:  # the scheduler's one step
            due = phases[first % block_size]
            if due:
                self.kv.append_blocks(list(due))
            self.num_scheduled = first + 1
            self.sum_computed += len(self.joined) - len(self.retired)
            return
        sizes = self.phase_sizes  # most phases are empty: only those with takers are read
        takers: list[Request] = []
        if num_steps < block_size:
            for step in range(first, first + num_steps):
                if sizes[step % block_size]:
                    for request in phases[step % block_size]:
                        takers.append(request)
        else:  # whole cycles of block_size steps repeat the same order
            cycles = num_steps // block_size
            rest = num_steps - cycles * block_size
            for step in range(first, first + block_size):
                if sizes[step % block_size]:
                    for request in phases[step % block_size]:
                        takers.append(request)
            takers *= cycles
            for step in range(first, first + rest):
                if sizes[step % block_size]:
                    for request in phases[step % block_size]:
                        takers.append(request)
        if takers:
            self.kv.append_blocks(takers)
        self.num_scheduled = first + num_steps
        self.sum_computed += num_steps * (len(self.joined) - len(self.retired))

    def update(self, ends_s: list[float]) -> list[Request]:
        """Every member gets one token at the end of each step in ``ends_s`` (appended to the
        clock); returns the members that reach their last token (not yet removed)."""
        self.clock.extend(ends_s)
        self.num_updated += len(ends_s)
        return self.finishing()

    def update_one(self, end_s: float) -> list[Request]:
        """:meth:`update` with one step ending at ``end_s``."""
        self.clock.append(end_s)
        self.num_updated += 1
        return self.finishing()

    def finishing(self) -> list[Request]:
        """Members whose last token came with the latest update, in running order (to read
        only: :data:`~clustersim.engine.step_plan.NOTHING` when none)."""
        finishes = self.finishes
        joined = self.joined
        retired = self.retired
        if not retired and (not finishes or finishes[0][0] > self.num_updated):
            return NOTHING
        done: list[Request] = []
        if retired:
            kept: list[tuple[int, int, Request]] = []
            for entry in retired:
                if entry[0] <= self.num_updated:
                    assert entry[0] == self.num_updated, "a retired member finishes next"
                    done.append(entry[2])
                else:
                    kept.append(entry)
            self.retired = kept
        while finishes and finishes[0][0] <= self.num_updated:
            at, _, request = heappop(finishes)
            if request in joined:
                assert at == self.num_updated, "a member finishes in the step it reaches"
                done.append(request)
        if len(done) > 1:
            done.sort(key=lambda request: joined[request][4])
        return done

    def first_finish(self) -> int:
        """The ``num_updated`` at which the first member that is not retired finishes (a
        large number when none)."""
        finishes = self.finishes
        joined = self.joined
        while finishes and finishes[0][2] not in joined:
            heappop(finishes)  # left earlier
        return finishes[0][0] if finishes else 1 << 62
