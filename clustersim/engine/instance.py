"""One engine instance on the SimPy clock: schedule, price, wait, apply.

The step loop only waits; every decision is made by the :class:`Scheduler` (pure state
transitions) and every duration by the step-cost function it is given. It is a chain of event
callbacks rather than a SimPy process (no generator to resume, no process events), each
called where the process would have resumed, so that the events keep SimPy's order.

With ``coalesce``, a step whose plan starts a run of identical decode steps waits once for
the whole run instead of once per step: the loop hands the plan to its
:class:`~clustersim.engine.fastforward.engine.FastForward` (with async scheduling, the plan
of the step starting and the one scheduled while it runs), which says whether and until when,
and applies the run at its end; anything from outside that changes the engine's state first
settles the run in progress. When a run is exact, and why it steps everywhere else:
``engine.fastforward``.

With pipeline parallelism (``pipeline``, ``engine.pipeline``) the loop keeps up to P batches
in flight, as vLLM V1's batch queue: it schedules again at once while there is room and waits
for the oldest batch to leave the last stage when the queue is full or nothing new can be
scheduled; the stages' timing is the pipeline's (pure), the waiting is here. It never
coalesces.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from clustersim.engine.events import URGENT, Alarm, Env, Signal, Waitable, alarm, now_of
from clustersim.engine.fastforward.engine import FastForward, may_coalesce
from clustersim.engine.offload import CpuKVTier, HostLink
from clustersim.engine.pipeline import Pipeline
from clustersim.engine.request import Request, RequestStatus
from clustersim.engine.scheduler import Scheduler, StepPlan
from clustersim.engine.step_plan import RooflinePricer
from clustersim.engine.steplog import StepLog, StepRecord

__all__ = ["MAX_STALLED_PREEMPTIONS", "POLL", "RETRY", "SLEEP", "Instance", "StepRecord"]

RETRY: Final = 0
POLL: Final = 1
SLEEP: Final = 2
"""What an engine does when a step scheduled nothing to run (``Instance.nothing_to_run``)."""

MAX_STALLED_PREEMPTIONS: Final = 64
"""A request preempted this many times in a row without getting further than before is
thrashing: requests that do not fit the KV cache together keep preempting each other and, as in
vLLM, none would ever finish. The simulation gives it up (rejected with the reason), as a
client's timeout would."""


