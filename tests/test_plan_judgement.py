"""The plan's judgement: the operating rate, ties, sizes that every draw must carry, figures the
search could not measure, and sentences that follow their figures."""

from __future__ import annotations

from dataclasses import replace

import pytest

from clustersim.metrics import summarize_run
from clustersim.plan import answer as answers
from clustersim.plan.executors import SerialExecutor
from clustersim.plan.planner import TIE_RULE, Planner
from clustersim.plan.result import CandidateResult, Goodput, PlanResult, Tie
from clustersim.plan.sensitivity import CliffPoint
from clustersim.plan.space import Candidate, PoolChoice
from clustersim.scenario import parse_scenario
from clustersim.sim import run_scenario
from tests.helpers import run_cli, write_scenario
from tests.test_plan import scenario


def planner(**plan) -> Planner:
    data = scenario(plan={"gpu_budget": 4, "layouts": ["colocated", "disaggregated"], **plan})
    return Planner(parse_scenario(data), SerialExecutor())


def colocated(n: int, tp: int = 1) -> Candidate:
    return Candidate("colocated", (PoolChoice("colocated", "h100-sxm", tp, n),), None, True)


def split(p: int, d: int) -> Candidate:
    return Candidate("disaggregated", (PoolChoice("prefill", "h100-sxm", 1, p),
                                       PoolChoice("decode", "h100-sxm", 1, d)), None, True)


def result(p: Planner, c: Candidate, *draws: float, capped: bool = False,
           converged: bool = True) -> CandidateResult:
    from clustersim.plan.bisect import mean_interval

    mean, low, high = mean_interval(list(draws))
    g = Goodput(tuple(draws), mean, low, high, probes=10 * len(draws), converged=converged,
                capped=capped)
    return CandidateResult(c, "simulated", goodput=g, cost_per_hour=p.cost_per_hour(c),
                           operating_rate_per_s=p._operating_rate(g))


# ------------------------------------------------------------ the operating rate
def test_the_operating_rate_is_the_lowest_draw_less_the_headroom():
    p = planner()
    r = result(p, colocated(4), 41.42, 40.63, 39.86)
    assert r.operating_rate_per_s == 39.86
    reserved = planner(headroom=0.2)
    assert reserved._operating_rate(r.goodput) == pytest.approx(39.86 * 0.8)


def test_min_gpus_needs_every_draw_to_reach_the_target():
    p = planner(objective="min_gpus", target_rate_per_s=40, gpu_budget=None)
    # the mean (40.64) clears 40; the lowest draw (39.86) does not
    misses = result(p, colocated(4), 41.42, 40.63, 39.86)
    assert misses.goodput.mean_per_s > 40 and not p._qualifies(misses)
    clears = result(p, colocated(5), 51.0, 50.2, 49.7)
    assert p._qualifies(clears)
    assert p._operating_rate(clears.goodput) == 40  # it will carry the target
    assert min([misses, clears], key=p._key) is clears


# ------------------------------------------------------------------------- ties
def test_a_win_the_draws_cannot_tell_apart_is_a_labelled_tie_broken_by_the_rule():
    p = planner()
    # per GPU 6.38/6.38/6.02 against 6.20/6.08/5.32: the split wins every draw, by margins
    # too uneven for three draws to tell from zero
    s = result(p, split(3, 1), 25.51, 25.51, 24.08)
    c = result(p, colocated(4), 24.80, 24.32, 21.26)
    ranked, tie = p._break_tie(sorted([c, s], key=p._key))
    assert ranked[0] is c and tie is not None
    assert tie.tied == (c.id, s.id) and tie.by_goodput == s.id and tie.rule == TIE_RULE


def test_a_win_on_every_draw_by_a_steady_margin_is_not_a_tie():
    p = planner()
    s = result(p, split(3, 1), 26.0, 25.5, 24.9)
    c = result(p, colocated(4), 24.0, 23.6, 23.0)
    ranked, tie = p._break_tie(sorted([c, s], key=p._key))
    assert ranked[0] is s and tie is None


