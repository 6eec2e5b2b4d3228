"""Run a scenario: build the cluster, feed it the workload, collect the records."""

from __future__ import annotations

import ctypes
import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any, Protocol

# numpy.random is loaded with this module, not at a run's first draw (numpy loads it lazily,
# and a run already near its memory limit could not map its libraries then)
import numpy as np
import numpy.random  # noqa: F401
from simpy.core import StopSimulation

from clustersim.catalog import load_model
from clustersim.cluster.build import InstanceInfo
from clustersim.cluster.system import Cluster
from clustersim.engine.clock import Clock
from clustersim.engine.offload import HostLink
from clustersim.engine.request import Request
from clustersim.engine.steplog import StepRecord, StepTotals
from clustersim.scenario import Scenario
from clustersim.workload import build_workload


class RequestSink(Protocol):
    """Takes a run's measured requests as each is done (``run_scenario(..., sink=...)``)."""

    def open(self, num_requests: int) -> None:
        """Before the run: it has this many measured requests."""

    def add(self, index: int, request: Request) -> None:
        """Request ``index`` (0-based, in the workload's order) is done, finished or
        rejected, for good; the run keeps no reference to it."""


@dataclass(frozen=True, slots=True)
class RunResult:
    """Everything a run produced: per-request state, the engine traces, the KV transfers.

    A lean run (``record_steps=False``) has no ``steps`` and its requests no
    ``token_times_s``; ``step_totals`` and each request's token clock carry what
    ``metrics.summarize_run`` needs, so both kinds of run summarize the same. In a full run,
    ``step_totals`` equal what ``StepTotals.of_records(steps)`` gives."""

    scenario: Scenario
    requests: list[Request]
    """Empty when a sink took them during the run."""
    steps: list[StepRecord]
    instances: list[InstanceInfo]
    end_s: float
    transfers: list[Any] = field(default_factory=list)
    """clustersim.cluster.flows.TransferRecord, one per KV handoff."""
    transfers_streamed: int = 0
    """KV transfers handed to the run's ``transfer_sink`` instead of kept in ``transfers``."""
    link_utilization: dict[str, float] = field(default_factory=dict)
    step_totals: dict[str, StepTotals] = field(default_factory=dict)
    """Per engine name: its steps summed up (every run has them)."""
    record_steps: bool = True
    """False: a lean run."""
    num_events: int = 0
    """SimPy events the run scheduled."""
    faults: Any = None
    """clustersim.cluster.faults.FaultLog: what each failure did (None: no ``faults:``)."""
    measured_start_s: float | None = None
    """A benchmark workload: when its measured run began, after the warm-ups (``requests``
    holds the measured requests only)."""
    warmup_start_s: float | None = None
    """When the first warm-up request was sent (None: no warm-ups); the engines' busy time
    and KV use are read from there, since their steps are in the trace."""
    host_links: dict[str, HostLink] = field(default_factory=dict)
    """Per engine with a CPU tier: its copies to and from it (``engine.offload``)."""

    @property
    def num_transfers(self) -> int:
        """KV transfers the run made, kept or streamed."""
        return len(self.transfers) + self.transfers_streamed


