"""Faults, each class with its smallest example: an instance lost without and with a retry,
a repair, a node, a link with and without another path, a TP group's link, a KV transfer
that fails under each policy; the faults: section's validation; the fault metrics."""

from __future__ import annotations

import copy

import pytest

from clustersim.errors import ClusterSimError
from clustersim.metrics import request_metrics, summarize_run
from clustersim.scenario import parse_scenario
from clustersim.sim import RunResult, run_scenario
from tests.helpers import explicit, run_cli, write_scenario
from tests.helpers import scenario as any_scenario

FIXED = {"kind": "fixed", "step_time_s": 0.1}


def scenario(**overrides) -> dict:
    """A test scenario on vLLM's sync loop: these examples' step ends are synchronous
    scheduling's (vLLM's default before v0.14)."""
    data = any_scenario(**overrides)
    data["engine"] = {"async_scheduling": False, **data["engine"]}
    return data


def run(data: dict, **kw) -> RunResult:
    return run_scenario(parse_scenario(data), **kw)


def by_id(result: RunResult) -> dict:
    return {r.request_id: r for r in result.requests}


def two_instances(faults: dict, requests=None) -> dict:
    """Two colocated instances behind a least-outstanding router, 0.1 s per step: A goes to
    main-0, B to main-1."""
    requests = requests or [("A", 0.0, 8, 20), ("B", 0.0, 8, 20), ("C", 1.5, 8, 5),
                            ("D", 2.5, 8, 5)]
    return scenario(cost=FIXED, workload=explicit(*requests), faults=faults,
                    layout={"kind": "colocated", "pools": [{"name": "main", "instances": 2}],
                            "router": {"kind": "least_outstanding_requests"}})


MAIN_0_AT_1_05 = {"kind": "instance", "name": "main-0", "at_s": 1.05}


# ------------------------------------------------------------------- instances
def test_an_instance_lost_without_retry_rejects_what_it_held_naming_the_failure():
    result = run(two_instances({"events": [MAIN_0_AT_1_05], "client": {"max_retries": 0}}))
    a, b, c, d = (by_id(result)[k] for k in "ABCD")
    assert a.outcome == "rejected: lost: instance main-0 failed at 1.05 s"
    assert a.finish_s == 1.05 and a.num_output_tokens == 10  # 10 steps ended before it died
    assert b.outcome == c.outcome == d.outcome == "finished"
    assert c.decode_instance == d.decode_instance == "main-1"  # the router skips main-0
    # the step in progress at 1.05 s never ends: main-0's trace stops at 1.0 s
    assert max(s.end_s for s in result.steps if s.instance == "main-0") == pytest.approx(1.0)
    (tally,) = result.faults.tallies.values()
    assert (tally.num_lost, tally.num_retried, tally.num_failed) == (1, 0, 1)


def test_an_instance_lost_with_retry_resends_to_a_healthy_one_from_scratch():
    result = run(two_instances({"events": [MAIN_0_AT_1_05],
                                "client": {"max_retries": 1, "retry_delay_s": 0.5}}))
    a = by_id(result)["A"]
    assert a.outcome == "finished" and a.decode_instance == "main-1"
    assert a.num_retries == 1 and a.attempt_arrival_s == pytest.approx(1.55)
    assert a.arrival_s == 0.0  # the client's first arrival stays
    # main-1 is mid-step at 1.55 s: A's prompt runs in the next step, [1.6, 1.7)
    assert a.first_token_s == pytest.approx(1.7) and a.num_output_tokens == 20
    summary = summarize_run(result)
    f = summary.faults
    assert (f.num_lost, f.num_retried_requests, f.num_retries, f.num_failed) == (1, 1, 1, 0)
    # judged on its final attempt from its first arrival
    assert request_metrics(a).ttft_s == pytest.approx(1.7)
    assert request_metrics(a).e2e_s == pytest.approx(a.finish_s)
    assert summary.ttft_s.count == 4


def test_a_repaired_instance_comes_back_empty_and_is_chosen_again():
    result = run(two_instances({"events": [{**MAIN_0_AT_1_05, "repair_after_s": 1.0}],
                                "client": {"max_retries": 0}}))
    requests = by_id(result)
    assert requests["C"].decode_instance == "main-1"  # 1.5 s: main-0 still down
    assert requests["D"].decode_instance == "main-0"  # 2.5 s: back, and idle
    assert result.faults.tallies["instance main-0 failed at 1.05 s"].repair_s == 2.05
    main_0 = [s for s in result.steps if s.instance == "main-0"]
    assert all(s.end_s <= 1.05 or s.start_s >= 2.05 for s in main_0)
    assert [s.num_running for s in main_0 if s.start_s >= 2.05][0] == 1  # only D


