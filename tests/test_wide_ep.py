"""Wide expert parallelism: data-parallel groups across nodes, DeepEP's all-to-all priced over
the topology's NVLink and NIC links, expert load imbalance (docs/scenarios.md, Wide expert
parallelism)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from clustersim.catalog import load_gpu, load_model
from clustersim.catalog.specs import ModelSpec
from clustersim.cluster.build import EXPERT_IMBALANCE_EPLB, EXPERT_IMBALANCE_NO_EPLB
from clustersim.cluster.system import Cluster
from clustersim.cluster.topology import Topology, load_spec
from clustersim.cluster.topology_spec import replicate_node
from clustersim.cost.collectives import (
    FP8_DISPATCH_BYTES,
    AllToAll,
    deepep_call_s,
    nodes_reached,
)
from clustersim.cost.roofline import BatchShape, CostModel
from clustersim.engine.clock import Clock
from clustersim.scenario import parse_scenario
from tests.helpers import run_cli, write_scenario

SHIPPED = Path(__file__).resolve().parent.parent / "scenarios" / "deepseek_r1_sglang_96xh100.yaml"


def _scenario(dp: int, nodes: int = 2, topology: Any = None, **engine: Any) -> dict[str, Any]:
    """A Qwen3-30B-A3B decode pool of ``dp`` data-parallel ranks with EP, beside one prefill
    instance on the last node, on ``nodes`` DGX H100s."""
    return {
        "name": "wide-ep", "model": "qwen3-30b-a3b", "gpu": "h100-sxm",
        "enable_expert_parallel": True,
        "topology": topology or {"node": "dgx-h100", "count": nodes},
        "engine": {"max_model_len": 8192, "block_size": 64, **engine},
        "layout": {"kind": "disaggregated", "pools": [
            {"name": "prefill", "role": "prefill", "enable_expert_parallel": False,
             "nodes": [f"node{nodes - 1}"]},
            {"name": "decode", "role": "decode", "data_parallel_size": dp,
             "nodes": [f"node{i}" for i in range(nodes - 1)]},
        ]},
        "workload": {"kind": "poisson", "rate_per_s": 10.0, "num_requests": 4,
                     "prompt_tokens": 200, "output_tokens": 4},
    }


def _cluster(data: dict[str, Any], base_dir: Path | None = None) -> Cluster:
    scenario = parse_scenario(data)
    if base_dir is not None:
        scenario._base_dir = base_dir
    return Cluster(Clock(), scenario, load_model(scenario.model), np.random.default_rng(0),
                   on_done=lambda r: None)


def _decode_prices(cluster: Cluster) -> Any:
    """The prices of the first decode group's ranks (their lockstep pricer's)."""
    group = next(g for g in cluster.rank_groups if g.role == "decode")
    assert group.lockstep is not None
    return group.lockstep.price_steps.cost_model.prices


def _comm(prices: Any, batch: int = 64) -> float:
    """The communication seconds of a pure-decode step of ``batch`` requests on every rank."""
    return prices.decode_batch_parts(batch, prices.dp * batch)[2]


def test_all_to_all_grows_when_the_group_crosses_a_node() -> None:
    # EP8 inside node0 (all-gather inside the node) against EP16 over node0 and node1, the
    # same 64 tokens per rank
    inside = _decode_prices(_cluster(_scenario(8, nodes=2)))
    across = _decode_prices(_cluster(_scenario(16, nodes=3)))
    assert inside.a2a_s_per_token == 0.0 and inside.gather_s_per_token > 0
    assert across.a2a_s_per_token > 0
    assert _comm(across) > 2 * _comm(inside)
    # the all-to-all alone: in one node nothing crosses; over two, the cross-node rows go over
    # a 42.5 GB/s NIC instead of NVLink
    nvlink, nic = 450e9 * 0.82, 50e9 * 0.85

    def a2a(gpus: int, mode: str) -> AllToAll:
        return AllToAll(gpus, 8, nvlink, nic, dispatch_bytes=FP8_DISPATCH_BYTES,
                        combine_bytes=2, mode=mode)

    assert a2a(8, "normal").cross_node_fraction == 0.0
    assert a2a(16, "normal").cross_node_fraction == 0.5
    for mode, factor in (("low_latency", 4.0), ("normal", 1.2)):
        one, two = a2a(8, mode), a2a(16, mode)
        assert two.layer_s(64, 8, 7168) - two.dispatch_s - two.combine_s > factor * (
            one.layer_s(64, 8, 7168) - one.dispatch_s - one.combine_s)
    # low-latency kernels send each of the 4 cross-node rows; normal ones each token once per
    # remote node (1 - 2^-8 of a row on average over two nodes)
    assert a2a(16, "low_latency").nic_rows(8) == 4.0
    assert a2a(16, "normal").nic_rows(8) == pytest.approx(1 - 0.5 ** 8)


def test_grouped_routing_reaches_fewer_nodes() -> None:
    """DeepSeek-V3's router takes a token's 8 experts from 4 of 8 groups of 32: over 8 nodes
    (one group each) a token reaches the nodes of its 4 groups, 3.15 other nodes on average
    against 4.59 for 8 experts anywhere; over 2 nodes nearly every token reaches the other
    node either way. Decode's low-latency kernels send rows per expert, unchanged."""
    model = load_model("deepseek-v3")
    assert model.expert_group_limit == (8, 4)
    assert load_model("qwen3-235b-a22b").expert_group_limit is None
    assert nodes_reached(64, 8, 8, 1, 1) == pytest.approx(7 * (1 - (7 / 8) ** 8))
    assert nodes_reached(64, 8, 8, 8, 8) == pytest.approx(7 * (1 - (7 / 8) ** 8))
    # 8 nodes, a group on each: 4 groups reached unless all 8 experts miss one, (3/4)^8
    assert nodes_reached(64, 8, 8, 8, 4) == pytest.approx(4 * (1 - 0.75 ** 8) * 7 / 8)
    for gpus in (16, 24, 32, 64, 72, 128):
        assert nodes_reached(gpus, 8, 8, 8, 4) <= nodes_reached(gpus, 8, 8, 1, 1) + 1e-12
    assert nodes_reached(16, 8, 8, 8, 4) > 0.95

    def a2a(mode: str, groups: tuple[int, int] | None) -> AllToAll:
        return AllToAll(64, 8, 369e9, 42.5e9, dispatch_bytes=FP8_DISPATCH_BYTES,
                        combine_bytes=2, mode=mode, expert_groups=groups)

    assert a2a("normal", (8, 4)).nic_rows(8) < 0.7 * a2a("normal", None).nic_rows(8)
    assert a2a("low_latency", (8, 4)).nic_rows(8) == a2a("low_latency", None).nic_rows(8)


