"""Turn a scenario's ``workload:`` into requests, reproducibly from one random generator.

``build_workload`` is the simulator's one entry point; the pure pieces live beside it:
``arrivals`` (open-loop arrival times), ``lengths`` (length distributions), ``traces`` (trace
file readers), ``replay`` (trace windows and prefix-block keys), ``classify`` (request classes
by length), ``stats`` (trace statistics) and ``sources`` (the SimPy processes).
"""

from __future__ import annotations

import os
import stat
from collections import OrderedDict

import numpy as np

from clustersim.engine.request import Request
from clustersim.errors import ConfigError
from clustersim.limits import MAX_TIME_S, TIME_REASON
from clustersim.workload.arrivals import arrival_times
from clustersim.workload.benchmark import dispatch_offsets, warmup_requests
from clustersim.workload.classify import REQUEST_CLASSES, RequestClass, classify_request
from clustersim.workload.kinds import Workload
from clustersim.workload.lengths import draw_lengths, joint_lengths
from clustersim.workload.pool import PoolRequests, draw_pool
from clustersim.workload.replay import ReplayRows, chain_block_hashes, replay_requests
from clustersim.workload.sessions import SessionRequests, draw_sessions
from clustersim.workload.sources import Benchmark, ClosedLoop, OpenLoop, Sessions, Submit
from clustersim.workload.spec import (
    BenchmarkWorkload,
    ClosedLoopArrivals,
    EmpiricalLengths,
    ExplicitWorkload,
    IndependentLengths,
    MixtureLengths,
    PoissonArrivals,
    PoissonWorkload,
    ReplayWorkload,
    SyntheticWorkload,
    TraceSource,
)
from clustersim.workload.spec_reuse import PromptPoolWorkload, SessionsWorkload
from clustersim.workload.traces import SHIPPED_TRACES, Trace, load_trace, resolve_trace_path

__all__ = [
    "REQUEST_CLASSES", "SHIPPED_TRACES", "Benchmark", "ClosedLoop", "OpenLoop", "RequestClass",
    "Sessions", "Submit",
    "Trace", "build_requests", "build_workload", "chain_block_hashes", "classify_request",
    "draw_lengths", "load_trace", "resolve_paths",
]


def _explicit(workload: ExplicitWorkload) -> list[Request]:
    requests = [
        Request(
            request_id=item.id,
            arrival_s=item.arrival_s,
            num_prompt_tokens=item.prompt_tokens,
            max_tokens=item.output_tokens,
            priority=item.priority,
            block_hashes=chain_block_hashes(item.block_hashes or ()),
        )
        for item in workload.requests
    ]
    # Stable sort: equal arrival times keep the file's order.
    requests.sort(key=lambda r: r.arrival_s)
    return requests


def _as_synthetic(workload: PoissonWorkload) -> SyntheticWorkload:
    """The short ``poisson`` form spelled out (same draws, so the same requests)."""
    if workload.classes is not None:
        lengths: MixtureLengths | IndependentLengths = MixtureLengths(
            kind="mixture", classes=workload.classes)
    else:
        assert workload.prompt_tokens is not None and workload.output_tokens is not None
        lengths = IndependentLengths(kind="independent", prompt_tokens=workload.prompt_tokens,
                                     output_tokens=workload.output_tokens)
    return SyntheticWorkload(
        kind="synthetic",
        arrivals=PoissonArrivals(kind="poisson", rate_per_s=workload.rate_per_s),
        lengths=lengths,
        num_requests=workload.num_requests,
        start_s=workload.start_s,
    )


TRACE_CACHE_SIZE = 4
"""Traces a process keeps once read (a plan simulates the same trace hundreds of times)."""

_traces: OrderedDict[tuple, Trace] = OrderedDict()


def _table(source: TraceSource, base_dir: str | os.PathLike | None) -> Trace:
    """``load_trace`` of the source, read once per process while the file stays the same
    (same size and modification time; a pipe or a missing file is read every time, so that
    its error comes as before). The cached arrays are read-only, so no reader can change
    what the next one gets."""
    key = _trace_key(source, base_dir)
    if key is not None and key in _traces:
        _traces.move_to_end(key)
        return _traces[key]
    trace = load_trace(source.trace, source.format, source.columns, source.time_unit,
                       base_dir=base_dir)
    if key is not None:
        for array in (trace.prompt_tokens, trace.output_tokens, trace.lines, trace.arrival_s):
            if array is not None:
                array.setflags(write=False)
        _traces[key] = trace
        while len(_traces) > TRACE_CACHE_SIZE:
            _traces.popitem(last=False)
    return trace