def test_a_repaired_instance_serves_again_only_after_its_restart():
    """faults.restart_s: repaired at 2.05 s, main-0 starts for 1 s more (weights, graphs), so
    D, arriving at 2.5 s, goes to main-1; the tally says when it served again."""
    requests = [("A", 0.0, 8, 20), ("B", 0.0, 8, 20), ("C", 1.5, 8, 5), ("D", 2.5, 8, 5),
                ("E", 3.5, 8, 5)]
    result = run(two_instances({"events": [{**MAIN_0_AT_1_05, "repair_after_s": 1.0}],
                                "client": {"max_retries": 0}, "restart_s": 1.0}, requests))
    done = by_id(result)
    assert done["D"].decode_instance == "main-1"  # 2.5 s: repaired, still starting
    assert done["E"].decode_instance == "main-0"  # 3.5 s: serving again
    assert result.faults.tallies["instance main-0 failed at 1.05 s"].repair_s == 3.05
    assert all(s.end_s <= 1.05 or s.start_s >= 3.05 for s in result.steps
               if s.instance == "main-0")


def test_a_retried_request_out_of_retries_ends_rejected_with_its_attempts():
    # main-0 is the only instance: A is lost at 0.5 s, sent again at 0.7 s (main-0 is back at
    # 0.6 s), and lost again at 1.05 s with no retry left
    data = scenario(cost=FIXED, workload=explicit(("A", 0.0, 8, 40)), faults={
        "events": [{"kind": "instance", "name": "main-0", "at_s": 0.5, "repair_after_s": 0.1},
                   {"kind": "instance", "name": "main-0", "at_s": 1.05}],
        "client": {"max_retries": 1, "retry_delay_s": 0.2}})
    (a,) = run(data).requests
    assert a.num_retries == 1 and a.attempt_arrival_s == pytest.approx(0.7)
    assert a.outcome == "rejected: lost: instance main-0 failed at 1.05 s (sent 2 times)"


def test_a_request_arriving_while_every_instance_is_down_is_lost_to_that_failure():
    data = scenario(cost=FIXED, workload=explicit(("A", 0.5, 8, 4)), faults={
        "events": [{"kind": "instance", "name": "main-0", "at_s": 0.2,
                    "repair_after_s": 1.0}],
        "client": {"max_retries": 2, "retry_delay_s": 0.5}})
    (a,) = run(data).requests
    # lost at 0.5 s (no instance up), again at 1.0 s, sent a third time at 2.0 s: served
    assert a.outcome == "finished" and a.num_retries == 2
    assert a.attempt_arrival_s == pytest.approx(2.0)


# ----------------------------------------------------------------------- nodes
def pd(faults: dict, requests, topology="dgx-h100-x2", policy: str = "fail",
       connector: str = "nixl") -> dict:
    """One prefill instance on node0 and two decode instances on node1 (one of each on a
    one-node topology), llama-3.1-8b priced by the roofline model."""
    one_node = topology == "dgx-h100"
    return {"name": "pd", "seed": 0, "model": "llama-3.1-8b", "gpu": "h100-sxm",
            "topology": topology, "engine": {"max_model_len": 16384},
            "layout": {"kind": "disaggregated", "pools": [
                {"name": "prefill", "role": "prefill", "nodes": ["node0"]},
                {"name": "decode", "role": "decode", "instances": 1 if one_node else 2,
                 "nodes": ["node0" if one_node else "node1"]}],
                "decode_router": {"kind": "least_outstanding_requests"},
                "kv_transfer": {"connector": connector, "kv_load_failure_policy": policy}},
            "workload": explicit(*requests), "faults": faults}


def test_a_node_lost_takes_every_instance_on_it_and_later_requests_find_none():
    requests = [("A", 0.0, 500, 400), ("B", 0.0, 500, 400), ("C", 1.0, 500, 10)]
    result = run(pd({"events": [{"kind": "node", "name": "node1", "at_s": 0.5}],
                     "client": {"max_retries": 0}}, requests))
    reason = "rejected: lost: node node1 failed at 0.5 s"
    assert [r.outcome for r in result.requests] == [reason] * 3
    assert {r.decode_instance for r in result.requests[:2]} == {"decode-0", "decode-1"}
    assert result.requests[2].decode_instance is None  # prefilled, then no decode was up
    (tally,) = result.faults.tallies.values()
    assert (tally.num_lost, tally.num_failed) == (3, 3)


