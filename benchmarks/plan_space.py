"""How long the planner takes to enumerate and screen its search space, and the memory it
needs, as ``plan.gpu_budget`` grows: prints a table.

    python benchmarks/plan_space.py                          # 64, 512, 4096 GPUs
    python benchmarks/plan_space.py --budgets 64,512 --layouts three_pool --limit 120

Each case runs in a fresh subprocess (its peak RSS is its own): the planner of
``scenarios/three_class_mix.yaml`` with ``max_goodput_per_gpu`` over one layout kind, every
pool at ``--tp``, walks ``Planner.candidates()`` and screens each candidate as it comes
(``--no-screen``: enumeration alone; ``--ledger``: as a plan does it, every verdict kept for
the ledger and the survivors picked, then the ledger read through once in its order, as
``plan.json`` is written). A case that runs past ``--limit`` seconds is killed and shown as
such. Columns: candidates = the sizes that fill the budget (every family); enumerate s /
screen s = wall time of each part (with ``--ledger``: screen s includes keeping the verdicts,
and ledger s is the read); RSS MB = the subprocess's peak resident memory; runs = the ledger's
sorted runs on disk.
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
budget, tp, mode = int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
scenario = load_scenario(path)
plan = scenario.plan.model_copy(update={
    "objective": "max_goodput_per_gpu", "gpu_budget": budget, "layouts": [layout],
    "colocated": scenario.plan.colocated.model_copy(update={"tensor_parallel_sizes": [tp]}),
    "prefill": scenario.plan.prefill.model_copy(update={"tensor_parallel_sizes": [tp]}),
    "decode": scenario.plan.decode.model_copy(update={"tensor_parallel_sizes": [tp]}),
})
planner = Planner(scenario.model_copy(update={"plan": plan}), SerialExecutor())
if mode == "ledger":
    from clustersim.plan.ledger import Ledger
    from clustersim.plan.planner import VerdictRow
    started = time.perf_counter()
    verdicts, chosen = planner.screen_space()
    screened = time.perf_counter()
    ledger = Ledger([], verdicts, VerdictRow(planner.prices))
    rows = sum(1 for _ in ledger)
    assert rows == len(verdicts)
    print(json.dumps({"candidates": rows, "enumerate_s": 0.0,
                      "screen_s": screened - started, "ledger_s": time.perf_counter() - screened,
                      "runs": ledger.spilled,
                      "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
    sys.exit(0)
screen = mode == "screen"
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


def run_case(layout: str, budget: int, tp: int, mode: str, limit_s: float) -> dict | None:
    try:
        done = subprocess.run(
            [sys.executable, "-c", CHILD, str(SCENARIO), layout, str(budget), str(tp), mode],
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
    parser.add_argument("--ledger", action="store_true",
                        help="screen and keep the verdicts as a plan does, then read the ledger")
    parser.add_argument("--limit", type=float, default=300.0,
                        help="seconds a case may take before it is killed")
    args = parser.parse_args()
    mode = "ledger" if args.ledger else "enumerate" if args.no_screen else "screen"
    header = (f"{'layout':<14}{'budget':>7}{'TP':>4}{'candidates':>12}{'enumerate s':>13}"
              f"{'screen s':>10}" + (f"{'ledger s':>10}{'runs':>6}" if args.ledger else "")
              + f"{'RSS MB':>9}")
    print(header)
    print("-" * len(header))
    for layout in args.layouts.split(","):
        for budget in (int(b) for b in args.budgets.split(",")):
            got = run_case(layout, budget, args.tp, mode, args.limit)
            if got is None:
                print(f"{layout:<14}{budget:>7}{args.tp:>4}  over the {args.limit:.0f} s limit",
                      flush=True)
                continue
            print(f"{layout:<14}{budget:>7}{args.tp:>4}{got['candidates']:>12,}"
                  f"{got['enumerate_s']:>13.2f}{got['screen_s']:>10.2f}"
                  + (f"{got['ledger_s']:>10.2f}{got['runs']:>6}" if args.ledger else "")
                  + f"{got['rss_mb']:>9.0f}",
                  flush=True)


if __name__ == "__main__":
    main()
