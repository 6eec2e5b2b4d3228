"""clustersim's KV cache size against the one a shipped vLLM run logged.

    python benchmarks/kv_capacity_check.py

Of the four vLLM 0.19 serving runs shipped as validation data
(clustersim/data/calibration/validation/llmservingsim), the RTX 4090 Llama-3.1-8B run recorded
its KV cache: ``num_gpu_blocks`` 2588 (41,408 tokens) at gpu_memory_utilization 0.9, with the
device's total memory as CUDA reports it. This script sizes the same engine with clustersim's
start-up memory profile (``clustersim.cost.memory``) for the run's own vLLM version and for
0.21 and later (which also subtract their CUDA-graph estimate), and prints both beside the log,
with the memory split each implies. Nothing was fitted on this run: it is a check only.
"""

from __future__ import annotations

import json

from clustersim.calibration.sources import VLLM_RUNS_DIR
from clustersim.calibration.vllm_runs import RUNS, run_scenario_dict
from clustersim.catalog import load_gpu, load_model
from clustersim.cost.memory import (
    cuda_graph_bytes,
    kv_budget,
    kv_bytes_per_block,
    profiles_cuda_graphs,
)
from clustersim.engine.defaults import resolve_engine
from clustersim.engine.settings import EngineSettings

GIB = 1 << 30


def main() -> None:
    for run, (model_id, gpu_id) in RUNS.items():
        meta = json.loads((VLLM_RUNS_DIR / run / "vllm_meta.json").read_text())
        logged = (meta.get("kv_cache") or {}).get("num_gpu_blocks")
        if not logged:
            continue
        engine = run_scenario_dict(run)["engine"]
        engine.pop("num_gpu_blocks_override")
        model, gpu = load_model(model_id), load_gpu(gpu_id)
        tp = meta["engine_kwargs"].get("tensor_parallel_size") or 1
        device_total = meta["hardware"]["device_total_memory_bytes"]
        util = engine["gpu_memory_utilization"]
        block_bytes = kv_bytes_per_block(model, tp, engine.get("block_size", 16))
        print(f"{run} (vLLM {meta['vllm_version']}, gpu_memory_utilization {util:g}, "
              f"block {block_bytes:,} bytes)")
        print(f"  logged: {logged:,} blocks; implies {util:g} x {device_total / GIB:.2f} GiB "
              f"(CUDA's total) - KV = {(util * device_total - logged * block_bytes) / GIB:.2f} "
              "GiB of weights, activations, non-torch memory and graphs")
        for version in (engine["vllm_version"], "0.21"):
            settings = EngineSettings(**{**engine, "vllm_version": version})
            setup = resolve_engine(settings, model, gpu, tp)
            config = setup.scheduler
            graphs = (cuda_graph_bytes(setup.model, config.max_num_seqs,
                                       config.max_num_batched_tokens)
                      if profiles_cuda_graphs(version) else 0)
            budget = kv_budget(setup.model, gpu, tp, gpu_memory_utilization=util,
                               block_size=config.block_size,
                               max_num_batched_tokens=config.max_num_batched_tokens,
                               cuda_graph_bytes=graphs)
            assert budget.num_gpu_blocks == setup.num_gpu_blocks
            error = (setup.num_gpu_blocks - logged) / logged
            print(f"  clustersim, vllm_version {version}: {setup.num_gpu_blocks:,} blocks "
                  f"({error:+.1%}); {util:g} x {gpu.mem_capacity_bytes / GIB:.2f} GiB "
                  f"(catalog) - weights {budget.weight_bytes / GIB:.2f} - activations "
                  f"{budget.activation_bytes / GIB:.2f} - non-torch "
                  f"{budget.non_torch_bytes / GIB:.2f} - CUDA graphs "
                  f"{budget.cuda_graph_bytes / GIB:.2f} GiB")


if __name__ == "__main__":
    main()
