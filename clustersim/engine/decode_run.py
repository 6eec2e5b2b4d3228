"""Coalesced decode steps, the pure part: when the next steps repeat a batch, and their effects.

After ``Scheduler.schedule()`` returns a plan in which every running request is scheduled and
samples a token (decodes, and prompts whose last chunk runs now), every later step is the
same batch decoding one token each, for as long as nothing can change it.
:func:`plan_decode_run` proves that such a run has at least 2 steps (or returns None) and
plans its first ones, :func:`extend_run` plans more on demand, :func:`advance_run` applies
the effects of any prefix of its steps (what ``schedule()`` and ``update_from_output()``
would have done for each), :func:`finish_run_step` applies its last step, and
:func:`run_step_plan` gives the :class:`StepPlan` of one of its steps.

A run lasts while, for step ``m = 1, 2, ...`` (vllm_scheduler_spec.md section numbers):

* no request finishes before its last step: ``max_tokens`` and ``max_model_len`` are known
  (2, "Output semantics"); the run may end on the step where the first one finishes, and
  nobody finishes in step 0;
* every decode that crosses into a new block gets one (4.2): a request takes a block every
  ``block_size`` steps, at a fixed phase, and the run stops before the step whose blocks the
  free pool could not cover, so no allocation fails and nobody is preempted (3.3);
* no waiting request can be admitted (3.4). What stopped admission in step 0 stops it at
  every later step: seats do not change, the KV a waiting request needs only grows as decodes
  take free blocks, and the token budget left after the decodes is the same as step 0's when
  step 0 scheduled one token per request (otherwise a run is only taken if admission stopped
  for a reason the budget does not enter). The one exception is a request with prefix hits
  when the full-prompt reservation is off (its chunk can need fewer blocks after a hit block
  is evicted): no run then;
* no block is newly cached: a request that still has prompt hashes to register (hashes past
  its prompt's full blocks) stops coalescing;
* sync scheduling only (async schedules step N+1 before N's output: not coalesced here).

Arrivals, finished KV pulls and freed producer blocks are not seen here: the instance ends
the run at the step in progress when one happens (``engine.instance``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from clustersim.engine.request import Request, RequestStatus
from clustersim.engine.scheduler import Scheduler, StepPlan

BUDGET_FREE_STOPS = frozenset({"seats", "remote_kv"})
"""Reasons admission stopped (``StepPlan.waiting_stopped_by``) that hold for a whole run."""
BUDGET_STOPS = frozenset({"budget", "whole_prompt"})
"""Reasons that hold for a whole run if its steps leave the same budget as step 0."""


@dataclass(slots=True, eq=False)
class DecodeRun:
    """Steps ``0 .. num_steps - 1``: ``plan``, then the same batch decoding. More steps are
    planned on demand (:func:`extend_run`) up to ``horizon``."""

    plan: StepPlan
    batch: list[Request]
    """The running requests, in running order (the order blocks are allocated in)."""
    decode_kv_tokens: int
    """Sum of the batch's computed tokens after step 0's schedule: step ``m >= 1`` attends
    to ``decode_kv_tokens + m x len(batch)`` tokens."""
    growing: list[list[Request]]
    """Per phase ``p < block_size``: the requests that take a new block at each step
    ``m = p (mod block_size)``, in running order."""
    horizon: int
    """No step at or past this one is the same batch (a request finishes in the one before,
    or the free blocks would not cover this step's allocations)."""
    free_blocks: int
    """Free blocks left after the planned steps' allocations."""
    kv_blocks_used: list[int]
    """Blocks in use after each planned step's schedule."""
    num_scheduled: int = 1
    """Steps whose schedule is applied (step 0's by ``schedule()``)."""
    num_updated: int = 0
    """Steps whose output is applied."""

    @property
    def num_steps(self) -> int:
        """Steps planned so far."""
        return len(self.kv_blocks_used)


def plan_decode_run(scheduler: Scheduler, plan: StepPlan, num_steps: int) -> DecodeRun | None:
    """The run that starts with ``plan`` (just scheduled), its first ``num_steps`` (>= 2)
    steps planned, or fewer if it is shorter; None if the step after ``plan`` is not
    provably its batch decoding."""
    config = scheduler.config
    running = scheduler.running
    batch_size = len(running)
    if (config.async_scheduling or plan.preempted or not batch_size
            or len(plan.scheduled) != batch_size or len(plan.sampled) != batch_size
            or not _admission_stays_shut(scheduler, plan, batch_size)):
        return None
    kv = scheduler.kv
    block_size = kv.block_size
    max_model_len = config.max_model_len
    req_to_blocks = kv.req_to_blocks
    growing: list[list[Request]] = [[] for _ in range(block_size)]
    horizon = 1 << 62
    decode_kv = 0
    # every running request is scheduled (each once) and samples: all decode from step 1
    for request in running:
        if kv.has_uncached_blocks(request):
            return None
        left = (min(request.max_tokens, max_model_len - request.num_prompt_tokens)
                - request.num_output_tokens)
        if left < horizon:
            horizon = left
        computed = request.num_computed_tokens
        decode_kv += computed
        # its blocks cover the tokens computed so far; it takes the next one at this step
        first = len(req_to_blocks[request.request_id]) * block_size - computed + 1
        growing[first % block_size].append(request)
    if horizon < 2:
        return None  # somebody finishes in step 0
    run = DecodeRun(plan, list(running), decode_kv, growing, horizon, kv.num_free_blocks,
                    [plan.kv_blocks_used])
    extend_run(run, num_steps - 1)
    return run if run.num_steps >= 2 else None


def extend_run(run: DecodeRun, num_steps: int) -> int:
    """Plan up to ``num_steps`` more steps; how many were added (0: the run is complete)."""
    used = run.kv_blocks_used
    step = before = len(used)
    stop = min(run.horizon, step + num_steps)
    growing = run.growing
    block_size = len(growing)
    free = run.free_blocks
    blocks = used[-1]
    while step < stop:
        need = len(growing[step % block_size])
        if need > free:
            run.horizon = step  # this step's allocation could fail: the run ends before it
            break
        free -= need
        blocks += need
        used.append(blocks)
        step += 1
    run.free_blocks = free
    return step - before


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
                ends_s: Sequence[float]) -> None:
    """Apply the schedules of steps ``run.num_scheduled .. num_scheduled - 1`` and the outputs
    of steps ``run.num_updated .. num_updated - 1`` (ending at ``ends_s[m]``), as the step
    loop would have: a schedule advances every request one token and gives a block to those
    crossing into a new one, in running order; an output adds one token to each (step 0's
    is ``update_from_output`` of its plan). No output here finishes a request."""
    batch = run.batch
    first = run.num_scheduled
    if num_scheduled > first:
        n = num_scheduled - first
        for request in batch:
            request.num_computed_tokens += n
        growing = run.growing
        block_size = len(growing)
        takers: list[Request] = []
        for m in range(first, num_scheduled):
            takers += growing[m % block_size]
        if takers:
            scheduler.kv.append_blocks(takers)
        run.num_scheduled = num_scheduled
    first = run.num_updated
    if num_updated > first and first == 0:
        finished = scheduler.update_from_output(run.plan, ends_s[0])
        assert not finished, "a run's step 0 finishes nobody"
        first = run.num_updated = 1
    if num_updated > first:
        n = num_updated - first
        times = ends_s[first:num_updated]
        clock = scheduler.token_clock
        if clock is None:
            for request in batch:
                request.num_output_tokens += n
                request.token_times_s.extend(times)
        else:
            start = len(clock)
            clock.extend(times)
            last = start + n - 1
            for request in batch:
                request.num_output_tokens += n
                if request.token_run_last == start - 1:  # it sampled in the step before
                    request.token_run_last = last
                else:
                    request.note_tokens(clock, start, last)
        run.num_updated = num_updated


