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
they do not -- the fitted ``o`` comes out negative, i.e. the stack reads its weights faster than
the kernel fit's one memory efficiency for every GEMM size prices them -- a memory scale ``m``
takes ``o``'s place (``o = 0``, ``memory_efficiency / m``): a negative overhead does not exist,
a faster weight read does. Which op is compute- or memory-bound can flip as the efficiencies
move, so the solve repeats a few times.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from clustersim.catalog.specs import GpuSpec, ModelSpec
from clustersim.cost.roofline import BatchShape, CostModel, StepCost
from clustersim.errors import InputError

MAX_POINTS = 3
_ROUNDS = 4
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
    use_memory = False
    for _ in range(_ROUNDS):
        cost = CostModel(model, gpu, tp, dp=dp, expert_parallel=expert_parallel)
        costs = [[_price(cost, b, dp) for b in steps] for steps in step_lists]
        comp = np.array([sum(c.compute_s for c in cs) for cs in costs])
        mem = np.array([sum(c.memory_s for c in cs) for cs in costs])
        total = np.array([sum(c.time_s for c in cs) for cs in costs])
        fixed = num_steps * gpu.per_step_overhead_s + seqs * gpu.per_request_overhead_s
        weight = 1.0 / measured if relative else np.ones_like(measured)
        o, b, r, m, use_memory = _solve(measured - (total - comp - mem - fixed), comp, mem,
                                        num_steps, seqs, weight, use_memory)
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
    return gpu


def _price(cost: CostModel, batch: BatchShape, dp: int) -> StepCost:
    if dp == 1:
        return cost.step_time(batch)
    return cost.step_time(batch, dp * (batch.num_prefill_tokens + batch.num_decode_tokens))


def _solve(
    target: np.ndarray, comp: np.ndarray, mem: np.ndarray, steps: np.ndarray,
    seqs: np.ndarray, weight: np.ndarray, use_memory: bool,
) -> tuple[float, float, float, float, bool]:
    """Least-squares ``(o, b, r, m)`` for ``target = o x steps + b x comp + r x seqs + m x mem``:
    ``o, r >= 0``, ``b, m > 0``. Unknowns enter in that order as points allow (a part that is
    zero, or proportional to the steps, over the points is not identifiable); ``m`` is 1 unless
    ``o`` comes out negative (or ``use_memory``, an earlier round's verdict), and then replaces
    it. Another unknown that comes out out of range is dropped and the rest refitted. Returns
    ``(o, b, r, m, whether m replaced o)``."""
    columns = {"o": steps, "b": comp, "r": seqs, "m": mem}
    active = ["o"]
    if np.any(comp > 0):
        active.append("b")
    if np.ptp(seqs / steps) > 0:
        active.append("r")
    active = active[: len(target)]
    if use_memory and np.any(mem > 0):
        active[0] = "m"
    while active:
        known = sum(columns[k] for k in ("b", "m") if k not in active)  # scale 1 unless fitted
        design = np.stack([columns[k] for k in active], axis=1) * weight[:, None]
        values, *_ = np.linalg.lstsq(design, (target - known) * weight, rcond=None)
        fitted = dict(zip(active, values, strict=True))
        if fitted.get("o", 0.0) < 0 and np.any(mem > 0):
            active[active.index("o")] = "m"
            continue
        bad = [k for k, v in fitted.items() if (v <= 0 if k in ("b", "m") else v < 0)]
        if not bad:
            return (float(fitted.get("o", 0.0)), float(fitted.get("b", 1.0)),
                    float(fitted.get("r", 0.0)), float(fitted.get("m", 1.0)), "m" in fitted)
        active.remove(bad[-1])
    return 0.0, 1.0, 0.0, 1.0, False


def _clamp(eff: float) -> float:
    return float(min(1.0, max(_MIN_EFF, eff)))
