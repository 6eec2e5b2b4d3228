"""Quantization: HF quantization_config reading, vLLM's start-up resolution and refusals,
quantized weight and KV bytes, and hand-computed step prices of FP8 and AWQ models."""

from __future__ import annotations

import json
import math

import pytest

from clustersim.catalog import load_gpu, load_model
from clustersim.catalog.quantization import QuantizationSpec, quantization_from_hf
from clustersim.cost.kernels import gemm_kernel
from clustersim.cost.memory import kv_budget
from clustersim.cost.roofline import BatchShape, CostModel
from clustersim.engine.defaults import resolve_engine
from clustersim.engine.quantization import served_model
from clustersim.engine.settings import EngineSettings
from clustersim.errors import ConfigError, InputError
from tests.test_catalog import LLAMA_CONFIG


def write_config(tmp_path, quantization_config, **fields):
    """A Llama-3.1-8B config.json with a quantization_config."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA_CONFIG, **fields,
                                "quantization_config": quantization_config}))
    return path


def decodes(batch_size: int, context: int) -> BatchShape:
    return BatchShape.from_chunks([(1, context, True)] * batch_size)


# ------------------------------------------------------- quantization_config
def test_awq_config_is_read_as_vllm_reads_it(tmp_path):
    cfg = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True,
           "version": "gemm", "modules_to_not_convert": None}
    model = load_model(str(write_config(tmp_path, cfg, torch_dtype="float16")))
    assert model.quantization == QuantizationSpec(
        method="awq", weight_bits=4, weight_type="int", group_size=128, zero_point=True,
        scale_bytes=2)
    assert model.dtype == "float16"
    # AutoAWQ's own key names (w_bit, q_group_size) mean the same
    legacy = quantization_from_hf({"quantization_config": {
        "quant_method": "awq", "w_bit": 4, "q_group_size": 64, "zero_point": False}}, "x")
    assert (legacy.weight_bits, legacy.group_size, legacy.zero_point) == (4, 64, False)


def test_gptq_fp8_compressed_tensors_and_modelopt_configs():
    def read(cfg):
        return quantization_from_hf({"quantization_config": cfg}, "config.json")

    gptq = read({"quant_method": "gptq", "bits": 8, "group_size": -1, "sym": True,
                 "desc_act": False})
    assert (gptq.method, gptq.weight_bits, gptq.group_size, gptq.zero_point) == (
        "gptq", 8, -1, False)
    fp8 = read({"quant_method": "fp8", "activation_scheme": "dynamic",
                "weight_block_size": [128, 128]})
    assert (fp8.activation_bits, fp8.weight_block_size, fp8.serialized) == (8, (128, 128), True)
    w8a8 = read({"quant_method": "compressed-tensors", "format": "int-quantized",
                 "config_groups": {"group_0": {
                     "targets": ["Linear"],
                     "weights": {"num_bits": 8, "type": "int", "strategy": "channel",
                                 "symmetric": True},
                     "input_activations": {"num_bits": 8, "type": "int", "dynamic": True}}}})
    assert (w8a8.activation_bits, w8a8.activation_type, w8a8.group_size) == (8, "int", -1)
    w4a16 = read({"quant_method": "compressed_tensors", "config_groups": {"g": {
        "weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128}}}})
    assert (w4a16.method, w4a16.weight_only, w4a16.group_size) == (
        "compressed-tensors", True, 128)
    nvfp4 = read({"quant_method": "modelopt", "producer": {"name": "modelopt"},
                  "quantization": {"quant_algo": "NVFP4", "group_size": 16}})
    assert (nvfp4.method, nvfp4.weight_bits, nvfp4.activation_bits, nvfp4.scale_bytes) == (
        "modelopt_fp4", 4, 4, 1)
    assert read({"quant_method": "modelopt", "quant_algo": "FP8"}).method == "modelopt"


def test_an_ignore_list_of_everything_but_the_routed_experts_quantizes_those_alone():
    def scope(ignore):
        return quantization_from_hf({"quantization_config": {
            "quant_method": "compressed-tensors", "ignore": ignore, "config_groups": {"g": {
                "weights": {"num_bits": 4, "type": "int", "strategy": "group",
                            "group_size": 32}}}}}, "config.json").modules

    kimi = ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*",
            "re:.*mlp\\.(gate|up|gate_up|down)_proj.*"]
    assert scope(kimi) == "experts"
    # attention alone left out: the shared experts and dense MLPs are quantized too
    assert scope(["lm_head", "re:.*self_attn.*"]) == "linear"
    assert scope(None) == scope(["lm_head"]) == "linear"
    # a pattern that also catches the routed experts leaves them unquantized: not experts-only
    assert scope([*kimi, "re:.*experts.*"]) == "linear"
    with pytest.raises(InputError, match="ignore pattern 're:.*\\(': "):
        scope(["re:.*("])
    with pytest.raises(InputError, match="ignore must be a list"):
        scope("lm_head")


def test_unpriced_quant_methods_are_path_errors(tmp_path):
    path = write_config(tmp_path, {"quant_method": "bitsandbytes", "load_in_4bit": True})
    with pytest.raises(InputError) as excinfo:
        load_model(str(path))
    assert excinfo.value.path == f"{path}:quantization_config"
    assert "'bitsandbytes' is not priced" in excinfo.value.message
    with pytest.raises(InputError, match="bits 3 is not supported"):
        quantization_from_hf({"quantization_config": {
            "quant_method": "gptq", "bits": 3, "group_size": 128}}, "x")


def test_text_config_quantization_is_found(tmp_path):
    path = tmp_path / "config.json"
    text = {**LLAMA_CONFIG, "quantization_config": {"quant_method": "fp8",
                                                    "activation_scheme": "dynamic"}}
    path.write_text(json.dumps({"model_type": "llava", "text_config": text}))
    assert load_model(str(path)).quantization.method == "fp8"


# ------------------------------------------------------------ weight bytes
def test_awq_weight_bytes_by_hand():
    model = load_model("qwen2.5-7b-instruct-awq")
    h, layers = 3584, 28
    # per layer (in, out): qkv 3584 x 4608, o 3584 x 3584, gate_up 3584 x 37888, down 18944 x
    # 3584; each stores k n / 2 bytes of codes and, per 128 inputs and output, a 2-byte scale
    # and a 4-bit zero
    shapes = ((h, 4608), (h, h), (h, 2 * 18944), (18944, h))

    def awq_bytes(k, n):
        return k * n / 2 + (k // 128) * n * 2.5

    quantized = layers * sum(k * n for k, n in shapes)
    plain = 7_615_616_512 - quantized  # embeddings, LM head, norms, q/k/v biases
    expected = plain * 2 + layers * sum(awq_bytes(k, n) for k, n in shapes)
    assert model.weight_bytes == pytest.approx(expected, rel=1e-12)
    assert model.weight_bytes / 1e9 == pytest.approx(5.571, abs=0.001)  # HF repo: 5.58 GB
    assert load_model("qwen2.5-7b-instruct").weight_bytes == 7_615_616_512 * 2


def test_online_fp8_stores_linear_layers_in_one_byte():
    model = served_model(load_model("llama-3.1-70b"), load_gpu("h100-sxm"), "fp8")
    base = load_model("llama-3.1-70b")
    linear = sum(k * n * count for k, n, count in base.linear_shapes())
    # 80 layers x 4 GEMMs, one float32 scale each
    assert model.weight_bytes == (base.num_params - linear) * 2 + linear + 80 * 4 * 4
    assert model.weight_bytes / 1e9 == pytest.approx(72.66, abs=0.01)


# ---------------------------------------------------------------- KV bytes
def test_fp8_kv_capacity_follows_vllms_page_size():
    """vLLM's AttentionSpec.real_page_size_bytes: 2 x block_size x KV heads x head_dim x the
    cache dtype's bytes per layer; fp8 is one byte, so a block is half as big."""
    model, gpu = load_model("llama-3.1-8b"), load_gpu("h100-sxm")
    fp8 = served_model(model, gpu, None, "fp8")
    assert fp8.kv_bytes_per_token() == 2 * 32 * 8 * 128 * 1 == 65_536
    args = dict(gpu_memory_utilization=0.9, block_size=16, max_num_batched_tokens=8192,
                max_num_seqs=1024)
    budget = kv_budget(fp8, gpu, 1, **args)
    bf16 = kv_budget(model, gpu, 1, **args)
    # the same memory split as the BF16 budget, one-byte blocks
    assert budget.available_bytes == bf16.available_bytes
    assert budget.bytes_per_block == 16 * 65_536 == 1_048_576
    assert budget.num_gpu_blocks == bf16.available_bytes // 1_048_576 == 56_610
    # 28,305 two-byte blocks: twice as many, less the last block's remainder
    assert budget.num_gpu_blocks in (2 * bf16.num_gpu_blocks, 2 * bf16.num_gpu_blocks + 1)


