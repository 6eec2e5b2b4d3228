"""Paths between GPUs: the scoped search and the paths shared between servers of one shape are
the whole-graph search's paths, ties included, on every shipped topology, on fleets of
several sizes and on fabrics where servers carry other servers' traffic."""

from __future__ import annotations

import itertools
import random
from pathlib import Path
from typing import Any

import pytest

from clustersim.cluster import Topology, shipped_topologies
from clustersim.cluster import topology as topology_module
from clustersim.cluster.topology import whole_graph_path
from clustersim.scenario.layout import ReplicatedNode

ROOT = Path(__file__).resolve().parents[1]


def usual_path(topology: Topology, src: str, dst: str) -> list[tuple[str, str]]:
    path = whole_graph_path(topology, src, dst)
    assert path is not None
    return path


def avoiding_path(topology: Topology, src: str, dst: str,
                  down: frozenset[tuple[str, str]]) -> list[tuple[str, str]] | None:
    """``path_avoiding`` by the whole-graph search: the usual path while it is up."""
    usual = usual_path(topology, src, dst)
    return usual if down.isdisjoint(usual) else whole_graph_path(topology, src, dst, down)


def fresh(source: Any) -> Topology:
    """A topology built for this test, with no path searched yet."""
    if isinstance(source, Topology):
        return Topology(source.spec)
    return Topology(Topology.load(source, base_dir=ROOT).spec)


def gpu_pairs(topology: Topology, sample: int | None = None,
              seed: int = 0) -> list[tuple[str, str]]:
    pairs = list(itertools.product(topology.gpu_ids(), repeat=2))
    if sample is not None and sample < len(pairs):
        pairs = random.Random(seed).sample(pairs, sample)
    return pairs


def link(latency_us: float) -> dict[str, Any]:
    return {"bw_gb_per_s_per_dir": 50, "efficiency": 1.0, "latency_us": latency_us,
            "source": "test"}


def server(name: str, nics: int = 2) -> dict[str, Any]:
    return {"name": name, "gpus": {"type": "h100-sxm", "count": 4}, "pcie_link": "pcie",
            "gpu_fabric": {"kind": "nvswitch", "link": "nvlink"},
            "nics": {"count": nics, "link": "nic"}}


def transit_fabric() -> Topology:
    """Servers c and e on both leaves, so a path from a to d crosses one of their NICs at the
    same cost (a tie, which file order breaks) rather than the slow cable between the leaves;
    f on leaf1 alone. A topology file connects a server to one switch only: the second leaf's
    cables to c and e are added to the built graph."""
    topology = Topology.from_data({
        "name": "transit",
        "links": {"nvlink": link(1), "pcie": link(2), "nic": link(1), "slow": link(100)},
        "nodes": [server(n) for n in "abcdef"],
        "switches": [{"name": "leaf0", "connects": ["a", "b", "c", "e"]},
                     {"name": "leaf1", "connects": ["d", "f", "leaf0"], "link": "slow"}],
    })
    for name in "ce":
        for j in range(2):
            topology._cable(f"{name}/nic{j}", "leaf1", "nic")
    topology._index_out_edges()
    topology._index_shapes()
    return topology


SOURCES: list[Any] = [
    *shipped_topologies(),
    *sorted(str(p) for p in (ROOT / "topologies").glob("*.yaml")),
    ReplicatedNode(node="dgx-h100", count=3),
    ReplicatedNode(node="a100-8x", count=3),
    [ReplicatedNode(node="dgx-h100", count=2), ReplicatedNode(node="a100-8x", count=2)],
]


@pytest.mark.parametrize("source", SOURCES, ids=str)
def test_every_gpu_pair_takes_the_whole_graph_searchs_path(source):
    topology = fresh(source)
    for src, dst in gpu_pairs(topology):
        assert topology.path(src, dst) == usual_path(topology, src, dst), (src, dst)


def test_fleets_of_other_sizes_reuse_paths_that_are_the_whole_graph_searchs():
    """Paths kept from one fleet serve fleets of the same server with other counts."""
    for count in (2, 5, 16):
        topology = fresh(ReplicatedNode(node="dgx-h100", count=count))
        for src, dst in gpu_pairs(topology, sample=600, seed=count):
            assert topology.path(src, dst) == usual_path(topology, src, dst), (src, dst)


def test_servers_that_carry_traffic_between_others_keep_file_order_ties():
    topology = transit_fabric()
    for src, dst in gpu_pairs(topology):
        assert topology.path(src, dst) == usual_path(topology, src, dst), (src, dst)
    assert topology.path_label("a/gpu0", "d/gpu0") == (
        "a/gpu0>a/nic0>leaf0>c/nic0>leaf1>d/nic0>d/gpu0")


def test_tied_paths_are_not_shared_between_servers():
    """Over two spines every cross-leaf path ties: none of them is kept for renaming, each
    pair is searched."""
    topology = fresh(str(ROOT / "topologies/dgx-h100-x2-spine.yaml"))
    topology_module._SHARED.clear()
    for src, dst in gpu_pairs(topology):
        topology.path(src, dst)
    shared = list(topology_module._SHARED.values())
    assert shared  # the paths inside one server have no tie
    assert not any(name.startswith(("leaf", "spine")) for path in shared for _, name in path)


@pytest.mark.parametrize("source", [
    "dgx-h100-x2", "a100-4node-25g", str(ROOT / "topologies/dgx-h100-x2-spine.yaml"),
    ReplicatedNode(node="dgx-h100", count=4), "transit"], ids=str)
def test_paths_around_failed_links_are_the_whole_graph_searchs(source):
    topology = transit_fabric() if source == "transit" else fresh(source)
    rng = random.Random(1)
    edges = sorted(topology.graph.edges)
    pairs = gpu_pairs(topology, sample=200, seed=2)
    for _ in range(40):
        cables = rng.sample(edges, rng.randint(1, 3))
        down = frozenset(e for u, v in cables for e in ((u, v), (v, u)) if rng.random() < 0.8
                         or e == (u, v))
        for src, dst in pairs:
            expected = avoiding_path(topology, src, dst, down)
            assert topology.path_avoiding(src, dst, down) == expected, (src, dst, down)
        # the failures change no usual path
        src, dst = pairs[0]
        assert topology.path(src, dst) == usual_path(topology, src, dst)


def test_a_route_is_the_path_its_view_and_its_label_and_is_kept():
    """What the KV flows read of a path (edge numbers in graph order, the view's latency, the
    label) is the path's, and a second ask of the same pair gives the kept route."""
    topology = fresh(ReplicatedNode(node="dgx-h100", count=3))
    numbers = {edge: i for i, edge in enumerate(topology.graph.edges)}
    assert topology.edge_numbers == numbers
    for src, dst in gpu_pairs(topology, sample=200, seed=3):
        route = topology.route(src, dst)
        path = topology.path(src, dst)
        assert route == (tuple(numbers[e] for e in path), topology.path_view(src, dst).latency_s,
                         topology.path_label(src, dst))
        assert topology.route(src, dst) is route