def test_expert_groups_must_fit_the_experts() -> None:
    base = load_model("deepseek-v3").model_dump()
    for change, message in (({"num_expert_groups": 7}, "must divide"),
                            ({"topk_expert_groups": 9}, "must be in"),
                            ({"num_expert_groups": 64, "topk_expert_groups": 1}, "cannot hold")):
        with pytest.raises(ValueError, match=message):
            ModelSpec(**{**base, **change})


def test_all_to_all_follows_the_topologys_nic(tmp_path: Path) -> None:
    text = (Path(__file__).resolve().parent.parent / "clustersim" / "cluster" / "topologies"
            / "dgx-h100.yaml").read_text()
    assert "bw_gb_per_s_per_dir: 50 " in text
    (tmp_path / "slow.yaml").write_text(text.replace("bw_gb_per_s_per_dir: 50 ",
                                                     "bw_gb_per_s_per_dir: 25 "))
    fast = _decode_prices(_cluster(_scenario(16, nodes=3)))
    slow = _decode_prices(_cluster(
        _scenario(16, nodes=3, topology={"node": "slow.yaml", "count": 3}), base_dir=tmp_path))
    # the NIC is the slower side of the overlap, so its per-token part doubles exactly; the
    # per-call latencies stay
    assert slow.a2a_s_per_token == pytest.approx(2 * fast.a2a_s_per_token, rel=1e-12)
    assert slow.a2a_fixed_s == fast.a2a_fixed_s
    # DeepEP's low-latency kernels on the decode side: their fixed cost per call as the H100's
    # moe_a2a table measures it (66.1 + 53.0 us), per MoE layer
    calls = load_gpu("h100-sxm").deepep_calls
    assert calls.low_latency_dispatch_s == pytest.approx(66.12e-6)
    assert fast.a2a_fixed_s == pytest.approx(
        48 * (calls.low_latency_dispatch_s + calls.low_latency_combine_s))  # 48 MoE layers
    # without the table: the cited constants (DeepEP's README, H800 across nodes)
    bare = load_gpu("h100-sxm").model_copy(update={"deepep_calls": None})
    a2a = AllToAll(16, 8, 369e9, 42.5e9, dispatch_bytes=FP8_DISPATCH_BYTES, combine_bytes=2,
                   mode="low_latency")
    assert deepep_call_s(a2a, bare) == (45e-6, 50e-6)
    normal = AllToAll(16, 8, 369e9, 42.5e9, dispatch_bytes=FP8_DISPATCH_BYTES,
                      combine_bytes=2, mode="normal", call_latency_s=3e-6)
    assert deepep_call_s(normal, load_gpu("h200")) == pytest.approx((257.24e-6 + 3e-6,
                                                                      81.56e-6 + 3e-6))