def test_quantized_weights_leave_more_kv_on_an_rtx4090():
    gpu = load_gpu("rtx4090")
    settings = EngineSettings(max_model_len=32768)
    awq = resolve_engine(settings, load_model("qwen2.5-7b-instruct-awq"), gpu, 1)
    bf16 = resolve_engine(settings, load_model("qwen2.5-7b-instruct"), gpu, 1)
    freed = bf16.model.weight_bytes - awq.model.weight_bytes
    # both budget the same activations and reserve; the freed bytes become 57,344 x 16 blocks
    assert awq.num_gpu_blocks - bf16.num_gpu_blocks == pytest.approx(
        freed / (57_344 * 16), abs=1)
    assert (bf16.num_gpu_blocks, awq.num_gpu_blocks) == (7729, 18258)


# --------------------------------------------------------------- resolution
def test_vllm_picks_marlin_for_awq_unless_told_awq():
    model, gpu = load_model("qwen2.5-7b-instruct-awq"), load_gpu("rtx4090")
    assert served_model(model, gpu).quantization.method == "awq_marlin"
    assert served_model(model, gpu, "awq_marlin").quantization.method == "awq_marlin"
    assert served_model(model, gpu, "awq").quantization.method == "awq"
    # ROCm has no Marlin: the Triton AWQ kernels
    assert served_model(model, load_gpu("mi300x")).quantization.method == "awq"


def test_gptq_marlin_needs_a_symmetric_checkpoint(tmp_path):
    gpu = load_gpu("a100-80gb-sxm")
    sym = load_model(str(write_config(tmp_path, {"quant_method": "gptq", "bits": 4,
                                                 "group_size": 128, "sym": True,
                                                 "desc_act": False},
                                      torch_dtype="float16")))
    assert served_model(sym, gpu).quantization.method == "gptq_marlin"
    asym = sym.model_copy(update={"quantization": sym.quantization.model_copy(
        update={"zero_point": True})})
    assert served_model(asym, gpu).quantization.method == "gptq"


def test_fp8_runs_natively_from_ada_and_on_marlin_on_ampere():
    model = load_model("llama-3.1-70b")
    h100 = served_model(model, load_gpu("h100-sxm"), "fp8")
    assert gemm_kernel(h100.quantization, load_gpu("h100-sxm")).name == "w8a8_fp8"
    a100 = load_gpu("a100-80gb-sxm")
    kernel = gemm_kernel(served_model(model, a100, "fp8").quantization, a100)
    assert (kernel.name, kernel.peak_flops) == ("marlin", 312e12)  # FP8 weights, BF16 math
    # the RTX 4090 prices FP8 GEMMs with the L40S's fit (Ada, sm_89)
    rtx = load_gpu("rtx4090")
    fp8 = gemm_kernel(served_model(model, rtx, "fp8").quantization, rtx)
    assert fp8.fit.calibration == "fit-v2:l40s->rtx4090"
    assert fp8.peak_flops == 330.3e12
    assert fp8.fit == load_gpu("l40s").fp8_gemm.model_copy(
        update={"calibration": "fit-v2:l40s->rtx4090"})


