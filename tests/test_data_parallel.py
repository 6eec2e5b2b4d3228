"""vLLM's internal data parallelism: the DP load balancer, MoE ranks stepping together with
shared experts, their pricing (expert parallelism, all-gather/reduce-scatter) and memory."""

from __future__ import annotations

import json
from collections import Counter, defaultdict

import pytest
import simpy

from clustersim.catalog import load_gpu, load_model
from clustersim.cluster.build import DUMMY_BATCH
from clustersim.cost.memory import kv_budget, weight_bytes_per_gpu
from clustersim.cost.prices import experts_touched
from clustersim.cost.roofline import BatchShape, CostModel
from clustersim.engine.config import SchedulerConfig
from clustersim.engine.data_parallel import STATS_INTERVAL_S, DataParallelGroup
from clustersim.engine.instance import Instance
from clustersim.engine.kv_manager import KVCacheManager
from clustersim.engine.request import Request
from clustersim.engine.scheduler import Scheduler
from tests.helpers import explicit, run_cli, scenario, simulate, write_scenario

MOE = "qwen3-30b-a3b"
FIXED = {"kind": "fixed", "step_time_s": 0.01}


def moe_scenario(requests, cost=None, **top) -> dict:
    fields = {"model": MOE, "gpu": "h100-sxm", "data_parallel_size": 2,
              "enable_expert_parallel": True, "workload": explicit(*requests)}
    if cost is not None:
        fields["cost"] = cost
    return scenario(**{**fields, **top})


def idle_rank(env: simpy.Environment, name: str) -> Instance:
    config = SchedulerConfig(max_num_batched_tokens=64, max_num_seqs=8, max_model_len=256)
    kv = KVCacheManager(100, config.block_size, config.max_model_len)
    return Instance(env, name, Scheduler(config, kv), lambda plan: 0.01, run=False)


# ------------------------------------------------------------------ balancer
def test_balancer_scores_waiting_four_times_running_on_counts_published_every_100ms():
    env = simpy.Environment()
    ranks = [idle_rank(env, f"r{i}") for i in range(2)]
    group = DataParallelGroup(env, "g", ranks)
    # fresh counts: both idle; the tie goes to rank 0, whose local waiting count goes up
    assert group.choose() == 0
    # no new publication yet: the local increment alone steers the next request away
    assert group.choose() == 1
    assert group.choose() == 0
    # rank 0 now really runs 3 requests, rank 1 has 1 waiting: 3 < 4 x 1
    for i in range(3):
        ranks[0].scheduler.add_request(Request(f"a{i}", 0.0, 8, 2))
    ranks[0].scheduler.running.extend(ranks[0].scheduler.waiting.pop() for _ in range(3))
    ranks[1].scheduler.add_request(Request("b0", 0.0, 8, 2))
    env.run(until=STATS_INTERVAL_S)
    assert group.choose() == 0


@pytest.mark.parametrize("model", [MOE, "llama-3.1-8b"])
def test_a_refused_request_never_reaches_the_balancer(tmp_path, model):
    # vLLM's API server answers 400 before its balancer picks a rank: X must not count as
    # waiting on rank 0, so A and B still go to ranks 0 and 1
    requests = [("X", 0.0, 300, 4), ("A", 0.0, 32, 4), ("B", 0.0, 32, 4)]
    data = moe_scenario(requests, cost=FIXED, model=model,
                        enable_expert_parallel=model == MOE, engine={"max_model_len": 256})
    rows = simulate(tmp_path, data)["requests"]
    assert rows["X"]["outcome"].startswith("rejected: prompt of 300 tokens")
    assert rows["X"]["decode_instance"] == "main-0"  # refused by the group, not by a rank
    assert rows["A"]["decode_instance"] == "main-0.dp0"
    assert rows["B"]["decode_instance"] == "main-0.dp1"


# ------------------------------------------------------------------ lockstep
def test_moe_ranks_step_together_and_split_the_requests(tmp_path):
    requests = [(f"r{i}", 0.001 * i, 64, 8) for i in range(12)]
    result = simulate(tmp_path, moe_scenario(requests, cost=FIXED))
    rows = result["requests"]
    assert all(r["outcome"] == "finished" for r in rows.values())
    ranks = Counter(r["decode_instance"] for r in rows.values())
    assert set(ranks) == {"main-0.dp0", "main-0.dp1"}
    assert min(ranks.values()) >= 4
    times = defaultdict(set)
    for step in result["steps"]:
        times[step["instance"]].add((step["start_s"], step["end_s"]))
    # a rank steps only when the group does: every step of the busier rank's timeline
    # is a group step, and the other rank's steps are a subset of the same timeline
    busy, other = sorted(times.values(), key=len, reverse=True)
    assert other <= busy


