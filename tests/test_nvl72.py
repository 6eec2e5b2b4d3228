"""Grace-Blackwell NVL72 racks and the HGX Blackwell servers: one NVLink 5 domain of 72 GPUs
in which TP groups, expert-parallel groups and KV handoffs sit anywhere at NVLink speed,
racks joined by their NICs, and the refusals at the domain's edge."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from clustersim.catalog import load_gpu, load_model
from clustersim.cluster.build import EXPERT_IMBALANCE_EPLB, EXPERT_IMBALANCE_NO_EPLB, hosts_of
from clustersim.cluster.system import Cluster
from clustersim.cluster.topology import Topology
from clustersim.cost.collectives import (
    allreduce_segments,
    custom_allreduce_max_bytes,
    deepep_all_to_all,
)
from clustersim.cost.moe import expert_pricing
from clustersim.engine.clock import Clock
from clustersim.scenario import parse_scenario
from tests.helpers import run_cli, write_scenario

NVLINK5 = 900e9
WORKLOAD = {"kind": "explicit", "requests": [
    {"id": f"r{i}", "arrival_s": 0.01 * i, "prompt_tokens": 300, "output_tokens": 4}
    for i in range(4)]}


def _scenario(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"name": "nvl72", "seed": 0, "model": "llama-3.1-70b",
                            "gpu": "gb200", "topology": "gb200-nvl72",
                            "engine": {"max_model_len": 4096}, "workload": WORKLOAD}
    return {**base, **fields}


def _cluster(data: dict[str, Any]) -> Cluster:
    scenario = parse_scenario(data)
    return Cluster(Clock(), scenario, load_model(scenario.model), np.random.default_rng(0),
                   on_done=lambda r: None)


def _refusal(tmp_path: Path, data: dict[str, Any]) -> str:
    path = write_scenario(tmp_path, data)
    code, output = run_cli("simulate", str(path), "--out", str(tmp_path / "out"))
    assert code == 2, output
    lines = output.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in output, output
    assert lines[0].startswith(f"{path}: ")
    return lines[0][len(f"{path}: "):]


def test_the_catalog_lists_the_blackwell_topologies() -> None:
    code, output = run_cli("catalog")
    assert code == 0, output
    rows = {line.split()[0]: line.split()[1:] for line in output.splitlines() if line.strip()}
    assert rows["gb200-nvl72"] == ["1", "72", "x", "gb200"]
    assert rows["gb300-nvl72"] == ["1", "72", "x", "gb300"]
    assert rows["hgx-b200"] == ["1", "8", "x", "b200"]
    assert rows["hgx-b300"] == ["1", "8", "x", "b300"]
    code, output = run_cli("catalog", "--json")
    topologies = {t["name"]: t for t in json.loads(output)["topologies"]}
    assert "18 compute trays" in topologies["gb200-nvl72"]["description"]


def test_the_rack_is_one_nvlink_domain_and_racks_meet_over_their_nics() -> None:
    rack = Topology.load("gb200-nvl72")
    assert len(rack.gpu_ids()) == 72
    # two GPUs of different compute trays: one NVSwitch hop, NVLink 5 both ways
    view = rack.path_view("node0/gpu0", "node0/gpu71")
    assert view.kinds == ("nvlink5",) and view.bytes_per_s == pytest.approx(NVLINK5 * 0.82)
    assert rack.tp_group_link([f"node0/gpu{i}" for i in range(72)]).kinds == ("nvlink5",)
    two = Topology.load(parse_scenario(_scenario(
        topology={"node": "gb200-nvl72", "count": 2})).topology)
    across = two.path_view("node0/gpu5", "node1/gpu5")
    assert across.kinds == ("pcie_gen5_x16", "cx7_ndr_400g")
    assert across.bytes_per_s == pytest.approx(50e9 * 0.85)  # one CX-7 400G per GPU
    gb300 = Topology.load("gb300-nvl72")
    assert gb300.spec.links["cx8_xdr_800g"].bw_gb_per_s_per_dir == 100  # 800 Gb/s
    # a tray is a host: 4 GPUs of the rack; an HGX server's 8 GPUs are one host
    assert len(hosts_of([f"node0/gpu{i}" for i in range(8)], 4)) == 2
    assert len(hosts_of([f"node0/gpu{i}" for i in range(8)], 8)) == 1


def test_tp8_on_the_rack_prices_its_all_reduce_at_nvlink_5() -> None:
    """No table measures a GB200 group beyond its 4-GPU tray: TP8 is priced by NCCL's fit of
    the tray's own tables at NVLink 5's 900 GB/s (the ring's 2(n-1)/n bytes a GPU), never
    vLLM's custom all-reduce (which stops at a host), while TP4 keeps its measured curve."""
    gpu = load_gpu("gb200")
    assert gpu.tp_link(8) is gpu.link and gpu.link.bw_gb_per_s_per_dir == 900
    assert custom_allreduce_max_bytes(gpu, 8, gpu.link) == 0
    assert custom_allreduce_max_bytes(gpu, 4, gpu.link) > 0
    token_bytes, count = 8192 * 2, 161
    (segment,) = allreduce_segments(gpu, 8, token_bytes, count)
    upto, fixed_s, per_token_s, name = segment
    assert upto == float("inf") and fixed_s == pytest.approx(count * gpu.allreduce_latency_s)
    assert per_token_s == pytest.approx(
        count * 2 * 7 / 8 * token_bytes / (NVLINK5 * gpu.link.efficiency))
    assert name == "all-reduce (NCCL fit of 2-4 GPUs, ring of 8)"
    assert allreduce_segments(gpu, 4, token_bytes, count)[0][3] == "all-reduce (vLLM's, measured)"
    # placed on the rack (GPUs 0-7: two trays), the group's link is NVLink 5 and as fast as
    # the catalog's: the step is priced exactly as without a topology
    cluster = _cluster(_scenario(tensor_parallel_size=8))
    info = cluster.infos[0]
    assert info.gpus == tuple(f"node0/gpu{i}" for i in range(8))
    placed = cluster.instances["colocated"][0].price_step.prices
    plain = _cluster(_scenario(tensor_parallel_size=8, topology=None))
    alone = plain.instances["colocated"][0].price_step.prices
    assert placed.decode_batch_parts(64, 64) == alone.decode_batch_parts(64, 64)
    code, output = run_cli("step-time", "--model", "llama-3.1-70b", "--gpu", "gb200", "--tp",
                           "8", "--decode-batch", "64", "--context", "2000")
    assert code == 0 and "all-reduce (NCCL fit of 2-4 GPUs, ring of 8)" in output, output


def test_an_expert_group_across_trays_runs_deepep_over_nvlink() -> None:
    """A DP16 expert-parallel decode group spans 4 compute trays of one rack: DeepEP's
    all-to-all with every row on NVLink (none leaves the rack); across two racks the rows to
    the other rack go over its NICs."""
    def decode_group(dp: int, topology: Any) -> Any:
        cluster = _cluster(_scenario(
            model="qwen3-30b-a3b", topology=topology, enable_expert_parallel=True,
            layout={"kind": "disaggregated", "pools": [
                {"name": "prefill", "role": "prefill", "enable_expert_parallel": False},
                {"name": "decode", "role": "decode", "data_parallel_size": dp}]}))
        group = next(g for g in cluster.rank_groups if g.role == "decode")
        assert group.lockstep is not None
        return group.lockstep.price_steps.cost_model

    model = load_model("qwen3-30b-a3b")
    k, moe_layers = model.num_experts_per_tok, model.num_moe_layers

    def per_token(a2a: Any) -> float:  # the roofline's all-to-all seconds per routed token
        return (moe_layers * EXPERT_IMBALANCE_NO_EPLB * model.hidden_size
                * (a2a.dispatch_bytes + a2a.combine_bytes) * a2a.s_per_token_byte(k))

    inside = decode_group(16, "gb200-nvl72").prices
    on_nvlink = deepep_all_to_all(model, 16, 16, NVLINK5 * 0.82, NVLINK5 * 0.82, "low_latency")
    assert on_nvlink.nic_rows(k) == 0.0  # no row leaves the rack
    assert inside.gather_s_per_token == 0.0
    assert inside.a2a_s_per_token == pytest.approx(per_token(on_nvlink))
    assert inside.expert_imbalance == EXPERT_IMBALANCE_NO_EPLB
    tray = decode_group(4, "gb200-nvl72").prices  # one tray, one host: vLLM's all-gather
    assert tray.a2a_s_per_token == 0.0 and tray.gather_s_per_token > 0
    # 128 ranks: 71 on rack 0 (after the prefill's GPU), 57 on rack 1, over CX-7 400G
    racks = decode_group(128, {"node": "gb200-nvl72", "count": 2}).prices
    over_nics = deepep_all_to_all(model, 128, 71, NVLINK5 * 0.82, 50e9 * 0.85, "low_latency")
    assert racks.a2a_s_per_token == pytest.approx(per_token(over_nics))
    assert racks.a2a_s_per_token > 5 * inside.a2a_s_per_token


def test_an_expert_group_of_the_whole_rack_is_priced() -> None:
    """EP72: DeepSeek-R1's 256 experts and 32 redundant ones (EPLB), 4 on each of the rack's
    72 GPUs, every all-to-all row on NVLink; no table measured EP72, so the NVFP4 kernel's
    fit prices the experts (its curves stop at EP64)."""
    cluster = _cluster(_scenario(
        model="deepseek-r1-fp4", enable_expert_parallel=True, data_parallel_size=72,
        engine={"max_model_len": 4096, "num_redundant_experts": 32, "eplb": True}))
    info = cluster.infos[0]
    assert info.data_parallel_size == 72 and info.quantization == "modelopt_fp4"
    group = cluster.instances["colocated"][0]
    prices = group.lockstep.price_steps.cost_model.prices
    assert prices.a2a_s_per_token > 0 and prices.gather_s_per_token == 0.0
    assert prices.expert_imbalance == EXPERT_IMBALANCE_EPLB
    model = load_model("deepseek-r1-fp4")
    pricing = expert_pricing(model, load_gpu("gb200"), 72, True, model.quantization)
    assert pricing is not None and pricing.format == "nvfp4" and pricing.curve is None


def test_a_kv_handoff_inside_the_rack_stays_on_nvlink(tmp_path: Path) -> None:
    data = _scenario(layout={"kind": "disaggregated", "pools": [
        {"name": "prefill", "role": "prefill", "tensor_parallel_size": 4},
        {"name": "decode", "role": "decode", "tensor_parallel_size": 4}]})
    path = write_scenario(tmp_path, data)
    code, output = run_cli("simulate", str(path), "--out", str(tmp_path / "out"))
    assert code == 0, output
    with (tmp_path / "out" / "transfers.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert rows and all(">node0/nvswitch>" in row["path"] for row in rows)
    # the prefill instance's tray (GPUs 0-3) to the decode instance's (GPUs 4-7)
    assert {row["source"] for row in rows} == {"+".join(f"node0/gpu{i}" for i in range(4))}
    assert {row["destination"] for row in rows} == {
        "+".join(f"node0/gpu{i}" for i in range(4, 8))}


@pytest.mark.parametrize(("fields", "message"), [
    # beyond the domain: a TP group, an expert-parallel group
    ({"model": "deepseek-r1", "tensor_parallel_size": 128},
     "tensor_parallel_size: 128 is more than 72: tensor parallelism stays inside one NVLink"),
    ({"model": "deepseek-r1", "enable_expert_parallel": True, "layout": {
        "kind": "colocated", "pools": [{"name": "main", "data_parallel_size": 128}]}},
     "layout.pools[0].data_parallel_size: 128 ranks x tensor_parallel_size 1 = 128 GPUs, "
     "more than the topology's 72 gb200 GPUs"),
    # more instances than the rack holds
    ({"tensor_parallel_size": 8, "layout": {"kind": "colocated", "pools": [
        {"name": "main", "instances": 10}]}},
     "layout.pools.main: not enough free gb200 GPUs: instance 10 of 10 needs 8 on one node"),
    # a model too large for the GPUs the rack gives it
    ({"model": "deepseek-r1", "tensor_parallel_size": 2},
     "engine: deepseek-r1 does not fit on gb200 at tensor_parallel_size 2"),
])
def test_the_rack_refuses_what_it_cannot_hold_in_one_line(tmp_path: Path, fields: dict,
                                                          message: str) -> None:
    assert _refusal(tmp_path, _scenario(**fields)).startswith(message)
