"""The reference pages generated from the code (docs/scenario-reference.md from the schema,
docs/commands.md from the help) are committed as the code makes them now, on any terminal."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import get_args

import pytest
import typer.main
from pydantic import BaseModel

from clustersim.cli import app
from clustersim.cli.reference import PAGES, REGENERATE, commands_page, pages, scenario_page
from tests.helpers import run_cli

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def root_command():
    return typer.main.get_command(app)


@pytest.mark.parametrize("name", sorted(PAGES))
def test_the_generated_page_is_committed_as_the_code_makes_it(name):
    committed = DOCS / name
    generated = pages(root_command())[name]
    assert committed.is_file(), (
        f"docs/{name} is missing: run `{REGENERATE}` from the repository root")
    assert committed.read_text(encoding="utf-8") == generated, (
        f"docs/{name} is stale (a field, a description or a command changed): run "
        f"`{REGENERATE}` from the repository root and commit the page")


def test_the_help_does_not_depend_on_the_terminal(monkeypatch):
    """A narrow terminal, or one Rich would colour, renders the same page."""
    wide = commands_page(root_command())
    monkeypatch.setenv("COLUMNS", "40")
    monkeypatch.setenv("TERMINAL_WIDTH", "40")
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setattr(shutil, "get_terminal_size", lambda *a, **k: (40, 20))
    narrow = commands_page(root_command())
    assert narrow == wide
    assert "\x1b[" not in wide and "╭" not in wide  # no colour codes, no Rich boxes


def test_every_command_has_its_help_on_the_page():
    text = (DOCS / "commands.md").read_text(encoding="utf-8")
    for name in root_command().commands:
        assert f"## clustersim {name}\n" in text, name
    for name in ("catalog", "docs", "trace stats", "trace list"):
        assert f"Usage: clustersim {name} [OPTIONS]" in text, name


def _models(model: type[BaseModel], seen: list[type[BaseModel]]) -> list[type[BaseModel]]:
    """Every model reachable from ``model`` through its fields' types (walked here, apart
    from the generator's own walk)."""
    def inside(annotation) -> list[type[BaseModel]]:
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            return [annotation]
        return [m for arg in get_args(annotation) for m in inside(arg)]

    seen.append(model)
    for info in model.model_fields.values():
        for child in inside(info.annotation):
            if child not in seen:
                _models(child, seen)
    return seen


def test_every_field_of_every_model_is_in_the_scenario_reference():
    from clustersim.cluster.topology_spec import TopologySpec
    from clustersim.scenario import Scenario

    text = scenario_page()
    for root in (Scenario, TopologySpec):
        for model in _models(root, []):
            section = text.split(f"\n## {model.__name__}\n", 1)[1].split("\n## ", 1)[0]
            for name, info in model.model_fields.items():
                assert f"\n| `{info.alias or name}` |" in section, (model.__name__, name)


def test_the_scenario_reference_gives_types_defaults_and_limits():
    rows: dict[str, str] = {}  # each field's first row: the scenario's own, then engine's
    for line in scenario_page().splitlines():
        if line.startswith("| `"):
            rows.setdefault(line.split(" | ")[0].strip("| `"), line)
    assert "| integer | `1` | > 0, <= 72 |" in rows["tensor_parallel_size"]
    assert "| number | `null` | > 0, <= 1 |" in rows["gpu_memory_utilization"]
    assert ("| text | required | at most 100 characters, matches `^[A-Za-z0-9_.-]+$` |"
            in rows["name"])
    assert "by `kind:` [`explicit`](#explicitworkload)" in rows["workload"]
    assert "[`fixed`](#fixedcost) | `{kind: roofline}` |" in rows["cost"]
    assert "| 1 to 64 items, each item > 0, each item <= 72 |" in rows["tensor_parallel_sizes"]


def test_every_catalog_id_is_in_the_scenario_reference():
    from clustersim.catalog import gpu_ids, model_ids

    text = scenario_page()
    for catalog_id in [*model_ids(), *gpu_ids()]:
        assert f"`{catalog_id}`" in text, catalog_id


def test_docs_says_which_pages_are_stale_and_writes_them(tmp_path):
    code, output = run_cli("docs", "--folder", str(tmp_path), "--check")
    assert code == 1
    assert f"{tmp_path / 'commands.md'}: missing" in output and REGENERATE in output
    (tmp_path / "commands.md").write_text("old\n")
    code, output = run_cli("docs", "--folder", str(tmp_path))
    assert code == 0 and f"{tmp_path / 'commands.md'}: stale" in output
    code, output = run_cli("docs", "--folder", str(tmp_path), "--write")
    assert code == 0, output
    assert output.count(": written") == len(PAGES)
    for name, text in pages(root_command()).items():
        assert (tmp_path / name).read_text(encoding="utf-8") == text
    code, output = run_cli("docs", "--folder", str(tmp_path), "--check")
    assert code == 0 and output.count(": current") == len(PAGES)


def test_docs_refuses_a_missing_folder_and_both_modes(tmp_path):
    code, output = run_cli("docs", "--folder", str(tmp_path / "nope"), "--write")
    assert code == 2 and output.startswith(f"{tmp_path / 'nope'}: no such folder")
    code, output = run_cli("docs", "--write", "--check")
    assert code == 2 and output.strip() == "--check: give --write or --check, not both"
