"""Mixture-of-experts models: parameter counts, config.json, step pricing and KV capacity."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from pydantic import ValidationError

from clustersim.catalog import load_gpu, load_model
from clustersim.cost.memory import cuda_graph_bytes, kv_budget
from clustersim.cost.prices import experts_touched
from clustersim.cost.roofline import BatchShape, CostModel, StepCost
from clustersim.cost.small_kernels import sampler_bytes_per_row, small_kernel_prices
from clustersim.cost.vllm_profile import activation_peak_bytes, forward_peak_bytes, profile_rules
from clustersim.errors import InputError
from clustersim.scenario import parse_scenario
from clustersim.sim import run_scenario
from tests.helpers import explicit, scenario
from tests.test_cost import (
    SAMPLER_BYTES,
    SMALL_KERNEL_BYTES,
    decode_batch,
    make_gpu,
    make_model,
)

QWEN3_MOE_CONFIG = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "model_type": "qwen3_moe",
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "moe_intermediate_size": 768,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "norm_topk_prob": True,
    "head_dim": 128,
    "max_position_embeddings": 40960,
    "num_attention_heads": 32,
    "num_hidden_layers": 48,
    "num_key_value_heads": 4,
    "attention_bias": False,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vocab_size": 151936,
}

MIXTRAL_CONFIG = {
    "architectures": ["MixtralForCausalLM"],
    "model_type": "mixtral",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_local_experts": 8,
    "num_experts_per_tok": 2,
    "max_position_embeddings": 32768,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vocab_size": 32000,
}


def write_config(tmp_path: Path, config: dict, name: str = "my-moe") -> str:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return str(folder)


def make_moe(**overrides):
    """The toy model of test_cost with its MLP split into 4 experts of 32, top-2."""
    return make_model(
        **{"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32, **overrides}
    )


# ------------------------------------------------------------- parameters
def test_param_counts_by_hand_qwen3_30b_a3b():
    h, layers = 2048, 48
    attention = h * (4096 + 2 * 512) + 4096 * h  # q, k, v (32 / 4 heads of 128), o
    expert = 3 * h * 768  # gate, up, down
    router = h * 128
    norms = 2 * h + 2 * 128  # two RMSNorms + q/k norms
    embeddings = 2 * 151936 * h + h  # untied embed + lm_head, final norm
    model = load_model("qwen3-30b-a3b")
    total = embeddings + layers * (attention + 128 * expert + router + norms)
    active = embeddings + layers * (attention + 8 * expert + router + norms)
    assert model.num_params == total == 30_532_122_624
    assert model.active_params == active == 3_353_032_704
    assert model.weight_bytes == 2 * total  # every expert is resident
    assert active / 1e9 == pytest.approx(3.35, rel=0.01)


def test_param_counts_by_hand_mixtral_8x7b():
    h, layers = 4096, 32
    attention = h * (4096 + 2 * 1024) + 4096 * h
    expert = 3 * h * 14336
    per_layer_rest = attention + h * 8 + 2 * h  # router, two norms
    embeddings = 2 * 32000 * h + h
    model = load_model("mixtral-8x7b")
    assert model.num_params == embeddings + layers * (per_layer_rest + 8 * expert)
    assert model.num_params == 46_702_792_704
    assert model.active_params == embeddings + layers * (per_layer_rest + 2 * expert)
    assert model.active_params == 12_879_925_248
    assert model.active_params / 1e9 == pytest.approx(12.88, rel=0.01)


def test_dense_active_params_are_all_params():
    model = load_model("llama-3.1-8b")
    assert not model.is_moe
    assert model.active_params == model.num_params == 8_030_261_248


def test_moe_fields_are_validated():
    with pytest.raises(ValidationError, match="num_experts_per_tok 5 must be in"):
        make_moe(num_experts_per_tok=5)
    with pytest.raises(ValidationError, match="moe_intermediate_size > 0"):
        make_moe(moe_intermediate_size=0)
    with pytest.raises(ValidationError, match="need num_experts > 0"):
        make_model(num_experts_per_tok=2)
    with pytest.raises(ValidationError, match="gated MLPs"):
        make_moe(mlp="plain")


# ------------------------------------------------------------ config.json
def test_hf_config_qwen3_moe_matches_the_catalog(tmp_path):
    model = load_model(write_config(tmp_path, QWEN3_MOE_CONFIG))
    catalog = load_model("qwen3-30b-a3b")
    assert (model.num_experts, model.num_experts_per_tok, model.moe_intermediate_size) == (
        128,
        8,
        768,
    )
    assert model.qk_norm
    assert model.num_params == catalog.num_params
    assert model.active_params == catalog.active_params


def test_hf_config_mixtral_experts_are_intermediate_size_wide(tmp_path):
    model = load_model(write_config(tmp_path, MIXTRAL_CONFIG))
    assert (model.num_experts, model.num_experts_per_tok, model.moe_intermediate_size) == (
        8,
        2,
        14336,
    )
    assert model.num_params == load_model("mixtral-8x7b").num_params


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"kv_lora_rank": 512, "n_routed_experts": 256}, "multi-head latent attention"),
        ({"n_routed_experts": 256}, "both num_experts and n_routed_experts count experts"),
        ({"shared_expert_intermediate_size": 5632}, "shared-expert"),
        ({"decoder_sparse_step": 2}, "dense layers between MoE layers"),
        ({"mlp_only_layers": [0, 1]}, "dense layers"),
    ],
)
def test_hf_config_unsupported_moe_layouts_are_refused(tmp_path, extra, message):
    path = write_config(tmp_path, {**QWEN3_MOE_CONFIG, **extra})
    with pytest.raises(InputError, match=message):
        load_model(path)


def test_hf_config_moe_needs_top_k(tmp_path):
    config = {k: v for k, v in MIXTRAL_CONFIG.items() if k != "num_experts_per_tok"}
    with pytest.raises(InputError, match="missing key 'num_experts_per_tok'"):
        load_model(write_config(tmp_path, config))


# ------------------------------------------------------- expected routing
def test_experts_touched_under_uniform_routing():
    assert experts_touched(128, 8, 1) == 8.0  # one token: its own top-k
    assert experts_touched(8, 2, 1) == 2.0
    assert experts_touched(4, 2, 4) == 4 * (1 - 0.5**4) == 3.75
    assert experts_touched(128, 8, 2048) == pytest.approx(128, rel=1e-12)  # all of them
    assert experts_touched(8, 8, 3) == 8.0  # top-k = E: every expert every step
    counts = [experts_touched(128, 8, t) for t in range(1, 200)]
    assert all(a < b for a, b in zip(counts, counts[1:], strict=False))


# --------------------------------------------------- hand-computed, toy GPU
def test_moe_decode_by_hand():
    cost = CostModel(make_moe(), make_gpu()).step_time(decode_batch(1, 9))
    # One token touches its top-2 of 4 experts (2 x 2 routed rows). Per layer in bytes, all
    # memory-bound at 1e11 B/s:
    #   qkv     64x128: 16384 + (64+128)*2             = 16768
    #   o       64x64:   8192 + (64+64)*2              =  8448
    #   router  64x4:     512 + (64+4)*2               =   648
    #   gate_up 64x64 per expert: 2*8192 + 2*(64+64)*2 = 16896
    #   down    32x64 per expert: 2*4096 + 2*(32+64)*2 =  8576
    gemm_bytes = 2 * (16768 + 8448 + 648 + 16896 + 8576)
    lm_head_bytes = 64 * 256 * 2 + (64 + 256) * 2
    kv_bytes = (10 + 1) * 256
    # the dense toy's small kernels without its activation (inside the fused experts), plus
    # each layer's router top-k: 4 logits in, 2 weights and ids out
    small_bytes = SMALL_KERNEL_BYTES - 2 * 3 * 128 * 2 + 2 * (4 * 2 + 2 * 8)
    memory = (gemm_bytes + lm_head_bytes + kv_bytes + small_bytes + SAMPLER_BYTES) / 1e11
    overhead = 1e-3 + 2 * 1e-4 + 1 * 1e-5
    assert cost == StepCost(
        time_s=pytest.approx(memory + overhead, rel=1e-12),
        compute_s=0.0,
        memory_s=pytest.approx(memory, rel=1e-12),
        communication_s=0.0,
        overhead_s=pytest.approx(overhead, rel=1e-12),
    )


def test_moe_prefill_compute_by_hand_pays_efficiency_per_expert():
    # memory so fast that every op is compute-bound; GEMMs 1e12 FLOP/s at
    # eff x M / (M + 8) for M rows
    gpu = make_gpu(mem_bw_gb_per_s=1e9, compute_half_tokens=8.0)
    cost = CostModel(make_moe(), gpu).step_time(BatchShape.from_chunks([(4, 0, True)]))
    # 4 tokens x top-2 = 8 routed rows over 4 x (1 - 0.5^4) = 3.75 experts; each expert's
    # GEMM pays its own half-tokens term: FLOPs x (8 + 3.75 x 8) per routed-row FLOP count
    per_layer_flops = (
        (4 + 8) * 2 * 64 * 128  # qkv
        + (4 + 8) * 2 * 64 * 64  # o
        + (4 + 8) * 2 * 64 * 4  # router
        + (8 + 3.75 * 8) * 2 * 64 * 64  # expert gate_up
        + (8 + 3.75 * 8) * 2 * 32 * 64  # expert down
    )
    lm_head_flops = (1 + 8) * 2 * 64 * 256  # one sampled row
    flops = 2 * per_layer_flops + lm_head_flops
    attention_flops = 2 * 2 * 2 * 64 * (4 * 5 / 2)  # layers x MAC x matmuls x q_out x pairs
    compute = flops / 1e12 + attention_flops / 5e11
    assert flops == 1_830_912
    assert cost.compute_s == pytest.approx(compute, rel=1e-12)
    assert cost.memory_s == pytest.approx(0.0, abs=1e-12)  # the small kernels' bytes


# ---------------------------------------------------------- real models
def test_qwen3_moe_decode_reads_only_the_routed_experts():
    # fit-v1: one memory efficiency for every byte, no kernel floors (fit-v2's terms are
    # hand-computed in test_cost)
    model, gpu = load_model("qwen3-30b-a3b"), load_gpu("h100-sxm", profile="vidur")
    cost = CostModel(model, gpu).step_time(decode_batch(1, 1024))
    # per layer in bytes: weights + activations (in + out), BF16; the decode touches 8 experts
    per_layer = (
        2048 * 5120 * 2 + (2048 + 5120) * 2  # qkv
        + 4096 * 2048 * 2 + (4096 + 2048) * 2  # o
        + 2048 * 128 * 2 + (2048 + 128) * 2  # router
        + 8 * (2048 * 1536 * 2 + (2048 + 1536) * 2)  # gate_up of 8 experts
        + 8 * (768 * 2048 * 2 + (768 + 2048) * 2)  # down of 8 experts
    )
    lm_head = 2048 * 151936 * 2 + (2048 + 151936) * 2
    kv = (1025 + 1) * 98304
    bytes_read = 48 * per_layer + lm_head + kv
    assert bytes_read == 6_190_883_584
    bytes_per_s = gpu.memory_efficiency * gpu.mem_bytes_per_s
    # fit-v1 has no small-kernel floor: their bytes (one token's) and the sampler's at the
    # same efficiency
    small = small_kernel_prices(model, gpu)
    small_bytes = small.row_bytes + sampler_bytes_per_row(model)
    assert cost.compute_s == 0.0
    assert cost.memory_s == pytest.approx((bytes_read + small_bytes) / bytes_per_s, rel=1e-12)
    # far below a dense 30 B model's weight read, above the 3.35 B active-weight read at peak
    dense_bound_s = model.weight_bytes / gpu.mem_bytes_per_s  # 61.06 GB / 3.35 TB/s = 18.2 ms
    active_bound_s = model.active_params * 2 / gpu.mem_bytes_per_s  # 6.71 GB: 2.0 ms
    assert active_bound_s < cost.time_s < dense_bound_s / 3


def test_qwen3_moe_large_prefill_reads_every_expert():
    model, gpu = load_model("qwen3-30b-a3b"), load_gpu("h100-sxm", profile="vidur")
    cost = CostModel(model, gpu).step_time(BatchShape.from_chunks([(2048, 0, True)]))
    all_experts_s = 48 * 128 * 3 * 2048 * 768 * 2 / (gpu.memory_efficiency * gpu.mem_bytes_per_s)
    assert experts_touched(128, 8, 2048) == pytest.approx(128)
    assert cost.compute_s + cost.memory_s > all_experts_s
    # one decode touching 8 experts is far cheaper
    decode = CostModel(model, gpu).step_time(decode_batch(1, 2048))
    assert decode.memory_s < all_experts_s / 8


@pytest.mark.parametrize("model_id", ["qwen3-30b-a3b", "mixtral-8x7b"])
def test_moe_step_time_grows_with_batch(model_id):
    cost_model = CostModel(load_model(model_id), load_gpu("h100-sxm"), 2)
    decodes = [cost_model.step_time(decode_batch(b, 512)).time_s for b in (1, 2, 4, 16, 64, 256)]
    assert all(a < b for a, b in zip(decodes, decodes[1:], strict=False))
    prefills = [
        cost_model.step_time(BatchShape.from_chunks([(t, 0, True)])).time_s
        for t in (1, 8, 64, 512, 2048, 8192)
    ]
    assert all(a < b for a, b in zip(prefills, prefills[1:], strict=False))


def test_moe_tp_shards_every_expert():
    model, gpu = load_model("mixtral-8x7b"), load_gpu("h100-sxm")
    one, two = (CostModel(model, gpu, tp) for tp in (1, 2))
    # the measured kernel: a TP2 slice of every expert streams half the weights (0.142 ms a
    # layer at one token against 0.256)
    experts = [_experts_s(cost, decode_batch(1, 512)) for cost in (one, two)]
    assert experts[1] < 0.6 * experts[0]
    assert two.step_time(decode_batch(1, 512)).communication_s > 0.0


def _experts_s(cost: CostModel, batch: BatchShape) -> float:
    return cost.experts_s(batch)


# Computed with the dense-only cost model before MoE support (h100-sxm on fit-v1, then shipped):
# (tp, chunks) -> (time_s, compute_s, memory_s); MoE support must not move them by a bit (the
# small kernels, priced since, add their bytes and the sampler's to the memory-bound time).
DENSE_BEFORE_MOE = {
    (1, "decode1"): (0.008335291489220563, 0.0, 0.007177691489220563),
    (1, "decode64"): (0.012767745936981758, 0.0, 0.011332945936981758),
    (1, "prefill2048"): (0.048704255058629665, 0.04704869824460455, 0.0004979568140251125),
    (1, "mixed"): (0.01699718369641555, 0.014969255565640851, 0.000799928130774698),
    (2, "decode1"): (0.006194714277080208, 0.0, 0.0035890961042407015),
    (2, "decode64"): (0.00866725904656611, 0.0, 0.005682495984837716),
    (2, "prefill2048"): (0.029691347445395803, 0.023524349122302276, 0.0002489803477848851),
    (2, "mixed"): (0.011413418159824296, 0.0074846277828204254, 0.0003999951177446103),
}
DENSE_SHAPES = {
    "decode1": [(1, 1024, True)],
    "decode64": [(1, 1024, True)] * 64,
    "prefill2048": [(2048, 0, True)],
    "mixed": [(512, 256, False)] + [(1, 300, True)] * 16,
}


@pytest.mark.parametrize(("tp", "shape"), list(DENSE_BEFORE_MOE))
def test_dense_step_times_are_unchanged(tp, shape):
    cost_model = CostModel(load_model("llama-3.1-8b"), load_gpu("h100-sxm", profile="vidur"), tp)
    batch = BatchShape.from_chunks(DENSE_SHAPES[shape])
    cost = cost_model.step_time(batch)
    before_time, compute, memory = DENSE_BEFORE_MOE[tp, shape]
    small = small_kernel_prices(cost_model.model, cost_model.gpu, tp)
    added = (small.step_s(batch.num_prefill_tokens + batch.num_decode_tokens)
             + batch.num_sampled * small.sampler_s_per_row)
    assert cost.compute_s == compute
    assert cost.memory_s == pytest.approx(memory + added, rel=1e-12)
    if tp == 1:
        assert cost.time_s == pytest.approx(before_time + added, rel=1e-12)
    else:  # TP communication since gained the embedding all-reduce and the logits all-gather
        assert cost.time_s > before_time + added


# ------------------------------------------------------- memory and a run
def test_moe_activation_peak_has_top_k_routed_rows():
    model = load_model("qwen3-30b-a3b")
    # residual, normed input and output (3 x 2048) + 8 routed rows of the fused MoE's
    # workspace (the larger of gate_up 1536 and hidden 2048) and its SiLU out (768)
    assert forward_peak_bytes(model, 1, 100) == 100 * (3 * 2048 + 8 * (2048 + 768)) * 2
    assert forward_peak_bytes(model, 2, 100) == 100 * (3 * 2048 + 8 * (2048 + 384)) * 2


def test_qwen3_moe_scenario_runs_with_all_expert_weights_resident():
    data = scenario(
        model="qwen3-30b-a3b",
        engine={"gpu_memory_utilization": 0.9},
        workload=explicit(("a", 0.0, 64, 4), ("b", 0.0, 32, 3)),
    )
    result = run_scenario(parse_scenario(data))
    assert all(request.status.value == "finished" for request in result.requests)
    info = result.instances[0]
    gpu, model = load_gpu("h100-sxm"), load_model("qwen3-30b-a3b")
    # vLLM 0.33 (the default) also subtracts its CUDA-graph estimate
    graphs = cuda_graph_bytes(model, info.max_num_seqs, info.max_num_batched_tokens)
    assert graphs > 0
    budget = kv_budget(
        model,
        gpu,
        1,
        gpu_memory_utilization=0.9,
        block_size=16,
        max_num_batched_tokens=info.max_num_batched_tokens,
        max_num_seqs=info.max_num_seqs,
        cuda_graph_bytes=graphs,
    )
    # all 128 experts, not the 3.35 B active, and the rotary table (40,960 x 128 x 2 B)
    weights = 2 * 30_532_122_624 + 40_960 * 128 * 2
    assert budget.weight_bytes == weights
    requested = math.ceil(gpu.mem_capacity_bytes * 0.9)
    activation = activation_peak_bytes(model, 1, info.max_num_batched_tokens,
                                       info.max_num_seqs, profile_rules("0.33"), gpu)
    available = requested - weights - activation - gpu.non_torch_memory_bytes - graphs
    assert info.num_gpu_blocks == budget.num_gpu_blocks == available // (16 * 98304)