def _trace_key(source: TraceSource, base_dir: str | os.PathLike | None) -> tuple | None:
    columns = None if source.columns is None else tuple(sorted(source.columns.model_dump().items()))
    how = (source.format, columns, source.time_unit)
    if source.trace in SHIPPED_TRACES:
        return (source.trace, *how)  # shipped with the package: they do not change
    path = resolve_trace_path(source.trace, base_dir)
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return None
    if not stat.S_ISREG(info.st_mode):
        return None
    return (os.path.realpath(path), info.st_size, info.st_mtime_ns, *how)


def _lengths(workload: SyntheticWorkload | BenchmarkWorkload, n: int, rng: np.random.Generator,
             base_dir):
    spec = workload.lengths
    table = _table(spec, base_dir) if isinstance(spec, EmpiricalLengths) else None
    return joint_lengths(spec, n, rng, table)


def _requests(arrivals: np.ndarray, prompts: np.ndarray, outputs: np.ndarray) -> list[Request]:
    # (plain Python numbers first: indexing numpy arrays one element at a time is slow)
    return [  # (positional: a compiled class parses keyword arguments by name)
        Request(str(i), arrival, prompt, output)
        for i, (arrival, prompt, output) in enumerate(zip(
            np.asarray(arrivals, dtype=float).tolist(),
            np.asarray(prompts).astype(np.int64, copy=False).tolist(),
            np.asarray(outputs).astype(np.int64, copy=False).tolist(), strict=True))
    ]


def _synthetic(workload: SyntheticWorkload, rng: np.random.Generator, base_dir) -> list[Request]:
    columns = _columns(workload, rng, base_dir)
    return _requests(columns.arrivals, columns.prompts, columns.outputs)


def _columns(workload: SyntheticWorkload, rng: np.random.Generator, base_dir) -> _Columns:
    assert not isinstance(workload.arrivals, ClosedLoopArrivals)
    arrivals = arrival_times(workload.arrivals, rng, num_requests=workload.num_requests,
                             duration_s=workload.duration_s, start_s=workload.start_s)
    if arrivals.size == 0:
        raise ConfigError("workload.duration_s", f"no request arrives within {workload.duration_s}"
                          " s: lengthen it or raise the rate")
    prompts, outputs = _lengths(workload, len(arrivals), rng, base_dir)
    return _Columns(arrivals, prompts, outputs)


def _benchmark(workload: BenchmarkWorkload, rng: np.random.Generator, block_size: int,
               base_dir, on_arrival: bool = False) -> Benchmark:
    """Lengths first, then the dispatch gaps: the lengths stay the same whatever the rate.
    ``on_arrival``: each measured request built when it is sent."""
    prompts, outputs = _lengths(workload, workload.num_prompts, rng, base_dir)
    offsets = dispatch_offsets(workload.num_prompts, workload.request_rate,
                               workload.burstiness, rng).tolist()
    turnarounds = (rng.exponential(workload.turnaround_s,
                                   workload.num_prompts + workload.num_warmups).tolist()
                   if workload.turnaround_s > 0 else [])
    columns = _Columns(np.zeros(len(prompts)), prompts, outputs)
    if on_arrival:
        warmups = warmup_requests(columns(0), workload.num_warmups, block_size)
        build = columns if not warmups else _FirstWithKeys(columns, warmups[0].block_hashes)
        return Benchmark.built_on_arrival(len(prompts), build, offsets, warmups,
                                          workload.max_concurrency, workload.start_s,
                                          workload.ramp_up_s, turnarounds)
    requests = _requests(np.zeros(len(prompts)), prompts, outputs)
    warmups = warmup_requests(requests[0], workload.num_warmups, block_size)
    return Benchmark(requests, offsets, warmups, workload.max_concurrency,
                     workload.start_s, workload.ramp_up_s, turnarounds)


