"""Pipeline parallelism (vllm serve --pipeline-parallel-size P): up to P batches in flight, each
crossing P stages of a share of the layers; a request in flight is not scheduled again until its
output returns, so bubbles appear when fewer than P batches can be formed.

What the tests expect, precisely. A stage costs the step's layer-proportional price at L/P
layers; the first stage adds the host time, the last the LM head, and a send links two stages.
With a fixed step time T (a stage is T/P, no sends) every batch takes T end to end, and a new
batch may enter every T/P: so with requests enough for P batches (P lanes of n requests) the
engine makes P x n tokens per T, and with one request one token per T, as PP=1 does with its
one batch of P x n (or 1) requests. Under the roofline a lane's batch of n decodes takes
first + send + last ~ the PP=1 step time at batch n (the same layers, half on each stage), so
PP=2 on twice the GPUs makes twice PP=1's tokens at the same per-batch size (the same tokens/s
per GPU, up to the send) and one request gains nothing per token (one batch in flight: the
bubble)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from clustersim.catalog import load_gpu, load_model
from clustersim.cluster.handoff import stage_moves
from clustersim.cost.memory import kv_bytes_per_block, weight_bytes_per_gpu
from clustersim.cost.roofline import CostModel
from clustersim.engine.instance import Instance
from clustersim.engine.pipeline import (
    ACTIVATION_TENSORS,
    Pipeline,
    PipelinePricer,
    stage_bounds,
    stage_layers,
    stage_model,
)
from clustersim.metrics.run import summarize_run
from clustersim.scenario import parse_scenario
from clustersim.sim import run_scenario
from tests.helpers import explicit, run_cli, scenario, simulate, write_scenario

ROOT = Path(__file__).resolve().parent.parent
FIXED = {"kind": "fixed", "step_time_s": 0.01}
LLAMA70 = "llama-3.1-70b"


def decode_rows(steps: list[dict[str, str]], size: int) -> list[dict[str, str]]:
    return [s for s in steps if int(s["num_decode_tokens"]) == size and not s["prefill_chunks"]]


def token_rate(result: dict) -> float:
    """Output tokens per second from the first token to the last finish."""
    rows = result["requests"].values()
    first = min(float(r["arrival_s"]) + float(r["ttft_s"]) for r in rows)
    last = max(float(r["arrival_s"]) + float(r["e2e_s"]) for r in rows)
    tokens = sum(int(r["output_tokens"]) for r in rows)
    return tokens / (last - first)


# ------------------------------------------------------------------ the flow shop
def test_a_full_pipeline_takes_a_batch_every_stage_time_an_empty_one_the_sum():
    pipeline = Pipeline(PipelinePricer(2, fixed_step_s=0.01))
    plan = SimpleNamespace(num_prefill_tokens=0, num_decode_tokens=4)
    assert pipeline.enter(0.0, plan) == (0.0, 0.01)  # alone: both stages, 5 ms each
    assert pipeline.enter(0.0, plan) == (0.005, 0.015)  # waits for stage 0, leaves 5 ms later
    assert pipeline.enter(0.01, plan) == (0.01, 0.02)
    pipeline.reset()
    assert pipeline.enter(1.0, plan) == pytest.approx((1.0, 1.01))


# ------------------------------------------------------------------ fixed step time
@pytest.mark.parametrize("pp", [2, 4])
def test_many_requests_fill_the_pipeline_one_request_leaves_a_bubble(tmp_path, pp):
    # budget 256 = 8 prompts of 32: PP=P forms P lanes of 8 requests; PP=1 runs them all at once
    n = 8
    engine = {"max_num_batched_tokens": 256, "max_num_seqs": 256}
    many = explicit(*[(f"r{i}", 0.0, 32, 40) for i in range(pp * n)])
    one = simulate(tmp_path / "one", scenario(pipeline_parallel_size=pp, cost=FIXED,
                                              workload=explicit(("A", 0.0, 32, 40))))
    lanes = simulate(tmp_path / "many", scenario(pipeline_parallel_size=pp, cost=FIXED,
                                                 workload=many, engine=engine))
    single = simulate(tmp_path / "many1", scenario(cost=FIXED, workload=many, engine=engine))
    # one request: one batch in flight, a token per full step time (no faster than PP=1)
    row = one["requests"]["A"]
    assert float(row["ttft_s"]) == pytest.approx(0.01)
    assert float(row["tpot_s"]) == pytest.approx(0.01)
    # P lanes of 8: a batch leaves every 10 / P ms, each lane decodes a token per 10 ms
    steady = decode_rows(lanes["steps"], n)
    assert len(steady) > 30 * pp
    ends = [float(s["end_s"]) for s in steady]
    gaps = {round(b - a, 9) for a, b in zip(ends, ends[1:], strict=False)}
    assert gaps == {round(0.01 / pp, 9)}
    for r in lanes["requests"].values():
        assert float(r["tpot_s"]) == pytest.approx(0.01)
    # the same tokens per second as PP=1 running all P x 8 requests in one batch per 10 ms
    whole = decode_rows(single["steps"], pp * n)
    assert len(whole) > 30
    durations = {round(float(s["end_s"]) - float(s["start_s"]), 9) for s in whole}
    assert durations == {0.01}
    (gap,) = gaps
    assert n / gap == pytest.approx(pp * n / durations.pop())
    assert lanes["summary"]["num_gpus"] == pp
    assert lanes["summary"]["engine"][0]["pipeline_parallel_size"] == pp
    assert lanes["summary"]["instances"][0]["utilization"] <= 1.0


def test_a_request_in_flight_is_not_scheduled_again_until_its_output_returns(tmp_path):
    result = simulate(tmp_path, scenario(pipeline_parallel_size=2, cost=FIXED,
                                         workload=explicit(("A", 0.0, 32, 6))))
    steps = result["steps"]
    # one request: every batch holds it, and batches never overlap (no second in flight)
    assert all(int(s["num_scheduled_tokens"]) >= 1 for s in steps)
    for a, b in zip(steps, steps[1:], strict=False):
        assert float(b["start_s"]) >= float(a["end_s"])
    assert len(steps) == 6


def test_lean_and_coalescing_runs_step_a_pipeline_the_same(tmp_path):
    data = scenario(pipeline_parallel_size=2, model=LLAMA70, tensor_parallel_size=4,
                    workload=explicit(*[(f"r{i}", 0.002 * i, 300, 30) for i in range(24)]),
                    engine={"max_num_batched_tokens": 1024, "max_num_seqs": 64})
    spec = parse_scenario(data)
    full = run_scenario(spec, record_steps=True, coalesce=False)
    lean = run_scenario(spec, record_steps=False, coalesce=True)
    assert [(r.first_token_s, r.finish_s) for r in full.requests] == [
        (r.first_token_s, r.finish_s) for r in lean.requests]
    assert summarize_run(lean).to_json() == summarize_run(full).to_json()


def test_the_coalesced_fast_path_is_off_for_a_pipeline():
    import simpy

    from clustersim.engine.clock import Clock
    from clustersim.engine.config import SchedulerConfig
    from clustersim.engine.kv_manager import KVCacheManager
    from clustersim.engine.scheduler import Scheduler

    del simpy
    config = SchedulerConfig(max_num_batched_tokens=64, max_num_seqs=8, max_model_len=256)
    pricer = PipelinePricer(2, fixed_step_s=0.01)
    pricer.decode_run = lambda *a: [0.01]  # type: ignore[attr-defined]
    for pipeline, expected in ((None, True), (Pipeline(pricer), False)):
        kv = KVCacheManager(100, config.block_size, config.max_model_len)
        engine = Instance(Clock(), "e", Scheduler(config, kv, bulk_decodes=True), pricer,
                          coalesce=True, pipeline=pipeline)
        assert engine.coalesce is expected


# ------------------------------------------------------------------ roofline
def test_single_prompt_ttft_is_the_sum_of_its_stages_and_the_send(tmp_path):
    prompt = 2048
    runs = {pp: simulate(tmp_path / str(pp), scenario(
        model=LLAMA70, tensor_parallel_size=8, pipeline_parallel_size=pp,
        engine={"max_model_len": 8192, "async_scheduling": False},  # PP=2's loop
        workload=explicit(("A", 0.0, prompt, 8))))
        for pp in (1, 2)}
    model, gpu = load_model(LLAMA70), load_gpu("h100-sxm")
    stage = CostModel(stage_model(model, 2), gpu, 8)
    send_s_per_token = ACTIVATION_TENSORS * model.hidden_size * model.dtype_bytes / (
        gpu.link.effective_bytes_per_s)
    pricer = PipelinePricer(2, stage.prices, send_s_per_token=send_s_per_token,
                            send_latency_s=gpu.allreduce_latency_s)
    plan = SimpleNamespace(num_prefill_tokens=prompt, prefill_attn_pairs=prompt * (prompt + 1) / 2,
                           prefill_kv_tokens=prompt, num_decode_tokens=0, decode_kv_tokens=0,
                           num_sampled=1, num_seqs=1)
    first, middle, last, send = pricer.stages(plan)
    assert send > 0 and last > middle and first > middle
    ttft = {pp: float(r["requests"]["A"]["ttft_s"]) for pp, r in runs.items()}
    assert ttft[2] == pytest.approx(first + send + last, abs=2e-9)
    # the same layers in turn, plus the send: no faster than PP=1
    assert ttft[1] <= ttft[2] <= 1.05 * ttft[1]
    # one request decoding: one batch in flight, no faster per token than PP=1
    tpot = {pp: float(r["requests"]["A"]["tpot_s"]) for pp, r in runs.items()}
    assert tpot[1] <= tpot[2] <= 1.05 * tpot[1]


def test_two_lanes_decode_at_the_pp1_step_time_of_their_batch_size(tmp_path):
    # 2 x 16 prompts of 64 with a 1,024-token budget: two lanes of 16 decodes under PP=2,
    # against PP=1 running 16 requests (its step of 16) and all 32 (its step of 32)
    def run(pp: int, count: int, name: str) -> dict:
        return simulate(tmp_path / name, scenario(
            model=LLAMA70, tensor_parallel_size=8, pipeline_parallel_size=pp,
            topology="dgx-h100-x2",
            engine={"max_model_len": 4096, "max_num_batched_tokens": 1024, "max_num_seqs": 256,
                    "async_scheduling": False},  # PP=2 schedules synchronously: so does PP=1
            workload=explicit(*[(f"r{i}", 0.0, 64, 200) for i in range(count)])))

    pp2, pp1_half, pp1_all = run(2, 32, "pp2"), run(1, 16, "half"), run(1, 32, "all")
    tpot2 = max(float(r["tpot_s"]) for r in pp2["requests"].values())
    tpot_half = max(float(r["tpot_s"]) for r in pp1_half["requests"].values())
    tpot_all = min(float(r["tpot_s"]) for r in pp1_all["requests"].values())
    # a lane's batch of 16 crosses both halves of the layers (+ the send over the NICs):
    # about PP=1's step of 16
    assert tpot_half <= tpot2 <= 1.05 * tpot_half
    # twice the tokens of PP=1 at batch 16, on twice the GPUs: the same per GPU
    assert token_rate(pp2) == pytest.approx(2 * token_rate(pp1_half), rel=0.06)
    # and at least PP=1's with all 32 in one batch (a batch of 32 costs more than one of 16)
    assert token_rate(pp2) >= token_rate(pp1_all)
    assert tpot2 <= tpot_all * 1.05
    gpus = pp2["summary"]["engine"][0]["gpus"]
    assert len(gpus) == 16 and {g.split("/")[0] for g in gpus[:8]} != {
        g.split("/")[0] for g in gpus[8:]}  # a stage per DGX


def test_a_pipelined_engine_that_fails_drops_its_batches_in_flight_and_restarts_empty():
    # two lanes in flight when main-0 dies at 0.105 s; repaired at 0.305 s it takes C afresh
    requests = [("A", 0.0, 32, 40), ("B", 0.0, 32, 40), ("C", 0.4, 32, 5)]
    data = scenario(pipeline_parallel_size=2, cost=FIXED, workload=explicit(*requests),
                    engine={"max_num_batched_tokens": 32, "max_num_seqs": 32},
                    faults={"events": [{"kind": "instance", "name": "main-0", "at_s": 0.105,
                                        "repair_after_s": 0.2}],
                            "client": {"max_retries": 0}})
    result = run_scenario(parse_scenario(data))
    rows = {r.request_id: r for r in result.requests}
    assert rows["A"].outcome == rows["B"].outcome == "rejected: lost: instance main-0 failed " \
        "at 0.105 s"
    assert rows["C"].outcome == "finished"
    assert rows["C"].first_token_s == pytest.approx(0.41)  # an empty pipeline: both stages
    assert all(s.end_s <= 0.105 or s.start_s >= 0.305 for s in result.steps)


# ------------------------------------------------------------------ split pools
def test_stages_split_the_layers_as_vllm_does():
    # L // P each, the rest one each to the stages before the last, backwards
    assert stage_bounds(61, 2) == [(0, 31), (31, 61)]
    assert stage_bounds(80, 2) == [(0, 40), (40, 80)]
    assert stage_bounds(10, 4) == [(0, 2), (2, 5), (5, 8), (8, 10)]
    assert stage_bounds(7, 4) == [(0, 2), (2, 4), (4, 6), (6, 7)]
    for layers, pp in ((61, 2), (61, 3), (94, 5), (5, 5)):
        bounds = stage_bounds(layers, pp)
        assert bounds[0][0] == 0 and bounds[-1][1] == layers
        assert max(b - a for a, b in bounds) == stage_layers(layers, pp)


def test_a_staged_handoff_moves_each_stages_layers_between_the_stages_that_hold_them():
    # Qwen2.5-7B: 28 layers, 4 KV heads of 128, 16-bit: one KV head per rank at TP4, so a
    # rank holds 2 x 128 x 2 = 512 B per token and layer, a TP4 stage 2,048 (as without
    # stages at TP4: 57,344 B per token in all; counted over TP x PP = 8 GPUs, as if each
    # rank held every layer, it would be twice that)
    model = load_model("qwen2.5-7b-instruct")
    src = [f"node0/gpu{i}" for i in range(8)]
    dst = [f"node1/gpu{i}" for i in range(8)]
    assert stage_moves(model, src, 2, dst, 2) == [
        (src[:4], dst[:4], 14 * 2048, 0), (src[4:], dst[4:], 14 * 2048, 0)]
    # into a decode engine without stages (vLLM's push connector): both stages, to all 8
    # ranks, each rank its own (replicated) KV head: 8 x 512 B per layer
    assert stage_moves(model, src, 2, dst, 1) == [
        (src[:4], dst, 14 * 8 * 512, 0), (src[4:], dst, 14 * 8 * 512, 0)]
    # stages that do not line up: a move per pair of stages whose layers overlap
    four = stage_moves(model, [f"node0/gpu{i}" for i in range(4)], 4,
                       [f"node1/gpu{i}" for i in range(3)], 3)
    assert stage_bounds(28, 4) == [(0, 7), (7, 14), (14, 21), (21, 28)]
    assert stage_bounds(28, 3) == [(0, 9), (9, 19), (19, 28)]
    rank = 2 * 4 * 128 * 2  # TP1: all 4 KV heads on the rank
    assert [(s[0], d[0], b // rank) for s, d, b, _ in four] == [
        ("node0/gpu0", "node1/gpu0", 7), ("node0/gpu1", "node1/gpu0", 2),
        ("node0/gpu1", "node1/gpu1", 5), ("node0/gpu2", "node1/gpu1", 5),
        ("node0/gpu2", "node1/gpu2", 2), ("node0/gpu3", "node1/gpu2", 7)]
    assert sum(b for _, _, b, _ in four) == model.kv_bytes_per_token(1)
    # no stages on either side: one move of every layer, as before
    assert stage_moves(model, src[:4], 1, dst[:4], 1) == [
        (src[:4], dst[:4], model.kv_bytes_per_token(4) * 4, 0)]


def test_a_pp2_split_hands_each_stages_kv_to_the_matching_stage(tmp_path):
    # DeepSeek-V3 at TP8 x PP2 over four DGX H100: prefill on node0 (stage 0, layers 0-30)
    # and node1 (stage 1, layers 31-60), decode on node2 and node3. MLA: every rank holds
    # the whole 512 + 64 latent of its stage's layers, 1,152 B per token and layer in
    # bfloat16. A 1,000-token prompt: stage 0 moves 31 x 1,152 x 8 x 1,000 = 285,696,000 B,
    # node0/gpuK -> node2/gpuK, 35,712,000 B each; stage 1 30 layers, 276,480,000 B, node1
    # -> node3. (Counted as 16 ranks each holding all 61 layers: 1,124,352,000 B.)
    data = scenario(model="deepseek-v3", tensor_parallel_size=8, pipeline_parallel_size=2,
                    topology={"node": "dgx-h100", "count": 4},
                    engine={"max_model_len": 4096, "block_size": 64},
                    workload=explicit(("A", 0.0, 1000, 3)),
                    layout={"kind": "disaggregated", "pools": [
                        {"name": "prefill", "role": "prefill"},
                        {"name": "decode", "role": "decode"}]})
    result = run_scenario(parse_scenario(data))
    (record,) = result.transfers
    assert record.bytes == 285_696_000 + 276_480_000
    assert record.src == tuple(f"node{n}/gpu{g}" for n in (0, 1) for g in range(8))
    assert record.dst == tuple(f"node{n}/gpu{g}" for n in (2, 3) for g in range(8))
    assert record.path.startswith("node0/gpu0>") and record.path.endswith(">node2/gpu0")
    moved = {link: share for link, share in result.link_utilization.items() if share}
    # every NIC of node0 sends stage 0's share, and node2's NICs receive it; node1's send
    # stage 1's (30 layers to 31), which node3's receive: nothing crosses between stages
    for k in range(8):
        assert moved[f"node0/nic{k}>leaf0"] == moved[f"leaf0>node2/nic{k}"]
        assert moved[f"node1/nic{k}>leaf0"] == moved[f"leaf0>node3/nic{k}"]
        assert moved[f"node0/nic{k}>leaf0"] == pytest.approx(
            31 / 30 * moved[f"node1/nic{k}>leaf0"], rel=1e-12)
    span_s = result.end_s  # (the first arrival is at 0)
    nic = 50e9 * 0.85  # CX-7 400 Gb/s x efficiency
    assert moved["node0/nic0>leaf0"] * nic * span_s == pytest.approx(35_712_000, rel=1e-9)
    assert moved["node1/nic0>leaf0"] * nic * span_s == pytest.approx(34_560_000, rel=1e-9)
    # and nothing flows back, or out of the decode servers
    assert not [link for link in moved if link.startswith(("leaf0>node0/", "leaf0>node1/"))
                or link in {f"node{n}/nic{k}>leaf0" for n in (2, 3) for k in range(8)}]
    (request,) = result.requests
    assert request.outcome == "finished" and request.handoff_bytes == record.bytes


# ------------------------------------------------------------------ memory
def test_weights_and_kv_per_gpu_halve_with_two_stages(tmp_path):
    model = load_model(LLAMA70)
    half = stage_model(model, 2)
    assert stage_layers(80, 2) == half.num_layers == 40 and stage_layers(81, 2) == 41
    assert kv_bytes_per_block(half, 8) * 2 == kv_bytes_per_block(model, 8)
    ratio = weight_bytes_per_gpu(half, 8) / weight_bytes_per_gpu(model, 8)
    assert 0.5 < ratio < 0.52  # the layers halve; the embedding and LM head stay whole
    blocks = {pp: simulate(tmp_path / str(pp), scenario(
        model=LLAMA70, tensor_parallel_size=8, pipeline_parallel_size=pp,
        engine={"max_model_len": 8192}))["summary"]["engine"][0]["num_gpu_blocks"]
        for pp in (1, 2)}
    assert blocks[2] > 2 * blocks[1]  # half the KV per block, and room freed by weights


def test_a_model_too_big_for_one_node_fits_in_two_stages(tmp_path):
    # Llama-3.1-70B BF16 (141 GB) does not fit one H100; two stages of one H100 hold it
    data = scenario(model=LLAMA70, tensor_parallel_size=1, engine={"max_model_len": 4096})
    code, output = run_cli("simulate", str(write_scenario(tmp_path / "a", data)),
                           "--out", str(tmp_path / "a" / "out"))
    assert code == 2 and "does not fit" in output
    result = simulate(tmp_path / "b", {**data, "pipeline_parallel_size": 2})
    assert result["summary"]["num_gpus"] == 2


def test_the_shipped_example_serves_deepseek_v3_over_two_dgx_h100(tmp_path):
    # 673 GB of FP8 weights: one DGX H100 cannot hold them, a stage per server can
    path = ROOT / "scenarios" / "deepseek-v3-h100-pp2.yaml"
    code, output = run_cli("simulate", str(path), "--out", str(tmp_path / "out"))
    assert code == 0, output
    assert "h100-sxm TP8 x PP2" in output.splitlines()[0]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["num_gpus"] == 16 and summary["num_finished"] == 100
    gpus = summary["engine"][0]["gpus"]
    assert {g.split("/")[0] for g in gpus[:8]} == {"node0"}
    assert {g.split("/")[0] for g in gpus[8:]} == {"node1"}
    data = yaml.safe_load(path.read_text())
    one = write_scenario(tmp_path / "one", {**data, "pipeline_parallel_size": 1})
    code, output = run_cli("simulate", str(one), "--out", str(tmp_path / "one" / "out"))
    assert code == 2 and "does not fit on h100-sxm at tensor_parallel_size 8" in output


def test_non_pipelined_summaries_do_not_name_the_field(tmp_path):
    result = simulate(tmp_path, scenario(cost=FIXED))
    assert "pipeline_parallel_size" not in result["summary"]["engine"][0]


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize(("fields", "message"), [
    ({"pipeline_parallel_size": 0}, "pipeline_parallel_size: "),
    ({"pipeline_parallel_size": 500}, "pipeline_parallel_size: "),
    ({"pipeline_parallel_size": 64}, "pipeline_parallel_size: 64 stages for the 28 layers"),
    ({"pipeline_parallel_size": 2, "engine": {"async_scheduling": True}},
     "engine.async_scheduling: modelled with sync scheduling only under pipeline"),
    ({"pipeline_parallel_size": 2, "engine": {"speculative": {
        "method": "ngram", "num_speculative_tokens": 2, "acceptance_rate": 0.5}}},
     "engine.speculative: not modelled with pipeline parallelism"),
    ({"pipeline_parallel_size": 2, "data_parallel_size": 2},
     "pipeline_parallel_size: 2 stages with data_parallel_size 2"),
    ({"model": "qwen3-30b-a3b", "topology": "dgx-h100-x2", "layout": {
        "kind": "disaggregated", "pools": [
            {"name": "p", "role": "prefill", "pipeline_parallel_size": 2,
             "data_parallel_size": 2, "enable_expert_parallel": True},
            {"name": "d", "role": "decode"}]}},
     "layout.pools[0].pipeline_parallel_size: 2 stages with data_parallel_size 2"),
    ({"model": "gpt-oss-20b", "topology": "dgx-h100-x2", "layout": {
        "kind": "disaggregated", "pools": [
            {"name": "p", "role": "prefill", "pipeline_parallel_size": 2},
            {"name": "d", "role": "decode"}]}},
     "layout.pools[0].pipeline_parallel_size: 2 stages on a prefill pool of gpt-oss-20b: its "
     "KV handoff moves each stage's layers"),
])
def test_bad_pipeline_inputs_are_one_line(tmp_path, fields, message):
    path = write_scenario(tmp_path, scenario(**fields))
    code, output = run_cli("simulate", str(path), "--out", str(tmp_path / "out"))
    assert code == 2
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1, output
    assert message in lines[0], output
