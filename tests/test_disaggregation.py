"""Prefill/decode disaggregation end to end: vLLM's NIXL flow (G9), the <= 0.10 switch,
SGLang's shape, three pools (S6), link speed, and `clustersim compare`."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from clustersim.catalog import load_model
from tests.helpers import explicit, run_cli, scenario, schedule, simulate, write_scenario

FIXED = {"kind": "fixed", "step_time_s": 0.01}
KV_PER_TOKEN = load_model("llama-3.1-8b").kv_bytes_per_token(1)


def pd(**layout) -> dict:
    base = {
        "kind": "disaggregated",
        "pools": [{"name": "prefill", "role": "prefill"}, {"name": "decode", "role": "decode"}],
    }
    return {**base, **layout}


def pd_scenario(requests, engine=None, cost=FIXED, topology="dgx-h100", **layout) -> dict:
    return scenario(model="llama-3.1-8b", gpu="h100-sxm", topology=topology, layout=pd(**layout),
                    engine=engine or {}, cost=cost, workload=explicit(*requests))


def steps_of(result: dict, instance: str) -> list[dict]:
    return [s for s in result["steps"] if s["instance"] == instance]


def transfers(result: dict) -> list[dict]:
    with (result["out"] / "transfers.csv").open() as f:
        return list(csv.DictReader(f))


def test_g9_nixl_pull_event_sequence(tmp_path):
    result = simulate(tmp_path, pd_scenario([("R", 0.0, 40, 5)]))
    prefill, decode = steps_of(result, "prefill-0"), steps_of(result, "decode-0")
    # P: one step runs the whole prompt (max_tokens=1), then it is done; 3 blocks stay held
    assert [schedule(s) for s in prefill] == [{"R": 40}]
    assert prefill[0]["kv_blocks_used"] == "3"
    # D: no budget while pulling; then recomputes 1 token (-> first token), then 4 decodes
    assert [schedule(s) for s in decode] == [{"R": 1}] + [{"decodes": 1}] * 4
    moved = transfers(result)
    assert len(moved) == 1 and int(moved[0]["bytes"]) == 40 * KV_PER_TOKEN
    row = result["requests"]["R"]
    assert row["prefill_instance"] == "prefill-0" and row["decode_instance"] == "decode-0"
    # the client's first token comes from the decode side, after the pull finished
    assert float(row["first_token_s"]) == pytest.approx(float(decode[0]["end_s"]))
    assert float(decode[0]["start_s"]) >= float(moved[0]["end_s"])
    assert float(row["handoff_start_s"]) == pytest.approx(float(prefill[0]["end_s"]))
    assert int(row["output_tokens"]) == 5


def test_prefill_blocks_stay_held_until_the_decode_side_read_them(tmp_path):
    # P has 4 usable blocks: B (3 blocks) cannot start its prefill until A's KV was read.
    engine = {"max_model_len": 64, "num_gpu_blocks_override": 5}
    result = simulate(tmp_path, pd_scenario([("A", 0.0, 40, 3), ("B", 0.0, 40, 3)], engine))
    prefill = steps_of(result, "prefill-0")
    assert [schedule(s) for s in prefill] == [{"A": 40}, {"B": 40}]
    a_read = next(t for t in transfers(result) if t["request"] == "A")
    assert float(prefill[1]["start_s"]) >= float(a_read["end_s"])


def test_vllm_0_10_moves_full_blocks_only(tmp_path):
    old = {"vllm_compat": "0.10"}
    result = simulate(tmp_path / "a", pd_scenario([("R", 0.0, 40, 5)], kv_transfer=old))
    # 32 of 40 tokens (2 full blocks) are pulled; D prefills the 8-token tail itself
    assert [schedule(s) for s in steps_of(result, "decode-0")][0] == {"R": 8}
    assert int(transfers(result)[0]["bytes"]) == 32 * KV_PER_TOKEN
    short = simulate(tmp_path / "b", pd_scenario([("S", 0.0, 10, 3)], kv_transfer=old))
    # shorter than one block: nothing to transfer, D prefills all 10 tokens
    assert [schedule(s) for s in steps_of(short, "decode-0")][0] == {"S": 10}
    assert not (short["out"] / "transfers.csv").exists()
    assert short["requests"]["S"]["outcome"] == "finished"
    # the same output folder for a run that moves KV, then one that does not: no stale file
    again = simulate(tmp_path / "b", pd_scenario([("R", 0.0, 40, 5)], kv_transfer=old))
    assert (again["out"] / "transfers.csv").exists()
    simulate(tmp_path / "b", pd_scenario([("S", 0.0, 10, 3)], kv_transfer=old))
    assert not (again["out"] / "transfers.csv").exists()


def test_a_1000_token_prompt_moves_its_kv_at_link_speed(tmp_path):
    # Two DGX H100s: the handoff crosses 400 Gb/s NICs.
    result = simulate(tmp_path, pd_scenario(
        [("R", 0.0, 1000, 2)], topology="dgx-h100-x2",
        pools=[{"name": "prefill", "role": "prefill", "nodes": ["node0"]},
               {"name": "decode", "role": "decode", "nodes": ["node1"]}]))
    moved = transfers(result)[0]
    assert int(moved["bytes"]) == 131_072_000
    duration = float(moved["end_s"]) - float(moved["start_s"])
    assert duration == pytest.approx(131_072_000 / (50e9 * 0.85), rel=0.02)


def test_slow_kv_link_raises_ttft_disaggregated_but_not_colocated(tmp_path):
    requests = [(f"r{i}", 0.05 * i, 3000, 8) for i in range(20)]
    nodes = [{"name": "prefill", "role": "prefill", "nodes": ["node0"]},
             {"name": "decode", "role": "decode", "nodes": ["node1"]}]
    slow_topology = tmp_path / "slow.yaml"
    slow_topology.write_text(_two_h100_nodes(nic_gbit=25))
    fast_topology = tmp_path / "fast.yaml"
    fast_topology.write_text(_two_h100_nodes(nic_gbit=400))
    ttft = {}
    for name, topo in (("fast", fast_topology), ("slow", slow_topology)):
        for kind, layout in (("pd", pd(pools=nodes)),
                             ("colo", {"kind": "colocated", "pools": [
                                 {"name": "main", "instances": 2}]})):
            data = scenario(model="llama-3.1-8b", gpu="h100-sxm", topology=str(topo),
                            layout=layout, workload=explicit(*requests))
            out = simulate(tmp_path / f"{name}-{kind}", data)
            ttft[name, kind] = out["summary"]["ttft_s"]["mean"]
    assert ttft["slow", "pd"] > 1.5 * ttft["fast", "pd"]
    assert ttft["slow", "colo"] == ttft["fast", "colo"]


def _two_h100_nodes(nic_gbit: int) -> str:
    return f"""
