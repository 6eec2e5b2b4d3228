"""FP4 checkpoints: NVFP4 (ModelOpt, vLLM's modelopt_fp4) priced on the Blackwell GPUs' own
NVFP4 GEMM and fused-MoE tables, the stated rule where a GPU has FP4 tensor cores and no
table, vLLM's Marlin weight-only fallback below Blackwell, MXFP4 (gpt-oss) on the kernels
vLLM's MXFP4 backend picks, and the KV cache in the engine's dtype."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from clustersim.calibration.aiconfigurator import AIC_DIR
from clustersim.catalog import load_gpu, load_model
from clustersim.catalog.quantization import quantization_from_hf
from clustersim.cost.kernels import NO_FP4_TABLE, gemm_kernel
from clustersim.cost.moe import expert_pricing
from clustersim.cost.roofline import BatchShape, CostModel, _layer_gemms
from clustersim.engine.defaults import resolve_engine
from clustersim.engine.quantization import served_model
from clustersim.engine.settings import EngineSettings
from tests.helpers import run_cli

NVFP4 = quantization_from_hf({"quantization_config": {
    "quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16}}, "nvfp4")
FP8 = quantization_from_hf({"quantization_config": {
    "quant_method": "modelopt", "quant_algo": "FP8"}}, "fp8")
BLACKWELL = (("b200", "b200_sxm"), ("b300", "b300_sxm"), ("gb200", "gb200"), ("gb300", "gb300"))


def _gemm_s(kernel, gpu, m: int, k: int, n: int) -> float:
    """One GEMM of ``m`` rows as the roofline prices it on ``kernel``."""
    ((flop_s, weight_s, act_s, half, floor_s),) = _layer_gemms(((k, n),), 1, 2, kernel, gpu)
    return floor_s + max((m + half) * flop_s, weight_s + m * act_s)


@pytest.mark.parametrize(("gpu_id", "stem"), BLACKWELL)
def test_an_nvfp4_gemm_is_priced_on_the_gpus_fp4_table(gpu_id: str, stem: str) -> None:
    """NVFP4 runs W4A4 at the FP4 peak on the GPU's own NVFP4 fit; at the table's shapes it
    is cheaper than FP8 by the table's own ratio (geometric means within 6%)."""
    gpu = load_gpu(gpu_id)
    fp4, fp8 = gemm_kernel(NVFP4, gpu), gemm_kernel(FP8, gpu)
    assert fp4.name == "w4a4_fp4" and fp4.fit == gpu.fp4_gemm
    assert fp4.fit.calibration == f"fit-v2:{gpu_id}" and fp8.fit == gpu.fp8_gemm
    table = pd.read_csv(AIC_DIR / f"gemm_{stem}.csv")
    table = table[(table.n >= 2048) & (table.k >= 2048)]
    rows = pd.concat([table[table.gemm_dtype == d].set_index(["m", "n", "k"]).latency.rename(d)
                      for d in ("nvfp4", "fp8")], axis=1).dropna()
    assert len(rows) == 900
    for low, high in ((1, 16), (1024, 32768)):
        band = rows[(rows.index.get_level_values("m") >= low)
                    & (rows.index.get_level_values("m") <= high)]
        measured = np.exp(np.mean(np.log(band.nvfp4 / band.fp8)))
        priced = np.exp(np.mean(np.log([
            _gemm_s(fp4, gpu, m, k, n) / _gemm_s(fp8, gpu, m, k, n) for m, n, k in band.index])))
        assert priced < 0.85 and measured < 0.85  # FP4 cheaper at every size band
        assert priced == pytest.approx(measured, rel=0.06), (low, high)


def test_an_nvfp4_step_on_b200_is_cheaper_than_fp8_at_the_same_shape() -> None:
    gpu = load_gpu("b200")
    llama = load_model("llama-3.1-70b")
    fp4 = CostModel(llama.model_copy(update={"quantization": NVFP4}), gpu, 1)
    fp8 = CostModel(llama.model_copy(update={"quantization": FP8}), gpu, 1)
    for batch in (BatchShape.from_chunks([(1, 2000, True)] * 64),
                  BatchShape.from_chunks([(4096, 0, True)])):
        t4, t8 = fp4.step_time(batch).time_s, fp8.step_time(batch).time_s
        assert 0.5 < t4 / t8 < 0.85, (t4, t8)
    code, output = run_cli("step-time", "--model", "deepseek-r1-fp4", "--gpu", "b200", "--tp",
                           "8", "--decode-batch", "64", "--context", "2000")
    assert code == 0, output
    assert "GEMMs w4a4_fp4 at 9000 TFLOPS (fit-v2:b200)" in output
    assert ("MoE experts: nvfp4, kernel flashinfer_trtllm, table aiconfigurator vLLM 0.24.0 "
            "b200_sxm moe_perf") in output