class Instance:
    """A vLLM V1 engine: its step loop runs whenever it has unfinished requests."""

    def __init__(
        self,
        env: Env,
        name: str,
        scheduler: Scheduler,
        price_step: Callable[[StepPlan], float],
        on_done: Callable[[Request], None] | None = None,
        start_kv_load: Callable[[Request, int], Waitable] | None = None,
        poll_interval_s: float = 1e-3,
        run: bool = True,
        record_steps: bool = True,
        coalesce: bool = False,
        pipeline: Pipeline | None = None,
        host_link: HostLink | None = None,
    ) -> None:
        """``run=False``: no step loop of its own; a :class:`DataParallelGroup` steps it.
        ``record_steps=False``: keep only the step totals, not every step. ``coalesce``:
        wait once for a run of identical decode steps where ``may_coalesce``
        (``engine.fastforward``). ``pipeline``: pipeline parallelism, up to its depth of
        batches in flight (never coalesced; see ``_next_step``). ``host_link``: the copies
        to and from the scheduler's CPU tier (``engine.offload``)."""
        self.env = env
        self.name = name
        self.scheduler = scheduler
        self.price_step = price_step
        self.on_done = on_done
        """Called with every request that finishes or is rejected here."""
        self.start_kv_load = start_kv_load
        """Starts pulling a request's KV (request, blocks); the event fires when it is resident."""
        self.poll_interval_s = poll_interval_s
        """How soon an engine with nothing to run notices a finished pull (no-forward steps)."""
        self.gpus: tuple[str, ...] = ()
        """The GPUs of this instance's tensor-parallel group (set by the cluster)."""
        self.log = StepLog(name, record_steps)
        self.rejected: list[Request] = []
        self._wakeup: Signal | None = None
        self.waker: Callable[[], None] | None = None
        """Replaces waking this instance's own loop (a group that steps it)."""
        self._roofline = price_step if isinstance(price_step, RooflinePricer) else None
        """The pricer, if it is the roofline one: called natively (no boxed arguments)."""
        self.pipeline = pipeline
        """Pipeline parallelism's stages (None: one batch at a time)."""
        self.host_link = host_link
        """Loads from and stores to the CPU tier (None: the engine has none)."""
        self._in_flight: list[tuple[StepPlan, float, float]] = []
        """Pipeline parallelism: the batches in flight, oldest first (plan, entry, exit)."""
        self._landed_s = 0.0
        """When the last batch left the pipeline (its trace row ends there)."""
        self.coalesce = coalesce and may_coalesce(env, scheduler, price_step, pipeline, run)
        self.fastforward = FastForward(env, self.log, price_step, self.apply,
                                       self.record_dummy_step)
        """Its coalesced runs: its own (``coalesce``), or its lockstep group's."""
        self.failed = False
        """Dead (a fault): it takes no requests until it is restarted."""
        self.runs_own_loop = run
        """False: a lockstep group steps it."""
        self._awaited: Waitable | None = None
        """What the step loop waits on now (its one callback is the loop's next move)."""
        self._plan: StepPlan | None = None
        self._plan_start_s = 0.0
        self._next: StepPlan | None = None
        """The step in progress (its start), and with async scheduling the one after it."""
        # the loop's callbacks, bound once
        self._on_resume = self._resume
        self._on_stepped = self._stepped
        self._on_run_ended = self._run_ended
        self._on_async_run_ended = self._async_run_ended
        self._on_landed = self._landed
        if run:
            self._start_loop()

    # ----------------------------------------------------------------- intake
    def refusal(self, request: Request) -> str | None:
        """Why vLLM's input processor would answer 400 to this request, or None."""
        max_model_len = self.scheduler.config.max_model_len
        if request.num_prompt_tokens >= max_model_len:
            return (f"prompt of {request.num_prompt_tokens} tokens leaves no room for output "
                    f"within max_model_len {max_model_len}")
        if request.num_prompt_tokens + request.max_tokens > max_model_len:
            return (f"prompt {request.num_prompt_tokens} + output {request.max_tokens} tokens "
                    f"exceed max_model_len {max_model_len}")
        return None

    def submit(self, request: Request) -> None:
        """A request reaches the engine now (front-end checks as vLLM's input processor)."""
        if self.failed:
            raise AssertionError(f"{request.request_id} sent to {self.name}, which is down")
        reason = self.refusal(request)
        if reason is not None:
            self.reject(request, reason)
            return
        if self.fastforward.run is not None:
            self.fastforward.settle(self.scheduler, apply=False)
        self.scheduler.add_request(request)
        self._wake()

    def release_kv(self, request: Request) -> None:
        """A decode instance finished reading this producer request's blocks: free them."""
        if self.failed:
            return  # they went with the engine
        if self.fastforward.run is not None:
            self.fastforward.settle(self.scheduler)
        self.scheduler.release_kv(request)
        self._wake()

    def abort(self, request: Request, reason: str) -> None:
        """Drop a request that is queued here (its other half failed elsewhere)."""
        if self.fastforward.run is not None:
            self.fastforward.settle(self.scheduler)
        self.scheduler.remove(request)
        self.reject(request, reason)
        self._wake()

    def remove(self, request: Request) -> None:
        """Take a request out without an answer: the cluster tells its client (a failure
        elsewhere lost it)."""
        if self.fastforward.run is not None:
            self.fastforward.settle(self.scheduler)
        self.scheduler.remove(request)
        self._wake()

    def recompute_remote_load(self, request: Request) -> None:
        """Reading the request's prompt KV failed: prefill it here instead."""
        if self.fastforward.run is not None:
            self.fastforward.settle(self.scheduler)
        self.scheduler.recompute_remote_load(request)
        self._wake()

    # ----------------------------------------------------------------- faults
    def fail(self) -> list[Request]:
        """The engine dies now (vLLM's EngineDeadError): the step in progress never ends,
        the steps before it stay in the trace, and every request it held is returned, lost
        with its KV. The engine does nothing more until :meth:`restart`."""
        looping = self.runs_own_loop and not self.failed  # its own step loop is on
        if self.fastforward.run is not None:
            self.fastforward.abandon(self.scheduler, release=looping)
        if looping:  # the step in progress never ends: nothing waits for it
            awaited = self._awaited
            if isinstance(awaited, Alarm):
                awaited.call = None  # (its one callback, when it has one)
            if awaited is not None and awaited.callbacks:
                awaited.callbacks.clear()
            self._awaited = self._plan = self._next = None
        self._in_flight = []  # batches in the pipeline never come out
        self.failed = True
        return self.scheduler.drain()

    def restart(self, scheduler: Scheduler) -> None:
        """The engine is back, empty: a fresh scheduler and KV cache, its step loop anew (a
        lockstep group restarts its own)."""
        self.scheduler = scheduler
        self.failed = False
        self._wakeup = None
        if self.pipeline is not None:
            self.pipeline.reset()
        if self.runs_own_loop:
            self._start_loop()

    def reject(self, request: Request, reason: str) -> None:
        request.status = RequestStatus.REJECTED
        request.reject_reason = reason
        request.finish_s = now_of(self.env)
        self.rejected.append(request)
        if self.on_done is not None:
            self.on_done(request)

    # ------------------------------------------------------------- step loops
    def _wake(self) -> None:
        if self.waker is not None:
            self.waker()
            return
        if self._wakeup is not None and not self._wakeup.triggered:
            self._wakeup.succeed()

    def begin(self, plan: StepPlan) -> None:
        """What the worker does as a step starts: issue the plan's KV reads (spec §7.4 step 5)
        and its loads from the CPU tier."""
        for request, num_blocks in plan.kv_loads:
            self._pull(request, num_blocks)
        if plan.cpu_loads:
            self._load_from_host(plan)

    def _load_from_host(self, plan: StepPlan) -> None:
        """Start the plan's loads from the CPU tier; each request is admitted once its own
        load ends."""
        link = self.host_link
        assert link is not None, f"{self.name}: a CPU-tier load without a host link"
        now = now_of(self.env)
        scheduler = self.scheduler
        for request, num_blocks in plan.cpu_loads:
            end = link.load(now, num_blocks)
            self._on_host_load(scheduler, request, end - now)

    def _on_host_load(self, scheduler: Scheduler, request: Request, delay_s: float) -> None:
        """(A closure of its own per load: see ``_pull``.)"""
        alarm(self.env, delay_s, lambda _event: self._host_loaded(scheduler, request))

    def _host_loaded(self, scheduler: Scheduler, request: Request) -> None:
        if scheduler is not self.scheduler:
            return  # the engine restarted: that load's blocks went with it
        if self.fastforward.run is not None:
            self.fastforward.settle(scheduler, apply=False)
        if scheduler.finish_cpu_load(request):
            self._wake()

    def _store_to_host(self, plan: StepPlan) -> None:
        """The step that made ``plan.cpu_stores`` full ended: copy them out; the CPU tier can
        read them once the copy ends."""
        link = self.host_link
        tier = self.scheduler.offload
        assert link is not None and tier is not None
        stores = plan.cpu_stores
        now = now_of(self.env)
        end = link.store(now, len(stores))
        alarm(self.env, end - now, lambda _event: _stored(tier, stores))

    def _pull(self, request: Request, num_blocks: int) -> None:
        if self.start_kv_load is None:
            raise AssertionError(f"{self.name}: KV pull for {request.request_id} without "
                                 "a connector")
        # (a closure per pull: one compiled object, cheaper than a partial of a bound method)
        self.start_kv_load(request, num_blocks).callbacks.append(
            lambda _event: self._pulled(request))

    def _pulled(self, request: Request) -> None:
        if self.fastforward.run is not None:
            self.fastforward.settle(self.scheduler, apply=False)
        request.kv_transfer_done = True
        self._wake()

    # The step loop is a chain of callbacks, each where a SimPy process that yields the same
    # events would resume (the same places in the event order, one callback per event):
    # _start_loop -> _next_step -> _step (sync) or _step_async -> ... -> _next_step.
    def _start_loop(self) -> None:
        """The loop begins where a process started now would first run (SimPy's Initialize)."""
        self._awaited = alarm(self.env, 0.0, self._on_resume, URGENT)

    def _resume(self, _event: Waitable) -> None:
        """What the loop waited on happened (its start, a wakeup, a poll): schedule again."""
        self._wakeup = self._awaited = None
        self._next_step()

    def _next_step(self) -> None:
        """Schedule until there is a step to run and start it, or wait for something to do.

        With a pipeline, as vLLM's ``step_with_batch_queue``: a batch goes into the pipeline
        and the scheduler runs again at once while fewer than its depth are in flight; when
        they are that many, or nothing new can be scheduled (every running request is in
        flight), the loop waits for the oldest batch to leave the pipeline (``_landed``)."""
        scheduler = self.scheduler
        pipeline = self.pipeline
        while True:
            if scheduler.num_unfinished == 0:
                if self._in_flight:  # (requests removed while in flight)
                    self._await_batch()
                    return
                self._sleep(self._on_resume)
                return
            plan = scheduler.schedule()
            if not plan.is_empty:
                if pipeline is not None:
                    self.begin(plan)
                    entry_s, exit_s = pipeline.enter(now_of(self.env), plan)
                    self._in_flight.append((plan, entry_s, exit_s))
                    if len(self._in_flight) < pipeline.depth:
                        continue  # room for another batch: schedule again now
                    self._await_batch()
                elif scheduler.config.async_scheduling:
                    self._step_async(plan)
                else:
                    self._step(plan)
                return
            self.begin(plan)  # a step with only KV reads still runs (no forward pass)
            if self._in_flight:
                self._await_batch()  # nothing new to run: wait for the oldest batch
                return
            then = self.nothing_to_run(plan)
            if then == RETRY:
                continue
            self._sleep(self._woken_to_poll if then == POLL else self._on_resume)
            return

    def nothing_to_run(self, plan: StepPlan) -> int:
        """What the engine does after ``plan`` scheduled nothing to run (its KV reads
        issued): ``RETRY`` at once (its preemptions freed blocks, or the head of the queue was
        rejected: it could never be admitted), ``POLL`` (sleep until woken, and notice the
        finished pull one poll interval later) or ``SLEEP`` until woken (blocks held for decode
        instances come back)."""
        scheduler = self.scheduler
        if plan.preempted:
            return RETRY
        if any(not r.kv_transfer_done for r in scheduler.kv_holding):
            return POLL
        if scheduler.kv_held and not scheduler.running:
            return SLEEP
        self.reject_unschedulable()
        return RETRY

    def _await_batch(self) -> None:
        """Wait for the oldest batch in the pipeline to leave its last stage."""
        exit_s = self._in_flight[0][2]
        delay = exit_s - now_of(self.env)
        self._awaited = alarm(self.env, delay if delay > 0.0 else 0.0, self._on_landed)

    def _landed(self, _event: Waitable) -> None:
        """The oldest batch left the pipeline: apply its output, then schedule (its trace row
        starts when it entered or when the batch before it left, whichever is later, so that
        the rows tile the time the pipeline had work)."""
        self._awaited = None
        plan, entry_s, _exit_s = self._in_flight.pop(0)
        start = entry_s if entry_s >= self._landed_s else self._landed_s
        self._landed_s = now_of(self.env)
        self.apply(plan, start)
        self._next_step()

    def _sleep(self, then: Callable[[Waitable], None]) -> None:
        """Sleep until a request arrives or a KV pull finishes (``_wake``)."""
        wakeup = self._wakeup = self._awaited = Signal(self.env)
        wakeup.callbacks.append(then)  # type: ignore[union-attr]

    def _woken_to_poll(self, _event: Waitable) -> None:
        """Awake; the engine notices the finished pull one poll interval later."""
        self._wakeup = None
        self._awaited = alarm(self.env, self.poll_interval_s, self._on_resume)

    def _step(self, plan: StepPlan) -> None:
        """Sync scheduling: schedule(N) -> run(N) -> update(N) -> schedule(N+1)."""
        start = now_of(self.env)
        self.begin(plan)
        if self.coalesce:
            run = self.fastforward.start_run(self.scheduler, plan, start)
            if run is not None:
                wake = self._awaited = run.wake
                wake.callbacks.append(self._on_run_ended)  # type: ignore[union-attr]
                return
        self._plan, self._plan_start_s = plan, start
        self._awaited = alarm(self.env, self._price(plan), self._on_stepped)

    def _stepped(self, _event: Waitable) -> None:
        plan = self._plan
        assert plan is not None
        self._awaited = self._plan = None
        self.apply(plan, self._plan_start_s)
        self._next_step()

    def _run_ended(self, _event: Waitable) -> None:
        self._awaited = None
        self._done(self.fastforward.end_run(self.scheduler, release=True))
        self._next_step()

    def end_run(self) -> None:
        """The lockstep group's run this engine took part in ended: apply its part."""
        self._done(self.fastforward.end_run(self.scheduler))

    def _step_async(self, plan: StepPlan) -> None:
        """Async scheduling: schedule(N+1) runs before update(N), as vLLM's batch queue does."""
        start = now_of(self.env)
        self.begin(plan)
        duration = self._price(plan)
        self.log.add_plan(plan, start, start + duration)
        next_plan = self.scheduler.schedule()
        if self.coalesce:
            run = self.fastforward.start_async_run(self.scheduler, plan, next_plan, start,
                                                   start + duration)
            if run is not None:
                wake = self._awaited = run.wake
                wake.callbacks.append(self._on_async_run_ended)  # type: ignore[union-attr]
                return
        self._plan, self._next = plan, next_plan
        self._awaited = alarm(self.env, duration, self._stepped_async)

    def _stepped_async(self, _event: Waitable) -> None:
        plan, next_plan = self._plan, self._next
        assert plan is not None and next_plan is not None
        self._awaited = self._plan = self._next = None
        self._after_async(plan, next_plan,
                          self.scheduler.update_from_output(plan, now_of(self.env)))

    def _async_run_ended(self, _event: Waitable) -> None:
        self._awaited = None
        plan, next_plan, finished = self.fastforward.end_async_run(self.scheduler)
        self._after_async(plan, next_plan, finished)

    def _after_async(self, plan: StepPlan, next_plan: StepPlan,
                     finished: list[Request]) -> None:
        """``plan``'s step ended and its output is applied (``finished``); ``next_plan`` was
        scheduled while it ran: start it."""
        self._done(finished)
        if plan.cpu_stores:
            self._store_to_host(plan)
        self._give_up_thrashing(plan)
        self._give_up_thrashing(next_plan)
        if next_plan.is_empty:
            self.begin(next_plan)
            self._next_step()
        else:
            self._step_async(next_plan)

    def _price(self, plan: StepPlan) -> float:
        """The step's seconds."""
        roofline = self._roofline
        return roofline.step_s(plan) if roofline is not None else self.price_step(plan)

    def apply(self, plan: StepPlan, start_s: float) -> None:
        """The step that began at ``start_s`` ended now: apply its output, record it, hand the
        finished requests back, give up on thrashing ones (sync scheduling)."""
        finished = self.scheduler.update_from_output(plan, now_of(self.env))
        self.log.add_plan(plan, start_s, now_of(self.env))
        if plan.cpu_stores:
            self._store_to_host(plan)
        self._done(finished)
        self._give_up_thrashing(plan)

    def _done(self, finished: list[Request]) -> None:
        if finished and self.on_done is not None:
            for request in finished:
                self.on_done(request)

    def _give_up_thrashing(self, plan: StepPlan) -> None:
        """Reject the requests this step preempted once too often without progress."""
        for request in plan.preempted:
            if (request.stalled_preemptions >= MAX_STALLED_PREEMPTIONS
                    and request.status is RequestStatus.PREEMPTED):
                self.scheduler.waiting.remove(request)
                self.reject(request, f"preempted {request.num_preemptions} times, the last "
                            f"{request.stalled_preemptions} without progress: requests that "
                            f"do not fit the {self.scheduler.kv.num_usable_blocks} usable KV "
                            f"blocks of instance {self.name} together keep preempting each "
                            "other (vLLM would thrash here)")

    def reject_unschedulable(self) -> None:
        """Nothing runs, nothing is in flight, and the head of the queue cannot be admitted:
        it never will be (vLLM would stall here), so it is rejected with the reason."""
        scheduler = self.scheduler
        kv = scheduler.kv
        pulled = [r for r in scheduler.kv_holding if r.kv_transfer_done]
        if scheduler.running or not (pulled or len(scheduler.waiting)):
            raise AssertionError(f"{self.name}: empty step with {len(scheduler.running)} running")
        if pulled:
            request = pulled[0]
            scheduler.kv_holding.remove(request)
            kv.free(request)
            self.reject(request, f"pulled prompts hold all {kv.num_usable_blocks} usable KV "
                        f"blocks of instance {self.name} and none can complete (deadlock)")
            return
        request = scheduler.waiting.pop()
        self.reject(request, f"needs more KV blocks than the {kv.num_usable_blocks} usable "
                    f"blocks of instance {self.name}")

    @property
    def steps(self) -> list[StepRecord]:
        """Every step this engine ran (empty unless it records steps)."""
        return self.log.records()

    def record_dummy_step(self, start_s: float, end_s: float) -> None:
        """A data-parallel rank with nothing scheduled ran the group's step on a dummy batch:
        its GPU was busy, no request advanced (a row with 0 scheduled tokens)."""
        scheduler = self.scheduler
        self.log.add(start_s, end_s, 0, (), 0, len(scheduler.running), len(scheduler.waiting),
                     scheduler.kv.num_used_blocks, 0)


def _stored(tier: CpuKVTier, hashes: list[int]) -> None:
    """A store to the CPU tier ended: its blocks can be read."""
    tier.complete_store(hashes)
