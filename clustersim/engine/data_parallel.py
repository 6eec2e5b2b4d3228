"""vLLM's internal data parallelism: ``dp`` engine ranks behind one API server.

Each rank is a full engine (its own scheduler, KV cache, ``max_num_seqs`` and token budget).
The API server's load balancer sends a request to the rank with the lowest
``4 x waiting + running``, read from counts the DP coordinator publishes every 100 ms; between
publications it adds each request it sends to its own copy of the waiting count (ties go to
the lowest rank). A dense model's ranks then run independently. A mixture-of-experts model's
ranks share their experts, so every MoE layer is a collective across the group: the ranks step
together, a rank with nothing to do runs a dummy batch, and a step lasts as long as the
slowest rank's (priced by the caller, which sees every rank's plan).

With ``coalesce``, a lockstep group waits once for a run of steps in which every busy rank's
batch decodes unchanged and every idle rank stays idle (``fastforward.lockstep``); a request
reaching any rank ends the run at the step in progress for all of them. Otherwise, and
whenever a rank's step is not such a step, it steps.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from typing import Any, Final

import simpy

from clustersim.catalog.specs import ModelSpec
from clustersim.engine.events import Env, Signal, Waitable, alarm, now_of
from clustersim.engine.fastforward.lockstep import LockstepFastForward, may_coalesce_lockstep
from clustersim.engine.instance import POLL, RETRY, Instance
from clustersim.engine.request import Request
from clustersim.engine.scheduler import Scheduler, StepPlan
from clustersim.engine.steplog import StepRecord
from clustersim.errors import ConfigError

WAITING_WEIGHT: Final = 4
"""vLLM's balancer score: ``waiting * 4 + running``."""
STATS_INTERVAL_S: Final = 0.1
"""How often the DP coordinator publishes the ranks' request counts."""


def check_group(
    model: ModelSpec, gpu_id: str, tp: int, dp: int, expert_parallel: bool, node_gpus: int,
    *, names: tuple[str, str], fields: tuple[str, str], total_gpus: int | None = None,
    redundant_experts: int = 0,
) -> None:
    """A ``dp x tp`` group as clustersim models it: whole experts (plus EPLB's
    ``redundant_experts`` replicas) split evenly over its GPUs with expert parallelism, and
    all of them on one node of ``node_gpus``, or, where a topology gives ``total_gpus`` of the
    type, over several nodes with every rank's TP group inside one. ``names``: how the user
    spelled (dp, tp); ``fields``: the error paths of (dp, expert parallelism)."""
    n = dp * tp
    dp_name, tp_name = names
    dp_field, ep_field = fields
    experts = model.num_experts + redundant_experts
    if expert_parallel and experts % n:
        spelled = (f"{model.num_experts} experts" if not redundant_experts else
                   f"{model.num_experts} experts + {redundant_experts} redundant = {experts}")
        raise ConfigError(
            ep_field, f"{spelled} do not split evenly over "
            f"{dp_name} x {tp_name} = {n} GPUs",
        )
    if n <= node_gpus:
        return
    if total_gpus is None:
        raise ConfigError(
            dp_field, f"{dp} ranks x {tp_name} {tp} = {n} GPUs, more than one node's "
            f"{node_gpus} {gpu_id} GPUs: a data-parallel group spans nodes only on a "
            "topology (e.g. topology: {node: dgx-h100, count: 2})",
        )
    if n > total_gpus:
        raise ConfigError(
            dp_field, f"{dp} ranks x {tp_name} {tp} = {n} GPUs, more than the topology's "
            f"{total_gpus} {gpu_id} GPUs",
        )
    if tp > node_gpus:
        raise ConfigError(
            dp_field, f"a rank's {tp_name} {tp} is more than one node's {node_gpus} {gpu_id} "
            "GPUs: a rank's TP group stays inside one node",
        )


