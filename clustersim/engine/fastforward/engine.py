"""One engine's side of the fast-forward: its runs, from the plan that starts one to the last
step applied (the conditions: ``engine.fastforward``).

The step loop (``engine.instance``) holds a :class:`FastForward` and calls it at four places:
after a step's plan (:meth:`FastForward.start_run`: a run to wait for, or None to step), when
something from outside is about to change the engine (:meth:`FastForward.settle`), when the
run's wake fires (:meth:`FastForward.end_run`: the run applied, the finished requests for
the engine to hand back), and when the engine fails (:meth:`FastForward.abandon`). A rank of a
lockstep data-parallel group takes part in its group's runs instead (:meth:`FastForward.join`,
``fastforward.lockstep``; the group ends it through the rank's ``end_run``)::

    schedule(0)  [ step 0 | step 1 | ... | step K-1 ]  apply(K-1)  schedule(K) ...
                 one event at the end of K-1: steps 0..K-2 are applied in bulk, K-1 as usual

With async scheduling the loop has scheduled step 1 when step 0 starts, and the run starts
there (:meth:`FastForward.start_async_run`); at its end (:meth:`FastForward.end_async_run`)
the plans of its last step and of the one after it are scheduled for real, and the loop goes
on from them as from any step's end::

    schedule(0) schedule(1)  [ step 0 | step 1 | ... | step K-1 ]  apply(K-1)  ...
                             schedule(K-1) and schedule(K), as the loop made them at the
                             start of K-2 and K-1, come first (or when the run is cut short)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from clustersim.engine.clock import Clock, Env
from clustersim.engine.fastforward.run import (
    DecodeRun,
    advance_async_run,
    advance_run,
    extend_run,
    finish_run_step,
    plan_decode_run,
)
from clustersim.engine.fastforward.timer import RunTimer, append_ends
from clustersim.engine.pipeline import Pipeline
from clustersim.engine.request import Request
from clustersim.engine.scheduler import Scheduler, StepPlan
from clustersim.engine.step_plan import NOTHING, RooflinePricer
from clustersim.engine.steplog import StepLog

__all__ = ["FIRST_CHUNK_STEPS", "FastForward", "may_coalesce"]

FIRST_CHUNK_STEPS: Final = 4
"""Steps a run plans and prices at first, at least (more if this engine's recent runs were
longer); each time it gets that far unchanged it plans twice as many more
(``fastforward.timer``). Only the cost of a run depends on this, not what it computes."""


def may_coalesce(env: Env, scheduler: Scheduler, price_step: object,
                 pipeline: Pipeline | None, own_loop: bool) -> bool:
    """Whether an engine may take coalesced runs at all: no pipeline, its own step loop on a
    :class:`Clock`, a scheduler with a decode set (FCFS, no speculative decoding) and a
    pricer with ``decode_run``. (A lockstep group's rank: ``fastforward.lockstep``.)"""
    return (pipeline is None and isinstance(env, Clock) and own_loop
            and scheduler.decoding is not None
            and getattr(price_step, "decode_run", None) is not None)


class FastForward:
    """An engine's run in progress (its own, or its lockstep group's) and how to apply it.

    ``log``: the engine's step log; ``apply(plan, start)`` applies a step that ended now
    as the step loop does (a run cut short in its step 0); ``record_dummy(start, end)`` logs
    an idle rank's dummy step."""

    def __init__(self, env: Env, log: StepLog, price_step: Callable[[StepPlan], float],
                 apply: Callable[[StepPlan, float], None],
                 record_dummy: Callable[[float, float], None]) -> None:
        self.env = env
        self.log = log
        self.price_step = price_step
        self.apply = apply
        self.record_dummy = record_dummy
        self._price_run: Callable[[int, int, int], list[float]] | None = getattr(
            price_step, "decode_run", None)
        """The pricer's ``decode_run(batch, kv_tokens, steps)``: a run's step durations."""
        self._price_ends: Callable[[list[float], float, int, int, int], None] | None = getattr(
            price_step, "decode_run_ends", None)
        """The pricer's ``decode_run_ends(ends, start, batch, kv_tokens, steps)``, if it has
        one: the same steps appended as end times (no list of durations in between)."""
        self._roofline = price_step if isinstance(price_step, RooflinePricer) else None
        """The pricer, if it is the roofline one (called natively)."""
        self.run: RunTimer | None = None
        """The coalesced run this engine is in (its own, or its lockstep group's)."""
        self.steps: DecodeRun | None = None
        """This engine's steps of that run (None: idle in its group's run)."""
        self.dummies_logged = 0
        """Idle in a group's run: its dummy steps logged so far."""
        self.logged = False
        """Async run: its steps after step 0 are logged (step 0 was as it started)."""
        self.typical_run = float(FIRST_CHUNK_STEPS)
        """Steps this engine's recent runs lasted (a moving average: the first chunk)."""
        self._on_plan_more = self._plan_more

    # ------------------------------------------------------------ its own run
    def start_run(self, scheduler: Scheduler, plan: StepPlan, start_s: float) -> RunTimer | None:
        """The run that starts with ``plan`` (just scheduled, its step starting at
        ``start_s``), to wait for (its ``wake``); None: step."""
        if plan.kv_loads:
            return None  # a pull it starts usually lands within the step: one step is cheaper
        first = max(FIRST_CHUNK_STEPS, int(self.typical_run))
        steps = plan_decode_run(scheduler, plan, first)
        if steps is None:
            return None
        size = steps.batch_size
        ends: list[float] = []
        if (plan.num_decode_tokens == plan.num_scheduled_tokens == size
                and plan.decode_kv_tokens == steps.decode_kv_tokens):
            # step 0 is already the batch decoding: priced as the run's first step, the
            # same bits as pricing its plan (``CostModel.step_time_s``)
            self._run_ends(ends, start_s, size, steps.decode_kv_tokens, steps.num_steps)
        else:  # step 0 is any step in which all sample
            ends.append(start_s + self._price(plan))
            self._run_ends(ends, ends[0], size, steps.kv_tokens(1), steps.num_steps - 1)
        self.steps = steps
        self.run = RunTimer(self.env, start_s, ends, first,  # type: ignore[arg-type]
                            self._on_plan_more)
        return self.run

    def start_async_run(self, scheduler: Scheduler, plan: StepPlan, next_plan: StepPlan,
                        start_s: float, end_s: float) -> RunTimer | None:
        """Async scheduling: the run that starts with ``plan`` (its step starting at
        ``start_s``, priced to end at ``end_s``, logged) and ``next_plan`` (just scheduled
        while it runs), to wait for (its ``wake``); None: step."""
        if plan.kv_loads or next_plan.kv_loads:
            return None  # step 1 would start its pulls within the run (and step 0's usually
            # land within it: one step is cheaper than a run cut at once)
        if plan.cpu_loads or plan.cpu_stores:
            return None  # CPU tier: step 0's copies are issued as it ends (the step loop's)
        first = max(FIRST_CHUNK_STEPS, int(self.typical_run))
        steps = plan_decode_run(scheduler, next_plan, first + 1, head=2)
        if steps is None:
            return None
        steps.head_plans = (plan, next_plan)
        ends = [end_s, end_s + self._price(next_plan)]
        self._run_ends(ends, ends[1], steps.batch_size, steps.kv_tokens(2),
                       steps.num_steps - 2)
        self.steps = steps
        self.logged = False
        self.run = RunTimer(self.env, start_s, ends, first,  # type: ignore[arg-type]
                            self._on_plan_more)
        return self.run

    def _run_ends(self, ends_s: list[float], start_s: float, size: int, kv_tokens: int,
                  num_steps: int) -> None:
        """Append the ends of ``num_steps`` steps of ``size`` decodes from ``start_s``, the
        first attending to ``kv_tokens`` tokens."""
        roofline = self._roofline
        if roofline is not None:
            roofline.prices.decode_run_ends(ends_s, start_s, size, kv_tokens, num_steps)
            return
        price_ends = self._price_ends
        if price_ends is not None:
            price_ends(ends_s, start_s, size, kv_tokens, num_steps)
            return
        decode_run = self._price_run
        assert decode_run is not None
        append_ends(ends_s, start_s, decode_run(size, kv_tokens, num_steps))

    def _price(self, plan: StepPlan) -> float:
        """The step's seconds."""
        roofline = self._roofline
        return roofline.step_s(plan) if roofline is not None else self.price_step(plan)

    def _plan_more(self, first: int, num_steps: int, ends_s: list[float]) -> int:
        """Append the ends of up to ``num_steps`` more steps of the run, from step ``first``;
        how many."""
        steps = self.steps
        assert steps is not None
        added = extend_run(steps, num_steps)
        if added:
            self._run_ends(ends_s, ends_s[-1], steps.batch_size, steps.kv_tokens(first), added)
        return added

    # ------------------------------------------------------ a group's run
    def join(self, run: RunTimer, steps: DecodeRun | None) -> None:
        """This rank takes part in its lockstep group's run (``steps`` None: idle in it)."""
        self.run, self.steps, self.dummies_logged = run, steps, 0

    # ------------------------------------------------------------ either
    def settle(self, scheduler: Scheduler, apply: bool = True) -> None:
        """Something from outside changes this engine now: end the run with the step in
        progress, and (``apply``) bring its requests and KV blocks up to now. A change that
        reads neither (a request queued, a pull marked done) leaves that to the run's end,
        but with async scheduling: the step after the one in progress was scheduled before
        the change, so that schedule is made now, and the steps so far logged."""
        run, steps = self.run, self.steps
        assert run is not None
        step = run.settle()
        if steps is None:
            self._log_dummies(run, step)  # an idle rank: its dummy rows read the queues live
        elif steps.head == 2:
            advance_async_run(scheduler, steps, step, run.ends_s)
            self._log_async_run(run, steps)
        elif apply:
            first = steps.num_updated
            advance_run(scheduler, steps, step + 1, step, run.ends_s)
            self._log_run(run, steps, first, step)

    def end_run(self, scheduler: Scheduler, release: bool = False) -> list[Request]:
        """The run's last step ended: apply it and the ones before it; the requests that
        finish, for the engine to hand back (as the step loop's ``apply`` does for one step).
        ``release``: the run is this engine's own (a lockstep group releases the group's)."""
        run, steps = self.run, self.steps
        assert run is not None
        if release:
            run.release()
        last = run.last
        self.run = self.steps = None
        if steps is None:  # idle rank of a group's run
            self._log_dummies(run, last + 1)
            self.dummies_logged = 0
            return NOTHING
        self.typical_run += (last + 1 - self.typical_run) / 8
        if last == 0:
            self.apply(steps.plan, run.start_s)  # (it hands back its own)
            return NOTHING
        first = steps.num_updated
        advance_run(scheduler, steps, last + 1, last, run.ends_s)
        finished = finish_run_step(scheduler, steps, run.ends_s)
        self._log_run(run, steps, first, last + 1)
        return finished

    def end_async_run(self, scheduler: Scheduler) -> tuple[StepPlan, StepPlan, list[Request]]:
        """Async scheduling: the run's last step ended. Returns its plan and the next one's
        (scheduled as the loop would have while it ran), and the requests that finish with
        its output, applied now: what the loop has at any step's end."""
        run, steps = self.run, self.steps
        assert run is not None and steps is not None
        run.release()
        self.run = self.steps = None
        last = run.last
        self.typical_run += (last + 1 - self.typical_run) / 8
        plan, next_plan = advance_async_run(scheduler, steps, last, run.ends_s)
        self._log_async_run(run, steps)
        return plan, next_plan, scheduler.update_from_output(plan, run.ends_s[last])

    def _log_async_run(self, run: RunTimer, steps: DecodeRun) -> None:
        """Log the async run's steps 1 .. its last (which has ended or is in progress: the
        loop logs a step as it starts), once its last step's plan is scheduled."""
        if self.logged:
            return
        self.logged = True
        last = run.last
        if last == 0:
            return
        assert steps.last_plans is not None
        ends = run.ends_s
        self.log.add_plan(steps.head_plans[1], ends[0], ends[1])
        if last == 1:
            return
        if last > 2:
            self.log.add_decodes(ends[1], ends, 2, last, steps.blocks_used(1), steps.takers,
                                 steps.phase(2), steps.batch_size, steps.plan.num_running,
                                 steps.plan.num_waiting)
        self.log.add_plan(steps.last_plans[0], ends[last - 1], ends[last])

    def abandon(self, scheduler: Scheduler, release: bool) -> None:
        """The engine fails now: the steps that ended before now are applied, as the step
        loop applied them; the one in progress never ends. ``release``: its own run."""
        run = self.run
        assert run is not None
        self.settle(scheduler)
        self.run = self.steps = None
        self.dummies_logged = 0
        if release:
            run.release()

    def _log_run(self, run: RunTimer, steps: DecodeRun, first: int, stop: int) -> None:
        """Log the run's steps ``first .. stop - 1`` (step 0 with its own plan)."""
        if stop <= first:
            return
        if first == 0:
            self.log.add_plan(steps.plan, run.start_s, run.ends_s[0])
            first = 1
            if stop == 1:
                return
        self.log.add_decodes(run.ends_s[first - 1], run.ends_s, first, stop,
                             steps.blocks_used(first - 1), steps.takers, steps.phase(first),
                             steps.batch_size, steps.plan.num_running, steps.plan.num_waiting)

    def _log_dummies(self, run: RunTimer, stop: int) -> None:
        """An idle rank of a lockstep group ran the run's steps before ``stop`` on dummy
        batches (its rows read the queues at each step's end, as the step loop's did)."""
        for step in range(self.dummies_logged, stop):
            self.record_dummy(run.start_of(step), run.ends_s[step])
        self.dummies_logged = max(self.dummies_logged, stop)
