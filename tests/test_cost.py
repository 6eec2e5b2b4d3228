"""The roofline step-time model: hand-computed shapes on a toy GPU, then sanity on real ones."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clustersim.catalog import load_gpu, load_model
from clustersim.catalog.specs import GpuSpec, LinkSpec, ModelSpec
from clustersim.cost.roofline import BatchShape, CostModel, StepCost, step_time
from clustersim.cost.small_kernels import SAMPLER_PASSES
from clustersim.errors import ConfigError


def make_gpu(**overrides) -> GpuSpec:
    """A toy GPU with round effective rates.

    GEMMs 2 TFLOPS x 0.5 = 1e12 FLOP/s; attention x 0.25 = 5e11 FLOP/s; memory 200 GB/s x 0.5
    = 1e11 B/s; NVLink 100 GB/s x 0.5 = 5e10 B/s for 2 GPUs, PCIe 10 x 0.5 = 5e9 B/s up to 8.
    """
    fields = dict(
        id="toy",
        name="Toy GPU",
        bf16_dense_tflops=2.0,
        fp8_dense_tflops=None,
        mem_capacity_bytes=10**9,
        mem_bw_gb_per_s=200.0,
        link=LinkSpec(
            kind="nvlink", bw_gb_per_s_per_dir=100, efficiency=0.5, max_gpus=2, source="test"
        ),
        pcie_gen=4,
        pcie=LinkSpec(
            kind="pcie", bw_gb_per_s_per_dir=10, efficiency=0.5, max_gpus=8, source="test"
        ),
        compute_efficiency=0.5,
        attention_efficiency=0.25,
        memory_efficiency=0.5,
        per_step_overhead_s=1e-3,
        per_layer_overhead_s=1e-4,
        per_request_overhead_s=1e-5,
        allreduce_latency_s=1e-5,
        non_torch_memory_bytes=1000,
        calibration="default",
        source="test",
    )
    fields.update(overrides)
    return GpuSpec(**fields)


def make_model(**overrides) -> ModelSpec:
    """A toy 2-layer GQA model: h 64, 4 query heads / 2 KV heads of 16, f 128, V 256, fp16."""
    fields = dict(
        id="toy",
        num_layers=2,
        hidden_size=64,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        intermediate_size=128,
        vocab_size=256,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
        dtype="float16",
        mlp="gated",
        source="test",
    )
    fields.update(overrides)
    return ModelSpec(**fields)


SMALL_KERNEL_BYTES = (2 * 2 * 4 * 64 * 2      # two fused add + RMSNorms a layer, 4 h x 2 B
                      + 2 * 2 * (64 + 32) * 2  # rotary on q and k, read and written
                      + 2 * 3 * 128 * 2        # silu_and_mul: gate and up in, f out
                      + 2 * 64 * 2             # the embedding gather
                      + 4 * 64 * 2)            # the final norm
"""Bytes one token moves through the toy model's small kernels (no floor on the toy GPU)."""
SAMPLER_BYTES = SAMPLER_PASSES * 256 * 4
"""The sampler's float32 passes over the toy vocabulary, per sampled row."""


def decode_batch(batch_size: int, context: int) -> BatchShape:
    """``batch_size`` decodes, each with ``context`` tokens already in KV."""
    return BatchShape.from_chunks([(1, context, True)] * batch_size)


# --------------------------------------------------------------- BatchShape
def test_from_chunks_sorts_decodes_from_prefill_chunks():
    batch = BatchShape.from_chunks(
        [
            (1, 9, True),  # decode: attends to 10
            (100, 50, False),  # middle prompt chunk
            (20, 150, True),  # last prompt chunk
            (1, 0, True),  # a one-token prompt is a prefill, not a decode
        ]
    )
    assert batch == BatchShape(
        num_prefill_tokens=121,
        prefill_attn_pairs=100 * 50 + 100 * 101 / 2 + 20 * 150 + 20 * 21 / 2 + 1,
        prefill_kv_tokens=150 + 170 + 1,
        num_decode_tokens=1,
        decode_kv_tokens=10,
        num_sampled=3,
        num_seqs=4,
    )


def test_from_chunks_rejects_empty_chunks():
    with pytest.raises(ValueError):
        BatchShape.from_chunks([(0, 5, True)])


