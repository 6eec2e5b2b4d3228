"""clustersim against DistServe's own answer for its chatbot example: prints two tables.

    python benchmarks/distserve_compare.py [--workers N]

DistServe's simulator (simdistserve README) finds 1.56 req/s per GPU for OPT-13B on A100-80GB
with one TP2 prefill instance and one TP1 decode instance, SLO P90 TTFT 0.2 s and P90 TPOT
0.1 s, ShareGPT lengths. ``scenarios/distserve_opt13b.yaml`` is that layout; this script
measures its per-GPU goodput the way clustersim defines it, then with DistServe's definitions
one at a time, so the gap between the two answers is split into its parts:

    TTFT at the client      arrival -> the first token streamed from the decode instance, KV
                            handoff and the decode side's first step included (metrics.md)
    TTFT at prefill done    arrival -> the prefill instance's last chunk (DistServe's sim:
                            arrival -> first wait_decode; the handoff is not in it)
    DistServe's TPOT        decode time from prefill done / output tokens (vLLM's and ours:
                            (E2E - TTFT) / (output tokens - 1))
    DistServe's probe       300 requests per probe and one seed, as the README's run

The first table sets DistServe's fitted step-time model (their coefficients, shipped under
clustersim/data/calibration/fit/distserve/) beside clustersim's roofline on the same shapes.
"""

from __future__ import annotations

import argparse
import json
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from clustersim.catalog import load_gpu, load_model
from clustersim.cost.roofline import BatchShape, CostModel
from clustersim.plan.bisect import RateSearch, mean_interval
from clustersim.scenario import load_scenario
from clustersim.sim import run_scenario
from clustersim.workload.scale import offered_rate, scale_rate

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "distserve_opt13b.yaml"
COEFFICIENTS = (ROOT / "clustersim" / "data" / "calibration" / "fit" / "distserve"
                / "profiler-a100-80g.distserve.json")
DISTSERVE_PER_GPU = 1.56
"""simdistserve README, OPT-13B, 4 x A100-80GB, TTFT 200 ms / TPOT 100 ms at P90, N = 300."""
DEFINITIONS = {
    "clustersim (TTFT at the client)": ("client", "vllm", 1000, 3),
    "TTFT at prefill done": ("prefill", "vllm", 1000, 3),
    "  + DistServe's TPOT": ("prefill", "distserve", 1000, 3),
    "  + DistServe's probe (300 req, 1 seed)": ("prefill", "distserve", 300, 1),
}


def shares(job: tuple[float, int, int]) -> dict[tuple[str, str], tuple[float, float]]:
    """One run at ``rate`` (seed, requests): P90-marginal shares within the TTFT and TPOT
    limits for each pair of definitions."""
    rate, seed, num_requests = job
    base = load_scenario(SCENARIO)
    workload = scale_rate(base.workload, rate / offered_rate(base.workload))
    workload = workload.model_copy(update={"num_requests": num_requests})
    result = run_scenario(base.model_copy(update={"workload": workload, "seed": seed}))
    slo = base.slo
    done = [r for r in result.requests if r.first_token_s is not None]
    n = len(result.requests)
    arrival = np.array([r.arrival_s for r in done])
    first = np.array([r.first_token_s for r in done])
    prefilled = np.array([r.handoff_start_s for r in done])
    finish = np.array([r.finish_s for r in done])
    tokens = np.array([r.num_output_tokens for r in done], dtype=float)
    ttft = {"client": first - arrival, "prefill": prefilled - arrival}
    multi = tokens > 1
    vllm_tpot = np.where(multi, (finish - first) / np.maximum(tokens - 1, 1), 0.0)
    tpot = {"vllm": vllm_tpot, "distserve": (finish - prefilled) / tokens}
    return {(t, p): (float((ttft[t] <= slo.ttft_s).sum()) / n,
                     float((tpot[p] <= slo.tpot_s).sum()) / n)
            for t in ttft for p in tpot}


def goodput(pool: ProcessPoolExecutor, ttft: str, tpot: str, num_requests: int,
            seeds: int, start: float) -> list[float]:
    searches = [RateSearch(start, tolerance=0.02) for _ in range(seeds)]
    while True:
        batch = [(k, s.next_rate()) for k, s in enumerate(searches)]
        batch = [(k, rate) for k, rate in batch if rate is not None]
        if not batch:
            return [s.goodput for s in searches]
        results = pool.map(shares, [(rate, k, num_requests) for k, rate in batch])
        for (k, rate), table in zip(batch, results, strict=True):
            ttft_share, tpot_share = table[ttft, tpot]
            searches[k].record(rate, ttft_share >= 0.9 and tpot_share >= 0.9)


def step_times() -> list[tuple[str, float, float]]:
    """(shape, DistServe's fit ms, clustersim ms) for OPT-13B on A100-80GB."""
    coefficients = json.loads(COEFFICIENTS.read_text())["facebook/opt-13b"]
    model, gpu = load_model("opt-13b"), load_gpu("a100-80gb-sxm")
    rows = []
    for tp in (1, 2):
        c = coefficients[str(tp)]
        cost = CostModel(model, gpu, tp)
        for prompt in (512, 1536):
            a, b, q = c["prefill"]
            theirs = a + b * prompt + q * prompt**2  # one prompt: sum L, sum L^2
            ours = cost.step_time(BatchShape.from_chunks([(prompt, 0, True)])).time_s * 1e3
            rows.append((f"TP{tp} prefill of one {prompt}-token prompt", theirs, ours))
        for batch in (8, 32):
            key = ("decoding_smallbs" if batch < c["decoding_large_small_bs_threshold"]
                   else "decoding_largebs")
            a, b, q = c[key]
            theirs = a + b * batch * 513 + q * batch  # sum (context + 1), batch size
            shape = BatchShape.from_chunks([(1, 512, True)] * batch)
            ours = cost.step_time(shape).time_s * 1e3
            rows.append((f"TP{tp} decode of {batch} at 512 context", theirs, ours))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    print(f"{'step (OPT-13B, A100-80GB)':<38}{'DistServe fit ms':>17}{'clustersim ms':>15}")
    for shape, theirs, ours in step_times():
        print(f"{shape:<38}{theirs:>17.1f}{ours:>15.1f}")
    base = load_scenario(SCENARIO)
    gpus = sum(p.instances * (p.tensor_parallel_size or 1) for p in base.layout.pools)
    start = offered_rate(base.workload) / 2
    print(f"\n{'goodput of 1P TP2 + 1D TP1 (P90 each)':<44}{'req/s':>8}{'95% CI':>16}"
          f"{'per GPU':>9}")
    with ProcessPoolExecutor(args.workers) as pool:
        for label, (ttft, tpot, num_requests, seeds) in DEFINITIONS.items():
            values = goodput(pool, ttft, tpot, num_requests, seeds, start)
            mean, low, high = mean_interval(values)
            interval = f"{low:,.2f}-{high:,.2f}" if seeds > 1 else "-"
            print(f"{label:<44}{mean:>8.2f}{interval:>16}{mean / gpus:>9.3f}")
    print(f"{'DistServe simulator (simdistserve README)':<44}{DISTSERVE_PER_GPU * gpus:>8.2f}"
          f"{'-':>16}{DISTSERVE_PER_GPU:>9.3f}")


if __name__ == "__main__":
    main()
