"""The README's scenario examples are valid scenarios (they are what users copy first)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from clustersim.scenario import parse_scenario

ROOT = Path(__file__).resolve().parents[1]


def yaml_blocks() -> list[dict]:
    text = (ROOT / "README.md").read_text()
    return [yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", text, re.S)]


def test_readme_scenario_and_layout_examples_validate():
    plan, scenario, layout, _ = yaml_blocks()
    parsed = parse_scenario(scenario)
    assert parsed.workload.kind == "replay"
    split = parse_scenario({**scenario, **layout})
    assert split.layout is not None and split.layout.kind == "disaggregated"
    assert split.topology == "dgx-h100-x2"


def test_readme_plan_example_validates_on_the_quickstart_scenario():
    plan = yaml_blocks()[0]
    quickstart = yaml.safe_load((ROOT / "scenarios" / "quickstart.yaml").read_text())
    parsed = parse_scenario({**quickstart, **plan})
    assert parsed.plan is not None and parsed.plan.gpu_budget == 4
    assert parsed.slo.criterion == "joint" and parsed.slo.itl_s == 0.5


def test_readme_quick_start_runs_the_plan():
    text = (ROOT / "README.md").read_text()
    block = re.search(r"## Quick start.*?```bash\n(.*?)```", text, re.S).group(1)
    assert block.splitlines() == ["pip install -e . && clustersim plan scenarios/quickstart.yaml",
                                  "pip install -e '.[test]' && python -m pytest"]


def test_readme_faults_example_validates_on_the_layout_example():
    _, scenario, layout, faults = yaml_blocks()
    layout["layout"]["kv_transfer"].update(faults["layout"]["kv_transfer"])
    parsed = parse_scenario({**scenario, **layout, "faults": faults["faults"]})
    assert [e.kind for e in parsed.faults.events] == ["instance", "node", "link", "link"]
    assert parsed.faults.client.max_retries == 2
    assert parsed.layout.kv_transfer.kv_load_failure_policy == "fail"