# ------------------------------------------------------ hand-computed, toy GPU
def test_decode_by_hand():
    cost = step_time(decode_batch(1, 9), make_model(), make_gpu())
    # Per layer (weights, activations in+out) in bytes, x 2 layers; all memory-bound at 1e11 B/s:
    #   qkv   64x128: 16384 + (64+128)*2     = 16768
    #   o     64x64:   8192 + (64+64)*2      =  8448
    #   gate_up 64x256: 32768 + (64+256)*2   = 33408
    #   down  128x64: 16384 + (128+64)*2     = 16768
    gemm_bytes = 2 * (16768 + 8448 + 33408 + 16768)
    lm_head_bytes = 64 * 256 * 2 + (64 + 256) * 2
    # KV per token = 2 (K,V) * 2 layers * 2 heads * 16 * 2 B = 256; reads 10, writes 1
    kv_bytes = (10 + 1) * 256
    memory = (gemm_bytes + lm_head_bytes + kv_bytes + SMALL_KERNEL_BYTES + SAMPLER_BYTES) / 1e11
    overhead = 1e-3 + 2 * 1e-4 + 1 * 1e-5
    assert cost == StepCost(
        time_s=pytest.approx(memory + overhead, rel=1e-12),
        compute_s=0.0,
        memory_s=pytest.approx(memory, rel=1e-12),
        communication_s=0.0,
        overhead_s=pytest.approx(overhead, rel=1e-12),
    )


def test_prefill_by_hand():
    cost = step_time(BatchShape.from_chunks([(1000, 0, True)]), make_model(), make_gpu())
    # GEMM FLOPs per token, 2 layers: 2*(2*64*128 + 2*64*64 + 2*64*256 + 2*128*64) = 147456;
    # each GEMM's compute time beats its bytes at 1000 tokens (e.g. qkv 32.8 us vs 8.0 us)
    gemm = 1000 * 147456 / 1e12
    # causal pairs 1000*1001/2 = 500500; 4 * (4 heads * 16) FLOPs per pair per layer, 2 layers
    attention = 500500 * 4 * 64 * 2 / 5e11
    # LM head and sampler for the one sampled row stay memory-bound, as do the small kernels
    lm_head = (64 * 256 * 2 + (64 + 256) * 2 + SAMPLER_BYTES) / 1e11
    small = 1000 * SMALL_KERNEL_BYTES / 1e11
    overhead = 1e-3 + 2 * 1e-4 + 1e-5
    assert cost.compute_s == pytest.approx(gemm + attention, rel=1e-12)
    assert cost.memory_s == pytest.approx(lm_head + small, rel=1e-12)
    assert cost.time_s == pytest.approx(gemm + attention + lm_head + small + overhead,
                                        rel=1e-12)


def test_tp2_all_reduce_over_nvlink_by_hand():
    cost = step_time(decode_batch(1, 9), make_model(), make_gpu(), tp=2)
    # 2 all-reduces x 2 layers + the embedding's, each 10 us + 2*(1/2) * (1 token * 64 * 2 B)
    # / 5e10 B/s; the sampled row's logits all-gather: 10 us + the other 128-wide shard, 2 B each
    logits = 1e-5 + 128 * 2 / 5e10
    assert cost.communication_s == pytest.approx(5 * (1e-5 + 128 / 5e10) + logits, rel=1e-12)


def test_tp4_falls_back_to_pcie_by_hand():
    cost = step_time(decode_batch(1, 9), make_model(), make_gpu(), tp=4)
    # the NVLink joins 2 GPUs only: PCIe at 5e9 B/s, ring factor 2*3/4; logits: the other
    # three 64-wide shards
    logits = 1e-5 + 3 * 64 * 2 / 5e9
    assert cost.communication_s == pytest.approx(5 * (1e-5 + 1.5 * 128 / 5e9) + logits,
                                                 rel=1e-12)


def test_tp_halves_sharded_weight_reads():
    model, gpu = make_model(), make_gpu()
    one = step_time(decode_batch(1, 9), model, gpu)
    two = step_time(decode_batch(1, 9), model, gpu, tp=2)
    assert two.memory_s < 0.6 * one.memory_s


def test_empty_batch_costs_nothing():
    assert step_time(BatchShape(), make_model(), make_gpu()) == StepCost(0.0, 0.0, 0.0, 0.0, 0.0)


