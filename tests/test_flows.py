"""KV transfer flows: max-min fair sharing by hand, then handoff times on the shipped topologies.

The KV of a 1,000-token Llama-3.1-8B prompt is 131,072,000 bytes
(32 layers x 2 (K, V) x 8 KV heads x 128 x 2 bytes = 131,072 per token).
"""

from __future__ import annotations

from typing import Any

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from clustersim.catalog import load_model
from clustersim.cluster import FlowNetwork, Topology
from clustersim.cluster.flows import (
    FluidState,
    drain_alone,
    max_min_rates,
    pair_ranks,
    split_bytes,
)

GB = 1e9
KV_BYTES = load_model("llama-3.1-8b").kv_bytes_per_token(1) * 1000
NDR = 50 * GB * 0.85  # CX-7 400 Gb/s x efficiency
ETH_25G = 3.125 * GB * 0.85
NDR_LATENCY_S = 5e-6 + 2 * 1.25e-6 + 5e-6  # PCIe hop, NIC -> leaf -> NIC, PCIe hop
ETH_LATENCY_S = 5e-6 + 2 * 300e-6 + 5e-6


def network(name: str = "dgx-h100-x2") -> tuple[simpy.Environment, FlowNetwork]:
    env = simpy.Environment()
    return env, FlowNetwork(env, Topology.load(name))


def run(env: simpy.Environment, *events: simpy.Event) -> list[Any]:
    env.run()
    return [event.value for event in events]


def test_kv_bytes_of_the_worked_example():
    assert KV_BYTES == 131_072_000


# ------------------------------------------------------------ max-min fair
def test_max_min_textbook_three_flows_two_bottlenecks():
    #   f0 crosses A and B, f1 only A, f2 only B; A = 1, B = 2
    #   A is tighter (1/2 < 2/2): f0 = f1 = 0.5; B has 1.5 left for f2
    rates = max_min_rates([["A", "B"], ["A"], ["B"]], {"A": 1.0, "B": 2.0})
    assert rates == [0.5, 0.5, 1.5]


def test_max_min_single_bottleneck_shares_equally_and_empty_paths_are_free():
    assert max_min_rates([["A"], ["A"], ["A"], []], {"A": 3.0}) == [1.0, 1.0, 1.0, float("inf")]


def test_drain_alone_replans_when_a_flow_ends():
    # two flows share A (10 B/s); the short one ends at 1 s, the long one then runs alone
    ends = drain_alone([(0.0, [("u", "v")], 5), (0.0, [("u", "v")], 15)], {("u", "v"): 10.0})
    assert ends == [pytest.approx(1.0), pytest.approx(1.0 + 10 / 10)]


def hand_built() -> Topology:
    """Nodes a (2 GPUs, one 10 GB/s NIC), b (15 GB/s NIC), c and d (100 GB/s) on one switch."""
    def link(bw: float) -> dict[str, Any]:
        return {"bw_gb_per_s_per_dir": bw, "efficiency": 1.0, "latency_us": 0, "source": "test"}

    def node(name: str, nic: str, count: int = 1) -> dict[str, Any]:
        return {"name": name, "gpus": {"type": "h100-sxm", "count": count}, "pcie_link": "fast",
                "gpu_fabric": {"kind": "nvswitch", "link": "fast"},
                "nics": {"count": 1, "link": nic}}

    return Topology.from_data({
        "name": "hand-built",
        "links": {"ten": link(10), "fifteen": link(15), "fast": link(100)},
        "nodes": [node("a", "ten", 2), node("b", "fifteen"), node("c", "fast"), node("d", "fast")],
        "switches": [{"name": "sw", "connects": ["a", "b", "c", "d"]}],
    })


