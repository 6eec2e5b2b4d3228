"""The example plans for the models fleets buy GPUs for run to an answer with the commands to
launch it: the search they ship with, and the launch line of what it found."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.helpers import run_cli, write_scenario

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"


@pytest.mark.slow
def test_the_qwen3_235b_plan_on_h200_answers_with_launch_commands(tmp_path):
    code, output = run_cli("plan", str(SCENARIOS / "qwen3_235b_h200_plan.yaml"), "--out",
                           str(tmp_path / "out"), "--no-report", "--no-n-plus-one")
    assert code == 0, output
    plan = json.loads((tmp_path / "out" / "plan.json").read_text())
    assert plan["recommended"] is not None
    assert {c["status"] for c in plan["candidates"]} == {"simulated"}  # the split has a server
    assert plan["serve_commands"] and all(
        "vllm serve Qwen/Qwen3-235B-A22B" in line and "--quantization fp8" in line
        for line in plan["serve_commands"] if line.startswith("vllm serve"))


def _eagle_plan(tmp_path, narrow: bool) -> tuple[str, dict]:
    path = SCENARIOS / "llama8b_h100_eagle_plan.yaml"
    if narrow:  # one short traffic draw, a coarser bisection: the same search in seconds
        data = yaml.safe_load(path.read_text())
        data["workload"]["num_requests"] = 100
        data["plan"]["search"] = {"seeds": 1, "min_requests": 100, "min_duration_s": 2,
                                  "tolerance": 0.1}
        path = write_scenario(tmp_path, data)
    code, output = run_cli("plan", str(path), "--out", str(tmp_path / "out"), "--no-report",
                           *(("--no-n-plus-one", "--executor", "serial") if narrow else ()))
    assert code == 0, output
    return output, json.loads((tmp_path / "out" / "plan.json").read_text())


@pytest.mark.parametrize("narrow", [True, pytest.param(False, marks=pytest.mark.slow)])
def test_the_eagle_plan_searches_drafts_on_and_off_and_launches_the_winner(tmp_path, narrow):
    output, plan = _eagle_plan(tmp_path, narrow)
    drafts = {c["id"]: c.get("speculative") for c in plan["candidates"]}
    assert sorted(drafts.values(), key=str) == [
        None, {"method": "eagle", "num_speculative_tokens": 3, "acceptance_rate": 0.63}]
    assert all(c["status"] == "simulated" for c in plan["candidates"])
    assert drafts[plan["recommended"]] is not None  # TPOT 10 ms: the drafts carry more traffic
    assert " x h100-sxm TP1, eagle k3 (acceptance 0.63)" in output
    serve = [line for line in plan["serve_commands"] if line.startswith("vllm serve")]
    assert len(serve) == 1 and (
        """--speculative-config '{"method": "eagle", "num_speculative_tokens": 3, "model": """
        """"<your EAGLE draft head>"}'""" in serve[0])
    assert serve[0] in output


def _trimmed(name: str, tmp_path: Path, **plan) -> Path:
    """A shipped plan with a smaller search (fewer choices, shorter draws): the same question,
    answered in a test's time."""
    data = yaml.safe_load((SCENARIOS / name).read_text())
    data["workload"]["num_requests"] = 400
    data["plan"].update(plan)
    return write_scenario(tmp_path, data)


