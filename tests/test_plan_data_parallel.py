"""The planner searches data-parallel, expert-parallel pools (vLLM --data-parallel-size with
--enable-expert-parallel; SGLang's DP attention with wide EP): their size per instance, the
prefill:decode split of such groups, and the launch commands for them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import run_cli, write_scenario

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"


def moe_plan(model: str = "qwen3-30b-a3b", dps: list[int] | None = None) -> dict:
    return {
        "name": "dp-plan", "seed": 0, "model": model, "gpu": "h100-sxm",
        "tensor_parallel_size": 1, "topology": "dgx-h100",
        "engine": {"max_model_len": 8192},
        "workload": {"kind": "synthetic",
                     "arrivals": {"kind": "poisson", "rate_per_s": 20.0},
                     "lengths": {"kind": "independent",
                                 "prompt_tokens": {"kind": "lognormal", "mean": 1500,
                                                   "cv": 0.8, "low": 32, "high": 6000},
                                 "output_tokens": {"kind": "lognormal", "mean": 300,
                                                   "cv": 0.8, "low": 8, "high": 1500}},
                     "num_requests": 200},
        "slo": {"ttft_s": 1.0, "tpot_s": 0.05},
        "plan": {"objective": "max_goodput_per_gpu", "gpu_budget": 8, "layouts": ["colocated"],
                 "colocated": {"tensor_parallel_sizes": [1],
                               "data_parallel_sizes": dps or [1, 4]},
                 "search": {"seeds": 1}},
    }


def plan(tmp_path: Path, data: dict) -> dict:
    code, output = run_cli("plan", str(write_scenario(tmp_path, data)), "--out",
                           str(tmp_path / "out"), "--no-report", "--no-n-plus-one")
    assert code == 0, output
    return json.loads((tmp_path / "out" / "plan.json").read_text())


def test_a_moe_plan_weighs_data_parallel_groups_against_plain_instances(tmp_path):
    result = plan(tmp_path, moe_plan())
    by_label = {c["label"]: c for c in result["candidates"]}
    assert set(by_label) == {"8 x h100-sxm TP1", "2 x h100-sxm TP1 x DP4 EP"}
    group = by_label["2 x h100-sxm TP1 x DP4 EP"]
    assert group["num_gpus"] == 8 and group["status"] == "simulated"
    assert group["pools"] == [{"role": "colocated", "gpu": "h100-sxm",
                               "tensor_parallel_size": 1, "instances": 2,
                               "data_parallel_size": 4, "enable_expert_parallel": True}]
    assert group["id"].startswith("colocated/C2xh100-sxm-tp1-dp4-ep/")
    if result["recommended"] == group["id"]:
        assert any("--data-parallel-size 4 --enable-expert-parallel" in line
                   for line in result["serve_commands"])


def test_a_dense_model_is_told_to_plan_instances_instead(tmp_path):
    data = moe_plan("qwen2.5-7b-instruct", [4])
    code, output = run_cli("plan", str(write_scenario(tmp_path, data)), "--out",
                           str(tmp_path / "out"), "--no-report", "--no-n-plus-one")
    ledger = (tmp_path / "out" / "ledger.csv").read_text()
    assert "is dense: its data-parallel ranks are instances" in ledger + output


@pytest.mark.slow
def test_the_wide_ep_plan_splits_deepseek_into_groups_across_servers(tmp_path):
    code, output = run_cli("plan", str(SCENARIOS / "deepseek_r1_wide_ep_plan.yaml"), "--out",
                           str(tmp_path / "out"), "--no-report", "--no-n-plus-one")
    assert code == 0, output
    result = json.loads((tmp_path / "out" / "plan.json").read_text())
    pruned = [c for c in result["candidates"] if c["status"] == "pruned"]
    assert pruned and all("TP1 x DP8: deepseek-r1 does not fit" in c["reason"]
                          for c in pruned)
    recommended = next(c for c in result["candidates"] if c["id"] == result["recommended"])
    assert recommended["layout"] == "disaggregated"
    assert all(p["data_parallel_size"] >= 16 for p in recommended["pools"])
    assert sum(line.count("--enable-expert-parallel")
               for line in result["serve_commands"]) == 2
