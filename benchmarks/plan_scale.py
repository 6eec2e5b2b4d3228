"""What a plan of a large heterogeneous fleet costs: prints a table (no pass/fail).

    python benchmarks/plan_scale.py                         # 256, 512 and 1,024 GPUs
    python benchmarks/plan_scale.py --sizes 256 --executors process ray

Each size plans Llama-3.1-70B for a GPU budget of that many GPUs of two kinds, H100 SXM and
A100 80GB SXM servers (each pool may take either), TP4 or TP8 per pool, colocated, split and
three-pool layouts, traffic of the Azure conversation lengths at 0.6 req/s per GPU of the
budget, one traffic draw per candidate (``--seeds``) and no N+1 check: the plan's search and
its simulations at fleet scale, not its judgement. The planner runs in this process on the
executor named: ``process`` (a local pool, one worker per core) or ``ray`` (a local Ray
cluster this script starts and stops). Every row is printed as it ends.

Columns: candidates the plan weighed and simulated, the simulations it ran and the requests
they served, wall seconds, the planner's own peak RSS, and for the workers (every process
below this one, sampled each second from /proc: Linux only) the most any reached and the
most any grew between two idle moments (a second in which it used no CPU: between rounds,
holding no job, so that what it has is what it keeps), from its first after it has spent
``JOB_CPU_S`` of CPU past ``SETTLE_S`` after it appeared (its imports and a job) to its last; the
first 12 hex digits of the SHA-256 of the plan.json the plan would write (the same bytes on
every executor); the recommendation's label and goodput.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import os
import resource
import threading
import time
from pathlib import Path
from typing import Any

from clustersim import native
from clustersim.plan.executors import Executor, ProcessExecutor, RayExecutor
from clustersim.plan.planner import Planner
from clustersim.scenario import Scenario, parse_scenario

RATE_PER_GPU = 0.6
"""Offered req/s per GPU of the budget: about what a TP8 H100 instance of Llama-3.1-70B
carries per GPU within the MLPerf interactive SLO (``scenarios/llama70b_dgx_64.yaml``)."""
GPUS = ["h100-sxm", "a100-80gb-sxm"]


def scenario(num_gpus: int, seeds: int) -> Scenario:
    pools = {"gpus": GPUS, "tensor_parallel_sizes": [4, 8]}
    return parse_scenario({
        "name": f"llama70b-hetero-{num_gpus}",
        "seed": 0, "model": "llama-3.1-70b", "gpu": "h100-sxm", "tensor_parallel_size": 8,
        "engine": {"max_model_len": 16384},
        "workload": {"kind": "synthetic",
                     "arrivals": {"kind": "gamma", "rate_per_s": RATE_PER_GPU * num_gpus,
                                  "cv": 1.1},
                     "lengths": {"kind": "empirical", "trace": "azure-conv-2023"},
                     "num_requests": 2000},
        "slo": {"ttft_s": 0.45, "tpot_s": 0.04},
        "plan": {"objective": "max_goodput_per_gpu", "gpu_budget": num_gpus,
                 "layouts": ["colocated", "disaggregated", "three_pool"],
                 "colocated": pools, "prefill": pools, "decode": pools,
                 "search": {"seeds": seeds, "contenders": 1, "simulate_top": 2}},
    })


SETTLE_S = 30.0
"""A worker's growth is counted from its first idle moment after it has worked ``JOB_CPU_S``
past this long after it was first seen: before that it is importing clustersim and running its
first job, and a worker that waits for its first job (Ray starts its workers with the cluster,
before the screen) must not count that job's memory as growth."""
JOB_CPU_S = 1.0
"""CPU seconds that make a job: more than a Ray worker's background threads spend while it
waits (a tick now and then), less than one simulation of these plans."""


TICKS = os.sysconf("SC_CLK_TCK")
"""CPU clock ticks per second (what /proc/PID/stat counts in)."""


