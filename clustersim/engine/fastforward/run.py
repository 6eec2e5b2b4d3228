"""Coalesced decode steps, the pure part: when the next steps repeat a batch, and their effects.

After ``Scheduler.schedule()`` returns a plan in which every running request is scheduled and
samples a token (decodes, and prompts whose last chunk runs now), every later step is the
same batch decoding one token each, for as long as nothing can change it (the conditions:
``engine.fastforward``). :func:`plan_decode_run` proves that such a run has at least one such
step (or returns None) and plans its first ones, :func:`extend_run` plans more on demand,
:func:`advance_run` applies the effects of any prefix of its steps (what ``schedule()`` and
``update_from_output()`` would have done for each) and :func:`finish_run_step` its last one.
After that plan every running request is a member of the scheduler's :class:`DecodeSet`
(those that sample in it join the set), so a step costs the same whatever the batch size.

A run's first steps are the plans the step loop has scheduled already, its *head*: with sync
scheduling step 0 (the plan), with async scheduling steps 0 and 1 (the step starting now,
and the plan just scheduled while it runs: spec section 2), and the set's steps follow. An
async run is applied in the async loop's order (:func:`advance_async_run`): the output of
step ``m`` after the schedule of step ``m + 1``, the plans of its last step and of the one
after it scheduled for real, as the loop would have scheduled them.

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
    """Steps ``0 .. num_steps - 1``: the ``head`` plans (``plan`` the last of them), then the
    whole running batch decoding. More steps are planned on demand (:func:`extend_run`) up to
    ``horizon``."""

    plan: StepPlan
    """The last plan of the head (scheduled just now)."""
    head: int
    """Steps scheduled before the run: 1 (sync scheduling) or 2 (async: step 0 and ``plan``)."""
    head_plans: tuple[StepPlan, ...]
    """Their plans, in step order."""
    batch_size: int
    """Requests decoding in each step from step ``head`` on (all running ones)."""
    decode_kv_tokens: int
    """Sum of their computed tokens after ``plan``'s schedule: step ``m >= head`` attends to
    ``decode_kv_tokens + (m - head + 1) x batch_size`` tokens (:meth:`kv_tokens`)."""
    first_schedule: int
    """The decode set's schedule count of step ``head`` (step ``m`` is ``first_schedule + m -
    head``)."""
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
    """Blocks in use after ``plan``'s schedule; step ``m``'s add the takers of steps
    ``head .. m`` (:meth:`blocks_used`), counted, not listed: a run plans steps by the
    thousand."""
    num_planned: int = 1
    """Steps planned so far (the head included)."""
    blocks_taken: int = 0
    """Blocks the planned steps after the head take."""
    cycle_blocks: int = 0
    """Blocks a whole cycle of ``block_size`` steps takes (``sum(takers)``)."""
    num_scheduled: int = 1
    """Steps whose schedule is applied (the head's by ``schedule()``)."""
    num_updated: int = 0
    """Steps whose output is applied."""
    last_plans: tuple[StepPlan, StepPlan] | None = None
    """Async scheduling: the plans of the run's last step and of the one after it, once
    scheduled (:func:`advance_async_run`)."""

    def __init__(self, plan: StepPlan, batch_size: int, decode_kv_tokens: int,
                 first_schedule: int, takers: list[int], finish_step: int, horizon: int,
                 free_blocks: int, first_blocks_used: int, head: int = 1) -> None:
        self.plan = plan
        self.head = head
        self.head_plans = (plan,)
        self.batch_size = batch_size
        self.decode_kv_tokens = decode_kv_tokens
        self.first_schedule = first_schedule
        self.takers = takers
        self.finish_step = finish_step
        self.horizon = horizon
        self.free_blocks = free_blocks
        self.first_blocks_used = first_blocks_used
        self.num_planned = head
        self.blocks_taken = 0
        cycle_blocks = 0
        for taken in takers:
            cycle_blocks += taken
        self.cycle_blocks = cycle_blocks
        self.num_scheduled = head
        self.num_updated = 0
        self.last_plans = None

    @property
    def num_steps(self) -> int:
        """Steps planned so far."""
        return self.num_planned

    def phase(self, step: int) -> int:
        """Step ``step``'s (>= ``head``) index into :attr:`takers`."""
        return (self.first_schedule - self.head + step) % len(self.takers)

    def kv_tokens(self, step: int) -> int:
        """Tokens the decodes of step ``step`` (>= ``head``) attend to."""
        return self.decode_kv_tokens + (step - self.head + 1) * self.batch_size

    def blocks_used(self, step: int) -> int:
        """Blocks in use after step ``step``'s schedule: ``plan``'s, plus what steps
        ``head .. step`` take (whole cycles of the takers, then the part of one)."""
        takers = self.takers
        block_size = len(takers)
        num_steps = step - self.head + 1
        cycles = num_steps // block_size
        rest = num_steps - cycles * block_size
        taken = self.cycle_blocks * cycles if cycles else 0
        phase = self.phase(self.head)
        for _step in range(rest):
            taken += takers[phase]
            phase += 1
            if phase == block_size:
                phase = 0
        return self.first_blocks_used + taken


def plan_decode_run(scheduler: Scheduler, plan: StepPlan, num_steps: int,
                    head: int = 1) -> DecodeRun | None:
    """The run whose head of ``head`` steps ends with ``plan`` (just scheduled), its first
    ``num_steps`` (> ``head``) steps planned, or fewer if it is shorter; None if the step
    after ``plan`` is not provably its batch decoding."""
    config = scheduler.config
    members = scheduler.decoding
    running = scheduler.running
    batch_size = len(running)
    if (members is None or plan.preempted or not batch_size
            or plan.num_seqs != batch_size or plan.num_sampled != batch_size
            or not _admission_stays_shut(scheduler, plan, batch_size)):
        return None
    if head == 2 and batch_size > config.decode_cap:
        return None  # the plans an async run schedules for real must schedule the set in bulk
    offload = scheduler.offload
    if offload is not None and (plan.cpu_stores or plan.cpu_loads or len(scheduler.waiting)):
        return None  # CPU tier: copies to issue, or a waiting request it may let in
    # every running request is scheduled (each once) and samples: members stay (none is
    # retired: each got its step), the others (listed in the plan) join the set with the
    # output of the step before ``plan`` and all decode from step ``head`` on
    kv = scheduler.kv
    block_size = kv.block_size
    first_schedule = members.num_scheduled
    takers = list(members.phase_sizes)
    # a member's last token comes with the set's step ``first_finish - 1``
    finish_step = members.first_finish() - 1 - first_schedule + head
    decode_kv = members.sum_computed
    max_model_len = config.max_model_len
    async_scheduling = config.async_scheduling
    req_to_blocks = kv.req_to_blocks
    for i in range(len(members), batch_size):
        request = running[i]
        if kv.has_uncached_blocks(request) or (
                offload is not None and scheduler.stores_pending(request)):
            return None
        # its tokens after the head's (sync: the one of ``plan``; async: its placeholders,
        # that one included), one a step from step ``head`` on
        left = (min(request.max_tokens, max_model_len - request.num_prompt_tokens)
                - request.num_output_tokens
                - (request.num_output_placeholders if async_scheduling else 1))
        if left - 1 + head < finish_step:
            if left < 1:
                return None  # it finishes in the head (a prefill instance's every prompt)
            finish_step = left - 1 + head
        computed = request.num_computed_tokens
        decode_kv += computed
        blocks = len(req_to_blocks[request.request_id])
        takers[(first_schedule + blocks * block_size - computed) % block_size] += 1
    if finish_step < head:
        return None  # somebody finishes in the head
    run = DecodeRun(plan, batch_size, decode_kv, first_schedule, takers, finish_step,
                    finish_step + 1, kv.num_free_blocks, plan.kv_blocks_used, head)
    extend_run(run, num_steps - head)
    return run if run.num_steps > head else None


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


def advance_async_run(scheduler: Scheduler, run: DecodeRun, step: int,
                      ends_s: list[float]) -> tuple[StepPlan, StepPlan]:
    """Async scheduling: bring the scheduler to where the step loop is while step ``step``
    runs (the outputs of the steps before it applied, the schedules up to the step after it)
    and return the plans of ``step`` and of the step after it. Applied in the loop's order,
    the output of step ``m`` (ending at ``ends_s[m]``) after the schedule of step ``m + 1``:
    the head's plans' outputs by ``update_from_output`` (the rest of the batch joins the set
    with step 0's), the set's steps in bulk, and the plans of ``step`` (one of the set's) and
    of the step after it scheduled for real, as the loop scheduled them. No output here
    finishes a request."""
    if run.last_plans is not None:
        return run.last_plans  # (a second change during the same step)
    first, second = run.head_plans
    if step == 0:
        run.last_plans = (first, second)
        return run.last_plans
    members = scheduler.decoding
    assert members is not None
    if run.num_updated == 0:
        finished = scheduler.update_from_output(first, ends_s[0])
        assert not finished and len(members) == run.batch_size, "step 0 of a run"
        run.num_updated = 1
    if step == 1:
        run.last_plans = (second, scheduler.schedule())
        run.num_scheduled = 3
        return run.last_plans
    # (a schedule and an update of the set's steps touch different counters: they commute)
    if step > run.num_scheduled:  # steps 2 .. step - 1
        members.schedule(step - run.num_scheduled)
        run.num_scheduled = step
    if run.num_updated == 1:
        finished = scheduler.update_from_output(second, ends_s[1])
        assert not finished, "step 1 of a run"
        run.num_updated = 2
    if step - 1 > run.num_updated:  # steps 2 .. step - 2
        finished = members.update(ends_s[run.num_updated:step - 1])
        assert not finished, "a run's steps before its last finish nobody"
        run.num_updated = step - 1
    current = scheduler.schedule()
    assert (current.num_bulk == run.batch_size and not current.scheduled
            and not current.preempted), "a run's step"
    if step - 1 >= 2:
        finished = members.update_one(ends_s[step - 1])
        assert not finished, "a run's steps before its last finish nobody"
    run.num_updated = step
    run.last_plans = (current, scheduler.schedule())
    run.num_scheduled = step + 2
    return run.last_plans