@pytest.mark.slow
def test_the_rag_fleet_that_must_survive_an_instance_loss_answers_with_a_survivor(tmp_path):
    """llama70b_rag_n_plus_one (TP4 pools only, two short draws): the cheapest candidates lose
    their SLO with an instance lost; the answer is the cheapest that keeps it, judged on every
    draw, named alike in the printout, plan.json and the report."""
    path = _trimmed("llama70b_rag_n_plus_one.yaml", tmp_path,
                    colocated={"tensor_parallel_sizes": [4]},
                    prefill={"tensor_parallel_sizes": [4]},
                    decode={"tensor_parallel_sizes": [4]},
                    search={"seeds": 2, "min_requests": 400, "min_duration_s": 20,
                            "tolerance": 0.05})
    code, output = run_cli("plan", str(path), "--out", str(tmp_path / "out"), "--report",
                           str(tmp_path / "report"))
    assert code == 0, output
    plan = json.loads((tmp_path / "out" / "plan.json").read_text())
    survival = plan["survival"]
    rows = {c["id"]: c for c in plan["candidates"]}
    rec = rows[plan["recommended"]]
    assert survival["met"] and survival["survivor"] == plan["recommended"]
    assert survival["unconstrained"] != plan["recommended"] and survival["failed"]
    assert len(rec["goodput"]["per_seed_per_s"]) == 2  # judged on every draw
    assert plan["n_plus_one"]["instance"]["holds"]
    cheaper = rows[survival["unconstrained"]]
    assert cheaper["cost_per_hour"] < rec["cost_per_hour"]
    label = rec["label"]
    report = (tmp_path / "report" / "report.md").read_text()
    assert f"Deploy {label}" in output and label in report
    assert "The plan requires surviving one instance lost" in output


@pytest.mark.slow
def test_the_deepseek_plan_loses_a_data_parallel_group_whole(tmp_path):
    """deepseek_r1_h200_plan (one split shape, one draw, a lower target): its N+1 check loses
    the decode pool's DP16 group, all 16 GPUs of it, and prices a spare at all of them."""
    path = _trimmed("deepseek_r1_h200_plan.yaml", tmp_path, layouts=["disaggregated"],
                    target_rate_per_s=3.0,
                    prefill={"tensor_parallel_sizes": [1], "data_parallel_sizes": [8]},
                    decode={"tensor_parallel_sizes": [1], "data_parallel_sizes": [16]},
                    search={"seeds": 1, "min_requests": 300, "min_duration_s": 10,
                            "tolerance": 0.1, "neighbours": False})
    code, output = run_cli("plan", str(path), "--out", str(tmp_path / "out"), "--no-report")
    assert code == 0, output
    plan = json.loads((tmp_path / "out" / "plan.json").read_text())
    lost = plan["n_plus_one"]["instance"]
    assert lost["lost"] == "decode-0" and lost["gpus"] == {"h200": 16}
    price = plan["prices"]["h200"]["usd_per_gpu_hour"]
    assert lost["spare_cost_per_hour"] == pytest.approx(16 * price)
    assert "lose decode-0 (16 h200)" in output


@pytest.mark.slow
def test_the_fp4_plan_prices_nvl72_racks_beside_hgx_servers(tmp_path):
    """deepseek_r1_fp4_nvl72_plan (a shorter draw, a lower target): its candidates put the
    NVFP4 checkpoint's expert-parallel groups on GB200 NVL72 racks, HGX B200 and HGX H200
    servers, and the answer launches the FP4 checkpoint."""
    path = _trimmed("deepseek_r1_fp4_nvl72_plan.yaml", tmp_path, target_rate_per_s=10.0,
                    search={"seeds": 1, "min_requests": 300, "min_duration_s": 10,
                            "tolerance": 0.1, "neighbours": False, "simulate_top": 2})
    code, output = run_cli("plan", str(path), "--out", str(tmp_path / "out"), "--no-report",
                           "--no-n-plus-one")
    assert code == 0, output
    plan = json.loads((tmp_path / "out" / "plan.json").read_text())
    assert plan["recommended"] is not None
    labels = " ".join(c["label"] for c in plan["candidates"])
    for gpu in ("gb200 TP1 x DP8 EP", "b200 TP1 x DP8 EP", "h200 TP1 x DP16 EP"):
        assert gpu in labels
    serve = [line for line in plan["serve_commands"] if line.startswith("vllm serve")]
    assert serve and all("vllm serve nvidia/DeepSeek-R1-FP4" in line
                         and "--enable-expert-parallel" in line
                         and "--kv-cache-dtype fp8" in line for line in serve)
