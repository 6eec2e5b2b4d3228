"""The two MoE models of the measured serving sweeps: MiniMax-M2.5 (FP8 blocks, GQA) and
Kimi-K2.5 (INT4 routed experts, MLA), as their config.json files describe them and vLLM loads
and runs them."""

from __future__ import annotations

import json

import pytest

from clustersim.catalog import load_gpu, load_model
from clustersim.catalog.quantization import QuantizationSpec
from clustersim.cost.collectives import add_segments, allreduce_segments
from clustersim.cost.roofline import BatchShape, CostModel
from clustersim.engine.quantization import served_model
from clustersim.errors import ConfigError
from tests.helpers import run_cli, scenario, write_scenario

KIMI_INT4 = {  # Kimi-K2.5's quantization_config (its ignore list keeps all but the experts)
    "quant_method": "compressed-tensors", "format": "pack-quantized",
    "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
        "num_bits": 4, "type": "int", "symmetric": True, "strategy": "group",
        "group_size": 32}}},
    "ignore": ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*",
               "re:.*mlp\\.(gate|up|gate_up|down)_proj.*", "re:vision_tower.*",
               "re:mm_projector.*"],
}
KIMI_K25_CONFIG = {  # the fields of moonshotai/Kimi-K2.5's config.json the reader uses
    "architectures": ["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25",
    "quantization_config": KIMI_INT4,
    "text_config": {
        "architectures": ["DeepseekV3ForCausalLM"], "model_type": "kimi_k2",
        "num_hidden_layers": 61, "hidden_size": 7168, "num_attention_heads": 64,
        "num_key_value_heads": 64, "intermediate_size": 18432, "vocab_size": 163840,
        "max_position_embeddings": 262144, "n_routed_experts": 384, "n_shared_experts": 1,
        "num_experts_per_tok": 8, "moe_intermediate_size": 2048, "moe_layer_freq": 1,
        "first_k_dense_replace": 1, "n_group": 1, "topk_group": 1, "kv_lora_rank": 512,
        "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
        "v_head_dim": 128, "tie_word_embeddings": False, "torch_dtype": "bfloat16"},
}
MINIMAX_M25_CONFIG = {  # the fields of MiniMaxAI/MiniMax-M2.5's config.json the reader uses
    "architectures": ["MiniMaxM2ForCausalLM"], "model_type": "minimax_m2",
    "num_hidden_layers": 62, "hidden_size": 3072, "num_attention_heads": 48,
    "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 1536,
    "num_local_experts": 256, "num_experts_per_tok": 8, "shared_intermediate_size": 0,
    "vocab_size": 200064, "max_position_embeddings": 196608, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "use_qk_norm": True, "qk_norm_type": "per_layer",
    "quantization_config": {"quant_method": "fp8", "fmt": "float8_e4m3fn",
                            "activation_scheme": "dynamic", "weight_block_size": [128, 128],
                            "modules_to_not_convert": ["gate", "e_score_correction_bias",
                                                       "lm_head"]},
}


def _read(tmp_path, name, config):
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    return load_model(str(folder))


@pytest.mark.parametrize(("model_id", "config"), [("kimi-k2.5", KIMI_K25_CONFIG),
                                                  ("minimax-m2.5", MINIMAX_M25_CONFIG)])
def test_the_config_json_reads_as_the_catalog_entry(tmp_path, model_id, config):
    model, catalog = _read(tmp_path, model_id, config), load_model(model_id)
    assert model.num_params == catalog.num_params
    assert model.active_params == catalog.active_params
    assert model.quantization == catalog.quantization
    assert model.weight_bytes == catalog.weight_bytes
    assert model.qk_norm_across_heads == catalog.qk_norm_across_heads


def test_minimax_counts_what_its_model_card_says():
    model = load_model("minimax-m2.5")
    # 230B total, 10B activated (model card); the Hub's safetensors count is these weights
    # (with the q/k norms' 62 x (6,144 + 1,024) weights over all heads) plus one fp32 scale
    # per 128 x 128 block of every FP8 layer and the router's 62 x 256 score-correction biases
    assert model.num_params == 228_689_748_992
    assert (model.active_params - 2 * 200_064 * 3072) / 1e9 == pytest.approx(9.80, abs=0.01)
    scales = sum(-(-k // 128) * -(-n // 128) * count for k, n, count in model.linear_shapes())
    assert model.num_params + scales + 62 * 256 == 228_703_644_928
    # GQA: 8 KV heads of 128, 62 layers, BF16; TP4 holds 2 heads a rank, TP8 one
    assert model.kv_bytes_per_token() == 2 * 62 * 8 * 128 * 2 == 253_952
    assert model.kv_bytes_per_token(4) == 63_488 and model.kv_bytes_per_token(8) == 31_744


def test_kimi_keeps_all_but_its_routed_experts_in_bf16():
    model = load_model("kimi-k2.5")
    quant = model.quantization
    assert quant == QuantizationSpec(method="compressed-tensors", weight_bits=4,
                                     weight_type="int", group_size=32, scale_bytes=2,
                                     modules="experts", excluded=(
                                         "lm_head", "re:.*self_attn.*", "re:.*shared_experts.*",
                                         "re:.*mlp\\.(gate|up|gate_up|down)_proj.*",
                                         "re:vision_tower.*", "re:mm_projector.*"))
    # 60 MoE layers x 384 experts x 3 x 7168 x 2048 weights at 4 bits + a BF16 scale per 32
    experts = 60 * 384 * 3 * 7168 * 2048
    assert model.weight_bytes == pytest.approx(
        experts * (0.5 + 2 / 32) + (model.num_params - experts) * 2)
    assert model.weight_bytes / 1e9 == pytest.approx(594.2, abs=0.1)
    assert model.kv_bytes_per_token(8) == 61 * (512 + 64) * 2 == 70_272  # one latent a rank


def test_kimi_runs_its_experts_on_marlin_and_the_rest_in_16_bits():
    gpu = load_gpu("h200")
    cost = CostModel(served_model(load_model("kimi-k2.5"), gpu), gpu, tp=8)
    # the experts on vLLM's Marlin MoE kernel as the H200 measured it (clustersim.cost.moe)
    assert (cost.kernel.name, cost.expert_kernel.name) == ("w16a16", "fused_moe_int4_wo_marlin")
    assert cost.experts is not None and cost.experts.curve is not None
    minimax = CostModel(served_model(load_model("minimax-m2.5"), gpu), gpu, tp=4)
    assert (minimax.kernel.name, minimax.expert_kernel.name) == (
        "w8a8_fp8", "fused_moe_fp8_block_triton")


def test_minimax_runs_eight_gpus_with_whole_experts():
    """MiniMax-M2.5's 1,536-wide experts sliced 8 ways are 192 wide, not whole 128x128 FP8
    blocks: vLLM refuses to load them (Fp8MoEMethod.create_weights), and its recipe runs eight
    GPUs with expert parallelism. clustersim refuses the sliced layout where vLLM does, and
    prices the one that runs: 32 whole experts a GPU on FlashInfer's CUTLASS kernel, the H200's
    measured curve at moe_ep 8."""
    gpu = load_gpu("h200")
    model = served_model(load_model("minimax-m2.5"), gpu)
    why = model.expert_slice_refusal(8, expert_parallel=False)
    assert why is not None and "192 columns a GPU" in why and "block_n = 128" in why
    assert model.expert_slice_refusal(4, expert_parallel=False) is None  # 384 = 3 blocks
    assert model.expert_slice_refusal(8, expert_parallel=True) is None
    with pytest.raises(ConfigError, match="192 columns a GPU") as refused:
        CostModel(model, gpu, tp=8)
    assert refused.value.path == "enable_expert_parallel"
    with pytest.raises(ConfigError, match="192 columns a GPU"):
        CostModel(model, gpu, tp=4, dp=2)  # a DP group's MoE layers slice over all 8 GPUs
    whole = CostModel(model, gpu, tp=8, expert_parallel=True)
    assert whole.experts is not None and whole.experts.curve is not None
    assert (whole.experts.kernel.kernel, whole.experts.moe_tp, whole.experts.moe_ep) == (
        "flashinfer_cutlass", 1, 8)
    # DeepSeek-V3's 2,048-wide experts take slices down to 16 GPUs (128 wide), not 32
    deepseek = load_model("deepseek-v3")
    assert deepseek.expert_slice_refusal(16, expert_parallel=False) is None
    assert "64 columns a GPU" in (deepseek.expert_slice_refusal(32, expert_parallel=False) or "")
    # without FP8 blocks nothing is refused (Kimi-K2.5's INT4 groups, a dense model)
    assert load_model("kimi-k2.5").expert_slice_refusal(64, expert_parallel=False) is None
    assert load_model("llama-3.1-70b").expert_slice_refusal(8, expert_parallel=False) is None


def test_minimax_all_reduces_its_qk_norm_variances_every_layer():
    """MiniMax-M2 normalises q and k over all heads of a layer (qk_norm_type per_layer): vLLM's
    MiniMaxText01RMSNormTP sums each rank's squares, all-reduces the two sums per token over TP
    and normalises, every layer. The step pays one more latency-bound all-reduce a layer, priced
    on the GPU's measured curve at its 8 bytes a token, and two small kernels a layer."""
    gpu = load_gpu("h200")
    model = served_model(load_model("minimax-m2.5"), gpu)
    assert model.qk_norm_across_heads and not model.qk_norm
    without = model.model_copy(update={"qk_norm_across_heads": False})
    batch = BatchShape(num_decode_tokens=4, decode_kv_tokens=4 * 1500, num_sampled=4,
                       num_seqs=4)

    def by_name(cost: CostModel) -> dict[str, float]:
        return {op.name: op.compute_s + op.memory_s + op.communication_s + op.overhead_s
                for op in cost.operators(batch)}

    for tp in (4, 8):
        ep = tp == 8  # eight GPUs hold whole experts (test_minimax_runs_eight_gpus_...)
        ops = by_name(CostModel(model, gpu, tp=tp, expert_parallel=ep))
        base = by_name(CostModel(without, gpu, tp=tp, expert_parallel=ep))
        ((name, extra_ar),) = [(n, ops[n] - base[n]) for n in ops if n.startswith("all-reduce")]
        ((_, one_ar, per_token, _), *_) = allreduce_segments(gpu, tp, 8.0, 1)
        assert extra_ar == pytest.approx(62 * (one_ar + 4 * per_token))
        assert one_ar > 4e-6  # the measured all-reduce's latency: ~0.3 ms a step
        small = next(n for n in ops if n.startswith("norms"))
        floors = 2 * 62 * gpu.small_kernel_floor_s
        assert ops[small] - base[small] >= floors
    # one GPU: no all-reduce, the norm is one kernel
    one, base = by_name(CostModel(model, gpu, tp=1)), by_name(CostModel(without, gpu, tp=1))
    assert not [n for n in one if n.startswith("all-reduce")]
    small = next(n for n in one if n.startswith("norms"))
    assert 62 <= (one[small] - base[small]) / gpu.small_kernel_floor_s < 2 * 62


def test_the_qk_norm_over_all_heads_is_read_from_the_config(tmp_path):
    per_head = {**MINIMAX_M25_CONFIG, "qk_norm_type": "per_head"}
    assert not _read(tmp_path, "per-head", per_head).qk_norm_across_heads
    assert _read(tmp_path, "per-layer", MINIMAX_M25_CONFIG).qk_norm_across_heads


def test_two_lists_of_all_reduce_segments_add_point_by_point():
    gpu = load_gpu("h200")
    layers, hidden = allreduce_segments(gpu, 4, 8.0, 62), allreduce_segments(gpu, 4, 6144.0, 125)
    total = add_segments(hidden, layers)
    assert total[-1][0] == float("inf") and total[0][3] == hidden[0][3]

    def price(segments, tokens):
        upto, fixed, per_token, _ = next(s for s in segments if s[0] > tokens)
        return fixed + tokens * per_token

    for tokens in (1, 4, 100, 1000, 5000, 100_000, 10_000_000):
        assert price(total, tokens) == pytest.approx(price(hidden, tokens)
                                                     + price(layers, tokens))


@pytest.mark.parametrize(("fields", "path"), [
    ({}, "enable_expert_parallel"),
    ({"layout": {"kind": "colocated", "pools": [
        {"name": "a", "tensor_parallel_size": 8, "enable_expert_parallel": False}]}},
     "layout.pools[0].enable_expert_parallel"),
])
def test_a_scenario_slicing_fp8_blocks_is_refused_as_vllm_refuses_it(tmp_path, fields, path):
    """MiniMax-M2.5 at TP8 without expert parallelism: one line naming the field, exit 2, as
    vLLM fails at start-up; with it, the scenario runs."""
    data = scenario(model="minimax-m2.5", gpu="h200", tensor_parallel_size=8,
                    cost={"kind": "fixed", "step_time_s": 0.01}, **fields)
    code, output = run_cli("simulate", str(write_scenario(tmp_path, data)),
                           "--out", str(tmp_path / "out"))
    assert code == 2
    assert f"{path}: minimax-m2.5's 1,536-wide experts sliced over 8 GPUs leave 192" in output
    assert "Traceback" not in output
    ok = scenario(model="minimax-m2.5", gpu="h200", tensor_parallel_size=8,
                  enable_expert_parallel=True, cost={"kind": "fixed", "step_time_s": 0.01})
    code, output = run_cli("simulate", str(write_scenario(tmp_path, ok, "ok.yaml")),
                           "--out", str(tmp_path / "ok"))
    assert code == 0, output


def test_step_time_refuses_the_sliced_experts_by_its_option():
    code, output = run_cli("step-time", "--model", "minimax-m2.5", "--gpu", "h200", "--tp", "8",
                           "--decode-batch", "8", "--context", "1024")
    assert code == 2
    assert "--expert-parallel: minimax-m2.5's 1,536-wide experts" in output
    code, output = run_cli("step-time", "--model", "minimax-m2.5", "--gpu", "h200", "--tp", "8",
                           "--expert-parallel", "--decode-batch", "8", "--context", "1024")
    assert code == 0, output
    assert "kernel flashinfer_cutlass" in output