# ----------------------------------------------------------------------- links
SPINE = "../topologies/dgx-h100-x2-spine.yaml"
LONG_PROMPT = [("A", 0.0, 8000, 4)]


def _handoff_midpoint(data: dict) -> tuple[float, RunResult]:
    baseline = run({**data, "faults": None})
    (transfer,) = baseline.transfers
    return (transfer.start_s + transfer.end_s) / 2, baseline


def test_a_failed_link_with_another_path_moves_the_flow_over_it(tmp_path):
    import clustersim

    root = __import__("pathlib").Path(clustersim.__file__).resolve().parents[1]
    data = pd({}, LONG_PROMPT, topology=str(root / "topologies" / "dgx-h100-x2-spine.yaml"))
    at_s, baseline = _handoff_midpoint(data)
    faulty = copy.deepcopy(data)
    faulty["faults"] = {"events": [{"kind": "link", "between": ["leaf0", "spine0"],
                                    "at_s": at_s}]}
    result = run(faulty)
    (before,), (after,) = baseline.transfers, result.transfers
    assert ">spine0>" in before.path and ">spine1>" in after.path
    assert result.faults.num_rerouted == 1
    assert after.end_s == pytest.approx(before.end_s)  # the other spine is as fast
    assert result.requests[0].outcome == "finished"


@pytest.mark.parametrize("policy", ["fail", "recompute"])
def test_a_failed_link_without_another_path_fails_the_pull_as_the_policy_says(policy):
    data = pd({"client": {"max_retries": 0}}, LONG_PROMPT, policy=policy)
    at_s, _ = _handoff_midpoint(data)
    data["faults"]["events"] = [{"kind": "link", "id": "node0/nic0>leaf0", "at_s": at_s}]
    result = run(data)
    (a,) = result.requests
    label = f"link node0/nic0<->leaf0 failed at {at_s:g} s"
    tally = result.faults.tallies[label]
    assert result.transfers == [] and tally.num_kv_load_failures == 1
    if policy == "fail":
        assert a.outcome == f"rejected: lost: {label}"
        return
    # recompute: the decode side prefills the whole prompt itself
    assert a.outcome == "finished" and tally.num_recomputed == 1 and a.handoff_bytes == 0
    decode = [s for s in result.steps if s.instance == a.decode_instance]
    assert sum(n for s in decode for rid, n in s.prefill_chunks if rid == "A") == 8000


def test_a_tp_group_whose_link_fails_fails_with_its_instance():
    data = scenario(cost=FIXED, topology="dgx-h100", tensor_parallel_size=2,
                    layout={"kind": "colocated", "pools": [{"name": "main", "instances": 2}],
                            "router": {"kind": "round_robin"}},
                    workload=explicit(("A", 0.0, 8, 20), ("B", 0.0, 8, 20)),
                    faults={"events": [{"kind": "link", "between": ["node0/gpu1",
                                                                    "node0/nvswitch"],
                                        "at_s": 0.55}], "client": {"max_retries": 0}})
    a, b = run(data).requests
    assert a.outcome == "rejected: lost: link node0/gpu1<->node0/nvswitch failed at 0.55 s"
    assert b.outcome == "finished"  # main-1 (GPUs 2-3) all-reduces over other ports


# ----------------------------------------------------------- transfer failures
def _with_transfer_failures(policy: str, retries: int, connector: str = "nixl") -> dict:
    requests = [(f"r{i}", 0.05 * i, 300, 5) for i in range(6)]
    return pd({"kv_transfer_failure_probability": 0.999, "client": {"max_retries": retries}},
              requests, topology="dgx-h100", policy=policy, connector=connector)


def test_a_failed_transfer_under_recompute_is_prefilled_on_the_decode_side():
    result = run(_with_transfer_failures("recompute", 0))
    assert all(r.outcome == "finished" and r.handoff_bytes == 0 for r in result.requests)
    (tally,) = result.faults.tallies.values()
    assert tally.label == "KV transfer failure (probability 0.999)"
    assert tally.num_kv_load_failures == tally.num_recomputed == 6
    chunks = {rid: 0 for rid in by_id(result)}
    for s in result.steps:
        if s.instance == "decode-0":
            for rid, n in s.prefill_chunks:
                chunks[rid] += n
    assert set(chunks.values()) == {300}


