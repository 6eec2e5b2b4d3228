"""What one simulation of a prefill/decode split costs per request as the fleet grows: a table.

    python benchmarks/split_scale.py                      # 64, 256 and 1,024 GPUs
    python benchmarks/split_scale.py --sizes 64 256 --requests-per-gpu 8
    python benchmarks/split_scale.py --paths scoped whole-graph

Each size is the probe a plan of ``scenarios/llama70b_dgx_64.yaml`` runs for a split at that
GPU budget: Llama-3.1-70B, a quarter of the GPUs' worth of TP2 prefill instances and an eighth
of TP4 decode instances, on as many DGX H100 as they fill (``plan.fleet``: one leaf), traffic
at 40 req/s per 64 GPUs with ``--requests-per-gpu`` requests per GPU. Every (size, paths)
case runs in a fresh subprocess, as a lean run (``record_steps=False``, what the planner
runs), twice: ``first`` builds the topology and finds every path it needs, ``again`` is the
next probe in the same process (a plan's worker), which reuses both. Costs are CPU time
(``time.process_time``) per simulated request; ``path ms`` is the part of the first run spent
finding paths (``Topology._find``), ``pairs`` the GPU pairs it found paths for, ``x smallest``
the first run's cost over the smallest size's with the same paths.

``--paths scoped`` is clustersim's path search (two servers and the network per search, the
only shortest paths shared between servers of one shape); ``whole-graph`` replaces it with
:func:`clustersim.cluster.topology.whole_graph_path`, one search over the whole fleet per
GPU pair, kept per topology. Both give the same paths, so ``digest`` (of the first run's
summary) is the same in both rows of a size.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path

from clustersim import native
from clustersim.cluster.topology import Topology, whole_graph_path
from clustersim.metrics import summarize_run
from clustersim.plan.fleet import fleet_for, node_templates
from clustersim.plan.space import Candidate, PoolChoice, variant
from clustersim.scenario import Scenario, load_scenario
from clustersim.sim import run_scenario

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios/llama70b_dgx_64.yaml"
RATE_PER_64_GPUS = 40.0


def split_probe(num_gpus: int, requests_per_gpu: int) -> Scenario:
    """The plan's scenario for the split ``num_gpus / 4`` TP2 prefill + ``num_gpus / 8`` TP4
    decode instances, on the fleet the planner gives it."""
    base = load_scenario(SCENARIO)
    assert base.plan is not None
    candidate = Candidate("disaggregated",
                          (PoolChoice("prefill", "h100-sxm", 2, num_gpus // 4),
                           PoolChoice("decode", "h100-sxm", 4, num_gpus // 8)),
                          8192, True)
    scenario = variant(base, candidate, fleet_for(candidate, node_templates(base, base.plan)))
    workload = scenario.workload
    arrivals = workload.arrivals.model_copy(
        update={"rate_per_s": RATE_PER_64_GPUS * num_gpus / 64})
    return scenario.model_copy(update={"workload": workload.model_copy(
        update={"num_requests": requests_per_gpu * num_gpus, "arrivals": arrivals})})


def child(num_gpus: int, paths: str, requests_per_gpu: int) -> None:
    """One case, in this process: prints its figures as one JSON line."""
    # the scenario's trace reader imports pandas when it first reads one: once a process, not
    # part of a probe's cost (imported here, outside the timers, as it was when the reader's
    # module did)
    import pandas  # noqa: F401

    spent = [0.0, 0]
    scoped = Topology._find

    def find(topology: Topology, src: str, dst: str) -> list[tuple[str, str]] | None:
        if paths == "whole-graph":
            return whole_graph_path(topology, src, dst)
        return scoped(topology, src, dst)

    def timed_find(topology: Topology, src: str, dst: str) -> list[tuple[str, str]] | None:
        start = time.process_time()
        try:
            return find(topology, src, dst)
        finally:
            spent[0] += time.process_time() - start
            spent[1] += 1

    Topology._find = timed_find  # type: ignore[method-assign, assignment]
    scenario = split_probe(num_gpus, requests_per_gpu)
    num_requests = requests_per_gpu * num_gpus
    costs: list[float] = []
    digest = ""
    first_paths = (0.0, 0)
    for attempt in range(2):
        start = time.process_time()
        result = run_scenario(scenario, record_steps=False)
        costs.append((time.process_time() - start) / num_requests)
        if not attempt:
            summary = summarize_run(result)
            digest = hashlib.sha256(repr(summary).encode()).hexdigest()[:12]
            first_paths = (spent[0], int(spent[1]))
    print(json.dumps({"gpus": num_gpus, "paths": paths, "requests": num_requests,
                      "first_us": costs[0] * 1e6, "again_us": costs[1] * 1e6,
                      "path_ms": first_paths[0] * 1e3, "pairs": first_paths[1],
                      "digest": digest, "core": native.status()}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 256, 1024])
    parser.add_argument("--paths", nargs="+", choices=["scoped", "whole-graph"],
                        default=["scoped"])
    parser.add_argument("--requests-per-gpu", type=int, default=16)
    parser.add_argument("--child", nargs=2, metavar=("GPUS", "PATHS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(int(args.child[0]), args.child[1], args.requests_per_gpu)
        return
    if any(size % 64 for size in args.sizes):
        parser.error("sizes are multiples of 64 GPUs (whole DGX H100 servers for both pools)")
    header = (f"{'GPUs':>6}{'paths':>13}{'requests':>10}{'first us/req':>14}"
              f"{'x smallest':>11}{'again us/req':>14}{'path ms':>10}{'pairs':>8}"
              f"{'digest':>14}")
    print(header)
    print("-" * len(header))
    core = ""
    first: dict[str, float] = {}
    for size in args.sizes:
        for paths in args.paths:
            out = subprocess.run(
                [sys.executable, __file__, "--child", str(size), paths,
                 "--requests-per-gpu", str(args.requests_per_gpu)],
                check=True, capture_output=True, text=True, cwd=ROOT).stdout
            row = json.loads(out.strip().splitlines()[-1])
            core = row["core"]
            first.setdefault(paths, row["first_us"])
            ratio = row["first_us"] / first[paths]
            print(f"{size:>6}{paths:>13}{row['requests']:>10,}{row['first_us']:>14,.0f}"
                  f"{ratio:>11.2f}{row['again_us']:>14,.0f}{row['path_ms']:>10,.0f}"
                  f"{row['pairs']:>8,}{row['digest']:>14}", flush=True)
    print(f"\nclustersim {core}")


if __name__ == "__main__":
    main()
