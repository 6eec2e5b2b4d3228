"""Both fit sets on every validation set, part by part, and the rule that picks the shipped one.

``validate_fits`` scores the ``vidur`` (fit-v1) and ``aiconfigurator`` (fit-v2) profiles on
Splitwise, the four vLLM runs and the TP2 kernel cross-check. ``part_scores`` starts from
fit-v1 and swaps in one group of fit-v2's fields at a time (``PARTS``), so each new part's
effect on the validation data shows on its own. ``ship_scores`` computes ``COMPARE_RULE``'s
score per GPU: which set does better on its held-out data, reported beside the shipped choice
(``fitsets.SHIPPED``), which it does not make.

Validation data only is scored here; nothing here is fitted on it (a three-point few-shot fit
is part of what is scored, as everywhere in ``clustersim validate``).
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from clustersim.calibration.aiconfigurator import LINK_FIELDS
from clustersim.calibration.holdout import HeldOutScore, held_out_scores
from clustersim.calibration.silicon import RowScore
from clustersim.calibration.silicon import score as silicon_scores
from clustersim.calibration.splitwise import HARDWARE, GroupScore, validate_splitwise
from clustersim.calibration.tp_check import StepCheck, decode_step_checks
from clustersim.calibration.vllm_runs import (
    METRICS,
    RUNS,
    STATS,
    RunScore,
    score_run,
    validate_vllm_runs,
)
from clustersim.catalog import load_profiles

FITS = ("vidur", "aiconfigurator")
"""The fit sets, before (fit-v1) and after (fit-v2)."""
PARTS: dict[str, tuple[str, ...]] = {
    "GEMM floor and small-M roofline": ("compute_efficiency", "memory_efficiency",
                                        "compute_half_tokens", "gemm_floor_s"),
    "prefill attention by keys per query": ("attention_efficiency", "attention_half_keys"),
    "decode attention by context, attention floor": (
        "decode_attention_memory_efficiency", "decode_attention_half_tokens",
        "attention_floor_s"),
    "collectives: NCCL refit, vLLM custom all-reduce": LINK_FIELDS,
    "fused MoE kernel": ("moe_gemm",),
}
"""Each new part of fit-v2: the profile fields it sets."""
MISS_RUNS = ("RTXPRO6000_Qwen3-32B", "RTXPRO6000_Qwen3-30B-A3B-Instruct-2507")
"""The two misses left from fit-v1's round: the TP2 run's TPOT, the MoE run's TTFT."""
COMPARE_RULE = (
    "per measured GPU, the mean error of each fit on its held-out data: on the vLLM "
    "serving runs (the engine clustersim models), the zero-shot MAPE over TTFT, TPOT and E2E; on "
    "Splitwise (a 2023 stack whose per-step overhead no kernel table measures, so that only its "
    "three-point few-shot fit compares the kernels), the few-shot prefill and decode MAPE"
)
_SPLITWISE_GPUS = sorted(set(HARDWARE.values()))


@dataclass(frozen=True)
class Validation:
    """Every score ``clustersim validate`` prints: both fits on every validation set."""

    splitwise: list[GroupScore]
    runs: list[RunScore]
    tp_checks: dict[str, list[StepCheck]]
    parts: list[PartScore]
    silicon: dict[str, list[RowScore]] = field(default_factory=dict)
    """Per fit: the calibration rows the host time is fitted on (not held out)."""
    held_out: list[HeldOutScore] = field(default_factory=list)
    """fit-v2's kernel fits on each aiconfigurator GPU, refitted without every fifth token
    count and scored on it (calibration data: ``clustersim.calibration.holdout``)."""


@dataclass(frozen=True)
class PartScore:
    """fit-v1 with one part of fit-v2 (``part``; ``fit-v1`` and ``fit-v2`` for the ends)."""

    part: str
    run_errors: dict[str, dict[str, float]]
    """run -> metric -> signed error (%) of the simulated mean, zero-shot."""
    splitwise: dict[str, dict[str, float]]
    """GPU -> zero-/few-shot prefill/decode mean MAPE (%) over its Splitwise groups."""


