"""Score the cost model on Splitwise's measured DGX-A100/H100 prefill and per-token times.

Validation data only (``perf_model.csv``, 2023 vLLM-based stack). Each (model, hardware, TP)
group has 21 measured points (medians of 5 repeats): a prompt sweep at batch 1, a batch sweep
at prompt 512, an output sweep at prompt 512. A point is priced as

- prefill: one step of ``batch_size`` prompt chunks of ``prompt_size`` tokens;
- decode: one step of ``batch_size`` decodes at the mean context ``prompt + output / 2``.

Zero-shot uses the shipped calibrated profile. Few-shot (``FEW_SHOT_RULE``) fits per-step
overhead and efficiencies on three points of the group and scores all the others.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from clustersim.calibration.fewshot import fit_few_shot
from clustersim.calibration.sources import SPLITWISE_FILE
from clustersim.catalog import load_gpu, load_model
from clustersim.catalog.specs import GpuSpec
from clustersim.cost.roofline import BatchShape, CostModel
from clustersim.inputs import read_bytes

HARDWARE = {"a100-80gb": "a100-80gb-sxm", "h100-80gb": "h100-sxm", "h100-80gb-pcap": "h100-sxm"}
MODELS = {"llama2-70b": "llama-2-70b", "bloom-176b": "bloom-176b"}
FEW_SHOT_RULE = (
    "per (model, hardware, TP) group, three points: the batch-1 prompt-512 prefill time, the "
    "batch-1 prompt-512 per-token time, and the per-token time at the largest batch (prompt 512)"
)
_KEYS = ["model", "hardware", "tensor_parallel", "prompt_size", "batch_size", "token_size"]


@dataclass(frozen=True)
class Point:
    prompt_size: int
    batch_size: int
    token_size: int
    prompt_s: float
    token_s: float

    def prefill(self) -> BatchShape:
        return BatchShape.from_chunks([(self.prompt_size, 0, True)] * self.batch_size)

    def decode(self) -> BatchShape:
        context = self.prompt_size + self.token_size // 2
        return BatchShape.from_chunks([(1, context, True)] * self.batch_size)


def load_points(path: Path | str = SPLITWISE_FILE) -> dict[tuple[str, str, int], list[Point]]:
    """Median of the repeats of each measured point, grouped by (model, hardware, TP). The
    file is read as every input is (``inputs.read_bytes``: a regular file or a pipe with a
    writer, at most 16 MiB, not empty), then parsed by pandas."""
    frame = pd.read_csv(io.BytesIO(read_bytes(path, "Splitwise table")))
    med = frame.groupby(_KEYS, as_index=False)[["prompt_time", "token_time"]].median()
    groups: dict[tuple[str, str, int], list[Point]] = {}
    for row in med.itertuples(index=False):
        key = (row.model, row.hardware, int(row.tensor_parallel))
        groups.setdefault(key, []).append(
            Point(int(row.prompt_size), int(row.batch_size), int(row.token_size),
                  row.prompt_time * 1e-3, row.token_time * 1e-3)
        )
    return groups


def few_shot_points(points: list[Point]) -> tuple[Point, Point]:
    """The rule's rows: (prompt 512, batch 1, fewest outputs) and (prompt 512, largest batch)."""
    base = min((p for p in points if p.prompt_size == 512 and p.batch_size == 1),
               key=lambda p: p.token_size)
    widest = max((p for p in points if p.prompt_size == 512), key=lambda p: p.batch_size)
    return base, widest


@dataclass(frozen=True)
class GroupScore:
    model: str
    hardware: str
    tp: int
    mode: str
    prefill_mape: float
    prefill_bias: float
    decode_mape: float
    decode_bias: float
    num_prefill: int
    num_decode: int
    fit: str = "calibrated"
    """The profile scored: ``calibrated`` (shipped) or a fit set (``vidur``, ``aiconfigurator``)."""


def impossible_prefills(key, points: list[Point]) -> list[Point]:
    """Prefill rows faster than the GPUs' datasheet peak FLOPs could run them (measurement
    artefacts, e.g. llama2-70b A100 TP2 batch 64: 32,768 prompt tokens in 0.79 s, where the
    GEMMs alone need 7 s at peak); excluded from scoring and counted in the report."""
    model, gpu = load_model(MODELS[key[0]]), load_gpu(HARDWARE[key[1]], profile="default")
    peak = gpu.peak_flops * key[2]
    return [p for p in points
            if 2 * model.num_params * p.prompt_size * p.batch_size / peak > p.prompt_s]


def score_group(key, points: list[Point], gpu: GpuSpec, mode: str,
                skip_prefill=(), skip_decode=(), fit: str = "calibrated") -> GroupScore:
    model = load_model(MODELS[key[0]])
    cost = CostModel(model, gpu, key[2])
    skip_prefill = [*skip_prefill, *impossible_prefills(key, points)]
    pre = [(cost.step_time(p.prefill()).time_s, p.prompt_s)
           for p in points if p not in skip_prefill]
    dec = [(cost.step_time(p.decode()).time_s, p.token_s)
           for p in points if p not in skip_decode]
    pm, pb = _errors(pre)
    dm, db = _errors(dec)
    return GroupScore(key[0], key[1], key[2], mode, pm, pb, dm, db, len(pre), len(dec), fit)


def _errors(pairs: list[tuple[float, float]]) -> tuple[float, float]:
    pred, meas = np.array(pairs).T
    rel = (pred - meas) / meas
    return float(np.abs(rel).mean() * 100), float(rel.mean() * 100)


def validate_splitwise(path: Path | str = SPLITWISE_FILE,
                       profile: str = "calibrated") -> list[GroupScore]:
    """Zero-shot and few-shot scores of every group, and the ``all-rows`` bound: the same three
    parameters fitted on every row of the group (relative least squares) and scored on them,
    the best any rule's three points could do with this model. ``profile``: the calibrated
    profile every group starts from (``clustersim.catalog.load_gpu``)."""
    scores = []
    for key, points in sorted(load_points(path).items()):
        gpu = load_gpu(HARDWARE[key[1]], profile=profile)
        scores.append(score_group(key, points, gpu, "zero-shot", fit=profile))
        base, widest = few_shot_points(points)
        shots = [(base.prefill(), base.prompt_s), (base.decode(), base.token_s),
                 (widest.decode(), widest.token_s)]
        tuned = fit_few_shot(load_model(MODELS[key[0]]), gpu, key[2], shots)
        scores.append(score_group(key, points, tuned, "few-shot",
                                  skip_prefill=(base,), skip_decode=(base, widest), fit=profile))
        bad = impossible_prefills(key, points)
        every = [(p.prefill(), p.prompt_s) for p in points if p not in bad]
        every += [(p.decode(), p.token_s) for p in points]
        bound = fit_few_shot(load_model(MODELS[key[0]]), gpu, key[2], every,
                             max_points=len(every), relative=True)
        scores.append(score_group(key, points, bound, "all-rows", fit=profile))
    return scores