class Watch:
    """Samples the RSS and CPU time of every process below this one, once a second, from
    /proc."""

    def __init__(self) -> None:
        self.seen: dict[int, float] = {}
        self.cpu: dict[int, int] = {}
        self.first: dict[int, int] = {}
        self.last: dict[int, int] = {}
        self.peak: dict[int, int] = {}
        self.settled_cpu: dict[int, int] = {}
        """CPU ticks of each process at its first sample past SETTLE_S."""
        self.worked: set[int] = set()
        """Processes that have spent JOB_CPU_S since then."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        me = os.getpid()
        while not self._stop.wait(1.0):
            now = time.monotonic()
            for pid, (rss, cpu) in _descendants(me).items():
                idle = self.cpu.get(pid) == cpu
                self.cpu[pid] = cpu
                if now - self.seen.setdefault(pid, now) >= SETTLE_S:
                    if cpu - self.settled_cpu.setdefault(pid, cpu) >= JOB_CPU_S * TICKS:
                        self.worked.add(pid)
                    if idle and pid in self.worked:
                        self.first.setdefault(pid, rss)
                        self.last[pid] = rss
                self.peak[pid] = max(rss, self.peak.get(pid, 0))

    @property
    def max_peak_mb(self) -> float:
        return max(self.peak.values(), default=0) / 2**20

    @property
    def max_growth_mb(self) -> float:
        return max((self.last[p] - self.first[p] for p in self.last), default=0) / 2**20


def _descendants(root: int) -> dict[int, tuple[int, int]]:
    """pid -> (resident bytes, CPU clock ticks) of every live process whose ancestry reaches
    ``root``."""
    parent: dict[int, int] = {}
    sample: dict[int, tuple[int, int]] = {}
    page = os.sysconf("SC_PAGE_SIZE")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            statm = (entry / "statm").read_text().split()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # from field 3 (state) on
        parent[int(entry.name)] = int(fields[1])
        sample[int(entry.name)] = (int(statm[1]) * page, int(fields[11]) + int(fields[12]))
    out = {}
    for pid in sample:
        p, seen = pid, 0
        while p in parent and p != root and seen < 64:
            p, seen = parent[p], seen + 1
        if p == root and pid != root:
            out[pid] = sample[pid]
    return out


def run(num_gpus: int, kind: str, seeds: int, workers: int) -> dict[str, Any]:
    executor: Executor = ProcessExecutor(workers) if kind == "process" else RayExecutor("local")
    start = time.perf_counter()
    try:
        with Watch() as watch:
            result = Planner(scenario(num_gpus, seeds), executor, n_plus_one=False).run()
    finally:
        executor.close()
    wall = time.perf_counter() - start
    simulated = sum(1 for c in result.measured if c.status == "simulated")
    rec = result.recommended
    answer = "none"
    if rec is not None and rec.goodput is not None:
        answer = f"{rec.candidate.label()} at {rec.goodput.mean_per_s:,.2f} req/s"
    digest = hashlib.sha256()  # of plan.json's bytes, made as the CLI writes them
    for chunk in itertools.chain(result.json_chunks(), ["\n"]):
        digest.update(chunk.encode())
    return {
        "gpus": num_gpus, "executor": kind, "candidates": len(result.candidates),
        "simulated": simulated, "sims": result.num_simulations,
        "requests": result.num_simulated_requests, "wall_s": wall,
        "planner_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "worker_mb": watch.max_peak_mb, "growth_mb": watch.max_growth_mb, "answer": answer,
        "digest": digest.hexdigest()[:12],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[256, 512, 1024])
    parser.add_argument("--executors", nargs="+", choices=["process", "ray"],
                        default=["process"])
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    header = (f"{'GPUs':>5} {'executor':<8}{'cands':>9}{'simul':>6}{'sims':>6}{'sim req':>11}"
              f"{'wall s':>9}{'plan MB':>8}{'wkr MB':>8}{'grow MB':>8}{'plan.json':>14}"
              "  recommendation")
    print(header)
    print("-" * len(header))
    for num_gpus in args.sizes:
        for kind in args.executors:
            row = run(num_gpus, kind, args.seeds, args.workers)
            print(f"{row['gpus']:>5} {row['executor']:<8}{row['candidates']:>9,}"
                  f"{row['simulated']:>6}{row['sims']:>6}{row['requests']:>11,}"
                  f"{row['wall_s']:>9.1f}{row['planner_mb']:>8.0f}{row['worker_mb']:>8.0f}"
                  f"{row['growth_mb']:>8.0f}{row['digest']:>14}  {row['answer']}", flush=True)
    print(f"\nworkers: {args.workers} ({args.executors}); clustersim {native.status()}")


if __name__ == "__main__":
    main()
