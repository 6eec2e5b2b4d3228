"""Replay the four real vLLM 0.19 serving runs and compare TTFT, TPOT and E2E distributions.

Validation data only. Each run's 300 requests are replayed with their measured arrival times
(``queued_ts``, the engine's clock, as upstream's validator does), prompt and output lengths,
the run's engine arguments, and its KV size where the log recorded one (``num_gpu_blocks``);
otherwise vLLM's default ``gpu_memory_utilization`` 0.9 and clustersim's memory model decide
it. Zero-shot: the shipped calibrated profile, nothing else from the run.

Few-shot (``FEW_SHOT_RULE``) adds three measurements a user of the deployment has: the first
request's TTFT (it reaches an idle engine: a pure prefill) and two decode step times read off
vLLM's periodic log (the 1-s samples of ``vllm_timeseries.csv``: ``running`` requests /
generation tokens per s = seconds per step), then replays the run with the adjusted profile.
"""

from __future__ import annotations

import csv
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from clustersim.calibration.fewshot import fit_few_shot
from clustersim.calibration.sources import VLLM_RUNS_DIR
from clustersim.catalog import load_gpu, load_model, profile_entry
from clustersim.cost.roofline import BatchShape
from clustersim.metrics import request_metrics
from clustersim.scenario import parse_scenario
from clustersim.sim import run_scenario

RUNS = {
    "RTX4090_Llama-3.1-8B": ("llama-3.1-8b", "rtx4090"),
    "RTXPRO6000_Llama-3.1-8B": ("llama-3.1-8b", "rtx-pro-6000-server"),
    "RTXPRO6000_Qwen3-32B": ("qwen3-32b", "rtx-pro-6000-server"),
    "RTXPRO6000_Qwen3-30B-A3B-Instruct-2507": ("qwen3-30b-a3b", "rtx-pro-6000-server"),
}
"""Run folder -> (catalog model, catalog GPU)."""
FEW_SHOT_RULE = (
    "the first request's TTFT as the prefill time of its prompt (chunked by "
    "max_num_batched_tokens), and the decode step times (running / generation tok/s) of the "
    "vLLM log samples without prompt tokens that have the most and the fewest running "
    "requests, at the workload's mean context (mean prompt + mean output / 2)"
)
METRICS = ("ttft_s", "tpot_s", "e2e_s")
STATS = ("mean", "p50", "p90", "p99")
_ENGINE_ARGS = ("max_num_seqs", "max_num_batched_tokens", "max_model_len")
_VLLM_DEFAULT_GPU_MEMORY_UTILIZATION = 0.9


@dataclass(frozen=True)
class RunScore:
    run: str
    mode: str
    model: str
    gpu: str
    tp: int
    num_gpu_blocks: int | None
    measured: dict[str, dict[str, float]]
    simulated: dict[str, dict[str, float]]

    def error_pct(self, metric: str, stat: str) -> float:
        m, s = self.measured[metric][stat], self.simulated[metric][stat]
        return (s - m) / m * 100


def run_scenario_dict(run: str, root: Path = VLLM_RUNS_DIR) -> dict:
    """The scenario (as a dict) that replays ``run`` from its requests and meta file."""
    model, gpu = RUNS[run]
    folder = root / run
    meta = json.loads((folder / "vllm_meta.json").read_text())
    args = meta["engine_kwargs"]
    kv = meta.get("kv_cache") or {}
    engine = {k: args[k] for k in _ENGINE_ARGS if args.get(k) is not None}
    engine["gpu_memory_utilization"] = kv.get(
        "gpu_memory_utilization", _VLLM_DEFAULT_GPU_MEMORY_UTILIZATION
    )
    engine["enable_prefix_caching"] = kv.get("enable_prefix_caching", True)
    if meta.get("vllm_version"):  # its start-up memory profile, where the log did not say
        engine["vllm_version"] = ".".join(meta["vllm_version"].split(".")[:2])
    if kv.get("num_gpu_blocks"):
        engine["num_gpu_blocks_override"] = kv["num_gpu_blocks"]
    if kv.get("block_size"):
        engine["block_size"] = kv["block_size"]
    records = _records(folder)
    start = min(r["queued_ts"] for r in records)
    requests = [
        {"id": r["request_id"], "arrival_s": r["queued_ts"] - start,
         "prompt_tokens": r["input_toks"], "output_tokens": r["output_toks"]}
        for r in records
    ]
    return {
        "name": f"validate-{run}",
        "model": model,
        "gpu": gpu,
        "tensor_parallel_size": args.get("tensor_parallel_size", 1),
        "data_parallel_size": args.get("data_parallel_size") or 1,
        "enable_expert_parallel": bool(args.get("enable_expert_parallel")),
        "engine": engine,
        "workload": {"kind": "explicit", "requests": requests},
    }


def measured_metrics(run: str, root: Path = VLLM_RUNS_DIR) -> dict[str, np.ndarray]:
    """Per-request TTFT, TPOT, E2E of the real run (definitions of upstream's validator)."""
    records = _records(root / run)
    ttft = [r["first_token_ts"] - r["queued_ts"] for r in records]
    tpot = [(r["last_token_ts"] - r["first_token_ts"]) / (r["output_toks"] - 1)
            for r in records if r["output_toks"] > 1]
    e2e = [r["last_token_ts"] - r["queued_ts"] for r in records]
    return {"ttft_s": np.array(ttft), "tpot_s": np.array(tpot), "e2e_s": np.array(e2e)}


