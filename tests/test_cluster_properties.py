"""Random small workloads through disaggregated and three-pool layouts: nothing is lost,
nothing leaks, and every KV block comes back."""

from __future__ import annotations

import numpy as np
import simpy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clustersim.catalog import load_model
from clustersim.cluster.system import Cluster
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
    env = simpy.Environment()
    done: list[Request] = []
    cluster = Cluster(env, scenario, load_model("llama-3.1-8b"), np.random.default_rng(0),
                      on_done=done.append)
    objects = [Request(rid, t, p, o, block_hashes=chain_block_hashes(h))
               for rid, t, p, o, h in requests]

    def arrivals():
        for request in sorted(objects, key=lambda r: r.arrival_s):
            if request.arrival_s > env.now:
                yield env.timeout(request.arrival_s - env.now)
            cluster.submit(request)

    env.process(arrivals())
    env.run(until=1_000)
    assert sorted(r.request_id for r in done) == sorted(r.request_id for r in objects)
    for request in objects:
        assert request.is_done
        if request.status is RequestStatus.FINISHED:
            assert request.num_output_tokens == request.max_tokens
    for router in cluster.routers.values():  # everything sent came back
        assert all(load.outstanding_requests == 0 for load in router.loads)
        assert all(load.outstanding_tokens == 0 for load in router.loads)
    assert not cluster._handoffs
    for instance in cluster.all_instances():
        scheduler = instance.scheduler
        assert not scheduler.kv_held, instance.name
        assert scheduler.num_unfinished == 0, instance.name
        assert scheduler.kv.num_used_blocks == 0, instance.name
        scheduler.kv.check_invariants()