def finish_run_step(scheduler: Scheduler, run: DecodeRun, ends_s: Sequence[float]) -> list[Request]:
    """Apply the output of the run's last planned-and-reached step ``run.num_updated``
    (>= 1; its schedule is applied): ``update_from_output`` of its plan, without the plan.
    Returns the requests that finish."""
    step = run.num_updated
    assert step >= 1 and run.num_scheduled == step + 1
    advance_run(scheduler, run, step + 1, step + 1, ends_s)
    max_model_len = scheduler.config.max_model_len
    now_s = ends_s[step]
    finished = [r for r in run.batch
                if r.num_output_tokens >= r.max_tokens
                or r.num_prompt_tokens + r.num_output_tokens >= max_model_len]
    if finished:
        kv = scheduler.kv
        for request in finished:  # in running order, as update_from_output frees them
            request.status = RequestStatus.FINISHED
            request.finish_s = now_s
            kv.free(request)  # a run holds no KV producer: it would finish in step 0
        done = {id(r) for r in finished}
        scheduler.running = [r for r in scheduler.running if id(r) not in done]
    return finished


def run_step_plan(run: DecodeRun, step: int) -> StepPlan:
    """The plan ``schedule()`` would have returned for step ``step`` of the run."""
    if step == 0:
        return run.plan
    first = run.plan
    batch = run.batch
    n = len(batch)
    return StepPlan(
        scheduled=[(request, 1) for request in batch],
        sampled=list(batch),
        num_scheduled_tokens=n,
        num_decode_tokens=n,
        decode_kv_tokens=run.decode_kv_tokens + step * n,
        num_running=first.num_running,
        num_waiting=first.num_waiting,
        kv_blocks_used=run.kv_blocks_used[step],
    )
