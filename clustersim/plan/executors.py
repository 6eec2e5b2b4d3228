"""Where the planner's simulations run: in this process, in a local process pool, or on Ray.

A job is a scenario (its file paths already resolved, so a worker on another machine reads
nothing relative to the caller's folder); a worker runs it lean (no per-step records) and
returns its :class:`~clustersim.metrics.RunSummary`, a few kilobytes. Results come back in
submission order whatever order the workers finish in, so a plan does not depend on the
executor: the same scenario and seed give the same plan serially, on 16 cores or on a cluster.

Ray is imported only here, and only when asked for (``pip install 'clustersim[ray]'``).
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.context
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import TYPE_CHECKING, Protocol

from clustersim.errors import ClusterSimError, ConfigError

if TYPE_CHECKING:
    from clustersim.metrics import RunSummary
    from clustersim.scenario import Scenario

Progress = Callable[[int], None]
"""Called with the number of jobs that just finished."""


def run_job(scenario: Scenario) -> RunSummary | str:
    """One simulation, as a worker runs it: the summary, or the user error's one line (an
    impossible configuration is an answer for the planner, not a crash)."""
    from clustersim.metrics import summarize_run
    from clustersim.sim import run_scenario

    try:
        return summarize_run(run_scenario(scenario, record_steps=False))
    except ClusterSimError as error:
        return str(error)


class Executor(Protocol):
    name: str
    workers: int

    def map(self, jobs: Sequence[Scenario], progress: Progress | None = None
            ) -> list[RunSummary | str]: ...

    def close(self) -> None: ...


class SerialExecutor:
    """Every job in this process, one after another (tests, one core, debugging)."""

    name = "serial"
    workers = 1

    def map(self, jobs: Sequence[Scenario], progress: Progress | None = None
            ) -> list[RunSummary | str]:
        results = []
        for job in jobs:
            results.append(run_job(job))
            if progress is not None:
                progress(1)
        return results

    def close(self) -> None:
        pass


def _fresh_workers() -> multiprocessing.context.BaseContext:
    """A start method whose workers share nothing with this process's heap: the fork
    server (started once, with the simulator imported, so each worker starts in a fork of
    it), else spawn."""
    if "forkserver" in multiprocessing.get_all_start_methods():
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(["clustersim.plan.executors", "clustersim.sim",
                                        "clustersim.metrics"])
        return context
    return multiprocessing.get_context("spawn")


class ProcessExecutor:
    """A local pool of worker processes, one per core by default.

    The workers start from a fresh interpreter (a fork server where the platform has one,
    else spawned), never as forks of the planner: by the time the first round runs, the
    planner holds every screened candidate (hundreds of megabytes at a thousand GPUs), and a
    forked worker's first garbage collection would touch, and so copy, all of it."""

    name = "process"

    def __init__(self, workers: int | None = None) -> None:
        self.workers = workers or os.cpu_count() or 1
        self._pool: ProcessPoolExecutor | None = None

    def map(self, jobs: Sequence[Scenario], progress: Progress | None = None
            ) -> list[RunSummary | str]:
        if self.workers == 1 or (len(jobs) <= 1 and self._pool is None):
            return SerialExecutor().map(jobs, progress)
        if self._pool is None:
            self._pool = ProcessPoolExecutor(max_workers=self.workers,
                                             mp_context=_fresh_workers())
        futures = {self._pool.submit(run_job, job): i for i, job in enumerate(jobs)}
        results: list[RunSummary | str | None] = [None] * len(jobs)
        for future in as_completed(futures):
            results[futures[future]] = future.result()
            if progress is not None:
                progress(1)
        return results  # type: ignore[return-value]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None


class RayExecutor:
    """The same jobs as Ray tasks: on a running cluster (``address``) or a local Ray."""

    name = "ray"

    def __init__(self, address: str | None = None) -> None:
        try:
            import ray
        except ImportError:
            raise ConfigError(
                "--executor", "ray is not installed: pip install 'clustersim[ray]'"
            ) from None
        self._ray = ray
        self._started = not ray.is_initialized()
        if self._started:
            if address is not None:
                check_ray_address(address)
            try:
                ray.init(address=address, ignore_reinit_error=True, log_to_driver=False,
                         include_dashboard=False)
            except Exception as error:  # noqa: BLE001  Ray's own words, in one line
                raise ConfigError("--address" if address is not None else "--executor",
                                  f"Ray could not start: {first_line(error)}") from None
        self._task = ray.remote(run_job)
        self.workers = max(1, int(ray.cluster_resources().get("CPU", 1)))

    def map(self, jobs: Sequence[Scenario], progress: Progress | None = None
            ) -> list[RunSummary | str]:
        ray = self._ray
        refs = [self._task.remote(job) for job in jobs]
        index = {ref: i for i, ref in enumerate(refs)}
        results: list[RunSummary | str | None] = [None] * len(jobs)
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                results[index[ref]] = ray.get(ref)
                if progress is not None:
                    progress(1)
        return results  # type: ignore[return-value]

    def close(self) -> None:
        if self._started:
            self._ray.shutdown()