def test_without_an_nvfp4_table_the_rule_is_the_fp8_fit_at_the_fp4_peak() -> None:
    gpu = load_gpu("b200").model_copy(update={"fp4_gemm": None})
    kernel = gemm_kernel(NVFP4, gpu)
    assert kernel.peak_flops == 9000e12
    assert (kernel.fit.compute_efficiency, kernel.fit.memory_efficiency) == (
        gpu.fp8_gemm.compute_efficiency, gpu.fp8_gemm.memory_efficiency)
    assert kernel.describe == f"w4a4_fp4 at 9000 TFLOPS (fit-v2:b200, {NO_FP4_TABLE})"


def test_nvfp4_experts_are_priced_on_the_measured_fp4_moe_kernel() -> None:
    model = load_model("deepseek-r1-fp4")
    gpu = load_gpu("gb200")
    pricing = expert_pricing(model, gpu, 16, True, model.quantization)
    assert pricing is not None and pricing.curve is not None
    assert (pricing.format, pricing.kernel.kernel) == ("nvfp4", "flashinfer_trtllm")
    assert (pricing.moe_tp, pricing.moe_ep) == (1, 16)
    # the same split of the FP8 checkpoint: the NVFP4 curve is the faster one at decode sizes
    fp8 = load_model("deepseek-r1")
    fp8_pricing = expert_pricing(fp8, gpu, 16, True, fp8.quantization)
    assert fp8_pricing is not None and fp8_pricing.curve is not None
    assert dict(pricing.curve.points)[64.0] < dict(fp8_pricing.curve.points)[64.0]


def test_nvfp4_below_blackwell_runs_as_vllms_marlin_fallback() -> None:
    """vLLM serves NVFP4 on Hopper and Ampere as Marlin FP4 weight-only
    (``is_fp4_marlin_supported``: capability 8.0 and up): 16-bit math, 4-bit weights, no FP4
    tensor cores, no measured MoE table."""
    model = load_model("deepseek-r1-fp4")
    for gpu_id in ("h100-sxm", "h200", "a100-80gb-sxm"):
        gpu = load_gpu(gpu_id)
        served = served_model(model, gpu)
        kernel = gemm_kernel(served.quantization, gpu)
        assert (kernel.name, kernel.peak_flops) == ("marlin", gpu.peak_flops)
        assert expert_pricing(served, gpu, 8, True, served.quantization) is None
    code, output = run_cli("step-time", "--model", "deepseek-r1-fp4", "--gpu", "h200", "--tp",
                           "8", "--decode-batch", "8", "--context", "1000")
    assert code == 0 and "GEMMs marlin at 989.4 TFLOPS" in output, output


def test_the_fp4_checkpoint_and_an_fp8_kv_cache_leave_more_kv_blocks() -> None:
    gpu = load_gpu("b200")
    model = load_model("deepseek-r1-fp4")
    assert model.quantization.method == "modelopt_fp4" and model.quantization.group_size == 16
    assert model.quantized_layers("o_proj") == 0  # attention stays BF16
    assert model.quantized_layers("experts.gate_up_proj") == 58
    assert model.weight_bytes == pytest.approx(396.68e9, rel=1e-4)
    blocks = {kv: resolve_engine(EngineSettings(max_model_len=8192, kv_cache_dtype=kv),
                                 model, gpu, 8) for kv in ("auto", "fp8")}
    assert blocks["auto"].model.kv_bytes_per_token(8) == 70_272
    assert blocks["fp8"].model.kv_bytes_per_token(8) == 35_136
    assert blocks["fp8"].num_gpu_blocks in (2 * blocks["auto"].num_gpu_blocks,
                                            2 * blocks["auto"].num_gpu_blocks + 1)
    fp8_checkpoint = resolve_engine(EngineSettings(max_model_len=8192),
                                    load_model("deepseek-r1"), gpu, 8)
    assert blocks["auto"].num_gpu_blocks > 1.3 * fp8_checkpoint.num_gpu_blocks


def test_mxfp4_runs_the_kernel_vllms_backend_picks() -> None:
    """gpt-oss's MXFP4 experts: FlashInfer's TensorRT-LLM MXFP4 x BF16 experts on Blackwell
    (vLLM's default there), OpenAI's Triton kernels on Hopper, each priced on its table; the
    weights stay 4-bit and the activations 16-bit on both."""
    model = load_model("gpt-oss-120b")
    for gpu_id, kernel in (("b200", "flashinfer_trtllm_mxfp4"), ("h200", "triton_mxfp4")):
        gpu = load_gpu(gpu_id)
        pricing = expert_pricing(model, gpu, 1, False, model.quantization)
        assert pricing is not None and (pricing.format, pricing.kernel.kernel) == (
            "w4a16_mxfp4", kernel)