def validate_fits(with_parts: bool = True) -> Validation:
    """Score both fit sets (and, with ``with_parts``, fit-v1 with each part of fit-v2)."""
    splitwise = [s for fit in FITS for s in validate_splitwise(profile=fit)]
    runs = [s for fit in FITS for s in validate_vllm_runs(profile=fit)]
    checks = {fit: decode_step_checks(profile=fit) for fit in FITS}
    silicon = {fit: silicon_scores(fit) for fit in FITS}
    return Validation(splitwise, runs, checks, part_scores() if with_parts else [], silicon,
                      held_out_scores())


def part_scores() -> list[PartScore]:
    """fit-v1, fit-v1 with each of ``PARTS`` from fit-v2, and fit-v2: the two misses' runs
    zero-shot and Splitwise's mean MAPEs."""
    v1, v2 = load_profiles("vidur"), load_profiles("aiconfigurator")
    variants: list[tuple[str, dict[str, dict]]] = [("fit-v1", v1)]
    for part, fields in PARTS.items():
        variants.append((part, {gpu: _with_part(entry, v2.get(gpu, {}), fields)
                                for gpu, entry in v1.items()}))
    variants.append(("fit-v2", v2))
    scores = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, (label, profiles) in enumerate(variants):
            path = Path(tmp) / f"variant{i}.yaml"
            path.write_text(yaml.safe_dump({"profiles": profiles}), encoding="utf-8")
            runs = {run: score_run(run, profile=str(path)) for run in MISS_RUNS}
            errors = {run: {m: s.error_pct(m, "mean") for m in METRICS} for run, s in runs.items()}
            scores.append(PartScore(label, errors, splitwise_means(
                validate_splitwise(profile=str(path)))))
    return scores


def _with_part(v1: dict, v2: dict, fields: Sequence[str]) -> dict:
    """``v1``'s entry with ``fields`` as fit-v2 sets them (absent there: fit-v1's default)."""
    entry = {k: v for k, v in v1.items() if k not in fields}
    entry.update({k: v2[k] for k in fields if k in v2})
    return entry


def splitwise_means(scores: Sequence[GroupScore]) -> dict[str, dict[str, float]]:
    """Per catalog GPU: the mean zero-shot and few-shot prefill and decode MAPE (%) over its
    Splitwise groups (the power-capped H100 counts as an H100 SXM, as it is priced)."""
    out = {}
    for gpu in _SPLITWISE_GPUS:
        mine = [s for s in scores if HARDWARE[s.hardware] == gpu]
        out[gpu] = {
            f"{mode}_{phase}": float(np.mean([getattr(s, f"{phase}_mape")
                                              for s in mine if s.mode == mode]))
            for mode in ("zero-shot", "few-shot") for phase in ("prefill", "decode")
        }
    return out


def run_mape(score: RunScore) -> float:
    """Mean |error| (%) over TTFT, TPOT and E2E and their four statistics."""
    return float(np.mean([abs(score.error_pct(m, st)) for m in METRICS for st in STATS]))


def ship_scores(validation: Validation) -> dict[str, dict[str, float]]:
    """``COMPARE_RULE``'s score (lower is better) of each fit per GPU with validation data."""
    out: dict[str, dict[str, float]] = {}
    for fit in FITS:
        means = splitwise_means([s for s in validation.splitwise if s.fit == fit])
        for gpu, m in means.items():
            out.setdefault(gpu, {})[fit] = (m["few-shot_prefill"] + m["few-shot_decode"]) / 2
        for gpu in sorted({g for _, g in RUNS.values()}):
            mine = [r for r in validation.runs
                    if r.fit == fit and r.mode == "zero-shot" and r.gpu == gpu]
            if mine:  # a partial validation (a test's) may score some runs only
                out.setdefault(gpu, {})[fit] = float(np.mean([run_mape(r) for r in mine]))
    return out


def ship_verdict(scores: dict[str, dict[str, float]]) -> dict[str, str]:
    """The fit with the lower ``COMPARE_RULE`` score per GPU with validation data (a tie at one
    decimal goes to fit-v2)."""
    return {gpu: min(FITS, key=lambda f: (round(s[f], 1), f != "aiconfigurator"))
            for gpu, s in scores.items()}


__all__ = ["FITS", "MISS_RUNS", "PARTS", "COMPARE_RULE", "PartScore",
           "Validation", "part_scores", "run_mape", "ship_scores", "ship_verdict",
           "splitwise_means", "validate_fits"]
