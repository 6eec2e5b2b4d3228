"""gpt-oss: MXFP4 experts, sliding-window layers beside full-attention ones, attention sinks,
and the hybrid KV cache vLLM keeps for them."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from clustersim.calibration.aiconfigurator import AIC_DIR
from clustersim.catalog import load_gpu, load_model
from clustersim.catalog.hf_config import model_from_hf_config
from clustersim.cost.memory import kv_budget, kv_bytes_per_block
from clustersim.cost.roofline import BatchShape, CostModel
from clustersim.engine.kv_manager import KVCacheManager, cdiv
from clustersim.engine.quantization import served_model
from clustersim.engine.request import Request
from clustersim.errors import ConfigError, InputError
from tests.helpers import run_cli, scenario, write_scenario

GPT_OSS_CONFIG = {  # the fields of openai/gpt-oss-120b's config.json the reader uses
    "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "attention_bias": True,
    "experts_per_token": 4, "num_experts_per_tok": 4, "head_dim": 64, "hidden_size": 2880,
    "intermediate_size": 2880, "num_local_experts": 128, "num_hidden_layers": 36,
    "layer_types": ["sliding_attention", "full_attention"] * 18,
    "max_position_embeddings": 131072, "num_attention_heads": 64, "num_key_value_heads": 8,
    "sliding_window": 128, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "vocab_size": 201088,
    "quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": [
        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
        "lm_head"]},
}


def full_attention(model):
    """The same model with every layer attending to the whole context."""
    return model.model_copy(update={"sliding_window": None, "sliding_window_layers": 0})


def test_the_catalog_entry_counts_what_the_model_card_says():
    model = load_model("gpt-oss-120b")
    embedding = model.vocab_size * model.hidden_size
    # OpenAI's model card: 116.83B parameters, 5.13B active per token besides the embeddings
    assert model.num_params == pytest.approx(116.83e9, rel=1e-3)
    assert model.active_params - embedding == pytest.approx(5.13e9, rel=1e-3)
    assert model.weight_bytes / 2**30 == pytest.approx(60.8, rel=0.01)  # the checkpoint
    small = load_model("gpt-oss-20b")
    assert small.num_params == pytest.approx(20.91e9, rel=1e-3)
    assert small.active_params - embedding == pytest.approx(3.61e9, rel=2e-3)


def test_its_config_json_reads_as_the_catalog_entry(tmp_path):
    path = tmp_path / "gpt-oss-120b" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(GPT_OSS_CONFIG))
    read = model_from_hf_config(path)
    catalog = load_model("gpt-oss-120b")
    for field in ("num_layers", "sliding_window", "sliding_window_layers", "attention_sinks",
                  "mlp_bias", "qkv_bias", "o_bias", "num_experts", "num_experts_per_tok"):
        assert getattr(read, field) == getattr(catalog, field), field
    assert read.num_params == catalog.num_params
    assert read.weight_bytes == catalog.weight_bytes
    assert read.quantization is not None and read.quantization.modules == "experts"


@pytest.mark.parametrize(("change", "message"), [
    ({"layer_types": ["chunked_attention"] * 36}, "'chunked_attention' layers are not supported"),
    ({"sliding_window": None}, "sliding_attention layers and no sliding_window"),
    ({"layer_types": ["full_attention"] * 35}, "layer_types lists 35 layers"),
    ({"layer_types": ["sliding_attention"] + ["full_attention"] * 35},
     "more full-attention than sliding-window layers are not modelled"),
    ({"layer_types": ["sliding_attention"] * 36}, "every layer has a sliding window"),
])
def test_layouts_it_cannot_price_are_one_clear_line(tmp_path, change, message):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**GPT_OSS_CONFIG, **change}))
    with pytest.raises(InputError) as error:
        model_from_hf_config(path)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_a_window_the_config_does_not_use_is_ignored(tmp_path):
    config = {"model_type": "qwen2", "hidden_size": 1024, "num_attention_heads": 16,
              "num_hidden_layers": 8, "intermediate_size": 2048, "vocab_size": 1000,
              "max_position_embeddings": 4096, "sliding_window": 4096,
              "use_sliding_window": False}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    assert model_from_hf_config(path).sliding_window is None


def test_a_block_is_a_page_of_one_group_of_layers():
    model = load_model("gpt-oss-120b")
    per_layer = 2 * 8 * 64 * 2  # K and V, 8 KV heads of 64, 16 bits
    assert model.kv_group_layers == 18 and model.kv_window_groups == 1
    assert kv_bytes_per_block(model, 1, 16) == 16 * 18 * per_layer
    assert kv_bytes_per_block(full_attention(model), 1, 16) == 16 * 36 * per_layer
    # a P/D handoff moves every token of the full layers, the window's of the others
    assert model.kv_cached_bytes(2000) == per_layer * (18 * 2000 + 18 * 128)
    assert model.kv_cached_bytes(100) == per_layer * 36 * 100


def decode_to(kv: KVCacheManager, request: Request, length: int) -> None:
    """Prefill ``request``'s prompt, then decode token by token until it holds ``length``."""
    assert kv.allocate_slots(request, request.num_prompt_tokens)
    request.num_computed_tokens = request.num_prompt_tokens
    while request.num_computed_tokens < length:
        assert kv.allocate_slots(request, 1)
        request.num_computed_tokens += 1
        kv.check_invariants()


