"""KV-cache sizing at engine start-up (vllm_scheduler_spec.md section 6)."""

from __future__ import annotations

import math

import pytest

from clustersim.catalog import load_gpu, load_model
from clustersim.cost.memory import (
    kv_budget,
    kv_bytes_per_block,
    loaded_weight_bytes,
    mxfp4_expert_padding,
    num_gpu_blocks,
)
from clustersim.cost.vllm_profile import (
    SORT_SAMPLER_BYTES_PER_LOGIT,
    activation_peak_bytes,
    forward_peak_bytes,
    profile_rules,
    sampler_peak_bytes,
)
from clustersim.engine.quantization import served_model
from clustersim.errors import ConfigError

GIB = 1 << 30


def blocks(model_id: str, gpu_id: str, tp: int = 1, **overrides) -> int:
    settings = dict(gpu_memory_utilization=0.9, block_size=16, max_num_batched_tokens=2048,
                    max_num_seqs=256)
    settings.update(overrides)
    return num_gpu_blocks(load_model(model_id), load_gpu(gpu_id), tp, **settings)


def test_block_bytes_by_hand():
    llama8 = load_model("llama-3.1-8b")
    # 2 (K,V) x 16 tokens x 8 KV heads x 128 x 2 B x 32 layers
    assert kv_bytes_per_block(llama8, tp=1) == 2 * 16 * 8 * 128 * 2 * 32 == 2_097_152
    assert kv_bytes_per_block(llama8, tp=2) == 1_048_576
    assert kv_bytes_per_block(llama8, tp=1, block_size=32) == 4_194_304
    assert kv_bytes_per_block(llama8, tp=1, kv_dtype_bytes=1) == 1_048_576  # fp8 KV
    # 8 KV heads on 16 ranks: one head replicated per rank, not zero
    assert kv_bytes_per_block(load_model("llama-3.1-70b"), tp=16) == 2 * 16 * 1 * 128 * 2 * 80
    # Llama-2-7B has no GQA: 32 KV heads
    assert kv_bytes_per_block(load_model("llama-2-7b"), tp=1) == 2 * 16 * 32 * 128 * 2 * 32


def test_forward_peak_by_hand():
    # 2048 tokens x (3 x 4096 residual, normed input, down output + 2 x 14336 gate_up + 14336
    # SiLU out) x 2 B
    model = load_model("llama-3.1-8b")
    assert forward_peak_bytes(model, 1, 2048) == 2048 * (3 * 4096 + 3 * 14336) * 2
    # OPT's plain MLP: fc1 output and the ReLU output, each 20480 / 2 on a rank
    opt = load_model("opt-13b")
    assert forward_peak_bytes(opt, 2, 1000) == 1000 * (3 * 5120 + 10240 + 10240) * 2
    # MoE: per routed row a workspace as wide as max(gate_up, hidden) and the SiLU output
    moe = load_model("qwen3-30b-a3b")
    assert forward_peak_bytes(moe, 1, 100) == 100 * (3 * 2048 + 8 * (2048 + 768)) * 2


def test_sampler_peak_follows_the_release():
    model, gpu = load_model("llama-3.1-8b"), load_gpu("h100-sxm")
    vocab = 128_256
    # before 0.17: the sort-based top-k/top-p, 38.35 B a logit
    assert sampler_peak_bytes(model, 1, 1024, profile_rules("0.11"), gpu) == math.ceil(
        1024 * vocab * SORT_SAMPLER_BYTES_PER_LOGIT)
    # 0.17-0.23: 14 B a logit and the Triton kernel's buffer, one row per SM (132 on an H100)
    assert sampler_peak_bytes(model, 1, 1024, profile_rules("0.19"), gpu) == (
        1024 * vocab * 14 + 132 * vocab * 4)
    # 256 requests on 128 SMs (an RTX 4090): 128 rows
    assert sampler_peak_bytes(model, 1, 256, profile_rules("0.19"), load_gpu("rtx4090")) == (
        256 * vocab * 14 + 128 * vocab * 4)
    # 0.24-0.32: V2's plain dummy pass holds the bf16 logits only; 0.33 adds its fp32 pass
    assert sampler_peak_bytes(model, 1, 1024, profile_rules("0.28"), gpu) == 1024 * vocab * 2
    assert sampler_peak_bytes(model, 1, 1024, profile_rules("0.33"), gpu) == (
        1024 * vocab * 6 + 132 * vocab * 4)


def test_activation_is_the_larger_of_the_forward_and_the_sampler_over_its_hidden_states():
    model, gpu = load_model("llama-3.1-8b"), load_gpu("h100-sxm")
    rules = profile_rules("0.11")
    kept = 8192 * 4096 * 2
    assert activation_peak_bytes(model, 1, 8192, 1024, rules, gpu) == (
        kept + sampler_peak_bytes(model, 1, 1024, rules, gpu))
    v28 = profile_rules("0.28")
    assert activation_peak_bytes(model, 1, 8192, 1024, v28, gpu) == forward_peak_bytes(
        model, 1, 8192)


def test_release_rules():
    assert [profile_rules(v).default_gpu_memory_utilization
            for v in ("0.11", "0.19", "0.20", "0.33", "0.34")] == [0.9, 0.9, 0.92, 0.92, 1.0]
    assert [profile_rules(v).subtracts_cuda_graphs for v in ("0.19", "0.20")] == [False, True]
    assert [profile_rules(v).logs_tokens_by_concurrency for v in ("0.20", "0.21")] == [
        False, True]
    assert [profile_rules(v).extensible_kv_cache for v in ("0.33", "0.34", "1.0")] == [
        False, True, True]


