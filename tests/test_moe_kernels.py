"""Every MoE layer's experts priced from the measured table of their own format, kernel and GPU
(clustersim.cost.moe): the kernel vLLM picks, the table's curve at the model's shape and split,
its fit where the table lacks them."""

from __future__ import annotations

import csv
import json
import math
from functools import lru_cache

import pytest
from pydantic import ValidationError

from clustersim.calibration.aiconfigurator import AIC_DIR, MOE_DISTRIBUTION
from clustersim.catalog import load_gpu, load_model
from clustersim.catalog.quantization import QuantizationSpec
from clustersim.catalog.specs import GpuSpec, ModelSpec, MoeCurve
from clustersim.cost.moe import moe_format, moe_kernel_name
from clustersim.cost.roofline import BatchShape, CostModel
from clustersim.engine.quantization import served_model
from tests.helpers import run_cli

BLOCK_FP8 = QuantizationSpec(method="fp8", weight_bits=8, weight_type="float", group_size=0,
                             weight_block_size=(128, 128), scale_bytes=4, activation_bits=8)
MODELOPT_FP8 = QuantizationSpec(method="modelopt", weight_bits=8, weight_type="float",
                                group_size=0, scale_bytes=4, activation_bits=8)
DYNAMIC_FP8 = QuantizationSpec(method="fp8", weight_bits=8, weight_type="float", group_size=0,
                               scale_bytes=4, activation_bits=8, serialized=False)
INT4_EXPERTS = QuantizationSpec(method="compressed-tensors", weight_bits=4, weight_type="int",
                                group_size=128, scale_bytes=2, modules="experts")
AWQ = QuantizationSpec(method="awq", weight_bits=4, weight_type="int", group_size=128,
                       zero_point=True)
MXFP4 = QuantizationSpec(method="mxfp4", weight_bits=4, weight_type="float", group_size=32,
                         scale_bytes=1, modules="experts")
NVFP4 = QuantizationSpec(method="modelopt_fp4", weight_bits=4, weight_type="float",
                         group_size=16, scale_bytes=1, activation_bits=4)
TOKENS = (1, 8, 64, 512, 4096)
"""Token counts each format is pinned at: a decode, decode batches, prompt chunks."""


@pytest.mark.parametrize(("quant", "expert_parallel", "expected"), [
    (None, False, ("bfloat16", "triton")),
    (None, True, ("bfloat16", "triton")),
    (BLOCK_FP8, False, ("fp8_block", "triton")),
    (BLOCK_FP8, True, ("fp8_block", "flashinfer_cutlass")),
    (MODELOPT_FP8, False, ("fp8", "flashinfer_cutlass")),
    (DYNAMIC_FP8, False, ("fp8", "triton")),  # not measured: the dense FP8 GEMMs price it
    (INT4_EXPERTS, True, ("int4_wo", "marlin")),
    (AWQ.model_copy(update={"method": "awq_marlin"}), False, ("int4_wo", "marlin")),
    (MXFP4, False, ("w4a16_mxfp4", "triton_mxfp4")),
])
def test_vllm_picks_the_kernel_by_format_and_split(quant, expert_parallel, expected):
    fmt = moe_format(quant)
    assert (fmt, moe_kernel_name(fmt, quant, expert_parallel)) == expected
    assert moe_kernel_name(fmt, quant, expert_parallel, capability=90) == expected[1]


@pytest.mark.parametrize("capability", [100, 103])  # B200 / GB200, B300 / GB300
@pytest.mark.parametrize(("quant", "expert_parallel", "expected"), [
    (None, False, ("bfloat16", "flashinfer_trtllm")),
    (BLOCK_FP8, False, ("fp8_block", "flashinfer_trtllm")),
    (BLOCK_FP8, True, ("fp8_block", "flashinfer_trtllm")),
    (MODELOPT_FP8, False, ("fp8", "flashinfer_trtllm")),
    (DYNAMIC_FP8, False, ("fp8", "triton")),  # not measured
    (INT4_EXPERTS, True, ("int4_wo", "marlin")),
    (MXFP4, False, ("w4a16_mxfp4", "flashinfer_trtllm_mxfp4")),
])
def test_on_blackwell_vllm_picks_flashinfers_trtllm_experts(capability, quant, expert_parallel,
                                                           expected):
    fmt = moe_format(quant)
    assert (fmt, moe_kernel_name(fmt, quant, expert_parallel, capability)) == expected