def test_a_gain_under_the_tolerance_is_a_tie_even_on_one_draw():
    p = planner()
    s = result(p, split(3, 1), 25.2)
    c = result(p, colocated(4), 25.0)
    ranked, tie = p._break_tie(sorted([c, s], key=p._key))
    assert ranked[0] is c and tie is not None


def test_sizes_are_not_tied_when_size_is_the_objective():
    p = planner(objective="min_gpus", target_rate_per_s=10, gpu_budget=None)
    small = result(p, colocated(2), 12.0, 11.0, 13.0)
    large = result(p, colocated(3), 12.5, 11.5, 13.5)
    ranked, tie = p._break_tie(sorted([large, small], key=p._key))
    assert ranked[0] is small and tie is None


def test_a_one_draw_candidate_never_outranks_one_it_could_tie_with():
    data = scenario(plan={"gpu_budget": 4, "layouts": ["colocated", "disaggregated"],
                          "search": {"seeds": 3, "contenders": 1, "tolerance": 0.05,
                                     "simulate_top": 3, "min_requests": 200,
                                     "min_duration_s": 10}})
    result_ = Planner(parse_scenario(data), SerialExecutor(), n_plus_one=False).run()
    rec = result_.recommended
    assert rec is not None and len(rec.goodput.per_seed_per_s) == 3
    simulated = [r for r in result_.candidates if r.status == "simulated"]
    rec_low = rec.goodput.low_per_s / rec.candidate.num_gpus
    for r in simulated:
        if len(r.goodput.per_seed_per_s) < 3:  # kept one draw: it could not have won
            assert r.goodput.mean_per_s / r.candidate.num_gpus < rec_low, r.id


# ----------------------------------------------------------- measured or refused
def test_a_capped_goodput_is_said_as_at_least_everywhere():
    p = planner()
    r = result(p, colocated(4), 100.0, capped=True)
    assert r.goodput.quality == "at least"
    assert answers.goodput_text(r).startswith("at least 100.00 req/s (not measured")
    unconverged = result(p, colocated(4), 30.0, converged=False)
    assert answers.goodput_text(unconverged).startswith("about 30.00 req/s")
    assert "not converged" in answers.goodput_text(unconverged)


def test_a_burst_the_search_cannot_bracket_is_not_printed_as_a_plain_goodput(tmp_path):
    data = scenario(workload={"rate_per_s": 10_000, "num_requests": 100,
                              "prompt_tokens": 64, "output_tokens": 16},
                    slo={"ttft_s": 30.0, "tpot_s": 1.0},
                    plan={"gpu_budget": 1, "layouts": ["colocated"],
                          "search": {"seeds": 1, "min_requests": 100, "min_duration_s": 0,
                                     "max_probes": 4}})
    code, output = run_cli("plan", str(write_scenario(tmp_path, data)), "--out",
                           str(tmp_path / "out"), "--executor", "serial", "--no-report",
                           "--no-n-plus-one")
    assert code == 0, output
    goodput_line = next(line for line in output.splitlines() if line.startswith("  goodput"))
    # four probes cannot bracket it within the tolerance: 'about', never a plain figure
    assert goodput_line.startswith("  goodput about "), goodput_line
    assert "not converged" in goodput_line
    assert ",unconverged," in (tmp_path / "out" / "ledger.csv").read_text()


def test_a_replay_squeezed_into_a_short_window_is_not_a_measured_goodput():
    # 50 fixed requests: at the rates that bracket goodput they arrive within a second or two,
    # far less than min_duration_s, and no queue has time to build
    data = scenario(slo={"ttft_s": 0.5, "tpot_s": 0.05},
                    plan={"gpu_budget": 1, "layouts": ["colocated"],
                          "search": {"seeds": 1, "min_duration_s": 60}})
    data["workload"] = {"kind": "explicit", "requests": [
        {"id": f"r{i}", "arrival_s": i * 0.1, "prompt_tokens": 2000, "output_tokens": 50}
        for i in range(50)]}
    out = Planner(parse_scenario(data), SerialExecutor(), n_plus_one=False).run()
    g = out.recommended.goodput
    assert g.short_window_s is not None and g.short_window_s < 30
    assert g.quality == "short window" and not g.measured
    assert f"Goodput at most {g.mean_per_s:,.2f} req/s (not measured" in out.answer
    assert out.recommended.cliff == ()  # nothing to measure past an unmeasured edge
    assert out.to_json()["candidates"][0]["goodput"]["quality"] == "short window"