class _FirstWithKeys:
    """``build``, request 0 given the warm-ups' prompt (``warmup_requests``)."""

    def __init__(self, build: _Columns, keys: tuple[int, ...]) -> None:
        self.build, self.keys = build, keys

    def __call__(self, i: int) -> Request:
        request = self.build(i)
        if i == 0:
            request.block_hashes = self.keys
        return request


def build_requests(
    workload: Workload,
    rng: np.random.Generator,
    *,
    block_size: int = 16,
    base_dir: str | os.PathLike | None = None,
) -> list[Request]:
    """The scenario's requests, sorted by arrival time (open-loop workloads).

    ``block_size`` is the engine's KV block size (for a trace's prefix-block ids);
    ``base_dir`` the folder relative trace paths are relative to (default: the working one).
    """
    if isinstance(workload, ExplicitWorkload):
        return _explicit(workload)
    if isinstance(workload, ReplayWorkload):
        requests = replay_requests(workload, _table(workload, base_dir), block_size)
        return _in_time(requests, "workload.rate_multiplier")
    if isinstance(workload, BenchmarkWorkload):
        if workload.max_concurrency is not None:
            raise ValueError("a fixed-concurrency benchmark's send times are set during the "
                             "run (by its concurrency slots): use build_workload")
        # without a concurrency limit every request is sent when dispatched; the times
        # count from the client's start, not from the end of its warm-ups
        source = _benchmark(workload, rng, block_size, base_dir)
        for request, offset in zip(source.requests, source.offsets_s, strict=True):
            request.arrival_s = workload.start_s + offset
        return _in_time(source.requests, "workload.request_rate")
    if isinstance(workload, SessionsWorkload):
        raise ValueError("a session's requests after its first are sent during the run (each "
                         "when the answer before it is back): use build_workload")
    if isinstance(workload, PromptPoolWorkload):
        if isinstance(workload.arrivals, ClosedLoopArrivals):
            raise ValueError("closed-loop arrival times are set during the run: use "
                             "build_workload")
        rows = _pool(workload, rng, block_size)
        return _in_time([rows(i) for i in range(len(rows))], "workload.arrivals")
    where = "workload.rate_per_s" if isinstance(workload, PoissonWorkload) else "workload.arrivals"
    if isinstance(workload, PoissonWorkload):
        workload = _as_synthetic(workload)
    if isinstance(workload.arrivals, ClosedLoopArrivals):
        raise ValueError("closed-loop arrival times are set during the run: use build_workload")
    return _in_time(_synthetic(workload, rng, base_dir), where)


def _in_time(requests: list[Request], where: str) -> list[Request]:
    """``requests`` (sorted by arrival), unless the last one arrives past ``MAX_TIME_S``."""
    _in_time_s(requests[-1].arrival_s if requests else 0.0, where)
    return requests


def _in_time_s(last_s: float, where: str) -> None:
    if not last_s <= MAX_TIME_S:
        raise ConfigError(where, f"the last request would arrive at {last_s:g} s, past "
                          f"{MAX_TIME_S:g} s ({TIME_REASON}): raise the rate or send fewer "
                          "requests")


class _Columns:
    """Requests of arrival times and lengths, built one by one (``OpenLoop.built_on_arrival``):
    request ``i`` is what ``_requests`` builds at position ``i``."""

    def __init__(self, arrivals: np.ndarray, prompts: np.ndarray, outputs: np.ndarray) -> None:
        self.arrivals = np.asarray(arrivals, dtype=float)
        self.prompts = np.asarray(prompts).astype(np.int64, copy=False)
        self.outputs = np.asarray(outputs).astype(np.int64, copy=False)

    def __call__(self, i: int) -> Request:
        return Request(str(i), self.arrivals.item(i), self.prompts.item(i),
                       self.outputs.item(i))


def _pool(workload: PromptPoolWorkload, rng: np.random.Generator,
          block_size: int) -> PoolRequests:
    """A prompt pool's requests: the arrival times first (none for a closed loop: set as
    each is sent), then the pool and its draws (``pool.draw_pool``)."""
    arrivals = workload.arrivals
    if isinstance(arrivals, ClosedLoopArrivals):
        assert workload.num_requests is not None
        times = np.zeros(workload.num_requests)
    else:
        times = arrival_times(arrivals, rng, num_requests=workload.num_requests,
                              duration_s=workload.duration_s, start_s=workload.start_s)
        if times.size == 0:
            raise ConfigError("workload.duration_s", f"no request arrives within "
                              f"{workload.duration_s} s: lengthen it or raise the rate")
        _in_time_s(float(times[-1]), "workload.arrivals")
    return PoolRequests(draw_pool(workload, len(times), rng), times, block_size)


