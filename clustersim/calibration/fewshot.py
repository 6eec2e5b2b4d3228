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
from dataclasses import dataclass
from itertools import product

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
    # the fused-MoE kernels' measured curves are a time no efficiency moves: the fit prices
    # the experts instead, so that the measurements rescale them with the rest
    gpu = gpu.model_copy(update={"moe_kernels": tuple(
        k.model_copy(update={"curves": ()}) for k in gpu.moe_kernels)})
    step_lists = [[s] if isinstance(s, BatchShape) else list(s) for s, _ in points]
    num_steps = np.array([len(steps) for steps in step_lists], dtype=float)
    seqs = np.array([sum(b.num_seqs for b in steps) for steps in step_lists], dtype=float)
    weight = 1.0 / measured if relative else np.ones_like(measured)

    use_memory = False
    shipped_r, shipped_m = gpu.per_request_overhead_s, gpu.memory_efficiency
    best: tuple[float, GpuSpec] | None = None
    costs = _costs(model, gpu, tp, step_lists, dp, expert_parallel)
    floors = _floors(model, gpu, tp, step_lists, dp, expert_parallel)
    for _ in range(_ROUNDS):
        comp = np.array([sum(c.compute_s for c in cs) for cs in costs])
        # the memory-bound seconds a memory scale moves: kernel floors stay as they are
        mem = np.array([sum(c.memory_s for c in cs) for cs in costs]) - floors
        total = np.array([sum(c.time_s for c in cs) for cs in costs])
        fixed = num_steps * gpu.per_step_overhead_s + seqs * gpu.per_request_overhead_s
        moe = [gpu.moe_gemm] if gpu.moe_gemm is not None else []
        moe += [k.fit for k in gpu.moe_kernels]
        bounds = _Bounds(
            b_min=max(gpu.compute_efficiency, gpu.attention_efficiency,
                      *(fit.compute_efficiency for fit in moe)),
            m_min=max(gpu.memory_efficiency, gpu.decode_attention_memory_efficiency or 0.0,
                      *(fit.memory_efficiency for fit in moe)),
            m_max=gpu.memory_efficiency / shipped_m, prior_r=shipped_r)
        o, b, r, m, chose_memory = _solve(measured - (total - comp - mem - fixed), comp, mem,
                                          num_steps, seqs, weight, use_memory, bounds)
        use_memory = use_memory or chose_memory
        gpu = gpu.model_copy(
            update={
                "per_step_overhead_s": o,
                "per_request_overhead_s": r,
                "compute_efficiency": _clamp(gpu.compute_efficiency / b),
                "attention_efficiency": _clamp(gpu.attention_efficiency / b),
                "memory_efficiency": _clamp(gpu.memory_efficiency / m),
                **_scaled_parts(gpu, b, m),
                "calibration": calibration,
            }
        )
        # which op is compute- or memory-bound can flip with the new efficiencies: keep the
        # round whose real prices come closest
        costs = _costs(model, gpu, tp, step_lists, dp, expert_parallel)
        total = np.array([sum(c.time_s for c in cs) for cs in costs])
        residual = float(np.linalg.norm((total - measured) * weight))
        if best is None or residual < best[0]:
            best = (residual, gpu)
    assert best is not None
    return best[1]


def fit_errors(
    model: ModelSpec, gpu: GpuSpec, tp: int,
    points: Sequence[tuple[BatchShape | Sequence[BatchShape], float]], *, dp: int = 1,
    expert_parallel: bool = False,
) -> list[float]:
    """``(priced - measured) / measured`` of each measurement under ``gpu`` (a fitted profile:
    how well it reproduces what it was fitted on)."""
    step_lists = [[s] if isinstance(s, BatchShape) else list(s) for s, _ in points]
    costs = _costs(model, gpu, tp, step_lists, dp, expert_parallel)
    return [(sum(c.time_s for c in cs) - seconds) / seconds
            for cs, (_, seconds) in zip(costs, points, strict=True)]


def _scaled_parts(gpu: GpuSpec, b: float, m: float) -> dict:
    """The fits beside the 16-bit GEMM's that the same compute (``b``) and memory (``m``)
    scales move: decode attention's KV reads and the fused-MoE experts' fits, where fitted."""
    out: dict = {}
    if gpu.decode_attention_memory_efficiency is not None:
        out["decode_attention_memory_efficiency"] = _clamp(
            gpu.decode_attention_memory_efficiency / m)
    if gpu.moe_gemm is not None:
        out["moe_gemm"] = gpu.moe_gemm.model_copy(update={
            "compute_efficiency": _clamp(gpu.moe_gemm.compute_efficiency / b),
            "memory_efficiency": _clamp(gpu.moe_gemm.memory_efficiency / m)})
    if gpu.moe_kernels:
        out["moe_kernels"] = tuple(k.model_copy(update={"fit": k.fit.model_copy(update={
            "compute_efficiency": _clamp(k.fit.compute_efficiency / b),
            "memory_efficiency": _clamp(k.fit.memory_efficiency / m)})})
            for k in gpu.moe_kernels)
    return out


def _floors(model: ModelSpec, gpu: GpuSpec, tp: int, step_lists: list[list[BatchShape]],
            dp: int, expert_parallel: bool) -> np.ndarray:
    """Kernel floors of each measurement's steps (``CostModel.kernel_floors_s``)."""
    cost = CostModel(model, gpu, tp, dp=dp, expert_parallel=expert_parallel)
    return np.array([sum(cost.kernel_floors_s(b) for b in steps) for steps in step_lists])


