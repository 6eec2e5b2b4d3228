"""Few-shot calibration: adjust a GPU profile to at most three measured step times.

The calibrated model splits a step into memory-bound, compute-bound, communication and
overhead seconds. Given measured times ``t_i`` of known batches with ``n_i`` requests, solve

    t_i = o + r x n_i + b x compute_i + (memory_i + communication_i + per-layer overhead)

for the per-step overhead ``o``, the per-request overhead ``r`` and the compute scale ``b``
(GEMMs and attention), then fold them back into the profile: ``per_step_overhead_s = o``,
``per_request_overhead_s = r``, ``compute_efficiency / b``, ``attention_efficiency / b``.
One point fits ``o``; two add ``b`` (give a prefill); three add ``r`` (give decodes at two
batch sizes). Memory efficiency stays the kernel fit's while the measurements leave room for an
overhead: a decode time that differs from it by a constant per step is what ``o`` absorbs (a
scale on weight reads cannot be told apart from a fixed cost with a few batch-1 points). When
they do not -- ``o`` would have to be negative, i.e. the stack reads its weights faster than the
kernel fit's one memory efficiency for every GEMM size prices them -- a memory scale ``m``
takes ``o``'s place (``o = 0``, ``memory_efficiency / m``), never beyond the datasheet
bandwidth: a negative overhead does not exist, a faster weight read does. The solve is a
constrained least squares (every subset of the unknowns, the feasible one with the smallest
residual). Which op is compute- or memory-bound can flip as the efficiencies move, so it
repeats a few rounds and keeps the one whose real prices come closest to the measurements.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations

import numpy as np

from clustersim.catalog.specs import GpuSpec, ModelSpec
from clustersim.cost.roofline import BatchShape, CostModel, StepCost
from clustersim.errors import InputError

MAX_POINTS = 3
_ROUNDS = 6
_MIN_EFF = 1e-3


def fit_few_shot(
    model: ModelSpec,
    gpu: GpuSpec,
    tp: int,
    points: Sequence[tuple[BatchShape | Sequence[BatchShape], float]],
    *,
    label: str = "few-shot",
    dp: int = 1,
    expert_parallel: bool = False,
    max_points: int = MAX_POINTS,
    relative: bool = False,
) -> GpuSpec:
    """``gpu`` adjusted so its step times match ``points``: ``(batch, measured seconds)``, or
    ``(steps, seconds)`` for a measurement that spans several steps (a chunked prompt).
    ``dp > 1``: a MoE model's data-parallel group; each batch is one rank's, the group's
    MoE layers see ``dp`` times its tokens (every rank busy alike, or padded to it).
    ``max_points`` and ``relative`` (least squares on relative errors) serve diagnostics that
    fit the same three parameters on many measurements."""
    if not 1 <= len(points) <= max_points:
        raise InputError("measurements", f"give 1 to {max_points} measurements, got {len(points)}")
    if any(not t > 0 for _, t in points):
        raise InputError("measurements", "measured times must be > 0")
    measured = np.array([t for _, t in points])
    calibration = f"{gpu.calibration}+{label}"
    step_lists = [[s] if isinstance(s, BatchShape) else list(s) for s, _ in points]
    num_steps = np.array([len(steps) for steps in step_lists], dtype=float)
    seqs = np.array([sum(b.num_seqs for b in steps) for steps in step_lists], dtype=float)
    weight = 1.0 / measured if relative else np.ones_like(measured)

    def price(gpu: GpuSpec) -> list[list[StepCost]]:
        cost = CostModel(model, gpu, tp, dp=dp, expert_parallel=expert_parallel)
        return [[_price(cost, b, dp) for b in steps] for steps in step_lists]

    use_memory = False
    best: tuple[float, GpuSpec] | None = None
    costs = price(gpu)
    for _ in range(_ROUNDS):
        comp = np.array([sum(c.compute_s for c in cs) for cs in costs])
        mem = np.array([sum(c.memory_s for c in cs) for cs in costs])
        total = np.array([sum(c.time_s for c in cs) for cs in costs])
        fixed = num_steps * gpu.per_step_overhead_s + seqs * gpu.per_request_overhead_s
        o, b, r, m, use_memory = _solve(measured - (total - comp - mem - fixed), comp, mem,
                                        num_steps, seqs, weight, use_memory,
                                        gpu.per_request_overhead_s, gpu.memory_efficiency)
        gpu = gpu.model_copy(
            update={
                "per_step_overhead_s": o,
                "per_request_overhead_s": r,
                "compute_efficiency": _clamp(gpu.compute_efficiency / b),
                "attention_efficiency": _clamp(gpu.attention_efficiency / b),
                "memory_efficiency": _clamp(gpu.memory_efficiency / m),
                "calibration": calibration,
            }
        )
        # which op is compute- or memory-bound can flip with the new efficiencies: keep the
        # round whose real prices come closest
        costs = price(gpu)
        total = np.array([sum(c.time_s for c in cs) for cs in costs])
        residual = float(np.linalg.norm((total - measured) * weight))
        if best is None or residual < best[0]:
            best = (residual, gpu)
    assert best is not None
    return best[1]


def _price(cost: CostModel, batch: BatchShape, dp: int) -> StepCost:
    if dp == 1:
        return cost.step_time(batch)
    return cost.step_time(batch, dp * (batch.num_prefill_tokens + batch.num_decode_tokens))


def _solve(
    target: np.ndarray, comp: np.ndarray, mem: np.ndarray, steps: np.ndarray,
    seqs: np.ndarray, weight: np.ndarray, use_memory: bool, prior_r: float, min_m: float,
) -> tuple[float, float, float, float, bool]:
    """Constrained least squares for ``target = o x steps + b x comp + r x seqs + m x mem``:
    ``o, r >= 0``, ``b > 0``, ``m >= min_m`` (the current memory efficiency: no faster than the
    datasheet bandwidth). Every subset of the unknowns the points can determine is solved (an
    unknown left out keeps its prior: ``b = m = 1``, ``r = prior_r``, ``o = 0``); the feasible one
    with the smallest residual wins, an ``o`` one before an ``m`` one (``m`` takes ``o``'s place
    only when the overhead would have to be negative; once it has, ``use_memory`` keeps it so).
    Returns ``(o, b, r, m, whether m was fitted)``."""
    columns = {"o": steps, "b": comp, "r": seqs, "m": mem}
    optional = []
    if np.any(comp > 0):
        optional.append("b")
    if np.ptp(seqs / steps) > 0:
        optional.append("r")
    firsts = ["m"] if use_memory else ["o"]
    if np.any(mem > 0) and "m" not in firsts:
        firsts.append("m")
    scale = float(np.linalg.norm(target * weight)) or 1.0
    best: tuple[tuple[float, bool, int], dict[str, float]] | None = None
    for first in firsts:
        pool = [first, *optional]
        for size in range(min(len(pool), len(target)), 0, -1):
            for subset in combinations(pool, size):
                fitted = _least_squares(subset, columns, target, weight, prior_r)
                if not _feasible(fitted, min_m):
                    continue
                design = sum(fitted.get(k, _PRIOR[k]) * columns[k] for k in columns
                             if k != "r") + fitted.get("r", prior_r) * seqs
                residual = float(np.linalg.norm((design - target) * weight)) / scale
                key = (round(residual, 9), "m" in fitted, -size)
                if best is None or key < best[0]:
                    best = (key, fitted)
    fitted = best[1] if best is not None else {}
    # lstsq leaves rounding noise where a value is exactly 0
    fitted = {k: (0.0 if abs(v) < 1e-12 else v) for k, v in fitted.items()}
    return (float(fitted.get("o", 0.0)), float(fitted.get("b", 1.0)),
            float(fitted.get("r", prior_r)), float(fitted.get("m", 1.0)), "m" in fitted)


_PRIOR = {"o": 0.0, "b": 1.0, "m": 1.0}


def _least_squares(subset: Sequence[str], columns: dict[str, np.ndarray], target: np.ndarray,
                   weight: np.ndarray, prior_r: float) -> dict[str, float]:
    known = sum(_PRIOR[k] * columns[k] for k in ("b", "m") if k not in subset)
    if "r" not in subset:
        known = known + prior_r * columns["r"]
    design = np.stack([columns[k] for k in subset], axis=1) * weight[:, None]
    values, *_ = np.linalg.lstsq(design, (target - known) * weight, rcond=None)
    return dict(zip(subset, (float(v) for v in values), strict=True))


def _feasible(fitted: dict[str, float], min_m: float) -> bool:
    return (fitted.get("o", 0.0) >= 0 and fitted.get("r", 0.0) >= 0
            and fitted.get("b", 1.0) > 0 and fitted.get("m", 1.0) >= min_m)


def _clamp(eff: float) -> float:
    return float(min(1.0, max(_MIN_EFF, eff)))