def test_tp_must_divide_heads():
    with pytest.raises(ConfigError) as excinfo:
        CostModel(make_model(), make_gpu(), tp=3)
    assert excinfo.value.path == "tensor_parallel_size"


def test_wrapper_matches_cost_model():
    model, gpu = load_model("llama-3.1-8b"), load_gpu("h100-sxm")
    batch = BatchShape.from_chunks([(1, 500, True)] * 8 + [(256, 0, True)])
    assert step_time(batch, model, gpu, 2) == CostModel(model, gpu, 2).step_time(batch)


# ------------------------------------------------------------ real hardware
def test_llama_8b_decode_on_h100_is_near_the_weight_read_bound():
    model, gpu = load_model("llama-3.1-8b"), load_gpu("h100-sxm")
    bound_s = model.weight_bytes / gpu.mem_bytes_per_s  # 16.06 GB / 3.35 TB/s = 4.8 ms
    cost = step_time(decode_batch(1, 1023), model, gpu)
    assert bound_s < cost.time_s < 2 * bound_s
    assert cost.compute_s == 0.0


def test_long_prefill_is_compute_bound():
    cost = step_time(
        BatchShape.from_chunks([(2048, 0, True)]), load_model("llama-3.1-8b"), load_gpu("h100-sxm")
    )
    # the norms and the activation stay memory-bound at any size: about a tenth of the step
    assert cost.compute_s > 0.85 * (cost.time_s - cost.overhead_s)


def test_cost_grows_with_context():
    model, gpu = load_model("llama-3.1-8b"), load_gpu("h100-sxm")
    decode_times = [
        step_time(decode_batch(32, ctx), model, gpu).time_s for ctx in (1024, 8192, 32768)
    ]
    assert decode_times == sorted(decode_times) and decode_times[0] < decode_times[-1]
    chunk_times = [
        step_time(BatchShape.from_chunks([(512, prefix, False)]), model, gpu).time_s
        for prefix in (0, 4096, 16384)
    ]
    assert chunk_times == sorted(chunk_times) and chunk_times[0] < chunk_times[-1]


def test_tp2_adds_communication():
    model, gpu = load_model("llama-3.1-70b"), load_gpu("h100-sxm")
    batch = decode_batch(16, 2000)
    assert CostModel(model, gpu, 1).step_time(batch).communication_s == 0.0
    assert CostModel(model, gpu, 2).step_time(batch).communication_s > 0.0


@settings(deadline=None)  # no wall-clock limit per example
@given(
    prefill=st.integers(0, 4096),
    prefix=st.integers(0, 8192),
    decodes=st.integers(0, 256),
    context=st.integers(1, 8192),
    tp=st.sampled_from([1, 2, 4, 8]),
)
def test_parts_add_up_and_grow_with_work(prefill, prefix, decodes, context, tp):
    model, gpu = load_model("llama-3.1-8b"), load_gpu("h100-sxm")
    chunks = [(1, context, True)] * decodes
    if prefill:
        chunks.append((prefill, prefix, True))
    cost = step_time(BatchShape.from_chunks(chunks), model, gpu, tp)
    parts = cost.compute_s + cost.memory_s + cost.communication_s + cost.overhead_s
    assert cost.time_s == pytest.approx(parts)
    assert min(cost.compute_s, cost.memory_s, cost.communication_s, cost.overhead_s) >= 0.0
    more = step_time(BatchShape.from_chunks([*chunks, (1, context, True)]), model, gpu, tp)
    assert more.time_s > cost.time_s


RUN_SETUPS = [("llama-3.1-8b", "h100-sxm", 1, 1), ("llama-3.1-8b", "a100-40gb-sxm", 2, 1),
              ("qwen3-30b-a3b", "h100-sxm", 1, 4), ("qwen2.5-7b-instruct", "rtx4090", 1, 1)]


@settings(deadline=None)  # no wall-clock limit per example
@given(st.sampled_from(RUN_SETUPS), st.integers(1, 300), st.integers(0, 3_000_000),
       st.integers(1, 40))