def test_a_lone_request_pays_for_the_padded_group_and_the_idle_ranks_dummy_batch(tmp_path):
    result = simulate(tmp_path, moe_scenario([("A", 0.0, 512, 4)]))
    cost = CostModel(load_model(MOE), load_gpu("h100-sxm"), 1, dp=2, expert_parallel=True)

    def group_step(batch: BatchShape, tokens: int) -> float:
        # both ranks run the padded token count through the MoE layers; the step lasts
        # as long as the slower of the busy rank and the idle rank's dummy batch
        return max(cost.step_time(batch, 2 * tokens).time_s,
                   cost.step_time(DUMMY_BATCH, 2 * tokens).time_s)

    expected = group_step(BatchShape.from_chunks([(512, 0, True)]), 512) + sum(
        group_step(BatchShape.from_chunks([(1, 512 + i, True)]), 1) for i in range(3)
    )
    assert float(result["requests"]["A"]["e2e_s"]) == pytest.approx(expected, rel=1e-6)
    # the expert weights are split over two GPUs: faster than one GPU holding them all
    alone = simulate(tmp_path / "b", moe_scenario([("A", 0.0, 512, 4)], data_parallel_size=1))
    assert expected < float(alone["requests"]["A"]["e2e_s"])


def test_the_groups_all_gathers_run_over_the_link_that_joins_all_its_gpus(tmp_path):
    # dp 2 x tp 2 on H100 PCIe: each rank's TP pair shares an NVLink bridge, but the
    # all-gather between the ranks crosses PCIe (the catalog's link for 4 GPUs, not for 2)
    data = moe_scenario([("A", 0.0, 2048, 1)], gpu="h100-pcie", tensor_parallel_size=2)
    result = simulate(tmp_path, data)
    model, gpu = load_model(MOE), load_gpu("h100-pcie")

    def step(link: float) -> float:
        cost = CostModel(model, gpu, 2, dp=2, expert_parallel=True, dp_link_bytes_per_s=link)
        batch = BatchShape.from_chunks([(2048, 0, True)])
        return max(cost.step_time(batch, 2 * 2048).time_s,
                   cost.step_time(DUMMY_BATCH, 2 * 2048).time_s)

    pcie, bridge = gpu.tp_link(4).effective_bytes_per_s, gpu.tp_link(2).effective_bytes_per_s
    assert pcie < bridge
    e2e = float(result["requests"]["A"]["e2e_s"])
    assert e2e == pytest.approx(step(pcie), rel=1e-6)
    assert step(pcie) > step(bridge) * 1.01


def test_dense_data_parallel_ranks_run_on_their_own(tmp_path):
    requests = [(f"r{i}", 0.0, 32, 20 + 10 * i) for i in range(4)]
    result = simulate(tmp_path, scenario(data_parallel_size=2, workload=explicit(*requests)))
    by_rank = defaultdict(list)
    for step in result["steps"]:
        by_rank[step["instance"]].append(float(step["start_s"]))
    assert set(by_rank) == {"main-0.dp0", "main-0.dp1"}
    assert by_rank["main-0.dp0"] != by_rank["main-0.dp1"]  # no shared clock
    assert all(r["outcome"] == "finished" for r in result["requests"].values())


# ------------------------------------------------------------------- pricing
def test_expert_parallel_spreads_whole_experts_over_the_group():
    model, gpu = load_model(MOE), load_gpu("h100-sxm")
    batch = BatchShape.from_chunks([(1, 1000, True)] * 64)
    sliced = CostModel(model, gpu, 1, dp=2)
    whole = CostModel(model, gpu, 1, dp=2, expert_parallel=True)
    local = CostModel(model, gpu, 1)
    # same weights per GPU either way; the shared group reads half the experts' bytes (on
    # the measured kernel: half-width slices, moe_tp 2)
    assert sliced.experts_s(batch, 128) < local.experts_s(batch, 128)
    assert whole.step_time(batch, 128).time_s == pytest.approx(
        sliced.step_time(batch, 128).time_s, rel=0.25
    )
    # all-gather + reduce-scatter: 2 per layer, (dp-1)/dp of T x h elements each, at their
    # own measured latency and speed (fit-v2: nccl-tests' on the H100)
    extra = whole.step_time(batch, 128).communication_s
    link = gpu.tp_link(2).effective_bytes_per_s
    (ag_s, ag_speed), (rs_s, rs_speed) = (gpu.collective(k, 2)
                                          for k in ("all_gather", "reduce_scatter"))
    per_token = (model.num_layers * 0.5 * model.hidden_size * model.dtype_bytes / link
                 * (1 / ag_speed + 1 / rs_speed))
    fixed = model.num_layers * (ag_s + rs_s)
    assert extra == pytest.approx(fixed + 128 * per_token)