def run_scenario(
    scenario: Scenario,
    *,
    record_steps: bool = True,
    coalesce: bool = True,
    ideal_times: bool | None = None,
    sink: RequestSink | None = None,
    transfer_sink: Callable[[Any], None] | None = None,
) -> RunResult:
    """Simulate a scenario to the end.

    ``record_steps=False`` is the planner's lean run: no per-step records and no per-token
    times are kept, only per-engine step totals, a few integers per request and the end time
    of every engine step (8 bytes a step, from which the exact token gaps are read), yet
    ``summarize_run`` gives the same summary. ``ideal_times``: each KV transfer records its
    time alone on idle links (``transfers.csv``'s ``ideal_s`` and ``queue_s``); None: when
    ``record_steps``. ``coalesce=False`` steps every engine one step per event (the reference
    the coalesced runs are tested against); both give the same results.

    ``sink``: each measured request is handed to it once done, and the run keeps none of
    them (``requests`` empty; a synthetic open-loop workload builds each when it arrives), so
    that memory holds the requests in flight, not all of them. ``transfer_sink``: each KV
    transfer's record (``cluster.flows.TransferRecord``) is handed to it as the transfer
    ends, and the run keeps none (``transfers`` empty, ``transfers_streamed`` their count)."""
    with _no_collections(), _steady_mmap_threshold(sink is not None):
        model = load_model(scenario.model, path="model")
        rng = np.random.default_rng(scenario.seed)
        # Routers draw from their own stream so that changing the layout never changes the
        # traffic.
        router_rng = np.random.default_rng([scenario.seed, 1])
        source = build_workload(scenario.workload, rng, block_size=scenario.engine.block_size,
                                base_dir=scenario.base_dir, on_arrival=sink is not None)

        env = Clock()
        on_done = source.on_done
        warmups = getattr(source, "warmups", [])
        num_requests = getattr(source, "num_requests", len(source.requests))
        handing = None if sink is None else _Handing(sink, num_requests, warmups)
        if handing is not None:
            on_done = handing.done_after(on_done)
        if scenario.faults is not None:  # a failure or repair after the last request is moot
            on_done = _stop_when_all_done(env, on_done, num_requests + len(warmups))
        cluster = Cluster(env, scenario, model, router_rng, on_done=on_done,
                          record_steps=record_steps, coalesce=coalesce,
                          ideal_times=ideal_times)
        if transfer_sink is not None and cluster.flows is not None:
            cluster.flows.on_record = transfer_sink
        submit = cluster.dispatch.submit
        source.start(env, submit if handing is None else handing.submit_to(submit))
        env.run()

    requests = [] if handing is not None else source.requests
    for instance in cluster.all_instances():
        instance.scheduler.sync_members()  # (all finished: nothing is left stale)
    unfinished = [r for r in [*warmups, *requests] if not r.is_done]
    if handing is not None:
        unfinished += handing.in_flight()
        if handing.num_submitted < num_requests:
            raise AssertionError(f"{num_requests - handing.num_submitted} requests never sent")
    if unfinished:
        raise AssertionError(
            f"{len(unfinished)} requests neither finished nor rejected, e.g. "
            f"{unfinished[0].request_id} ({unfinished[0].status.value})"
        )
    instances = cluster.all_instances()
    end_s = float(env.now)
    flows = cluster.flows
    first_arrival = (min((r.arrival_s for r in requests), default=0.0) if handing is None
                     else handing.first_arrival_s)
    return RunResult(
        scenario=scenario,
        requests=requests,
        steps=[step for instance in instances for step in instance.log.take_records()],
        step_totals={instance.name: instance.log.totals for instance in instances},
        record_steps=record_steps,
        num_events=env.num_events,
        instances=cluster.infos,
        end_s=end_s,
        transfers=list(flows.records) if flows is not None else [],
        transfers_streamed=(flows.num_records - len(flows.records)
                            if flows is not None else 0),
        link_utilization=(
            flows.link_utilization(end_s - first_arrival) if flows is not None else {}
        ),
        faults=_fault_log(cluster),
        measured_start_s=getattr(source, "measured_start_s", None),
        warmup_start_s=min((r.arrival_s for r in warmups), default=None),
        host_links={instance.name: instance.host_link for instance in instances
                    if instance.host_link is not None},
    )


@dataclass(slots=True)
class _Collector:
    """What ``_no_collections`` set up in this process."""

    frozen: bool = False
    """The heap that lived before the first run is out of the collector's sight for good."""


_COLLECTOR = _Collector()