def test_max_min_on_a_hand_built_graph():
    # f1 a/gpu0 -> b and f2 a/gpu1 -> c share a's uplink (10); f1 and f3 d -> b share b's
    # downlink (15). a's uplink is tighter (5 < 7.5): f1 = f2 = 5 GB/s, f3 gets 15 - 5 = 10.
    env = simpy.Environment()
    net = FlowNetwork(env, hand_built())
    f1 = net.transfer("f1", ["a/gpu0"], ["b/gpu0"], 10**9)
    f2 = net.transfer("f2", ["a/gpu1"], ["c/gpu0"], 10**9)
    f3 = net.transfer("f3", ["d/gpu0"], ["b/gpu0"], 10**9)
    r1, r2, r3 = run(env, f1, f2, f3)
    assert (r1.end_s, r2.end_s, r3.end_s) == (pytest.approx(0.2), pytest.approx(0.2),
                                              pytest.approx(0.1))
    assert r3.ideal_s == pytest.approx(1 / 15)  # alone: b's downlink
    utilization = net.link_utilization(0.2)
    assert utilization["a/nic0>sw"] == pytest.approx(1.0)
    assert utilization["sw>b/nic0"] == pytest.approx(2 / (15 * 0.2))
    assert utilization["b/nic0>sw"] == 0.0  # the other direction is independent


def test_rates_are_replanned_when_a_flow_ends():
    # f1 and f3 share b's downlink at 7.5 GB/s; f3 (0.75 GB) ends at 0.1 s, then f1 runs at
    # a's uplink rate (10) for its last 0.25 GB: 0.125 s
    env = simpy.Environment()
    net = FlowNetwork(env, hand_built())
    f1 = net.transfer("f1", ["a/gpu0"], ["b/gpu0"], 10**9)
    f3 = net.transfer("f3", ["d/gpu0"], ["b/gpu0"], 750_000_000)
    r1, r3 = run(env, f1, f3)
    assert r3.end_s == pytest.approx(0.1)
    assert r1.end_s == pytest.approx(0.125)
    assert r1.queue_s == pytest.approx(0.125 - 0.1)


# ------------------------------------------------------ handoffs on DGX pods
def test_idle_400g_handoff_is_latency_plus_bytes_over_effective_bandwidth():
    env, net = network()
    (record,) = run(env, net.transfer("r0", ["node0/gpu0"], ["node1/gpu0"], KV_BYTES))
    expected_s = NDR_LATENCY_S + KV_BYTES / NDR  # 12.5 us + 3.084047 ms = 3.096547 ms
    assert record.end_s == pytest.approx(expected_s, rel=1e-12)
    assert record.end_s == pytest.approx(3.0965470588e-3, rel=1e-10)
    assert record.ideal_s == pytest.approx(expected_s, rel=1e-12)
    assert record.queue_s == pytest.approx(0.0, abs=1e-15)
    assert record.start_s == pytest.approx(NDR_LATENCY_S)
    assert record.path == "node0/gpu0>node0/nic0>leaf0>node1/nic0>node1/gpu0"
    assert (record.src, record.dst, record.bytes) == (("node0/gpu0",), ("node1/gpu0",), KV_BYTES)
    assert net.records == [record]


def test_two_handoffs_sharing_a_nic_take_about_twice_as_long():
    env, net = network()
    alone = NDR_LATENCY_S + KV_BYTES / NDR
    # both leave node0/gpu0 through node0/nic0's uplink
    a = net.transfer("a", ["node0/gpu0"], ["node1/gpu0"], KV_BYTES)
    b = net.transfer("b", ["node0/gpu0"], ["node1/gpu1"], KV_BYTES)
    for record in run(env, a, b):
        assert record.end_s / alone == pytest.approx(2.0, rel=0.02)
        assert record.end_s == pytest.approx(NDR_LATENCY_S + 2 * KV_BYTES / NDR)
        assert record.queue_s == pytest.approx(KV_BYTES / NDR)


def test_handoffs_on_separate_nics_do_not_interfere():
    env, net = network()
    a = net.transfer("a", ["node0/gpu0"], ["node1/gpu0"], KV_BYTES)
    b = net.transfer("b", ["node0/gpu1"], ["node1/gpu1"], KV_BYTES)
    for record in run(env, a, b):
        assert record.queue_s == pytest.approx(0.0, abs=1e-15)


def test_25g_tcp_path_is_about_16_times_slower_than_400g():
    env, net = network("a100-4node-25g")
    (slow,) = run(env, net.transfer("r0", ["node0/gpu0"], ["node1/gpu0"], KV_BYTES))
    assert slow.end_s == pytest.approx(ETH_LATENCY_S + KV_BYTES / ETH_25G, rel=1e-12)  # 49.95 ms
    fast = NDR_LATENCY_S + KV_BYTES / NDR
    assert slow.end_s / fast == pytest.approx(16, rel=0.03)


