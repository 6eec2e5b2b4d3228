"""One story for every consumer of a plan: the best of each layout kind is picked once, by the
ranking that picked the recommendation; what chose the recommendation is said as it was; the
short answer is made from its figures; the printed table never hides a simulated row."""

from __future__ import annotations

from dataclasses import replace

from clustersim.plan import story
from clustersim.plan.headline import short_answer
from clustersim.plan.result import PlanResult, SplitVerdict
from clustersim.scenario import SLO
from tests.test_plan_judgement import colocated, planner, result, split


def plan_of(rec, *others, **fields) -> PlanResult:
    values = dict(scenario="t", objective="max_goodput_per_gpu", criterion="joint",
                  target_rate_per_s=None, gpu_budget=4, base_rate_per_s=10.0, seeds=(0, 1, 2),
                  tolerance=0.02, candidates=(rec, *others), recommended=rec, runner_up=None,
                  split_verdict=None, pareto=(), answer="", handoff_budget_s=0.01)
    values.update(fields)
    out = PlanResult(**values)
    return replace(out, chosen_by=story.chosen_by(out))


def test_the_best_of_each_kind_comes_from_the_ranking_that_chose_the_recommendation():
    p = planner()
    c4, c2 = result(p, colocated(4), 40.0, 39.0, 38.0), result(p, colocated(2), 18.0, 17, 16)
    s31, s22 = result(p, split(3, 1), 44.0, 43, 42), result(p, split(2, 2), 20.0, 19, 18)
    ranked = sorted([c4, c2, s31, s22], key=p._key)
    best = story.best_of_each_kind(ranked[0], ranked, ranked, p._best)
    assert best == {"disaggregated": s31.id, "colocated": c4.id}
    # a requirement that moved the recommendation down the ranking: it is its kind's pick
    moved = story.best_of_each_kind(c2, ranked, ranked, p._best)
    assert moved == {"colocated": c2.id, "disaggregated": s31.id}
    # a kind none of whose candidates qualifies: its closest, by the objective's key
    assert story.best_of_each_kind(c4, [c4], [c4, s22, s31], p._best)["disaggregated"] == s31.id


def test_what_chose_the_recommendation_is_said_as_it_was():
    p = planner()
    rec = result(p, colocated(4), 40.0, 39.0, 38.0)
    assert story.chosen_by(plan_of(rec)) == "the most goodput per GPU within the SLO"
    fewest = plan_of(rec, objective="min_gpus", target_rate_per_s=30.0, headroom=0.1)
    assert fewest.chosen_by == ("the fewest GPUs whose lowest traffic draw less the 10% "
                                "headroom carries the target 30 req/s within the SLO")
    cheapest = plan_of(rec, objective="min_cost", target_rate_per_s=30.0)
    assert cheapest.chosen_by == ("the lowest cost per hour whose lowest traffic draw carries "
                                  "the target 30 req/s within the SLO")
    assert "goodput" not in cheapest.chosen_by


def test_the_short_answer_states_its_figures_in_three_to_five_lines():
    p = planner()
    rec = result(p, colocated(4), 40.0, 39.0, 38.0)
    alt = result(p, split(3, 1), 44.0, 43.0, 42.0)
    verdict = SplitVerdict(False, ("goodput per GPU (req/s) rises 9.75 -> 10.75 (+10.3%)",
                                   "KV handoff p95 30.0 ms at its operating rate, 42.00 req/s, "
                                   "over its 10.0 ms budget"), 38.0,
                           against=("KV handoff p95 30.0 ms at its operating rate, 42.00 req/s, "
                                    "over its 10.0 ms budget",),
                           colocated=rec.id, split=alt.id, handoff_p95_s=0.03,
                           handoff_budget_s=0.01, handoff_rate_per_s=42.0, within=0.02)
    plan = plan_of(rec, alt, runner_up=alt, split_verdict=verdict,
                   best={"colocated": rec.id, "disaggregated": alt.id})
    lines = short_answer(plan, SLO(ttft_s=2.0, tpot_s=0.05))
    assert 3 <= len(lines) <= 5
    assert lines[0] == (f"Deploy {rec.candidate.label()} on 4 x h100-sxm GPUs, chosen as the "
                        "most goodput per GPU within the SLO.")
    assert lines[1].startswith("It serves 38.00 req/s at its operating rate with TTFT <= 2 s "
                               "and TPOT <= 50 ms for 90% of requests, joint; goodput 39.00 req/s")
    assert lines[2].startswith("It costs $")
    assert lines[3] == "Losing an instance or a node was not checked (--no-n-plus-one)."
    assert lines[4] == (f"The best split is {alt.candidate.label()}: 43.00 req/s (95% CI "
                        f"{alt.goodput.low_per_s:,.2f}-{alt.goodput.high_per_s:,.2f}), 10.750 "
                        "req/s per GPU; the split rule says stay colocated (KV handoff p95 "
                        "30.0 ms at its operating rate, 42.00 req/s, over its 10.0 ms budget).")


def test_the_printed_table_never_hides_a_simulated_row(capsys):
    from clustersim.cli.plan import SHOWN_ROWS, print_table

    p = planner()
    rows = [result(p, colocated(1 + i % 4, tp=1 + i // 4), 40.0 - i, 39.0 - i, 38.0 - i)
            for i in range(SHOWN_ROWS + 3)]
    late = result(p, split(3, 1), 20.0, 19.0, 18.0)
    rows.insert(SHOWN_ROWS + 1, late)  # the best split ranks 14th
    plan = plan_of(rows[0], *rows[1:], best={"colocated": rows[0].id,
                                               "disaggregated": late.id})
    print_table(plan)
    out = capsys.readouterr().out
    assert f" 14 {late.candidate.label()}" in out and out.count("simulated, best split") == 1
    assert "... and 3 more simulated (#13, #15-#16), ranked in ledger.csv" in out
    assert out.count("\n") == 1 + SHOWN_ROWS + 1 + 1 + 1  # header, rows, the split, note, gap


def test_a_plan_without_an_answer_prints_why_once(tmp_path):
    import yaml

    from tests.helpers import run_cli
    from tests.test_report import plan_scenario

    data = plan_scenario()
    data["slo"] = {"ttft_s": 0.05, "tpot_s": 0.03}
    data["plan"]["layouts"] = ["colocated"]
    path = tmp_path / "none.yaml"
    path.write_text(yaml.safe_dump(data))
    code, output = run_cli("plan", str(path), "--out", str(tmp_path / "out"), "--executor",
                           "serial", "--no-report")
    assert code == 4, output
    assert "\nanswer:\n  No candidate meets " in output
    assert output.count("No candidate meets") == 1 and "recommendation:" not in output