@contextmanager
def _no_collections() -> Iterator[None]:
    """The cyclic garbage collector does not run inside the block. A run's requests and its
    cluster are built by the hundred thousand and live to its end, and a collection can
    free none of them: every pass rescans them (8 % of a 1,024-GPU split probe's time in
    eleven young passes, at a threshold of 100,000 allocations), for nothing, since what a
    run frees while it goes it frees by reference counting (a run of 153,300 requests peaks
    at the same RSS with the collector off). What it leaves in cycles (the cluster, the
    clock and its requests reference each other) waits for the next block, which begins with
    a full collection, so that run after run in one process (a planner's worker) holds at
    most one run's garbage. It never rescans what lived before the first run of the process
    (the modules, the catalog, the schemas: ``gc.freeze`` once, after a full collection, for
    the rest of the process; an object of that heap that later becomes cyclic garbage
    stays), so that collection scans only the objects made since, and it is cheap. No effect
    on any result."""
    enabled = gc.isenabled()
    gc.collect()
    if not _COLLECTOR.frozen:
        gc.freeze()
        _COLLECTOR.frozen = True
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class _Handing:
    """Hands each measured request to the sink once done, by its place in the workload (the
    order the source submits them in; warm-ups are not measured)."""

    def __init__(self, sink: RequestSink, num_requests: int, warmups: list[Request]) -> None:
        self.sink = sink
        self.num_requests = num_requests
        self.num_submitted = 0
        self.first_arrival_s = 0.0
        self._index_of: dict[Request, int] = {}
        """The requests submitted and not yet done."""
        self._warmups = set(warmups)
        sink.open(num_requests)

    def submit_to(self, submit: Callable[[Request], None]) -> Callable[[Request], None]:
        """``submit``, noting each measured request's place."""

        def submitted(request: Request) -> None:
            if request not in self._warmups:
                if not self.num_submitted or request.arrival_s < self.first_arrival_s:
                    self.first_arrival_s = request.arrival_s
                self._index_of[request] = self.num_submitted
                self.num_submitted += 1
            submit(request)

        return submitted

    def done_after(self, on_done: Callable[[Request], None]) -> Callable[[Request], None]:
        """``on_done``, then the request to the sink."""

        def done(request: Request) -> None:
            on_done(request)
            index = self._index_of.pop(request, None)
            if index is not None:
                self.sink.add(index, request)

        return done

    def in_flight(self) -> list[Request]:
        """The requests submitted and never done."""
        return list(self._index_of)


MMAP_THRESHOLD_BYTES = 128 * 1024
"""glibc's default: blocks from this size up get their own mappings."""
MMAP_THRESHOLD_MAX_BYTES = 32 * 1024 * 1024
"""The most glibc's dynamic threshold rises to (on 64-bit)."""
_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter


@contextmanager
def _steady_mmap_threshold(steady: bool) -> Iterator[None]:
    """With ``steady``, hold glibc's mmap threshold at its default while the block runs, and
    at its dynamic maximum after it. glibc raises it whenever a large block is freed, as
    building a workload's arrays does; from then on the engines' step clocks (an array each,
    8 bytes a step, grown by ``realloc``) live in the heap, where each move leaves a hole: a
    million requests' 155 MB of clocks held about 270 MB. In their own mappings they grow in
    place (``mremap``). After the run, the summary's large temporary arrays come from the
    heap again (mapping each afresh costs its pages' faults). No effect on any result;
    nothing where the C library has no ``mallopt`` (not glibc)."""
    mallopt = None
    if steady:
        with suppress(OSError, AttributeError):
            mallopt = ctypes.CDLL(None).mallopt
    if mallopt is None:
        yield
        return
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
    try:
        yield
    finally:
        mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX_BYTES)


def _stop_when_all_done(env: Clock, on_done, num_requests: int):
    """``on_done``, and the run stops once every request is done: failures scheduled after
    that would only move the clock on."""
    left = num_requests

    def done(request: Request) -> None:
        nonlocal left
        on_done(request)
        left -= 1
        if left == 0:
            stop = env.event()
            stop.callbacks.append(StopSimulation.callback)
            stop.succeed()

    return done


def _fault_log(cluster: Cluster):
    if cluster.faults is None:
        return None
    log = cluster.faults.log
    if cluster.flows is not None:
        log.num_rerouted = cluster.flows.num_rerouted
    return log
