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
    scenario, layout = yaml_blocks()
    parsed = parse_scenario(scenario)
    assert parsed.workload.kind == "replay"
    split = parse_scenario({**scenario, **layout})
    assert split.layout is not None and split.layout.kind == "disaggregated"
    assert split.topology == "dgx-h100-x2"