@pytest.mark.parametrize(
    ("model_id", "gpu_id", "quantization", "message"),
    [
        # the seeds' LLM("Qwen/Qwen2.5-7B-Instruct", quantization="awq"): no AWQ config file
        ("qwen2.5-7b-instruct", "rtx4090", "awq", "Cannot find the config file for awq"),
        ("llama-3.1-8b", "h100-sxm", "gptq_marlin", "Cannot find the config file"),
        # a checkpoint's method against another --quantization
        ("qwen2.5-7b-instruct-awq", "rtx4090", "gptq", "does not match the quantization"),
        # (vLLM keeps awq here: Marlin takes over only for --quantization awq_marlin or none)
        ("qwen2.5-7b-instruct-awq", "rtx4090", "fp8", "model config (awq) does not match"),
        # ROCm takes awq but not awq_marlin: the override does not happen, so a mismatch
        ("qwen2.5-7b-instruct-awq", "mi300x", "awq_marlin", "serves as awq on mi300x"),
    ],
)
def test_vllm_refusals_are_path_errors(model_id, gpu_id, quantization, message):
    with pytest.raises(ConfigError) as excinfo:
        served_model(load_model(model_id), load_gpu(gpu_id), quantization)
    assert excinfo.value.path == "engine.quantization"
    assert message in excinfo.value.message


