"""A plan without a recommendation ends with an exit code of its own and says why: 3 when no
candidate can run, 4 when none meets the SLO, the target or plan.require; its plan, ledger and
report are written all the same."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from clustersim.plan.outcome import MAX_REASONS, Outcome, outcome_of
from clustersim.plan.result import CandidateResult, Goodput, PlanResult
from clustersim.plan.space import Candidate, PoolChoice
from tests.helpers import run_cli, write_scenario

FAST = {"seeds": 1, "min_requests": 100, "min_duration_s": 5, "simulate_top": 1,
        "neighbours": False}


def small(**plan) -> dict:
    """Qwen2.5-7B on RTX 4090s, 100 short requests: a plan of one candidate in seconds."""
    return {
        "name": "outcome", "seed": 7, "model": "qwen2.5-7b-instruct", "gpu": "rtx4090",
        "engine": {"max_model_len": 4096},
        "workload": {"kind": "poisson", "rate_per_s": 2.0, "num_requests": 100,
                     "prompt_tokens": 256, "output_tokens": 64},
        "slo": {"ttft_s": 2.0, "tpot_s": 0.1},
        "plan": {"gpu_budget": 2, "layouts": ["colocated"],
                 "colocated": {"tensor_parallel_sizes": [1]}, "search": FAST, **plan},
    }


def plan_cli(tmp_path, data: dict, *extra: str) -> tuple[int, str]:
    report = () if "--no-report" in extra else ("--report", str(tmp_path / "report"))
    return run_cli("plan", str(write_scenario(tmp_path, data)), "--out",
                   str(tmp_path / "out"), "--executor", "serial", *report, "--no-n-plus-one",
                   *extra)


def reasons(output: str, tmp_path) -> list[str]:
    """The lines after the one that names the scenario file: the headline and its reasons."""
    lines = output.splitlines()
    first = next(i for i, line in enumerate(lines)
                 if line.startswith(f"{tmp_path / 'scenario.yaml'}: "))
    return lines[first:]


def test_a_plan_whose_every_candidate_is_pruned_exits_3_and_says_why(tmp_path):
    tp = {"tensor_parallel_sizes": [1, 2]}
    data = small(colocated=tp, prefill=tp, decode=tp, gpu_budget=4,
                 layouts=["colocated", "disaggregated"], max_num_batched_tokens=[2048, 8192])
    data["model"] = "llama-3.1-70b"  # 141 GB of weights against 24 GB GPUs
    code, output = plan_cli(tmp_path, data)
    assert code == 3, output
    head, *why = reasons(output, tmp_path)
    assert head.endswith(": no candidate can run: all 16 were pruned (each one's reason is "
                         "in ledger.csv):")
    # one line per pool that does not fit, however many step budgets and splits use it
    assert len(why) == 2 and "Traceback" not in output
    assert why[0].startswith("  10 candidates (4 x rtx4090 TP1, ") and (
        "rtx4090 TP1: llama-3.1-70b does not fit on rtx4090 at tensor_parallel_size 1" in why[0])
    assert why[1].startswith("  6 candidates (2 x rtx4090 TP2, ") and "TP2: llama" in why[1]
    plan = json.loads((tmp_path / "out" / "plan.json").read_text())
    assert plan["recommended"] is None and len(plan["candidates"]) == 16
    assert len((tmp_path / "out" / "ledger.csv").read_text().splitlines()) == 17
    assert (tmp_path / "report" / "report.md").is_file()
    code, printed = plan_cli(tmp_path, data, "--json", "--no-report")
    assert code == 3 and json.loads(printed[:printed.rindex("}") + 1]) == plan


@pytest.mark.parametrize(("change", "headline", "line"), [
    ({"slo": {"ttft_s": 0.001, "tpot_s": 0.1}},
     "no candidate meets the SLO on every traffic draw, even at a trickle of traffic:",
     "  2 x rtx4090 TP1: fails at a trickle: 0% of requests meet ttft_s <= 0.001 s; TTFT p90 "
     "is "),
    ({"plan": small(objective="min_gpus", target_rate_per_s=500)["plan"]},
     "no candidate reaches the target 500 req/s within the SLO on every traffic draw:",
     "  1 x rtx4090 TP1: its lowest traffic draw carries "),
])
def test_a_plan_that_nothing_meets_exits_4_and_says_why(tmp_path, change, headline, line):
    code, output = plan_cli(tmp_path, {**small(), **change}, "--no-report")
    assert code == 4, output
    head, *why = reasons(output, tmp_path)
    assert head.endswith(f": {headline}") and len(why) == 1 and why[0].startswith(line)
    assert json.loads((tmp_path / "out" / "plan.json").read_text())["recommended"] is None


def test_a_plan_whose_candidates_all_lose_an_instance_exits_4(tmp_path):
    code, output = run_cli("plan", str(write_scenario(tmp_path, small(require=["n_plus_one"]))),
                           "--out", str(tmp_path / "out"), "--executor", "serial",
                           "--no-report")
    assert code == 4, output
    head, *why = reasons(output, tmp_path)
    assert head.endswith(": no candidate keeps its SLO with an instance or a node lost "
                         "(plan.require: n_plus_one); 1 checked, best first:")
    assert why[0].startswith("  2 x rtx4090 TP1 at ") and why[0].endswith(
        " req/s: loses its SLO with colocated-0 or node0 lost")


# ------------------------------------------------------------- the reasons, by hand
def _row(n: int, tp: int, reason: str | None, status: str = "pruned",
         goodput: Goodput | None = None) -> CandidateResult:
    c = Candidate("colocated", (PoolChoice("colocated", "h100-sxm", tp, n),), None, True)
    return CandidateResult(c, status, reason=reason, goodput=goodput)


def _result(rows: list[CandidateResult], **fields) -> PlanResult:
    return replace(PlanResult("s", "max_goodput_per_gpu", "joint", None, 8, 1.0, (0,), 0.02,
                              rows, None, None, None, (), ""), **fields)


def test_reasons_group_by_their_words_whatever_their_figures():
    rows = [_row(1, 8, "h100-sxm TP8: needs 2 nodes"),
            *(_row(n, 1, f"uses {n} GPUs, over the plan's gpu_budget of 8") for n in (9, 10)),
            _row(2, 2, "h100-sxm TP2: weights 71.2 GB leave -3.5 GB"),
            _row(3, 2, "h100-sxm TP2: weights 71.2 GB leave -4.75 GB"),
            _row(4, 4, "h100-sxm TP4: weights 35.6 GB leave 1.5 GB")]
    ending = outcome_of(_result(rows))
    assert ending.kind == "no_runnable"
    assert ending.headline == ("no candidate can run: all 6 were pruned (each one's reason is "
                               "in ledger.csv):")
    assert ending.reasons == (
        "2 candidates (9 x h100-sxm TP1, ...): uses 9 GPUs, over the plan's gpu_budget of 8",
        "2 candidates (2 x h100-sxm TP2, ...): h100-sxm TP2: weights 71.2 GB leave -3.5 GB",
        "1 x h100-sxm TP8: h100-sxm TP8: needs 2 nodes",
        "4 x h100-sxm TP4: h100-sxm TP4: weights 35.6 GB leave 1.5 GB")
    many = [_row(1, 1, f"reason {chr(97 + i)}") for i in range(MAX_REASONS + 3)]
    listed = outcome_of(_result(many)).reasons
    assert len(listed) == MAX_REASONS and listed[-1] == "... and 4 more: see ledger.csv"


def test_a_recommendation_is_an_outcome_without_reasons():
    g = Goodput((3.0,), 3.0, 3.0, 3.0, 10, True)
    rec = _row(1, 1, None, "simulated", g)
    assert outcome_of(_result([rec], recommended=rec)) == Outcome("recommended")
    # a draw that meets the SLO at no rate, without a reason of its own, says so
    zero = _row(2, 1, None, "simulated", Goodput((3.0, 0.0), 1.5, 0.0, 3.0, 10, True))
    ending = outcome_of(_result([zero]))
    assert ending.kind == "no_feasible" and ending.reasons == (
        "2 x h100-sxm TP1: one of its traffic draws meets the SLO at no rate (goodput per draw: "
        "3.00, 0.00)",)