def _costs(model: ModelSpec, gpu: GpuSpec, tp: int, step_lists: list[list[BatchShape]],
           dp: int, expert_parallel: bool) -> list[list[StepCost]]:
    cost = CostModel(model, gpu, tp, dp=dp, expert_parallel=expert_parallel)
    return [[_price(cost, b, dp) for b in steps] for steps in step_lists]


def _price(cost: CostModel, batch: BatchShape, dp: int) -> StepCost:
    if dp == 1:
        return cost.step_time(batch)
    return cost.step_time(batch, dp * (batch.num_prefill_tokens + batch.num_decode_tokens))


@dataclass(frozen=True)
class _Bounds:
    """Where the unknowns may go: efficiencies stay <= 1 (``b >= b_min``, ``m >= m_min``),
    memory never slower than the kernel fit's (``m <= m_max``); ``prior_r`` is the shipped
    per-request overhead, kept when the points cannot determine it."""

    b_min: float
    m_min: float
    m_max: float
    prior_r: float


def _solve(
    target: np.ndarray, comp: np.ndarray, mem: np.ndarray, steps: np.ndarray,
    seqs: np.ndarray, weight: np.ndarray, use_memory: bool, bounds: _Bounds,
) -> tuple[float, float, float, float, bool]:
    """Box-constrained least squares for ``target = o x steps + b x comp + r x seqs + m x mem``.

    The unknowns the points determine, in this order and each only if the points tell it apart
    from the ones before (``o``; ``b`` when the compute time is not proportional to the steps;
    ``r`` when the requests per step vary), are fitted with ``o, r >= 0`` and ``b >= b_min``;
    one the points cannot determine keeps its prior (``b = 1``, ``r = prior_r``). ``m`` is 1 --
    unless the best fit puts ``o`` at its bound 0 (the overhead would have to be negative), or
    an earlier round did (``use_memory``): then ``m`` (``m_min <= m <= m_max``) replaces
    ``o``, which stays 0. Returns ``(o, b, r, m, whether m was fitted)``."""
    columns = {"o": steps, "b": comp, "r": seqs, "m": mem}
    lower = {"o": 0.0, "b": bounds.b_min, "r": 0.0, "m": bounds.m_min}
    upper = {"o": np.inf, "b": np.inf, "r": np.inf, "m": bounds.m_max}
    prior = {"o": 0.0, "b": 1.0, "r": bounds.prior_r, "m": 1.0}
    # one point fits o (or m); two add b; three add r -- each only if the points can tell it
    # apart from the ones before (the same prefill twice determines o alone)
    rest: list[str] = []
    for k in ("b", "r"):
        trial = np.stack([columns[j] for j in ("o", *rest, k)], axis=1) * weight[:, None]
        if np.linalg.matrix_rank(trial) == len(rest) + 2:
            rest.append(k)

    def fit(unknowns: list[str]) -> dict[str, float] | None:
        return _bounded_least_squares(unknowns, columns, target, weight, lower, upper, prior)

    fitted = None if use_memory else fit(["o", *rest])
    if fitted is None or fitted["o"] <= lower["o"] and np.any(mem > 0):
        with_memory = fit(["m", *rest])
        if with_memory is not None:
            fitted = with_memory
    values = {**prior, **(fitted or {})}
    return (values["o"], values["b"], values["r"], values["m"], "m" in (fitted or {}))


def _bounded_least_squares(
    unknowns: list[str], columns: dict[str, np.ndarray], target: np.ndarray,
    weight: np.ndarray, lower: dict[str, float], upper: dict[str, float],
    prior: dict[str, float],
) -> dict[str, float] | None:
    """Every split of ``unknowns`` into free ones and ones held at a bound: the free ones by
    least squares (full rank only), the result inside the bounds, smallest residual wins.
    Unknowns not listed keep ``prior``. None when nothing is feasible."""
    best: tuple[float, dict[str, float]] | None = None
    for states in product(("free", "lower", "upper"), repeat=len(unknowns)):
        held = {k: (lower[k] if st == "lower" else upper[k])
                for k, st in zip(unknowns, states, strict=True) if st != "free"}
        if not all(np.isfinite(v) for v in held.values()):
            continue
        free = [k for k, st in zip(unknowns, states, strict=True) if st == "free"]
        values = {**{k: prior[k] for k in columns if k not in unknowns}, **held}
        known = sum(values[k] * columns[k] for k in values)
        if free:
            design = np.stack([columns[k] for k in free], axis=1) * weight[:, None]
            if np.linalg.matrix_rank(design) < len(free):
                continue  # the points cannot tell these apart
            solved, *_ = np.linalg.lstsq(design, (target - known) * weight, rcond=None)
            values.update(zip(free, (float(v) for v in solved), strict=True))
        tol = 1e-12
        if any(not lower[k] - tol <= values[k] <= upper[k] + tol for k in unknowns):
            continue
        predicted = sum(values[k] * columns[k] for k in columns)
        residual = float(np.linalg.norm((predicted - target) * weight))
        if best is None or residual < best[0] - 1e-15:
            best = (residual, {k: (0.0 if abs(values[k]) < tol else values[k])
                               for k in unknowns})
    return None if best is None else best[1]


def _clamp(eff: float) -> float:
    return float(min(1.0, max(_MIN_EFF, eff)))
