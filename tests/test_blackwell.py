"""The H200 and the Blackwell GPUs priced from their own aiconfigurator tables: each profile
reads its own cuts, a B200 step matches its table within the error ``clustersim validate``
states for the fit, and the catalog entries behave as one node of each part."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from clustersim.calibration.aiconfigurator import AIC_DIR, TABLES
from clustersim.calibration.holdout import HOLD_OUT_EVERY, held_out_mask, held_out_scores
from clustersim.catalog import load_gpu, load_profiles
from clustersim.catalog.specs import GpuSpec
from tests.helpers import run_cli, scenario, write_scenario

OWN = ("h200", "b200", "b300", "gb200", "gb300")
_BF16 = 2
_HEAD_DIM = 128


@pytest.mark.parametrize("gpu_id", OWN)
def test_each_gpu_is_fitted_on_its_own_tables(gpu_id):
    gpu = load_gpu(gpu_id)
    assert gpu.calibration == f"fit-v2:{gpu_id}"  # no longer the H100's, scaled
    stem = TABLES[gpu_id]
    sources = load_profiles()[gpu_id]["provenance"]["sources"]
    kinds = ("gemm", "context_attention", "generation_attention", "allreduce", "moe",
             "moe_a2a")
    assert sorted(sources) == sorted(f"aiconfigurator/{k}_{stem}.csv" for k in kinds)
    assert gpu.fp8_gemm is not None and gpu.fp8_gemm.calibration == f"fit-v2:{gpu_id}"
    assert all(k.curves and k.fit.calibration == f"fit-v2:{gpu_id}" for k in gpu.moe_kernels)
    assert gpu.deepep_calls is not None and f"moe_a2a_{stem}.csv" in gpu.deepep_calls.table
    tray = gpu_id.startswith("gb")  # the GB200's and GB300's tables stop at one tray
    assert [c.gpus for c in gpu.allreduce_curves] == ([2, 4] if tray else [2, 4, 8])
    small = load_profiles()[gpu_id]["provenance"]["small_kernels"]
    assert small["source"] == f"aiconfigurator/quant_{stem}.csv"


def test_the_held_out_split_is_every_fifth_token_count():
    tokens = pd.Series([1, 2, 3, 4, 6, 8, 12, 16, 32, 48, 64, 96] * 2).to_numpy()
    mask, held = held_out_mask(tokens)
    assert HOLD_OUT_EVERY == 5 and held == (6, 48)
    assert mask.sum() == 4


# The model's prices of one layer's kernels, as docs/validation.md states them (the cost model's
# own arithmetic is hand-checked in test_cost.py; test_aiconfigurator_fit.py does the same for
# the H100, A100 and L40S).
def _gemm_s(gpu: GpuSpec, m: int, n: int, k: int) -> float:
    compute = (m + gpu.compute_half_tokens) * 2 * n * k / (gpu.compute_efficiency
                                                           * gpu.peak_flops)
    memory = (n * k + m * (n + k)) * _BF16 / (gpu.memory_efficiency * gpu.mem_bytes_per_s)
    return gpu.gemm_floor_s + max(compute, memory)


def _prefill_s(gpu: GpuSpec, batch: int, prompt: int, heads: int) -> float:
    pairs = batch * (prompt * (prompt + 1) / 2 + gpu.attention_half_keys * prompt)
    return gpu.attention_floor_s + pairs * 4 * heads * _HEAD_DIM / (
        gpu.attention_efficiency * gpu.peak_flops)


def _decode_s(gpu: GpuSpec, batch: int, cached: int, kv_heads: int) -> float:
    rows = batch * (cached + 1 + gpu.decode_attention_half_tokens)
    return gpu.attention_floor_s + rows * 2 * kv_heads * _HEAD_DIM * _BF16 / (
        gpu.decode_attention_memory_efficiency * gpu.mem_bytes_per_s)


def _measured_s(frame: pd.DataFrame, **where: int) -> float:
    for column, value in where.items():
        frame = frame[frame[column] == value]
    assert len(frame), where
    return float(frame.latency.mean()) * 1e-3


LAYER = ((4096, 4096), (16384, 4096), (4096, 16384))
"""(n, k) of one layer's GEMMs the table holds: an attention output projection and an MLP's
up and down projections of a 4096-wide model."""


def test_a_b200_step_matches_its_table_within_the_stated_error():
    """One layer of a decode or prefill step on the B200, its GEMMs and attention priced from
    the B200's own fit, against the same calls in the B200's table: within the held-out error
    `clustersim validate` states for those fits (rms log error on the token counts each fit
    never saw), at decode batches of 8-256 and prompts of 256-16,384 tokens."""
    gpu = load_gpu("b200")
    stated = {s.table: s.rms_log_error for s in held_out_scores(
        ("b200",), ("bf16 GEMM", "prefill attention", "decode attention"))}
    assert stated["bf16 GEMM"] < 0.2  # the GEMM fit holds between the measured M
    gemm = pd.read_csv(AIC_DIR / "gemm_b200_sxm.csv")
    gemm = gemm[gemm.gemm_dtype == "bfloat16"]
    context = pd.read_csv(AIC_DIR / "context_attention_b200_sxm.csv")
    generation = pd.read_csv(AIC_DIR / "generation_attention_b200_sxm.csv")
    steps = [("decode attention", 8, 32767), ("decode attention", 16, 8191),
             ("decode attention", 64, 1023), ("decode attention", 256, 1023),
             ("prefill attention", 1, 256), ("prefill attention", 1, 2048),
             ("prefill attention", 1, 3072), ("prefill attention", 4, 4096)]
    for kind, batch, tokens in steps:
        rows = batch if kind == "decode attention" else batch * tokens
        model = sum(_gemm_s(gpu, rows, n, k) for n, k in LAYER)
        measured = sum(_measured_s(gemm, m=rows, n=n, k=k) for n, k in LAYER)
        heads = {"num_heads": 32, "num_key_value_heads": 8, "batch_size": batch}
        if kind == "decode attention":
            model += _decode_s(gpu, batch, tokens, 8)
            measured += _measured_s(generation, step=tokens, **heads)
        else:
            model += _prefill_s(gpu, batch, tokens, 32)
            measured += _measured_s(context, isl=tokens, **heads)
        error = abs(math.log(model / measured))
        assert error <= max(stated["bf16 GEMM"], stated[kind]), (kind, batch, tokens, error)


@pytest.mark.filterwarnings("ignore:Mean of empty slice", "ignore:invalid value encountered")
def test_validate_says_which_tables_price_each_gpu_and_the_held_out_error():
    """No validation set scored here (the scores' means are empty): the two tables only."""
    from clustersim.calibration.comparison import Validation
    from clustersim.calibration.holdout import HeldOutScore
    from clustersim.calibration.report import render_text

    score = HeldOutScore(gpu="b200", table="bf16 GEMM", held_out=(6, 48, 256), num_fit_rows=980,
                         num_held_rows=245, rms_log_error=0.15, median_abs_error=0.078,
                         in_sample_rms_log_error=0.15)
    text = render_text(Validation([], [], {"vidur": [], "aiconfigurator": []}, [],
                                  held_out=[score]))
    rows = {line.split()[0]: line for line in text.splitlines() if line.split()}
    assert "aiconfigurator/{gemm,context_attention,generation_attention,allreduce,moe,moe_a2a," \
        "quant}_b300_sxm.csv" in rows["b300"]
    assert "fit-v2:gb200" in rows["gb200"] and "every kernel fit from h100-sxm" in rows[
        "h100-pcie"]
    held = [line for line in text.splitlines() if line.startswith("b200") and "GEMM" in line]
    assert held and "6, 48, 256" in held[0] and "0.150" in held[0] and "7.8%" in held[0]


def test_the_catalog_lists_the_new_gpus_with_their_sources_and_profiles():
    code, output = run_cli("catalog")
    assert code == 0, output
    rows = {line.split()[0]: line.split() for line in output.splitlines() if line.strip()}
    # memory GiB, HBM GB/s, BF16, FP8, FP4, link, profile
    assert rows["b300"][1:8] == ["268.6", "7,750", "2,250", "4,500", "14,000", "nvlink", "900"]
    assert rows["gb300"][-1] == "fit-v2:gb300" and rows["b200"][-1] == "fit-v2:b200"
    code, output = run_cli("catalog", "--json")
    gpus = {g["id"]: g for g in json.loads(output)["gpus"]}
    for gpu_id in OWN:
        g = gpus[gpu_id]
        assert g["source"] and g["link"]["source"] and g["calibration"] == f"fit-v2:{gpu_id}"
    assert gpus["gb200"]["link"]["max_gpus"] == 72 and gpus["b300"]["sm_count"] == 160
    assert gpus["gb200"]["link"]["host_gpus"] == 4 and gpus["b200"]["link"]["host_gpus"] is None
    assert gpus["b300"]["usd_per_gpu_hour"] == 7.40  # Hyperstack's on-demand card
    assert gpus["gb300"]["usd_per_gpu_hour"] is None  # no public price found: none invented


@pytest.mark.parametrize(("change", "message"), [
    ({"gpu": "b400"}, "gpu: unknown GPU 'b400'"),
    ({"gpu": "gb200", "model": "deepseek-r1", "tensor_parallel_size": 128},
     "tensor_parallel_size: 128 is more than 72: tensor parallelism stays inside one NVLink"),
    ({"gpu": "b300", "engine": {"max_num_seqs": 0}}, "engine.max_num_seqs:"),
])
def test_bad_fields_on_the_new_gpus_exit_2_with_one_line(tmp_path, change, message):
    path = write_scenario(tmp_path, scenario(**change))
    code, output = run_cli("simulate", str(path), "--out", str(tmp_path / "out"))
    assert code == 2, output
    first = output.strip().splitlines()[0]
    assert first.startswith(f"{path}: {message}"), first
    assert "Traceback" not in output and len(output.strip().splitlines()) == 1
