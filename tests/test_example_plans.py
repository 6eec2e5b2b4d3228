"""The example plans for the models fleets buy GPUs for run to an answer with the commands to
launch it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import run_cli

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
