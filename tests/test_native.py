"""The compiled core (mypyc, ``setup.py``): used only when built from the sources beside it,
and a run through it is byte for byte the pure Python run."""

from __future__ import annotations

import importlib.machinery
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from clustersim import native

ROOT = Path(__file__).resolve().parents[1]


def test_ci_runs_the_compiled_core():
    """CI installs with a C compiler: the suite there must exercise the compiled modules."""
    if not os.environ.get("CI"):
        pytest.skip(native.status())
    assert native.is_compiled(), native.status()
    import clustersim.engine.scheduler as scheduler

    assert not scheduler.__file__.endswith(".py")


def _fake_build(tmp_path: Path) -> Path:
    """A package tree holding every core module and one other, a compiled file for each core
    module and the group, and the stamp."""
    package_dir = tmp_path / "clustersim"
    for module in (*native.MODULES, "clustersim.cli.plan"):
        source = native.source_path(module, tmp_path)
        source.parent.mkdir(parents=True, exist_ok=True)
        source.write_text(f"# {module}\n")
    for path in native.expected_extensions(package_dir):
        path.write_bytes(b"")
    stamp = {"cache_tag": sys.implementation.cache_tag,
             "sources": native.source_digests(package_dir)}
    (package_dir / native.STAMP).write_text(json.dumps(stamp))
    return package_dir


def test_the_compiled_core_is_used_only_when_built_from_these_sources(tmp_path, monkeypatch):
    monkeypatch.delenv(native.PURE_ENV, raising=False)
    package_dir = _fake_build(tmp_path)
    assert native._why_pure(package_dir) is None

    monkeypatch.setenv(native.PURE_ENV, "1")
    assert native._why_pure(package_dir) == f"{native.PURE_ENV} is set"
    monkeypatch.setenv(native.PURE_ENV, "0")
    assert native._why_pure(package_dir) is None

    # any source: the compiled modules carry the types of the modules they import
    for module in (native.MODULES[3], "clustersim.cli.plan"):
        package_dir = _fake_build(tmp_path)
        edited = native.source_path(module, tmp_path)
        edited.write_text(edited.read_text() + "x = 1\n")
        assert native._why_pure(package_dir) == (
            f"{edited.relative_to(tmp_path).as_posix()} changed since the core was compiled")
    package_dir = _fake_build(tmp_path)
    (package_dir / "new.py").write_text("")
    assert native._why_pure(package_dir) == "clustersim/new.py added since the core was compiled"

    package_dir = _fake_build(tmp_path)
    scheduler = sorted(native.expected_extensions(package_dir))[-1]
    scheduler.unlink()
    assert native._why_pure(package_dir) == (
        f"{scheduler.relative_to(tmp_path).as_posix()} is missing")

    package_dir = _fake_build(tmp_path)
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    (package_dir / "cost" / f"decode_steps{suffix}").write_bytes(b"")  # a module no longer core
    assert native._why_pure(package_dir) == (
        f"clustersim/cost/decode_steps{suffix} is left from another build")

    package_dir = _fake_build(tmp_path)
    (package_dir / native.STAMP).unlink()
    assert native._why_pure(package_dir).startswith("not compiled at install")


def _simulate(scenario: str, out: Path, pure: bool) -> str:
    env = {**os.environ, native.PURE_ENV: "1" if pure else ""}
    done = subprocess.run(
        [sys.executable, "-m", "clustersim", "simulate", str(ROOT / "scenarios" / scenario),
         "--out", str(out), "--steps"],
        capture_output=True, text=True, env=env, cwd=ROOT, check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("scenario", [
    "pd_decode_failure.yaml",  # disaggregated, NIXL flows, a decode instance dying
    "moe_dp_ep_h100.yaml",  # data-parallel MoE ranks in lockstep
    "quickstart_awq.yaml",  # colocated chunked prefill
])
def test_the_compiled_core_writes_the_pure_runs_bytes(scenario, tmp_path):
    if not native.is_compiled():
        pytest.skip(native.status())
    compiled = _simulate(scenario, tmp_path / "compiled", pure=False)
    pure = _simulate(scenario, tmp_path / "pure", pure=True)
    # the printed report names its folder
    assert compiled.replace(str(tmp_path / "compiled"), str(tmp_path / "pure")) == pure
    files = sorted(p.name for p in (tmp_path / "compiled").iterdir())
    assert "requests.csv" in files and "summary.json" in files
    for name in files:
        assert (tmp_path / "compiled" / name).read_bytes() == (
            (tmp_path / "pure" / name).read_bytes()), name


def _event_trace(env) -> list:
    """What SimPy's loop does with: callbacks in order, a stop from inside one, a resumed run,
    and a failure nobody defused."""
    from simpy.core import StopSimulation

    trace: list = []

    def sleeper(name: str, delay: float):
        yield env.timeout(delay)
        trace.append((name, env.now))

    for i, delay in enumerate([2.0, 1.0, 1.0, 3.0]):
        env.process(sleeper(f"p{i}", delay))
    stop = env.timeout(1.5)
    stop.callbacks += [lambda e: trace.append(("before stop", env.now)), StopSimulation.callback,
                       lambda e: trace.append(("after stop", env.now))]
    trace.append(("returned", env.run()))
    trace.append(("returned", env.run()))
    failing = env.event()
    failing.fail(ValueError("boom"))
    try:
        env.run()
    except ValueError as error:
        trace.append(("raised", type(error).__name__, str(error), type(error.__cause__).__name__))
    return trace


def test_the_clocks_own_loop_processes_events_as_simpy_does():
    from simpy import Environment

    from clustersim.engine.clock import Clock

    expected = _event_trace(Environment())
    assert ("after stop", 1.5) in expected and expected[-1][0] == "raised"
    assert _event_trace(Clock()) == expected
