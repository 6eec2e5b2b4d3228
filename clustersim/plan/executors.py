"""Where the planner's simulations run: in this process, in a local process pool, or on Ray.

A job is a scenario (its file paths already resolved, so a worker on another machine reads
nothing relative to the caller's folder); a worker runs it lean (no per-step records) and
returns its :class:`~clustersim.metrics.RunSummary`, a few kilobytes. Results come back in
submission order whatever order the workers finish in, so a plan does not depend on the
executor: the same scenario and seed give the same plan serially, on 16 cores or on a cluster.

Ray is imported only here, and only when asked for (``pip install 'clustersim[ray]'``).
"""

from __future__ import annotations

import os
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


class ProcessExecutor:
    """A local pool of worker processes, one per core by default."""

    name = "process"

    def __init__(self, workers: int | None = None) -> None:
        self.workers = workers or os.cpu_count() or 1
        self._pool: ProcessPoolExecutor | None = None

    def map(self, jobs: Sequence[Scenario], progress: Progress | None = None
            ) -> list[RunSummary | str]:
        if self.workers == 1 or len(jobs) <= 1:
            return SerialExecutor().map(jobs, progress)
        if self._pool is None:
            self._pool = ProcessPoolExecutor(max_workers=self.workers)
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
            ray.init(address=address, ignore_reinit_error=True, log_to_driver=False,
                     include_dashboard=False)
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


def make_executor(kind: str, *, workers: int | None = None,
                  address: str | None = None) -> Executor:
    if kind == "serial":
        return SerialExecutor()
    if kind == "process":
        return ProcessExecutor(workers)
    if kind == "ray":
        return RayExecutor(address)
    raise ConfigError("--executor", f"unknown executor {kind!r}; known: serial, process, ray")
