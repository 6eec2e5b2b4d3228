"""Random failures on random small disaggregated and data-parallel clusters: every request
still ends finished or rejected with a reason, nothing leaks on the instances that are up,
and coalesced runs match the step-by-step loop."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clustersim.scenario import parse_scenario
from tests.test_cluster_properties import (
    cases,
    data_parallel_cases,
    everything_came_back,
    simulate,
)
from tests.test_coalesce import _same_cluster_run

EXPLICIT = {"kind": "explicit", "requests": [
    {"id": "x", "arrival_s": 0, "prompt_tokens": 1, "output_tokens": 1}]}


@st.composite
def fault_sections(draw, instances: list[str], links: list[tuple[str, str]],
                   nodes: list[str] = ()):
    events = []
    kinds = ["instance"] + (["link"] if links else []) + (["node"] if nodes else [])
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(kinds))
        event = {"kind": kind, "at_s": draw(st.sampled_from([0.0, 0.02, 0.05, 0.1, 0.3]))}
        if kind == "instance":
            event["name"] = draw(st.sampled_from(instances))
        elif kind == "node":
            event["name"] = draw(st.sampled_from(nodes))
        else:
            event["between"] = list(draw(st.sampled_from(links)))
        if draw(st.booleans()):
            event["repair_after_s"] = draw(st.sampled_from([0.01, 0.05, 0.2]))
        events.append(event)
    return {
        "events": events,
        "kv_transfer_failure_probability": draw(st.sampled_from([0.0, 0.3])),
        "client": {"max_retries": draw(st.integers(0, 2)),
                   "retry_delay_s": draw(st.sampled_from([0.0, 0.01, 0.05]))},
    }


def pd_names(layout: dict) -> list[str]:
    return [f"{p['name']}-{i}" for p in layout["pools"] for i in range(p.get("instances", 1))]


# prefill on node0, decode on node1 of two DGX H100: a GPU's NVLink port, its PCIe link to
# its NIC, its NIC's cable to the leaf (no other path for any of them)
DGX_LINKS = [("node0/gpu0", "node0/nvswitch"), ("node0/gpu1", "node0/nvswitch"),
             ("node1/gpu0", "node1/nvswitch"), ("node0/gpu0", "node0/nic0"),
             ("node0/nic1", "leaf0"), ("node1/nic0", "leaf0")]


@st.composite
def pd_fault_cases(draw):
    requests, engine, layout = draw(cases())
    layout["kv_transfer"]["kv_load_failure_policy"] = draw(st.sampled_from(["fail",
                                                                           "recompute"]))
    for pool in layout["pools"]:
        pool["nodes"] = ["node1"] if pool["role"] == "decode" else ["node0"]
    faults = draw(fault_sections(pd_names(layout), DGX_LINKS, ["node0", "node1"]))
    return requests, engine, layout, faults


def _pd(case, step_s: float = 0.01) -> dict:
    _, engine, layout, faults = case
    return {"name": "prop", "model": "llama-3.1-8b", "gpu": "h100-sxm",
            "topology": "dgx-h100-x2",
            "engine": engine, "layout": layout, "cost": {"kind": "fixed", "step_time_s": step_s},
            "workload": EXPLICIT, "faults": faults}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pd_fault_cases())
def test_faulty_disaggregated_runs_end_every_request(case):
    cluster, done, objects = simulate(parse_scenario(_pd(case)), "llama-3.1-8b", case[0])
    everything_came_back(cluster, done, objects)


def test_sglang_prompt_prefilled_on_decode_side_then_decode_lost():
    """Found by the test above: a one-token prompt under vllm_compat 0.10 has no full block to
    push, so the decode side prefills it and gives the prefill router its request back; when
    the decode instance then dies, the request was returned to that router a second time."""
    engine = {"max_model_len": 256, "max_num_batched_tokens": 32, "max_num_seqs": 1,
              "num_gpu_blocks_override": 17, "async_scheduling": False,
              "enable_prefix_caching": False}
    layout = {"kind": "disaggregated",
              "pools": [{"name": "p", "role": "prefill", "instances": 1,
                         "engine": {"max_model_len": 128}, "nodes": ["node0"]},
                        {"name": "d", "role": "decode", "instances": 1,
                         "engine": {"max_model_len": 128}, "nodes": ["node1"]}],
              "kv_transfer": {"connector": "sglang", "vllm_compat": "0.10",
                              "kv_load_failure_policy": "fail"},
              "long_prompt_tokens": 64, "long_output_tokens": 6}
    faults = {"events": [{"kind": "instance", "at_s": 0.0, "name": "p-0",
                          "repair_after_s": 0.01},
                         {"kind": "instance", "at_s": 0.1, "name": "d-0"}],
              "kv_transfer_failure_probability": 0.0,
              "client": {"max_retries": 0, "retry_delay_s": 0.0}}
    case = ([("r0", 0.09375, 1, 1, ())], engine, layout, faults)
    cluster, done, objects = simulate(parse_scenario(_pd(case)), "llama-3.1-8b", case[0])
    everything_came_back(cluster, done, objects)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pd_fault_cases(), st.sampled_from([0.01, 0.05]), st.sampled_from([0.01, 0.05]))
def test_faulty_disaggregated_clusters_coalesce_exactly(case, quantum, step_s):
    _same_cluster_run(_pd(case, step_s), "llama-3.1-8b", case[0], quantum)


@st.composite
def dp_fault_cases(draw):
    model, pools, engine, cost, requests = draw(data_parallel_cases())
    names = [f"{p['name']}-{i}" for p in pools for i in range(p["instances"])]
    return model, pools, engine, cost, requests, draw(fault_sections(names, []))


def _dp(case) -> dict:
    model, pools, engine, cost, _, faults = case
    return {"name": "prop", "model": model, "gpu": "h100-sxm", "engine": engine, "cost": cost,
            "layout": {"kind": "colocated", "pools": pools}, "workload": EXPLICIT,
            "faults": faults}


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dp_fault_cases())
def test_faulty_data_parallel_runs_end_every_request(case):
    cluster, done, objects = simulate(parse_scenario(_dp(case)), case[0], case[4])
    everything_came_back(cluster, done, objects)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dp_fault_cases(), st.sampled_from([0.01, 0.001]))
def test_faulty_data_parallel_clusters_coalesce_exactly(case, quantum):
    _same_cluster_run(_dp(case), case[0], case[4], quantum)
