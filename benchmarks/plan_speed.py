"""How long a full plan takes: prints a table (no pass/fail).

    python benchmarks/plan_speed.py [--scenario scenarios/llama70b_dgx_64.yaml] [--workers N]

Runs ``clustersim plan``'s planner in-process on a local process pool (one worker per core
by default) and reports the candidates it weighed, the simulations it ran, the requests they
simulated and the wall time, with SimPy's own null-event rate measured in the same run so
that the figures compare across machines as ratios.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import simpy

from clustersim import native
from clustersim.plan.executors import ProcessExecutor
from clustersim.plan.planner import Planner
from clustersim.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[1]


def null_event_rate(n: int = 200_000) -> float:
    """SimPy timeouts per wall second with nothing else to do."""
    env = simpy.Environment()

    def tick(env):
        for _ in range(n):
            yield env.timeout(1)

    env.process(tick(env))
    start = time.perf_counter()
    env.run()
    return n / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default=str(ROOT / "scenarios/llama70b_dgx_64.yaml"))
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    scenario = load_scenario(args.scenario)
    null_rate = null_event_rate()
    pool = ProcessExecutor(args.workers)
    start = time.perf_counter()
    try:
        result = Planner(scenario, pool).run()
    finally:
        pool.close()
    wall = time.perf_counter() - start
    statuses: dict[str, int] = {}
    for c in result.candidates:
        statuses[c.status] = statuses.get(c.status, 0) + 1
    requests = result.num_simulated_requests
    header = (f"{'scenario':<22}{'candidates':>11}{'simulated':>10}{'screened':>9}"
              f"{'pruned':>7}{'sims':>6}{'sim req':>10}{'wall s':>8}{'req/s wall':>11}"
              f"{'workers':>8}{'null ev/s':>11}")
    print(header)
    print("-" * len(header))
    print(f"{result.scenario:<22}{len(result.candidates):>11}"
          f"{statuses.get('simulated', 0) + statuses.get('infeasible', 0):>10}"
          f"{statuses.get('screened', 0):>9}{statuses.get('pruned', 0):>7}"
          f"{result.num_simulations:>6}{requests:>10,}{wall:>8.1f}{requests / wall:>11,.0f}"
          f"{args.workers:>8}{null_rate:>11,.0f}")
    rec = result.recommended
    print(f"\nrecommended: {rec.candidate.label() if rec else 'none'}"
          + (f", goodput {rec.goodput.mean_per_s:,.2f} req/s" if rec else ""))
    print("sims: simulations run (bisection probes, cliff and N+1 runs, the answer's layouts at "
          "their operating rates, and the split rule's pair); sim req: the requests they "
          "served; req/s wall: simulated requests per wall second of the whole plan, screen "
          "included.")
    print(f"clustersim {native.status()}")


if __name__ == "__main__":
    main()