def test_a_decode_run_is_priced_step_by_step_bit_for_bit(setup, decodes, context, steps):
    model, gpu, tp, dp = setup
    cost = CostModel(load_model(model), load_gpu(gpu), tp, dp=dp, expert_parallel=dp > 1)
    moe = dp * decodes if dp > 1 else None
    kv = context + decodes  # every decode attends to at least itself
    run = cost.decode_run_s(decodes, kv, steps, moe)
    for m, seconds in enumerate(run):
        batch = BatchShape(num_decode_tokens=decodes, decode_kv_tokens=kv + m * decodes,
                           num_sampled=decodes, num_seqs=decodes)
        assert seconds == cost.step_time(batch, moe).time_s
        assert seconds == cost.step_time_s(0, 0.0, 0, decodes, kv + m * decodes, decodes,
                                           decodes, moe)


# ------------------------------------------- fit-v2's terms, hand-computed on the toy GPU
def test_gemm_floors_add_once_per_gemm_call_by_hand():
    model = make_model()
    plain = step_time(decode_batch(1, 9), model, make_gpu())
    floored = step_time(decode_batch(1, 9), model, make_gpu(gemm_floor_s=2e-6))
    # 4 layer GEMMs x 2 layers + the LM head, 2 us each, booked as memory-bound time
    assert floored.memory_s - plain.memory_s == pytest.approx(9 * 2e-6, rel=1e-12)
    assert floored.compute_s == plain.compute_s
    assert CostModel(model, make_gpu(gemm_floor_s=2e-6)).kernel_floors_s(
        decode_batch(1, 9)) == pytest.approx(9 * 2e-6, rel=1e-12)


def test_prefill_attention_saturates_in_keys_per_query_by_hand():
    model, chunk = make_model(), BatchShape.from_chunks([(1000, 0, True)])
    plain = step_time(chunk, model, make_gpu())
    slow = step_time(chunk, model, make_gpu(attention_half_keys=500.0, attention_floor_s=3e-6))
    # (pairs + K_half x queries) pairs: 500 x 1000 more, 4 x 64 FLOPs each per layer, 2 layers
    assert slow.compute_s - plain.compute_s == pytest.approx(
        500 * 1000 * 4 * 64 * 2 / 5e11, rel=1e-12)
    # one attention floor per layer and step
    assert slow.memory_s - plain.memory_s == pytest.approx(2 * 3e-6, rel=1e-12)


def test_decode_attention_reads_kv_at_its_own_efficiency_by_hand():
    model = make_model()
    gpu = make_gpu(decode_attention_memory_efficiency=0.25, decode_attention_half_tokens=6.0)
    plain, own = (step_time(decode_batch(2, 9), model, g) for g in (make_gpu(), gpu))
    # KV 256 B per token; two sequences of 10 tokens read, 1 written, 6 per-sequence tokens each:
    # (20 + 2 x 7) x 256 B at 200 GB/s x 0.25 instead of (20 + 2) x 256 B at 1e11 B/s
    assert own.memory_s - plain.memory_s == pytest.approx(
        34 * 256 / 5e10 - 22 * 256 / 1e11, rel=1e-12)


def test_custom_all_reduce_below_vllms_limit_by_hand(monkeypatch):
    """The toy model's TP2 message is h x 2 B = 128 B a token; with the limit forced to 2 KiB
    (16 tokens) the custom all-reduce's latency and bandwidth price tokens 1-15, NCCL's 16+."""
    import clustersim.cost.collectives as collectives

    gpu = make_gpu(custom_allreduce_latency_s=2e-6, custom_allreduce_link_efficiency=0.25)
    model = make_model()
    monkeypatch.setattr(collectives, "CUSTOM_AR_MAX_BYTES", 2048)
    below = CostModel(model, gpu, 2).step_time(decode_batch(15, 9))
    at = CostModel(model, gpu, 2).step_time(decode_batch(16, 9))
    # 5 all-reduces, then the logits all-gather (NCCL's either way); custom: 2 us + tokens
    # x 128 B / (100 GB/s x 0.25); NCCL: 10 us + ... / 5e10
    assert below.communication_s == pytest.approx(
        5 * (2e-6 + 15 * 128 / 2.5e10) + 1e-5 + 15 * 128 * 2 / 5e10, rel=1e-12)
    assert at.communication_s == pytest.approx(
        5 * (1e-5 + 16 * 128 / 5e10) + 1e-5 + 16 * 128 * 2 / 5e10, rel=1e-12)


