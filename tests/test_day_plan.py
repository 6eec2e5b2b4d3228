"""A plan across a day: the recommendation sized window by window of a daily curve, a fleet
sized for the peak against one scaled per window."""

from __future__ import annotations

import pytest

from clustersim.errors import ConfigError
from clustersim.plan.day import attainment_curve, curve_rates, plan_day, read_attainment
from clustersim.plan.result import CandidateResult, Probe
from clustersim.plan.space import Candidate, PoolChoice
from clustersim.scenario.plan import TrafficCurve
from clustersim.validation import ValidationFailed, validate

PROBES = [(8.0, 0.99), (10.0, 0.97), (11.0, 0.93), (12.0, 0.88), (14.0, 0.6), (16.0, 0.3)]


def _recommended(instances: int = 2, operating: float = 10.0) -> CandidateResult:
    candidate = Candidate("colocated", (PoolChoice("colocated", "h100-sxm", 1, instances),),
                          None, True)
    probes = [Probe(0, rate * instances / 2, att, att, att, att >= 0.9, 1000)
              for rate, att in PROBES]
    return CandidateResult(candidate=candidate, status="simulated", probes=probes,
                           operating_rate_per_s=operating * instances / 2,
                           cost_per_hour=2.0 * instances)


def _day(rates: list[float], **kw) -> object:
    spec = TrafficCurve(rates_per_s=rates, window_s=3600, **kw)
    return plan_day(spec, _recommended(), target=0.9, default_peak=max(rates))


def test_a_flat_day_gives_the_static_answer():
    day = _day([20.0] * 24)
    assert day.unit_gpus == 1 and day.unit_rate_per_s == pytest.approx(5.0)
    assert {w.needed_units for w in day.windows} == {4}
    assert day.autoscaled.gpu_hours == day.static.gpu_hours == 4 * 24
    assert day.autoscaled.attainment == day.static.attainment
    assert day.saving == 0


def test_doubling_every_window_never_needs_fewer_gpu_hours():
    for rates in ([3.0, 9.0, 20.0, 14.0, 6.0], [1.0] * 5 + [30.0], [7.5, 7.6, 7.4]):
        one = _day(rates, peak_rate_per_s=max(rates))
        two = _day([2 * r for r in rates], peak_rate_per_s=2 * max(rates))
        assert two.autoscaled.gpu_hours >= one.autoscaled.gpu_hours
        assert two.static.gpu_hours >= one.static.gpu_hours
        assert all(b.needed_units >= a.needed_units
                   for a, b in zip(one.windows, two.windows, strict=True))


def test_the_peak_window_sets_the_static_fleet_and_quiet_ones_shrink_the_autoscaled():
    day = _day([5.0, 10.0, 40.0, 10.0])
    assert [w.needed_units for w in day.windows] == [1, 2, 8, 2]
    assert day.static.max_gpus == day.static.min_gpus == 8
    assert (day.autoscaled.min_gpus, day.autoscaled.max_gpus) == (1, 8)
    assert day.autoscaled.gpu_hours == 13 and day.static.gpu_hours == 32
    assert day.static.cost_usd == pytest.approx(32 * 2.0)


def test_units_added_late_cost_attainment_in_their_window():
    quick = _day([10.0, 40.0], scale_up_delay_s=0)
    slow = _day([10.0, 40.0], scale_up_delay_s=1800)
    assert quick.windows[1].autoscaled_attainment > slow.windows[1].autoscaled_attainment
    assert slow.windows[0].autoscaled_attainment == quick.windows[0].autoscaled_attainment


def test_attainment_never_rises_with_load():
    curve = attainment_curve([(1.0, 0.9), (2.0, 0.95), (3.0, 0.5), (4.0, 0.6)])
    values = [a for _, a in curve]
    assert values == sorted(values, reverse=True)
    assert read_attainment(curve, 0.1) == curve[0][1]
    assert read_attainment(curve, 99.0) == curve[-1][1]


def test_the_shipped_curve_reads_as_24_hourly_windows():
    name, rates = curve_rates(TrafficCurve(curve="servegen-deepseek-r1"))
    assert name == "servegen-deepseek-r1" and len(rates) == 24
    assert 4 < min(rates) < max(rates) < 43


@pytest.mark.parametrize(("data", "message"), [
    ({}, "give one of curve and rates_per_s"),
    ({"curve": "servegen-deepseek-r1", "rates_per_s": [1.0]},
     "give one of curve and rates_per_s"),
    ({"rates_per_s": [-1.0]}, "greater than or equal to 0"),
])
def test_a_bad_curve_is_one_line(data, message):
    with pytest.raises(ValidationFailed, match=message):
        validate(TrafficCurve, data, "plan.traffic_curve")


def test_a_window_that_does_not_divide_into_the_curve_s_is_refused():
    with pytest.raises(ConfigError, match="not a multiple of the curve's 600 s windows"):
        curve_rates(TrafficCurve(curve="servegen-deepseek-r1", window_s=900))


def test_an_unknown_curve_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="neither a shipped curve"):
        curve_rates(TrafficCurve(curve="no-such-curve"), tmp_path)


@pytest.mark.slow
def test_the_shipped_day_scenario_plans_a_day_and_draws_it(tmp_path):
    import json
    from pathlib import Path

    from tests.helpers import run_cli

    scenario = Path(__file__).resolve().parent.parent / "scenarios" / "qwen7b_a100_day.yaml"
    code, output = run_cli("plan", str(scenario), "--out", str(tmp_path / "out"), "--report",
                           str(tmp_path / "report"), "--no-n-plus-one")
    assert code == 0, output
    assert "a day of servegen-deepseek-r1 traffic" in output
    day = json.loads((tmp_path / "out" / "plan.json").read_text())["day"]
    assert len(day["windows"]) == 24 and day["curve"] == "servegen-deepseek-r1"
    assert day["autoscaled"]["gpu_hours"] < day["static"]["gpu_hours"]
    assert max(w["needed_units"] for w in day["windows"]) * day["unit_gpus"] == (
        day["static"]["max_gpus"])
    report = (tmp_path / "report" / "report.md").read_text()
    assert "## A day of traffic" in report and "-day.png" in report
