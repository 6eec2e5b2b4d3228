"""How well each aiconfigurator GPU's fit prices token counts it was not fitted on.

The shipped fit (``clustersim.calibration.aiconfigurator``) reads every row of a GPU's tables.
Here the same fits are refitted on part of each table and scored on the rest: the rows at every
``HOLD_OUT_EVERY``-th token count, counted in rising order along the axis the step's size moves
(GEMM rows M, prefill prompt length, decode context), are held out::

    token counts   1  2  3  4 [6] 8 12 16 32 [48] 64 96 ... 256 [512] ...
                   fitted on the rest, scored on [...]

The score is the held-out rows' rms log error (the metric each fit minimises) and their median
absolute error, beside the error of the shipped fit on every row. A held-out error near the
in-sample one says the form interpolates between measured sizes, which is what pricing a real
model's shapes asks of it. Calibration data only: nothing here reads the validation folder.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from clustersim.calibration.aiconfigurator import (
    AIC_DIR,
    DECODE_MIN_KV_BYTES,
    GEMM_FLOORS,
    GEMM_HALVES,
    TABLES,
    attention_floor,
    fit_decode_attention,
    fit_prefill_attention,
    gemm_rows,
)
from clustersim.calibration.fit import GemmRows, Reader, fit_gemm
from clustersim.catalog import load_gpu, load_profiles
from clustersim.catalog.specs import GpuSpec

HOLD_OUT_EVERY = 5
"""Every fifth token count (the 5th, 10th, ... in rising order) is held out."""
_HEAD_DIM = 128
_BF16_BYTES = 2
_PREFILL_MIN_PROMPT = 16
"""fit_prefill_attention's rows: prompts of 16 tokens and more."""


@dataclass(frozen=True)
class HeldOutScore:
    """One table of one GPU: the fit on the kept token counts, scored on the held-out ones."""

    gpu: str
    table: str
    """``bf16 GEMM``, ``FP8 GEMM``, ``NVFP4 GEMM``, ``prefill attention``, ``decode
    attention``."""
    held_out: tuple[int, ...]
    """The token counts held out."""
    num_fit_rows: int
    num_held_rows: int
    rms_log_error: float
    """Over the held-out rows, of the fit on the others."""
    median_abs_error: float
    """Median ``|predicted / measured - 1|`` over the held-out rows."""
    in_sample_rms_log_error: float
    """The shipped fit's (every row) over the rows it was fitted on, as its profile's
    provenance records it."""


def held_out_mask(tokens: np.ndarray) -> tuple[np.ndarray, tuple[int, ...]]:
    """Rows whose token count is every ``HOLD_OUT_EVERY``-th distinct value, and those values."""
    values = np.unique(tokens)
    held = values[HOLD_OUT_EVERY - 1::HOLD_OUT_EVERY]
    return np.isin(tokens, held), tuple(int(v) for v in held)


def _score(gpu_id: str, table: str, held: tuple[int, ...], num_fit: int, log_err: np.ndarray,
           in_sample: float) -> HeldOutScore:
    return HeldOutScore(
        gpu=gpu_id, table=table, held_out=held, num_fit_rows=num_fit,
        num_held_rows=int(log_err.size),
        rms_log_error=round(float(np.sqrt(np.mean(log_err ** 2))), 4),
        median_abs_error=round(float(np.median(np.abs(np.expm1(log_err)))), 4),
        in_sample_rms_log_error=in_sample)


# ------------------------------------------------------------------ GEMMs
def _subset(rows: GemmRows, keep: np.ndarray) -> GemmRows:
    return GemmRows(*(getattr(rows, f)[keep] for f in GemmRows.__annotations__))


def gemm_predict_s(rows: GemmRows, fit: dict[str, float], peak_flops: float,
                   bytes_per_s: float) -> np.ndarray:
    """The floored saturating roofline of ``fit`` (``fit_gemm``'s values) on ``rows``."""
    compute = ((rows.tokens + fit["compute_half_tokens"]) * rows.flops_per_token
               / (fit["compute_efficiency"] * peak_flops))
    memory = rows.bytes / (fit["memory_efficiency"] * bytes_per_s)
    return fit["floor_s"] + np.maximum(compute, memory)


def gemm_held_out(frame: pd.DataFrame, dtype: str, peak_flops: float, bytes_per_s: float,
                  ) -> tuple[tuple[int, ...], int, np.ndarray]:
    """(held-out M, rows fitted, held-out log errors) of one dtype's GEMMs."""
    rows = gemm_rows(frame, dtype)
    held, values = held_out_mask(rows.tokens)
    train, test = _subset(rows, ~held), _subset(rows, held)
    fit = fit_gemm(train, peak_flops, bytes_per_s, GEMM_HALVES, GEMM_FLOORS)
    log_err = np.log(gemm_predict_s(test, fit, peak_flops, bytes_per_s) / test.time_s)
    return values, fit["num_rows"], log_err


