"""Plans across GPU generations (``plan.gpus``): each generation's best layout priced per 1M
output tokens, the cheapest that meets the target named (a tie within the tolerance broken by
the tie rule), the printout, plan.json and the report telling one story, bad input refused in
one line."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from clustersim.metrics import summarize_run
from clustersim.metrics.run import Throughput
from clustersim.plan.bisect import mean_interval
from clustersim.plan.generations import UNPRICED, compare, sentence, shortfall
from clustersim.plan.outcome import outcome_of
from clustersim.plan.result import CandidateResult, Generation, Goodput, PlanResult
from clustersim.plan.space import Candidate, PoolChoice
from clustersim.plan.tie import TIE_RULE
from clustersim.scenario import parse_scenario
from clustersim.sim import run_scenario
from tests.helpers import run_cli, write_scenario
from tests.test_report import SCREENSHOTS, _chromium, markdown_tables

ROOT = Path(__file__).resolve().parents[1]
TOKENS_PER_REQUEST = 200.0


# ------------------------------------------------------------------ the comparison
@pytest.fixture(scope="module")
def summary():
    """A real run's summary, whose throughput each made-up best layout replaces."""
    data = {"name": "g", "seed": 0, "model": "llama-3.1-8b", "gpu": "h100-sxm",
            "workload": {"kind": "poisson", "rate_per_s": 2, "num_requests": 10,
                         "prompt_tokens": {"kind": "fixed", "value": 64},
                         "output_tokens": {"kind": "fixed", "value": 8}}}
    return summarize_run(run_scenario(parse_scenario(data)))