@pytest.mark.parametrize("connector", ["nixl", "sglang"])
def test_a_failed_transfer_under_fail_is_lost_and_retried(connector):
    result = run(_with_transfer_failures("fail", 2, connector))
    reason = "rejected: lost: KV transfer failure (probability 0.999) (sent 3 times)"
    assert [r.outcome for r in result.requests] == [reason] * 6
    (tally,) = result.faults.tallies.values()
    assert (tally.num_lost, tally.num_retried, tally.num_failed) == (18, 12, 6)
    assert tally.num_recomputed == 0  # sglang has no recompute path; nixl's policy is fail


def test_transfer_failures_draw_from_their_own_stream():
    """Turning them on changes no arrival: the traffic and the routers keep their draws."""
    data = {"name": "pd", "seed": 3, "model": "llama-3.1-8b", "gpu": "h100-sxm",
            "topology": "dgx-h100", "layout": {
                "kind": "disaggregated", "decode_router": {"kind": "power_of_two"}, "pools": [
                    {"name": "p", "role": "prefill"},
                    {"name": "d", "role": "decode", "instances": 3}]},
            "workload": {"kind": "poisson", "rate_per_s": 20, "num_requests": 60,
                         "prompt_tokens": 200, "output_tokens": 8}}
    plain = run(data)
    faulty = run({**data, "faults": {"kv_transfer_failure_probability": 0.5,
                                     "client": {"max_retries": 0}}})
    assert [r.arrival_s for r in faulty.requests] == [r.arrival_s for r in plain.requests]
    lost = sum(r.outcome.startswith("rejected") for r in faulty.requests)
    assert 10 < lost < 50  # about half


def test_a_prefill_instance_lost_under_sglang_frees_the_decode_side_allocation():
    requests = [("A", 0.0, 4000, 4)]
    data = pd({"events": [{"kind": "instance", "name": "prefill-0", "at_s": 0.001}],
               "client": {"max_retries": 0}}, requests, topology="dgx-h100",
              connector="sglang")
    result = run(data)
    assert result.requests[0].outcome == (
        "rejected: lost: instance prefill-0 failed at 0.001 s")


# --------------------------------------------------------------- determinism
def test_a_fault_run_is_the_same_coalesced_and_step_by_step_and_run_after_run():
    from tests.test_coalesce import _request_record

    data = two_instances({"events": [{**MAIN_0_AT_1_05, "repair_after_s": 1.0}],
                          "client": {"max_retries": 1, "retry_delay_s": 0.5}})
    a, b, c = run(data), run(data), run(data, coalesce=False)
    assert [_request_record(r) for r in a.requests] == [_request_record(r) for r in b.requests]
    assert [_request_record(r) for r in a.requests] == [_request_record(r) for r in c.requests]
    assert a.steps == b.steps == c.steps
    assert summarize_run(a).to_json() == summarize_run(c).to_json()


# ---------------------------------------------------------------- validation
@pytest.mark.parametrize(("faults", "message"), [
    ({"events": [{"kind": "instance", "name": "decode-9", "at_s": 1}]},
     "faults.events[0].name: no instance 'decode-9'; instances: main-0, main-1"),
    ({"events": [{"kind": "node", "name": "node0", "at_s": 1}]},
     "faults.events[0].kind: a node failure needs a topology"),
    ({"events": [{"kind": "instance", "name": "main-0", "at_s": -1}]},
     "faults.events[0].at_s: Input should be greater than or equal to 0"),
    ({"events": [{"kind": "link", "id": "a>b", "between": ["a", "b"], "at_s": 1}]},
     "faults.events[0]: name the cable by exactly one of id or between"),
    ({"kv_transfer_failure_probability": 1.0},
     "faults.kv_transfer_failure_probability: Input should be less than 1"),
    ({"client": {"max_retries": -1}},
     "faults.client.max_retries: Input should be greater than or equal to 0"),
])
def test_bad_fault_sections_are_path_message_lines(tmp_path, faults, message):
    path = write_scenario(tmp_path, two_instances(faults))
    code, output = run_cli("simulate", str(path), "--out", str(tmp_path / "out"))
    assert code == 2
    assert output.strip().splitlines()[0].startswith(f"{path}: {message}"), output


def test_link_names_are_checked_against_the_topology():
    data = pd({"events": [{"kind": "link", "id": "node0/gpu0>leaf0", "at_s": 1}]},
              LONG_PROMPT)
    with pytest.raises(ClusterSimError, match=r"faults.events\[0\].id: no link"):
        run(data)
    data["faults"]["events"] = [{"kind": "link", "between": ["leaf0", "spine9"], "at_s": 1}]
    with pytest.raises(ClusterSimError, match=r"faults.events\[0\].between: no cable"):
        run(data)