def test_group_tokens_decide_how_many_experts_are_read():
    model, gpu = load_model(MOE), load_gpu("h100-sxm")
    cost = CostModel(model, gpu, 1, dp=4, expert_parallel=True)
    batch = BatchShape.from_chunks([(1, 500, True)])
    few, many = cost.step_time(batch, 4), cost.step_time(batch, 400)
    assert experts_touched(128, 8, 400) > 3 * experts_touched(128, 8, 4)
    # the bytes read, beside the kernel floors (the same for both: one call per kernel)
    floors = cost.kernel_floors_s(batch)
    assert many.memory_s - floors > 2 * (few.memory_s - floors)


def test_data_parallel_ranks_hold_their_share_of_the_experts():
    model = load_model(MOE)
    experts = model.num_layers * model.num_experts * model.expert_params * model.dtype_bytes
    assert weight_bytes_per_gpu(model, 1) == model.weight_bytes
    assert weight_bytes_per_gpu(model, 1, 2) == pytest.approx(model.weight_bytes - experts / 2)
    gpu = load_gpu("h100-sxm")
    args = {"gpu_memory_utilization": 0.9, "block_size": 16, "max_num_batched_tokens": 2048,
            "max_num_seqs": 256}
    assert (kv_budget(model, gpu, 1, dp=2, **args).num_gpu_blocks
            > kv_budget(model, gpu, 1, **args).num_gpu_blocks)


# -------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"model": "llama-3.1-8b", "enable_expert_parallel": True},
         "enable_expert_parallel: llama-3.1-8b has no experts"),
        ({"data_parallel_size": 3}, "enable_expert_parallel: 128 experts do not split evenly"),
        ({"engine": {"async_scheduling": True}},
         "engine.async_scheduling: data-parallel MoE ranks are modelled with synchronous"),
        # a group wider than one node: named as data parallelism, not as a TP group
        ({"data_parallel_size": 16},
         "data_parallel_size: 16 ranks x tensor_parallel_size 1 = 16 GPUs, more than one "
         "node's 8 h100-sxm GPUs"),
        # on a topology a group may span nodes (tests/test_wide_ep.py), not more than it has
        ({"tensor_parallel_size": 8, "data_parallel_size": 4, "topology": "dgx-h100-x2"},
         "data_parallel_size: 4 ranks x tensor_parallel_size 8 = 32 GPUs, more than the "
         "topology's 16 h100-sxm GPUs"),
        ({"data_parallel_size": 0}, "data_parallel_size: Input should be greater than 0"),
        ({"data_parallel_size": -1}, "data_parallel_size: Input should be greater than 0"),
        ({"data_parallel_size": "two"}, "data_parallel_size: Input should be a valid integer"),
        ({"enable_expert_parallel": "maybe"}, "enable_expert_parallel: Input should be a valid"),
        ({"layout": {"kind": "colocated", "pools": [{"name": "a", "instances": 5}]},
          "topology": "dgx-h100", "model": "llama-3.1-8b", "enable_expert_parallel": False},
         "layout.pools.a: not enough free h100-sxm GPUs"),
    ],
)
def test_bad_parallel_settings_are_one_line_config_errors(tmp_path, fields, message):
    data = moe_scenario([("A", 0.0, 8, 2)], **fields)
    path = write_scenario(tmp_path, data)
    code, output = run_cli("simulate", str(path), "--out", str(tmp_path / "out"))
    assert code == 2
    assert message in output
    lines = output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{path}: {message}"), output


