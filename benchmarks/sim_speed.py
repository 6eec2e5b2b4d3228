"""How fast clustersim simulates, in simulated requests per wall-second: prints a table.

    python benchmarks/sim_speed.py                 # cases a, b, c
    python benchmarks/sim_speed.py --cases b --repeat 3
    python benchmarks/sim_speed.py --slow          # also case c pure and step by step (long)

Every case is a lean run (``record_steps=False``, what the planner runs) timed end to end in
a fresh subprocess, so that its peak RSS is its own: with coalesced decode runs on the
compiled core (``clustersim.native``), the same on the pure Python core, and step by step.
Each subprocess also measures SimPy's null-event rate (a process doing
``yield env.timeout(1)``), before the run and after its summary, and the table divides the
request rate by the mean of the two, so that figures from machines of different speed
compare. Columns: wall s = ``run_scenario`` (workload and cluster built, simulated to the
end); summary s = ``summarize_run`` on top; events = SimPy events scheduled; RSS = the
subprocess's peak resident memory.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NULL_EVENTS = 300_000
PURE_NOTE = "CLUSTERSIM_PURE=1 (clustersim's core modules as pure Python, as without a compiler)"


def _one_h100_azure_hour() -> dict:
    return {
        "name": "a-one-h100", "seed": 0, "model": "llama-3.1-8b", "gpu": "h100-sxm",
        "engine": {"max_model_len": 16384},
        "workload": {"kind": "replay", "trace": "azure-conv-2023", "rate_multiplier": 1.0},
    }


def _pd_8_plus_8_azure_x4() -> dict:
    return {
        "name": "b-pd-8p8d", "seed": 0, "model": "llama-3.1-8b", "gpu": "h100-sxm",
        "topology": "dgx-h100-x2", "engine": {"max_model_len": 16384},
        "layout": {
            "kind": "disaggregated",
            "pools": [{"name": "prefill", "role": "prefill", "instances": 8, "nodes": ["node0"]},
                      {"name": "decode", "role": "decode", "instances": 8, "nodes": ["node1"]}],
            "prefill_router": {"kind": "least_outstanding_tokens"},
            "decode_router": {"kind": "least_outstanding_requests"},
        },
        "workload": {"kind": "replay", "trace": "azure-conv-2023", "rate_multiplier": 4.0},
    }


def _three_class_64x(num_requests: int = 1_000_000) -> dict:
    # scenarios/three_class_mix.yaml's classes and per-instance rate (6 req/s keeps an H100
    # busy at 98 % SLO attainment), on 64 instances
    return {
        "name": "c-three-class-64", "seed": 2, "model": "qwen2.5-7b-instruct",
        "gpu": "h100-sxm", "engine": {"max_model_len": 32768, "enable_chunked_prefill": True},
        "layout": {"kind": "colocated", "pools": [{"name": "main", "instances": 64}]},
        "workload": {
            "kind": "synthetic", "arrivals": {"kind": "poisson", "rate_per_s": 6.0 * 64},
            "lengths": {"kind": "mixture", "classes": [
                {"name": "decode_baseline", "weight": 0.45},
                {"name": "short_interactive", "weight": 0.45},
                {"name": "long_document_16k", "weight": 0.10}]},
            "num_requests": num_requests,
        },
        "slo": {"ttft_s": 2.0, "tpot_s": 0.05},
    }


@dataclass(frozen=True)
class Case:
    description: str
    scenario: Callable[[], dict]
    stepped: bool = True
    """Also run it step by step by default (False: only with --slow)."""


CASES: dict[str, Case] = {
    "a": Case("1 H100 llama-3.1-8b, Azure conv 2023 hour x1", _one_h100_azure_hour),
    "b": Case("8P+8D H100 dgx-h100-x2, Azure conv 2023 x4", _pd_8_plus_8_azure_x4),
    "c": Case("64 H100 qwen2.5-7b, 3-class mix, 1M req", _three_class_64x, stepped=False),
    # "d": a full plan (`clustersim plan`) goes here once it lands: a Case whose scenario
    # factory is replaced by the plan's entry point, timed the same way.
}


def null_event_rate(n: int = NULL_EVENTS) -> float:
    """SimPy's own rate: events per second of a process that only waits."""
    import simpy

    env = simpy.Environment()

    def idle():
        for _ in range(n):
            yield env.timeout(1)

    env.process(idle())
    start = time.perf_counter()
    env.run()
    return n / (time.perf_counter() - start)


