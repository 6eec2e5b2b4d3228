"""N+1 in the planner: the recommendation at its operating rate with one instance and one node
lost, in plan.json, on the command line and in the report."""

from __future__ import annotations

import json

from clustersim.plan.executors import SerialExecutor
from clustersim.plan.planner import Planner
from clustersim.scenario import parse_scenario
from tests.helpers import run_cli, write_scenario
from tests.test_plan import scenario


def small_plan() -> dict:
    """Llama-3.1-8B on three H100s of one DGX H100 (a node loss takes every instance)."""
    return scenario(plan={"gpu_budget": 3, "layouts": ["colocated", "disaggregated"],
                          "search": {"seeds": 1, "tolerance": 0.1, "simulate_top": 1,
                                     "min_requests": 150, "min_duration_s": 5,
                                     "neighbours": False}})


def test_the_plan_checks_its_recommendation_with_one_instance_and_one_node_lost():
    result = Planner(parse_scenario(small_plan()), SerialExecutor()).run()
    rec, n1 = result.recommended, result.n_plus_one
    assert rec is not None and n1 is not None
    # no target rate: the scenario's own traffic (10 req/s), below the goodput
    assert n1.candidate == rec.id and n1.rate_per_s == 10.0
    assert n1.rate_basis == "the scenario's own traffic"
    assert rec.at_goodput_rate_per_s > 10.0
    roles = {p.role for p in rec.candidate.pools}
    tried = {c.lost for c in n1.tried if c.kind == "instance"}
    assert tried == {f"{role}-0" for role in roles}  # each role's first instance
    assert n1.instance is not None and n1.instance.lost in tried
    assert n1.node is not None and n1.node.kind == "node"
    for check in n1.tried:
        # decode instances and nodes hold running requests at any moment; a prefill instance
        # may be between prompts (two of them at 10 req/s are idle about half the time)
        assert check.at_s > 0 and check.num_lost >= 0
        if check.kind == "node" or check.lost.startswith("decode"):
            assert check.num_lost > 0, check.lost
        assert check.summary.faults.first_fault_s == check.at_s
        assert check.holds == (check.meets and check.meets_after)
        # a spare is the lost part's GPUs at the plan's price
        price = result.prices["h100-sxm"]["usd_per_gpu_hour"]
        assert check.spare_cost_per_hour == check.num_gpus * price
    assert n1.holds == all(c.holds for c in (n1.instance, n1.node))
    assert ("has N+1 headroom" if n1.holds else "has no N+1 headroom") in result.answer
    out = result.to_json()["n_plus_one"]
    assert out["instance"]["lost"] == n1.instance.lost and out["holds"] == n1.holds


def test_plan_prints_the_n_plus_one_verdict_and_writes_it(tmp_path):
    path = write_scenario(tmp_path, small_plan())
    code, output = run_cli("plan", str(path), "--out", str(tmp_path / "out"), "--executor",
                           "serial", "--report", str(tmp_path / "report"))
    assert code == 0, output
    plan = json.loads((tmp_path / "out" / "plan.json").read_text())
    n1 = plan["n_plus_one"]
    verdict = "holds" if n1["holds"] else "FAILS"
    assert f"N+1 at {n1['rate_per_s']:,.2f} req/s" in output and verdict in output
    assert f"  lose {n1['instance']['lost']} (" in output
    assert f"  lose {n1['node']['lost']} (" in output
    report = (tmp_path / "report" / "report.md").read_text()
    assert "## N+1: one instance or one node lost" in report
    assert f"| instance {n1['instance']['lost']}" in report


def test_without_n_plus_one_the_plan_runs_no_fault(tmp_path):
    result = Planner(parse_scenario(small_plan()), SerialExecutor(), n_plus_one=False).run()
    assert result.n_plus_one is None and result.to_json()["n_plus_one"] is None


def test_n_plus_one_runs_at_the_target_rate_and_at_most_at_goodput():
    data = small_plan()
    data["plan"].update({"objective": "min_gpus", "target_rate_per_s": 12.0})
    result = Planner(parse_scenario(data), SerialExecutor()).run()
    assert result.n_plus_one.rate_per_s == 12.0
    assert result.n_plus_one.rate_basis == "the target rate"
    busy = small_plan()
    busy["workload"]["rate_per_s"] = 500.0  # the scenario's own traffic is beyond goodput
    result = Planner(parse_scenario(busy), SerialExecutor()).run()
    n1 = result.n_plus_one
    assert n1.rate_per_s == result.recommended.at_goodput_rate_per_s
    assert n1.rate_basis.startswith("goodput")
