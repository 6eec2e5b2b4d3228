"""DeepSeek-V3-class models: multi-head latent attention (MLA), shared experts and leading dense
layers, read from the catalog and from a config.json, in KV capacity, weights and step pricing."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from clustersim.catalog import load_gpu, load_model
from clustersim.cost.memory import kv_budget, kv_bytes_per_block, weight_bytes_per_gpu
from clustersim.cost.roofline import BatchShape, CostModel
from clustersim.engine.quantization import served_model
from clustersim.errors import ConfigError, InputError
from clustersim.scenario import parse_scenario
from clustersim.sim import run_scenario
from tests.helpers import explicit, run_cli, scenario

ROOT = Path(__file__).resolve().parent.parent

# https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json (DeepSeek-R1's is the
# same), less auto_map and the token ids.
DEEPSEEK_V3_CONFIG = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "ep_size": 1,
    "first_k_dense_replace": 3,
    "hidden_act": "silu",
    "hidden_size": 7168,
    "initializer_range": 0.02,
    "intermediate_size": 18432,
    "kv_lora_rank": 512,
    "max_position_embeddings": 163840,
    "model_type": "deepseek_v3",
    "moe_intermediate_size": 2048,
    "moe_layer_freq": 1,
    "n_group": 8,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "norm_topk_prob": True,
    "num_attention_heads": 128,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 61,
    "num_key_value_heads": 128,
    "num_nextn_predict_layers": 1,
    "q_lora_rank": 1536,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3",
                            "quant_method": "fp8", "weight_block_size": [128, 128]},
    "rms_norm_eps": 1e-06,
    "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0,
                     "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096,
                     "type": "yarn"},
    "rope_theta": 10000,
    "routed_scaling_factor": 2.5,
    "scoring_func": "sigmoid",
    "tie_word_embeddings": False,
    "topk_group": 4,
    "topk_method": "noaux_tc",
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "v_head_dim": 128,
    "vocab_size": 129280,
}
LATENT = 512 + 64  # kv_lora_rank + qk_rope_head_dim


def write_config(tmp_path: Path, config: dict, name: str = "deepseek-v3") -> str:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return str(folder)


# ------------------------------------------------------------------ the spec
def test_config_json_reads_into_the_catalog_spec(tmp_path):
    from_hf = load_model(write_config(tmp_path, DEEPSEEK_V3_CONFIG))
    catalog = load_model("deepseek-v3")
    skip = {"id", "hf_repo", "source"}
    assert from_hf.model_dump(exclude=skip) == catalog.model_dump(exclude=skip)
    assert (from_hf.kv_lora_rank, from_hf.q_lora_rank, from_hf.head_dim) == (512, 1536, 192)
    assert (from_hf.num_experts, from_hf.num_shared_experts, from_hf.first_k_dense_replace) == (
        256, 1, 3)
    assert from_hf.quantization is not None and from_hf.quantization.weight_block_size == (
        128, 128)
    r1 = load_model("deepseek-r1")
    assert r1.model_dump(exclude=skip) == catalog.model_dump(exclude=skip)


def test_param_counts_by_hand():
    h, layers, dense, heads = 7168, 61, 3, 128
    attention = (h * (1536 + LATENT)      # fused q_a + kv_a (with the rotary key)
                 + 1536 * heads * 192     # q_b
                 + 512 * heads * (128 + 128)  # kv_b: keys (nope) and values
                 + heads * 128 * h        # o
                 + 1536 + 512)            # q_a and kv_a RMSNorms
    norms = 2 * h
    expert = 3 * h * 2048
    moe_layer = lambda routed: attention + norms + (routed + 1) * expert + h * 256  # noqa: E731
    dense_layer = attention + norms + 3 * h * 18432
    outer = 2 * 129280 * h + h  # embeddings, untied LM head, final norm
    model = load_model("deepseek-v3")
    assert model.num_params == outer + dense * dense_layer + (layers - dense) * moe_layer(256)
    assert model.active_params == outer + dense * dense_layer + (layers - dense) * moe_layer(8)
    assert model.num_params == 671_026_404_352  # the report's 671B (MTP module left out)
    assert model.active_params == 37_552_282_624  # and 37B activated
    # FP8 weights (1 B each, one fp32 scale per 128 x 128 block) except embeddings, LM head,
    # router and norms in BF16: 673 GB
    assert model.weight_bytes / 1e9 == pytest.approx(673.15, abs=0.01)
    assert model.expert_weight_bytes == pytest.approx(
        58 * 256 * (3 * h * 2048 + 4 * (16 * 56 + 56 * 16 + 56 * 16)), rel=1e-12)


def test_latent_attention_without_q_lora_uses_a_plain_q_proj(tmp_path):
    # DeepSeek-V2-Lite: q_lora_rank null, 64 routed + 2 shared experts, one dense layer
    config = {**DEEPSEEK_V3_CONFIG, "q_lora_rank": None, "hidden_size": 2048,
              "num_attention_heads": 16, "num_key_value_heads": 16, "num_hidden_layers": 27,
              "intermediate_size": 10944, "moe_intermediate_size": 1408, "n_routed_experts": 64,
              "n_shared_experts": 2, "num_experts_per_tok": 6, "first_k_dense_replace": 1,
              "vocab_size": 102400}
    del config["quantization_config"]
    model = load_model(write_config(tmp_path, config, "v2-lite"))
    assert model.attention_projections() == (
        (2048, LATENT, False), (2048, 16 * 192, True), (512, 16 * 256, True),
        (16 * 128, 2048, True))
    assert model.num_params / 1e9 == pytest.approx(15.7, rel=0.01)  # "16B total params"
    assert model.kv_bytes_per_token(4) == 27 * LATENT * 2


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"qk_rope_head_dim": None}, r"multi-head latent attention \(kv_lora_rank\) needs "
                                     r"'qk_rope_head_dim'"),
        ({"moe_layer_freq": 2}, "dense layers between MoE layers"),
        ({"index_topk": 2048}, "DeepSeek sparse attention"),
        ({"num_experts": 256}, "both num_experts and n_routed_experts"),
        ({"first_k_dense_replace": 61}, "leaves no MoE layer"),
    ],
)
def test_unsupported_or_broken_deepseek_configs_are_refused(tmp_path, change, message):
    with pytest.raises(InputError, match=message):
        load_model(write_config(tmp_path, {**DEEPSEEK_V3_CONFIG, **change}))


# ------------------------------------------------------------------ KV cache
@pytest.mark.parametrize("tp", [1, 8])
@pytest.mark.parametrize("model_id", ["deepseek-v3", "kimi-k2-instruct-0905"])
def test_mla_kv_bytes_are_one_latent_per_token_and_layer_on_every_rank(tp, model_id):
    """Kimi-K2 keeps DeepSeek-V3's latent (512 + 64) and its 61 layers: the same bytes, with
    half the heads."""
    model = load_model(model_id)
    assert model.kv_bytes_per_token(tp) == LATENT * 61 * 2 == 70_272  # BF16 (auto)
    assert model.kv_bytes_per_token(tp, kv_dtype_bytes=1) == LATENT * 61 == 35_136
    fp8 = served_model(model, load_gpu("h200"), kv_cache_dtype="fp8")
    assert fp8.kv_bytes_per_token(tp) == 35_136
    assert kv_bytes_per_block(model, tp, block_size=64) == 64 * 70_272


def test_gqa_kv_bytes_are_unchanged():
    model = load_model("llama-3.1-70b")
    assert model.kv_bytes_per_token(1) == 2 * 80 * 8 * 128 * 2 == 327_680
    assert model.kv_bytes_per_token(8) == 2 * 80 * 1 * 128 * 2 == 40_960
    assert model.kv_bytes_per_token(8, kv_dtype_bytes=1) == 20_480
    assert not model.is_mla


def test_fp8_weights_fit_eight_h200_but_not_eight_h100():
    model = load_model("deepseek-v3")
    with pytest.raises(ConfigError, match="does not fit on h100-sxm at tensor_parallel_size 8"):
        kv_budget(served_model(model, load_gpu("h100-sxm")), load_gpu("h100-sxm"), 8,
                  gpu_memory_utilization=0.92, block_size=64, max_num_batched_tokens=8192,
                  max_num_seqs=1024)
    h200 = load_gpu("h200")
    served = served_model(model, h200)
    budget = kv_budget(served, h200, 8, gpu_memory_utilization=0.92, block_size=64,
                       max_num_batched_tokens=8192, max_num_seqs=1024)
    # every weight 1/8 per GPU (shared experts and dense MLPs TP-sharded like the rest), and
    # every rank's rotary table (163,840 positions x 64 rotary dims x 2 B)
    assert budget.weight_bytes == math.ceil(served.weight_bytes / 8 + 163_840 * 64 * 2)
    assert weight_bytes_per_gpu(served, 8) == pytest.approx(84.14e9, rel=1e-3)
    assert budget.bytes_per_block == 64 * 70_272
    assert budget.num_gpu_blocks == budget.available_bytes // (64 * 70_272)
    assert budget.num_gpu_blocks * 64 > 500_000  # tokens of latent cache per rank
    fp8_kv = kv_budget(served, h200, 8, gpu_memory_utilization=0.92, block_size=64,
                       max_num_batched_tokens=8192, max_num_seqs=1024, kv_dtype_bytes=1)
    assert fp8_kv.num_gpu_blocks in (2 * budget.num_gpu_blocks, 2 * budget.num_gpu_blocks + 1)


# ------------------------------------------------------------------ step pricing
@pytest.fixture(scope="module")
def ds_tp8() -> CostModel:
    gpu = load_gpu("h200")
    return CostModel(served_model(load_model("deepseek-v3"), gpu), gpu, 8)


def test_mla_attention_constants(ds_tp8):
    p, gpu = ds_tp8.prices, load_gpu("h200")
    s_per_flop = 1 / (gpu.attention_efficiency * gpu.peak_flops)
    heads = 128 // 8
    # prefill (not absorbed): QK^T over 192 dims, AV over 128, per head
    assert p.attn_s_per_pair == pytest.approx(61 * 2 * heads * (192 + 128) * s_per_flop)
    # decode (absorbed): scores over the 576-wide latent + rotary key, values over 512
    assert p.decode_attn_s_per_pair == pytest.approx(61 * 2 * heads * (576 + 512) * s_per_flop)
    # decodes read the latent: the same bytes per token at TP8 as at TP1
    decode_eff = gpu.decode_attention_memory_efficiency or gpu.memory_efficiency
    assert p.decode_kv_s_per_token == pytest.approx(70_272 / (decode_eff * gpu.mem_bytes_per_s))
    kernel = ds_tp8.kernel
    assert kernel.name == "w8a8_fp8"
    assert p.prefill_ctx_s_per_token == pytest.approx(
        61 * 2 * 512 * heads * 256 / (kernel.fit.compute_efficiency * kernel.peak_flops))


def test_gqa_models_price_decode_attention_as_before():
    gpu = load_gpu("h100-sxm")
    p = CostModel(load_model("llama-3.1-8b"), gpu, 1).prices
    assert p.decode_attn_s_per_pair == p.attn_s_per_pair
    assert p.prefill_ctx_s_per_token == 0.0


def decode(n: int, context: int) -> BatchShape:
    return BatchShape.from_chunks([(1, context, True)] * n)


def test_decode_step_reads_active_weights_not_all_experts(ds_tp8):
    model, gpu = ds_tp8.model, ds_tp8.gpu
    one = ds_tp8.step_time(decode(1, 2000)).time_s
    # at least the weights one token runs through, 1/8 of them per GPU, at peak bandwidth
    # (attention projections, dense and shared MLPs, 8 routed experts, FP8), ...
    embeddings = model.vocab_size * model.hidden_size
    assert one > (model.active_params - embeddings) / 8 / gpu.mem_bytes_per_s
    # ... and its experts well below reading every expert (the measured kernel at one token)
    experts = ds_tp8.experts_s(decode(1, 2000))
    assert experts < model.expert_weight_bytes / 8 / gpu.mem_bytes_per_s / 4
    # a 2,000-token prefill touches (nearly) all 256 experts of every MoE layer
    prefill = ds_tp8.step_time(BatchShape.from_chunks([(2000, 0, True)]))
    assert prefill.time_s > model.expert_weight_bytes / 8 / gpu.mem_bytes_per_s
    # decode attention grows with the latent read: 64 sequences x 8K more context each
    short, long = (ds_tp8.step_time(decode(64, c)).time_s for c in (1000, 9000))
    extra_bytes = 64 * 8000 * model.kv_bytes_per_token(8)
    assert long - short == pytest.approx(extra_bytes * ds_tp8.prices.decode_kv_s_per_token
                                         / model.kv_bytes_per_token(8), rel=1e-6)
    assert long - short > extra_bytes / gpu.mem_bytes_per_s


def test_chunk_after_cached_context_pays_its_up_projection(ds_tp8):
    p = ds_tp8.prices
    fresh = BatchShape.from_chunks([(4096, 0, True)])
    after = BatchShape.from_chunks([(2048, 6144, True)])
    c_fresh, *_ = p.parts(fresh.num_prefill_tokens, fresh.prefill_attn_pairs,
                          fresh.prefill_kv_tokens, 0, 0, 1, 1, None)
    c_after, *_ = p.parts(after.num_prefill_tokens, after.prefill_attn_pairs,
                          after.prefill_kv_tokens, 0, 0, 1, 1, None)
    without = CostModel(ds_tp8.model, ds_tp8.gpu, 8).prices
    without.prefill_ctx_s_per_token = 0.0
    c_without, *_ = without.parts(after.num_prefill_tokens, after.prefill_attn_pairs,
                                  after.prefill_kv_tokens, 0, 0, 1, 1, None)
    assert c_after - c_without == pytest.approx(6144 * p.prefill_ctx_s_per_token)
    assert c_fresh > 0


def test_moe_layers_and_dense_layers_are_priced_apart(ds_tp8):
    # the router and the routed experts run in 58 layers, not 61; dense MLP in 3
    p, gpu = ds_tp8.prices, ds_tp8.gpu
    kernel, experts = ds_tp8.kernel, ds_tp8.expert_kernel
    s_per_flop = 1 / (kernel.fit.compute_efficiency * kernel.peak_flops)
    gate_up_flops = 2 * 7168 * 2 * 2048 / 8  # one expert's gate+up slice on one of 8 GPUs
    assert p.expert_gemms[0][0] == pytest.approx(
        58 * gate_up_flops / (experts.fit.compute_efficiency * experts.peak_flops))
    assert len(p.expert_curve_upto) == 27  # and the measured curve: every MoE layer
    assert p.expert_curve_fixed[0] == pytest.approx(58 * ds_tp8.experts.curve.points[0][1])
    dense_gate_up = 2 * 7168 * 2 * 18432 / 8
    assert any(g[0] == pytest.approx(3 * dense_gate_up * s_per_flop) for g in p.gemms)
    shared_gate_up = 2 * 7168 * 2 * 2048 / 8
    assert any(g[0] == pytest.approx(58 * shared_gate_up * s_per_flop) for g in p.gemms)
    router_s = 58 * 2 * 7168 * 256 / (gpu.compute_efficiency * gpu.peak_flops)
    assert any(g[0] == pytest.approx(router_s) for g in p.gemms)


# ------------------------------------------------------------------ end to end
def test_tp8_h200_instance_simulates(tmp_path):
    data = scenario(model="deepseek-v3", gpu="h200", tensor_parallel_size=8,
                    engine={"block_size": 64, "max_model_len": 16384,
                            "kv_cache_dtype": "fp8"},
                    workload=explicit(("a", 0.0, 2000, 16), ("b", 0.1, 500, 8)))
    result = run_scenario(parse_scenario(data))
    assert all(request.status.value == "finished" for request in result.requests)


def test_shipped_deepseek_scenario_runs(tmp_path):
    code, text = run_cli("simulate", str(ROOT / "scenarios" / "deepseek-v3-h200.yaml"),
                         "--out", str(tmp_path / "out"))
    assert code == 0, text
    assert "deepseek-v3 on h200 TP8, fp8" in text
    assert "KV blocks of 64 tokens (bfloat16)" in text
    assert "requests: 100 arrived, 100 finished, 0 rejected" in text
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["num_finished"] == 100