name: two-h100-{nic_gbit}g
links:
  nvlink4: {{bw_gb_per_s_per_dir: 450, latency_us: 5, efficiency: 0.82, source: test}}
  pcie5: {{bw_gb_per_s_per_dir: 63, latency_us: 5, efficiency: 0.83, source: test}}
  nic: {{bw_gb_per_s_per_dir: {nic_gbit / 8}, latency_us: 5, efficiency: 0.85, source: test}}
nodes:
  - &node
    name: node0
    gpus: {{type: h100-sxm, count: 8}}
    pcie_link: pcie5
    gpu_fabric: {{kind: nvswitch, link: nvlink4}}
    nics: {{count: 8, link: nic}}
  - {{<<: *node, name: node1}}
switches:
  - {{name: leaf0, connects: [node0, node1]}}
"""


def test_sglang_connector_decode_allocates_early_and_prefill_pushes(tmp_path):
    result = simulate(tmp_path, pd_scenario([("R", 0.0, 40, 3)],
                                            kv_transfer={"connector": "sglang"}))
    decode = steps_of(result, "decode-0")
    assert [schedule(s) for s in decode] == [{"R": 1}, {"decodes": 1}, {"decodes": 1}]
    moved = transfers(result)[0]
    prefill = steps_of(result, "prefill-0")
    # the push starts as soon as prefill is done: no proxy round trip, no admission wait
    assert float(moved["requested_s"]) == pytest.approx(float(prefill[0]["end_s"]))


def test_three_pool_routes_by_prompt_and_output_length(tmp_path):
    layout = {"kind": "three_pool", "pools": [
        {"name": "prefill", "role": "prefill"}, {"name": "decode", "role": "decode"},
        {"name": "shared", "role": "colocated"}]}
    data = scenario(model="llama-3.1-8b", gpu="h100-sxm", topology="dgx-h100", layout=layout,
                    cost=FIXED, engine={"max_model_len": 8192},
                    workload=explicit(("a", 0.0, 4000, 64), ("b", 0.0, 256, 512),
                                      ("c", 0.0, 1500, 128), ("both", 0.0, 4000, 512)))
    rows = simulate(tmp_path, data)["requests"]
    assert (rows["a"]["prefill_instance"], rows["a"]["decode_instance"]) == (
        "prefill-0", "decode-0")
    assert (rows["b"]["prefill_instance"], rows["b"]["decode_instance"]) == (
        "decode-0", "decode-0")
    assert (rows["c"]["prefill_instance"], rows["c"]["decode_instance"]) == (
        "shared-0", "shared-0")
    # long prompt and long output is "mixed" in S6's classification: the shared pool
    assert rows["both"]["prefill_instance"] == "shared-0"
    assert all(r["outcome"] == "finished" for r in rows.values())


def test_every_request_is_accounted_for_across_pools(tmp_path):
    engine = {"max_model_len": 2048}
    requests = [(f"r{i}", 0.01 * i, 300 + 37 * i, 5 + i) for i in range(30)]
    requests.append(("too-long", 0.1, 4000, 5))
    result = simulate(tmp_path, pd_scenario(requests, engine, pools=[
        {"name": "prefill", "role": "prefill", "instances": 2},
        {"name": "decode", "role": "decode", "instances": 3}]))
    rows = result["requests"]
    assert len(rows) == 31
    assert rows["too-long"]["outcome"].startswith("rejected: prefill: prompt of 4000 tokens")
    assert sum(r["outcome"] == "finished" for r in rows.values()) == 30
    assert {r["decode_instance"] for r in rows.values() if r["outcome"] == "finished"} == {
        "decode-0", "decode-1", "decode-2"}


def test_disaggregated_layout_without_topology_is_a_config_error(tmp_path):
    data = pd_scenario([("R", 0.0, 40, 5)], topology=None)
    data.pop("topology")
    path = write_scenario(tmp_path, data)
    code, output = run_cli("simulate", str(path))
    assert code == 2
    assert output.startswith(f"{path}: topology: layout disaggregated needs a topology")


def test_compare_runs_both_layouts_and_gives_a_verdict(tmp_path: Path):
    data = pd_scenario([(f"r{i}", 0.02 * i, 500, 20) for i in range(20)], cost={"kind": "roofline"})
    path = write_scenario(tmp_path, data)
    code, output = run_cli("compare", str(path), "--out", str(tmp_path / "cmp"))
    assert code == 0, output
    assert "TTFT p95 (ms)" in output and "handoff p95 (ms)" in output
    assert "verdict:" in output
    assert (tmp_path / "cmp" / "colocated" / "requests.csv").exists()
    assert (tmp_path / "cmp" / "disaggregated" / "transfers.csv").exists()
    assert not list((tmp_path / "cmp").glob("*/steps.csv"))  # only with --steps
    code, stepped = run_cli("compare", str(path), "--out", str(tmp_path / "cmp"), "--steps")
    assert code == 0, stepped
    assert stepped == output
    assert len(list((tmp_path / "cmp").glob("*/steps.csv"))) == 2


def test_heterogeneous_pools_prefill_on_h100_tp2_decode_on_a100(tmp_path):
    topology = tmp_path / "mixed.yaml"
    topology.write_text("""
