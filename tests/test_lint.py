"""The code stays ruff clean and the core stays free of plotting and Ray imports."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_clean():
    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff not installed (it is in the 'test' extra)")
    result = subprocess.run([ruff, "check", "clustersim", "tests", "benchmarks"], cwd=ROOT,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_core_imports_no_plotting_templates_or_ray():
    code = (
        "import sys, clustersim.sim, clustersim.cli, clustersim.metrics, clustersim.output, "
        "clustersim.plan.planner; "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('matplotlib', 'jinja2', 'ray') "
        "or m.startswith('clustersim.report')]; "
        "print(','.join(sorted(bad)))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, check=True)
    assert out.stdout.strip() == ""


def test_only_the_cli_imports_the_report():
    """The report renders results; nothing the results come from may depend on it."""
    core = ("engine", "cost", "cluster", "workload", "metrics", "plan", "catalog",
            "calibration")
    offenders = [path.relative_to(ROOT) for package in core
                 for path in (ROOT / "clustersim" / package).rglob("*.py")
                 if "clustersim.report" in path.read_text()]
    offenders += [path.relative_to(ROOT) for path in (ROOT / "clustersim").glob("*.py")
                  if "clustersim.report" in path.read_text()]
    assert offenders == []


def test_no_machine_paths_in_tracked_sources():
    machine_paths = ("/" + "work/", "/tmp/" + "bash_")  # spelled apart: this file is scanned too
    for path in [*ROOT.glob("clustersim/**/*.py"), *ROOT.glob("clustersim/**/*.yaml"),
                 *ROOT.glob("scenarios/*.yaml"), ROOT / "README.md", *ROOT.glob("docs/*.md")]:
        if path.exists():
            text = path.read_text()
            assert not any(p in text for p in machine_paths), path