class Lockstep:
    """The ranks of one data-parallel MoE group stepping together, in any pool: every rank
    schedules, the step takes the slowest rank's time (``price_steps`` sees every rank's
    plan), every rank applies its output, and a rank with nothing to run runs a dummy batch
    (its MoE layers still join the group's collectives). The ranks take their requests from
    elsewhere (the group's balancer, or a pool's router); this only steps them."""

    def __init__(
        self,
        env: Env,
        ranks: Sequence[Instance],
        price_steps: Callable[[list[StepPlan | None]], float],
        coalesce: bool = False,
    ) -> None:
        """``coalesce``: runs of decode steps wait once where ``may_coalesce_lockstep``
        (``engine.fastforward``)."""
        self.env = env
        self.ranks = list(ranks)
        self.price_steps = price_steps
        self._wakeup: Signal | None = None
        self.coalesce = coalesce and may_coalesce_lockstep(
            env, price_steps, [rank.scheduler for rank in self.ranks])
        self._fastforward: LockstepFastForward | None = (
            LockstepFastForward(env, price_steps) if self.coalesce else None)
        """The group's coalesced runs (``coalesce``)."""
        for rank in self.ranks:
            if rank.runs_own_loop:
                raise ValueError(f"{rank.name} runs its own loop; create it with run=False")
            if rank.scheduler.config.async_scheduling:
                raise ValueError("lockstep data-parallel ranks schedule synchronously")
            rank.waker = self.wake
        self.process: Any = env.process(self._loop())

    def wake(self) -> None:
        """A rank has something new (a request, a finished pull, blocks back): step again."""
        if self._wakeup is not None and not self._wakeup.triggered:
            self._wakeup.succeed()

    def stop(self) -> None:
        """The group died (each rank has dropped its own part of a coalesced run): no more
        steps until :meth:`start`."""
        if self._fastforward is not None:
            self._fastforward.abandon()
        if self.process is not None and self.process.is_alive:
            self.process.interrupt("failed")
        self._wakeup = None

    def start(self) -> None:
        """The group is back (its ranks restarted): step again."""
        self.process = self.env.process(self._loop())

    def _loop(self) -> Generator[Waitable, Any, None]:
        try:
            yield from self._run()
        except simpy.Interrupt:
            return

    def _run(self) -> Generator[Waitable, Any, None]:
        """Sync scheduling across the group (each rank as ``Instance`` schedules alone: its
        KV reads issued as its step starts, the same waits when nothing can run)."""
        env = self.env
        ranks = self.ranks
        while True:
            plans: list[StepPlan | None] = []
            retry = poll = False
            for rank in ranks:
                if not rank.scheduler.num_unfinished:
                    plans.append(None)
                    continue
                plan = rank.scheduler.schedule()
                if plan.is_empty:
                    rank.begin(plan)  # its KV reads (no forward pass of its own)
                    then = rank.nothing_to_run(plan)
                    retry = retry or then == RETRY
                    poll = poll or then == POLL
                    plans.append(None)
                    continue
                plans.append(plan)
            if all(plan is None for plan in plans):
                if retry:
                    continue
                self._wakeup = Signal(env)
                yield self._wakeup
                self._wakeup = None
                if poll:  # a rank notices its finished pull one poll interval later
                    yield alarm(env, max(rank.poll_interval_s for rank in ranks))
                continue
            start = now_of(env)
            for rank, planned in zip(ranks, plans, strict=True):
                if planned is not None:
                    rank.begin(planned)
            fastforward = self._fastforward
            if fastforward is not None:
                schedulers = [rank.scheduler for rank in ranks]
                forwards = [rank.fastforward for rank in ranks]
                run = fastforward.start_run(schedulers, forwards, plans, start)
                if run is not None:
                    yield run.wake
                    fastforward.end_run()
                    for rank in ranks:
                        rank.end_run()
                    continue
            yield alarm(env, self.price_steps(plans))
            for rank, planned in zip(ranks, plans, strict=True):
                if planned is None:
                    rank.record_dummy_step(start, now_of(env))
                else:
                    rank.apply(planned, start)


