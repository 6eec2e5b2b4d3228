"""Coalesced decode steps, the pure part: when the next steps repeat a batch, and their effects.

After ``Scheduler.schedule()`` returns a plan in which every running request is scheduled and
samples a token (decodes, and prompts whose last chunk runs now), every later step is the
same batch decoding one token each, for as long as nothing can change it (the conditions:
``engine.fastforward``). :func:`plan_decode_run` proves that such a run has at least 2 steps
(or returns None) and plans its first ones, :func:`extend_run` plans more on demand,
:func:`advance_run` applies the effects of any prefix of its steps (what ``schedule()`` and
``update_from_output()`` would have done for each) and :func:`finish_run_step` its last one.
From step 1 on every running request is a member of the scheduler's :class:`DecodeSet`
(those that sample in step 0 join it then), so a step costs the same whatever the batch size.

Arrivals, finished KV pulls and freed producer blocks are not seen here: the engine ends the
run at the step in progress when one happens (``fastforward.engine``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from clustersim.engine.request import RequestStatus
from clustersim.engine.scheduler import Scheduler, StepPlan

BUDGET_FREE_STOPS: Final = frozenset({"seats", "remote_kv"})
"""Reasons admission stopped (``StepPlan.waiting_stopped_by``) that hold for a whole run."""
BUDGET_STOPS: Final = frozenset({"budget", "whole_prompt"})
"""Reasons that hold for a whole run if its steps leave the same budget as step 0."""


@dataclass(slots=True, eq=False, init=False)
class DecodeRun:
    """Steps ``0 .. num_steps - 1``: ``plan``, then the whole running batch decoding. More
    steps are planned on demand (:func:`extend_run`) up to ``horizon``."""

    plan: StepPlan
    batch_size: int
    """Requests decoding in each step from step 1 on (all running ones)."""
    decode_kv_tokens: int
    """Sum of their computed tokens after step 0's schedule: step ``m >= 1`` attends to
    ``decode_kv_tokens + m x batch_size`` tokens."""
    first_schedule: int
    """The decode set's schedule count of step 1 (step ``m`` is ``first_schedule + m - 1``)."""
    takers: list[int]
    """Per phase ``p < block_size``: requests taking a new block at the schedules numbered
    ``p (mod block_size)``."""
    finish_step: int
    """The first step in which a request finishes."""
    horizon: int
    """No step at or past this one is the same batch: ``finish_step + 1``, or earlier if the
    free blocks would not cover that step's allocations."""
    free_blocks: int
    """Free blocks left after the planned steps' allocations."""
    first_blocks_used: int
    """Blocks in use after step 0's schedule; step ``m``'s add the takers of steps
    ``1 .. m`` (:meth:`blocks_used`), counted, not listed: a run plans steps by the
    thousand."""
    num_planned: int = 1
    """Steps planned so far (step 0 included)."""
    blocks_taken: int = 0
    """Blocks the planned steps after step 0 take."""
    cycle_blocks: int = 0
    """Blocks a whole cycle of ``block_size`` steps takes (``sum(takers)``)."""
    num_scheduled: int = 1
    """Steps whose schedule is applied (step 0's by ``schedule()``)."""
    num_updated: int = 0
    """Steps whose output is applied."""

    def __init__(self, plan: StepPlan, batch_size: int, decode_kv_tokens: int,
                 first_schedule: int, takers: list[int], finish_step: int, horizon: int,
                 free_blocks: int, first_blocks_used: int) -> None:
        self.plan = plan
        self.batch_size = batch_size
        self.decode_kv_tokens = decode_kv_tokens
        self.first_schedule = first_schedule
        self.takers = takers
        self.finish_step = finish_step
        self.horizon = horizon
        self.free_blocks = free_blocks
        self.first_blocks_used = first_blocks_used
        self.num_planned = 1
        self.blocks_taken = 0
        cycle_blocks = 0
        for taken in takers:
            cycle_blocks += taken
        self.cycle_blocks = cycle_blocks
        self.num_scheduled = 1
        self.num_updated = 0

    @property
    def num_steps(self) -> int:
        """Steps planned so far."""
        return self.num_planned

    def phase(self, step: int) -> int:
        """Step ``step``'s (>= 1) index into :attr:`takers`."""
        return (self.first_schedule - 1 + step) % len(self.takers)

    def blocks_used(self, step: int) -> int:
        """Blocks in use after step ``step``'s schedule: step 0's, plus what steps
        ``1 .. step`` take (whole cycles of the takers, then the part of one)."""
        takers = self.takers
        block_size = len(takers)
        cycles = step // block_size
        rest = step - cycles * block_size
        taken = self.cycle_blocks * cycles if cycles else 0
        phase = self.phase(1)
        for _step in range(rest):
            taken += takers[phase]
            phase += 1
            if phase == block_size:
                phase = 0
        return self.first_blocks_used + taken