def test_a_window_group_holds_only_the_blocks_its_window_reaches():
    kv = KVCacheManager(1000, 16, 4096, enable_prefix_caching=False, sliding_window=128,
                        window_groups=1)
    request = Request("r", 0.0, 1000, 2000)
    assert kv.allocate_slots(request, 1000)  # a prompt chunk takes every group's blocks
    assert kv.num_blocks_of("r") == kv.window_blocks_of("r") == cdiv(1000, 16)
    request.num_computed_tokens = 1000
    decode_to(kv, request, 2000)
    # skipped tokens = computed - 128 + 1; the window keeps the blocks from there on
    assert kv.num_blocks_of("r") == cdiv(2000, 16)
    assert kv.window_blocks_of("r") <= cdiv(128 - 1, 16) + 2
    assert kv.num_used_blocks == kv.num_blocks_of("r") + kv.window_blocks_of("r")
    kv.free(request)
    kv.check_invariants()
    assert kv.num_free_blocks == kv.num_usable_blocks


def test_sliding_window_layers_attend_to_the_window_only():
    gpu = load_gpu("h100-sxm")
    model = served_model(load_model("gpt-oss-120b"), gpu)
    hybrid, full = CostModel(model, gpu, 1), CostModel(full_attention(model), gpu, 1)
    decode = BatchShape(num_decode_tokens=64, decode_kv_tokens=64 * 8000, num_sampled=64,
                        num_seqs=64)
    short = BatchShape(num_decode_tokens=64, decode_kv_tokens=64 * 100, num_sampled=64,
                       num_seqs=64)
    assert hybrid.step_time(decode).time_s < full.step_time(decode).time_s
    # contexts inside the window: both attend to all of it
    assert hybrid.step_time(short).time_s == pytest.approx(full.step_time(short).time_s)
    # a chunk after 16K of context: half the layers attend to 128 keys per query
    chunk = BatchShape(num_prefill_tokens=2048, prefill_attn_pairs=2048 * 16384.0,
                       prefill_kv_tokens=16384 + 2048, num_sampled=1, num_seqs=1)
    saved = full.step_time(chunk).compute_s - hybrid.step_time(chunk).compute_s
    pairs = 2048 * 16384.0
    assert saved == pytest.approx(0.5 * (pairs - 2048 * 128) * hybrid.prices.attn_s_per_pair)


def test_the_experts_run_the_measured_mxfp4_kernel_and_the_rest_stays_16_bit():
    h100 = load_gpu("h100-sxm")
    cost = CostModel(served_model(load_model("gpt-oss-120b"), h100), h100, 1)
    assert cost.kernel.name == "w16a16"
    assert cost.expert_kernel.name == "fused_moe_w4a16_mxfp4_triton_mxfp4"
    assert cost.experts is not None and cost.experts.curve is not None
    assert cost.expert_kernel.fit is h100.moe_kernel("w4a16_mxfp4", "triton_mxfp4").fit
    a100 = load_gpu("a100-80gb-sxm")  # not measured: the 16-bit fit over the MXFP4 bytes
    cost = CostModel(served_model(load_model("gpt-oss-120b"), a100), a100, 1)
    assert cost.experts is None
    assert cost.expert_kernel.name == "mxfp4" and cost.expert_kernel.fit.calibration == (
        a100.calibration)