def test_intra_node_nvlink_handoff():
    env, net = network("dgx-h100")
    (record,) = run(env, net.transfer("r0", ["node0/gpu0"], ["node0/gpu4"], KV_BYTES))
    assert record.end_s == pytest.approx(10e-6 + KV_BYTES / (450 * GB * 0.82), rel=1e-12)
    assert record.path == "node0/gpu0>node0/nvswitch>node0/gpu4"


# ------------------------------------------------------- heterogeneous TP
def test_pair_ranks_and_split_bytes():
    assert pair_ranks(["s0", "s1", "s2", "s3"], ["d0", "d1"]) == [
        ("s0", "d0"), ("s1", "d0"), ("s2", "d1"), ("s3", "d1")]
    assert pair_ranks(["s0"], ["d0", "d1"]) == [("s0", "d0"), ("s0", "d1")]
    assert pair_ranks(["s0", "s1"], ["d0", "d1"]) == [("s0", "d0"), ("s1", "d1")]
    assert split_bytes(10, 3) == [4, 3, 3]
    assert sum(split_bytes(KV_BYTES, 7)) == KV_BYTES


def carried_bytes(net: FlowNetwork, span_s: float) -> dict[str, float]:
    capacity = {a["link_id"]: a["bytes_per_s"] for _, _, a in net.topology.graph.edges(data=True)}
    return {
        link_id: u * capacity[link_id] * span_s
        for link_id, u in net.link_utilization(span_s).items()
        if u
    }


def test_tp2_to_tp1_moves_half_from_each_rank():
    env, net = network()
    (record,) = run(env, net.transfer("r0", ["node0/gpu0", "node0/gpu1"], ["node1/gpu0"], KV_BYTES))
    carried = carried_bytes(net, 1.0)
    assert carried["node0/nic0>leaf0"] == pytest.approx(KV_BYTES / 2)
    assert carried["node0/nic1>leaf0"] == pytest.approx(KV_BYTES / 2)
    assert carried["leaf0>node1/nic0"] == pytest.approx(KV_BYTES)
    assert len([k for k in carried if k.endswith(">leaf0")]) == 2  # two sub-flows
    # both squeeze through node1/nic0: as slow as one rank sending everything
    assert record.end_s == pytest.approx(NDR_LATENCY_S + KV_BYTES / NDR)
    assert record.queue_s == pytest.approx(0.0, abs=1e-15)


def test_tp1_to_tp2_fans_out_from_one_nic():
    env, net = network()
    (record,) = run(env, net.transfer("r0", ["node0/gpu0"], ["node1/gpu0", "node1/gpu1"], KV_BYTES))
    carried = carried_bytes(net, 1.0)
    assert carried["node0/nic0>leaf0"] == pytest.approx(KV_BYTES)
    assert carried["leaf0>node1/nic0"] == pytest.approx(KV_BYTES / 2)
    assert carried["leaf0>node1/nic1"] == pytest.approx(KV_BYTES / 2)
    assert record.end_s == pytest.approx(NDR_LATENCY_S + KV_BYTES / NDR)


def test_tp2_to_tp2_uses_two_nics_in_parallel():
    env, net = network()
    src, dst = ["node0/gpu0", "node0/gpu1"], ["node1/gpu0", "node1/gpu1"]
    (record,) = run(env, net.transfer("r0", src, dst, KV_BYTES))
    assert record.end_s == pytest.approx(NDR_LATENCY_S + KV_BYTES / 2 / NDR)