def test_imbalance_scales_the_expert_part() -> None:
    # priced by the fit (the table's curves dropped): the busiest rank's rows scale
    h100 = load_gpu("h100-sxm")
    model, gpu = load_model("deepseek-r1"), h100.model_copy(update={"moe_kernels": tuple(
        k.model_copy(update={"curves": ()}) for k in h100.moe_kernels)})
    a2a = AllToAll(16, 8, 369e9, 42.5e9, dispatch_bytes=FP8_DISPATCH_BYTES, combine_bytes=2,
                   mode="normal")

    def cost(imbalance: float) -> CostModel:
        return CostModel(model, gpu, 1, dp=16, expert_parallel=True, all_to_all=a2a,
                         expert_imbalance=imbalance)

    even, skewed = cost(1.0), cost(1.5)
    assert skewed.prices.a2a_s_per_token == pytest.approx(1.5 * even.prices.a2a_s_per_token)
    tokens = 4096.0  # a prefill chunk: compute-bound experts, whose time follows their rows
    expert = [c.prices.dense_parts(tokens, 0, 16 * tokens) for c in (even, skewed)]
    no_experts = CostModel(model, gpu, 1, dp=16, expert_parallel=True, all_to_all=a2a)
    no_experts.prices.expert_gemms = ()
    base = no_experts.prices.dense_parts(tokens, 0, 16 * tokens)
    even_experts = expert[0][0] + expert[0][1] - base[0] - base[1]
    skewed_experts = expert[1][0] + expert[1][1] - base[0] - base[1]
    assert skewed_experts == pytest.approx(1.5 * even_experts, rel=0.02)
    with pytest.raises(ValueError, match="expert_imbalance"):
        cost(0.9)


def test_a_measured_curve_holds_the_busiest_rank_already() -> None:
    """The table's power-law rows time the busiest expert-parallel rank: the imbalance scales
    the all-to-all's bytes only."""
    model, gpu = load_model("deepseek-r1"), load_gpu("h100-sxm")
    a2a = AllToAll(16, 8, 369e9, 42.5e9, dispatch_bytes=FP8_DISPATCH_BYTES, combine_bytes=2,
                   mode="normal")
    even, skewed = (CostModel(model, gpu, 1, dp=16, expert_parallel=True, all_to_all=a2a,
                              expert_imbalance=imbalance) for imbalance in (1.0, 1.5))
    assert even.experts is not None and even.experts.curve is not None
    assert (even.experts.moe_tp, even.experts.moe_ep) == (1, 16)
    batch = BatchShape.from_chunks([(4096, 0, True)])
    experts = [[op.time_s for op in c.operators(batch, 16 * 4096)
                if op.name.startswith("experts: fused MoE")] for c in (even, skewed)]
    assert experts[0] == experts[1] and len(experts[0]) == 1
    assert skewed.prices.a2a_s_per_token == pytest.approx(1.5 * even.prices.a2a_s_per_token)


