"""The small memory-bound kernels per architecture: which kernels a layer runs, what a step of
them costs (by hand), and the fit that prices them."""

from __future__ import annotations

import pytest

from clustersim.calibration import small_kernels as fit
from clustersim.catalog import load_gpu, load_model, load_profiles
from clustersim.cost.roofline import BatchShape, CostModel
from clustersim.cost.small_kernels import (
    SAMPLER_PASSES,
    sampler_bytes_per_row,
    small_kernel_prices,
    small_kernels,
)

SMALL = "norms, rotary, activation (small kernels)"


def kernels(model_id: str, tp: int = 1) -> dict[str, tuple[int, float]]:
    return {k.name: (k.calls, k.bytes_per_token) for k in small_kernels(load_model(model_id), tp)}


def test_a_qwen3_layer_runs_its_qk_norm_and_a_llama_layer_does_not():
    llama, qwen = kernels("llama-3.1-8b"), kernels("qwen3-32b")
    assert "q_norm" not in llama and "k_norm" not in llama
    # Qwen3-32B: 64 layers, 64 query heads and 8 KV heads of 128, bf16: each norm reads and
    # writes its heads once a layer
    assert qwen["q_norm"] == (64, 2 * 64 * 128 * 2)
    assert qwen["k_norm"] == (64, 2 * 8 * 128 * 2)
    # and at TP8 each rank norms its own heads
    qwen8 = kernels("qwen3-32b", tp=8)
    assert qwen8["q_norm"] == (64, 2 * 8 * 128 * 2)
    assert qwen8["k_norm"] == (64, 2 * 1 * 128 * 2)
    assert sum(c for c, _ in qwen.values()) - sum(c for c, _ in llama.values()) == (
        (64 - 32) * 4 + 2 * 64)


def test_llama_3_1_8b_kernels_by_hand():
    # 32 layers, h 4096, 32 query heads and 8 KV heads of 128, f 14336, bf16
    assert kernels("llama-3.1-8b") == {
        "input_layernorm, post_attention_layernorm (fused_add_rms_norm)": (64, 4 * 4096 * 2),
        "rotary_emb": (32, 2 * (4096 + 1024) * 2),
        "act_fn (silu_and_mul)": (32, 3 * 14336 * 2),
        "embed_tokens (gather)": (1, 2 * 4096 * 2),
        "norm (final)": (1, 4 * 4096 * 2),
    }


def test_layernorm_models_add_the_residual_in_a_kernel_of_their_own():
    # OPT-13B: LayerNorm, a learned position table (no rotary), a ReLU MLP
    opt = kernels("opt-13b")
    assert opt["residual adds"] == (2 * 40, 3 * 5120 * 2)
    assert opt["self_attn_layer_norm, final_layer_norm (LayerNorm)"] == (2 * 40, 2 * 5120 * 2)
    assert "rotary_emb" not in opt
    assert opt["act_fn"] == (40, 2 * 20480 * 2)


def test_moe_layers_leave_their_activation_to_the_fused_moe_kernel():
    # Qwen3-30B-A3B: 48 MoE layers, no dense MLP and no shared expert; QK-norm
    qwen = kernels("qwen3-30b-a3b")
    assert not any(name.startswith("act_fn") for name in qwen)
    assert qwen["q_norm"][0] == 48
    # each MoE layer picks its tokens' 8 of 128 experts in a kernel of its own
    assert qwen["router top-k (topk_softmax)"] == (48, 128 * 2 + 8 * 8)
    # DeepSeek-V3: 3 dense layers and one shared expert of 2048 in each of the 58 MoE layers
    deepseek = kernels("deepseek-v3")
    # (FP8 weights, 16-bit activations)
    assert deepseek["act_fn (silu_and_mul)"] == (3, 3 * 18432 * 2)
    assert deepseek["act_fn (silu_and_mul), shared experts"] == (58, 3 * 2048 * 2)
    assert deepseek["kv_a_layernorm"] == (61, 2 * 512 * 2)


