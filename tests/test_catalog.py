"""The shipped GPU and model catalogs, and reading HuggingFace config.json files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clustersim.catalog import gpu_ids, load_gpu, load_model, model_ids
from clustersim.errors import CatalogError, ConfigError, InputError

GPU_IDS = [
    "rtx4090",
    "a100-40gb-sxm",
    "a100-40gb-pcie",
    "a100-80gb-sxm",
    "a100-80gb-pcie",
    "h100-sxm",
    "h100-pcie",
    "h200",
    "l40s",
    "b200",
    "b300",
    "gb200",
    "gb300",
    "mi300x",
    "rtx-pro-6000",
    "rtx-pro-6000-server",
]
# Published (or reference-computed) parameter counts, in billions.
PUBLISHED_PARAMS_B = {
    "qwen2.5-7b-instruct": 7.616,
    "qwen2.5-7b-instruct-awq": 7.616,  # the same model, stored 4-bit
    "llama-3.1-8b": 8.030,
    "llama-3.1-70b": 70.554,
    "llama-2-7b": 6.738,
    "llama-2-70b": 68.977,
    "qwen2.5-72b": 72.706,
    "mistral-7b": 7.242,
    "opt-13b": 12.853,
    "opt-66b": 65.720,
    "qwen3-32b": 32.8,
    "bloom-176b": 176.247,  # BLOOM paper: 176,247,271,424 parameters
    "mixtral-8x7b": 46.703,  # all experts; 12.88 B active (tests/test_moe.py)
    "qwen3-30b-a3b": 30.532,  # all experts; 3.35 B active
    "qwen3-235b-a22b": 235.0,  # Qwen3 report: 235B total, 22B active
    "deepseek-v3": 671.0,  # DeepSeek-V3 report: 671B total (MTP module excluded), 37B active
    "deepseek-r1": 671.0,
    "deepseek-r1-fp4": 671.0,  # the same model, stored NVFP4
    # Kimi K2 report (arXiv:2507.20534): 1.04T total, 32B active; its config counts 1.026T
    # (32.9B active), 1.3 % short, which no field of the config explains
    "kimi-k2-instruct-0905": 1040.0,
    # Kimi-K2.5's language model is Kimi-K2's (1.04T in the K2 report; its model card says 1T
    # with the 0.4B vision encoder, not counted here)
    "kimi-k2.5": 1040.0,
    # MiniMax-M2.5 model card: 230B total (the config counts 228.69B, 10B active besides the
    # embeddings)
    "minimax-m2.5": 230.0,
    "gpt-oss-120b": 116.83,  # OpenAI's model card; 5.13B active besides the embeddings
    "gpt-oss-20b": 20.91,
}

LLAMA_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "max_position_embeddings": 131072,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vocab_size": 128256,
    "attention_bias": False,
    "mlp_bias": False,
}


def write_config(tmp_path: Path, config: dict, name: str = "my-model") -> Path:
    folder = tmp_path / name
    folder.mkdir()
    file = folder / "config.json"
    file.write_text(json.dumps(config), encoding="utf-8")
    return file


# ------------------------------------------------------------------------- GPUs
def test_gpu_ids_are_the_catalog():
    assert gpu_ids() == GPU_IDS
    for gpu_id in GPU_IDS:
        gpu = load_gpu(gpu_id)
        assert gpu.id == gpu_id
        assert gpu.source and gpu.link.source and gpu.pcie.source
        assert load_gpu(gpu_id, profile="default").calibration == "default"
        # the shipped calibrated profile covers every GPU with measurements or a donor
        assert gpu.calibration.startswith("fit-") or gpu_id == "mi300x"


def test_rtx4090_uses_the_fp32_accumulate_peak():
    assert load_gpu("rtx4090").bf16_dense_tflops == 165.2


def test_gpu_datasheet_numbers():
    h100 = load_gpu("h100-sxm")
    assert (h100.bf16_dense_tflops, h100.mem_bw_gb_per_s) == (989.4, 3350)
    # the totals PyTorch reports (what vLLM multiplies by gpu_memory_utilization)
    assert round(h100.mem_capacity_bytes / 2**30, 2) == 79.18
    assert round(load_gpu("b200").mem_capacity_bytes / 2**30, 2) == 178.4
    assert round(load_gpu("h200").mem_capacity_bytes / 2**30, 2) == 139.81
    assert round(load_gpu("l40s").mem_capacity_bytes / 2**30, 2) == 44.39
    assert round(load_gpu("gb300").mem_capacity_bytes / 2**30, 2) == 276.50
    # no PyTorch reading: nvidia-smi's on the parts aiconfigurator measured
    assert load_gpu("b300").mem_capacity_bytes == 275_040 * 2**20
    assert load_gpu("gb200").mem_capacity_bytes == 189_471 * 2**20
    assert all(load_gpu(g).fp8_dense_tflops is None for g in GPU_IDS if g.startswith("a100"))
    assert load_gpu("mi300x").link.kind == "infinity_fabric"


@pytest.mark.parametrize(("gpu_id", "peaks", "capability", "sms"), [
    ("b200", (2250, 4500, 9000, 4500), "10.0", 148),
    ("b300", (2250, 4500, 14000, 153.5), "10.3", 160),
    ("gb200", (2500, 5000, 10000, 5000), "10.0", 148),
    ("gb300", (2500, 5000, 15000, 165), "10.3", 160),
])
def test_blackwell_peaks_and_links(gpu_id, peaks, capability, sms):
    gpu = load_gpu(gpu_id)
    assert (gpu.bf16_dense_tflops, gpu.fp8_dense_tflops, gpu.fp4_dense_tflops,
            gpu.int8_dense_tops) == peaks
    assert (gpu.compute_capability, gpu.sm_count) == (capability, sms)
    assert gpu.link.kind == "nvlink" and gpu.link.bw_gb_per_s_per_dir == 900  # NVLink 5
    assert "aiconfigurator" in gpu.source


def test_a_grace_blackwell_gpu_groups_within_its_nvl72_rack():
    """The GB200's and GB300's NVLink domain is the NVL72 rack: any group of its 72 GPUs runs
    over NVLink 5 (four to a host, the compute tray); a wider group would leave the domain:
    refused, not guessed."""
    for gpu_id in ("gb200", "gb300"):
        gpu = load_gpu(gpu_id)
        assert gpu.tp_link(8) is gpu.tp_link(72) is gpu.link
        assert (gpu.link.max_gpus, gpu.gpus_per_host) == (72, 4)
        with pytest.raises(ConfigError, match=f"96 GPUs exceed the 72 that one {gpu_id} rack"):
            gpu.tp_link(96)
    assert load_gpu("b300").tp_link(8).kind == "nvlink"
    assert load_gpu("b300").gpus_per_host == load_gpu("h100-pcie").gpus_per_host == 8


def test_nvlink_bridge_joins_two_gpus_then_pcie_takes_over():
    gpu = load_gpu("h100-pcie")
    assert gpu.tp_link(2).kind == "nvlink_bridge"
    assert gpu.tp_link(4).kind == "pcie"
    assert gpu.tp_link(4).bw_gb_per_s_per_dir == 63  # gen 5
    assert load_gpu("h100-sxm").tp_link(8).kind == "nvlink"


def test_tp_wider_than_a_node_is_refused():
    with pytest.raises(ConfigError, match="16 GPUs exceed the 8"):
        load_gpu("h100-sxm").tp_link(16)


def test_unknown_gpu_lists_known_ids():
    with pytest.raises(CatalogError) as excinfo:
        load_gpu("h300")
    assert excinfo.value.path == "gpu"
    assert "unknown GPU 'h300'" in excinfo.value.message
    assert excinfo.value.message.endswith("known: " + ", ".join(GPU_IDS))


def test_catalog_specs_are_cached_and_frozen():
    assert load_gpu("h100-sxm") is load_gpu("h100-sxm")
    with pytest.raises(ValueError):
        load_gpu("h100-sxm").mem_bw_gb_per_s = 1  # type: ignore[misc]


# ----------------------------------------------------------------------- models
def test_model_ids_are_the_catalog():
    assert model_ids() == list(PUBLISHED_PARAMS_B)
    for model_id in model_ids():
        model = load_model(model_id)
        assert model.id == model_id
        assert model.source


@pytest.mark.parametrize("model_id", list(PUBLISHED_PARAMS_B))
def test_param_counts_match_published(model_id):
    params_b = load_model(model_id).num_params / 1e9
    rel = 0.015 if model_id.startswith("kimi-k2") else 0.01
    assert params_b == pytest.approx(PUBLISHED_PARAMS_B[model_id], rel=rel)


def test_param_count_by_hand_llama_3_1_8b():
    # embed 128256*4096 twice (untied) + 32 layers * (q 4096^2 + k,v 2*4096*1024 + o 4096^2
    # + mlp 3*4096*14336 + 2 norms * 4096) + final norm 4096
    per_layer = 4096 * 4096 + 2 * 4096 * 1024 + 4096 * 4096 + 3 * 4096 * 14336 + 2 * 4096
    expected = 2 * 128256 * 4096 + 32 * per_layer + 4096
    model = load_model("llama-3.1-8b")
    assert model.num_params == expected == 8_030_261_248
    assert model.weight_bytes == 2 * expected


def test_param_count_by_hand_opt_13b():
    # tied embeddings + 2050 learned positions; every linear has a bias; LayerNorm has 2h
    h, f = 5120, 20480
    per_layer = 4 * (h * h + h) + (h * f + f) + (f * h + h) + 2 * 2 * h
    expected = 50272 * h + 2050 * h + 40 * per_layer + 2 * h
    assert load_model("opt-13b").num_params == expected == 12_853_473_280


def test_kv_bytes_per_token():
    assert load_model("llama-3.1-8b").kv_bytes_per_token() == 131072  # 2*32*8*128*2
    assert load_model("qwen2.5-7b-instruct").kv_bytes_per_token() == 57344  # 2*28*4*128*2
    assert load_model("llama-3.1-8b").kv_bytes_per_token(tp=2) == 65536
    # 8 KV heads over 16 ranks: each rank keeps one (vLLM replicates)
    assert load_model("llama-3.1-70b").kv_bytes_per_token(tp=16) == 2 * 80 * 1 * 128 * 2
    assert load_model("llama-3.1-8b").kv_bytes_per_token(kv_dtype_bytes=1) == 65536


def test_model_dtypes_and_mlp_kinds():
    assert load_model("opt-13b").dtype == "float16"
    assert load_model("opt-13b").mlp == "plain"
    assert load_model("llama-3.1-8b").dtype == "bfloat16"
    assert load_model("llama-3.1-8b").dtype_bytes == 2
    assert load_model("qwen2.5-7b-instruct").qkv_bias
    qwen3 = load_model("qwen3-32b")
    assert (qwen3.head_dim, qwen3.qkv_bias, qwen3.qk_norm) == (128, False, True)


def test_tp_must_divide_attention_heads():
    load_model("qwen2.5-7b-instruct").check_tp(4)  # 28 heads
    with pytest.raises(ConfigError, match="3 does not divide the 28 attention heads"):
        load_model("qwen2.5-7b-instruct").check_tp(3)


def test_unknown_model_lists_known_ids():
    with pytest.raises(CatalogError) as excinfo:
        load_model("gpt-5")
    assert "unknown model 'gpt-5'" in excinfo.value.message
    assert all(model_id in excinfo.value.message for model_id in PUBLISHED_PARAMS_B)


# ----------------------------------------------------------- HF config.json
def test_hf_config_matches_the_catalog_entry(tmp_path):
    file = write_config(tmp_path, LLAMA_CONFIG)
    model = load_model(str(file))
    catalog = load_model("llama-3.1-8b")
    assert model.id == "my-model"
    assert model.head_dim == 128  # hidden / heads when the config has no head_dim
    assert model.num_params == catalog.num_params
    assert model.kv_bytes_per_token() == catalog.kv_bytes_per_token()
    # a folder holding config.json works too
    assert load_model(str(file.parent)).num_params == catalog.num_params


def test_hf_config_defaults_kv_heads_and_maps_qwen2_bias(tmp_path):
    config = {
        "model_type": "qwen2",
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "max_position_embeddings": 32768,
        "num_attention_heads": 28,
        "num_hidden_layers": 28,
        "num_key_value_heads": 4,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "vocab_size": 152064,
    }
    model = load_model(str(write_config(tmp_path, config)))
    assert model.qkv_bias and not model.o_bias
    assert model.num_params == load_model("qwen2.5-7b-instruct").num_params
    no_kv = {k: v for k, v in config.items() if k != "num_key_value_heads"}
    assert load_model(str(write_config(tmp_path, no_kv, "mha"))).num_key_value_heads == 28


def test_hf_config_opt(tmp_path):
    config = {
        "model_type": "opt",
        "hidden_size": 5120,
        "ffn_dim": 20480,
        "max_position_embeddings": 2048,
        "num_attention_heads": 40,
        "num_hidden_layers": 40,
        "torch_dtype": "float16",
        "vocab_size": 50272,
        "word_embed_proj_dim": 5120,
        "enable_bias": True,
    }
    model = load_model(str(write_config(tmp_path, config)))
    assert (model.mlp, model.norm, model.learned_position_rows) == ("plain", "layernorm", 2050)
    assert model.tie_word_embeddings  # transformers' default when the key is absent
    assert model.num_params == load_model("opt-13b").num_params


def test_hf_config_explicit_head_dim_and_float32(tmp_path):
    config = {
        **LLAMA_CONFIG,
        "model_type": "qwen3",
        "hidden_size": 5120,
        "num_attention_heads": 64,
        "head_dim": 128,
        "torch_dtype": "float32",
    }
    model = load_model(str(write_config(tmp_path, config)))
    assert model.head_dim == 128
    assert model.qk_norm
    assert model.dtype == "bfloat16"  # vLLM serves float32 checkpoints in 16-bit


def test_hf_config_not_json(tmp_path):
    file = tmp_path / "config.json"
    file.write_text('{"hidden_size": 4096,\n oops}', encoding="utf-8")
    with pytest.raises(InputError, match="invalid JSON: Expecting property name") as excinfo:
        load_model(str(file))
    assert excinfo.value.path == f"{file}:2"


def test_hf_config_missing_key(tmp_path):
    config = {k: v for k, v in LLAMA_CONFIG.items() if k != "num_hidden_layers"}
    file = write_config(tmp_path, config)
    with pytest.raises(InputError, match="missing required key 'num_hidden_layers'") as excinfo:
        load_model(str(file))
    assert excinfo.value.path == str(file)


def test_hf_config_bad_value(tmp_path):
    file = write_config(tmp_path, {**LLAMA_CONFIG, "num_hidden_layers": -1})
    with pytest.raises(InputError, match="num_layers"):
        load_model(str(file))


def test_hf_config_moe_is_refused(tmp_path):
    file = write_config(tmp_path, {**LLAMA_CONFIG, "num_local_experts": 8})
    with pytest.raises(InputError, match="mixture-of-experts"):
        load_model(str(file))