def test_stage_moves_run_at_once_each_between_its_own_groups():
    # two stages of TP2 (gpu0-1, gpu2-3) to two of TP1 (gpu0, gpu1): stage 0 moves 3/5 of the
    # KV, stage 1 2/5; one record of the whole handoff, done when the larger move is
    env, net = network()
    src = ["node0/gpu0", "node0/gpu1", "node0/gpu2", "node0/gpu3"]
    dst = ["node1/gpu0", "node1/gpu1"]
    first, second = 3 * KV_BYTES // 5, 2 * KV_BYTES // 5
    (record,) = run(env, net.transfer_stages(
        "r0", src, dst, [(src[:2], dst[:1], first), (src[2:], dst[1:], second)]))
    assert (record.src, record.dst, record.bytes) == (tuple(src), tuple(dst), first + second)
    carried = carried_bytes(net, 1.0)
    assert carried == pytest.approx({
        **{f"node0/gpu{k}>node0/nic{k}": b for k, b in enumerate(
            [first / 2, first / 2, second / 2, second / 2])},
        **{f"node0/nic{k}>leaf0": b for k, b in enumerate(
            [first / 2, first / 2, second / 2, second / 2])},
        "leaf0>node1/nic0": first, "leaf0>node1/nic1": second,
        "node1/nic0>node1/gpu0": first, "node1/nic1>node1/gpu1": second})
    assert record.end_s == pytest.approx(NDR_LATENCY_S + first / NDR)
    with pytest.raises(ValueError):
        net.transfer_stages("r1", src, dst, [])
    with pytest.raises(ValueError):
        net.transfer_stages("r1", src, dst, [(src[:2], [], 1)])
    with pytest.raises(ValueError):
        net.transfer_stages("r1", src, dst, [(src[:2], dst[:1], -1)])


# --------------------------------------------------------------- edge cases
def test_same_gpus_or_no_bytes_cost_latency_only():
    env, net = network()
    same = net.transfer("same", ["node0/gpu0"], ["node0/gpu0"], KV_BYTES, extra_latency_s=1e-3)
    empty = net.transfer("empty", ["node0/gpu0"], ["node1/gpu0"], 0, extra_latency_s=1e-3)
    r_same, r_empty = run(env, same, empty)
    assert r_same.end_s == pytest.approx(1e-3)
    assert r_same.path == "node0/gpu0"
    assert r_empty.end_s == pytest.approx(1e-3 + NDR_LATENCY_S)
    assert sum(net.link_utilization(1.0).values()) == 0.0


def test_a_one_gpu_handoff_times_exactly_as_the_general_path():
    # one GPU to one GPU takes a shortcut (no pairing, splitting, latency groups): its
    # ideal time must be the fluid replay's to the last bit, its record the same
    env, net = network()
    (record,) = run(env, net.transfer("r0", ["node0/gpu0"], ["node1/gpu0"], KV_BYTES, 1e-4))
    edges, latency_s, label = net._route("node0/gpu0", "node1/gpu0")
    start_s = latency_s + 1e-4
    assert record.ideal_s == drain_alone([(start_s, edges, KV_BYTES)], net._capacity)[0]
    assert (record.start_s, record.path, record.requested_s) == (start_s, label, 0.0)
    assert record.end_s == record.ideal_s  # alone on idle links


def test_extra_latency_is_added_before_the_bytes_flow():
    env, net = network()
    (record,) = run(env, net.transfer("r0", ["node0/gpu0"], ["node1/gpu0"], KV_BYTES, 0.5))
    assert record.start_s == pytest.approx(0.5 + NDR_LATENCY_S)
    assert record.end_s == pytest.approx(0.5 + NDR_LATENCY_S + KV_BYTES / NDR)


def test_bad_arguments_raise():
    env, net = network()
    with pytest.raises(ValueError):
        net.transfer("r0", ["node0/gpu0"], ["node1/gpu0"], -1)
    with pytest.raises(ValueError):
        net.transfer("r0", [], ["node1/gpu0"], 1)
    with pytest.raises(KeyError):
        net.transfer("r0", ["node9/gpu0"], ["node1/gpu0"], 1)


def test_link_utilization_mid_transfer_counts_bytes_moved_so_far():
    env, net = network()
    net.transfer("r0", ["node0/gpu0"], ["node1/gpu0"], KV_BYTES)
    half_s = NDR_LATENCY_S + KV_BYTES / NDR / 2
    env.run(until=half_s)
    assert net.link_utilization(half_s)["node0/nic0>leaf0"] == pytest.approx(
        (KV_BYTES / 2) / (NDR * half_s)
    )
    env.run()
    span_s = net.records[0].end_s
    assert net.link_utilization(span_s)["node0/nic0>leaf0"] == pytest.approx(
        KV_BYTES / (NDR * span_s)
    )
    with pytest.raises(ValueError):
        net.link_utilization(-1.0)


def test_link_utilization_of_an_idle_network_over_no_time_is_zero():
    env, net = network()
    assert set(net.link_utilization(0.0).values()) == {0.0}