def test_formats_vllm_runs_on_unmeasured_kernels_have_no_table():
    # legacy AWQ MoE runs Triton's WNA16 kernel; NVFP4 on Hopper runs Marlin FP4, which no
    # table measures (Blackwell's FlashInfer TensorRT-LLM NVFP4 experts are measured)
    assert moe_format(AWQ) is None
    assert moe_format(NVFP4) == "nvfp4"
    assert moe_kernel_name("nvfp4", NVFP4, True, 90) == "marlin"
    assert load_gpu("h200").moe_kernel("nvfp4", "marlin") is None
    assert moe_kernel_name("nvfp4", NVFP4, True, 100) == "flashinfer_trtllm"
    assert load_gpu("b200").moe_kernel("nvfp4", "flashinfer_trtllm") is not None


# (model, quantization override, GPU tp, expert parallel) per format, each on its own table
PRICED = {
    "bfloat16": ("qwen3-30b-a3b", None, 2, False),
    "fp8": ("qwen3-235b-a22b", MODELOPT_FP8, 4, False),
    "fp8_block": ("deepseek-v3", None, 8, False),
    "fp8_block EP": ("deepseek-v3", None, 8, True),
    "int4_wo": ("kimi-k2.5", None, 8, False),
    "fp8_block MiniMax": ("minimax-m2.5", None, 4, False),
    "w4a16_mxfp4": ("gpt-oss-120b", None, 2, False),
}


def _model(model_id: str, quant: QuantizationSpec | None) -> ModelSpec:
    model = load_model(model_id)
    return model if quant is None else model.model_copy(update={"quantization": quant})


@lru_cache(maxsize=4)
def _rows(stem: str) -> tuple[dict[str, str], ...]:
    with (AIC_DIR / f"moe_{stem}.csv").open() as f:
        return tuple(csv.DictReader(f))


def _table(stem: str, fmt: str, kernel: str, model: ModelSpec, tp: int,
           ep: int) -> dict[int, float]:
    """Seconds per layer by token count of the table's rows of this shape and split, each no
    slower than a larger count's (the curve's lower envelope)."""
    rows = [r for r in _rows(stem) if r["moe_dtype"] == fmt and r["kernel"] == kernel
            and r["distribution"] == MOE_DISTRIBUTION
            and (int(r["hidden_size"]), int(r["inter_size"]), int(r["topk"]),
                 int(r["num_experts"]), int(r["moe_tp_size"]), int(r["moe_ep_size"]))
            == (model.hidden_size, model.moe_intermediate_size, model.num_experts_per_tok,
                model.num_experts, tp, ep)]
    times = {int(r["num_tokens"]): float(r["latency"]) * 1e-3 for r in rows}
    tokens = sorted(times)
    return {n: min(times[m] for m in tokens[i:]) for i, n in enumerate(tokens)}


def _experts_s(cost: CostModel, tokens: float) -> float:
    """The experts' seconds in a step whose MoE layers see ``tokens`` tokens."""
    batch = BatchShape(num_prefill_tokens=int(tokens), prefill_attn_pairs=tokens,
                       prefill_kv_tokens=int(tokens), num_sampled=1, num_seqs=1)
    return cost.experts_s(batch)


TRAY_CASES = ("bfloat16", "fp8", "fp8_block MiniMax", "w4a16_mxfp4")
"""The cases within one GB200 / GB300 compute tray (TP <= 4)."""


@pytest.mark.parametrize(("gpu_id", "stem", "case"), [
    *((gpu_id, stem, case) for gpu_id, stem in (
        ("h100-sxm", "h100_sxm"), ("h200", "h200_sxm"), ("b200", "b200_sxm"),
        ("b300", "b300_sxm")) for case in sorted(PRICED)),
    *((gpu_id, gpu_id, case) for gpu_id in ("gb200", "gb300") for case in TRAY_CASES),
])
def test_each_format_is_priced_on_its_own_gpus_table(gpu_id, stem, case):
    """The price of one MoE layer's experts is the GPU's own table row at every token count
    measured (its stated error: the table's 4 significant digits), and the line between two
    measured counts in between."""
    model_id, quant, tp, ep = PRICED[case]
    gpu = load_gpu(gpu_id)
    model = served_model(_model(model_id, quant), gpu)
    cost = CostModel(model, gpu, tp, expert_parallel=ep)
    pricing = cost.experts
    assert pricing is not None and pricing.curve is not None
    assert f"moe_{stem}.csv" in pricing.kernel.table
    assert pricing.format == case.split()[0]
    split = (1, tp) if ep else (tp, 1)
    table = _table(stem, pricing.format, pricing.kernel.kernel, model, *split)
    assert len(table) == 27
    layers = model.num_moe_layers
    for tokens in TOKENS:
        assert _experts_s(cost, tokens) / layers == pytest.approx(table[tokens], rel=6e-4)
    low, high = 96, 128  # 100 tokens: on the line between the two measured counts
    between = table[low] + (table[high] - table[low]) * (100 - low) / (high - low)
    assert _experts_s(cost, 100) / layers == pytest.approx(between, rel=6e-4)


