"""KV-cache sizing at engine start-up (vllm_scheduler_spec.md section 6)."""

from __future__ import annotations

import pytest

from clustersim.catalog import load_gpu, load_model
from clustersim.cost.memory import (
    activation_peak_bytes,
    kv_budget,
    kv_bytes_per_block,
    num_gpu_blocks,
)
from clustersim.errors import ConfigError


def blocks(model_id: str, gpu_id: str, tp: int = 1, **overrides) -> int:
    settings = dict(gpu_memory_utilization=0.9, block_size=16, max_num_batched_tokens=2048)
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


def test_activation_peak_by_hand():
    # 2048 tokens x (2 x 4096 residual+normed + 2 x 14336 gate_up + 14336 act) x 2 B
    model = load_model("llama-3.1-8b")
    assert activation_peak_bytes(model, 1, 2048) == 2048 * (8192 + 28672 + 14336) * 2
    # OPT's plain MLP: fc1 output and the ReLU output
    opt = load_model("opt-13b")
    assert activation_peak_bytes(opt, 2, 1000) == 1000 * (2 * 5120 + 10240 + 10240) * 2


def test_num_gpu_blocks_by_hand_llama_8b_h100():
    budget = kv_budget(
        load_model("llama-3.1-8b"),
        load_gpu("h100-sxm"),
        1,
        gpu_memory_utilization=0.9,
        block_size=16,
        max_num_batched_tokens=8192,
    )
    requested = 77_309_411_328  # 0.9 x 80 GiB
    weights = 16_060_522_496  # 8,030,261,248 params x 2 B
    activation = 8192 * 51200 * 2
    available = requested - weights - activation - 1_500_000_000
    assert (budget.requested_bytes, budget.weight_bytes) == (requested, weights)
    assert budget.available_bytes == available
    assert budget.num_gpu_blocks == available // 2_097_152 == 28090


def test_tp_shards_the_weights():
    one = kv_budget(
        load_model("llama-3.1-70b"),
        load_gpu("h100-sxm"),
        4,
        gpu_memory_utilization=0.9,
        block_size=16,
        max_num_batched_tokens=8192,
    )
    assert one.weight_bytes == load_model("llama-3.1-70b").weight_bytes // 4
    assert one.bytes_per_block == 2 * 16 * 2 * 128 * 2 * 80


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
    assert "weights 141.11 GB" in excinfo.value.message
    assert "0.9 x 25.39 GB = 22.85 GB requested" in excinfo.value.message


def test_tp_makes_it_fit():
    with pytest.raises(ConfigError):
        blocks("llama-3.1-70b", "h100-sxm", tp=1)
    assert blocks("llama-3.1-70b", "h100-sxm", tp=2) > 0


def test_bad_utilization_and_tp():
    with pytest.raises(ConfigError, match="gpu_memory_utilization"):
        blocks("llama-3.1-8b", "h100-sxm", gpu_memory_utilization=1.5)
    with pytest.raises(ConfigError, match="does not divide"):
        blocks("qwen2.5-7b-instruct", "h100-sxm", tp=8)
