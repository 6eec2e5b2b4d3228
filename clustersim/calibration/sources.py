"""Where the shipped calibration and validation data live, and which files each side reads.

The split is the point: the fit reads only ``FIT_FILES`` (kernel and collective profiles),
validation reads only ``VALIDATION_FILES`` (measured end-to-end latencies). A test spies on the
files the calibration opens and checks none is a validation file.
"""

from __future__ import annotations

from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent.parent / "data" / "calibration"
FIT_DIR = DATA_DIR / "fit"
VALIDATION_DIR = DATA_DIR / "validation"

SPLITWISE_FILE = VALIDATION_DIR / "splitwise" / "perf_model.csv"
VLLM_RUNS_DIR = VALIDATION_DIR / "llmservingsim"


def fit_files() -> list[Path]:
    """Every file the shipped calibration may read."""
    return sorted(p for p in FIT_DIR.rglob("*") if p.is_file() and not p.name.startswith("LICENSE"))


def validation_files() -> list[Path]:
    """Every file validation scores against."""
    return sorted(p for p in VALIDATION_DIR.rglob("*") if p.is_file())
