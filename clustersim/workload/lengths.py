"""Prompt and output lengths, drawn from one random generator (pure functions)."""

from __future__ import annotations

import numpy as np

from clustersim.errors import ConfigError
from clustersim.limits import MAX_TOKENS
from clustersim.workload.spec import (
    EmpiricalLengths,
    FixedLength,
    IndependentLengths,
    LengthClass,
    LognormalLength,
    MixtureLengths,
    StopOrLengthOutput,
    UniformLength,
)
from clustersim.workload.traces import Trace


def draw_lengths(
    dist: FixedLength | UniformLength | LognormalLength, n: int, rng: np.random.Generator
) -> np.ndarray:
    """``n`` token lengths from one distribution."""
    if isinstance(dist, FixedLength):
        return np.full(n, dist.value, dtype=np.int64)
    if isinstance(dist, UniformLength):
        return rng.integers(dist.low, dist.high, size=n, endpoint=True)
    # Lognormal with mean m and CV c: sigma² = ln(1 + c²), mu = ln(m) - sigma²/2.
    sigma2 = float(np.log1p(dist.cv * dist.cv))
    mu = float(np.log(dist.mean)) - sigma2 / 2
    values = np.rint(rng.lognormal(mu, np.sqrt(sigma2), size=n))
    high = MAX_TOKENS if dist.high is None else dist.high
    return np.clip(values, dist.low, high).astype(np.int64)


def draw_output_lengths(
    dist: FixedLength | UniformLength | LognormalLength | StopOrLengthOutput, n: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """``n`` answer lengths: :func:`draw_lengths`, or for ``stop_or_length`` answers first
    whether each stops early, then every stopping length (the same draws whatever the
    share), cut at ``max_tokens``."""
    if not isinstance(dist, StopOrLengthOutput):
        return draw_lengths(dist, n, rng)
    stops = rng.random(n) < dist.stop_fraction
    lengths = np.minimum(draw_lengths(dist.stop_tokens, n, rng), dist.max_tokens)
    return np.where(stops, lengths, dist.max_tokens).astype(np.int64)


def mixture_lengths(
    classes: list[LengthClass], n: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Each request picks a class by weight, then draws that class's prompt and output."""
    weights = np.array([c.weight for c in classes], dtype=float)
    weights /= weights.max()  # weights near the float limit would sum to inf
    picks = rng.choice(len(classes), size=n, p=weights / weights.sum())
    prompts = np.empty(n, dtype=np.int64)
    outputs = np.empty(n, dtype=np.int64)
    for index, cls in enumerate(classes):
        mask = picks == index
        count = int(mask.sum())
        prompts[mask] = draw_lengths(cls.prompt_tokens, count, rng)
        outputs[mask] = draw_output_lengths(cls.output_tokens, count, rng)
    return prompts, outputs


def empirical_lengths(
    table: Trace, n: int, rng: np.random.Generator, in_order: bool = False,
    max_total_tokens: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(prompt, output) pairs taken together from a table's rows (those within
    ``max_total_tokens`` when given)."""
    prompts, outputs = table.prompt_tokens, table.output_tokens
    if max_total_tokens is not None:
        keep = prompts + outputs <= max_total_tokens
        if not keep.any():
            raise ConfigError("workload.lengths.max_total_tokens",
                              f"no row of {table.source} has prompt + output <= "
                              f"{max_total_tokens} tokens")
        prompts, outputs = prompts[keep], outputs[keep]
    rows = np.arange(n) % len(prompts) if in_order else rng.integers(0, len(prompts), size=n)
    return prompts[rows], outputs[rows]


def joint_lengths(
    spec: IndependentLengths | MixtureLengths | EmpiricalLengths,
    n: int,
    rng: np.random.Generator,
    table: Trace | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Prompt and output lengths of ``n`` requests; ``table`` is the loaded empirical trace."""
    if isinstance(spec, MixtureLengths):
        return mixture_lengths(spec.classes, n, rng)
    if isinstance(spec, EmpiricalLengths):
        assert table is not None, "empirical lengths need their table loaded"
        return empirical_lengths(table, n, rng, in_order=spec.sample == "in_order",
                                 max_total_tokens=spec.max_total_tokens)
    return (draw_lengths(spec.prompt_tokens, n, rng),
            draw_output_lengths(spec.output_tokens, n, rng))