def worker(case: str, coalesce: bool) -> dict:
    """Runs in the subprocess: one case, one mode."""
    # a trace's reader imports pandas when it first reads one: once a process, not part of a
    # run's cost (imported here, outside the timer, as it was when the reader's module did)
    import pandas  # noqa: F401

    from clustersim import native
    from clustersim.metrics import summarize_run
    from clustersim.scenario import parse_scenario
    from clustersim.sim import run_scenario

    null_before = null_event_rate()
    scenario = parse_scenario(CASES[case].scenario())
    start = time.perf_counter()
    result = run_scenario(scenario, record_steps=False, coalesce=coalesce)
    wall = time.perf_counter() - start
    start = time.perf_counter()
    summary = summarize_run(result)
    summary_wall = time.perf_counter() - start
    # the machine's speed drifts from second to second: its rate around the run, not before it
    null_rate = (null_before + null_event_rate()) / 2
    return {
        "requests": len(result.requests),
        "steps": sum(i.num_steps for i in summary.instances),
        "events": result.num_events,
        "wall_s": wall,
        "summary_s": summary_wall,
        "null_rate": null_rate,
        "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "core": native.status(),
    }


def run_case(case: str, coalesce: bool, pure: bool = False) -> dict:
    from clustersim import native

    env = {**os.environ, native.PURE_ENV: "1" if pure else ""}
    out = subprocess.run(
        [sys.executable, __file__, "--worker", case, "--coalesce", str(int(coalesce))],
        check=True, capture_output=True, text=True, env=env,
    )
    return json.loads(out.stdout.splitlines()[-1])


MODES = (("coalesced", True, False), ("pure", True, True), ("stepped", False, False))
"""(label, coalesced, pure Python core): the compiled core coalesced, the same run on the
pure Python modules, and the compiled core one step per event."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated case keys")
    parser.add_argument("--repeat", type=int, default=1, help="runs per row; best shown")
    parser.add_argument("--slow", action="store_true", help="also the slow stepped runs")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--coalesce", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, bool(args.coalesce))))
        return
    header = (f"{'case':<50}{'mode':>10}{'requests':>10}{'steps':>11}{'events':>10}"
              f"{'wall s':>8}{'summ s':>7}{'req/s':>9}{'null ev/s':>11}{'ratio':>8}{'RSS MB':>8}")
    print(header)
    print("-" * len(header))
    cores = set()
    for key in args.cases.split(","):
        case = CASES[key]
        for mode, coalesce, pure in MODES:
            label = f"({key}) {case.description}"
            if mode != "coalesced" and not (case.stepped or args.slow):
                print(f"{label:<50}{mode:>10}   skipped (--slow runs it)")
                continue
            runs = [run_case(key, coalesce, pure) for _ in range(args.repeat)]
            r = min(runs, key=lambda run: run["wall_s"])
            rate = r["requests"] / r["wall_s"]
            if not pure:
                cores.add(r["core"])
            print(f"{label:<50}{mode:>10}"
                  f"{r['requests']:>10,}{r['steps']:>11,}{r['events']:>10,}{r['wall_s']:>8.2f}"
                  f"{r['summary_s']:>7.2f}{rate:>9,.0f}{r['null_rate']:>11,.0f}"
                  f"{rate / r['null_rate']:>8.4f}{max(x['rss_mb'] for x in runs):>8.0f}",
                  flush=True)
    print("\nlean runs (record_steps=False); req/s = requests / wall s; ratio = req/s over "
          "SimPy's null-event rate measured in the same subprocess (before and after the run, "
          "averaged); pure: the coalesced run "
          f"with {PURE_NOTE}.")
    print("coalesced and stepped rows: " + "; ".join(sorted(cores)))


if __name__ == "__main__":
    main()