@pytest.mark.parametrize(("gpu_id", "stem"), [("h100-sxm", "h100_sxm"), ("h200", "h200_sxm")])
@pytest.mark.parametrize("model_id", ["gpt-oss-120b", "gpt-oss-20b"])
def test_the_mxfp4_expert_price_is_the_gpus_own_measured_kernel(gpu_id, stem, model_id):
    """Every TP1 row of the GPU's own table for the model's shape, to the table's 4 digits (a
    row slower than a larger token count's is priced at that count's time)."""
    gpu = load_gpu(gpu_id)
    model = served_model(load_model(model_id), gpu)
    cost = CostModel(model, gpu, 1)
    with (AIC_DIR / f"moe_{stem}.csv").open() as f:
        rows = [r for r in csv.DictReader(f) if r["moe_dtype"] == "w4a16_mxfp4"
                and int(r["num_experts"]) == model.num_experts
                and r["moe_tp_size"] == r["moe_ep_size"] == "1"]
    assert len(rows) == 27
    times = [float(r["latency"]) * 1e-3 for r in rows]
    envelope = [min(times[i:]) for i in range(len(times))]
    for row, expected in zip(rows, envelope, strict=True):
        tokens = int(row["num_tokens"])
        batch = BatchShape(num_prefill_tokens=tokens, prefill_attn_pairs=float(tokens),
                           prefill_kv_tokens=tokens, num_sampled=1, num_seqs=1)
        (op,) = [op for op in cost.operators(batch) if op.name.startswith("experts:")]
        assert op.time_s / model.num_moe_layers == pytest.approx(expected, rel=6e-4), tokens


def test_mxfp4_needs_bfloat16_and_an_ampere_gpu():
    model = load_model("gpt-oss-120b")
    with pytest.raises(ConfigError, match="bfloat16 activations only"):
        served_model(model.model_copy(update={"dtype": "float16"}), load_gpu("h100-sxm"))
    turing = load_gpu("l40s").model_copy(update={"compute_capability": "7.5"})
    with pytest.raises(ConfigError, match="mxfp4 needs compute capability 8.0"):
        served_model(model, turing)


def test_a_gpt_oss_run_finishes_every_request_with_twice_the_blocks_of_full_attention(tmp_path):
    workload = {"kind": "synthetic", "arrivals": {"kind": "poisson", "rate_per_s": 20.0},
                "lengths": {"kind": "independent",
                            "prompt_tokens": {"kind": "lognormal", "mean": 3000, "cv": 0.5,
                                              "low": 256, "high": 8000},
                            "output_tokens": {"kind": "lognormal", "mean": 300, "cv": 0.5,
                                              "low": 8, "high": 1000}},
                "num_requests": 120}
    data = scenario(model="gpt-oss-120b", workload=workload, engine={"max_model_len": 16384})
    code, output = run_cli("simulate", str(write_scenario(tmp_path, data)), "--out",
                           str(tmp_path / "out"))
    assert code == 0, output
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["num_finished"] == 120 and summary["num_rejected"] == 0
    (instance,) = summary["instances"]
    model = served_model(load_model("gpt-oss-120b"), load_gpu("h100-sxm"))
    budget = dict(gpu_memory_utilization=0.92, block_size=16, max_num_batched_tokens=8192,
                  max_num_seqs=1024)
    hybrid = kv_budget(model, load_gpu("h100-sxm"), 1, **budget)
    full = kv_budget(full_attention(model), load_gpu("h100-sxm"), 1, **budget)
    # each block is a page of 18 layers, not 36 (the CUDA-graph reserve aside)
    assert 0 < instance["usable_kv_blocks"] <= hybrid.num_gpu_blocks - 1
    assert hybrid.bytes_per_block * 2 == full.bytes_per_block
    assert hybrid.num_gpu_blocks in (2 * full.num_gpu_blocks, 2 * full.num_gpu_blocks + 1)
    assert "gpt-oss-120b" in output and "mxfp4" in output


def test_the_example_plan_answers_with_launch_commands(tmp_path):
    """The shipped gpt-oss plan, narrowed to one candidate family so that it runs in seconds."""
    import yaml

    shipped = Path(__file__).resolve().parent.parent / "scenarios" / "gpt_oss_120b_h100_plan.yaml"
    data = yaml.safe_load(shipped.read_text())
    data["workload"]["num_requests"] = 200
    data["plan"].update(layouts=["colocated"], colocated={"tensor_parallel_sizes": [2]},
                        search={"seeds": 1})
    code, output = run_cli("plan", str(write_scenario(tmp_path, data)), "--out",
                           str(tmp_path / "out"), "--no-report", "--no-n-plus-one")
    assert code == 0, output
    plan = json.loads((tmp_path / "out" / "plan.json").read_text())
    assert plan["recommended"] is not None
    assert any(line.startswith("vllm serve openai/gpt-oss-120b --tensor-parallel-size 2")
               for line in plan["serve_commands"])