def few_shot_points(run: str, root: Path = VLLM_RUNS_DIR) -> list[tuple[list[BatchShape], float]]:
    """The three measurements of ``FEW_SHOT_RULE``: ``(steps, seconds)`` each."""
    folder = root / run
    records = _records(folder)
    args = json.loads((folder / "vllm_meta.json").read_text())["engine_kwargs"]
    budget = args["max_num_batched_tokens"]
    dp = args.get("data_parallel_size") or 1
    first = min(records, key=lambda r: r["queued_ts"])
    prompt, done, steps = first["input_toks"], 0, []
    while done < prompt:
        chunk = min(budget, prompt - done)
        steps.append(BatchShape.from_chunks([(chunk, done, done + chunk == prompt)]))
        done += chunk
    points = [(steps, first["first_token_ts"] - first["queued_ts"])]
    with (folder / "vllm_timeseries.csv").open(newline="") as file:
        samples = [row for row in csv.DictReader(file)
                   if float(row["prompt_throughput"]) == 0 and float(row["running"]) > 0
                   and float(row["gen_throughput"]) > 0]
    context = round(np.mean([r["input_toks"] for r in records])
                    + np.mean([r["output_toks"] for r in records]) / 2)
    by_batch = sorted(samples, key=lambda row: (float(row["running"]), float(row["t"])))
    for row in (by_batch[-1], by_batch[0]):
        running = int(float(row["running"]))
        step_s = running / float(row["gen_throughput"])
        # data-parallel ranks: the log counts the group; the balancer splits it evenly
        per_rank = max(1, round(running / dp))
        points.append(([BatchShape.from_chunks([(1, context, True)] * per_rank)], step_s))
    return points


def full_decode_step_ms(run: str, root: Path = VLLM_RUNS_DIR) -> list[float]:
    """Step times (ms) of the log's decode-only seconds with ``max_num_seqs`` requests running:
    running / generation tokens per second."""
    folder = root / run
    cap = json.loads((folder / "vllm_meta.json").read_text())["engine_kwargs"]["max_num_seqs"]
    with (folder / "vllm_timeseries.csv").open(newline="") as file:
        return [1e3 * float(row["running"]) / float(row["gen_throughput"])
                for row in csv.DictReader(file)
                if float(row["prompt_throughput"]) == 0 and float(row["running"]) == cap
                and float(row["gen_throughput"]) > 0]


def few_shot_profile(run: str, folder: Path, root: Path = VLLM_RUNS_DIR) -> Path:
    """Fit the run's GPU profile to its three measurements; write it to ``folder``."""
    model_id, gpu_id = RUNS[run]
    meta = json.loads((root / run / "vllm_meta.json").read_text())
    args = meta["engine_kwargs"]
    tuned = fit_few_shot(
        load_model(model_id), load_gpu(gpu_id), args.get("tensor_parallel_size", 1),
        few_shot_points(run, root), dp=args.get("data_parallel_size") or 1,
        expert_parallel=bool(args.get("enable_expert_parallel")),
    )
    path = folder / f"{run}.yaml"
    entry = profile_entry(tuned)
    path.write_text(yaml.safe_dump({"profiles": {gpu_id: entry}}), encoding="utf-8")
    return path


def score_run(run: str, root: Path = VLLM_RUNS_DIR, *, few_shot: bool = False) -> RunScore:
    data = run_scenario_dict(run, root)
    if few_shot:
        with tempfile.TemporaryDirectory() as tmp:
            data["gpu"] += "@" + str(few_shot_profile(run, Path(tmp), root))
            return _score(run, data, root, "few-shot")
    return _score(run, data, root, "zero-shot")


def _score(run: str, data: dict, root: Path, mode: str) -> RunScore:
    scenario = parse_scenario(data)
    result = run_scenario(scenario)
    metrics = [request_metrics(r) for r in result.requests]
    simulated = {
        name: np.array([v for m in metrics if (v := getattr(m, name)) is not None])
        for name in METRICS
    }
    engine = scenario.engine
    return RunScore(
        run=run,
        mode=mode,
        model=scenario.model,
        gpu=scenario.gpu.partition("@")[0],
        tp=scenario.tensor_parallel_size,
        num_gpu_blocks=engine.num_gpu_blocks_override,
        measured={k: _stats(v) for k, v in measured_metrics(run, root).items()},
        simulated={k: _stats(v) for k, v in simulated.items()},
    )


def validate_vllm_runs(root: Path = VLLM_RUNS_DIR) -> list[RunScore]:
    """Zero-shot then few-shot scores of every scored run."""
    runs = list(RUNS)
    return [score_run(run, root, few_shot=mode) for mode in (False, True) for run in runs]


def _records(folder: Path) -> list[dict]:
    lines = (folder / "vllm_requests.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def _stats(values: np.ndarray) -> dict[str, float]:
    return {
        "mean": float(values.mean()),
        "p50": float(np.percentile(values, 50)),
        "p90": float(np.percentile(values, 90)),
        "p99": float(np.percentile(values, 99)),
    }
