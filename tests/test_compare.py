"""``clustersim compare``: both sides built from the GPUs the scenario has (``counterparts``),
its table read from the runs' summary.json, on the shipped scenarios; and the keep-or-reject
rule for a split: keep a disaggregated layout only if throughput, p95 and the handoff all agree
(the worked case is golden_examples.md's S7: 100 -> 126 req/s, p95 180 -> 150 ms, a handoff of
8 ms kept and of 18 ms rejected against a 10 ms budget)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from clustersim.plan.compare import split_verdict
from clustersim.plan.counterparts import counterparts
from clustersim.scenario import Scenario, load_scenario
from clustersim.scenario.faults import FaultsSpec
from clustersim.scenario.layout import ReplicatedNode
from tests.helpers import run_cli, write_scenario


def test_s7_keep_with_a_10ms_budget_reject_when_the_handoff_is_18ms():
    keep = split_verdict(100.0, 126.0, {"latency": 0.180}, {"latency": 0.150}, 0.008, 0.010)
    assert keep.keep_split
    reject = split_verdict(100.0, 126.0, {"latency": 0.180}, {"latency": 0.150}, 0.018, 0.010)
    assert not reject.keep_split
    assert reject.against == ("KV handoff p95 18.0 ms, over its 10.0 ms budget",)
    assert reject.reasons[-1] == reject.against[0]
    assert keep.reasons == ("throughput rises 100.00 -> 126.00 (+26.0%)",
                            "p95 latency falls 180.0 -> 150.0 ms (-16.7%)",
                            "KV handoff p95 8.0 ms, within its 10.0 ms budget")


def test_s7_no_single_metric_decides():
    slower = split_verdict(100.0, 126.0, {"latency": 0.150}, {"latency": 0.180}, 0.001, 0.010)
    assert not slower.keep_split
    assert slower.against == ("p95 latency rises 150.0 -> 180.0 ms (+20.0%): worsens",)
    flat = split_verdict(100.0, 100.0, {"latency": 0.180}, {"latency": 0.150}, 0.001, 0.010)
    assert not flat.keep_split
    assert flat.against == ("throughput holds 100.00 -> 100.00 (+0.0%, within 2%)",)


# ------------------------------------------------------------- compare on scenarios
ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted(p.stem for p in (ROOT / "scenarios").glob("*.yaml"))


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1e3:,.1f}"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.2f}"


def expected_table(co: dict, sp: dict) -> dict[str, tuple[str, str]]:
    """The table compare must print, read off the two runs' summary.json files alone."""
    rows: dict[str, tuple[str, str]] = {}

    def both(label, cell):
        rows[label] = (cell(co), cell(sp))

    both("GPUs", lambda s: str(s["num_gpus"]))
    both("requests finished", lambda s: f"{s['num_finished']:,} of {s['num_requests']:,}")
    for key, name in (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("itl_s", "ITL"),
                      ("e2e_s", "E2E")):
        for p in ("p50", "p95", "p99"):
            both(f"{name} {p} (ms)", lambda s, k=key, p=p: _ms(s[k][p]))
    both("req/s, first to last arrival", lambda s: _rate(s["throughput"]["requests_per_s"]))
    both("makespan (s)", lambda s: f"{s['makespan_s']:,.2f}")
    both("req/s over the makespan", lambda s: _rate(s["over_makespan"]["requests_per_s"]))
    if "slo" in co:
        both("good req/s over the makespan",
             lambda s: _rate(s["over_makespan"]["good_requests_per_s"]))
        both("SLO attainment", lambda s: f"{s['slo']['attainment']:.1%}")
    both("output tok/s over the makespan",
         lambda s: f"{s['over_makespan']['output_tokens_per_s']:,.1f}")
    both("preemptions", lambda s: f"{s['num_preemptions']:,}")
    rows["handoff p50 (ms)"] = ("-", _ms(sp["handoff_s"]["p50"]))
    rows["handoff p95 (ms)"] = ("-", _ms(sp["handoff_s"]["p95"]))
    rows["handoff GB"] = ("-", f"{sp['handoff_bytes'] / 1e9:,.2f}")
    links = sp.get("link_utilization") or {}
    busiest = next(iter(links.items()), None)
    rows["busiest link"] = ("-", "-" if busiest is None else f"{busiest[0]} {busiest[1]:.1%}")
    return rows


def printed_table(output: str) -> dict[str, tuple[str, str]]:
    """The rows of compare's table: label, then two right-aligned figures."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines)
                 if line.split() == ["colocated", "disaggregated"])
    end = next(i for i, line in enumerate(lines) if line.startswith("verdict: "))
    rows = {}
    for line in lines[start + 1:end]:
        label, left, right = re.split(r"\s{2,}", line.strip())
        rows[label] = (left, right)
    return rows


def compare_matches_its_files(tmp_path: Path, name: str) -> str:
    """Run compare on a shipped scenario: it exits 0 and every figure of its table, and
    the verdict's throughput, is what the two summary.json files hold."""
    out = tmp_path / name
    code, output = run_cli("compare", str(ROOT / "scenarios" / f"{name}.yaml"),
                           "--out", str(out))
    assert code == 0, output
    co, sp = (json.loads((out / side / "summary.json").read_text())
              for side in ("colocated", "disaggregated"))
    assert printed_table(output) == expected_table(co, sp)
    key = "good_requests_per_s" if "slo" in co else "requests_per_s"
    rule = f"{_rate(co['over_makespan'][key])} -> {_rate(sp['over_makespan'][key])}"
    assert re.search(rf"^  - throughput \(.+\) (rises|holds|falls) {re.escape(rule)} ",
                     output, re.M), output
    assert co["num_gpus"] == sp["num_gpus"]
    assert "both sides run on the same" in output
    return output