# ---------------------------------------------------------------- invariants
transfers = st.lists(
    st.tuples(
        st.floats(0.0, 0.01),                             # request time
        st.lists(st.integers(0, 15), min_size=1, max_size=4, unique=True),  # src GPUs
        st.lists(st.integers(0, 15), min_size=1, max_size=4, unique=True),  # dst GPUs
        st.integers(0, 10**9),                            # bytes
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=40, deadline=None)
@given(transfers)
def test_flows_conserve_bytes_and_never_exceed_a_link(specs):
    topology = Topology.load("dgx-h100-x2")
    gpus = topology.gpu_ids()
    env = simpy.Environment()
    net = FlowNetwork(env, topology)
    events = []

    def later(at_s, src, dst, num_bytes, tag):
        yield env.timeout(at_s)
        record = yield net.transfer(tag, src, dst, num_bytes)
        events.append(record)

    expected: dict[str, float] = {}
    for n, (at_s, src, dst, num_bytes) in enumerate(specs):
        src_ids, dst_ids = [gpus[i] for i in src], [gpus[i] for i in dst]
        env.process(later(at_s, src_ids, dst_ids, num_bytes, f"t{n}"))
        pairs = pair_ranks(src_ids, dst_ids)
        for (s, d), size in zip(pairs, split_bytes(num_bytes, len(pairs)), strict=True):
            for u, v in topology.path(s, d):
                link_id = topology.graph.edges[u, v]["link_id"]
                expected[link_id] = expected.get(link_id, 0.0) + size
    env.run()
    assert len(events) == len(specs) == len(net.records)
    span_s = max(r.end_s for r in events)
    for record in events:
        assert record.queue_s >= -1e-12
        assert record.end_s >= record.start_s >= record.requested_s
    for link_id, carried in carried_bytes(net, span_s).items():
        assert carried == pytest.approx(expected.get(link_id, 0.0), rel=1e-9)
    capacity = {a["link_id"]: a["bytes_per_s"] for _, _, a in topology.graph.edges(data=True)}
    for link_id, carried in expected.items():
        # a link never moves more than capacity x the time anything was in flight
        assert carried <= capacity[link_id] * span_s * (1 + 1e-9)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(0, 5), min_size=1, max_size=4, unique=True),
                min_size=2, max_size=6),
       st.lists(st.sampled_from([1.0, 2.0, 5.0]), min_size=6, max_size=6))
def test_components_of_one_shape_share_their_rates_and_get_their_own(paths, capacities):
    """Rates are kept by a component's shape (edges numbered by first appearance, and their
    capacities): the same flows on other links of the same capacities reuse them, and every
    rate is max_min_rates' of the real paths, to the bit."""
    offset = 100  # the second copy's edges: the same shape on other links
    capacity = {e: capacities[e] for e in range(6)} | {
        e + offset: capacities[e] for e in range(6)}
    state = FluidState(capacity)
    for key, edges in enumerate(paths):
        state.add(key, edges, 1e6)
    state.replan()
    kept = len(state._rates)
    for key, edges in enumerate(paths):
        state.add(len(paths) + key, [e + offset for e in edges], 1e6)
    state.replan()
    expected = max_min_rates([*paths, *[[e + offset for e in p] for p in paths]], capacity)
    assert [d.rate for d in state.active.values()] == expected
    assert len(state._rates) == kept  # the copy's components were shapes already seen


def test_one_change_rerates_each_component_it_touches_on_its_own():
    """A handoff's sub-flows on their ranks' own links (two copies of one shape) start
    together: each connected component is filled on its own, so one filling serves both
    copies, and the rates are max_min_rates' over all of them."""
    capacity = {e: float(1 + e % 4) for e in range(8)}  # rank 1 cabled as rank 0
    ranks = [[[0, 1], [1, 2], [3]], [[4, 5], [5, 6], [7]]]  # rank 1: rank 0's shape
    state = FluidState(capacity)
    for key, edges in enumerate(path for rank in ranks for path in rank):
        state.add(key, edges, 1e6)
    state.replan()
    assert [d.rate for d in state.active.values()] == max_min_rates(
        [path for rank in ranks for path in rank], capacity)
    # one filling, of one rank's two flows that share link 1 (lone flows take the narrowest)
    assert [len(shape) for shape, _ in state._rates] == [2]