def test_data_parallel_prefill_pools_run_their_ranks_as_instances(tmp_path):
    # SGLang's DP attention on a prefill pool: each rank an instance of the pool
    # (tests/test_wide_ep.py prices them)
    layout = {"kind": "disaggregated", "pools": [
        {"name": "p", "role": "prefill", "data_parallel_size": 2},
        {"name": "d", "role": "decode"}]}
    data = moe_scenario([("A", 0.0, 8, 2), ("B", 0.0, 8, 2)], topology="dgx-h100",
                        layout=layout)
    code, output = run_cli("simulate", str(write_scenario(tmp_path, data)),
                           "--out", str(tmp_path / "out"))
    assert code == 0, output
    assert "instance p-0.dp0:" in output and "instance p-0.dp1:" in output


def test_a_scenario_wide_data_parallel_size_is_named_where_it_was_set(tmp_path):
    layout = {"kind": "disaggregated", "pools": [
        {"name": "p", "role": "prefill"}, {"name": "d", "role": "decode"}]}
    data = moe_scenario([("A", 0.0, 8, 2)], topology="dgx-h100", layout=layout,
                        data_parallel_size=16)
    code, output = run_cli("simulate", str(write_scenario(tmp_path, data)),
                           "--out", str(tmp_path / "out"))
    assert code == 2
    assert "data_parallel_size: 16 ranks x tensor_parallel_size 1 = 16 GPUs, more than the " \
        "topology's 8 h100-sxm GPUs" in output
    assert "layout.pools[0].data_parallel_size" not in output


def test_idle_ranks_record_their_dummy_steps_and_the_layout_names_the_ranks(tmp_path):
    result = simulate(tmp_path, moe_scenario([("A", 0.0, 64, 8)], cost=FIXED))
    steps = defaultdict(list)
    for step in result["steps"]:
        steps[step["instance"]].append(step)
    busy, idle = steps["main-0.dp0"], steps["main-0.dp1"]
    assert len(busy) == len(idle) == 8  # one prefill and seven decode steps, every rank
    assert all(s["num_scheduled_tokens"] == "0" for s in idle)
    util = {i["name"]: i["utilization"] for i in result["summary"]["instances"]}
    assert util["main-0.dp1"] == pytest.approx(util["main-0.dp0"])
    code, output = run_cli("simulate", str(write_scenario(tmp_path / "b", moe_scenario(
        [("A", 0.0, 64, 8)], cost=FIXED))), "--out", str(tmp_path / "b" / "out"))
    assert code == 0
    assert "main: 1 x data-parallel 2 ranks of h100-sxm TP1" in output


def test_compare_splits_data_parallel_instances_keeping_their_ranks(tmp_path):
    """One DP2 instance cannot split: both sides get two, each pool of the split one
    data-parallel instance of two ranks (docs/scenarios.md, Wide expert parallelism)."""
    data = moe_scenario([("A", 0.0, 64, 8), ("B", 0.01, 64, 8)], cost=FIXED)
    code, output = run_cli("compare", str(write_scenario(tmp_path, data)),
                           "--out", str(tmp_path / "out"))
    assert code == 0, output
    assert "main: 2 x data-parallel 2 ranks of h100-sxm TP1" in output
    for pool in ("prefill (prefill)", "decode (decode)"):
        assert f"{pool}: 1 x data-parallel 2 ranks of h100-sxm TP1" in output


def test_step_time_prices_a_data_parallel_moe_step():
    code, output = run_cli("step-time", "--model", MOE, "--gpu", "h100-sxm", "--dp", "4",
                           "--expert-parallel", "--decode-batch", "64", "--context", "1000",
                           "--json")
    assert code == 0, output
    result = json.loads(output)
    cost = CostModel(load_model(MOE), load_gpu("h100-sxm"), 1, dp=4, expert_parallel=True)
    batch = BatchShape.from_chunks([(1, 1000, True)] * 64)
    assert result["time_s"] == pytest.approx(cost.step_time(batch, 256).time_s)
    assert result["communication_s"] > 0  # the all-gathers, with no tensor parallelism
    code, output = run_cli("step-time", "--model", "llama-3.1-8b", "--gpu", "h100-sxm",
                           "--dp", "2", "--decode-batch", "1", "--context", "10")
    assert code == 2 and "--dp: llama-3.1-8b is dense" in output



