"""Latency limits past any plausible range (milliseconds typed as seconds) are refused with the
value in milliseconds as a hint, unless the scenario says it means them; the shipped scenarios
and the docs' examples hold none."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from clustersim.errors import ClusterSimError
from clustersim.scenario import load_scenario, parse_scenario
from clustersim.scenario.plausible import implausible_limits
from tests.helpers import run_cli, scenario, write_scenario

ROOT = Path(__file__).resolve().parents[1]
HINT = "If you mean it, set slo.long_limits: true"


def test_ttft_s_2000_is_refused_with_the_milliseconds_hint(tmp_path):
    """A 2-second TTFT limit typed in milliseconds, on the shipped benchmark scenario: refused
    by plan and simulate alike, before any output folder is made."""
    data = yaml.safe_load((ROOT / "scenarios" / "bench_rtx4090_mistral7b.yaml").read_text())
    data["slo"]["ttft_s"] = 2000
    data["plan"] = {"gpu_budget": 4}
    path = write_scenario(tmp_path, data)
    for command in ("plan", "simulate"):
        code, output = run_cli(command, str(path), "--out", str(tmp_path / "out"))
        assert code == 2, output
        assert output.splitlines() == [
            f"{path}: slo.ttft_s: 2000 s is over 10 minutes; did you mean milliseconds "
            f"(ttft_s: 2.0)? {HINT}"]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("slo", "plan", "lines"), [
    ({"tpot_s": 50}, None,
     [f"slo.tpot_s: 50 s a token is over 5 s; did you mean milliseconds (tpot_s: 0.05)? {HINT}"]),
    ({"ttft_s": 0.5, "itl_s": 200}, None,
     ["slo.itl_s: 200 s between two tokens is over 5 s; did you mean milliseconds "
      f"(itl_s: 0.2)? {HINT}"]),
    ({"ttft_s": 700_000, "tpot_s": 6000}, None,  # no hint where milliseconds are too long too
     ["slo.ttft_s: 700000 s is over 10 minutes; if you mean it, set slo.long_limits: true",
      "slo.tpot_s: 6000 s a token is over 5 s; if you mean it, set slo.long_limits: true"]),
    ({"ttft_s": 2.0}, {"handoff_budget_s": 10},
     ["plan.handoff_budget_s: 10 s is longer than slo.ttft_s (2 s), the wait for the first "
      "token that a KV handoff is part of; did you mean milliseconds (handoff_budget_s: "
      f"0.01)? {HINT}"]),
    ({"tpot_s": 0.1}, {"handoff_budget_s": 900},
     [f"plan.handoff_budget_s: 900 s is over 10 minutes; did you mean milliseconds "
      f"(handoff_budget_s: 0.9)? {HINT}"]),
])
def test_each_implausible_limit_is_a_line_of_its_own(slo, plan, lines):
    data = scenario(slo=slo, **({"plan": {"gpu_budget": 1, **plan}} if plan else {}))
    with pytest.raises(ClusterSimError) as refused:
        parse_scenario(data)
    assert refused.value.lines == lines
    parse_scenario(scenario(slo={**slo, "long_limits": True},
                            **({"plan": {"gpu_budget": 1, **plan}} if plan else {})))


def test_the_bounds_themselves_and_the_defaults_pass():
    assert implausible_limits(600.0, 5.0, 5.0, 600.0) == []
    assert implausible_limits(600.001, None, None) != []
    # the default handoff budget (10 ms) is not checked against a tighter TTFT limit
    parse_scenario(scenario(slo={"ttft_s": 0.001}, plan={"gpu_budget": 1}))
    assert implausible_limits(0.001, None, None, 0.01) != []


def test_a_think_time_past_ten_minutes_is_refused_with_why(tmp_path):
    data = scenario(workload={
        "kind": "synthetic", "num_requests": 10,
        "arrivals": {"kind": "closed_loop", "num_users": 4, "think_time_s": 5000},
        "lengths": {"kind": "independent", "prompt_tokens": 100, "output_tokens": 10}})
    code, output = run_cli("simulate", str(write_scenario(tmp_path, data)), "--out",
                           str(tmp_path / "out"))
    assert code == 2
    assert "workload.arrivals.think_time_s: 5,000 s is more than 600 s: a client that waits" in (
        output)
    assert "a pause in milliseconds is that number over 1000" in output


def test_no_shipped_scenario_or_docs_example_trips_the_checks():
    for path in sorted((ROOT / "scenarios").glob("*.yaml")):
        spec = load_scenario(path)
        assert spec.slo is None or not spec.slo.long_limits, path.name
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for block in re.findall(r"```yaml\n(.*?)```", page.read_text(), re.S):
            slo = (yaml.safe_load(block) or {}).get("slo")
            if slo:
                assert implausible_limits(slo.get("ttft_s"), slo.get("tpot_s"),
                                          slo.get("itl_s")) == [], page.name