def plan_decode_run(scheduler: Scheduler, plan: StepPlan, num_steps: int) -> DecodeRun | None:
    """The run that starts with ``plan`` (just scheduled), its first ``num_steps`` (>= 2)
    steps planned, or fewer if it is shorter; None if the step after ``plan`` is not
    provably its batch decoding."""
    config = scheduler.config
    members = scheduler.decoding
    running = scheduler.running
    batch_size = len(running)
    if (members is None or plan.preempted or not batch_size
            or plan.num_seqs != batch_size or plan.num_sampled != batch_size
            or not _admission_stays_shut(scheduler, plan, batch_size)):
        return None
    # every running request is scheduled (each once) and samples: members stay, the others
    # (listed in the plan) join the set after step 0 and all decode from step 1 on
    kv = scheduler.kv
    block_size = kv.block_size
    first_schedule = members.num_scheduled
    takers = list(members.phase_sizes)
    finish_step = members.next_finish() - 1
    decode_kv = members.sum_computed
    max_model_len = config.max_model_len
    req_to_blocks = kv.req_to_blocks
    for i in range(len(members), batch_size):
        request = running[i]
        if kv.has_uncached_blocks(request):
            return None
        left = (min(request.max_tokens, max_model_len - request.num_prompt_tokens)
                - request.num_output_tokens)
        if left - 1 < finish_step:
            if left - 1 < 1:
                return None  # it finishes in step 0 (a prefill instance's every prompt)
            finish_step = left - 1
        computed = request.num_computed_tokens
        decode_kv += computed
        blocks = len(req_to_blocks[request.request_id])
        takers[(first_schedule + blocks * block_size - computed) % block_size] += 1
    if finish_step < 1:
        return None  # somebody finishes in step 0
    run = DecodeRun(plan, batch_size, decode_kv, first_schedule, takers, finish_step,
                    finish_step + 1, kv.num_free_blocks, plan.kv_blocks_used)
    extend_run(run, num_steps - 1)
    return run if run.num_steps >= 2 else None


def extend_run(run: DecodeRun, num_steps: int) -> int:
    """Plan up to ``num_steps`` more steps; how many were added (0: the run is complete)."""
    step = run.num_planned
    count = min(run.horizon, step + num_steps) - step
    if count <= 0:
        return 0
    takers = run.takers
    block_size = len(takers)
    phase = run.phase(step)
    free = run.free_blocks
    # what all ``count`` steps take: whole cycles of the takers, then the part of one
    cycles = count // block_size
    rest = count - cycles * block_size
    taken = run.cycle_blocks * cycles if cycles else 0
    at = phase
    for _step in range(rest):
        taken += takers[at]
        at += 1
        if at == block_size:
            at = 0
    if taken <= free:  # they all fit (the usual case): no step-by-step check
        run.free_blocks = free - taken
        run.blocks_taken += taken
        run.num_planned = step + count
        return count
    taken = 0
    fits = 0
    while fits < count:
        need = takers[phase]
        if taken + need > free:
            run.horizon = step + fits  # that step's allocation could fail: the run ends before it
            break
        taken += need
        fits += 1
        phase += 1
        if phase == block_size:
            phase = 0
    run.free_blocks = free - taken
    run.blocks_taken += taken
    run.num_planned = step + fits
    return fits


def shrink_run(run: DecodeRun, num_steps: int) -> None:
    """Plan only the first ``num_steps`` steps (giving back the later ones' blocks)."""
    if run.num_planned > num_steps:
        kept = run.blocks_used(num_steps - 1) - run.first_blocks_used
        run.free_blocks += run.blocks_taken - kept
        run.blocks_taken = kept
        run.num_planned = num_steps


def _admission_stays_shut(scheduler: Scheduler, plan: StepPlan, batch_size: int) -> bool:
    reason = plan.waiting_stopped_by
    if reason is None or reason in BUDGET_FREE_STOPS:
        return True  # None: nothing was left to admit (a pull in flight ends the run when done)
    if reason in BUDGET_STOPS:
        return plan.num_scheduled_tokens == batch_size  # later steps leave the same budget
    if reason == "kv":  # a bigger budget only asks for more blocks
        head = plan.waiting_head
        return (scheduler.config.scheduler_reserve_full_isl or head is None
                or head.num_computed_tokens > 0 or not scheduler.kv.shares_blocks(head))
    return False


def advance_run(scheduler: Scheduler, run: DecodeRun, num_scheduled: int, num_updated: int,
                ends_s: list[float]) -> None:
    """Apply the schedules of steps ``run.num_scheduled .. num_scheduled - 1`` and the outputs
    of steps ``run.num_updated .. num_updated - 1`` (ending at ``ends_s[m]``), as the step
    loop would have. Step 0's output is ``update_from_output`` of its plan (the batch joins
    the decode set then); the later steps are the set's, in bulk. No output here finishes a
    request."""
    members = scheduler.decoding
    assert members is not None
    if run.num_updated == 0 and (num_updated > 0 or num_scheduled > 1):
        finished = scheduler.update_from_output(run.plan, ends_s[0])
        assert not finished and len(members) == run.batch_size, "step 0 of a run"
        run.num_updated = 1
    if num_scheduled > run.num_scheduled:
        members.schedule(num_scheduled - run.num_scheduled)
        run.num_scheduled = num_scheduled
    if num_updated > run.num_updated:
        finished = members.update(ends_s[run.num_updated:num_updated])
        assert not finished, "a run's steps before its last finish nobody"
        run.num_updated = num_updated


def finish_run_step(scheduler: Scheduler, run: DecodeRun, ends_s: list[float]) -> list:
    """Apply the output of the run's last reached step ``run.num_updated`` (>= 1; its
    schedule is applied): what ``update_from_output`` would do. Returns the requests that
    finish, in running order."""
    step = run.num_updated
    members = scheduler.decoding
    assert members is not None and step >= 1 and run.num_scheduled == step + 1
    finished = members.update_one(ends_s[step])
    run.num_updated = step + 1
    if finished:
        assert step == run.finish_step
        kv = scheduler.kv
        running = scheduler.running
        now_s = ends_s[step]
        for request in finished:  # in running order, as update_from_output frees them
            members.leave(request)
            request.status = RequestStatus.FINISHED
            request.finish_s = now_s
            kv.free(request)  # a run holds no KV producer: it would finish in step 0
            running.remove(request)
    return finished
