"""A planner's worker runs job after job in one process: its memory must not grow with the
number of jobs (each run's cluster, clock and requests form cycles, freed only by the cyclic
collector)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from clustersim.metrics import RunSummary
from clustersim.plan.executors import run_job
from clustersim.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[1]
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def resident_mb() -> float:
    """This process's resident memory now (Linux's /proc/self/statm)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE_BYTES / 2**20


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
def test_fifty_jobs_in_one_process_run_in_constant_memory():
    scenario = load_scenario(ROOT / "scenarios" / "quickstart.yaml")
    workload = scenario.workload.model_copy(update={"num_requests": 1000})
    resident = []
    for k in range(50):
        job = scenario.model_copy(update={"seed": scenario.seed + k, "workload": workload})
        assert isinstance(run_job(job), RunSummary)
        resident.append(resident_mb())
    # without the collections each job left about 3 MB behind (over 100 MB in these 40 jobs)
    assert resident[-1] - resident[9] < 20, [round(r) for r in resident]


def _worker_resident_mb(_: object) -> float:
    """A pool worker's resident memory (a job for the pool: it runs there)."""
    return resident_mb()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
def test_pool_workers_do_not_carry_the_planners_heap():
    """A planner holds every screened candidate when its first round starts; a worker forked
    from it then would copy that heap into its own at its first collection. The pool's
    workers start from a fork server instead."""
    from clustersim.plan.executors import ProcessExecutor

    ballast = [[i, (i, i)] for i in range(1_500_000)]  # about 250 MB, as a planner's ledger
    grown = resident_mb()
    executor = ProcessExecutor(2)
    try:
        executor.map([load_scenario(ROOT / "scenarios" / "quickstart.yaml")] * 2)  # start it
        pool = executor._pool
        assert pool is not None
        workers = list(pool.map(_worker_resident_mb, range(4)))
    finally:
        executor.close()
    assert len(ballast) and grown > 250
    assert max(workers) < grown - 150, (grown, workers)
