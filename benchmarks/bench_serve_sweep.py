"""clustersim against a published ``vllm bench serve --max-concurrency`` sweep on an RTX 4090.

    python benchmarks/bench_serve_sweep.py

mushfiqrahman.dev, "Benchmarking Mistral-7B on RTX 4090: vLLM Concurrency, Latency, and
Capacity Planning", Part 1: Mistral-7B-Instruct-v0.3 on one RTX 4090 under ``vllm serve``,
300 random prompts of 256 tokens (128 requested, about 100 streamed), request rate inf,
max concurrency 4 to 48. ``scenarios/bench_rtx4090_mistral7b.yaml`` is its C = 16 point; this
script runs every concurrency of the sweep with the API server's measured defaults, with its
jitter set to 0 (lockstep), and without it, and prints each beside the published figures. The
published run is a check only: nothing in clustersim was fitted on it.
"""

from __future__ import annotations

from pathlib import Path

from clustersim.metrics import summarize_run
from clustersim.scenario import load_scenario
from clustersim.sim import run_scenario

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "bench_rtx4090_mistral7b.yaml"
PUBLISHED = {  # max concurrency: (req/s, output tok/s, mean, median, p99 TTFT ms)
    4: (2.09, 210, 63, 53, 157),
    8: (3.78, 377, 79, 55, 268),
    16: (6.44, 644, 155, 97, 503),
    32: (9.73, 975, 362, 277, 938),
    48: (11.87, 1190, 667, 840, 1483),
}
VARIANTS = {"api server": {}, "no jitter": {"jitter_cv": 0.0}, "no api server": None}


def run(concurrency: int, api_server: dict | None) -> tuple[float, ...]:
    base = load_scenario(SCENARIO)
    workload = base.workload.model_copy(update={"max_concurrency": concurrency})
    scenario = base.model_copy(update={"workload": workload, "api_server": (
        None if api_server is None else base.api_server.model_copy(update=api_server))})
    summary = summarize_run(run_scenario(scenario, record_steps=False))
    bench, ttft = summary.benchmark, summary.ttft_s
    return (bench.request_throughput, bench.output_throughput, ttft.mean * 1e3,
            ttft.p50 * 1e3, ttft.p99 * 1e3)


def main() -> None:
    names = ("req/s", "output tok/s", "TTFT mean ms", "TTFT p50 ms", "TTFT p99 ms")
    print(f"{'C':>3}  {'':<14}" + "".join(f"{n:>19}" for n in names))
    for concurrency, published in PUBLISHED.items():
        print(f"{concurrency:>3}  {'published':<14}" + "".join(f"{v:>19,.2f}" for v in published))
        for label, api_server in VARIANTS.items():
            ours = run(concurrency, api_server)
            cells = "".join(f"{v:>12,.2f} {(v - p) / p:>+6.0%}"
                            for v, p in zip(ours, published, strict=True))
            print(f"{'':>3}  {label:<14}{cells}")


if __name__ == "__main__":
    main()