# -------------------------------------------------------------------- metrics
def test_the_summary_counts_faults_and_reads_the_slo_before_and_after_the_first():
    data = two_instances({"events": [MAIN_0_AT_1_05], "client": {"max_retries": 0}})
    data["slo"] = {"ttft_s": 1.0}
    summary = summarize_run(run(data)).to_json()
    f = summary["faults"]
    assert f["num_lost"] == 1 and f["num_failed"] == 1 and f["first_fault_s"] == 1.05
    # A and B arrived before the failure (A lost: a miss), C and D after it (both good)
    assert f["before_first_fault"] == {"num_requests": 2, "attainment": 0.5}
    assert f["after_first_fault"]["num_requests"] == 2
    assert f["after_first_fault"]["attainment"] == 1.0
    assert f["by_fault"][0]["fault"] == "instance main-0 failed at 1.05 s"
    assert "judged on its final attempt" in summary["definitions"]
    windows = f["timeline"]
    assert sum(w["num_requests"] for w in windows) == 4
    assert windows[0]["attainment"] == 0.5 and windows[-1]["attainment"] == 1.0


def test_the_run_report_shows_the_faults_and_the_slo_over_time(tmp_path):
    import json

    data = two_instances({"events": [{**MAIN_0_AT_1_05, "repair_after_s": 1.0}],
                          "client": {"max_retries": 1, "retry_delay_s": 0.5}})
    data["slo"] = {"ttft_s": 1.0, "tpot_s": 0.2}
    path = write_scenario(tmp_path, data)
    code, output = run_cli("simulate", str(path), "--out", str(tmp_path / "out"), "--report",
                           str(tmp_path / "report"))
    assert code == 0, output
    assert "faults: 1 attempts lost, 1 requests retried (1 retries), 0 failed" in output
    assert "instance main-0 failed at 1.05 s, back at 2.05 s: 1 lost, 1 retried" in output
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    report = (tmp_path / "report" / "report.md").read_text()
    section = report.split("## Faults")[1].split("## Figures")[0]
    f = summary["faults"]
    assert f"{f['num_lost']} attempts lost, {f['num_retried_requests']} requests retried" in section
    assert "| instance main-0 failed at 1.05 s | 2.05 | 1 | 1 | 0 | 0 | 0 |" in section
    assert (tmp_path / "report" / "fig02-slo-over-time-1.png").exists()
    header = (tmp_path / "out" / "requests.csv").read_text().splitlines()[0]
    assert header.endswith(",handoff_end_s,retries")


def test_a_failure_after_the_last_request_moves_nothing():
    late = two_instances({"events": [{**MAIN_0_AT_1_05, "at_s": 1000.0}]})
    plain = two_instances({})
    del plain["faults"]
    a, b = run(late), run(plain)
    assert a.end_s == b.end_s < 1000
    assert summarize_run(a).makespan_s == summarize_run(b).makespan_s
    assert a.faults.tallies == {}  # it never happened


def test_the_fault_tallies_count_the_measured_rows_and_the_warm_ups_apart():
    # 20 measured requests after 4 warm-ups, 4 at a time, on a split whose decode node dies at
    # t = 0 and is back after 5 s: every attempt is lost once, retried, and lost again
    data = pd({"events": [{"kind": "node", "name": "node1", "at_s": 0.0, "repair_after_s": 5.0}],
               "client": {"max_retries": 1, "retry_delay_s": 0.1}}, [("A", 0.0, 8, 8)])
    data["workload"] = {"kind": "benchmark", "num_prompts": 20, "num_warmups": 4,
                        "max_concurrency": 4, "lengths": {"kind": "independent",
                                                          "prompt_tokens": 64,
                                                          "output_tokens": 8}}
    result = run(data)
    f = summarize_run(result).faults
    rows = result.requests
    failed = [r for r in rows if (r.reject_reason or "").startswith("lost: ")]
    assert len(rows) == len(failed) == 20
    (impact,) = f.faults
    assert f.num_failed == impact.num_failed == len(failed)
    assert f.num_retries == impact.num_retried == sum(r.num_retries for r in rows) == 20
    assert f.num_lost == impact.num_lost == 40
    assert (f.warmups.num_lost, f.warmups.num_retried, f.warmups.num_failed) == (8, 4, 4)
    assert summarize_run(result).to_json()["faults"]["warmups"]["num_failed"] == 4


def test_a_run_without_warm_ups_has_no_warm_up_tally():
    result = run(two_instances({"events": [MAIN_0_AT_1_05], "client": {"max_retries": 0}}))
    assert summarize_run(result).faults.warmups is None