def build_workload(
    workload: Workload,
    rng: np.random.Generator,
    *,
    block_size: int = 16,
    base_dir: str | os.PathLike | None = None,
    on_arrival: bool = False,
) -> OpenLoop | ClosedLoop | Benchmark | Sessions:
    """The request source the simulator drives for this ``workload:`` section.

    ``on_arrival``: every workload but a list of requests builds each request when it is
    sent, not all in advance (the same requests; its ``requests`` then stay empty)."""
    if on_arrival and isinstance(workload, ReplayWorkload):
        rows = ReplayRows(workload, _table(workload, base_dir), block_size)
        _in_time_s(rows.last_arrival_s, "workload.rate_multiplier")
        return OpenLoop.built_on_arrival(len(rows), rows)
    if on_arrival and isinstance(workload, SyntheticWorkload | PoissonWorkload):
        synthetic = _as_synthetic(workload) if isinstance(workload, PoissonWorkload) else workload
        if not isinstance(synthetic.arrivals, ClosedLoopArrivals):
            where = ("workload.rate_per_s" if isinstance(workload, PoissonWorkload)
                     else "workload.arrivals")
            columns = _columns(synthetic, rng, base_dir)
            _in_time_s(float(columns.arrivals[-1]), where)
            return OpenLoop.built_on_arrival(len(columns.arrivals), columns)
    if isinstance(workload, BenchmarkWorkload):
        return _benchmark(workload, rng, block_size, base_dir, on_arrival)
    if isinstance(workload, SessionsWorkload):
        plan = draw_sessions(workload, rng)
        _in_time_s(float(plan.start_s[-1]), "workload.arrivals")
        return Sessions(plan.start_s.tolist(), plan.first.tolist(), plan.wait_s.tolist(),
                        SessionRequests(plan, block_size), keep=not on_arrival)
    if isinstance(workload, PromptPoolWorkload):
        rows = _pool(workload, rng, block_size)
        arrivals = workload.arrivals
        if isinstance(arrivals, ClosedLoopArrivals):
            if on_arrival:
                return ClosedLoop.built_on_arrival(len(rows), rows, arrivals.num_users,
                                                   arrivals.think_time_s, workload.start_s)
            return ClosedLoop([rows(i) for i in range(len(rows))], arrivals.num_users,
                              arrivals.think_time_s, workload.start_s)
        if on_arrival:
            return OpenLoop.built_on_arrival(len(rows), rows)
        return OpenLoop([rows(i) for i in range(len(rows))])
    if isinstance(workload, SyntheticWorkload) and isinstance(
        workload.arrivals, ClosedLoopArrivals
    ):
        assert workload.num_requests is not None
        prompts, outputs = _lengths(workload, workload.num_requests, rng, base_dir)
        users = workload.arrivals
        if on_arrival:
            return ClosedLoop.built_on_arrival(
                len(prompts), _Columns(np.zeros(len(prompts)), prompts, outputs),
                users.num_users, users.think_time_s, workload.start_s)
        requests = _requests(np.zeros(len(prompts)), prompts, outputs)
        return ClosedLoop(requests, users.num_users, users.think_time_s, workload.start_s)
    return OpenLoop(build_requests(workload, rng, block_size=block_size, base_dir=base_dir))


def resolve_paths(workload: Workload, base_dir: str | os.PathLike) -> Workload:
    """``workload`` with its relative trace paths made relative to ``base_dir`` (the scenario
    file's folder); shipped trace names and absolute paths are kept."""
    if isinstance(workload, ReplayWorkload):
        return workload.model_copy(update={"trace": resolve_trace_path(workload.trace, base_dir)})
    if (isinstance(workload, SyntheticWorkload | BenchmarkWorkload)
            and isinstance(workload.lengths, EmpiricalLengths)):
        lengths = workload.lengths.model_copy(
            update={"trace": resolve_trace_path(workload.lengths.trace, base_dir)})
        return workload.model_copy(update={"lengths": lengths})
    return workload