# ------------------------------------------------------------------ attention
def prefill_predict_s(frame: pd.DataFrame, fit: dict[str, float], floor_s: float,
                      gpu: GpuSpec) -> np.ndarray:
    """``fit_prefill_attention``'s form on a context-attention cut's rows."""
    s = frame.isl.to_numpy(dtype=float)
    pairs = frame.batch_size.to_numpy(dtype=float) * (s * (s + 1) / 2
                                                      + fit["attention_half_keys"] * s)
    per_pair = 4.0 * frame.num_heads.to_numpy(dtype=float) * _HEAD_DIM / gpu.peak_flops
    return floor_s + pairs * per_pair / fit["attention_efficiency"]


def _kv_bytes(frame: pd.DataFrame) -> np.ndarray:
    """Bytes of 16-bit KV one decode call reads (the cache and the new token)."""
    token_bytes = 2.0 * frame.num_key_value_heads.to_numpy(dtype=float) * _HEAD_DIM * _BF16_BYTES
    return frame.batch_size.to_numpy(dtype=float) * (frame.step.to_numpy(dtype=float) + 1) \
        * token_bytes


def decode_predict_s(frame: pd.DataFrame, fit: dict[str, float], floor_s: float,
                     gpu: GpuSpec) -> np.ndarray:
    """``fit_decode_attention``'s form on a generation-attention cut's rows."""
    batch = frame.batch_size.to_numpy(dtype=float)
    rows = _kv_bytes(frame) + batch * fit["decode_attention_half_tokens"] * (
        2.0 * frame.num_key_value_heads.to_numpy(dtype=float) * _HEAD_DIM * _BF16_BYTES)
    return floor_s + rows / (fit["decode_attention_memory_efficiency"] * gpu.mem_bytes_per_s)


def attention_held_out(context: pd.DataFrame, generation: pd.DataFrame, gpu: GpuSpec,
                       ) -> dict[str, tuple[tuple[int, ...], int, np.ndarray]]:
    """Prefill attention by prompt length and decode attention by context, each with the
    other's split too: the kernel floor comes from the kept decode rows alone."""
    gen_held, gen_values = held_out_mask(generation.step.to_numpy())
    floor_s = attention_floor(generation[~gen_held])

    pre = context[context.isl >= _PREFILL_MIN_PROMPT]
    pre_held, pre_values = held_out_mask(pre.isl.to_numpy())
    fit = fit_prefill_attention(pre[~pre_held], gpu, floor_s)
    test = pre[pre_held]
    prefill = (pre_values, fit["num_rows"],
               np.log(prefill_predict_s(test, fit, floor_s, gpu) / (test.latency * 1e-3)))

    dec = fit_decode_attention(generation[~gen_held], gpu, floor_s)
    test = generation[gen_held & (_kv_bytes(generation) >= DECODE_MIN_KV_BYTES)]
    decode = (gen_values, dec["num_rows"],
              np.log(decode_predict_s(test, dec, floor_s, gpu) / (test.latency * 1e-3)))
    return {"prefill attention": prefill, "decode attention": decode}


# ------------------------------------------------------------------ per GPU
PROVENANCE = {"bf16 GEMM": "gemm", "FP8 GEMM": "fp8_gemm", "NVFP4 GEMM": "fp4_gemm",
              "prefill attention": "attention", "decode attention": "decode_attention"}
"""Each table's fit in a fit-v2 profile's provenance (where its every-row error is)."""


def held_out_scores(gpu_ids: tuple[str, ...] | None = None,
                    tables: tuple[str, ...] = tuple(PROVENANCE),
                    read: Reader = pd.read_csv) -> list[HeldOutScore]:
    """Every aiconfigurator GPU's (``TABLES``) fits of ``tables`` (``PROVENANCE``'s keys),
    refitted without the held-out token counts and scored on them."""
    scores = []
    for gpu_id in gpu_ids or tuple(TABLES):
        gpu = load_gpu(gpu_id, profile="default")
        shipped = load_profiles("aiconfigurator")[gpu_id]["provenance"]
        stem = TABLES[gpu_id]
        gemm = read(AIC_DIR / f"gemm_{stem}.csv")
        parts = {}
        if "bf16 GEMM" in tables:
            parts["bf16 GEMM"] = gemm_held_out(gemm, "bfloat16", gpu.peak_flops,
                                               gpu.mem_bytes_per_s)
        if ("FP8 GEMM" in tables and gpu.fp8_dense_tflops is not None
                and (gemm.gemm_dtype == "fp8").any()):
            parts["FP8 GEMM"] = gemm_held_out(gemm, "fp8", gpu.fp8_dense_tflops * 1e12,
                                              gpu.mem_bytes_per_s)
        if ("NVFP4 GEMM" in tables and gpu.fp4_dense_tflops is not None
                and (gemm.gemm_dtype == "nvfp4").any()):
            parts["NVFP4 GEMM"] = gemm_held_out(gemm, "nvfp4", gpu.fp4_dense_tflops * 1e12,
                                                gpu.mem_bytes_per_s)
        if {"prefill attention", "decode attention"} & set(tables):
            attention = attention_held_out(
                read(AIC_DIR / f"context_attention_{stem}.csv"),
                read(AIC_DIR / f"generation_attention_{stem}.csv"), gpu)
            parts.update({k: v for k, v in attention.items() if k in tables})
        scores += [_score(gpu_id, table, *part, shipped[PROVENANCE[table]]["rms_log_error"])
                   for table, part in parts.items()]
    return scores
