"""Fit the cost model on NVIDIA aiconfigurator's measured vLLM kernels (fit-v2).

The tables (``fit/aiconfigurator/``, cut by ``shipdata.ship_aiconfigurator``) are vLLM 0.24 on
H100 SXM, H200, B200, B300, GB200, GB300 and L40S and vLLM 0.14 on A100 SXM, one layer's kernel
on one GPU per row. Every GPU of ``TABLES`` is fitted on its own tables alone, in the same
forms: the part of a step each gets is the form its table's residuals support
(docs/validation.md shows both)::

    GEMM (bf16, fp8)   floor + max((M + t_half) x 2kn / (eff_c x peak), bytes / (eff_m x bw))
    prefill attention  floor + (pairs + K_half x queries) x 4 h_q d / (eff_attn x peak)
    decode attention   floor + sum over sequences (c + 1 + c_half) x KV bytes / (eff_kv x bw)
    all-reduce         alpha + 2(n-1)/n x bytes / busbw, vLLM's custom all-reduce below its size
                       limit (clustersim.cost.collectives) and NCCL above it, each its own fit
    all-gather,        alpha + (n-1)/n x total bytes / busbw (NCCL)
    reduce-scatter

- GEMMs: the per-call ``floor`` is what a plain saturating roofline lacks: a 1024 x 1024 bf16
  GEMM takes about 4 us on the H100 at every M up to 256 (its weights need 0.6 us at the
  datasheet bandwidth), and a 4096 x 4096 one 15 us at M = 1. With the floor the rms log error
  over the table's rows drops by half or more on the H100 and A100 (``gemm.rms_log_error``
  beside ``without_floor_rms_log_error`` in each profile's provenance; docs/validation.md
  prints both); ``fit_gemm`` searches ``t_half`` beside it.
- Prefill attention: causal query-key pairs at one efficiency miss by 6-10x (rms log error
  ~2): short prompts are floor-bound, and FlashAttention's efficiency rises with the keys each
  query attends to (H100 FA3: 39 % of peak at 2,048-token prompts, 61-67 % at 8-16K).
  ``eff x K / (K + K_half)`` in the keys per query K makes the cost of a chunk of s queries
  ``(pairs + K_half x s)`` pairs at the saturated efficiency: a linear term clustersim prices
  without per-chunk bookkeeping.
- Decode attention: the KV read, at its own bandwidth efficiency, plus a per-sequence cost
  (``c_half`` tokens of KV) that dominates many short sequences. It is fitted on the rows whose
  KV is at least ``DECODE_MIN_KV_BYTES``: below the L2 cache size the benchmark's repeated
  calls read cached KV (the L40S rows there run at up to 2.5x its DRAM bandwidth), which a serving
  step, reading every layer's KV once, never does (the B200's 126 MB L2 is the largest here).
  Its ``floor`` (the median batch-1 call at <= 128 tokens of context) is the attention kernel's
  per-layer floor, shared with prefill.
- Collectives: NCCL from nccl-tests' half-precision rows over every size and GPU count;
  vLLM's custom all-reduce from the ``vllm_graph`` rows below ``CUSTOM_AR_MAX_BYTES``, relative
  least squares (small messages count as much as large ones).

The RTX 4090 and RTX PRO 6000 keep their own layer profiles (LLMServingSim), refitted in the
same forms; where their profiles cannot tell a parameter (the GEMM floor next to 30-240 us
GEMMs, decode attention on the RTX PRO 6000, which has no decode rows shipped) the nearest
aiconfigurator GPU lends it (``DONORS``: the L40S, the RTX 4090's Ada sibling) or the v1 form
stays (``c_half`` 0, the KV read at the GEMM memory efficiency).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from clustersim.calibration import small_kernels
from clustersim.calibration.fit import (
    _LINK_FIELDS,
    _MIN_ATTN_CHUNK,
    FP8_MIN_WIDTH,
    FP8_TRANSFERS,
    HOST_OVERHEADS,
    HOST_SOURCE,
    NVFP4_BYTES,
    TRANSFERS,
    GemmRows,
    Reader,
    _aic_gemm_rows,
    _calibrate_rtx4090,
    _calibrate_rtx_pro_6000,
    _concat,
    _fit_alpha_busbw,
    _layer_profile_gemm_rows,
    collective_values,
    fit_gemm,
    same_link,
)
from clustersim.calibration.sources import FIT_DIR
from clustersim.catalog import load_gpu, load_model
from clustersim.catalog.specs import GpuSpec
from clustersim.cost.collectives import CUSTOM_AR_MAX_BYTES

FIT_ID = "fit-v2"
AIC_DIR = FIT_DIR / "aiconfigurator"
TABLES = {"h100-sxm": "h100_sxm", "a100-80gb-sxm": "a100_sxm", "l40s": "l40s",
          "h200": "h200_sxm", "b200": "b200_sxm", "b300": "b300_sxm", "gb200": "gb200",
          "gb300": "gb300"}
"""GPU -> the stem of its aiconfigurator tables (GEMMs, attention, and what it has below)."""
COMM_TABLES = {"h100-sxm": "h100_sxm", "a100-80gb-sxm": "a100_sxm", "h200": "h200_sxm",
               "b200": "b200_sxm", "b300": "b300_sxm", "gb200": "gb200", "gb300": "gb300"}
"""GPUs whose collectives aiconfigurator measured (8-GPU NVLink nodes; the GB200's and GB300's
4-GPU compute trays; the L40S has none)."""
MOE_TABLES = {"h100-sxm": "h100_sxm", "h200": "h200_sxm", "b200": "b200_sxm",
              "b300": "b300_sxm", "gb200": "gb200", "gb300": "gb300"}
"""GPUs whose fused MoE and DeepEP all-to-all aiconfigurator measured -> the stem of the cuts
(``moe_<stem>.csv``, ``moe_a2a_<stem>.csv``)."""
MOE_VLLM_VERSION = "0.24.0"
"""The vLLM release of the fused-MoE tables cut (shipdata.AIC_MOE_GPUS)."""
MOE_DISTRIBUTION = "power_law_1.01"
"""The routing of the rows read: aiconfigurator's power law (α 1.01), not its balanced rows.
Its collector draws each expert's share of the ``tokens x topk`` routed rows from a power law
and, with expert parallelism, puts the busiest rank's experts on the GPU it times
(``power_law_logits_v3``, collector/helper.py); the balanced rows give every token's k experts
the widest spread (``balanced_logits``: ``min(tokens x k, E)`` experts touched). A real router's
picks collide and its load is skewed, so a decode batch touches fewer experts than the
balanced rows read, and the step waits for the busiest rank: aiconfigurator predicts with the
power-law rows by default (sdk/config.py ``workload_distribution = "power_law"``, α 1.01 for the
DeepSeek family and 1.2 for the other MoE models: sdk/models/deepseek.py, moe.py). α 1.01
throughout: the two differ by under 4 points of TPOT on the MoE calibration sweeps, where the
balanced rows are 10-17 points further off (docs/benchmarks.md)."""
MOE_WEIGHT_BYTES = {"bfloat16": 2.0, "fp8": 1.0, "fp8_block": 1.0 + 4.0 / (128 * 128),
                    "int4_wo": 0.5 + 2.0 / 128, "w4a16_mxfp4": 0.5 + 1.0 / 32,
                    "nvfp4": NVFP4_BYTES}
"""Bytes per expert weight as each format of the table stores it: FP8 with one fp32 scale per
tensor or per 128 x 128 block, INT4 with one 16-bit scale per 128 (the collector's group size),
MXFP4 with one E8M0 scale per 32, NVFP4 with one FP8 scale per 16."""
MOE_FIT_MAX_GPUS = 8
"""The fits read the splits over one node's GPUs; wider expert-parallel splits have curves."""
MOE_FP8_FORMATS = ("fp8", "fp8_block")
"""Formats whose experts run W8A8 at the FP8 peak, reading FP8 activations."""
MOE_FP4_FORMATS = ("nvfp4",)
"""Formats whose experts run W4A4 at the FP4 peak, reading NVFP4 activations."""
GEMM_FLOORS = tuple(float(x) * 1e-6 for x in np.arange(0.0, 10.25, 0.25))
"""Per-call floors (s) the GEMM fit searches: 0-10 us."""
MOE_FLOORS = tuple(float(x) * 1e-6 for x in np.arange(0.0, 81.0, 2.0))
"""Per-layer floors (s) the fused-MoE fit searches: 0-80 us (routing, permutation and two
grouped GEMMs in one call)."""
MOE_LOWEST_EFFICIENCY = 0.05
"""The fused-MoE fits search efficiencies from here (FlashInfer's CUTLASS FP8 MoE on the H100
runs below 0.30 of the FP8 peak and of the bandwidth, where the dense GEMMs' search stops)."""
GEMM_HALVES = (0.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0)
_FP8_BYTES, _BF16_BYTES = 1, 2
_HEAD_DIM = 128
"""The attention rows shipped are head_dim 128 (shipdata.AIC_HEADS)."""
DECODE_MIN_KV_BYTES = 128 * 2**20
"""Decode rows fitted: KV per call of at least 128 MiB, above the L2 cache of every GPU here
(40 MB A100, 50 MB H100 and H200, 96 MB L40S per NVIDIA's architecture whitepapers; 126 MB
B200, https://chipsandcheese.com/p/nvidias-b200-keeping-the-cuda-juggernaut)."""
_FLOOR_MAX_CONTEXT = 128
_ATTN_EFFS = np.linspace(0.20, 1.0, 81)
_KEY_HALVES = (0.0, 32.0, 64.0, 128.0, 256.0, 384.0, 512.0, 768.0, 1024.0, 1536.0, 2048.0)
_SEQ_HALVES = (0.0, 16.0, 32.0, 64.0, 96.0, 128.0, 192.0, 256.0, 384.0, 512.0)
DONORS = {"rtx4090": "l40s"}
"""Measured GPU -> the aiconfigurator GPU that lends it what its own profile cannot tell."""


# ------------------------------------------------------------------ GEMMs
def gemm_rows(frame: pd.DataFrame, dtype: str) -> GemmRows:
    """One dtype's rows of an aiconfigurator GEMM cut (FP8 and NVFP4 at n, k >=
    ``FP8_MIN_WIDTH``, where the FP8 fit has always been read: the narrower quantized GEMMs are
    bound by their per-call costs, which the floor prices)."""
    if dtype in ("fp8", "nvfp4"):
        frame = frame[(frame.n >= FP8_MIN_WIDTH) & (frame.k >= FP8_MIN_WIDTH)]
    return _aic_gemm_rows(frame, dtype)


def fit_gemm_table(rows: GemmRows, peak_flops: float, bytes_per_s: float) -> dict[str, float]:
    """The floored saturating roofline on ``rows``, and the plain one beside it (its error is
    what the floor buys: ``without_floor_rms_log_error``)."""
    floored = fit_gemm(rows, peak_flops, bytes_per_s, GEMM_HALVES, GEMM_FLOORS)
    plain = fit_gemm(rows, peak_flops, bytes_per_s, GEMM_HALVES)
    return {**floored, "without_floor_rms_log_error": plain["rms_log_error"]}


# ------------------------------------------------------------------ attention
def fit_prefill_attention(frame: pd.DataFrame, gpu: GpuSpec, floor_s: float) -> dict[str, float]:
    """``attention_efficiency`` and ``attention_half_keys`` on a context-attention cut (one
    prompt of ``isl`` tokens per sequence, nothing cached), the kernel floor held at
    ``floor_s``; prompts of 16 tokens and more."""
    rows = frame[frame.isl >= 16]
    s = rows.isl.to_numpy(dtype=float)
    batch = rows.batch_size.to_numpy(dtype=float)
    per_pair = 4.0 * rows.num_heads.to_numpy(dtype=float) * _HEAD_DIM / gpu.peak_flops
    log_t = np.log(rows.latency.to_numpy() * 1e-3)
    best = _search(_KEY_HALVES, lambda half: batch * (s * (s + 1) / 2 + half * s) * per_pair,
                   floor_s, log_t)
    flat = ((np.log(batch * s * (s + 1) / 2 * per_pair)[None, :] - np.log(_ATTN_EFFS)[:, None]
             - log_t) ** 2).mean(1)
    return {
        "attention_efficiency": round(best[1], 3),
        "attention_half_keys": best[2],
        "rms_log_error": round(best[0] ** 0.5, 4),
        "flat_rms_log_error": round(float(flat.min()) ** 0.5, 4),
        "num_rows": int(log_t.size),
    }


def _search(halves: tuple[float, ...], work_at: Callable[[float], np.ndarray],
            floor_s: float, log_t: np.ndarray) -> tuple[float, float, float]:
    """(mean squared log error, efficiency, half) of the best ``floor_s + work_at(half) / eff``
    over ``halves`` x ``_ATTN_EFFS``; ``work_at(half)`` is each row's seconds at efficiency 1."""
    best = (np.inf, 0.0, 0.0)
    for half in halves:
        work = work_at(half)
        err = ((np.log(floor_s + work[None, :] / _ATTN_EFFS[:, None]) - log_t) ** 2).mean(1)
        i = int(np.argmin(err))
        if err[i] < best[0]:
            best = (float(err[i]), float(_ATTN_EFFS[i]), half)
    return best


def attention_floor(frame: pd.DataFrame) -> float:
    """The attention kernel's floor: the median decode call of one sequence at <= 128 tokens
    of context (its KV read is well under a microsecond)."""
    rows = frame[(frame.batch_size == 1) & (frame.step < _FLOOR_MAX_CONTEXT)]
    return round(float(np.median(rows.latency.to_numpy())) * 1e-3, 8)


def fit_decode_attention(frame: pd.DataFrame, gpu: GpuSpec, floor_s: float) -> dict[str, float]:
    """``decode_attention_memory_efficiency`` and ``decode_attention_half_tokens`` on a
    generation-attention cut: ``batch_size`` sequences of ``step`` cached tokens each, one new
    token; the rows with at least ``DECODE_MIN_KV_BYTES`` of KV."""
    context = frame.step.to_numpy(dtype=float) + 1.0  # the cache and the new token
    batch = frame.batch_size.to_numpy(dtype=float)
    token_bytes = 2.0 * frame.num_key_value_heads.to_numpy(dtype=float) * _HEAD_DIM * _BF16_BYTES
    keep = batch * context * token_bytes >= DECODE_MIN_KV_BYTES
    fitted = _fit_kv_read(batch[keep], context[keep], token_bytes[keep],
                          frame.latency.to_numpy()[keep] * 1e-3, gpu, floor_s)
    return {**fitted, "min_kv_bytes": DECODE_MIN_KV_BYTES}


def _fit_kv_read(batch: np.ndarray, context: np.ndarray, token_bytes: np.ndarray,
                 time_s: np.ndarray, gpu: GpuSpec, floor_s: float) -> dict[str, float]:
    log_t = np.log(time_s)
    best = _search(_SEQ_HALVES,
                   lambda half: batch * (context + half) * token_bytes / gpu.mem_bytes_per_s,
                   floor_s, log_t)
    return {
        "decode_attention_memory_efficiency": round(best[1], 3),
        "decode_attention_half_tokens": best[2],
        "rms_log_error": round(best[0] ** 0.5, 4),
        "num_rows": int(log_t.size),
    }


# ------------------------------------------------------------------ collectives
def fit_collectives(frame: pd.DataFrame, gpu: GpuSpec) -> dict[str, dict[str, float]]:
    """NCCL all-reduce, all-gather and reduce-scatter over every size and GPU count, and vLLM's
    custom all-reduce below ``CUSTOM_AR_MAX_BYTES`` (``message_size`` in 16-bit elements; for
    the gathers it is the whole gathered buffer, nccl-tests' convention)."""
    def rows(source: str, op: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        sub = frame[(frame.source == source) & (frame.op == op)]
        return (sub.num_gpus.to_numpy(dtype=float),
                sub.message_size.to_numpy(dtype=float) * _BF16_BYTES,
                sub.latency.to_numpy() * 1e-3)

    out: dict[str, dict[str, float]] = {}
    n, size, time_s = rows("nccl", "all_reduce")
    out["allreduce"] = _fit_alpha_busbw(2 * (n - 1) / n * size, time_s, gpu, "allreduce_latency_s")
    n, size, time_s = rows("vllm_graph", "all_reduce")
    small = size < CUSTOM_AR_MAX_BYTES
    out["custom_allreduce"] = {
        **_fit_alpha_busbw(2 * (n[small] - 1) / n[small] * size[small], time_s[small], gpu,
                       "latency_s"),
        "max_bytes": CUSTOM_AR_MAX_BYTES,
    }
    for op in ("all_gather", "reduce_scatter"):
        n, size, time_s = rows("nccl", op)
        out[op] = _fit_alpha_busbw((n - 1) / n * size, time_s, gpu, "latency_s")
    out["allreduce_curves"] = allreduce_curves(frame)
    return out


def allreduce_curves(frame: pd.DataFrame) -> list[dict]:
    """vLLM's all-reduce under CUDA graphs (``vllm_graph``) by world size, as
    ``GpuSpec.allreduce_curves`` holds it: ``[bytes, seconds]`` per measured size (the median of
    repeats), each no slower than any larger size after it: a larger message never takes less
    time, and a timing's noise is delay (the A100's 8-GPU 4 KB row reads 14.9 us between
    5.6 us at 2 KB and 6.3 us at 8 KB), so the lower envelope is kept."""
    sub = frame[(frame.source == "vllm_graph") & (frame.op == "all_reduce")]
    curves: list[dict] = []
    for n, group in sub.groupby("num_gpus"):
        median = group.groupby("message_size").latency.median().sort_index()
        envelope = np.minimum.accumulate(median.to_numpy()[::-1] * 1e-3)[::-1]
        curves.append({"gpus": int(n), "points": [
            [int(size) * _BF16_BYTES, float(f"{t:.4g}")]
            for size, t in zip(median.index, envelope, strict=True)]})
    return curves


# ------------------------------------------------------------------ fused MoE
def moe_rows(hidden: np.ndarray, inter: np.ndarray, routed: np.ndarray, touched: np.ndarray,
             time_s: np.ndarray, weight_bytes: float = _BF16_BYTES,
             input_bytes: float = _BF16_BYTES) -> GemmRows:
    """Fused-MoE calls as the cost model prices a layer's experts: ``touched`` experts of
    ``routed / touched`` rows each, both projections (gate_up ``h x 2f``, down ``f x h``)
    together; ``tokens`` are rows per expert, ``flops_per_token`` the touched experts' FLOPs
    per such row. ``weight_bytes``: per expert weight as stored; ``input_bytes``: per element
    each projection reads (FP8 W8A8 kernels quantize their inputs; outputs are 16-bit)."""
    weights = 3.0 * hidden * inter  # gate, up and down, per expert
    # each projection reads its input and writes its output
    act = (hidden + inter) * input_bytes + (2 * inter + hidden) * _BF16_BYTES
    return GemmRows(tokens=routed / touched, flops_per_token=2.0 * weights * touched,
                    bytes=weights * touched * weight_bytes + act * routed,
                    time_s=time_s)


def fit_moe(rows: GemmRows, peak_flops: float, bytes_per_s: float) -> dict[str, float]:
    """The floored saturating roofline on fused-MoE rows (``moe_rows``)."""
    return fit_gemm(rows, peak_flops, bytes_per_s, GEMM_HALVES, MOE_FLOORS, log_spaced=False,
                    lowest=MOE_LOWEST_EFFICIENCY)


def aic_moe_rows(frame: pd.DataFrame, weight_bytes: float = _BF16_BYTES,
                 input_bytes: float = _BF16_BYTES) -> GemmRows:
    """aiconfigurator's fused-MoE rows as the cost model prices a fit's experts: each GPU
    holds ``num_experts / ep`` experts of ``inter / tp`` width and gets ``tokens x topk / ep``
    rows, over as many of its experts as uniform routing touches on average
    (``clustersim.cost.prices.experts_touched``)."""
    ep = frame.moe_ep_size.to_numpy(dtype=float)
    tokens = frame.num_tokens.to_numpy(dtype=float)
    topk, experts = frame.topk.to_numpy(dtype=float), frame.num_experts.to_numpy(dtype=float)
    routed = tokens * topk / ep
    # experts_touched's formula over arrays (the compiled function takes floats)
    touched = experts * (1.0 - (1.0 - topk / experts) ** tokens) / ep
    return moe_rows(frame.hidden_size.to_numpy(dtype=float),
                    frame.inter_size.to_numpy(dtype=float) / frame.moe_tp_size.to_numpy(),
                    routed, touched, frame.latency.to_numpy() * 1e-3, weight_bytes, input_bytes)


def moe_curves(frame: pd.DataFrame) -> list[dict]:
    """Each (shape, split) of one kernel's rows as ``MoeCurve`` holds it: ``[tokens, seconds]``
    per measured token count (the median of repeats), each no slower than any larger count
    after it (a timing's noise is delay, as ``allreduce_curves`` reads it)."""
    keys = ["hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size", "moe_ep_size"]
    curves: list[dict] = []
    for key, group in frame.groupby(keys):
        median = group.groupby("num_tokens").latency.median().sort_index()
        envelope = np.minimum.accumulate(median.to_numpy()[::-1] * 1e-3)[::-1]
        hidden, inter, topk, experts, tp, ep = (int(v) for v in key)
        curves.append({"hidden_size": hidden, "inter_size": inter, "topk": topk,
                       "num_experts": experts, "moe_tp": tp, "moe_ep": ep, "points": [
                           [int(n), float(f"{t:.4g}")]
                           for n, t in zip(median.index, envelope, strict=True)]})
    return curves


DEEPEP_FEWEST_TOKENS = {"deepep_ll": 8, "deepep_ht": 16}
"""Rows whose median is a DeepEP call's fixed time: the low-latency kernels at up to 8 tokens
(flat there: 44-67 us a call on the H100 and H200), the normal ones at the fewest measured
(16: their dispatch stays near 250-330 us up to 512 tokens, the notify and the host's wait for
the receive counts)."""


def deepep_calls(frame: pd.DataFrame, stem: str) -> dict:
    """``DeepEpCalls`` from a ``moe_a2a`` cut: each kernel's and phase's median call over the
    hidden sizes, top-k and expert counts at its fewest tokens (``DEEPEP_FEWEST_TOKENS``), in
    the one node the table measured (8 GPUs; a Grace-Blackwell compute tray's 4)."""
    (ep,) = frame.ep_size.unique()
    def call_s(backend: str, phase: str) -> float:
        rows = frame[(frame.comm_backend == backend) & (frame.phase == phase)
                     & (frame.num_tokens <= DEEPEP_FEWEST_TOKENS[backend])]
        return round(float(np.median(rows.latency_us.to_numpy())) * 1e-6, 8)

    return {"low_latency_dispatch_s": call_s("deepep_ll", "dispatch"),
            "low_latency_combine_s": call_s("deepep_ll", "combine"),
            "normal_dispatch_s": call_s("deepep_ht", "dispatch"),
            "normal_combine_s": call_s("deepep_ht", "combine"),
            "table": f"aiconfigurator vLLM {MOE_VLLM_VERSION} {stem} moe_a2a_perf, EP {ep} in one "
                     f"node (moe_a2a_{stem}.csv)"}


def calibrate_moe(gpu_id: str, read: Reader) -> dict:
    """Every fused-MoE kernel of ``gpu_id``'s own table (``MOE_TABLES``), one entry per format
    and kernel: its fit over the table's rows and the measured curve of every shape and split;
    ``moe_gemm`` the 16-bit entry's fit."""
    gpu = load_gpu(gpu_id, profile="default")
    stem = MOE_TABLES[gpu_id]
    moe_file = AIC_DIR / f"moe_{stem}.csv"
    frame = read(moe_file)
    frame = frame[frame.distribution == MOE_DISTRIBUTION]
    kernels: list[dict] = []
    for (fmt, kernel), rows in frame.groupby(["moe_dtype", "kernel"]):
        fp8, fp4 = fmt in MOE_FP8_FORMATS, fmt in MOE_FP4_FORMATS
        if (fp8 and gpu.fp8_dense_tflops is None) or (fp4 and gpu.fp4_dense_tflops is None):
            continue
        if fp4:
            assert gpu.fp4_dense_tflops is not None
            peak, input_bytes = gpu.fp4_dense_tflops * 1e12, NVFP4_BYTES
        elif fp8:
            assert gpu.fp8_dense_tflops is not None
            peak, input_bytes = gpu.fp8_dense_tflops * 1e12, _FP8_BYTES
        else:
            peak, input_bytes = gpu.peak_flops, _BF16_BYTES
        node = rows[rows.moe_tp_size * rows.moe_ep_size <= MOE_FIT_MAX_GPUS]
        fit = fit_moe(aic_moe_rows(node, MOE_WEIGHT_BYTES[fmt], input_bytes),
                      peak, gpu.mem_bytes_per_s)
        kernels.append({
            "dtype": fmt, "kernel": kernel,
            "table": f"aiconfigurator vLLM {MOE_VLLM_VERSION} {stem} moe_perf, "
                     f"{MOE_DISTRIBUTION} routing (moe_{stem}.csv)",
            "fit": {k: fit[k] for k in ("compute_efficiency", "compute_half_tokens",
                                        "memory_efficiency", "floor_s")},
            "fit_rms_log_error": fit["rms_log_error"],
            "fit_rows": fit["num_rows"],
            "curves": moe_curves(rows),
        })
    a2a_file = AIC_DIR / f"moe_a2a_{stem}.csv"
    out: dict = {"moe_kernels": kernels, "sources": [moe_file, a2a_file],
                 "deepep_calls": deepep_calls(read(a2a_file), stem)}
    for entry in kernels:
        if entry["dtype"] == "bfloat16":
            out["moe_gemm"] = {**entry["fit"], "rms_log_error": entry["fit_rms_log_error"],
                               "num_rows": entry["fit_rows"]}
    return out


def profile_moe_rows(frame: pd.DataFrame, model_id: str) -> GemmRows:
    """LLMServingSim's fused-MoE profile of one layer of ``model_id``: ``tokens`` tokens,
    ``activated_experts`` of this GPU's experts receiving their ``tokens x top-k / ep`` rows."""
    m = load_model(model_id)
    routed = (frame.tokens.to_numpy(dtype=float) * m.num_experts_per_tok
              / frame.ep.to_numpy(dtype=float))
    n = len(frame)
    return moe_rows(np.full(n, float(m.hidden_size)), np.full(n, float(m.moe_intermediate_size)),
                    routed, frame.activated_experts.to_numpy(dtype=float),
                    frame.time_us.to_numpy() * 1e-6)


# ------------------------------------------------------------------ per GPU
def calibrate_gpu(gpu_id: str, read: Reader = pd.read_csv) -> dict:
    """Every fit of one GPU aiconfigurator measured (``TABLES``)."""
    gpu = load_gpu(gpu_id, profile="default")
    stem = TABLES[gpu_id]
    gemm_file = AIC_DIR / f"gemm_{stem}.csv"
    gemm_frame = read(gemm_file)
    fit: dict = {"gemm": fit_gemm_table(gemm_rows(gemm_frame, "bfloat16"), gpu.peak_flops,
                                        gpu.mem_bytes_per_s)}
    if gpu.fp8_dense_tflops is not None and (gemm_frame.gemm_dtype == "fp8").any():
        fit["fp8_gemm"] = fit_gemm_table(gemm_rows(gemm_frame, "fp8"),
                                         gpu.fp8_dense_tflops * 1e12, gpu.mem_bytes_per_s)
    if gpu.fp4_dense_tflops is not None and (gemm_frame.gemm_dtype == "nvfp4").any():
        fit["fp4_gemm"] = fit_gemm_table(gemm_rows(gemm_frame, "nvfp4"),
                                         gpu.fp4_dense_tflops * 1e12, gpu.mem_bytes_per_s)
    decode_file = AIC_DIR / f"generation_attention_{stem}.csv"
    prefill_file = AIC_DIR / f"context_attention_{stem}.csv"
    decode = read(decode_file)
    floor_s = attention_floor(decode)
    fit["attention"] = {**fit_prefill_attention(read(prefill_file), gpu, floor_s),
                        "attention_floor_s": floor_s, "measured_on": gpu_id}
    fit["decode_attention"] = fit_decode_attention(decode, gpu, floor_s)
    fit["sources"] = [gemm_file, prefill_file, decode_file]
    if gpu_id in COMM_TABLES:
        comm_file = AIC_DIR / f"allreduce_{COMM_TABLES[gpu_id]}.csv"
        fit.update(fit_collectives(read(comm_file), gpu))
        fit["sources"].append(comm_file)
    if gpu_id in MOE_TABLES:
        moe = calibrate_moe(gpu_id, read)
        fit.update({k: v for k, v in moe.items() if k != "sources"})
        fit["sources"] += moe["sources"]
    return fit


def calibrate_layer_profile(gpu_id: str, read: Reader, donor: dict | None) -> dict:
    """The RTX 4090 or RTX PRO 6000 Server Edition on its own LLMServingSim layer profile, in
    fit-v2's forms: the GEMM floor searched on its dense rows unless a donor lends it, prefill
    attention with keys-per-query saturation, decode attention and the attention floor on its
    own decode rows."""
    gpu = load_gpu(gpu_id, profile="default")
    pro = gpu_id != "rtx4090"
    v1 = _calibrate_rtx_pro_6000(read) if pro else _calibrate_rtx4090(read)
    folder = FIT_DIR / ("rtx-pro-6000" if pro else "rtx4090")
    dense = [folder / "dense.csv"] + ([folder / "dense_tp2.csv"] if pro else [])
    rows = _concat([_layer_profile_gemm_rows(read(dense[0]))]
                   + [_layer_profile_gemm_rows(read(p), tp=2) for p in dense[1:]])
    if donor is None:
        gemm = fit_gemm_table(rows, gpu.peak_flops, gpu.mem_bytes_per_s)
    else:  # the floor the donor's table measured; the efficiencies from the GPU's own rows
        gemm = {**fit_gemm(rows, gpu.peak_flops, gpu.mem_bytes_per_s, GEMM_HALVES,
                           (donor["gemm"]["floor_s"],)),
                "floor_from": DONORS[gpu_id]}
    m = load_model("llama-3.1-8b")
    decode_file = folder / ("attention_decode.csv" if pro else "attention.csv")
    dec = read(decode_file)
    dec = dec[(dec.prefill_chunk == 0) & (dec.n_decode > 0)]
    batch = dec.n_decode.to_numpy(dtype=float)
    context = dec.kv_decode.to_numpy(dtype=float)
    time_s = dec.time_us.to_numpy() * 1e-6
    floor_s = round(float(np.median(time_s[(batch == 1) & (context <= _FLOOR_MAX_CONTEXT)])), 8)
    token_bytes = np.full(batch.shape, 2.0 * m.kv_size * _BF16_BYTES)
    keep = batch * context * token_bytes >= DECODE_MIN_KV_BYTES
    decode = {**_fit_kv_read(batch[keep], context[keep], token_bytes[keep], time_s[keep], gpu,
                             floor_s),
              "min_kv_bytes": DECODE_MIN_KV_BYTES}
    attn_file = folder / ("attention_prefill.csv" if pro else "attention.csv")
    attn = read(attn_file)
    # chunks of 256+ tokens, as fit-v1: below a query tile (128 rows) FlashAttention's time
    # follows the cached keys alone, which no per-pair price holds
    pre = attn[(attn.n_decode == 0) & (attn.prefill_chunk >= _MIN_ATTN_CHUNK)]
    if pro:  # single-sequence rows only (see fit._calibrate_rtx_pro_6000)
        pre = pre[pre.prefill_key >= pre.prefill_chunk]
        s = pre.prefill_chunk.to_numpy(dtype=float)
        c = pre.prefill_key.to_numpy(dtype=float) - s
    else:
        s, c = pre.prefill_chunk.to_numpy(dtype=float), pre.kv_prefill.to_numpy(dtype=float)
    attention = {**_fit_chunk_attention(s, c, pre.time_us.to_numpy() * 1e-6, m.q_size, gpu,
                                        floor_s),
                 "attention_floor_s": floor_s, "measured_on": gpu_id}
    sources = list(v1["sources"])
    if decode_file not in sources:
        sources.append(decode_file)
    fit = {**{k: v for k, v in v1.items() if k not in ("gemm", "attention", "sources")},
           "gemm": gemm, "attention": attention, "decode_attention": decode, "sources": sources}
    if pro:  # its fused-MoE profile of Qwen3-30B-A3B
        moe_file = folder / "moe_qwen3-30b-a3b.csv"
        fit["moe_gemm"] = {**fit_moe(profile_moe_rows(read(moe_file), "qwen3-30b-a3b"),
                                     gpu.peak_flops, gpu.mem_bytes_per_s),
                           "model": "qwen3-30b-a3b"}
        sources.append(moe_file)
    return fit


def _fit_chunk_attention(s: np.ndarray, c: np.ndarray, time_s: np.ndarray, q_size: int,
                         gpu: GpuSpec, floor_s: float) -> dict[str, float]:
    """Prefill chunks of s queries after c cached tokens: ``floor + (pairs + K_half x s)`` at
    the saturated efficiency."""
    pairs = s * c + s * (s + 1) / 2
    per_pair = 4.0 * q_size / gpu.peak_flops
    log_t = np.log(time_s)
    best = _search(_KEY_HALVES, lambda half: (pairs + half * s) * per_pair, floor_s, log_t)
    return {"attention_efficiency": round(best[1], 3), "attention_half_keys": best[2],
            "rms_log_error": round(best[0] ** 0.5, 4), "num_rows": int(log_t.size)}


MOE_FITS = ("moe_gemm",)
"""The fused-MoE fits a profile may carry outside ``moe_kernels`` (16-bit experts)."""


def moe_kernel_values(fit: dict, label: str) -> list[dict]:
    """The profile's ``moe_kernels``: each kernel's format, name, table, fit (labelled) and
    curves."""
    return [{"dtype": k["dtype"], "kernel": k["kernel"], "table": k["table"],
             "fit": {**k["fit"], "calibration": label},
             "fit_rms_log_error": k["fit_rms_log_error"], "curves": k["curves"]}
            for k in fit.get("moe_kernels", ())]


def moe_provenance(fit: dict) -> list[dict]:
    """What each fused-MoE kernel entry was fitted on, without its curves."""
    return [{"dtype": k["dtype"], "kernel": k["kernel"], "rms_log_error": k["fit_rms_log_error"],
             "num_rows": k["fit_rows"], "curves": len(k["curves"])}
            for k in fit.get("moe_kernels", ())]


def profile_values(fit: dict) -> dict:
    """The GpuSpec fields a fit-v2 entry sets (``calibrate`` adds labels and provenance)."""
    gemm, attn = fit["gemm"], fit["attention"]
    values = {
        "compute_efficiency": gemm["compute_efficiency"],
        "memory_efficiency": gemm["memory_efficiency"],
        "compute_half_tokens": gemm["compute_half_tokens"],
        "gemm_floor_s": gemm["floor_s"],
        "attention_efficiency": attn["attention_efficiency"],
        "attention_half_keys": attn["attention_half_keys"],
        "attention_floor_s": attn["attention_floor_s"],
        **HOST_OVERHEADS,
    }
    for key in MOE_FITS:
        if key in fit:
            values[key] = {k: fit[key][k] for k in ("compute_efficiency", "compute_half_tokens",
                                                    "memory_efficiency", "floor_s")}
    if "decode_attention" in fit:
        dec = fit["decode_attention"]
        values["decode_attention_memory_efficiency"] = dec["decode_attention_memory_efficiency"]
        values["decode_attention_half_tokens"] = dec["decode_attention_half_tokens"]
    values.update(collective_values(fit))
    if "custom_allreduce" in fit:
        values["custom_allreduce_latency_s"] = fit["custom_allreduce"]["latency_s"]
        values["custom_allreduce_link_efficiency"] = fit["custom_allreduce"]["link_efficiency"]
    if "allreduce_curves" in fit:
        values["allreduce_curves"] = fit["allreduce_curves"]
    return values


def provenance(fit: dict) -> dict:
    """What each value was fitted on, as the profile records it."""
    parts = ("gemm", "fp8_gemm", "fp4_gemm", "attention", "decode_attention", *MOE_FITS,
             "allreduce", "custom_allreduce", "all_gather", "reduce_scatter")
    return {
        **{k: fit[k] for k in parts if k in fit},
        **({"moe_kernels": moe_provenance(fit)} if "moe_kernels" in fit else {}),
        "overheads": HOST_SOURCE,
        "sources": [str(Path(p).relative_to(FIT_DIR)) for p in fit["sources"]],
    }


# ------------------------------------------------------------------ the set
def calibrate_v2(read: Reader = pd.read_csv) -> dict[str, dict]:
    """fit-v2 for every GPU: the aiconfigurator GPUs on their tables, the RTX 4090 and RTX PRO
    6000 Server Edition on their own profiles in the same forms, the rest transferred from the
    nearest measured GPU as fit-v1 does (``fit.TRANSFERS``; the L40S now has its own)."""
    fits = {gpu_id: calibrate_gpu(gpu_id, read) for gpu_id in TABLES}
    fits["rtx4090"] = calibrate_layer_profile("rtx4090", read, fits[DONORS["rtx4090"]])
    fits["rtx-pro-6000-server"] = calibrate_layer_profile("rtx-pro-6000-server", read, None)
    out: dict[str, dict] = {}
    for gpu_id, fit in fits.items():
        values = profile_values(fit)
        for key in MOE_FITS:
            if key in values:
                values[key]["calibration"] = f"{FIT_ID}:{gpu_id}"
        if "moe_kernels" in fit:
            values["moe_kernels"] = moe_kernel_values(fit, f"{FIT_ID}:{gpu_id}")
        if "deepep_calls" in fit:
            values["deepep_calls"] = fit["deepep_calls"]
        out[gpu_id] = {**values, "calibration": f"{FIT_ID}:{gpu_id}",
                       "provenance": provenance(fit)}
    for gpu_id, donor in TRANSFERS.items():
        if gpu_id in fits:
            continue
        out[gpu_id] = transferred(out[donor], donor, gpu_id)
    for gpu_id, profile in out.items():
        donor = gpu_id if "fp8_gemm" in fits.get(gpu_id, {}) else FP8_TRANSFERS.get(gpu_id)
        if donor is None:
            continue
        fp8 = fits[donor]["fp8_gemm"]
        label = f"{FIT_ID}:{donor}" if donor == gpu_id else f"{FIT_ID}:{donor}->{gpu_id}"
        profile["fp8_gemm"] = {
            "compute_efficiency": fp8["compute_efficiency"],
            "compute_half_tokens": fp8["compute_half_tokens"],
            "memory_efficiency": fp8["memory_efficiency"],
            "floor_s": fp8["floor_s"],
            "calibration": label,
        }
        if donor != gpu_id:
            profile["provenance"] = {**profile["provenance"], "fp8_transferred_from": donor}
        if "fp4_gemm" in fits.get(gpu_id, {}):  # its own NVFP4 table; never lent
            fp4 = fits[gpu_id]["fp4_gemm"]
            profile["fp4_gemm"] = {**{k: fp4[k] for k in (
                "compute_efficiency", "compute_half_tokens", "memory_efficiency", "floor_s")},
                "calibration": f"{FIT_ID}:{gpu_id}"}
        # keep the calibration label and provenance last, as every profile writes them
        profile["calibration"] = profile.pop("calibration")
        profile["provenance"] = profile.pop("provenance")
    small_kernels.apply(out, FIT_ID, read)
    return out


LINK_FIELDS = (*_LINK_FIELDS, "custom_allreduce_latency_s", "custom_allreduce_link_efficiency",
               "allreduce_curves", "deepep_calls")
"""Fields measured on the donor's link: a transfer to another link keeps the catalog's."""


def transferred(profile: dict, donor: str, gpu_id: str) -> dict:
    """``donor``'s fit-v2 values for ``gpu_id``, its link's fits only on the same link."""
    label = f"{FIT_ID}:{donor}->{gpu_id}"
    values = {k: v for k, v in profile.items() if k not in ("calibration", "provenance")}
    for key in MOE_FITS:
        if key in values:  # its own copy, labelled as borrowed
            values[key] = {**values[key], "calibration": label}
    if "moe_kernels" in values:  # the fits, which scale with the GPU's peaks; no timings
        values["moe_kernels"] = [{**k, "fit": {**k["fit"], "calibration": label}, "curves": []}
                                 for k in values["moe_kernels"]]
    for key in () if same_link(gpu_id, donor) else LINK_FIELDS:
        values.pop(key, None)
    return {**values, "calibration": label, "provenance": {"transferred_from": donor}}