def test_imbalance_defaults_eplb_and_override() -> None:
    assert _decode_prices(_cluster(_scenario(16, nodes=3))).expert_imbalance == \
        EXPERT_IMBALANCE_NO_EPLB
    assert _decode_prices(_cluster(_scenario(16, nodes=3, eplb=True))).expert_imbalance == \
        EXPERT_IMBALANCE_EPLB
    assert _decode_prices(_cluster(_scenario(16, nodes=3, expert_imbalance=1.2))
                          ).expert_imbalance == 1.2
    # inside one node nothing changes unless asked
    assert _decode_prices(_cluster(_scenario(8, nodes=2))).expert_imbalance == 1.0


def test_a_group_larger_than_a_node_spans_nodes_rank_by_rank() -> None:
    topology = Topology.built(replicate_node(load_spec("dgx-h100"), 4))
    placed = topology.place([("wide", "h100-sxm", 24, 1, None, 2),
                             ("tp8", "h100-sxm", 8, 1, None)])
    (group,) = placed["wide"]
    assert len(group) == 24 and len(set(group)) == 24
    ranks = [group[i:i + 2] for i in range(0, 24, 2)]
    assert all(len({topology.node_of(g) for g in rank}) == 1 for rank in ranks)
    assert {topology.node_of(g) for g in group} == {"node0", "node1", "node2"}
    assert {topology.node_of(g) for g in placed["tp8"][0]} == {"node3"}
    # a group that fits a node is placed as before, in one node
    assert topology.place([("a", "h100-sxm", 8, 1, None, 1)]) == topology.place(
        [("a", "h100-sxm", 8, 1, None)])
    # the shipped layout: 24 prefill ranks on nodes 0-2, 72 decode ranks on 3-11
    cluster = _cluster(parse_scenario_file(SHIPPED))
    prefill = [r.gpus[0] for r in cluster.instances["prefill"]]
    decode = [r.gpus[0] for r in cluster.instances["decode"]]
    assert len(prefill) == 24 and len(decode) == 72
    assert {g.split("/")[0] for g in prefill} == {"node0", "node1", "node2"}
    assert {g.split("/")[0] for g in decode} == {f"node{i}" for i in range(3, 12)}


def parse_scenario_file(path: Path) -> dict[str, Any]:
    import yaml

    return yaml.safe_load(path.read_text())


@pytest.mark.parametrize(("change", "expected"), [
    ({"data_parallel_size": 24}, "layout.pools[1].enable_expert_parallel: 128 experts do not "
     "split evenly over data_parallel_size x tensor_parallel_size = 24 GPUs"),
    ({"data_parallel_size": 32}, "layout.pools[1].data_parallel_size: 32 ranks x "
     "tensor_parallel_size 1 = 32 GPUs, more than the topology's 24 h100-sxm GPUs"),
])
def test_bad_groups_end_in_one_line(tmp_path: Path, change: dict[str, Any],
                                    expected: str) -> None:
    data = _scenario(16, nodes=3)
    data["layout"]["pools"][1].pop("nodes")
    data["layout"]["pools"][1].update(change)
    data["layout"]["pools"][1]["enable_expert_parallel"] = True
    path = write_scenario(tmp_path, data)
    code, output = run_cli("simulate", str(path), "--out", str(tmp_path / "out"))
    assert code == 2, output
    lines = output.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], output


def test_redundant_experts_split_ep72(tmp_path: Path) -> None:
    data = _scenario(16, nodes=3, num_redundant_experts=16)
    data["layout"]["pools"][1]["data_parallel_size"] = 12
    # 128 + 16 = 144 split over 12 (as 256 + 32 over the shipped decode pool's 72)
    cluster = _cluster(data)
    assert len(cluster.instances["decode"]) == 12


def test_shipped_scenario_runs(tmp_path: Path) -> None:
    data = parse_scenario_file(SHIPPED)
    data["workload"]["num_requests"] = 200
    path = write_scenario(tmp_path, data)
    code, output = run_cli("simulate", str(path), "--out", str(tmp_path / "out"))
    assert code == 0, output
    assert "200 finished" in output