def test_the_h200_reads_its_own_table_not_the_h100s():
    model = load_model("deepseek-v3")
    h100, h200 = (CostModel(model, load_gpu(g), 8) for g in ("h100-sxm", "h200"))
    assert h200.experts.kernel.fit.calibration == "fit-v2:h200"
    assert h100.experts.curve.points != h200.experts.curve.points
    # the H200's HBM3e streams the same expert slices faster at a decode batch
    assert _experts_s(h200, 8) < _experts_s(h100, 8)


def _without_curves(gpu: GpuSpec) -> GpuSpec:
    return gpu.model_copy(update={"moe_kernels": tuple(
        k.model_copy(update={"curves": ()}) for k in gpu.moe_kernels)})


# the table's shapes that catalog models have: (model, quantization) per (format, shape)
_SHAPES: dict[tuple[str, int, int, int, int], tuple[str, QuantizationSpec | None]] = {
    ("bfloat16", 2048, 768, 8, 128): ("qwen3-30b-a3b", None),
    ("bfloat16", 4096, 1536, 8, 128): ("qwen3-235b-a22b", None),
    ("bfloat16", 4096, 14336, 2, 8): ("mixtral-8x7b", None),
    ("fp8_block", 7168, 2048, 8, 256): ("deepseek-v3", None),
    ("fp8_block", 4096, 1536, 8, 128): ("qwen3-235b-a22b", BLOCK_FP8),
    ("int4_wo", 7168, 2048, 8, 384): ("kimi-k2.5", None),
    ("fp8_block", 3072, 1536, 8, 256): ("minimax-m2.5", None),
    ("fp8_block", 7168, 2048, 8, 384): ("kimi-k2-instruct-0905", None),
    ("w4a16_mxfp4", 2880, 2880, 4, 128): ("gpt-oss-120b", None),
    ("w4a16_mxfp4", 2880, 2880, 4, 32): ("gpt-oss-20b", None),
}


@pytest.mark.parametrize("fmt", ["bfloat16", "fp8_block", "int4_wo", "w4a16_mxfp4"])
def test_the_fit_prices_what_the_table_lacks_within_its_stated_error(fmt):
    """Without curves, the fit prices the table's one-node rows of the catalog's shapes with
    about the rms log error the profile states for it."""
    gpu = load_gpu("h200")
    bare = _without_curves(gpu)
    errors: list[float] = []
    costs: dict[tuple, CostModel] = {}
    for row in _rows("h200_sxm"):
        key = (row["moe_dtype"], int(row["hidden_size"]), int(row["inter_size"]),
               int(row["topk"]), int(row["num_experts"]))
        tp, ep = int(row["moe_tp_size"]), int(row["moe_ep_size"])
        if key[0] != fmt or key not in _SHAPES or tp * ep > 8:
            continue
        model_id, quant = _SHAPES[key]
        split = (tp * ep, ep > 1)
        if (*key, split) not in costs:
            model = served_model(_model(model_id, quant), bare)
            costs[(*key, split)] = CostModel(model, bare, split[0], expert_parallel=split[1])
        cost = costs[(*key, split)]
        if cost.experts is None or cost.experts.kernel.kernel != row["kernel"]:
            continue
        layer_s = _experts_s(cost, float(row["num_tokens"])) / cost.model.num_moe_layers
        errors.append(math.log(layer_s / (float(row["latency"]) * 1e-3)))
    assert len(errors) >= 150
    rms = math.sqrt(sum(e * e for e in errors) / len(errors))
    stated = next(k for k in gpu.moe_kernels if k.dtype == fmt).fit_rms_log_error
    assert rms <= stated + 0.05, (rms, stated)