def test_num_gpu_blocks_by_hand_llama_8b_h100_vllm_0_11():
    model, gpu = load_model("llama-3.1-8b"), load_gpu("h100-sxm")
    budget = kv_budget(model, gpu, 1, gpu_memory_utilization=0.9, block_size=16,
                       max_num_batched_tokens=8192, max_num_seqs=1024, vllm_version="0.11")
    requested = math.ceil(gpu.mem_capacity_bytes * 0.9)  # 0.9 x 79.18 GiB
    weights = math.ceil(8_030_261_248 * 2 + 131072 * 128 * 2)  # + the rotary table
    activation = math.ceil(8192 * 4096 * 2 + 1024 * 128_256 * SORT_SAMPLER_BYTES_PER_LOGIT)
    available = requested - weights - activation - gpu.non_torch_memory_bytes
    assert (budget.requested_bytes, budget.weight_bytes) == (requested, weights)
    assert (budget.activation_bytes, budget.cuda_graph_bytes) == (activation, 0)
    assert budget.available_bytes == available
    assert budget.num_gpu_blocks == available // 2_097_152


def test_the_extensible_kv_cache_keeps_the_startup_memory_and_a_margin_free():
    """vLLM 0.34 sizes the cache from the memory free after warm-up: with the default
    utilization 1.0 the device, not the budget, binds."""
    from clustersim.cost.vllm_profile import STARTUP_RESERVED_BYTES

    model, gpu = load_model("llama-3.1-8b"), load_gpu("h100-sxm")
    args = dict(block_size=16, max_num_batched_tokens=8192, max_num_seqs=1024,
                vllm_version="0.34", cuda_graph_bytes=10**9)
    budget = kv_budget(model, gpu, 1, **args)
    used = budget.weight_bytes + budget.non_torch_bytes + 10**9
    margin = max(GIB, int(0.75 * budget.activation_bytes))
    assert budget.requested_bytes == gpu.mem_capacity_bytes
    assert budget.available_bytes == (gpu.mem_capacity_bytes - STARTUP_RESERVED_BYTES - margin
                                      - used - budget.activation_bytes)
    # an explicit 0.9 binds instead, exactly as before 0.34
    lower = kv_budget(model, gpu, 1, gpu_memory_utilization=0.9, **args)
    assert lower.reserved_bytes == 0
    assert lower.available_bytes == (lower.requested_bytes - used - lower.activation_bytes)


def test_tp_shards_the_weights_and_adds_nccl_memory():
    model, gpu = load_model("llama-3.1-70b"), load_gpu("h100-sxm")
    one = kv_budget(model, gpu, 4, gpu_memory_utilization=0.9, block_size=16,
                    max_num_batched_tokens=8192, max_num_seqs=1024)
    assert one.weight_bytes == math.ceil(model.weight_bytes / 4 + 131072 * 128 * 2)
    assert one.bytes_per_block == 2 * 16 * 2 * 128 * 2 * 80
    assert one.non_torch_bytes == gpu.non_torch_memory_bytes + gpu.tp_non_torch_memory_bytes


def test_mxfp4_experts_take_their_kernels_layout():
    model = served_model(load_model("gpt-oss-20b"), load_gpu("h100-sxm"))
    # Hopper's Triton layout: 2880 -> 3072 along the hidden size
    assert mxfp4_expert_padding(model, load_gpu("h100-sxm")) == pytest.approx(3072 / 2880)
    # Marlin below 9.0: hidden 2880 -> 3072, expert width 2880 -> 2944
    assert mxfp4_expert_padding(model, load_gpu("a100-80gb-sxm")) == pytest.approx(
        3072 * 2944 / 2880**2)
    assert mxfp4_expert_padding(load_model("llama-3.1-8b"), load_gpu("h100-sxm")) == 1.0
    loaded = loaded_weight_bytes(model, load_gpu("h100-sxm"), 1)
    assert loaded == pytest.approx(model.weight_bytes + model.expert_weight_bytes / 15
                                   + 131072 * 64 * 2)
    # llm-d's vLLM 0.11 log: "Model loading took 13.47 GiB"
    assert loaded / GIB == pytest.approx(13.47, abs=0.02)


def test_blocks_grow_with_utilization():
    utilizations = (0.8, 0.85, 0.9, 0.95)
    counts = [blocks("llama-3.1-8b", "rtx4090", gpu_memory_utilization=u) for u in utilizations]
    assert counts == sorted(counts) and counts[0] < counts[-1]


def test_more_batched_tokens_leave_fewer_blocks():
    assert blocks("llama-3.1-8b", "h100-sxm", max_num_batched_tokens=16384) < blocks(
        "llama-3.1-8b", "h100-sxm", max_num_batched_tokens=2048
    )


def test_weights_too_big_is_a_config_error():
    with pytest.raises(ConfigError) as excinfo:
        blocks("llama-3.1-70b", "rtx4090")
    assert excinfo.value.path == "engine"
    assert "weights 141.14 GB" in excinfo.value.message
    assert "0.9 x 25.25 GB = 22.73 GB requested" in excinfo.value.message


def test_tp_makes_it_fit():
    with pytest.raises(ConfigError):
        blocks("llama-3.1-70b", "h100-sxm", tp=1)
    assert blocks("llama-3.1-70b", "h100-sxm", tp=2) > 0


def test_bad_utilization_and_tp():
    with pytest.raises(ConfigError, match="gpu_memory_utilization"):
        blocks("llama-3.1-8b", "h100-sxm", gpu_memory_utilization=1.5)
    with pytest.raises(ConfigError, match="does not divide"):
        blocks("qwen2.5-7b-instruct", "h100-sxm", tp=8)
