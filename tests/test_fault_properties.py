"""Random failures on random small disaggregated and data-parallel clusters: every request
still ends finished or rejected with a reason, nothing leaks on the instances that are up,
and coalesced runs match the step-by-step loop."""

from __future__ import annotations

import csv
import json
import random
import re
from collections import Counter
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clustersim.output import write_run
from clustersim.scenario import parse_scenario
from clustersim.sim import build_workload, run_scenario
from clustersim.workload.benchmark import WARMUP_PREFIX
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


# ------------------------------------------------ fault tallies against the rows
def _benchmark_fault_scenario(seed: int) -> dict:
    """A benchmark client (warm-ups, a concurrency limit, retries) on a random layout of two
    DGX H100 nodes, with random instance and node failures, repaired or not, at random times;
    drawn from ``seed``."""
    draw = random.Random(seed)
    split = draw.random() < 0.5
    if split:
        pools = [{"name": "p", "role": "prefill", "instances": draw.choice([1, 2]),
                  "nodes": ["node0"]},
                 {"name": "d", "role": "decode", "instances": draw.choice([1, 2]),
                  "nodes": ["node1"]}]
        layout = {"kind": "disaggregated", "pools": pools,
                  "kv_transfer": {"kv_load_failure_policy": draw.choice(["fail", "recompute"])}}
    else:
        pools = [{"name": "m", "instances": draw.choice([1, 2, 3]),
                  "nodes": draw.choice([["node0"], ["node0", "node1"]])}]
        layout = {"kind": "colocated", "pools": pools}
    names = [f"{p['name']}-{i}" for p in pools for i in range(p["instances"])]
    events = []
    for _ in range(draw.randint(1, 3)):
        event = {"kind": draw.choice(["instance", "instance", "node"]),
                 "at_s": draw.choice([0.0, *(round(draw.uniform(0.0, 0.6), 3),) * 3])}
        event["name"] = draw.choice(names if event["kind"] == "instance" else ["node0",
                                                                               "node1"])
        if draw.random() < 0.6:
            event["repair_after_s"] = round(draw.uniform(0.05, 2.0), 3)
        events.append(event)
    concurrency = draw.choice([1, 2, 4, 16])
    return {
        "name": "tallies", "seed": seed, "model": "llama-3.1-8b", "gpu": "h100-sxm",
        "topology": "dgx-h100-x2", "layout": layout,
        "cost": {"kind": "fixed", "step_time_s": draw.choice([0.005, 0.02])},
        "workload": {"kind": "benchmark", "num_prompts": draw.randint(10, 40),
                     "num_warmups": draw.randint(1, 2 * concurrency),
                     "max_concurrency": concurrency,
                     "lengths": {"kind": "independent", "prompt_tokens": draw.choice([8, 64]),
                                 "output_tokens": draw.choice([4, 16])}},
        "faults": {"events": events,
                   "kv_transfer_failure_probability": (draw.choice([0.0, 0.3, 0.6, 0.6]) if split
                                                       else 0.0),
                   "client": {"max_retries": draw.randint(0, 3),
                              "retry_delay_s": draw.choice([0.0, 0.05, 0.3])}},
    }


def _lost_to(reason: str | None) -> str | None:
    """The failure a ``lost: <failure>[ (sent N times)]`` reason names (None: not lost)."""
    if not (reason or "").startswith("lost: "):
        return None
    return re.sub(r" \(sent \d+ times\)$", "", reason[len("lost: "):])


def _adds_up(tally) -> None:
    """One tally (a failure's, or the warm-ups'): each attempt it lost was sent again or
    failed, and only a failed KV load was recomputed."""
    assert tally.num_lost == tally.num_retried + tally.num_failed, tally
    assert tally.num_recomputed <= tally.num_kv_load_failures, tally


@pytest.mark.parametrize("seed", range(16))
def test_fault_tallies_equal_the_rows_of_benchmarks_with_warm_ups(seed, tmp_path):
    data = _benchmark_fault_scenario(seed)
    built = []

    def capture(*args, **kwargs):
        built.append(build_workload(*args, **kwargs))
        return built[-1]

    with mock.patch("clustersim.sim.build_workload", capture):
        result = run_scenario(parse_scenario(data))
    warmups, rows = built[0].warmups, result.requests
    workload = data["workload"]
    # measured requests and warm-ups each counted once, each where it belongs
    assert len(rows) == workload["num_prompts"] and len(warmups) == workload["num_warmups"]
    assert not any(r.request_id.startswith(WARMUP_PREFIX) for r in rows)
    log = result.faults
    measured = list(log.tallies.values())
    for tally in [*measured, log.warmups]:
        _adds_up(tally)
    # each failure's failed requests are the rows rejected naming it, its retries theirs
    assert Counter(_lost_to(r.reject_reason) for r in rows if _lost_to(r.reject_reason)) == {
        t.label: t.num_failed for t in measured if t.num_failed}
    assert sum(t.num_retried for t in measured) == sum(r.num_retries for r in rows)
    for r in rows:
        tries = re.search(r"\(sent (\d+) times\)$", r.reject_reason or "")
        assert (int(tries.group(1)) if tries else 1) == r.num_retries + 1 or not _lost_to(
            r.reject_reason)
    # the warm-ups' tally is theirs alone
    w = log.warmups
    assert w.num_failed == sum(1 for r in warmups if _lost_to(r.reject_reason))
    assert w.num_retried == sum(r.num_retries for r in warmups)
    # what the summary, requests.csv and summary.json say
    summary = write_run(result, tmp_path)
    f = summary.faults
    assert (f.num_lost, f.num_failed, f.num_retries) == (
        sum(t.num_lost for t in measured), sum(t.num_failed for t in measured),
        sum(r.num_retries for r in rows))
    assert f.num_retried_requests == sum(1 for r in rows if r.num_retries)
    assert (f.warmups is None) == (w.num_lost == 0 and w.num_kv_load_failures == 0)
    if f.warmups is not None:
        assert (f.warmups.num_lost, f.warmups.num_retried, f.warmups.num_failed) == (
            w.num_lost, w.num_retried, w.num_failed)
    with (tmp_path / "requests.csv").open(newline="") as file:
        csv_rows = list(csv.DictReader(file))
    assert sum(int(row["retries"]) for row in csv_rows) == f.num_retries
    assert sum(1 for row in csv_rows if row["outcome"].startswith("rejected: lost: ")) == (
        f.num_failed)
    written = json.loads((tmp_path / "summary.json").read_text())
    assert written["num_rejected"] == sum(1 for r in rows if r.reject_reason)
    assert written["faults"]["num_failed"] == f.num_failed
    assert written["faults"]["num_retries"] == f.num_retries
