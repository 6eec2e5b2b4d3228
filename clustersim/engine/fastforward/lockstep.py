"""A lockstep data-parallel group's side of the fast-forward (``engine.data_parallel``).

A MoE model's ranks step together; with ``coalesce`` the group waits once for a run of
lockstep steps in which every busy rank's batch decodes unchanged (``fastforward.run`` for
each rank) and every idle rank stays idle, as many steps as the shortest rank allows, priced
by the group's pricer over every rank's batch. Every rank joins the one :class:`RunTimer`
(its :class:`~.engine.FastForward`), so a request reaching any rank ends the run at the step
in progress for all of them (the conditions: ``engine.fastforward``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from clustersim.engine.clock import Clock, Env
from clustersim.engine.fastforward.engine import FIRST_CHUNK_STEPS, FastForward
from clustersim.engine.fastforward.run import DecodeRun, extend_run, plan_decode_run, shrink_run
from clustersim.engine.fastforward.timer import RunTimer, append_ends
from clustersim.engine.scheduler import Scheduler, StepPlan

__all__ = ["LockstepFastForward", "may_coalesce_lockstep"]


def may_coalesce_lockstep(env: Env, price_steps: object,
                          schedulers: Sequence[Scheduler]) -> bool:
    """Whether a lockstep group may take coalesced runs at all: a :class:`Clock`, a pricer
    with ``decode_run`` over every rank's batch, and every rank scheduling with a decode set
    (sync FCFS, no speculative decoding)."""
    return (isinstance(env, Clock) and hasattr(price_steps, "decode_run")
            and all(scheduler.decoding is not None for scheduler in schedulers))


class LockstepFastForward:
    """The group's run in progress, and how long its runs have lasted."""

    def __init__(self, env: Env, price_steps: Callable[[list[StepPlan | None]], float]) -> None:
        self.env = env
        self.price_steps = price_steps
        self.steps: list[DecodeRun | None] = []
        """Each rank's steps of the run in progress (None: idle)."""
        self.typical_run = float(FIRST_CHUNK_STEPS)
        self.timer: RunTimer | None = None
        """The lockstep run in progress."""

    def start_run(self, schedulers: Sequence[Scheduler], forwards: Sequence[FastForward],
                  plans: list[StepPlan | None], start_s: float) -> RunTimer | None:
        """The run of lockstep steps that starts with ``plans`` (one per rank, None: idle),
        to wait for (its ``wake``); None: step."""
        first_chunk = max(FIRST_CHUNK_STEPS, int(self.typical_run))
        steps: list[DecodeRun | None] = []
        for scheduler, plan in zip(schedulers, plans, strict=True):
            if plan is None:
                if scheduler.num_unfinished:
                    return None  # it has requests it could not schedule: not idle
                steps.append(None)
                continue
            rank_steps = plan_decode_run(scheduler, plan, first_chunk)
            if rank_steps is None:
                return None
            steps.append(rank_steps)
        busy = [s for s in steps if s is not None]
        num_steps = min(s.num_steps for s in busy)
        for s in busy:
            shrink_run(s, num_steps)
        durations = [self.price_steps(plans), *self._price(steps, 1, num_steps - 1)]
        ends: list[float] = []
        append_ends(ends, start_s, durations)
        run = RunTimer(self.env, start_s, ends, first_chunk,  # type: ignore[arg-type]
                       self._plan_more)
        self.steps = steps
        for forward, rank_steps in zip(forwards, steps, strict=True):
            forward.join(run, rank_steps)
        self.timer = run
        return run

    def end_run(self) -> None:
        """The run's last step ended (then every rank applies its part: ``end_run``)."""
        run = self.timer
        assert run is not None
        self.timer = None
        run.release()
        self.typical_run += (run.last + 1 - self.typical_run) / 8

    def abandon(self) -> None:
        """The group fails: its run is dropped (each rank has settled its own part)."""
        if self.timer is not None:
            self.timer.release()
            self.timer = None

    def _price(self, steps: list[DecodeRun | None], first: int, num_steps: int) -> list[float]:
        batches = [None if s is None else (s.batch_size, s.decode_kv_tokens + first * s.batch_size)
                   for s in steps]
        return self.price_steps.decode_run(batches, num_steps)  # type: ignore[attr-defined]

    def _plan_more(self, first: int, num_steps: int, ends_s: list[float]) -> int:
        """Append the ends of up to ``num_steps`` more lockstep steps, as many as every busy
        rank can take; how many."""
        busy = [s for s in self.steps if s is not None]
        added = min(extend_run(s, num_steps) for s in busy)
        for s in busy:
            shrink_run(s, first + added)
        if added:
            append_ends(ends_s, ends_s[-1], self._price(self.steps, first, added))
        return added
