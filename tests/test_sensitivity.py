"""plan.sensitivity: the recommendation's goodput on a KV fabric half and twice as fast, and
its SLO attainment with 20 % more traffic than it is to carry."""

from __future__ import annotations

import json

import pytest

from clustersim.validation import ValidationFailed
from tests.helpers import run_cli, write_scenario
from tests.test_plan import one_gpu_node, plan, scenario


def _split(tmp_path, gbit_per_s: float, sensitivity: list[str]) -> dict:
    return scenario(
        workload={"prompt_tokens": {"kind": "uniform", "low": 2000, "high": 5000}},
        slo={"ttft_s": 1.0, "tpot_s": 0.02},
        plan={"gpu_budget": 2, "layouts": ["disaggregated"],
              "nodes": {"h100-sxm": one_gpu_node(tmp_path, gbit_per_s)},
              "sensitivity": sensitivity})


@pytest.mark.parametrize("gbit_per_s", [10, 25, 100])
def test_halving_the_kv_link_never_raises_a_split_s_goodput(tmp_path, gbit_per_s):
    result = plan(_split(tmp_path, gbit_per_s, ["link"]))
    sens = result.sensitivity
    assert sens is not None and sens.load is None
    half, same, double = sens.link
    assert (half.scale, same.scale, double.scale) == (0.5, 1.0, 2.0)
    assert half.mean_per_s <= same.mean_per_s <= double.mean_per_s
    assert sens.candidate == result.recommended.id


def test_a_slow_link_costs_a_split_goodput_that_a_fast_one_does_not(tmp_path):
    slow = plan(_split(tmp_path, 10, ["link"])).sensitivity.link
    fast = plan(_split(tmp_path, 400, ["link"])).sensitivity.link
    assert slow[0].mean_per_s < slow[1].mean_per_s  # 5 Gbit/s hurts
    assert fast[0].mean_per_s > 0.9 * fast[1].mean_per_s  # 200 Gbit/s hardly does


def test_a_colocated_answer_has_no_link_reading_and_more_load_is_read(tmp_path):
    data = scenario(plan={"gpu_budget": 2, "layouts": ["colocated"],
                          "sensitivity": ["link", "load"]})
    result = plan(data)
    sens = result.sensitivity
    assert sens.link == () and "moves no KV" in sens.notes[0]
    load = sens.load
    assert load.rate_per_s == pytest.approx(1.2 * result.recommended.operating_rate_per_s)
    assert len(load.attainments) == len(result.recommended.goodput.per_seed_per_s)
    assert 0 <= load.num_meeting <= len(load.attainments)


def test_without_sensitivity_the_plan_has_no_reading(tmp_path):
    result = plan(scenario(plan={"gpu_budget": 2, "layouts": ["colocated"]}))
    assert result.sensitivity is None and "sensitivity" not in result.to_json()


def test_the_cli_prints_the_readings_and_writes_them(tmp_path):
    path = write_scenario(tmp_path, _split(tmp_path, 25, ["link", "load"]))
    code, output = run_cli("plan", str(path), "--out", str(tmp_path / "out"), "--executor",
                           "serial", "--report", str(tmp_path / "report"), "--no-n-plus-one")
    assert code == 0, output
    assert "sensitivity of the recommendation:" in output
    assert "KV links at 0.5x / 1x / 2x bandwidth: goodput" in output
    assert "load +20% (" in output
    data = json.loads((tmp_path / "out" / "plan.json").read_text())["sensitivity"]
    assert [r["scale"] for r in data["link"]] == [0.5, 1.0, 2.0]
    report = (tmp_path / "report" / "report.md").read_text()
    assert "## Sensitivity" in report and "-sensitivity.png" in report


def test_a_reading_named_twice_is_one_line():
    from clustersim.scenario import parse_scenario

    with pytest.raises(ValidationFailed, match="readings repeat"):
        parse_scenario(scenario(plan={"gpu_budget": 2, "sensitivity": ["load", "load"]}))
