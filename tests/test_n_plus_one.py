"""N+1 in the planner: the recommendation at its operating rate with one instance and one node
lost, in plan.json, on the command line and in the report."""

from __future__ import annotations

import json

from clustersim.plan.executors import SerialExecutor
from clustersim.plan.planner import Planner
from clustersim.scenario import parse_scenario
from tests.helpers import run_cli, write_scenario
from tests.test_plan import one_gpu_node, scenario


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
    # no target rate: the operating rate, the goodput of the (one) traffic draw, whatever the
    # scenario's own placeholder traffic (10 req/s)
    assert n1.candidate == rec.id and n1.rate_per_s == rec.operating_rate_per_s
    assert n1.rate_per_s == rec.goodput.lower_per_s != 10.0
    assert n1.rate_basis == "its traffic draw's goodput"
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


def test_n_plus_one_runs_at_the_operating_rate_for_the_recommendation_and_the_alternative():
    data = small_plan()
    data["plan"].update({"objective": "min_gpus", "target_rate_per_s": 12.0})
    result = Planner(parse_scenario(data), SerialExecutor()).run()
    assert result.recommended.operating_rate_per_s == 12.0
    assert result.n_plus_one.rate_per_s == 12.0
    assert result.n_plus_one.rate_basis == "the target rate"
    reserved = small_plan()
    reserved["plan"]["headroom"] = 0.25
    result = Planner(parse_scenario(reserved), SerialExecutor()).run()
    rec, alt = result.recommended, result.runner_up
    assert rec.operating_rate_per_s == rec.goodput.lower_per_s * 0.75
    assert result.n_plus_one.rate_per_s == rec.operating_rate_per_s
    assert "less the plan's 25% headroom" in result.n_plus_one.rate_basis
    n1 = result.runner_up_n_plus_one
    assert alt is not None and n1 is not None and n1.candidate == alt.id
    assert n1.rate_per_s == alt.operating_rate_per_s
    assert "the alternative" in result.answer and result.to_json()["runner_up_n_plus_one"]


def test_requiring_n_plus_one_recommends_the_best_layout_that_survives(tmp_path):
    # one GPU per server (a node loss is an instance loss) and half the capacity in reserve:
    # the best split (2P + 2D) loses a prefill instance and misses its SLO; colocated survives
    data = small_plan()
    data["plan"].update({"gpu_budget": 4, "headroom": 0.5,
                         "nodes": {"h100-sxm": one_gpu_node(tmp_path, 400)}})
    # goodput to 5 %: the split's edge (about 15 %) is then more than a tie
    data["plan"]["search"]["tolerance"] = 0.05
    free = Planner(parse_scenario(data), SerialExecutor()).run()
    assert free.recommended.candidate.layout == "disaggregated" and not free.n_plus_one.holds
    data["plan"]["require"] = ["n_plus_one"]
    result = Planner(parse_scenario(data), SerialExecutor()).run()
    survival = result.survival
    assert survival.met and survival.unconstrained == free.recommended.id
    assert [n1.candidate for n1 in survival.failed] == [free.recommended.id]
    rec = result.recommended
    assert rec.candidate.layout == "colocated" and result.n_plus_one.holds
    assert result.n_plus_one.candidate == rec.id
    assert "no separate node check" in result.n_plus_one.notes[0]
    assert "The plan requires surviving one instance or one node lost" in result.answer
    assert f"Survival costs {rec.goodput_per_gpu:,.3f} against" in result.answer


def test_a_split_that_fails_a_loss_is_repaired_with_one_more_of_what_it_lost(tmp_path):
    """min_gpus at a target: the smallest split loses its SLO with an instance lost; the
    survival search adds one more instance of the pool whose loss broke it (and again if
    that still fails), measures each repair on every draw like any candidate, and
    recommends the repaired split, saying what was added."""
    data = small_plan()
    data["plan"].update({"objective": "min_gpus", "target_rate_per_s": 8.0,
                         "gpu_budget": 8, "layouts": ["disaggregated"],
                         "nodes": {"h100-sxm": one_gpu_node(tmp_path, 400)},
                         "require": ["n_plus_one_instance"]})
    data["plan"]["search"].update({"seeds": 2, "neighbours": True})
    result = Planner(parse_scenario(data), SerialExecutor()).run()
    survival = result.survival
    assert survival is not None and survival.met, result.answer
    rec = result.recommended
    unconstrained = result.by_id(survival.unconstrained)
    assert survival.failed and survival.failed[0].candidate == unconstrained.id
    found = [r for r in survival.repairs if r.outcome == "survives"]
    assert [r.candidate for r in found] == [rec.id] == [survival.survivor]
    # one more instance than the unconstrained answer, or two after a second repair
    assert rec.candidate.num_gpus > unconstrained.candidate.num_gpus
    assert found[0].added.startswith("one more ")
    assert len(rec.goodput.per_seed_per_s) == 2  # every draw, as any contender
    assert result.n_plus_one.candidate == rec.id and result.n_plus_one.meets(
        "n_plus_one_instance")
    assert f"with {found[0].added}, the best candidate that keeps its SLO" in result.answer
    out = result.to_json()["survival"]
    assert out["survivor"] == rec.id and any(r["outcome"] == "survives" for r in out["repairs"])
