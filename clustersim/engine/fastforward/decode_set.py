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
from clustersim.engine.step_plan import NOTHING

pack: Final = _struct_pack
heappop: Final = _heappop
heappush: Final = _heappush


def bulk_decodes_allowed(config: SchedulerConfig) -> bool:
    """Whether a scheduler with ``config`` may advance its decodes as a :class:`DecodeSet`
    (and so its engine take coalesced runs): sync scheduling, the FCFS policy and no
    speculative decoding (why: ``engine.fastforward``)."""
    return (not config.async_scheduling and config.policy == "fcfs"
            and config.speculative is None)


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
                 "num_scheduled", "num_updated", "sum_computed", "joined", "phases",
                 "phase_sizes", "finishes", "_seq")

    def __init__(self, kv: KVCacheManager, max_model_len: int, clock: StepClock,
                 keep_token_times: bool) -> None:
        self.kv = kv
        self.block_size = kv.block_size
        self.max_model_len = max_model_len
        self.clock = clock
        """The scheduler's token clock: one end time per step applied."""
        self.keep_token_times = keep_token_times
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
        self._seq = 0

    def __len__(self) -> int:
        return len(self.joined)

    def __contains__(self, request: Request) -> bool:
        return request in self.joined

    # ------------------------------------------------------------ membership
    def join(self, request: Request) -> None:
        """``request`` (true counters, at the end of the running prefix) decodes from the next
        step on; it just got a token at the clock's last position."""
        computed = request.num_computed_tokens
        self.sum_computed += computed
        blocks = len(self.kv.req_to_blocks[request.request_id])
        # its blocks cover what it computed; it takes the next one when it computes past them
        phase = (self.num_scheduled + blocks * self.block_size - computed) % self.block_size
        self._seq += 1
        self.joined[request] = (self.num_scheduled, self.num_updated, len(self.clock) - 1, phase,
                                self._seq)
        self.phases[phase][request] = None
        self.phase_sizes[phase] += 1
        left = (min(request.max_tokens, self.max_model_len - request.num_prompt_tokens)
                - request.num_output_tokens)
        heappush(self.finishes, (self.num_updated + left, self._seq, request))

    def sync(self, request: Request) -> None:
        """Bring a member's counters and token record up to date (it stays a member)."""
        scheduled, updated, position, phase, seq = self.joined[request]
        steps_scheduled = self.num_scheduled - scheduled
        steps_updated = self.num_updated - updated
        if steps_scheduled:
            request.num_computed_tokens += steps_scheduled
        if steps_updated:
            request.num_output_tokens += steps_updated
            last = position + steps_updated
            if self.keep_token_times:
                request.token_times_s.extend(self.clock.between(position + 1, last + 1))
            else:
                request.token_run_last = last  # its run of consecutive tokens goes on
        self.joined[request] = (self.num_scheduled, self.num_updated,
                                position + steps_updated, phase, seq)

    def leave(self, request: Request) -> None:
        """Sync ``request`` and take it out (its finish entry is dropped when popped)."""
        self.sync(request)
        phase = self.joined[request][3]
        del self.joined[request]
        self.sum_computed -= request.num_computed_tokens
        del self.phases[phase][request]
        self.phase_sizes[phase] -= 1

    def dissolve(self) -> None:
        """Sync every member and empty the set."""
        for request in list(self.joined):
            self.sync(request)
        self.joined.clear()
        for phase in self.phases:
            phase.clear()
        self.phase_sizes = [0] * self.block_size
        self.finishes.clear()
        self.sum_computed = 0

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
            self.sum_computed += len(self.joined)
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
        self.sum_computed += num_steps * len(self.joined)

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
        if not finishes or finishes[0][0] > self.num_updated:
            return NOTHING
        done: list[Request] = []
        while finishes and finishes[0][0] <= self.num_updated:
            at, _, request = heappop(finishes)
            if request in joined:
                assert at == self.num_updated, "a member finishes in the step it reaches"
                done.append(request)
        if len(done) > 1:
            done.sort(key=lambda request: joined[request][4])
        return done

    def next_finish(self) -> int:
        """Updates until the first member finishes (a large number when empty)."""
        finishes = self.finishes
        joined = self.joined
        while finishes and finishes[0][2] not in joined:
            heappop(finishes)  # left earlier
        return finishes[0][0] - self.num_updated if finishes else 1 << 62
