"""clustersim's KV cache size against the ones logged vLLM start-ups printed.

    python benchmarks/kv_capacity_check.py

Every start-up of clustersim/data/calibration/{fit,validation}/vllm_startups/startups.yaml
(the first file's figures set the model's constants, the second's only check it), then the
shipped vLLM 0.19 RTX 4090 run (validation data), each sized with clustersim's start-up
memory profile for the run's own vLLM release: the "GPU KV cache size" token count beside the
logged one, and clustersim's memory split beside the log's where the log printed it.
"""

from __future__ import annotations

import json

from clustersim.calibration.sources import VLLM_RUNS_DIR
from clustersim.calibration.vllm_runs import RUNS, run_scenario_dict
from clustersim.calibration.vllm_startups import (
    CHECK_STARTUPS,
    FIT_STARTUPS,
    compare,
    load_startups,
)
from clustersim.catalog import load_gpu, load_model
from clustersim.engine.defaults import resolve_engine
from clustersim.engine.settings import EngineSettings

GIB = 1 << 30


def _split(logged: dict[str, float], key: str, ours: int) -> str:
    value = logged.get(key)
    return f"{ours / GIB:.2f}" + (f" ({value:.2f})" if value is not None else "")


def main() -> None:
    print("start-up (role)                           vLLM  tokens: clustersim / logged  error   "
          "GiB, clustersim (logged): weights / activation / non-torch / KV")
    for role, path in (("fit", FIT_STARTUPS), ("check", CHECK_STARTUPS)):
        for startup in load_startups(path):
            c = compare(startup)
            b, log = c.budget, startup.logged
            flag = "" if c.within_tolerance else "  OUT OF TOLERANCE"
            print(f"{startup.id} ({role})".ljust(42) + f"{startup.vllm_version:>5}  "
                  f"{c.tokens:>10,} / {c.logged_tokens:>10,}  {c.error:+6.2%}   "
                  f"{_split(log, 'model_loading_gib', b.weight_bytes)} / "
                  f"{_split(log, 'peak_activation_gib', b.activation_bytes)} / "
                  f"{_split(log, 'non_torch_gib', b.non_torch_bytes)} / "
                  f"{_split(log, 'available_kv_gib', b.available_bytes)}{flag}")
            if startup.tolerance_reason:
                print(f"    within {startup.tolerance_pct:g} %: {startup.tolerance_reason}")
    for run, (model_id, gpu_id) in RUNS.items():
        meta = json.loads((VLLM_RUNS_DIR / run / "vllm_meta.json").read_text())
        logged = (meta.get("kv_cache") or {}).get("num_gpu_blocks")
        if not logged:
            continue
        engine = run_scenario_dict(run)["engine"]
        engine.pop("num_gpu_blocks_override")
        setup = resolve_engine(EngineSettings(**engine), load_model(model_id), load_gpu(gpu_id),
                               meta["engine_kwargs"].get("tensor_parallel_size") or 1)
        print(f"{run} (check, shipped run)".ljust(42) + f"{engine['vllm_version']:>5}  blocks "
              f"{setup.num_gpu_blocks:,} / {logged:,}  "
              f"{(setup.num_gpu_blocks - logged) / logged:+.2%} (a warm start against this "
              "run's: see docs/how-it-works.md, KV capacity)")


if __name__ == "__main__":
    main()
