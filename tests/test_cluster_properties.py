"""Random small workloads through disaggregated, three-pool and data-parallel layouts: nothing
is lost, nothing leaks, and every KV block comes back."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import simpy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clustersim.catalog import load_model
from clustersim.cluster.system import Cluster
from clustersim.engine.data_parallel import DataParallelGroup
from clustersim.engine.request import Request, RequestStatus
from clustersim.scenario import parse_scenario
from clustersim.workload import chain_block_hashes

layouts = st.sampled_from(["disaggregated", "three_pool"])


@st.composite
def cases(draw):
    n = draw(st.integers(1, 10))
    requests = [
        (f"r{i}", draw(st.floats(0, 0.5)), draw(st.integers(1, 200)), draw(st.integers(1, 12)),
         draw(st.sampled_from([(), (1, 2), (1, 2, 3, 4)])))
        for i in range(n)
    ]
    kind = draw(layouts)
    # pools may disagree on max_model_len: one side then refuses what the other accepted
    pools = [{"name": "p", "role": "prefill", "instances": draw(st.integers(1, 2)),
              "engine": {"max_model_len": draw(st.sampled_from([128, 256]))}},
             {"name": "d", "role": "decode", "instances": draw(st.integers(1, 2)),
              "engine": {"max_model_len": draw(st.sampled_from([128, 256]))}}]
    if kind == "three_pool":
        pools.append({"name": "s", "role": "colocated"})
    engine = {
        "max_model_len": 256,
        "max_num_batched_tokens": draw(st.sampled_from([32, 64, 256])),
        "max_num_seqs": draw(st.integers(1, 8)),
        "num_gpu_blocks_override": draw(st.integers(17, 40)),
        "async_scheduling": draw(st.booleans()),
        "enable_prefix_caching": draw(st.booleans()),
    }
    layout = {
        "kind": kind,
        "pools": pools,
        "kv_transfer": {"connector": draw(st.sampled_from(["nixl", "sglang"])),
                        "vllm_compat": draw(st.sampled_from(["0.33", "0.10"]))},
        "long_prompt_tokens": 64,
        "long_output_tokens": 6,
    }
    return requests, engine, layout


def simulate(scenario, model: str, requests) -> tuple[Cluster, list[Request], list[Request]]:
    """Run ``(id, arrival_s, prompt, output, prefix keys[, priority])`` requests to the end."""
    env = simpy.Environment()
    done: list[Request] = []
    cluster = Cluster(env, scenario, load_model(model), np.random.default_rng(0),
                      on_done=done.append)
    objects = [Request(r[0], r[1], r[2], r[3], priority=r[5] if len(r) > 5 else 0,
                       block_hashes=chain_block_hashes(r[4])) for r in requests]

    def arrivals():
        for request in sorted(objects, key=lambda r: r.arrival_s):
            if request.arrival_s > env.now:
                yield env.timeout(request.arrival_s - env.now)
            cluster.submit(request)

    env.process(arrivals())
    env.run(until=1_000)
    return cluster, done, objects


def everything_came_back(cluster: Cluster, done: list[Request], objects: list[Request]) -> None:
    """Every request ended (a rejection with its reason), every router is free, and every
    instance that is up (all of them, without faults) holds no request and no KV block."""
    assert sorted(r.request_id for r in done) == sorted(r.request_id for r in objects)
    for request in objects:
        assert request.is_done
        if request.status is RequestStatus.FINISHED:
            assert request.num_output_tokens == request.max_tokens
        else:
            assert request.reject_reason, request.request_id
    for role, router in cluster.routers.items():  # everything sent came back
        for index, load in enumerate(router.loads):
            assert load.outstanding_requests == 0, (role, index)
            assert load.outstanding_tokens == 0, (role, index)
    assert cluster.connector is None or cluster.connector.num_in_flight == 0
    for instance in cluster.all_instances():
        if instance.failed:
            continue  # it lost what it held when it failed
        scheduler = instance.scheduler
        assert not scheduler.kv_held, instance.name
        assert scheduler.num_unfinished == 0, instance.name
        assert scheduler.kv.num_used_blocks == 0, instance.name
        scheduler.kv.check_invariants()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_disaggregated_runs_finish_everything_and_return_every_block(case):
    requests, engine, layout = case
    scenario = parse_scenario({
        "name": "prop", "model": "llama-3.1-8b", "gpu": "h100-sxm", "topology": "dgx-h100",
        "engine": engine, "layout": layout, "cost": {"kind": "fixed", "step_time_s": 0.01},
        "workload": {"kind": "explicit", "requests": [
            {"id": "x", "arrival_s": 0, "prompt_tokens": 1, "output_tokens": 1}]},
    })
    cluster, done, objects = simulate(scenario, "llama-3.1-8b", requests)
    everything_came_back(cluster, done, objects)


# ------------------------------------------------------------------ data parallelism
EXPERTS = {m: load_model(m).num_experts for m in ("llama-3.1-8b", "qwen3-30b-a3b", "mixtral-8x7b")}


@st.composite
def data_parallel_cases(draw):
    model = draw(st.sampled_from(sorted(EXPERTS)))
    moe = EXPERTS[model] > 0
    pools = []
    num_pools = draw(st.integers(1, 2))
    for k in range(num_pools):
        dp = draw(st.integers(1, 3))
        pool = {"name": f"c{k}", "data_parallel_size": dp,
                "instances": draw(st.integers(1, 3 - num_pools)),
                # expert parallelism only where the experts split evenly over the ranks
                "enable_expert_parallel": moe and EXPERTS[model] % dp == 0 and draw(st.booleans())}
        if not (moe and dp > 1):  # lockstep MoE ranks schedule synchronously
            pool["engine"] = {"async_scheduling": draw(st.booleans())}
        pools.append(pool)
    policy = draw(st.sampled_from(["fcfs", "priority"]))
    engine = {
        "max_model_len": 256,
        "max_num_batched_tokens": draw(st.sampled_from([32, 64, 256])),
        "max_num_seqs": draw(st.integers(2, 8)),
        # 16 usable blocks hold one max_model_len request: growing decodes preempt
        "num_gpu_blocks_override": draw(st.integers(17, 28)),
        "enable_prefix_caching": draw(st.booleans()),
        "policy": policy,
    }
    n = draw(st.integers(1, 16))
    requests = []
    for i in range(n):
        prompt = draw(st.integers(1, 170))
        requests.append((
            # now and then a prompt past max_model_len: refused with a reason
            f"r{i}", draw(st.floats(0, 0.1)), 300 if prompt > 160 else prompt,
            draw(st.integers(1, 120)), draw(st.sampled_from([(), (1, 2), (1, 2, 3, 4)])),
            draw(st.integers(0, 2)) if policy == "priority" else 0,
        ))
    cost = draw(st.sampled_from([{"kind": "fixed", "step_time_s": 0.01}, {"kind": "roofline"}]))
    return model, pools, engine, cost, requests


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data_parallel_cases())
def test_data_parallel_ranks_finish_everything_and_moe_ranks_share_every_step(case):
    model, pools, engine, cost, requests = case
    scenario = parse_scenario({
        "name": "prop", "model": model, "gpu": "h100-sxm", "engine": engine, "cost": cost,
        "layout": {"kind": "colocated", "pools": pools},
        "workload": {"kind": "explicit", "requests": [
            {"id": "x", "arrival_s": 0, "prompt_tokens": 1, "output_tokens": 1}]},
    })
    cluster, done, objects = simulate(scenario, model, requests)
    everything_came_back(cluster, done, objects)
    for instance in cluster.all_instances():
        config = instance.scheduler.config
        usable = instance.scheduler.kv.num_usable_blocks
        lockstep = "." in instance.name and EXPERTS[model]
        for step in instance.steps:
            # an idle rank of a lockstep group records its dummy batch with 0 tokens
            assert (0 if lockstep else 1) <= step.num_scheduled_tokens <= config.token_budget
            assert step.num_running <= config.max_num_seqs
            assert step.kv_blocks_used <= usable
        spans = [(s.start_s, s.end_s) for s in instance.steps]
        assert all(a[1] <= b[0] for a, b in pairwise(spans)), instance.name  # one at a time
    for group in cluster.instances["colocated"]:
        if not (isinstance(group, DataParallelGroup) and EXPERTS[model]):
            continue
        # lockstep: every rank runs every group step (idle ones a dummy batch), and two
        # distinct group steps never overlap (no rank runs ahead on its own clock)
        timeline = sorted({(s.start_s, s.end_s) for rank in group.ranks for s in rank.steps})
        for rank in group.ranks:
            assert [(s.start_s, s.end_s) for s in rank.steps] == timeline
        assert all(a[1] <= b[0] for a, b in pairwise(timeline)), group.name


@st.composite
def split_data_parallel_cases(draw):
    """A split whose prefill and decode pools are data-parallel groups of a MoE model (their
    ranks routed one by one, stepping together), on one DGX H100."""
    model = draw(st.sampled_from(["qwen3-30b-a3b", "mixtral-8x7b"]))
    pools = []
    for role in ("prefill", "decode"):
        dp = draw(st.sampled_from([1, 2]))
        pools.append({"name": role[0], "role": role, "data_parallel_size": dp,
                      "instances": draw(st.integers(1, 2)),
                      "enable_expert_parallel": dp > 1 and draw(st.booleans()),
                      "engine": {"max_model_len": draw(st.sampled_from([128, 256]))}})
    engine = {
        "max_model_len": 256,
        "max_num_batched_tokens": draw(st.sampled_from([32, 64, 256])),
        "max_num_seqs": draw(st.integers(1, 8)),
        "num_gpu_blocks_override": draw(st.integers(17, 40)),
        "enable_prefix_caching": draw(st.booleans()),
    }
    layout = {"kind": "disaggregated", "pools": pools,
              "kv_transfer": {"connector": draw(st.sampled_from(["nixl", "sglang"]))}}
    requests = [
        (f"r{i}", draw(st.floats(0, 0.5)), draw(st.integers(1, 200)), draw(st.integers(1, 12)),
         draw(st.sampled_from([(), (1, 2), (1, 2, 3, 4)])))
        for i in range(draw(st.integers(1, 10)))
    ]
    cost = draw(st.sampled_from([{"kind": "fixed", "step_time_s": 0.01}, {"kind": "roofline"}]))
    return model, engine, layout, cost, requests


def split_scenario(case):
    model, engine, layout, cost, _ = case
    return parse_scenario({
        "name": "prop", "model": model, "gpu": "h100-sxm", "topology": "dgx-h100",
        "engine": engine, "layout": layout, "cost": cost,
        "workload": {"kind": "explicit", "requests": [
            {"id": "x", "arrival_s": 0, "prompt_tokens": 1, "output_tokens": 1}]},
    })


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(split_data_parallel_cases())
def test_split_pools_data_parallel_groups_finish_everything_in_lockstep(case):
    """Prefill and decode groups take their requests rank by rank from their pool's router,
    hold and read KV as any instance does, and step together as colocated groups do."""
    model = case[0]
    cluster, done, objects = simulate(split_scenario(case), model, case[4])
    everything_came_back(cluster, done, objects)
    for group in cluster.rank_groups:
        if group.lockstep is None:
            continue
        ranks = [cluster.instances[group.role][i] for i in group.positions]
        timeline = sorted({(s.start_s, s.end_s) for rank in ranks for s in rank.steps})
        for rank in ranks:
            assert [(s.start_s, s.end_s) for s in rank.steps] == timeline, rank.name
        assert all(a[1] <= b[0] for a, b in pairwise(timeline)), group.name