def test_a_borrowed_table_lends_its_fits_not_its_times():
    for gpu_id in ("h100-pcie",):
        gpu = load_gpu(gpu_id)
        assert gpu.moe_kernels and all(not k.curves for k in gpu.moe_kernels)
        assert all(k.fit.calibration == f"fit-v2:h100-sxm->{gpu_id}" for k in gpu.moe_kernels)
        cost = CostModel(load_model("deepseek-v3"), gpu, 8)
        assert cost.experts is not None and cost.experts.curve is None


def test_formats_without_a_table_keep_the_dense_kernel():
    gpu = load_gpu("h100-sxm")
    online = served_model(load_model("qwen3-30b-a3b"), gpu, "fp8")  # dynamic per-tensor FP8
    cost = CostModel(online, gpu, 2)
    assert cost.experts is None and cost.expert_kernel.name == "w8a8_fp8"
    assert {"experts.gate_up_proj", "experts.down_proj"} <= {
        op.name for op in cost.operators(BatchShape.from_chunks([(1, 100, True)]))}


def test_a_curve_rises_in_tokens_and_time():
    points = ((1.0, 2e-5), (8.0, 4e-5))
    shape = {"hidden_size": 2048, "inter_size": 768, "topk": 8, "num_experts": 128,
             "moe_tp": 1, "moe_ep": 1}
    MoeCurve(**shape, points=points)
    with pytest.raises(ValidationError, match="more tokens cannot take less time"):
        MoeCurve(**shape, points=((1.0, 4e-5), (8.0, 2e-5)))
    with pytest.raises(ValidationError, match="token counts must rise"):
        MoeCurve(**shape, points=((8.0, 2e-5), (1.0, 4e-5)))


def test_step_time_names_each_moe_operators_table_format_and_kernel():
    args = ("step-time", "--model", "deepseek-v3", "--gpu", "h200", "--tp", "8",
            "--decode-batch", "8", "--context", "2000")
    code, text = run_cli(*args)
    assert code == 0, text
    assert ("MoE experts: fp8_block, kernel triton, table aiconfigurator vLLM 0.24.0 "
            "h200_sxm moe_perf, power_law_1.01 routing (moe_h200_sxm.csv); priced by its "
            "measured curve at moe_tp 8, moe_ep 1") in text
    assert "experts: fused MoE fp8_block (triton, measured)" in text
    code, text = run_cli(*args, "--json")
    experts = json.loads(text)["experts"]
    assert experts["priced_by"] == "curve" and experts["kernel"] == "triton"
    assert experts["layer_s"] == pytest.approx(
        _table("h200_sxm", "fp8_block", "triton", load_model("deepseek-v3"), 8, 1)[8],
        rel=6e-4)
    code, text = run_cli("step-time", "--model", "deepseek-v3", "--gpu", "h200", "--tp", "8",
                         "--expert-parallel", "--decode-batch", "8", "--context", "2000")
    assert "kernel flashinfer_cutlass" in text and "moe_tp 1, moe_ep 8" in text


def test_a_few_shot_fit_moves_the_experts_through_their_fits():
    """Three measurements of one's own deployment rescale the fused-MoE kernels' fits as they
    rescale the dense GEMMs'; the measured curves, a time no efficiency moves, are left out of
    the tuned profile."""
    from clustersim.calibration.fewshot import fit_errors, fit_few_shot

    gpu, model = load_gpu("h200"), load_model("deepseek-v3")
    cost = CostModel(model, _without_curves(gpu), 8)  # the form the three points rescale
    shapes = [BatchShape.from_chunks([(1, 2000, True)] * 8),
              BatchShape.from_chunks([(1, 2000, True)] * 64),
              BatchShape.from_chunks([(4096, 0, True)])]
    slower = [(shape, 1.4 * cost.step_time(shape).time_s) for shape in shapes]
    tuned = fit_few_shot(model, gpu, 8, slower)
    assert tuned.moe_kernels and all(not k.curves for k in tuned.moe_kernels)
    compute = tuned.compute_efficiency / gpu.compute_efficiency
    for before, after in zip(gpu.moe_kernels, tuned.moe_kernels, strict=True):
        assert after.fit.compute_efficiency == pytest.approx(
            min(1.0, before.fit.compute_efficiency * compute))
    assert max(abs(e) for e in fit_errors(model, tuned, 8, slower)) < 0.1