def curve(gpus: int) -> dict:
    """10 us at 1,280 B, 20 us at 12,800 B among ``gpus`` GPUs."""
    return {"gpus": gpus, "points": [[1280, 1e-5], [12800, 2e-5]]}


def allreduce_op_s(model: CostModel, batch: BatchShape) -> tuple[str, float]:
    """The step's all-reduce operator: its name and seconds."""
    (op,) = [op for op in model.operators(batch) if op.name.startswith("all-reduce")]
    return op.name, op.communication_s


def test_a_measured_all_reduce_curve_is_priced_on_its_lines_by_hand():
    """TP2 messages are 128 B a token. Measured: 10 us at 1,280 B (10 tokens), 20 us at
    12,800 B (100 tokens). Below the first point the first time; between, the line; past the
    last, its segment's slope; 5 all-reduces a step."""
    gpu = make_gpu(allreduce_curves=[curve(2)])
    model = CostModel(make_model(), gpu, 2)
    slope = 1e-5 / 11520
    for tokens, each in ((4, 1e-5), (10, 1e-5), (55, 1.5e-5), (100, 2e-5),
                         (300, 2e-5 + (38400 - 12800) * slope)):
        name, seconds = allreduce_op_s(model, decode_batch(tokens, 9))
        assert name == "all-reduce (vLLM's, measured)"
        assert seconds == pytest.approx(5 * each, rel=1e-9), tokens
    # the logits' all-gather keeps its own price; the step adds the curve's all-reduces
    fitted = CostModel(make_model(), make_gpu(), 2).step_time(decode_batch(55, 9))
    assert model.step_time(decode_batch(55, 9)).communication_s - fitted.communication_s == \
        pytest.approx(5 * 1.5e-5 - 5 * (1e-5 + 55 * 128 / 5e10), rel=1e-9)


def test_a_curve_prices_only_its_world_sizes_on_the_gpus_own_link():
    """A world size the curve lacks, a group over PCIe (4 toy GPUs) or over a topology's slower
    link is priced by the latency and bandwidth fit."""
    gpu = make_gpu(allreduce_curves=[curve(2), curve(4)])
    batch = decode_batch(55, 9)
    over_pcie = allreduce_op_s(CostModel(make_model(), gpu, 4), batch)
    assert over_pcie == ("all-reduce (NCCL)", pytest.approx(5 * (1e-5 + 1.5 * 55 * 128 / 5e9)))
    slow = CostModel(make_model(), gpu, 2, tp_link_bytes_per_s=1e10)
    assert allreduce_op_s(slow, batch) == (
        "all-reduce (NCCL)", pytest.approx(5 * (1e-5 + 55 * 128 / 1e10)))
    unlisted = make_gpu(allreduce_curves=[curve(4)])
    assert allreduce_op_s(CostModel(make_model(), unlisted, 2), batch)[0] == "all-reduce (NCCL)"


@pytest.mark.parametrize("curves, message", [
    ([{"gpus": 2, "points": [[1280, 1e-5]]}], "at least 2 points"),
    ([{"gpus": 2, "points": [[1280, 1e-5], [1280, 2e-5]]}], "sizes must rise"),
    ([{"gpus": 2, "points": [[1280, 2e-5], [12800, 1e-5]]}], "cannot take less time"),
    ([{"gpus": 1, "points": [[1280, 1e-5], [12800, 2e-5]]}], "greater than or equal to 2"),
    ([{"gpus": 2, "points": [[1280, 1e-5], [12800, 2e-5]]}] * 2, "two curves for one world"),
])
def test_a_broken_all_reduce_curve_is_refused(curves, message):
    with pytest.raises(ValueError, match=message):
        make_gpu(allreduce_curves=curves)


def test_fused_moe_fit_prices_16_bit_experts_only():
    from clustersim.catalog.specs import GemmFit

    model = load_model("qwen3-30b-a3b")
    gpu = load_gpu("h100-sxm", profile="vidur")
    fused = gpu.model_copy(update={"moe_gemm": GemmFit(
        compute_efficiency=gpu.compute_efficiency / 2,
        compute_half_tokens=gpu.compute_half_tokens,
        memory_efficiency=gpu.memory_efficiency, floor_s=1e-5, calibration="test")})
    prefill = BatchShape.from_chunks([(4096, 0, True)])
    dense, slow = (CostModel(model, g).step_time(prefill) for g in (gpu, fused))
    assert slow.compute_s > dense.compute_s
    # one 10 us floor per MoE layer
    assert CostModel(model, fused).kernel_floors_s(prefill) == pytest.approx(
        model.num_layers * 1e-5, rel=1e-12)