def best(gpu: str, summary, *draws: float, num_gpus: int = 1) -> CandidateResult:
    """A generation's best layout: ``num_gpus`` x ``gpu`` TP1 with these per-draw goodputs,
    each request ``TOKENS_PER_REQUEST`` output tokens at its run at goodput."""
    mean, low, high = mean_interval(list(draws))
    g = Goodput(tuple(draws), mean, low, high, probes=10, converged=True)
    median = sorted(draws)[(len(draws) - 1) // 2]
    at = replace(summary, throughput=Throughput(median, None, median * TOKENS_PER_REQUEST))
    c = Candidate("colocated", (PoolChoice("colocated", gpu, 1, num_gpus),), None, True)
    return CandidateResult(c, "simulated", goodput=g, at_goodput=at,
                           at_goodput_rate_per_s=median, operating_rate_per_s=min(draws))


def generation(gpu: str, rec: CandidateResult | None, price: float | None) -> Generation:
    why = None if price is not None else UNPRICED
    return Generation(gpu, rec, price, None if price is None else "test", why)


def test_a_faster_dearer_gpu_wins_only_when_its_cost_per_token_is_lower(summary):
    # h200 serves 50 % more than h100-sxm per GPU; at $4.50 an hour against $2.69 each of its
    # tokens costs more (4.50 / 15 > 2.69 / 10), at $3.50 less (3.50 / 15 < 2.69 / 10)
    slow = best("h100-sxm", summary, 9.9, 10.0, 10.2)
    fast = best("h200", summary, 14.8, 15.0, 15.3)
    dear = compare([generation("h100-sxm", slow, 2.69), generation("h200", fast, 4.50)],
                   "max_goodput_per_gpu", 0.02)
    cheap = compare([generation("h100-sxm", slow, 2.69), generation("h200", fast, 3.50)],
                    "max_goodput_per_gpu", 0.02)
    assert dear.winner == "h100-sxm" and dear.ranking == ("h100-sxm", "h200")
    assert cheap.winner == "h200" and cheap.ranking == ("h200", "h100-sxm")
    assert not dear.tied and not cheap.tied  # a steady margin on every draw, over 2 %
    # the figure is the plan's: $/h over the run at goodput's output tokens per hour
    h200 = cheap.entry("h200")
    assert h200.cost_per_million_output_tokens == pytest.approx(
        3.50 / (15.0 * TOKENS_PER_REQUEST * 3600) * 1e6)
    assert "h200's best layout (1 x h200 TP1) costs $0.324" in sentence(cheap)
    assert "against h100-sxm's $0.374 (+15.3%)" in sentence(cheap)


def test_a_saving_within_the_tolerance_is_a_tie_the_tie_rule_breaks(summary):
    # b200 is 1 % cheaper per token on two GPUs; h200 does it on one: the rule prefers the
    # cheaper per hour, and says what the cost alone would have picked
    two = best("b200", summary, 40.4, 40.2, 40.6, num_gpus=2)
    one = best("h200", summary, 15.0, 14.9, 15.1)
    gens = compare([generation("h200", one, 4.50), generation("b200", two, 6.00)],
                   "max_goodput_per_gpu", 0.02)
    assert gens.by_cost == "b200" and gens.winner == "h200" and gens.tied == ("h200", "b200")
    assert gens.tie_reasons == ("a gain under the 2% tolerance",)
    text = sentence(gens)
    assert "against b200's $0.413 (-1.0%, within the 2% tolerance)" in text
    assert TIE_RULE in text and "the cost per token alone would pick b200" in text


def test_an_unpriced_generation_is_shown_and_never_ranked(summary):
    gens = compare([generation("gb300", best("gb300", summary, 40.0, 41.0), None),
                    generation("h200", best("h200", summary, 15.0, 15.2), 4.50)],
                   "max_goodput_per_gpu", 0.02)
    assert gens.winner == "h200" and gens.ranking == ("h200",)
    assert gens.entry("gb300").cost_per_million_output_tokens is None
    assert f"gb300: {UNPRICED}" in sentence(gens)


def test_a_best_layout_short_of_the_target_is_not_named(summary):
    rec = best("h100-sxm", summary, 9.0, 9.5)
    plan = PlanResult("s", "max_goodput_per_gpu", "joint", 12.0, 1, 10.0, (0, 1), 0.02, [rec],
                      rec, None, None, (), "")
    why = shortfall("h100-sxm", plan, 2.69, "")
    assert why == ("its best, 1 x h100-sxm TP1, carries 9.00 req/s on its lowest draw, short "
                   "of the target 12 req/s")
    assert shortfall("h100-sxm", replace(plan, target_rate_per_s=8.0), 2.69, "") is None
    assert shortfall("h100-sxm", replace(plan, recommended=None), 2.69,
                     "no candidate meets the SLO") == "no candidate meets the SLO"


# ------------------------------------------------------------------ end to end
FAST = {"seeds": 2, "tolerance": 0.05, "simulate_top": 2, "min_requests": 150,
        "min_duration_s": 8, "neighbours": False}


def generations_scenario(**plan) -> dict:
    """llama-3.1-8b on one GPU of each generation, TP1, colocated."""
    return {
        "name": "generations-test", "seed": 3, "model": "llama-3.1-8b", "gpu": "h100-sxm",
        "engine": {"max_model_len": 8192},
        "workload": {"kind": "poisson", "rate_per_s": 10, "num_requests": 150,
                     "prompt_tokens": {"kind": "uniform", "low": 1000, "high": 3000},
                     "output_tokens": {"kind": "uniform", "low": 100, "high": 300}},
        "slo": {"ttft_s": 2.0, "tpot_s": 0.03},
        "plan": {"gpu_budget": 2, "gpus": ["h100-sxm", "h200", "gb300"],
                 "layouts": ["colocated"], "colocated": {"tensor_parallel_sizes": [1, 2]},
                 "search": FAST, **plan},
    }


def plan_cli(tmp_path: Path, data: dict, *extra: str) -> tuple[str, dict]:
    path = write_scenario(tmp_path, data)
    code, output = run_cli("plan", str(path), "--out", str(tmp_path / "out"), "--executor",
                           "serial", "--no-n-plus-one", *extra)
    assert code == 0, output
    return output, json.loads((tmp_path / "out" / "plan.json").read_text())


@pytest.fixture(scope="module")
def planned(tmp_path_factory) -> dict:
    """The generations plan with its report, at the catalog's prices."""
    tmp = tmp_path_factory.mktemp("generations")
    output, plan = plan_cli(tmp, generations_scenario(), "--report", str(tmp / "report"))
    return {"output": output, "plan": plan, "report": tmp / "report", "tmp": tmp}


def test_each_generation_is_planned_and_the_cheapest_per_token_is_recommended(planned):
    plan = planned["plan"]
    gens = plan["generations"]
    entries = {e["gpu"]: e for e in gens["entries"]}
    assert gens["gpus"] == ["h100-sxm", "h200", "gb300"]
    priced = [e for e in gens["entries"] if e["eligible"]]
    cheapest = min(priced, key=lambda e: e["cost_per_million_output_tokens"])
    assert gens["winner"] == gens["by_cost"] == cheapest["gpu"] and not gens["tied"]
    assert plan["recommended"] == cheapest["best"]
    # the gb300 is planned and shown, unpriced: no price is invented
    assert entries["gb300"]["best"] is not None and entries["gb300"]["cost_per_hour"] is None
    assert entries["gb300"]["shortfall"] == UNPRICED and "gb300" not in gens["ranking"]
    # every generation's candidates are in the one ledger, each pool on its generation's GPU
    rows = {c["id"]: c for c in plan["candidates"]}
    for e in gens["entries"]:
        assert set(rows[e["best"]]["gpus"]) == {e["gpu"]}
        assert rows[e["best"]]["cost_per_million_output_tokens"] == (
            e["cost_per_million_output_tokens"])
    assert plan["num_simulations"] == sum(e["num_simulations"] for e in gens["entries"])
    # each generation's best gets its own launch line, on its own GPU
    for e in gens["entries"]:
        assert e["serve_commands"] and all(f"on {e['gpu']}," in line
                                           for line in e["serve_commands"])
    assert plan["serve_commands"] == entries[gens["winner"]]["serve_commands"]


def test_the_printout_and_plan_json_name_the_same_generation(planned):
    plan, output = planned["plan"], planned["output"]
    gens = plan["generations"]
    lines = {line.split()[0]: line for line in output.splitlines()
             if line.startswith("  ") and line.split() and line.split()[0] in gens["gpus"]}
    winner = next(e for e in gens["entries"] if e["gpu"] == gens["winner"])
    assert f"${winner['cost_per_million_output_tokens']:,.3f}" in lines[gens["winner"]]
    assert lines[gens["winner"]].rstrip().endswith("recommended")
    assert lines["gb300"].rstrip().endswith("unpriced")
    assert plan["short_answer"][0].startswith(f"Deploy {winner['label']} on")
    assert f"within {gens['winner']} as the most goodput per GPU" in plan["chosen_by"]
    assert "the least of the generations compared" in plan["short_answer"][2]
    for gpu in gens["gpus"]:
        if gpu != gens["winner"]:
            assert f"{gpu}'s best, launched:" in output


def test_the_winner_flips_when_the_dearer_generation_gets_cheaper(planned, tmp_path):
    """The same plan with the loser's price cut until its tokens are the cheaper: the
    simulations are the same (a price moves no layout within a generation), the name flips."""
    gens = planned["plan"]["generations"]
    entries = {e["gpu"]: e for e in gens["entries"]}
    winner, loser = gens["winner"], next(g for g in gens["ranking"] if g != gens["winner"])
    w, lo = entries[winner], entries[loser]
    # the loser's price at which its tokens cost 30 % less than the winner's
    cut = (0.7 * w["cost_per_million_output_tokens"] / lo["cost_per_million_output_tokens"]
           * lo["price_usd_per_gpu_hour"])
    _, again = plan_cli(tmp_path, generations_scenario(
        prices_usd_per_gpu_hour={loser: round(cut, 2)}), "--no-report")
    flipped = again["generations"]
    assert flipped["winner"] == loser and flipped["ranking"][0] == loser
    assert again["recommended"] == lo["best"]
    moved = {e["gpu"]: e for e in flipped["entries"]}
    assert moved[loser]["goodput_per_s"] == lo["goodput_per_s"]  # the same simulations
    assert moved[winner]["cost_per_million_output_tokens"] == w["cost_per_million_output_tokens"]


def test_the_report_shows_the_generations_side_by_side_and_its_figure_agrees(planned):
    plan = planned["plan"]
    gens = plan["generations"]
    markdown = (planned["report"] / "report.md").read_text()
    table = next(t for t in markdown_tables(markdown) if t[0][0] == "GPU")
    rows = {row[0]: dict(zip(table[0], row, strict=True)) for row in table[1:]}
    number = {c["id"]: i + 1 for i, c in enumerate(plan["candidates"])}
    for e in gens["entries"]:
        row = rows[e["gpu"]]
        assert row["best layout"] == e["label"] and row["#"] == f"#{number[e['best']]}"
        cost = e["cost_per_million_output_tokens"]
        assert row["$/1M output tokens [95% CI]"].startswith(
            "-" if cost is None else f"${cost:,.3f}")
    assert rows[gens["winner"]]["verdict"] == "recommended"
    assert rows["gb300"]["$ per GPU-hour"] == "unpriced"
    caption = next(c for c in re.findall(r"^\*Figure \d+\. (.+)\*$", markdown, re.M)
                   if c.startswith("Every simulated candidate of each priced GPU generation"))
    winner = next(e for e in gens["entries"] if e["gpu"] == gens["winner"])
    assert (f"Here the recommendation, #{number[winner['best']]} ({gens['winner']}), costs "
            f"${winner['cost_per_million_output_tokens']:,.3f} per 1M output tokens") in caption
    for e in gens["entries"]:
        if e["eligible"] and e["gpu"] != gens["winner"]:
            cost = e["cost_per_million_output_tokens"]
            assert f"#{number[e['best']]} ({e['gpu']}) ${cost:,.3f}" in caption
    assert caption.endswith("Not drawn: gb300, unpriced.")
    assert (planned["report"] / "fig01-generations.png").exists()


def test_the_generations_report_fits_1280_px_in_headless_chromium(planned, tmp_path):
    driver, profile = _chromium()
    try:
        driver.set_window_size(1280, 1000)
        driver.get((planned["report"] / "report.html").resolve().as_uri())
        page = driver.execute_script(
            "const d = document.documentElement; return [d.scrollWidth, d.clientWidth]")
        tables = driver.execute_script(
            "return Array.from(document.querySelectorAll('table')).map(t => {"
            "  const box = t.parentElement;"
            "  return [t.getBoundingClientRect().width, box.clientWidth,"
            "          getComputedStyle(box).overflowX, box.getBoundingClientRect().right]; })")
        images = driver.execute_script(
            "return Array.from(document.images).map(i => [i.complete, i.naturalWidth, i.alt])")
        captions = driver.execute_script(
            "return Array.from(document.querySelectorAll('figcaption'))"
            ".map(c => c.textContent)")
        errors = [entry for entry in driver.get_log("browser")
                  if entry["level"] in ("SEVERE", "WARNING")]
        height = driver.execute_script("return document.body.scrollHeight")
        driver.set_window_size(1280, min(height + 150, 16000))
        shot = tmp_path / "report-generations-1280.png"
        assert driver.save_screenshot(str(shot))
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
    scroll_width, client_width = page
    assert scroll_width <= client_width, page
    for table_width, box_width, overflow, right in tables:
        assert right <= client_width
        assert table_width <= box_width + 1 or overflow in ("auto", "scroll"), tables
    assert errors == [] and all(complete and width > 0 for complete, width, _ in images)
    assert any(alt.startswith("Cost per 1M output tokens against interactivity")
               for _, _, alt in images)
    assert any("Here the recommendation" in c for c in captions)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(shot, SCREENSHOTS / shot.name)


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize(("plan", "message"), [
    ({"gpus": ["h100-sxm", "b400"]}, "plan.gpus[1]: unknown GPU 'b400'; known: "),
    ({"gpus": ["h200", "gb300"], "objective": "min_cost", "target_rate_per_s": 5},
     "plan.gpus[1]: gb300 has no price, and min_cost ranks by cost: set "
     "plan.prices_usd_per_gpu_hour.gb300"),
    ({"gpus": ["gb300"]}, "plan.gpus: none of gb300 has a price, and the generations are "
     "ranked by cost per token"),
    ({"gpus": ["h200", "h200"]}, "plan.gpus: GPUs repeat: ['h200', 'h200']"),
    ({"gpus": ["h200"], "colocated": {"gpus": ["h100-sxm"]}},
     "plan: gpus (the generations to compare) and colocated.gpus (a pool's GPU choices "
     "within one plan): give one of them"),
])
def test_bad_generations_are_one_line_and_exit_2(tmp_path, plan, message):
    data = generations_scenario()
    data["plan"] = {**data["plan"], **plan}
    path = write_scenario(tmp_path, data)
    code, output = run_cli("plan", str(path), "--out", str(tmp_path / "out"), "--no-report")
    assert code == 2, output
    assert output.startswith(f"{path}: {message}"), output
    assert len(output.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


# ------------------------------------------------------------------ the shipped scenario
@pytest.mark.slow
def test_the_shipped_generations_plan_names_a_cheapest_generation(tmp_path):
    path = ROOT / "scenarios" / "gpt_oss_120b_generations_plan.yaml"
    code, output = run_cli("plan", str(path), "--out", str(tmp_path / "out"), "--no-report")
    assert code == 0, output
    plan = json.loads((tmp_path / "out" / "plan.json").read_text())
    gens = plan["generations"]
    assert gens["gpus"] == ["h100-sxm", "h200", "b200"] and gens["winner"] in gens["gpus"]
    entries = {e["gpu"]: e for e in gens["entries"]}
    named = entries[gens["winner"]]
    assert plan["recommended"] == named["best"]
    assert all(e["best"] is not None for e in gens["entries"])
    for e in gens["entries"]:  # each carries the target at the fewest dollars an hour
        assert e["operating_rate_per_s"] == 12.0 and e["eligible"]
        if not gens["tied"]:
            assert (named["cost_per_million_output_tokens"]
                    <= e["cost_per_million_output_tokens"])


def test_sized_to_the_target_the_answer_says_who_carries_it_for_less_an_hour(summary):
    # min_cost: each generation's best carries the target; h200's one GPU has the more
    # capacity per dollar at goodput, h100-sxm's costs less an hour at the target
    h100 = best("h100-sxm", summary, 16.0, 16.2)
    h200 = best("h200", summary, 40.0, 40.5)
    gens = compare([generation("h100-sxm", h100, 2.69), generation("h200", h200, 4.50)],
                   "min_cost", 0.02)
    assert gens.winner == "h200"
    assert ("At the target rate, which each generation's best carries, h100-sxm's costs less "
            "an hour ($2.69/h against $4.50/h)") in sentence(gens)
    assert "At the target rate" not in sentence(replace(gens, objective="max_goodput_per_gpu"))


def test_a_plan_no_generation_qualifies_for_ends_without_one_and_says_why(summary):
    short = best("h100-sxm", summary, 9.0, 9.5)
    why = ("its best, 1 x h100-sxm TP1, carries 9.00 req/s on its lowest draw, short of the "
           "target 12 req/s")
    gens = compare([replace(generation("h100-sxm", short, 2.69), shortfall=why),
                    generation("gb300", best("gb300", summary, 40.0), None)],
                   "max_goodput_per_gpu", 0.02)
    assert gens.winner is None and gens.ranking == ()
    plan = PlanResult("s", "max_goodput_per_gpu", "joint", 12.0, 1, 10.0, (0, 1), 0.02, [short],
                      None, None, None, (), "", generations=gens)
    ending = outcome_of(plan)
    assert ending.kind == "no_feasible" and ending.headline.startswith(
        "no GPU generation can be named the cheapest")
    assert ending.reasons == (
        "h100-sxm: its best, 1 x h100-sxm TP1, carries 9.00 req/s on its lowest draw, short of "
        "the target 12 req/s", f"gb300: {UNPRICED}")
    assert sentence(gens).startswith("No generation can be named the cheapest: h100-sxm: ")