def test_gpu_refusals(tmp_path):
    # ModelOpt FP8 needs compute capability 8.9: vLLM refuses it on an A100
    modelopt = load_model(str(write_config(
        tmp_path, {"quant_method": "modelopt", "quant_algo": "FP8"})))
    with pytest.raises(ConfigError, match="needs compute capability 8.9 and a100-80gb-sxm has "
                       "8.0.*Minimum capability: 89. Current capability: 80"):
        served_model(modelopt, load_gpu("a100-80gb-sxm"))
    assert served_model(modelopt, load_gpu("h100-sxm")).quantization.method == "modelopt"
    # ... and ROCm does not list ModelOpt at all
    with pytest.raises(ConfigError, match="modelopt quantization is currently not supported "
                       "in rocm"):
        served_model(modelopt, load_gpu("mi300x"))
    # the legacy AWQ kernels take float16 activations only
    bf16_awq = load_model("qwen2.5-7b-instruct-awq").model_copy(update={"dtype": "bfloat16"})
    with pytest.raises(ConfigError, match="torch.bfloat16 is not supported for quantization "
                       "method awq"):
        served_model(bf16_awq, load_gpu("rtx4090"), "awq")
    assert served_model(bf16_awq, load_gpu("rtx4090")).quantization.method == "awq_marlin"
    # native NVFP4 on Blackwell RTX: no FP4 peak in the catalog to price it with
    nvfp4 = load_model(str(tmp_path / "config.json")).model_copy(update={
        "quantization": quantization_from_hf({"quantization_config": {
            "quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16}}, "x")})
    with pytest.raises(ConfigError, match="no FP4 peak"):
        served_model(nvfp4, load_gpu("rtx-pro-6000"))
    b200 = load_gpu("b200")
    assert gemm_kernel(served_model(nvfp4, b200).quantization, b200).name == "w4a4_fp4"
    h100 = load_gpu("h100-sxm")
    assert gemm_kernel(served_model(nvfp4, h100).quantization, h100).name == "marlin"


def test_scenario_refusals_name_the_field(tmp_path):
    from clustersim.scenario import parse_scenario
    from clustersim.sim import run_scenario

    base = {"name": "q", "model": "qwen2.5-7b-instruct", "gpu": "rtx4090",
            "engine": {"quantization": "awq", "max_model_len": 4096},
            "workload": {"kind": "explicit", "requests": [
                {"id": "a", "arrival_s": 0.0, "prompt_tokens": 8, "output_tokens": 2}]}}
    with pytest.raises(ConfigError) as excinfo:
        run_scenario(parse_scenario(base))
    assert excinfo.value.path == "engine.quantization"
    # prefill and decode pools must cache KV alike (vLLM's NIXL compatibility hash)
    split = {**base, "model": "llama-3.1-8b", "gpu": "h100-sxm", "topology": "dgx-h100",
             "engine": {"max_model_len": 4096},
             "layout": {"kind": "disaggregated", "pools": [
                 {"name": "p", "role": "prefill", "instances": 1},
                 {"name": "d", "role": "decode", "instances": 1,
                  "engine": {"kv_cache_dtype": "fp8"}}]}}
    with pytest.raises(ConfigError) as excinfo:
        run_scenario(parse_scenario(split))
    assert excinfo.value.path == "layout.pools[1].engine.kv_cache_dtype"
    assert "cache_dtype differs" in excinfo.value.message


# ------------------------------------------------------- hand-computed prices
def fp8_70b_terms():
    """Llama-3.1-70B, --quantization fp8, H100 SXM TP4: every constant of the hand prices, on
    fit-v1 (no kernel floors, attention saturation or custom all-reduce: those are
    hand-computed in test_cost)."""
    gpu = load_gpu("h100-sxm@vidur")
    fit = gpu.fp8_gemm  # fitted on aiconfigurator's H100 FP8 GEMMs (calibrated_vidur.yaml)
    fp8_flop_s = 1 / (fit.compute_efficiency * 1978.9e12)
    fp8_byte_s = 1 / (fit.memory_efficiency * 3350e9)
    bf16_flop_s = 1 / (gpu.compute_efficiency * 989.4e12)
    byte_s = 1 / (gpu.memory_efficiency * 3350e9)
    # one TP4 rank's GEMMs (in, out), 80 layers: qkv 8192 x (16 + 2 x 2) x 128, o 2048 x 8192,
    # gate_up 8192 x 2 x 7168, down 7168 x 8192; one-byte weights plus a float32 scale, FP8
    # activations in, BF16 out
    shapes = ((8192, 2560), (2048, 8192), (8192, 14336), (7168, 8192))
    gemms = [(80 * 2 * k * n * fp8_flop_s, 80 * (k * n + 4) * fp8_byte_s,
              80 * (k + 2 * n) * fp8_byte_s) for k, n in shapes]
    # LM head stays BF16: 8192 x 128256 / 4
    lm_flop_s, lm_weight_s = 2 * 8192 * 32064 * bf16_flop_s, 8192 * 32064 * 2 * byte_s
    lm_act_s = (8192 + 32064) * 2 * byte_s
    # attention: 16 query heads x 128 per rank, 2 matmuls, 80 layers; KV 2 x 80 x 2 x 128 x 2 B
    attn_s_per_pair = 80 * 2 * 2 * 2048 / (gpu.attention_efficiency * 989.4e12)
    kv_s = 81_920 * byte_s
    # 161 all-reduces (2 per layer + embedding) of 8192 BF16 values per token over NVLink4
    link = 450e9 * gpu.link.efficiency
    ar_fixed, ar_per_token = 161 * gpu.allreduce_latency_s, 161 * 1.5 * 8192 * 2 / link
    logits_fixed, logits_per_row = gpu.allreduce_latency_s, 3 * 32064 * 2 / link
    overhead = gpu.per_step_overhead_s + 80 * gpu.per_layer_overhead_s
    # the small kernels' bytes (fit-v1: no floor, its per-layer overhead holds them), 16-bit
    # activations: 160 fused add + RMSNorms of 8192, 80 rotary embeddings of the rank's
    # 16 + 2 heads of 128, 80 silu_and_mul of 7168, the embedding gather and the final norm;
    # the sampler's 2.7 float32 passes over 128,256 logits a row
    small_bytes = (160 * 4 * 8192 + 80 * 2 * (2048 + 256) + 80 * 3 * 7168 + 2 * 8192
                   + 4 * 8192) * 2

    def small(tokens: int) -> float:
        return small_bytes * tokens * byte_s

    sampler = 2.7 * 128256 * 4 * byte_s
    return dict(gpu=gpu, half=fit.compute_half_tokens, bf16_half=gpu.compute_half_tokens,
                gemms=gemms, lm=(lm_flop_s, lm_weight_s, lm_act_s), attn=attn_s_per_pair,
                kv=kv_s, ar=(ar_fixed, ar_per_token), logits=(logits_fixed, logits_per_row),
                overhead=overhead, per_request=gpu.per_request_overhead_s, small=small,
                sampler=sampler)


def test_llama_70b_fp8_on_h100_tp4_by_hand():
    t = fp8_70b_terms()
    model = served_model(load_model("llama-3.1-70b"), t["gpu"], "fp8")
    cost = CostModel(model, t["gpu"], 4)
    assert cost.kernel.name == "w8a8_fp8"

    # a 2048-token prompt chunk: every FP8 GEMM compute-bound at (2048 + half) rows
    prefill = cost.step_time(BatchShape.from_chunks([(2048, 0, True)]))
    compute = 0.0
    for flop_s, weight_s, act_s in t["gemms"]:
        assert (2048 + t["half"]) * flop_s > weight_s + 2048 * act_s
        compute += (2048 + t["half"]) * flop_s
    attention = 2048 * 2049 / 2 * t["attn"]  # causal pairs, compute-bound
    assert attention > (2048 + 2048) * t["kv"]
    lm_flop_s, lm_weight_s, lm_act_s = t["lm"]
    lm_head = lm_weight_s + lm_act_s  # one sampled row: memory-bound
    assert (1 + t["bf16_half"]) * lm_flop_s < lm_head
    lm_head += t["small"](2048) + t["sampler"]
    communication = (t["ar"][0] + 2048 * t["ar"][1]) + (t["logits"][0] + t["logits"][1])
    overhead = t["overhead"] + t["per_request"]
    assert prefill.compute_s == pytest.approx(compute + attention, rel=1e-12)
    assert prefill.memory_s == pytest.approx(lm_head, rel=1e-12)
    assert prefill.communication_s == pytest.approx(communication, rel=1e-12)
    assert prefill.time_s == pytest.approx(compute + attention + lm_head + communication
                                           + overhead, rel=1e-12)
    assert prefill.time_s * 1e3 == pytest.approx(125.781, abs=0.001)  # BF16: 155.495 ms

    # 64 decodes at 2048 tokens of context each: FP8 weights streamed once, memory-bound
    decode = cost.step_time(decodes(64, 2047))
    memory = 0.0
    for flop_s, weight_s, act_s in t["gemms"]:
        assert (64 + t["half"]) * flop_s < weight_s + 64 * act_s
        memory += weight_s + 64 * act_s
    kv_read = (64 * 2048 + 64) * t["kv"]  # read the context, write the new tokens
    assert 64 * 2048 * t["attn"] < kv_read
    lm_head = lm_weight_s + 64 * lm_act_s
    assert (64 + t["bf16_half"]) * lm_flop_s < lm_head
    lm_head += t["small"](64) + 64 * t["sampler"]
    communication = (t["ar"][0] + 64 * t["ar"][1]) + (t["logits"][0] + 64 * t["logits"][1])
    overhead = t["overhead"] + 64 * t["per_request"]
    assert decode.compute_s == 0.0
    assert decode.memory_s == pytest.approx(memory + kv_read + lm_head, rel=1e-12)
    assert decode.time_s == pytest.approx(memory + kv_read + lm_head + communication
                                          + overhead, rel=1e-12)
    assert decode.time_s * 1e3 == pytest.approx(24.699, abs=0.001)  # BF16: 29.790 ms

    # fp8 KV halves what the decode attention reads
    kv8 = CostModel(served_model(load_model("llama-3.1-70b"), t["gpu"], "fp8", "fp8"),
                    t["gpu"], 4).step_time(decodes(64, 2047))
    assert decode.memory_s - kv8.memory_s == pytest.approx(kv_read / 2, rel=1e-12)


def awq_qwen_terms():
    """Qwen2.5-7B-Instruct-AWQ on one RTX 4090 (awq_marlin): every constant of the hand
    prices, on fit-v1 (no kernel floors)."""
    gpu = load_gpu("rtx4090@vidur")
    # Marlin at the 16-bit peak (FP32 accumulate) and the 16-bit fit, slowed by the
    # dequantization ratio where compute-bound, no half-saturation rows
    flop_s = 1 / (gpu.compute_efficiency * 165.2e12 * gpu.weight_only_compute_ratio)
    byte_s = 1 / (gpu.memory_efficiency * 1008e9)
    shapes = ((3584, 4608), (3584, 3584), (3584, 37888), (18944, 3584))
    gemms = [(28 * 2 * k * n * flop_s,
              28 * (k * n / 2 + (k // 128) * n * (2 + 0.5)) * byte_s,  # codes, scales, zeros
              28 * (k + n) * 2 * byte_s) for k, n in shapes]
    lm = (2 * 3584 * 152064 / (gpu.compute_efficiency * 165.2e12),
          3584 * 152064 * 2 * byte_s, (3584 + 152064) * 2 * byte_s)
    attn = 28 * 2 * 2 * 3584 / (gpu.attention_efficiency * 165.2e12)
    kv = 57_344 * byte_s  # 2 x 28 layers x 4 KV heads x 128 x 2 B
    overhead = gpu.per_step_overhead_s + 28 * gpu.per_layer_overhead_s
    # fit-v1 prices the small kernels' bytes only (its per-layer overhead holds their
    # floors): 56 fused add + RMSNorms of 3584, 28 rotary embeddings of 28 + 4 heads of 128,
    # 28 silu_and_mul of 18944, the gather and the final norm; the sampler's 2.7 passes
    small = (56 * 4 * 3584 + 28 * 2 * (3584 + 512) + 28 * 3 * 18944 + 2 * 3584
             + 4 * 3584) * 2 * byte_s
    sampler = 2.7 * 152064 * 4 * byte_s
    return dict(gpu=gpu, gemms=gemms, lm=lm, attn=attn, kv=kv, overhead=overhead,
                per_request=gpu.per_request_overhead_s, half16=gpu.compute_half_tokens,
                small=small, sampler=sampler)


def test_qwen_7b_awq_on_rtx4090_by_hand():
    t = awq_qwen_terms()
    model = served_model(load_model("qwen2.5-7b-instruct-awq"), t["gpu"])
    cost = CostModel(model, t["gpu"], 1)
    assert (model.quantization.method, cost.kernel.name) == ("awq_marlin", "marlin")

    # 32 decodes at 2048 tokens of context: 4-bit weights streamed, every GEMM memory-bound
    decode = cost.step_time(decodes(32, 2047))
    memory = 0.0
    for flop_s, weight_s, act_s in t["gemms"]:
        assert 32 * flop_s < weight_s + 32 * act_s
        memory += weight_s + 32 * act_s
    lm_flop_s, lm_weight_s, lm_act_s = t["lm"]
    lm_head = lm_weight_s + 32 * lm_act_s
    assert (32 + t["half16"]) * lm_flop_s < lm_head
    lm_head += 32 * (t["small"] + t["sampler"])
    kv_read = (32 * 2048 + 32) * t["kv"]
    overhead = t["overhead"] + 32 * t["per_request"]
    assert decode.memory_s == pytest.approx(memory + lm_head + kv_read, rel=1e-12)
    assert decode.time_s == pytest.approx(memory + lm_head + kv_read + overhead, rel=1e-12)
    assert decode.time_s * 1e3 == pytest.approx(11.219, abs=0.001)  # BF16 model: 22.494 ms

    # a 2048-token chunk: compute-bound at the 16-bit rate / weight_only_compute_ratio
    prefill = cost.step_time(BatchShape.from_chunks([(2048, 0, True)]))
    compute = sum(2048 * flop_s for flop_s, _, _ in t["gemms"])
    attention = 2048 * 2049 / 2 * t["attn"]
    lm_head = lm_weight_s + lm_act_s + 2048 * t["small"] + t["sampler"]
    assert prefill.compute_s == pytest.approx(compute + attention, rel=1e-12)
    assert prefill.memory_s == pytest.approx(lm_head, rel=1e-12)
    assert prefill.time_s == pytest.approx(compute + attention + lm_head + t["overhead"]
                                           + t["per_request"], rel=1e-12)
    assert prefill.time_s * 1e3 == pytest.approx(221.522, abs=0.001)  # BF16 model: 191.063


def test_legacy_awq_dequantizes_from_256_tokens_by_hand():
    t = awq_qwen_terms()
    gpu = t["gpu"]
    legacy = CostModel(served_model(load_model("qwen2.5-7b-instruct-awq"), gpu, "awq"), gpu)
    bf16 = CostModel(load_model("qwen2.5-7b-instruct"), gpu)
    # from 256 rows vLLM's awq_dequantize writes every weight in 16 bits (reading the packed
    # codes) and the matmul is BF16's: the same compute, plus the dequantization's bytes
    chunk = BatchShape.from_chunks([(2048, 0, True)])
    shapes = ((3584, 4608), (3584, 3584), (3584, 37888), (18944, 3584))
    dequant = 28 * sum(k * n / 2 + (k // 128) * n * 2.5 + k * n * 2 for k, n in shapes) / (
        gpu.memory_efficiency * 1008e9)
    assert legacy.step_time(chunk).compute_s == bf16.step_time(chunk).compute_s
    assert legacy.step_time(chunk).memory_s == pytest.approx(
        bf16.step_time(chunk).memory_s + dequant, rel=1e-12)
    # below 256 rows the fused awq_gemm streams 4-bit weights at the weight-only rate, with
    # the 16-bit fit's half-saturation rows on its compute: it beats BF16 on a decode batch
    # and loses to it just below the switch (why vLLM dequantizes from 256 rows)
    flop_s = t["gemms"][2][0]  # gate_up at the weight-only rate
    assert legacy.prices.gemms[2][0] == pytest.approx(flop_s, rel=1e-12)
    assert legacy.prices.gemms[2][3] == t["half16"] == 64
    assert legacy.step_time(decodes(8, 511)).time_s < bf16.step_time(decodes(8, 511)).time_s
    small = BatchShape.from_chunks([(255, 0, True)])
    assert legacy.step_time(small).time_s > bf16.step_time(small).time_s
    assert math.isinf(CostModel(served_model(load_model("qwen2.5-7b-instruct-awq"), gpu),
                                gpu).prices.dequant_rows)


def test_sixteen_bit_pricing_is_the_w16a16_kernel():
    model, gpu = load_model("llama-3.1-8b"), load_gpu("h100-sxm")
    assert served_model(model, gpu) is model  # nothing to serve differently
    kernel = CostModel(model, gpu).kernel
    assert (kernel.name, kernel.weight, kernel.compute_ratio) == ("w16a16", None, 1.0)
    assert kernel.fit.compute_efficiency == gpu.compute_efficiency


# ------------------------------------------------------------ the commands
def test_step_time_takes_quantization_and_kv_cache_dtype():
    from tests.helpers import run_cli

    code, output = run_cli("step-time", "--model", "llama-3.1-70b", "--gpu", "h100-sxm",
                           "--tp", "4", "--quantization", "fp8", "--kv-cache-dtype", "fp8",
                           "--decode-batch", "64", "--context", "2047", "--json")
    assert code == 0, output
    result = json.loads(output)
    assert (result["quantization"], result["kv_cache_dtype"]) == ("fp8", "fp8")
    assert result["gemm_kernel"] == "w8a8_fp8 at 1978.9 TFLOPS (fit-v2:h100-sxm)"
    model = served_model(load_model("llama-3.1-70b"), load_gpu("h100-sxm"), "fp8", "fp8")
    expected = CostModel(model, load_gpu("h100-sxm"), 4).step_time(decodes(64, 2047))
    assert result["time_s"] == expected.time_s
    code, output = run_cli("step-time", "--model", "qwen2.5-7b-instruct-awq", "--gpu",
                           "rtx4090", "--decode-batch", "32", "--context", "2047")
    assert code == 0, output
    assert "weights awq_marlin W4A16 g128 (5.57 GB), GEMMs marlin at 165.2 TFLOPS" in output
    # vLLM's refusal, as one path: message line and exit code 2
    code, output = run_cli("step-time", "--model", "qwen2.5-7b-instruct", "--gpu", "rtx4090",
                           "--quantization", "awq", "--decode-batch", "1", "--context", "9")
    assert code == 2
    assert output.startswith("--quantization: awq: qwen2.5-7b-instruct is a bfloat16 "
                             "checkpoint")
    code, output = run_cli("step-time", "--model", "llama-3.1-8b", "--gpu", "h100-sxm",
                           "--quantization", "int4", "--decode-batch", "1", "--context", "9")
    assert (code, output.split(":")[0]) == (2, "--quantization")


def test_simulated_engines_name_their_quantization(tmp_path):
    from pathlib import Path

    from tests.helpers import run_cli

    scenario = Path(__file__).resolve().parents[1] / "scenarios" / "quickstart_awq.yaml"
    code, output = run_cli("simulate", str(scenario), "--out", str(tmp_path),
                           "--report", str(tmp_path / "report"))
    assert code == 0, output
    assert output.startswith("quickstart-awq: qwen2.5-7b-instruct-awq on rtx4090 TP1, awq, ")
    # the report's assumptions name the setting and the kernel that priced the layers
    report = (tmp_path / "report" / "report.md").read_text()
    assert "| quantization | awq | scenario |" in report
    assert ("weights awq, KV cache auto, linear layers priced as dequant at 165.2 TFLOPS "
            "(fit-v2:rtx4090)") in report
    (engine,) = json.loads((tmp_path / "summary.json").read_text())["engine"]
    assert (engine["quantization"], engine["kv_cache_dtype"]) == ("awq", "auto")
    assert engine["gemm_kernel"] == "dequant at 165.2 TFLOPS (fit-v2:rtx4090)"
    assert engine["num_gpu_blocks"] == 18258


def test_a_plan_deploys_the_quantized_checkpoint():
    from clustersim.plan.executors import SerialExecutor
    from clustersim.plan.planner import Planner
    from clustersim.scenario import parse_scenario

    data = {
        "name": "awq-plan", "seed": 3, "model": "qwen2.5-7b-instruct-awq", "gpu": "rtx4090",
        "engine": {"max_model_len": 8192, "quantization": "awq", "kv_cache_dtype": "fp8"},
        "workload": {"kind": "poisson", "rate_per_s": 4, "num_requests": 100,
                     "prompt_tokens": 512, "output_tokens": 64},
        "slo": {"ttft_s": 2.0, "tpot_s": 0.1},
        "plan": {"gpu_budget": 1, "layouts": ["colocated"],
                 "colocated": {"tensor_parallel_sizes": [1]},
                 "search": {"seeds": 1, "tolerance": 0.1, "simulate_top": 1,
                            "min_requests": 100, "min_duration_s": 5}},
    }
    result = Planner(parse_scenario(data), SerialExecutor()).run()
    (line,) = result.serve_commands
    assert line.startswith("vllm serve Qwen/Qwen2.5-7B-Instruct-AWQ --tensor-parallel-size 1")
    assert "--quantization awq --kv-cache-dtype fp8" in line
    (engine,) = result.recommended.at_goodput.engines
    assert (engine.quantization, engine.kv_cache_dtype) == ("awq", "fp8")


def test_the_catalog_says_what_each_gpu_supports():
    from clustersim.catalog import gpu_ids

    for gpu_id in gpu_ids():
        gpu = load_gpu(gpu_id)
        assert gpu.capability is not None, gpu_id
        if gpu.platform == "cuda" and gpu.capability >= 89:  # FP8 tensor cores
            assert gpu.fp8_dense_tflops is not None, gpu_id
            assert gpu.fp8_gemm is not None, gpu_id  # measured or borrowed, never unfitted
        if gpu.capability < 89:
            assert gpu.fp8_dense_tflops is None, gpu_id
    assert load_gpu("mi300x").platform == "rocm"
    assert load_gpu("rtx4090").fp8_gemm.calibration == "fit-v2:l40s->rtx4090"


def test_an_fp8_kv_cache_hands_over_half_the_bytes():
    from pathlib import Path

    import yaml

    from clustersim.scenario import parse_scenario
    from clustersim.sim import run_scenario

    root = Path(__file__).resolve().parents[1]
    base = yaml.safe_load((root / "scenarios" / "pd_azure_conv_dgx.yaml").read_text())
    base["workload"]["window_end_s"] = 640
    moved = {}
    for kv in ("auto", "fp8"):
        data = {**base, "engine": {**base["engine"], "kv_cache_dtype": kv}}
        result = run_scenario(parse_scenario(data))
        moved[kv] = sum(t.bytes for t in result.transfers)
        assert moved[kv] == sum(r.handoff_bytes for r in result.requests)
    assert moved["fp8"] * 2 == moved["auto"]


# ------------------------------------------------- modules a checkpoint leaves in 16 bits
KIMI_K2_THINKING_QUANTIZATION = {
    # moonshotai/Kimi-K2-Thinking config.json quantization_config
    # (https://huggingface.co/moonshotai/Kimi-K2-Thinking/blob/main/config.json, as quoted in
    # public copies in GitHub code): INT4 weight-only experts, group 32, and an ignore list
    # that keeps attention, the shared experts, the dense first layer's MLP and the LM head
    # in BF16
    "config_groups": {"group_0": {
        "input_activations": None, "output_activations": None, "targets": ["Linear"],
        "weights": {"actorder": None, "block_structure": None, "dynamic": False,
                    "group_size": 32, "num_bits": 4, "observer": "minmax",
                    "observer_kwargs": {}, "strategy": "group", "symmetric": True,
                    "type": "int"}}},
    "format": "pack-quantized",
    "ignore": ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*",
               "re:.*mlp\\.(gate|up|gate_up|down)_proj.*"],
    "kv_cache_scheme": None,
    "quant_method": "compressed-tensors",
    "quantization_status": "compressed",
}


def _with_quantization(model_id: str, config: dict):
    spec = quantization_from_hf({"quantization_config": config}, "config.json")
    return load_model(model_id).model_copy(update={"quantization": spec})


def test_an_ignore_list_keeps_its_modules_in_sixteen_bits():
    """Kimi-K2-Thinking's INT4 checkpoint on Kimi-K2's architecture (61 layers, the first
    dense, 384 routed experts and one shared per MoE layer)."""
    model = _with_quantization("kimi-k2-instruct-0905", KIMI_K2_THINKING_QUANTIZATION)
    spec = model.quantization
    assert spec.excludes("model.layers.3.self_attn.q_a_proj")
    assert spec.excludes("model.layers.0.mlp.gate_proj")  # the dense layer's MLP
    assert spec.excludes("model.layers.7.mlp.shared_experts.down_proj")
    assert not spec.excludes("model.layers.7.mlp.experts.0.gate_proj")
    counts = {layer.name: model.quantized_layers(layer.name) for layer in model.linear_layers()}
    assert counts == {"fused_qkv_a_proj": 0, "q_b_proj": 0, "kv_b_proj": 0, "o_proj": 0,
                      "gate_up_proj": 0, "down_proj": 0, "experts.gate_up_proj": 60,
                      "experts.down_proj": 60, "shared_experts.gate_up_proj": 0,
                      "shared_experts.down_proj": 0, "lm_head": 0}
    # INT4 experts: 4 bits a weight plus one BF16 scale per 32; everything else BF16
    experts = 60 * 384 * 3 * 7168 * 2048
    assert model.weight_bytes == pytest.approx(
        (model.num_params - experts) * 2 + experts * (0.5 + 2 / 32))
    assert model.expert_weight_bytes == pytest.approx(experts * (0.5 + 2 / 32))
    # priced as all-INT4 (the list not read), the attention and shared experts' bytes were 4x
    # less
    everything = model.model_copy(update={"quantization": spec.model_copy(
        update={"excluded": (), "modules": "linear"})})
    assert model.weight_bytes - everything.weight_bytes > 10e9


def test_excluded_attention_runs_the_sixteen_bit_gemm():
    """An FP8 checkpoint that keeps attention in BF16 (Fp8Config's ignored_layers / a
    're:.*self_attn.*' entry): its attention GEMMs are priced as the BF16 model's, its MLP as
    the all-FP8 one's."""
    gpu = load_gpu("h100-sxm")
    block = {"quant_method": "fp8", "activation_scheme": "dynamic",
             "weight_block_size": [128, 128]}
    kept = served_model(_with_quantization("qwen3-32b", {**block, "modules_to_not_convert": [
        f"model.layers.{i}.self_attn.{p}_proj" for i in range(64) for p in "qkvo"]}), gpu)
    fp8 = served_model(_with_quantization("qwen3-32b", block), gpu)
    bf16 = load_model("qwen3-32b")
    assert kept.quantized_layers("qkv_proj") == kept.quantized_layers("o_proj") == 0
    assert kept.quantized_layers("gate_up_proj") == 64
    kept_gemms, fp8_gemms, bf16_gemms = (CostModel(m, gpu, 1).prices.gemms
                                         for m in (kept, fp8, bf16))
    assert kept_gemms[:2] == bf16_gemms[:2]  # qkv_proj, o_proj
    assert kept_gemms[2:] == fp8_gemms[2:]  # gate_up_proj, down_proj
    # and its weights hold the attention in two bytes
    attention = 64 * (5120 * (8192 + 2 * 1024) + 8192 * 5120)
    assert kept.weight_bytes - fp8.weight_bytes == pytest.approx(
        attention * 2 - sum(fp8.quantization.weight_bytes(k, n) * 64
                            for k, n, _ in fp8.attention_projections()))


def test_an_exclusion_may_name_some_layers_only():
    """An FP8 (W8A8, per-channel) checkpoint that keeps its first layer in BF16."""
    gpu = load_gpu("h100-sxm")
    fp8 = {"quant_method": "compressed-tensors", "ignore": ["lm_head"],
           "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
               "num_bits": 8, "type": "float", "strategy": "channel", "symmetric": True},
               "input_activations": {"num_bits": 8, "type": "float", "strategy": "token",
                                     "dynamic": True}}}}
    first_kept = _with_quantization("llama-3.1-8b", {
        **fp8, "ignore": ["lm_head", "re:.*layers\\.0\\..*"]})
    whole = _with_quantization("llama-3.1-8b", fp8)
    assert first_kept.quantized_layers("qkv_proj") == 31
    assert first_kept.quantized_layers("down_proj") == whole.quantized_layers("down_proj") - 1
    # one layer's linear weights in two bytes instead of one (and its per-channel scales)
    layer = sum(k * n for k, n, _ in whole.linear_shapes())  # each shape once per layer
    scales = sum(n * 4 for _, n, _ in whole.linear_shapes())  # one float32 per channel
    assert first_kept.weight_bytes - whole.weight_bytes == pytest.approx(layer - scales)

    def read_s(model) -> float:  # the weight-read time of a step's GEMMs
        return sum(g[1] for g in CostModel(served_model(model, gpu), gpu, 1).prices.gemms)

    assert read_s(whole) < read_s(first_kept) < read_s(load_model("llama-3.1-8b"))


def test_awq_and_modelopt_lists_match_as_vllm_matches_them():
    # AutoAWQ's modules_to_not_convert: any entry inside the name (is_layer_skipped, substring)
    awq = quantization_from_hf({"quantization_config": {
        "quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True,
        "modules_to_not_convert": ["self_attn"]}}, "config.json")
    assert awq.excluded == ("*self_attn*",)
    assert awq.excludes("model.layers.1.self_attn.k_proj")
    assert not awq.excludes("model.layers.1.mlp.down_proj")
    # ModelOpt: exclude_modules wildcards, and the KV cache dtype it declares
    modelopt = quantization_from_hf({"quantization_config": {
        "quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_quant_algo": "FP8",
        "exclude_modules": ["lm_head", "model.layers.*.self_attn*"]}}, "config.json")
    assert modelopt.excludes("lm_head")
    assert modelopt.excludes("model.layers.12.self_attn.o_proj")
    assert not modelopt.excludes("model.layers.12.mlp.up_proj")
    assert modelopt.kv_cache_dtype == "fp8"


def test_a_modelopt_fp8_checkpoint_stores_its_kv_cache_in_fp8_from_vllm_0_14():
    """vLLM resolves --kv-cache-dtype auto to the checkpoint's kv_cache_quant_algo
    (resolve_kv_cache_dtype_string, from v0.14.0): twice the blocks of a BF16 cache."""
    gpu = load_gpu("h200")
    model = _with_quantization("llama-3.1-70b", {
        "quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_quant_algo": "FP8",
        "exclude_modules": ["lm_head"]})
    assert served_model(model, gpu, vllm_version="0.33").kv_cache_dtype == "fp8"
    assert served_model(model, gpu, vllm_version="0.13").kv_cache_dtype == "auto"
    assert served_model(model, gpu, None, "fp8_e5m2", vllm_version="0.33").kv_cache_dtype == (
        "fp8_e5m2")
    fp8_kv = resolve_engine(EngineSettings(max_model_len=16384), model, gpu, 1)
    bf16_kv = resolve_engine(EngineSettings(max_model_len=16384, vllm_version="0.13"),
                             model, gpu, 1)
    assert fp8_kv.model.kv_bytes_per_token() * 2 == bf16_kv.model.kv_bytes_per_token()
    assert fp8_kv.num_gpu_blocks > 1.9 * bf16_kv.num_gpu_blocks


def test_a_bad_exclusion_list_is_a_path_error():
    with pytest.raises(InputError, match="ignore must be a list"):
        quantization_from_hf({"quantization_config": {
            **KIMI_K2_THINKING_QUANTIZATION, "ignore": "lm_head"}}, "config.json")
    with pytest.raises(InputError, match=r"ignore pattern 're:\(unclosed'"):
        quantization_from_hf({"quantization_config": {
            **KIMI_K2_THINKING_QUANTIZATION, "ignore": ["re:(unclosed"]}}, "config.json")
