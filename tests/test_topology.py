"""Topologies: the shipped files, the schema's errors, paths, TP-group links, placement, and a
node type times a count."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from clustersim.catalog import load_gpu, load_model
from clustersim.cluster import LinkView, Topology, shipped_topologies
from clustersim.cluster.topology_spec import TopologySpec, parse_topology, replicate_node
from clustersim.cost.roofline import BatchShape, CostModel
from clustersim.errors import ClusterSimError, ConfigError, InputError
from clustersim.output import (
    summarize_run,
    write_requests_csv,
    write_steps_csv,
    write_transfers_csv,
)
from clustersim.scenario import parse_scenario
from clustersim.scenario.layout import ReplicatedNode
from clustersim.sim import run_scenario

ROOT = Path(__file__).resolve().parents[1]
GB = 1e9


def link(bw: float, efficiency: float = 1.0, latency_us: float = 0.0) -> dict[str, Any]:
    return {"bw_gb_per_s_per_dir": bw, "efficiency": efficiency, "latency_us": latency_us,
            "source": "test"}


def node(name: str, **overrides: Any) -> dict[str, Any]:
    """A 4 x H100 NVSwitch server with one NIC per GPU."""
    base: dict[str, Any] = {
        "name": name,
        "gpus": {"type": "h100-sxm", "count": 4},
        "pcie_link": "pcie",
        "gpu_fabric": {"kind": "nvswitch", "link": "nvlink"},
        "nics": {"count": 4, "link": "nic"},
    }
    base.update(overrides)
    return base


def topology_data(**overrides: Any) -> dict[str, Any]:
    """Two ``node()`` servers on one switch; keyword arguments replace top-level fields."""
    base: dict[str, Any] = {
        "name": "test",
        "links": {"nvlink": link(400, 0.5, 1), "pcie": link(60, 0.5, 2), "nic": link(50, 0.8, 3)},
        "nodes": [node("a"), node("b")],
        "switches": [{"name": "sw", "connects": ["a", "b"]}],
    }
    base.update(overrides)
    return base


def errors_of(data: dict[str, Any]) -> list[str]:
    with pytest.raises(ClusterSimError) as info:
        Topology.from_data(data)
    return getattr(info.value, "lines", [str(info.value)])


# ------------------------------------------------------------ shipped files
EXPECTED = {
    "dgx-h100": (8, "h100-sxm"),
    "dgx-h100-x2": (16, "h100-sxm"),
    "hgx-h200": (8, "h200"),
    "a100-8x": (8, "a100-80gb-sxm"),
    "a100-4node-25g": (32, "a100-80gb-sxm"),
    "rtx4090-pcie-box": (8, "rtx4090"),
    "hgx-b200": (8, "b200"),
    "hgx-b300": (8, "b300"),
    "gb200-nvl72": (72, "gb200"),
    "gb300-nvl72": (72, "gb300"),
}


def test_shipped_topologies_are_listed():
    assert shipped_topologies() == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_shipped_topology_loads(name):
    topology = Topology.load(name)
    num_gpus, gpu_type = EXPECTED[name]
    assert topology.name == name
    assert len(topology.gpu_ids()) == num_gpus
    assert {topology.gpu_type(g) for g in topology.gpu_ids()} == {gpu_type}
    for key, spec in topology.spec.links.items():
        assert spec.source.strip(), key
    # every directed edge has its reverse, with the same capacity (full duplex)
    for u, v, attrs in topology.graph.edges(data=True):
        back = topology.graph.edges[v, u]
        assert back["bytes_per_s"] == attrs["bytes_per_s"]
        assert attrs["link_id"] == f"{u}>{v}"
        assert attrs["bytes_per_s"] == attrs["raw_bytes_per_s"] * attrs["efficiency"]


def test_shipped_files_agree_on_shared_links():
    seen: dict[str, Any] = {}
    for name in shipped_topologies():
        for key, spec in Topology.load(name).spec.links.items():
            assert seen.setdefault(key, spec) == spec, (name, key)


def test_shipped_files_are_package_data():
    package_data = (ROOT / "pyproject.toml").read_text().split("[tool.setuptools.package-data]")
    assert '"clustersim.cluster" = ["topologies/*.yaml"]' in package_data[1].split("\n[")[0]
    folder = ROOT / "clustersim" / "cluster" / "topologies"
    assert sorted(p.stem for p in folder.glob("*.yaml")) == shipped_topologies()


def test_gpu_ids_run_node_by_node():
    topology = Topology.load("dgx-h100-x2")
    assert topology.gpu_ids()[:2] == ["node0/gpu0", "node0/gpu1"]
    assert topology.gpu_ids()[8] == "node1/gpu0"
    assert topology.node_of("node1/gpu3") == "node1"
    assert topology.node_names() == ["node0", "node1"]
    with pytest.raises(KeyError):
        topology.gpu_type("node0/nic0")


# ------------------------------------------------------------------ paths
def test_dgx_intra_node_path_is_nvlink_through_the_switch():
    topology = Topology.load("dgx-h100")
    assert topology.path("node0/gpu0", "node0/gpu5") == [
        ("node0/gpu0", "node0/nvswitch"), ("node0/nvswitch", "node0/gpu5")]
    view = topology.path_view("node0/gpu0", "node0/gpu5")
    assert view == LinkView(450 * GB * 0.82, 10e-6, ("nvlink4",))


def test_dgx_inter_node_path_goes_through_each_gpus_nic_and_the_leaf():
    topology = Topology.load("dgx-h100-x2")
    assert topology.path_label("node0/gpu2", "node1/gpu5") == (
        "node0/gpu2>node0/nic2>leaf0>node1/nic5>node1/gpu5")
    view = topology.path_view("node0/gpu2", "node1/gpu5")
    assert view.bytes_per_s == 50 * GB * 0.85  # the NIC is the bottleneck, not PCIe gen5
    assert view.latency_s == pytest.approx(5e-6 + 2 * 1.25e-6 + 5e-6, rel=1e-12)
    assert view.kinds == ("pcie_gen5_x16", "cx7_ndr_400g")


def test_a100_gpu_pairs_share_a_nic():
    graph = Topology.load("a100-8x").graph
    nics = [[v for v in graph.successors(f"node0/gpu{i}") if "nic" in v] for i in range(8)]
    assert nics == [[f"node0/nic{i // 2}"] for i in range(8)]


def test_tcp_path_latency_and_bandwidth():
    topology = Topology.load("a100-4node-25g")
    view = topology.path_view("node0/gpu3", "node2/gpu5")
    assert topology.path_label("node0/gpu3", "node2/gpu5") == (
        "node0/gpu3>node0/nic0>tor0>node2/nic0>node2/gpu5")
    assert view.bytes_per_s == pytest.approx(3.125 * GB * 0.85)
    assert view.latency_s == pytest.approx(610e-6, rel=1e-12)


def test_pcie_box_peers_cross_the_pcie_switch():
    topology = Topology.load("rtx4090-pcie-box")
    assert topology.path_label("node0/gpu1", "node0/gpu6") == "node0/gpu1>node0/pcie>node0/gpu6"


def test_gpus_never_forward_traffic():
    topology = Topology.load("a100-4node-25g")
    for src, dst in [("node0/gpu7", "node3/gpu1"), ("node1/gpu0", "node1/gpu7")]:
        inner = [v for _, v in topology.path(src, dst)[:-1]]
        assert all(topology.graph.nodes[v]["role"] != "gpu" for v in inner)


def test_a_gpu_to_itself_is_local():
    topology = Topology.load("dgx-h100")
    assert topology.path("node0/gpu1", "node0/gpu1") == []
    assert topology.path_view("node0/gpu1", "node0/gpu1") == LinkView(math.inf, 0.0, ())


def test_spine_tier_routes_between_leaves():
    data = topology_data(
        nodes=[node("a"), node("b"), node("c")],
        links={**topology_data()["links"], "uplink": link(100, 1.0, 1)},
        switches=[
            {"name": "leaf0", "connects": ["a", "b"]},
            {"name": "leaf1", "connects": ["c"]},
            {"name": "spine", "connects": ["leaf0", "leaf1"], "link": "uplink"},
        ],
    )
    topology = Topology.from_data(data)
    assert topology.path_label("a/gpu0", "c/gpu0") == (
        "a/gpu0>a/nic0>leaf0>spine>leaf1>c/nic0>c/gpu0")
    assert topology.path_label("a/gpu0", "b/gpu1") == "a/gpu0>a/nic0>leaf0>b/nic1>b/gpu1"


# ------------------------------------------------------------ TP groups
def test_tp_group_link_dgx_is_nvlink():
    view = Topology.load("dgx-h100").tp_group_link(["node0/gpu0", "node0/gpu1"])
    # the numbers of the datasheet GPU catalog (gpus.yaml nvlink4, allreduce_latency_s)
    assert view == LinkView(450 * GB * 0.82, 10e-6, ("nvlink4",))


def test_tp_group_link_pcie_box_is_pcie():
    view = Topology.load("rtx4090-pcie-box").tp_group_link([f"node0/gpu{i}" for i in range(4)])
    assert view.kinds == ("pcie_gen4_x16",)
    assert view.bytes_per_s == pytest.approx(31.5 * GB * 0.83)


def test_tp_group_link_of_one_gpu_is_local():
    view = Topology.load("dgx-h100").tp_group_link(["node0/gpu3"])
    assert view == LinkView(math.inf, 0.0, ())


def test_bridged_pairs_are_nvlink_for_two_and_pcie_for_four():
    data = topology_data(
        nodes=[node("a", gpus={"type": "h100-pcie", "count": 4},
                    gpu_fabric={"kind": "nvlink_bridge_pairs", "link": "nvlink"}, nics=None)],
        switches=[],
    )
    topology = Topology.from_data(data)
    assert topology.tp_group_link(["a/gpu2", "a/gpu3"]).kinds == ("nvlink",)
    assert topology.tp_group_link(["a/gpu2", "a/gpu3"]).bytes_per_s == 200 * GB
    four = topology.tp_group_link([f"a/gpu{i}" for i in range(4)])
    assert four.bytes_per_s == 30 * GB and "pcie" in four.kinds


def test_tp_link_hook_makes_a_pcie_box_pay_more_communication_than_a_dgx():
    model = load_model("llama-3.1-8b")
    batch = BatchShape.from_chunks([(1024, 0, True)] + [(1, 1000, True)] * 32)  # 1,056 tokens
    costs, gather_speed = {}, {}
    for name in ("dgx-h100", "rtx4090-pcie-box"):
        topology = Topology.load(name)
        group = topology.gpu_ids()[:2]
        view = topology.tp_group_link(group)
        gpu = load_gpu(topology.gpu_type(group[0]))
        gather_speed[name] = gpu.collective("all_gather", 2)[1]  # measured, relative to NCCL AR
        costs[name] = CostModel(
            model, gpu, 2, tp_link_bytes_per_s=view.bytes_per_s, tp_link_latency_s=view.latency_s
        ).step_time(batch).communication_s
    # 2 all-reduces x 32 layers + the embedding's, each: latency + ring 2(n-1)/n = 1 x 1,056
    # tokens x 4,096 x 2 B; the logits all-gather of the 33 sampled rows: latency + the other
    # rank's half of the 128,256-token vocabulary, 2 B each, at the all-gather's speed. The
    # 8.65 MB all-reduces are past vLLM's 8 MiB custom all-reduce: NCCL's, on the topology's link
    allreduces, message_bytes = 2 * 32 + 1, 1056 * 4096 * 2
    logits_bytes = 33 * 128256 // 2 * 2
    for name, bytes_per_s in (("dgx-h100", 369e9), ("rtx4090-pcie-box", 31.5e9 * 0.83)):
        assert costs[name] == pytest.approx(
            allreduces * (10e-6 + message_bytes / bytes_per_s) + 10e-6
            + logits_bytes / (bytes_per_s * gather_speed[name])
        )
    assert costs["rtx4090-pcie-box"] > 10 * costs["dgx-h100"]


def test_tp_link_hook_rejects_nonsense():
    with pytest.raises(ValueError):
        CostModel(load_model("llama-3.1-8b"), load_gpu("h100-sxm"), 2, tp_link_bytes_per_s=0.0)


# -------------------------------------------------------------- placement
def test_place_fills_nodes_in_order_with_aligned_groups():
    topology = Topology.load("dgx-h100-x2")
    placed = topology.place([
        ("solo", "h100-sxm", 1, 1, None),
        ("pair", "h100-sxm", 2, 2, None),
        ("decode", "h100-sxm", 4, 2, ["node1"]),
    ])
    assert placed["solo"] == [["node0/gpu0"]]
    assert placed["pair"] == [["node0/gpu2", "node0/gpu3"], ["node0/gpu4", "node0/gpu5"]]
    assert placed["decode"] == [[f"node1/gpu{i}" for i in range(4)],
                                [f"node1/gpu{i}" for i in range(4, 8)]]


def test_place_falls_back_to_unaligned_free_gpus():
    topology = Topology.load("dgx-h100")
    placed = topology.place([("a", "h100-sxm", 1, 1, None), ("b", "h100-sxm", 4, 1, None),
                             ("c", "h100-sxm", 3, 1, None)])
    assert placed["b"] == [[f"node0/gpu{i}" for i in range(4, 8)]]
    assert placed["c"] == [["node0/gpu1", "node0/gpu2", "node0/gpu3"]]  # no free 0-2 or 3-5


def test_place_starts_from_an_empty_cluster_each_call():
    topology = Topology.load("dgx-h100")
    groups = [("p", "h100-sxm", 8, 1, None)]
    assert topology.place(groups) == topology.place(groups)


@pytest.mark.parametrize(
    ("groups", "message"),
    [
        ([("p", "h100-sxm", 4, 5, None)],
         "pools.p: not enough free h100-sxm GPUs: instance 3 of 5 needs 4 on one node; "
         "free: node0 0"),
        ([("p", "h100-sxm", 16, 1, None)], "pools.p: a TP group of 16 GPUs would span nodes"),
        ([("p", "h100-sxm", 1, 1, ["node7"])], "pools.p: unknown node 'node7'; nodes: node0"),
        ([("p", "a100-80gb-sxm", 1, 1, None)], "pools.p: no a100-80gb-sxm GPUs on nodes node0"),
        ([("p", "h100-sxm", 1, 1, None), ("p", "h100-sxm", 1, 1, None)],
         "pools.p: duplicate pool name"),
    ],
)
def test_place_errors_are_config_errors_on_the_pool(groups, message):
    topology = Topology.load("dgx-h100")
    with pytest.raises(ConfigError) as info:
        topology.place(groups)
    assert str(info.value).startswith(message)


def test_place_error_reports_free_gpus_when_fragmented():
    topology = Topology.load("dgx-h100-x2")
    with pytest.raises(ConfigError) as info:
        topology.place([("a", "h100-sxm", 6, 2, None), ("b", "h100-sxm", 4, 1, None)])
    assert str(info.value) == (
        "pools.b: not enough free h100-sxm GPUs: instance 1 of 1 needs 4 on one node; "
        "free: node0 2, node1 2"
    )


# ----------------------------------------------------------- schema errors
@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda d: d["nodes"][0].update(gpu="x"),
         "topology.nodes[0].gpu: unknown field; did you mean gpus?"),
        (lambda d: d["nodes"][0]["gpus"].update(type="h1000"),
         "topology.nodes[0].gpus.type: unknown GPU 'h1000'"),
        (lambda d: d["nodes"][0]["gpus"].update(count=0),
         "topology.nodes[0].gpus.count: Input should be greater than 0"),
        (lambda d: d["nodes"][1].update(pcie_link="pcie9"),
         "topology.nodes[1].pcie_link: unknown link 'pcie9'; defined: nvlink, pcie, nic"),
        (lambda d: d["nodes"][0]["gpu_fabric"].update(kind="mesh"),
         "topology.nodes[0].gpu_fabric.kind: unknown kind 'mesh'; choose one of nvswitch, pcie, "
         "nvlink_bridge_pairs"),
        (lambda d: d["nodes"][0]["nics"].update(count=5),
         "topology.nodes[0].nics.count: 5 NICs for 4 GPUs"),
        (lambda d: d["links"]["nic"].update(efficiency=1.5),
         "topology.links.nic.efficiency: Input should be less than or equal to 1"),
        (lambda d: d["links"]["nic"].pop("source"), "topology.links.nic.source: Field required"),
        (lambda d: d["nodes"][1].update(name="a"), "topology.nodes[1].name: duplicate name 'a'"),
        (lambda d: d["nodes"][1].update(name="b/1"), "topology.nodes[1].name: String should match"),
        (lambda d: d["switches"][0]["connects"].append("z"),
         "topology.switches[0].connects[2]: unknown node or switch 'z'"),
        (lambda d: d["nodes"][1].update(nics=None),
         "topology.switches[0].connects[1]: node 'b' has no nics to connect"),
        (lambda d: d["switches"].append({"name": "sw2", "connects": ["sw"]}),
         "topology.switches[1].link: needed to connect switch 'sw'"),
        (lambda d: d.update(switches=[]), "topology.switches: node 'b' cannot reach node 'a'"),
    ],
)
def test_bad_fields_are_path_message_lines(change, expected):
    data = topology_data()
    change(data)
    lines = errors_of(data)
    assert any(line.startswith(expected) for line in lines), lines


def test_load_by_path_relative_to_base_dir(tmp_path):
    (tmp_path / "mine.yaml").write_text(yaml.safe_dump(topology_data(name="mine")))
    assert Topology.load("mine.yaml", base_dir=tmp_path).name == "mine"
    assert Topology.load(str(tmp_path / "mine.yaml")).name == "mine"


def test_load_unknown_name_lists_shipped_ones():
    with pytest.raises(ConfigError) as info:
        Topology.load("dgx-h200")
    assert str(info.value).startswith("topology: 'dgx-h200' is neither a shipped topology (a100")


def test_load_bad_yaml_is_an_input_error_with_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nnodes: [\n")
    with pytest.raises(InputError) as info:
        Topology.load(str(bad))
    assert str(info.value).startswith(f"{bad}:")
    bad.write_text("- a\n- b\n")
    with pytest.raises(InputError, match="a topology must be a YAML mapping"):
        Topology.load(str(bad))


# ------------------------------------------------------- a node type x a count
def one_node_spec(**overrides: Any) -> TopologySpec:
    """One ``node("box")`` server and no switches, as a validated spec."""
    return parse_topology(topology_data(nodes=[node("box")], switches=[], **overrides))


def test_replicate_node_wires_every_nic_to_one_leaf():
    template = one_node_spec()
    spec = replicate_node(template, 3)
    assert spec.name == "3 x test"
    assert [n.name for n in spec.nodes] == ["node0", "node1", "node2"]
    assert [n.model_copy(update={"name": "box"}) for n in spec.nodes] == template.nodes * 3
    assert spec.links == template.links
    assert [s.model_dump() for s in spec.switches] == [
        {"name": "leaf0", "connects": ["node0", "node1", "node2"], "link": None}]
    topology = Topology(spec)
    assert len(topology.gpu_ids()) == 12
    assert topology.path_label("node0/gpu1", "node2/gpu3") == (
        "node0/gpu1>node0/nic1>leaf0>node2/nic3>node2/gpu3")


def test_replicate_node_once_is_the_template_renamed():
    spec = one_node_spec()
    assert replicate_node(spec, 1) == spec.model_copy(update={"name": "1 x test"})
    assert replicate_node(spec, 1, name="mine").nodes[0].name == "box"
    assert replicate_node(spec, 2, name="pair").name == "pair"


@pytest.mark.parametrize(
    ("spec", "count", "expected"),
    [
        (one_node_spec(), 0, "topology.count: 0 nodes: give 1 to 1024"),
        (one_node_spec(), 1025, "topology.count: 1025 nodes: give 1 to 1024"),
        (parse_topology(topology_data()), 2,
         "topology.node: 'test' has 2 nodes (a, b): a node type is a topology with one node"),
        (parse_topology(topology_data(nodes=[node("box")],
                                      switches=[{"name": "sw", "connects": ["box"]}])), 2,
         "topology.node: 'test' has switches (sw): a node type has none"),
        (parse_topology(topology_data(nodes=[node("box", nics=None)], switches=[])), 2,
         "topology.count: 2 nodes of 'test', whose node has no nics, cannot be networked"),
    ],
)
def test_replicate_node_refuses_what_it_cannot_copy(spec, count, expected):
    with pytest.raises(ConfigError) as info:
        replicate_node(spec, count)
    assert str(info.value).startswith(expected)


def test_a_pcie_box_without_nics_stays_one_node():
    box = Topology.load(ReplicatedNode(node="rtx4090-pcie-box", count=1))
    assert box.name == "1 x rtx4090-pcie-box" and len(box.gpu_ids()) == 8
    with pytest.raises(ConfigError, match=r"^topology.count: 2 nodes of 'rtx4090-pcie-box'"):
        Topology.load(ReplicatedNode(node="rtx4090-pcie-box", count=2))


def test_two_dgx_nodes_are_the_hand_written_dgx_h100_x2():
    by_hand = Topology.load("dgx-h100-x2")
    built = Topology.load(ReplicatedNode(node="dgx-h100", count=2))
    assert built.name == "2 x dgx-h100"
    assert built.spec.model_dump(exclude={"name", "description"}) == by_hand.spec.model_dump(
        exclude={"name", "description"})
    assert list(built.graph.nodes(data=True)) == list(by_hand.graph.nodes(data=True))
    assert list(built.graph.edges(data=True)) == list(by_hand.graph.edges(data=True))
    assert built.capacities() == by_hand.capacities()
    gpus = by_hand.gpu_ids()
    assert built.gpu_ids() == gpus
    for src in gpus:
        for dst in gpus:
            assert built.path(src, dst) == by_hand.path(src, dst)
            assert built.path_view(src, dst) == by_hand.path_view(src, dst)


def test_the_node_file_is_relative_to_the_scenario_folder(tmp_path):
    (tmp_path / "box.yaml").write_text(yaml.safe_dump(topology_data(
        name="box", nodes=[node("box")], switches=[])))
    topology = Topology.load(ReplicatedNode(node="box.yaml", count=4), base_dir=tmp_path)
    assert topology.name == "4 x box" and topology.node_names()[-1] == "node3"
    with pytest.raises(ConfigError, match=r"^topology.node: 'box.yaml' is neither a shipped"):
        Topology.load(ReplicatedNode(node="box.yaml", count=4))


def test_a_64_gpu_fleet_needs_no_file():
    fleet = Topology.load(ReplicatedNode(node="dgx-h100", count=8))
    assert fleet.name == "8 x dgx-h100" and len(fleet.gpu_ids()) == 64
    assert fleet.path_view("node0/gpu0", "node7/gpu0").bytes_per_s == 50 * GB * 0.85


def test_a_node_count_scenario_simulates_as_dgx_h100_x2_does(tmp_path):
    path = ROOT / "scenarios" / "pd_azure_conv_dgx.yaml"
    data = yaml.safe_load(path.read_text())
    assert data["topology"] == "dgx-h100-x2"
    files = {}
    for label, topology in (("by_hand", "dgx-h100-x2"),
                            ("built", {"node": "dgx-h100", "count": 2})):
        result = run_scenario(parse_scenario({**data, "topology": topology}))
        out = tmp_path / label
        out.mkdir()
        write_requests_csv(out / "requests.csv", result.requests)
        write_steps_csv(out / "steps.csv", result.steps)
        write_transfers_csv(out / "transfers.csv", result.transfers)
        summary = summarize_run(result).to_json()
        summary.pop("topology")
        files[label] = {f.name: f.read_bytes() for f in sorted(out.iterdir())}, summary
    (hand_files, hand_summary), (built_files, built_summary) = files["by_hand"], files["built"]
    assert built_summary == hand_summary
    assert built_files == hand_files
    assert hand_summary["num_transfers"] > 0 and b"leaf0" in hand_files["transfers.csv"]


def test_a_mixed_fleet_puts_every_node_type_on_one_leaf():
    from clustersim.cluster.topology import load_spec

    fleet = Topology.load([ReplicatedNode(node="dgx-h100", count=1),
                           ReplicatedNode(node="a100-8x", count=2)])
    assert fleet.name == "1 x dgx-h100 + 2 x a100-8x"
    assert [fleet.gpu_type(f"node{i}/gpu0") for i in range(3)] == [
        "h100-sxm", "a100-80gb-sxm", "a100-80gb-sxm"]
    # H100 -> A100 crosses both NICs; the A100 node's 200G HDR NIC is the bottleneck
    view = fleet.path_view("node0/gpu0", "node1/gpu0")
    a100 = load_spec("a100-8x").links["cx6_hdr_200g"]
    assert view.bytes_per_s == pytest.approx(a100.bw_gb_per_s_per_dir * 1e9 * a100.efficiency)
    assert any(edge[1] == "leaf0" for edge in fleet.path("node0/gpu0", "node1/gpu0"))


def test_a_link_key_two_node_types_define_differently_is_renamed():
    from clustersim.cluster.topology import load_spec
    from clustersim.cluster.topology_spec import combine_nodes

    dgx = load_spec("dgx-h100")
    data = dgx.model_dump()
    data["name"] = "slow-dgx"
    data["links"]["cx7_ndr_400g"]["bw_gb_per_s_per_dir"] = 25.0
    slow = parse_topology(data)
    spec = combine_nodes([(dgx, 1), (slow, 1)])
    assert spec.links["cx7_ndr_400g"].bw_gb_per_s_per_dir == 50
    assert spec.links["slow-dgx.cx7_ndr_400g"].bw_gb_per_s_per_dir == 25.0
    assert spec.nodes[1].nics.link == "slow-dgx.cx7_ndr_400g"
    assert spec.nodes[0].nics.link == "cx7_ndr_400g"


def test_a_tp_group_on_its_nodes_nvlink_keeps_the_gpus_own_all_reduce():
    """On a DGX H100 a TP4 group's NVLink is as fast as the catalog's: the engine keeps the
    H100's own prices, its measured all-reduce curve among them, and steps as without a
    topology; only a slower placed link replaces them (the PCIe box above)."""
    data = {
        "name": "tp4", "model": "llama-3.1-70b", "gpu": "h100-sxm", "tensor_parallel_size": 4,
        "engine": {"max_model_len": 4096},
        "workload": {"kind": "explicit", "requests": [
            {"id": f"r{i}", "arrival_s": 0.01 * i, "prompt_tokens": 2000, "output_tokens": 8}
            for i in range(4)]},
    }
    runs = {}
    for topology in (None, "dgx-h100"):
        scenario = parse_scenario(data if topology is None else {**data, "topology": topology})
        runs[topology] = run_scenario(scenario, record_steps=True)
    plain, placed = runs[None], runs["dgx-h100"]
    assert len(plain.steps) > 8
    assert [(s.start_s, s.end_s) for s in placed.steps] == [
        (s.start_s, s.end_s) for s in plain.steps]