def test_compare_the_quickstart_on_two_gpus_of_its_server(tmp_path):
    """No layout, no topology: one instance's GPUs cannot split, so both sides get two
    RTX 4090s in the GPU's shipped server, and the output says so."""
    output = compare_matches_its_files(tmp_path, "quickstart")
    assert "a split needs two (one prefill, one decode): both sides get two" in output
    assert "both sides run on 1 x rtx4090-pcie-box" in output
    assert "main: 2 x rtx4090 TP1" in output
    assert "prefill (prefill): 1 x rtx4090 TP1" in output


def test_compare_keeps_data_and_expert_parallelism_per_pool(tmp_path):
    output = compare_matches_its_files(tmp_path, "moe_dp_ep_h100")
    assert "main: 2 x data-parallel 4 ranks of h100-sxm TP1" in output
    for pool in ("prefill (prefill)", "decode (decode)"):
        assert f"{pool}: 1 x data-parallel 4 ranks of h100-sxm TP1" in output


def test_compare_moves_an_instance_failure_to_the_instance_on_its_gpus(tmp_path):
    output = compare_matches_its_files(tmp_path, "pd_decode_failure")
    assert ("failure of decode-1 at 7 s: on the colocated side colocated_decode-1, the "
            "instance on the same GPUs (node1/gpu1)") in output
    summary = json.loads((tmp_path / "pd_decode_failure" / "colocated" / "summary.json")
                         .read_text())
    assert summary["faults"]["num_lost"] > 0  # the failure ran on the colocated side too


@pytest.mark.slow
@pytest.mark.parametrize("name", SHIPPED)
def test_compare_runs_on_every_shipped_scenario(tmp_path, name):
    output = compare_matches_its_files(tmp_path, name)
    if name == "deepseek-v3-h100-pp2":  # both sides keep TP8 x PP2, on twice the servers
        assert "main: 2 x h100-sxm TP8 x PP2" in output
        for pool in ("prefill (prefill)", "decode (decode)"):
            assert f"{pool}: 1 x h100-sxm TP8 x PP2" in output


# ------------------------------------------------------------- counterparts, pure
def shipped(name: str) -> Scenario:
    return load_scenario(ROOT / "scenarios" / f"{name}.yaml")


def test_a_split_joins_pool_by_pool_keeping_shape_engine_and_gpus():
    """The LMSYS layout's colocated side: each pool's data-parallel group and engine on its
    own nodes, routed by the split's decode router."""
    scenario = shipped("deepseek_r1_sglang_96xh100")
    sides = counterparts(scenario)
    assert sides.disaggregated is scenario
    layout = sides.colocated.layout
    assert layout.kind == "colocated" and layout.router == scenario.layout.decode_router
    for joined, pool in zip(layout.pools, scenario.layout.pools, strict=True):
        assert joined.role == "colocated" and joined.name == f"colocated_{pool.name}"
        assert (joined.data_parallel_size, joined.nodes, joined.engine) == (
            pool.data_parallel_size, pool.nodes, pool.engine)
    assert sides.colocated.enable_expert_parallel
    assert "both sides run on the same 96 x h100-sxm" in "\n".join(sides.notes)


def test_alike_pools_join_into_one_only_where_it_lands_on_the_same_gpus():
    wide = counterparts(shipped("deepseek_r1_wide_ep_plan")).colocated.layout.pools
    assert [(p.name, p.instances, p.data_parallel_size) for p in wide] == [
        ("colocated", 2, 16)]
    # two pools of one node each would first-fit onto node0 as one pool: kept apart
    pd = counterparts(shipped("pd_azure_conv_dgx")).colocated.layout.pools
    assert [(p.name, p.nodes) for p in pd] == [("colocated_prefill", ["node0"]),
                                               ("colocated_decode", ["node1"])]


def test_no_layout_on_a_topology_splits_every_instance_it_holds():
    sides = counterparts(shipped("llama70b_h100_16"))  # TP4 on 2 x DGX H100
    assert [(p.name, p.instances) for p in sides.colocated.layout.pools] == [("main", 4)]
    assert [(p.name, p.role, p.instances) for p in sides.disaggregated.layout.pools] == [
        ("prefill", "prefill", 2), ("decode", "decode", 2)]
    assert sides.disaggregated.tensor_parallel_size == 4