class DataParallelGroup:
    """One vLLM server with ``data_parallel_size`` ranks; quacks like an :class:`Instance` for
    the cluster (submit, refusal, reject, abort)."""

    def __init__(
        self,
        env: Env,
        name: str,
        ranks: Sequence[Instance],
        price_steps: Callable[[list[StepPlan | None]], float] | None = None,
        coalesce: bool = False,
    ) -> None:
        """``price_steps`` given: the ranks step together (MoE, a :class:`Lockstep`); it
        prices one step from every rank's plan (None for a rank with nothing scheduled).
        Otherwise each rank runs its own loop. ``coalesce``: lockstep runs of decode steps wait
        once where ``may_coalesce_lockstep`` (``engine.fastforward``)."""
        self.env = env
        self.name = name
        self.ranks = list(ranks)
        self.price_steps = price_steps
        self.gpus: tuple[str, ...] = tuple(g for rank in self.ranks for g in rank.gpus)
        self._view = [[0, 0] for _ in self.ranks]
        self._next_publish_s = 0.0
        self.lockstep: Lockstep | None = (
            Lockstep(env, self.ranks, price_steps, coalesce) if price_steps is not None
            else None)
        """The ranks' common step loop (MoE); None: each rank runs its own."""

    # ----------------------------------------------------------------- intake
    def choose(self) -> int:
        """The rank vLLM's DP load balancer picks for the next request."""
        now = now_of(self.env)
        if now >= self._next_publish_s:
            self._view = [[len(r.scheduler.waiting), len(r.scheduler.running)]
                          for r in self.ranks]
            self._next_publish_s = now + STATS_INTERVAL_S
        view = self._view
        best = min(range(len(view)), key=lambda i: WAITING_WEIGHT * view[i][0] + view[i][1])
        view[best][0] += 1
        return best

    def refusal(self, request: Request) -> str | None:
        return self.ranks[0].refusal(request)

    def submit(self, request: Request) -> None:
        reason = self.refusal(request)
        if reason is not None:
            # the API server answers 400 before its balancer picks (and counts) a rank
            self.reject(request, reason)
            return
        rank = self.ranks[self.choose()]
        request.prefill_instance = request.decode_instance = rank.name
        rank.submit(request)

    def reject(self, request: Request, reason: str) -> None:
        self.ranks[0].reject(request, reason)

    def abort(self, request: Request, reason: str) -> None:
        for rank in self.ranks:
            if request.decode_instance == rank.name:
                rank.abort(request, reason)
                return
        raise KeyError(f"{request.request_id} is not queued on {self.name}")

    def remove(self, request: Request) -> None:
        for rank in self.ranks:
            if request.decode_instance == rank.name:
                rank.remove(request)
                return
        raise KeyError(f"{request.request_id} is not queued on {self.name}")

    @property
    def failed(self) -> bool:
        return self.ranks[0].failed

    def fail(self) -> list[Request]:
        """The server dies with all its ranks (one engine core's death takes the API server
        down): every request of every rank is returned, lost."""
        lost = [request for rank in self.ranks for request in rank.fail()]
        if self.lockstep is not None:
            self.lockstep.stop()
        return lost

    def restart(self, schedulers: Sequence[Scheduler]) -> None:
        """Back, empty: every rank with a fresh scheduler, the balancer's view reset."""
        for rank, scheduler in zip(self.ranks, schedulers, strict=True):
            rank.restart(scheduler)
        self._view = [[0, 0] for _ in self.ranks]
        self._next_publish_s = 0.0
        if self.lockstep is not None:
            self.lockstep.start()

    @property
    def steps(self) -> list[StepRecord]:
        return [step for rank in self.ranks for step in rank.steps]