@pytest.mark.parametrize("tokens", [1, 64, 2048])
def test_llama_small_kernel_time_per_step_by_hand(tokens):
    model, gpu = load_model("llama-3.1-8b"), load_gpu("h100-sxm")
    calls = 64 + 32 + 32 + 2
    row_bytes = (64 * 4 * 4096 * 2 + 32 * 2 * 5120 * 2 + 32 * 3 * 14336 * 2
                 + 2 * 4096 * 2 + 4 * 4096 * 2)
    s_per_byte = 1 / (gpu.small_kernel_memory_efficiency * gpu.mem_bytes_per_s)
    expected = calls * gpu.small_kernel_floor_s + row_bytes * max(
        gpu.small_kernel_cta_s_per_byte, tokens * s_per_byte)
    cost = CostModel(model, gpu)
    batch = BatchShape.from_chunks([(tokens, 0, True)])
    (small,) = [op for op in cost.operators(batch) if op.name == SMALL]
    assert small.memory_s == pytest.approx(expected, rel=1e-12)
    assert small_kernel_prices(model, gpu).step_s(tokens) == pytest.approx(expected, rel=1e-12)


def test_small_kernels_on_h100_in_numbers():
    """The shipped H100 fit on Llama-3.1-8B: a decode-sized step pays every kernel's floor and
    one row through one block; a 2,048-token chunk its bytes at the bandwidth."""
    prices = small_kernel_prices(load_model("llama-3.1-8b"), load_gpu("h100-sxm"))
    assert prices.step_s(1) == pytest.approx(403e-6, rel=0.02)
    assert prices.step_s(64) == prices.step_s(1)
    assert prices.step_s(2048) == pytest.approx(3.99e-3, rel=0.02)


def test_sampler_reads_each_sampled_rows_logits():
    model, gpu = load_model("qwen3-32b"), load_gpu("h100-sxm")
    assert sampler_bytes_per_row(model) == SAMPLER_PASSES * 151936 * 4
    cost = CostModel(model, gpu)
    batch = BatchShape.from_chunks([(1, 100, True)] * 32)
    (sampler,) = [op for op in cost.operators(batch) if op.name == "sampler"]
    assert sampler.memory_s == pytest.approx(
        32 * sampler_bytes_per_row(model)
        / (gpu.small_kernel_memory_efficiency * gpu.mem_bytes_per_s), rel=1e-12)


def test_small_kernels_cost_more_of_a_tp8_step():
    """The hidden-size norms are not split by tensor parallelism: at TP8 they are a larger
    share of a prefill chunk than at TP1."""
    model, gpu = load_model("llama-3.1-8b"), load_gpu("h100-sxm")
    batch = BatchShape.from_chunks([(2048, 0, True)])
    shares = []
    for tp in (1, 8):
        cost = CostModel(model, gpu, tp)
        ops = cost.operators(batch)
        (small,) = [op for op in ops if op.name == SMALL]
        shares.append(small.time_s / sum(op.time_s for op in ops))
    assert shares[1] > 1.5 * shares[0]


def test_the_shipped_profiles_hold_the_fit():
    profiles = load_profiles("calibrated")
    efficiency = {g: profiles[g]["memory_efficiency"] for g in fit.PROFILES}
    fits = fit.calibrate(efficiency)
    for gpu_id in ("h100-sxm", "h200", "rtx4090", "rtx-pro-6000-server"):
        assert {k: profiles[gpu_id][k] for k in fits[gpu_id].values()} == fits[gpu_id].values()
    for gpu_id, donor in fit.TRANSFERS.items():
        assert profiles[gpu_id]["small_kernel_floor_s"] == fits[donor].floor_s


def test_the_fits_follow_their_tables():
    fits = fit.calibrate({"rtx4090": 0.85, "rtx-pro-6000-server": 0.94})
    h100 = fits["h100-sxm"]
    # aiconfigurator's element-wise kernel under CUDA graphs: a floor near 2 us, past the L2
    # cache most of the datasheet bandwidth
    assert 1.5e-6 < h100.floor_s < 2.5e-6
    assert 0.8 < h100.memory_efficiency < 1.0
    assert h100.rms_log_error < 0.3
    assert fits["h200"].floor_s < h100.floor_s
    for gpu_id in fit.PROFILES:
        assert 1.5e-6 < fits[gpu_id].floor_s < 3e-6


def test_sampler_passes_are_fitted():
    assert fit.fit_sampler_passes() == pytest.approx(SAMPLER_PASSES, abs=0.05)
