"""How fast the single-instance engine simulates: prints a table (no pass/fail).

    python benchmarks/engine_speed.py [--repeat N]

Each case is a scenario run end to end in-process (no file output); the table gives wall time,
engine steps per wall second, and simulated seconds per wall second. Run it before and after a
change that could touch the step loop.
"""

from __future__ import annotations

import argparse
import time
import tracemalloc
from pathlib import Path

from clustersim.scenario import load_scenario, parse_scenario
from clustersim.sim import run_scenario

ROOT = Path(__file__).resolve().parents[1]

CASES = {
    "quickstart (4090, 300 req mix)": lambda: load_scenario(ROOT / "scenarios/quickstart.yaml"),
    "h100 llama-8b 2000 req, 20/s": lambda: parse_scenario({
        "name": "bench-h100", "seed": 1, "model": "llama-3.1-8b", "gpu": "h100-sxm",
        "workload": {"kind": "poisson", "rate_per_s": 20.0, "num_requests": 2000,
                     "prompt_tokens": {"kind": "uniform", "low": 100, "high": 2000},
                     "output_tokens": {"kind": "uniform", "low": 50, "high": 500}},
    }),
    "p/d 2+2 h100, azure conv x8 (603 req)": lambda: load_scenario(
        ROOT / "scenarios/pd_azure_conv_dgx.yaml"
    ),
    "a100 llama-8b overloaded, preempting": lambda: parse_scenario({
        "name": "bench-a100", "seed": 2, "model": "llama-3.1-8b", "gpu": "a100-40gb-sxm",
        "engine": {"max_model_len": 8192},
        "workload": {"kind": "poisson", "rate_per_s": 40.0, "num_requests": 1000,
                     "prompt_tokens": {"kind": "uniform", "low": 500, "high": 4000},
                     "output_tokens": {"kind": "uniform", "low": 200, "high": 1000}},
    }),
    "qwen3-30b-a3b dp4 x ep h100, 2000 req": lambda: parse_scenario({
        "name": "bench-dp-moe", "seed": 3, "model": "qwen3-30b-a3b", "gpu": "h100-sxm",
        "data_parallel_size": 4, "enable_expert_parallel": True,
        "workload": {"kind": "poisson", "rate_per_s": 40.0, "num_requests": 2000,
                     "prompt_tokens": {"kind": "uniform", "low": 100, "high": 2000},
                     "output_tokens": {"kind": "uniform", "low": 50, "high": 500}},
    }),
}


def measure(make, repeat: int, memory: bool) -> tuple[float, object, float | None]:
    """Best wall time over ``repeat`` runs; peak Python heap from one extra traced run."""
    best_wall, best_result = float("inf"), None
    for _ in range(repeat):
        scenario = make()
        start = time.perf_counter()
        result = run_scenario(scenario)
        wall = time.perf_counter() - start
        if wall < best_wall:
            best_wall, best_result = wall, result
    peak = None
    if memory:  # tracemalloc slows the run several-fold, so it never shares a timed run
        tracemalloc.start()
        run_scenario(make())
        peak = tracemalloc.get_traced_memory()[1] / 1e6
        tracemalloc.stop()
    return best_wall, best_result, peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per case; best shown")
    parser.add_argument("--memory", action="store_true", help="also trace peak Python heap")
    args = parser.parse_args()
    header = (f"{'case':<40}{'requests':>9}{'steps':>9}{'preempt':>9}{'wall s':>9}"
              f"{'steps/s':>10}{'sim s/wall s':>14}{'peak MB':>9}")
    print(header)
    print("-" * len(header))
    for name, make in CASES.items():
        wall, result, peak = measure(make, args.repeat, args.memory)
        steps = len(result.steps)
        preemptions = sum(r.num_preemptions for r in result.requests)
        peak_text = "-" if peak is None else f"{peak:.1f}"
        print(f"{name:<40}{len(result.requests):>9}{steps:>9}{preemptions:>9}{wall:>9.2f}"
              f"{steps / wall:>10,.0f}{result.end_s / wall:>14,.1f}{peak_text:>9}")
    print("\nwall: best of --repeat runs of run_scenario (no CSV writing); peak MB: Python heap "
          "of a separate traced run (--memory).")


if __name__ == "__main__":
    main()
