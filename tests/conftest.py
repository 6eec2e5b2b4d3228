"""Fixtures shared by test modules: the full calibration fit, run once per session."""

from __future__ import annotations

import builtins
import copy
from pathlib import Path

import pandas as pd
import pytest


@pytest.fixture(scope="session")
def calibration_run() -> tuple[dict[str, dict[str, dict]], list[Path]]:
    """Both fit sets as ``calibrate_sets`` computes them, with every path the fit (and the
    DistServe cross-check ``calibrate`` prints) opened on the way. The fit takes about a
    minute and a half on one core: the tests that read it, or run ``clustersim calibrate``
    to check what it writes and where, share this one run."""
    from clustersim.calibration import fit as fit_module
    from clustersim.calibration.fitsets import calibrate_sets, shipped_profiles

    opened: list[Path] = []

    def spy_read_csv(path, *args, **kwargs):
        opened.append(Path(path))
        return pd.read_csv(path, *args, **kwargs)

    real_open = builtins.open
    real_read_text = Path.read_text

    def spy_open(file, *args, **kwargs):
        if isinstance(file, (str, Path)):
            opened.append(Path(file))
        return real_open(file, *args, **kwargs)

    def spy_read_text(self, *args, **kwargs):
        opened.append(self)
        return real_read_text(self, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(builtins, "open", spy_open)
        patch.setattr(Path, "read_text", spy_read_text)
        sets = calibrate_sets(read=spy_read_csv)
        fit_module.distserve_check(shipped_profiles(sets))
    return sets, opened


@pytest.fixture
def fit_once(monkeypatch, calibration_run):
    """``clustersim calibrate`` answers from the session's one fit (a fresh copy per call)."""
    from clustersim.calibration import fitsets

    sets, _ = calibration_run
    monkeypatch.setattr(fitsets, "calibrate_sets", lambda *a, **k: copy.deepcopy(sets))