def test_the_scenarios_own_layout_never_breaks_the_budget():
    data = scenario(tensor_parallel_size=1,
                    layout={"kind": "colocated", "pools": [{"name": "main", "instances": 4}]},
                    topology={"node": "dgx-h100", "count": 1},
                    plan={"objective": "min_gpus", "target_rate_per_s": 2, "gpu_budget": 2,
                          "layouts": ["colocated"],
                          "search": {"seeds": 1, "min_requests": 200, "min_duration_s": 10}})
    out = Planner(parse_scenario(data), SerialExecutor(), n_plus_one=False).run()
    own = next(r for r in out.candidates if r.candidate.baseline)
    assert own.status == "pruned" and "over the plan's gpu_budget of 2" in own.reason
    assert out.recommended is None or out.recommended.candidate.num_gpus <= 2


# ------------------------------------------------------------- the binding limit
def test_a_max_model_len_refusal_is_a_property_of_the_traffic_not_kv_capacity():
    data = scenario(engine={"max_model_len": 8192})
    data["workload"] = {"kind": "explicit", "requests": [
        {"id": "long", "arrival_s": 0.0, "prompt_tokens": 8333, "output_tokens": 4},
        {"id": "short", "arrival_s": 0.1, "prompt_tokens": 64, "output_tokens": 4}]}
    del data["plan"]
    summary = summarize_run(run_scenario(parse_scenario(data)))
    assert summary.num_rejected == 1
    from clustersim.scenario import SLO

    binding = answers.binding_constraint(summary, SLO(ttft_s=3.0, tpot_s=0.03), 0.01)
    assert "KV" not in binding and "rejected" not in binding
    row = CandidateResult(colocated(1), "simulated", at_goodput=summary)
    (note,) = answers.length_refusals(row)
    assert note.startswith("1 of 2 requests (50.00%) is refused at every rate for their length")


# ------------------------------------------------------------ words from numbers
def test_each_generated_sentence_changes_with_its_figure():
    p = planner()
    r = result(p, colocated(4), 24.0, 23.0, 22.0)
    text = answers.operating_text(r)
    assert text.startswith("operate at 22.00 req/s, the lowest of its 3 draws' goodputs")
    assert "4% below the mean" in text
    r2 = result(p, colocated(4), 24.0, 23.0, 20.0)
    assert "operate at 20.00 req/s" in answers.operating_text(r2)
    assert "10% below the mean" in answers.operating_text(r2)
    reserved = replace(r, operating_rate_per_s=22.0 * 0.8)
    assert "less the 20% headroom" in answers.operating_text(reserved, headroom=0.2)
    one = result(p, colocated(4), 30.0)
    assert "set plan.headroom to keep a margin" in answers.operating_text(one)

    gradual = (CliffPoint(1.05, 24.15, (0.89, 0.88, 0.9), 1),
               CliffPoint(1.10, 25.3, (0.86, 0.85, 0.87), 0))
    steep = (CliffPoint(1.05, 24.15, (0.89, 0.88, 0.9), 1),
             CliffPoint(1.10, 25.3, (0.70, 0.75, 0.72), 0))
    cliff = (CliffPoint(1.05, 24.15, (0.40, 0.30, 0.5), 0),
             CliffPoint(1.10, 25.3, (0.2, 0.1, 0.3), 0))
    assert "degrades gradually" in answers.cliff_text(replace(r, cliff=gradual), 0.9)
    assert "past goodput it falls steeply: attainment 89.0% at +5%" in answers.cliff_text(
        replace(r, cliff=steep), 0.9)
    said = answers.cliff_text(replace(r, cliff=cliff), 0.9)
    assert "falls off a cliff" in said and "40.0% at +5% (0 of 3 draws met" in said

    assert answers.headroom_text(r, 20.0).startswith(
        "headroom over the target 20 req/s: +10% on the lowest draw (+15% on the mean)")
    assert answers.headroom_text(r, 11.0).startswith(
        "headroom over the target 11 req/s: +100% on the lowest draw")