@pytest.mark.parametrize("model", [MOE, "llama-3.1-8b"])
def test_data_parallel_ranks_with_a_tiny_kv_cache_finish_or_reject_every_request(
    tmp_path, model
):
    requests = [(f"r{i}", 0.001 * i, 20 + i, 8 + 3 * i) for i in range(12)]
    engine = {"num_gpu_blocks_override": 4, "max_model_len": 48, "max_num_seqs": 4}
    data = moe_scenario(requests, cost={"kind": "fixed", "step_time_s": 0.001}, model=model,
                        enable_expert_parallel=model == MOE, engine=engine)
    rows = simulate(tmp_path, data)["requests"]
    assert len(rows) == len(requests)
    outcomes = Counter(r["outcome"].split(":")[0] for r in rows.values())
    assert set(outcomes) == {"finished", "rejected"}, outcomes
    assert all(r["outcome"] == "finished" or r["outcome"].startswith("rejected: ")
               for r in rows.values())


def test_step_time_and_the_simulator_price_the_group_over_the_same_link(tmp_path):
    # dp 2 x tp 2 on PCIe H100s: the all-gathers cross all four GPUs, not one NVLink pair
    cost = CostModel(load_model(MOE), load_gpu("h100-pcie"), 2, dp=2, expert_parallel=True)
    link = load_gpu("h100-pcie").tp_link(4).effective_bytes_per_s
    explicit = CostModel(load_model(MOE), load_gpu("h100-pcie"), 2, dp=2, expert_parallel=True,
                         dp_link_bytes_per_s=link)
    batch = BatchShape.from_chunks([(1, 500, True)] * 16)
    assert cost.step_time(batch, 32).time_s == explicit.step_time(batch, 32).time_s


# ------------------------------------------------- one rule for a group in every pool
def _dp8_cluster(role: str):
    """Qwen3-30B-A3B, one DP8 x TP1 expert-parallel group on a DGX H100, as a colocated
    instance or as the decode pool of a split (one prefill instance on a second server)."""
    import numpy as np

    from clustersim.cluster.system import Cluster
    from clustersim.engine.clock import Clock
    from clustersim.scenario import parse_scenario

    group = {"name": role, "role": role, "data_parallel_size": 8, "nodes": ["node0"]}
    pools = [group] if role == "colocated" else [
        {"name": "prefill", "role": "prefill", "enable_expert_parallel": False,
         "nodes": ["node1"]}, group]
    data = {"name": "dp8", "model": MOE, "gpu": "h100-sxm", "enable_expert_parallel": True,
            "topology": {"node": "dgx-h100", "count": 2},
            "engine": {"max_model_len": 8192, "block_size": 64},
            "layout": {"kind": "colocated" if role == "colocated" else "disaggregated",
                       "pools": pools},
            "workload": explicit(("A", 0.0, 16, 4))}
    scenario = parse_scenario(data)
    cluster = Cluster(Clock(), scenario, load_model(MOE), np.random.default_rng(0),
                      on_done=lambda r: None)
    if role == "colocated":
        return cluster.instances["colocated"][0].lockstep.price_steps
    (decode,) = [g for g in cluster.rank_groups if g.role == "decode"]
    return decode.lockstep.price_steps


@pytest.mark.parametrize("batches", [
    [(64, 64 * 2048)] * 8,                       # every rank decoding 64 requests
    [(64, 64 * 2048), *[(8, 8 * 512)] * 7],      # one busy rank, the others light
    [(32, 32 * 1024), None, None, *[(32, 32 * 1024)] * 5],   # two idle ranks: dummy batches
])
def test_a_decode_step_of_a_dp8_group_costs_the_same_colocated_and_as_a_decode_pool(batches):
    """The ranks of a data-parallel expert-parallel group step together in every pool kind:
    a pure-decode step takes the slowest rank's time with the MoE layers seeing 8 x the busiest
    rank's tokens, priced the same whether the group is a colocated instance or a decode
    pool's (inside one server neither runs DeepEP's kernels, so nothing else differs)."""
    colocated, decode = _dp8_cluster("colocated"), _dp8_cluster("decode")
    assert colocated.decode_run(batches, 3) == decode.decode_run(batches, 3)
    # and it is the busiest rank's padded step, not the lone rank's own
    widest = max(b[0] for b in batches if b is not None)
    busiest = max(colocated.cost_model.decode_run_s(b[0], b[1], 1, 8 * widest)[0]
                  for b in batches if b is not None)
    assert decode.decode_run(batches, 1)[0] >= busiest
    lone = decode.cost_model.decode_run_s(8, 8 * 512, 1, 8 * 8)[0]
    if batches[1] == (8, 8 * 512):
        assert decode.decode_run(batches, 1)[0] > lone
