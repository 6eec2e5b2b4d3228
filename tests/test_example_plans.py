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