def test_a_one_draw_challenger_is_judged_on_its_operating_capacity():
    # min_gpus for 40 req/s with 10 % headroom: the 4-GPU candidate's lowest draw (44) less the
    # headroom is 39.6, so it misses; a 5-GPU one-draw candidate at 50 could win and must get
    # every draw before it is ranked
    p = planner(objective="min_gpus", target_rate_per_s=40, gpu_budget=None, headroom=0.1)
    four = result(p, colocated(4), 45.0, 44.5, 44.0)
    five = result(p, colocated(5), 50.0)
    assert not p._qualifies(four) and p._qualifies(five)
    assert p._could_tie(five, four)


def test_a_draw_that_meets_the_slo_at_no_rate_disqualifies():
    p = planner()
    assert not p._qualifies(result(p, colocated(4), 0.0, 40.0, 41.0))


def test_a_short_window_says_at_most_even_when_the_search_also_hit_its_ceiling():
    p = planner()
    r = result(p, colocated(4), 100.0, capped=True)
    r = replace(r, goodput=replace(r.goodput, short_window_s=1.5))
    assert r.goodput.quality == "short window"
    assert answers.goodput_text(r).startswith("at most 100.00 req/s (not measured")
    target = planner(objective="min_gpus", target_rate_per_s=40, gpu_budget=None)
    upper = result(target, colocated(4), 60.0)
    upper = replace(upper, goodput=replace(upper.goodput, short_window_s=1.5))
    assert not target._qualifies(upper)  # an upper bound proves no target


def test_an_n_plus_one_check_that_could_not_run_is_no_survival():
    from clustersim.plan.result import NPlusOne

    n1 = NPlusOne(candidate="x", rate_per_s=1.0, rate_basis="", max_retries=2, instance=None,
                  node=None, notes=("losing colocated-0: boom",))
    assert not n1.meets("n_plus_one") and not n1.meets("n_plus_one_instance")


def tied_plan() -> tuple[Planner, CandidateResult, CandidateResult, PlanResult]:
    """The quick start's tie: a split winning each draw by uneven margins over colocated."""
    p = planner()
    s = result(p, split(3, 1), 25.51, 25.51, 24.08)
    c = result(p, colocated(4), 24.80, 24.32, 21.26)
    ranked, tie = p._break_tie(sorted([c, s], key=p._key))
    plan = PlanResult(
        scenario="t", objective="max_goodput_per_gpu", criterion="joint",
        target_rate_per_s=None, gpu_budget=4, base_rate_per_s=10.0, seeds=(0, 1, 2),
        tolerance=0.02, candidates=(c, s), recommended=ranked[0], runner_up=s,
        split_verdict=None, pareto=(), answer="", tie=tie)
    return p, c, s, plan


def test_the_tie_sentence_names_the_tie_and_its_rule():
    p, c, s, plan = tied_plan()
    tie = plan.tie
    text = answers.tie_text(plan)
    assert text.startswith(f"a statistical tie with {s.candidate.label()} (per-draw "
                           "differences that cannot be told from zero at 95 %)")
    assert TIE_RULE in text and "the mean goodput alone would pick" in text
    assert answers.tie_text(replace(plan, tie=None)) is None
    # a recommendation that is not the tie's choice (plan.require chose another) is not
    # said to have won it
    third = result(p, colocated(2, tp=2), 20.0, 19.0, 18.0)
    other = answers.tie_text(replace(plan, recommended=third,
                                     candidates=(c, s, third)))
    assert other.startswith("the best by the objective was a statistical tie among")
    assert isinstance(tie, Tie)


def test_the_cli_prints_a_tie_one_candidate_a_line(capsys):
    from clustersim.cli.plan import print_tie

    _, _, s, plan = tied_plan()
    print_tie(plan)
    assert capsys.readouterr().out.splitlines() == [
        "  won a statistical tie with (per-draw differences that cannot be told from zero at "
        "95 %):",
        f"    - {s.candidate.label()}  (the mean goodput alone would pick it)",
        f"    broken by the rule: {TIE_RULE}"]
