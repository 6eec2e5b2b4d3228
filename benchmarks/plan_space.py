"""How long the planner takes to enumerate and screen its search space, and the memory it
needs, as ``plan.gpu_budget`` grows: prints a table.

    python benchmarks/plan_space.py                          # 64, 512, 4096 GPUs
    python benchmarks/plan_space.py --budgets 64,512 --layouts three_pool --limit 120

Each case runs in a fresh subprocess (its peak RSS is its own): the planner of
``scenarios/three_class_mix.yaml`` with ``max_goodput_per_gpu`` over one layout kind, every
pool at ``--tp``, walks ``Planner.candidates()`` and screens each candidate as it comes
(``--no-screen``: enumeration alone). A case that runs past ``--limit`` seconds is killed and
shown as such. Columns: candidates = the sizes that fill the budget (every family);
enumerate s / screen s = wall time of each part; RSS MB = the subprocess's peak resident
memory.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "three_class_mix.yaml"

CHILD = r"""
import json, resource, sys, time
from clustersim.plan.executors import SerialExecutor
from clustersim.plan.planner import Planner
from clustersim.scenario import load_scenario

path, layout = sys.argv[1], sys.argv[2]
budget, tp, screen = int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1"
scenario = load_scenario(path)
plan = scenario.plan.model_copy(update={
    "objective": "max_goodput_per_gpu", "gpu_budget": budget, "layouts": [layout],
    "colocated": scenario.plan.colocated.model_copy(update={"tensor_parallel_sizes": [tp]}),
    "prefill": scenario.plan.prefill.model_copy(update={"tensor_parallel_sizes": [tp]}),
    "decode": scenario.plan.decode.model_copy(update={"tensor_parallel_sizes": [tp]}),
})
planner = Planner(scenario.model_copy(update={"plan": plan}), SerialExecutor())
started = time.perf_counter()
count = screened = 0
enumerate_s = 0.0
last = started
for candidate in planner.candidates():
    count += 1
    now = time.perf_counter()
    enumerate_s += now - last
    if screen:
        planner.screen(candidate)
    last = time.perf_counter()
enumerate_s += time.perf_counter() - last
total_s = time.perf_counter() - started
print(json.dumps({"candidates": count, "enumerate_s": enumerate_s,
                  "screen_s": total_s - enumerate_s,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def run_case(layout: str, budget: int, tp: int, screen: bool, limit_s: float) -> dict | None:
    try:
        done = subprocess.run(
            [sys.executable, "-c", CHILD, str(SCENARIO), layout, str(budget), str(tp),
             "1" if screen else "0"],
            capture_output=True, text=True, timeout=limit_s, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return None
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budgets", default="64,512,4096")
    parser.add_argument("--layouts", default="colocated,disaggregated,three_pool")
    parser.add_argument("--tp", type=int, default=1, help="tensor parallelism of every pool")
    parser.add_argument("--no-screen", action="store_true", help="enumerate only")
    parser.add_argument("--limit", type=float, default=300.0,
                        help="seconds a case may take before it is killed")
    args = parser.parse_args()
    header = (f"{'layout':<14}{'budget':>7}{'TP':>4}{'candidates':>12}{'enumerate s':>13}"
              f"{'screen s':>10}{'RSS MB':>9}")
    print(header)
    print("-" * len(header))
    for layout in args.layouts.split(","):
        for budget in (int(b) for b in args.budgets.split(",")):
            got = run_case(layout, budget, args.tp, not args.no_screen, args.limit)
            if got is None:
                print(f"{layout:<14}{budget:>7}{args.tp:>4}  over the {args.limit:.0f} s limit",
                      flush=True)
                continue
            print(f"{layout:<14}{budget:>7}{args.tp:>4}{got['candidates']:>12,}"
                  f"{got['enumerate_s']:>13.2f}{got['screen_s']:>10.2f}{got['rss_mb']:>9.0f}",
                  flush=True)


if __name__ == "__main__":
    main()