OPERATOR_CASES = [
    # (model, gpu, tp, dp, expert_parallel, chunks: (new tokens, context, samples))
    ("llama-3.1-8b", "h100-sxm", 1, 1, False, [(1, 2000, True)] * 64),
    ("llama-3.1-70b", "h100-sxm", 4, 1, False, [(2048, 1000, True), *[(1, 900, True)] * 8]),
    ("qwen2.5-7b-instruct-awq", "a100-80gb-sxm", 1, 1, False, [(4096, 0, True)]),
    ("opt-13b", "a100-80gb-sxm", 2, 1, False, [(512, 0, False)]),
    ("qwen3-30b-a3b", "h100-sxm", 2, 4, True, [(1024, 0, True), *[(1, 3000, True)] * 16]),
    ("deepseek-v3", "h100-sxm", 8, 1, False, [(2048, 1000, True)]),
    ("gpt-oss-120b", "h100-sxm", 2, 1, False, [(1, 20000, True)] * 32),
]


@pytest.mark.parametrize("model_id, gpu_id, tp, dp, ep, chunks", OPERATOR_CASES)
def test_the_operators_add_up_to_the_step(model_id, gpu_id, tp, dp, ep, chunks):
    model = load_model(model_id)
    if model.quantization is not None and model.quantization.method == "awq":
        from clustersim.engine.quantization import served_model

        model = served_model(model, load_gpu(gpu_id), None, "auto", where="quantization")
    cm = CostModel(model, load_gpu(gpu_id), tp, dp=dp, expert_parallel=ep)
    batch = BatchShape.from_chunks(chunks)
    cost = cm.step_time(batch)
    ops = cm.operators(batch)
    names = [op.name for op in ops]
    assert len(names) == len(set(names))
    for column in ("compute_s", "memory_s", "communication_s", "overhead_s"):
        assert sum(getattr(op, column) for op in ops) == pytest.approx(
            getattr(cost, column), rel=1e-12, abs=1e-15)
    assert sum(op.time_s for op in ops) == pytest.approx(cost.time_s, rel=1e-12)
    assert all(op.time_s >= 0 for op in ops)
    # the operators are the model's own: its projections, MLP or experts, and what it runs
    if model.is_mla:
        assert {"fused_qkv_a_proj", "q_b_proj", "kv_b_proj", "o_proj"} <= set(names)
    else:
        assert {"qkv_proj", "o_proj"} <= set(names)
    if model.is_moe:
        measured = [name for name in names if name.startswith("experts: fused MoE")]
        assert "router" in names
        assert measured or {"experts.gate_up_proj", "experts.down_proj"} <= set(names)
        assert "gate_up_proj" not in names
    elif model.mlp_matrices == 3:
        assert {"gate_up_proj", "down_proj"} <= set(names)
    else:
        assert {"fc1", "fc2"} <= set(names)
    assert any(name.startswith("all-reduce") for name in names) == (tp > 1)
    assert ("lm_head" in names) == (batch.num_sampled > 0)
    assert ("attention (prompt chunks)" in names) == (batch.num_prefill_tokens > 0)
    assert ("attention (decodes)" in names) == (batch.num_decode_tokens > 0)
    if dp > 1:
        assert "experts' all-gather, reduce-scatter" in names


def test_a_memory_bound_gemm_is_named_as_such_and_an_empty_step_has_no_operators():
    cm = CostModel(load_model("llama-3.1-8b"), load_gpu("h100-sxm"))
    decode = {op.name: op for op in cm.operators(BatchShape.from_chunks([(1, 500, True)] * 4))}
    prefill = {op.name: op for op in cm.operators(BatchShape.from_chunks([(8192, 0, True)]))}
    assert decode["gate_up_proj"].bound == "memory"
    assert prefill["gate_up_proj"].bound == "compute"
    assert decode["host: scheduler, launches, per request"].bound == "host"
    assert cm.operators(BatchShape.from_chunks([])) == ()