def test_an_instance_failure_of_a_colocated_layout_moves_to_the_split_instance():
    scenario = shipped("llama70b_dgx_64").model_copy(update={"faults": FaultsSpec(
        events=[{"kind": "instance", "name": "main-5", "at_s": 1.0}])})
    sides = counterparts(scenario)
    assert sides.colocated.faults.events[0].name == "main-5"
    assert sides.disaggregated.faults.events[0].name == "decode-1"
    assert any("main-5 at 1 s: on the disaggregated side decode-1" in n for n in sides.notes)


def test_a_failure_of_one_data_parallel_rank_fails_its_group_and_its_counterpart():
    """One rank's failure takes its whole group down in any pool, so compare fails the group
    and, on the other side, the instance on the group's GPUs."""
    scenario = shipped("deepseek_r1_wide_ep_plan").model_copy(update={"faults": FaultsSpec(
        events=[{"kind": "instance", "name": "decode-0.dp3", "at_s": 1.0}])})
    sides = counterparts(scenario)
    assert sides.disaggregated.faults.events[0].name == "decode-0.dp3"  # (its own, as given)
    assert sides.colocated.faults.events[0].name == "colocated-1"
    assert any("decode-0.dp3 at 1 s: a rank of decode-0, which fails whole" in n
               for n in sides.notes)


def test_a_topology_of_servers_that_hold_one_instance_grows_by_whole_servers():
    """DeepSeek-V3 at TP8 x PP2 fills dgx-h100-x2, two DGX H100 on one leaf: a split needs
    two instances, so both sides run on four of the same server, keeping the stages."""
    sides = counterparts(shipped("deepseek-v3-h100-pp2"))
    for side in (sides.colocated, sides.disaggregated):
        assert side.topology == ReplicatedNode(node="dgx-h100", count=4)
        assert {(p.tensor_parallel_size or side.tensor_parallel_size,
                 p.pipeline_parallel_size or side.pipeline_parallel_size)
                for p in side.layout.pools} == {(8, 2)}
    assert [(p.role, p.instances) for p in sides.colocated.layout.pools] == [("colocated", 2)]
    assert [(p.role, p.instances) for p in sides.disaggregated.layout.pools] == [
        ("prefill", 1), ("decode", 1)]
    notes = "\n".join(sides.notes)
    assert ("topology: dgx-h100-x2 is 2 x dgx-h100 and holds one instance, and a split needs "
            "two: both sides run on 4 x dgx-h100") in notes
    assert "both sides run on the same 32 x h100-sxm: node0/gpu0-7, node1/gpu0-7" in notes
    assert "pipeline stages: the handoff moves each prefill stage's layers" in notes


def test_a_topology_with_room_for_one_instance_cannot_split(tmp_path):
    """A lone server that is not the GPU's networked one (no NICs): nothing to grow."""
    data = yaml.safe_load((ROOT / "scenarios" / "deepseek-v3-h200.yaml").read_text())
    server = yaml.safe_load((ROOT / "clustersim" / "cluster" / "topologies" / "hgx-h200.yaml")
                            .read_text())
    del server["nodes"][0]["nics"]
    write_scenario(tmp_path, {**server, "name": "h200-box"}, "h200-box.yaml")
    path = write_scenario(tmp_path, {**data, "topology": "h200-box.yaml"})
    code, output = run_cli("compare", str(path), "--out", str(tmp_path / "out"))
    assert code == 2
    assert output.startswith(f"{path}: topology: h200-box.yaml holds one instance of 8 x h200 "
                             "(TP8), and a split needs two"), output


def test_holds_rises_and_falls_are_decided_by_one_stated_threshold():
    # a 36 % fall is a fall, never "holds"; a change within the tolerance holds either way
    v = split_verdict(1.0, 1.5, {"tpot_s": 0.0494, "ttft_s": 0.100},
                      {"tpot_s": 0.0314, "ttft_s": 0.104}, 0.005, 0.010, within=0.05,
                      handoff_rate_per_s=12.5)
    assert v.reasons == (
        "throughput rises 1.00 -> 1.50 (+50.0%)",
        "p95 TPOT falls 49.4 -> 31.4 ms (-36.4%)",
        "p95 TTFT holds 100.0 -> 104.0 ms (+4.0%, within 5%)",
        "KV handoff p95 5.0 ms at its operating rate, 12.50 req/s, within its 10.0 ms budget")
    assert v.keep_split and v.against == ()
    # the same 4 % is a worsening under a 2 % threshold, and a 1 % gain in throughput holds
    strict = split_verdict(1.0, 1.01, {"ttft_s": 0.100}, {"ttft_s": 0.104}, 0.005, 0.010,
                           within=0.02)
    assert not strict.keep_split
    assert strict.against == ("throughput holds 1.00 -> 1.01 (+1.0%, within 2%)",
                              "p95 TTFT rises 100.0 -> 104.0 ms (+4.0%): worsens")


def test_a_change_reads_its_word_off_the_threshold():
    from clustersim.plan.change import Change

    assert Change(49.4, 31.4, 0.02).word == "falls"
    assert Change(100.0, 101.9, 0.02).word == "holds"
    assert Change(100.0, 102.1, 0.02).word == "rises"
    assert Change(0.0, 1.0).percent() == "from zero" and Change(0.0, 0.0).word == "holds"