RAY_CONNECT_TIMEOUT_S = 15.0
"""How long an address may take to accept a connection, and Ray to reach its head, before
the plan gives up on it."""
PROBE_LIMIT_S = 90.0
"""The most a Ray connection attempt may take in all (its own retries included): an address
that does not answer ends the plan within this."""
LOCAL_ADDRESSES = ("local",)
"""Addresses that start a Ray of this process's own: nothing to reach."""


def first_line(error: BaseException) -> str:
    """An exception's message, its first non-empty line (its type when it has none)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__


def parse_ray_address(address: str) -> tuple[str, int] | None:
    """(host, port) of ``HOST:PORT`` or ``ray://HOST:PORT``; None for ``auto`` (the cluster
    this machine runs, found by Ray) and ``local``. A malformed address is a ConfigError."""
    if address in ("auto", *LOCAL_ADDRESSES):
        return None
    text = address.removeprefix("ray://")
    host, sep, port = text.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")  # [IPv6]:port
    if not sep or not host or any(c.isspace() for c in host) or not port.isdigit() \
            or not 0 < int(port) < 65536:
        raise ConfigError("--address", f"{address!r} is not a Ray address: give HOST:PORT (the "
                          "head node's GCS port, 6379 unless changed), ray://HOST:PORT (Ray "
                          "Client) or auto (the cluster this machine belongs to)")
    return host, int(port)


def check_ray_address(address: str, timeout_s: float = RAY_CONNECT_TIMEOUT_S) -> None:
    """Refuse an address that is malformed or where no Ray cluster answers within
    ``timeout_s``, in one line, before Ray itself tries it: Ray retries an unreachable head
    for minutes and then ends the process. A port that accepts connections is then tried
    as a Ray cluster in a child process, which may die without taking the plan with it."""
    import socket
    import subprocess
    import sys

    target = parse_ray_address(address)
    if address in LOCAL_ADDRESSES:
        return
    if target is not None:
        host, port = target
        try:
            socket.create_connection((host, port), timeout=timeout_s).close()
        except OSError as error:
            why = error.strerror or type(error).__name__
            raise ConfigError("--address", f"no Ray cluster answers at {host}:{port} "
                              f"within {timeout_s:.0f} s ({why})") from None
    probe = ("import ray, sys\n"
             "ray.init(address=sys.argv[1], log_to_driver=False, include_dashboard=False)\n"
             "ray.shutdown()\n")
    wait = str(max(1, int(timeout_s)))
    env = {**os.environ, "RAY_gcs_rpc_server_reconnect_timeout_s": wait,
           "RAY_gcs_rpc_server_connect_timeout_s": wait}
    started = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-c", probe, address], env=env,
                              capture_output=True, text=True, timeout=PROBE_LIMIT_S)
    except subprocess.TimeoutExpired:
        raise ConfigError("--address", f"{address} did not answer as a Ray cluster within "
                          f"{PROBE_LIMIT_S:.0f} s") from None
    if done.returncode != 0:
        lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
        said = next((line for line in reversed(lines) if "Error" in line), None)
        hint = ""
        if os.environ.get("RAY_AUTH_MODE") != "token":
            hint = (" (a head started with token authentication, the default of `ray start` "
                    "in Ray 2.60, refuses a driver without it: set RAY_AUTH_MODE=token, with "
                    "the head's token in ~/.ray/auth_token or RAY_AUTH_TOKEN)")
        raise ConfigError("--address", f"{address} does not answer as a Ray cluster"
                          + (f": {said}" if said else
                             f" (tried for {time.monotonic() - started:.0f} s)") + hint)


def make_executor(kind: str, *, workers: int | None = None,
                  address: str | None = None) -> Executor:
    if address is not None and kind != "ray":
        raise ConfigError("--address", f"only with --executor ray (this plan runs on "
                          f"--executor {kind})")
    if kind == "serial":
        return SerialExecutor()
    if kind == "process":
        return ProcessExecutor(workers)
    if kind == "ray":
        return RayExecutor(address)
    raise ConfigError("--executor", f"unknown executor {kind!r}; known: serial, process, ray")