name: h100-plus-a100
links:
  nvlink4: {bw_gb_per_s_per_dir: 450, latency_us: 5, efficiency: 0.82, source: test}
  nvlink3: {bw_gb_per_s_per_dir: 300, latency_us: 5, efficiency: 0.83, source: test}
  pcie: {bw_gb_per_s_per_dir: 31.5, latency_us: 5, efficiency: 0.83, source: test}
  hdr: {bw_gb_per_s_per_dir: 25, latency_us: 5, efficiency: 0.85, source: test}
nodes:
  - {name: h, gpus: {type: h100-sxm, count: 8}, pcie_link: pcie,
     gpu_fabric: {kind: nvswitch, link: nvlink4}, nics: {count: 8, link: hdr}}
  - {name: a, gpus: {type: a100-80gb-sxm, count: 8}, pcie_link: pcie,
     gpu_fabric: {kind: nvswitch, link: nvlink3}, nics: {count: 8, link: hdr}}
switches:
  - {name: leaf0, connects: [h, a]}
""")
    data = scenario(
        model="llama-3.1-8b", gpu="h100-sxm", topology=str(topology),
        layout={"kind": "disaggregated", "pools": [
            {"name": "prefill", "role": "prefill", "gpu": "h100-sxm", "tensor_parallel_size": 2},
            {"name": "decode", "role": "decode", "gpu": "a100-80gb-sxm", "instances": 2}]},
        workload=explicit(("x", 0.0, 1000, 4), ("y", 0.0, 2000, 4)))
    result = simulate(tmp_path, data)
    engines = {e["name"]: e for e in result["summary"]["engine"]}
    assert engines["prefill-0"]["gpus"] == ["h/gpu0", "h/gpu1"]
    assert engines["decode-0"]["gpu"] == "a100-80gb-sxm"
    moved = {t["request"]: t for t in transfers(result)}
    # TP2 -> TP1: the same bytes as the prompt's KV, from both prefill ranks
    assert int(moved["x"]["bytes"]) == 1000 * KV_PER_TOKEN
    assert moved["x"]["source"] == "h/gpu0+h/gpu1"
    assert all(r["outcome"] == "finished" for r in result["requests"].values())


def test_placements_that_do_not_fit_the_topology_are_config_errors(tmp_path):
    too_many = pd_scenario([("R", 0.0, 40, 5)], pools=[
        {"name": "prefill", "role": "prefill", "instances": 6},
        {"name": "decode", "role": "decode", "instances": 4}])
    path = write_scenario(tmp_path, too_many)
    code, output = run_cli("simulate", str(path))
    assert code == 2
    assert output.startswith(f"{path}: layout.pools.decode: not enough free h100-sxm GPUs")
    across_nodes = pd_scenario([("R", 0.0, 40, 5)], pools=[
        {"name": "prefill", "role": "prefill", "tensor_parallel_size": 16},
        {"name": "decode", "role": "decode"}])
    path = write_scenario(tmp_path, across_nodes, "b.yaml")
    code, output = run_cli("simulate", str(path))
    assert code == 2 and output.startswith(f"{path}: layout.pools.prefill: a TP group of 16 GPUs")
