"""The README and docs/: their scenario examples are valid scenarios (they are what users copy
first), their links resolve, and the catalog ids they list are the catalog's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from clustersim.scenario import parse_scenario

ROOT = Path(__file__).resolve().parents[1]


DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def yaml_blocks() -> list[dict]:
    """The YAML examples of the planning and scenario pages, in reading order."""
    text = "".join((ROOT / "docs" / name).read_text() for name in ("planning.md", "scenarios.md"))
    return [yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", text, re.S)]


def _anchors(text: str) -> set[str]:
    found, in_code = set(), False
    for line in text.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and (m := re.match(r"#+ (.*)", line)):
            title = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower())
            found.add(title.replace(" ", "-"))
    return found


@pytest.mark.parametrize("page", DOCS, ids=lambda p: p.name)
def test_every_link_of_the_docs_resolves(page):
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if target.startswith(("http://", "https://")):
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        assert file.exists(), f"{page.name}: {target}"
        if anchor:
            assert anchor in _anchors(file.read_text()), f"{page.name}: {target}"


def test_every_catalog_id_is_listed_in_the_docs():
    from clustersim.catalog import gpu_ids, model_ids

    text = "".join(page.read_text() for page in DOCS)
    for catalog_id in [*gpu_ids(), *model_ids()]:
        assert f"`{catalog_id}`" in text, catalog_id


def test_the_readme_is_a_front_door():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 250


def test_readme_scenario_and_layout_examples_validate():
    plan, _, scenario, layout, _ = yaml_blocks()
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


def test_the_generations_example_is_the_shipped_generations_plan():
    generations = yaml_blocks()[1]
    shipped = yaml.safe_load(
        (ROOT / "scenarios" / "gpt_oss_120b_generations_plan.yaml").read_text())
    parsed = parse_scenario({**shipped, "plan": {**shipped["plan"], **generations["plan"]}})
    assert parsed.plan is not None and parsed.plan.gpus == ["h100-sxm", "h200", "b200"]
    assert {k: v for k, v in generations["plan"].items()} == {
        k: v for k, v in shipped["plan"].items() if k != "search"}


def test_readme_quick_start_runs_the_plan():
    text = (ROOT / "README.md").read_text()
    block = re.search(r"## Quick start.*?```bash\n(.*?)```", text, re.S).group(1)
    assert block.splitlines() == ["pip install -e . && clustersim plan scenarios/quickstart.yaml",
                                  "pip install -e '.[test]' && python -m pytest"]


def test_readme_faults_example_validates_on_the_layout_example():
    _, _, scenario, layout, faults = yaml_blocks()
    layout["layout"]["kv_transfer"].update(faults["layout"]["kv_transfer"])
    parsed = parse_scenario({**scenario, **layout, "faults": faults["faults"]})
    assert [e.kind for e in parsed.faults.events] == ["instance", "node", "link", "link"]
    assert parsed.faults.client.max_retries == 2
    assert parsed.layout.kv_transfer.kv_load_failure_policy == "fail"
