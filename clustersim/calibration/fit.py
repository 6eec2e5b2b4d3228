"""Fit the cost model's free parameters per GPU on the shipped calibration data.

What is fitted, and on what (all kernel-level measurements, no end-to-end serving run):

- ``compute_efficiency``, ``memory_efficiency``, ``compute_half_tokens``: every layer GEMM
  (QKV, O, gate/up, down) of Vidur's A100/H100 operator tables and the RTX 4090 and RTX PRO
  6000 layer profiles, priced
  ``max((tokens + t_half) x FLOPs per token / (eff_c x peak), bytes / (eff_m x bandwidth))``.
  ``t_half`` makes the GEMM efficiency saturate with the number of tokens:
  ``eff(tokens) = eff_c x tokens / (tokens + t_half)`` (small-M GEMMs never reach peak).
  A grid search minimises the squared log error over all rows.
- ``attention_efficiency``: prefill attention rows (Vidur A100 FlashAttention at TP2, RTX 4090
  and RTX PRO 6000 prefill-only rows), causal query-key pairs priced against the GEMM fit's
  memory efficiency.
- ``allreduce_latency_s`` and the link efficiency: Vidur's intra-node NCCL all-reduce times
  (DGX NVLink) and the RTX PRO 6000's 2-rank NCCL samples (PCIe Gen5),
  ``t = alpha + 2(n-1)/n x bytes / busbw``, least squares per worker count. Where the samples
  also hold all-gathers and reduce-scatters (the RTX PRO 6000's), those get their own latency
  and bus bandwidth (data-parallel MoE layers and the TP logits gather use them).
- ``fp8_gemm`` (the FP8 W8A8 GEMM's ``eff_c``, ``eff_m``, ``t_half`` at the FP8 peak): NVIDIA
  aiconfigurator's measured vLLM 0.24 FP8 GEMMs (per-tensor scales, CUTLASS scaled_mm with
  dynamic per-token activation quantization) on H100 SXM and L40S, the same saturating
  roofline and grid search, weights at one byte, activations read as FP8 and written 16-bit,
  on shapes at least ``FP8_MIN_WIDTH`` wide (1024-wide ones run FP8 slower than BF16 at every
  M there: a fixed cost the roofline cannot hold). The same table's BF16 rows get the same
  fit for reference only (provenance ``bf16_same_table``: the FP8/BF16 ratio on like-for-like
  data); the shipped 16-bit efficiencies stay Vidur's. The table's block-scaled FP8 rows are
  not fitted (a ~60 us floor at M <= 16 the roofline fits with rms log error 0.79): block
  checkpoints are priced with the per-tensor fit.
- Per-step, per-layer and per-request CPU overhead: not in any kernel profile. They stay the
  BLIS fit on H100 vLLM traces (126 us/step, 32.1 us/layer, 4.4 us/request; public, see
  hardware_and_roofline.md section 3.5), recorded as such in the provenance.

GPUs without measurements take the fit of the nearest measured GPU (``TRANSFERS``, and
``FP8_TRANSFERS`` for the FP8 fits: the RTX 4090 borrows the L40S's, the other Ada card); the
profile says so. DistServe's fitted vLLM step model is a cross-check only (``distserve_check``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from clustersim.calibration.sources import FIT_DIR
from clustersim.catalog import apply_profile, load_gpu, load_model
from clustersim.catalog.specs import GpuSpec
from clustersim.cost.roofline import BatchShape, CostModel

Reader = Callable[[Path], pd.DataFrame]

FIT_ID = "fit-v1"
BLIS_OVERHEADS = {
    "per_step_overhead_s": 126e-6,
    "per_layer_overhead_s": 32.1e-6,
    "per_request_overhead_s": 4.4e-6,
}
BLIS_SOURCE = (
    "BLIS trained-physics fit on H100 vLLM traces (inference-sim PR 448): 126 us/step, "
    "32.1 us/layer, 4.4 us/request; not refitted (kernel profiles hold no CPU time)"
)
HOST_OVERHEADS = {
    "per_step_overhead_s": 126e-6,
    "per_layer_overhead_s": 3e-6,
    "per_request_overhead_s": 25e-6,
}
"""fit-v2's time outside the kernels: the step's host time and launches."""
HOST_MEASURED_ON = "h100-sxm"
"""The GPU of the serving runs ``HOST_OVERHEADS`` is fitted on (every fit-v2 GPU takes it)."""
HOST_SOURCE = (
    "per layer and per request fitted on the 45 measured vLLM serving runs of the calibration "
    "set (aiconfigurator silicon rows: Llama-3.1-70B FP8, H100 SXM, TP 2-8, 4-64 clients), the "
    "grid of `python benchmarks/silicon_calibration.py --fit-host` with the small kernels "
    "priced per architecture (clustersim.cost.small_kernels; mean TPOT error 3.18 %, bias "
    "+0.51 %, the grid's best; 3/20 and 4.5/20 us lie within 0.02 point, 0/25 and 4.5/25 "
    "within 0.15, 18/25 (the per-layer time before the small kernels were priced) at 7.94 %): "
    "3 us/layer (what a CUDA-graph replay leaves beside the kernels' own GPU time), "
    "25 us/request (the host's schedule, input preparation and output processing of each "
    "running request); 126 us/step kept from the BLIS fit"
)

_BF16_BYTES = 2
_GEMM_OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
_VIDUR_MLP = {
    "a100-80gb-sxm": ("a100", ("Llama-2-7b-hf", "Llama-2-70b-hf", "Meta-Llama-3-8B")),
    "h100-sxm": ("h100", ("Llama-2-7b-hf", "Llama-2-70b-hf")),
}
_VIDUR_NET = {"a100-80gb-sxm": "a100_dgx", "h100-sxm": "h100_dgx"}
TRANSFERS = {
    "a100-40gb-sxm": "a100-80gb-sxm",
    "a100-40gb-pcie": "a100-80gb-sxm",
    "a100-80gb-pcie": "a100-80gb-sxm",
    "h100-pcie": "h100-sxm",
    "h200": "h100-sxm",
    "b200": "h100-sxm",
    "b300": "h100-sxm",
    "gb200": "h100-sxm",
    "gb300": "h100-sxm",
    "l40s": "rtx4090",
    "rtx-pro-6000": "rtx-pro-6000-server",
}
"""GPU -> the measured GPU whose efficiencies it borrows (same vendor generation or class).
fit-v1 has no Hopper-or-later table but the H100's; fit-v2 fits the H200 and the Blackwell
GPUs on their own aiconfigurator tables (``clustersim.calibration.aiconfigurator.TABLES``)."""
FP8_TABLES = {"h100-sxm": "gemm_h100_sxm.csv", "l40s": "gemm_l40s.csv"}
"""GPUs with measured FP8 GEMMs -> their aiconfigurator table under ``fit/aiconfigurator``."""
FP8_TRANSFERS = {
    "h100-pcie": "h100-sxm",
    "h200": "h100-sxm",
    "b200": "h100-sxm",
    "b300": "h100-sxm",
    "gb200": "h100-sxm",
    "gb300": "h100-sxm",
    "rtx4090": "l40s",
    "rtx-pro-6000-server": "l40s",
    "rtx-pro-6000": "l40s",
}
"""GPU with FP8 tensor cores -> the measured GPU whose FP8 fit it borrows (Hopper from the
H100 SXM; the GDDR cards from the L40S, the RTX 4090 sharing its Ada sm_89)."""
_FP8_BYTES = 1
_FP8_HALVES = (0.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0)
FP8_MIN_WIDTH = 2048
"""Narrowest n and k of the aiconfigurator rows the FP8 fit reads."""
_AIC_FP8_KERNEL = "CutlassFP8ScaledMMLinearKernel"
_MIN_ATTN_CHUNK = 256
_LINK_FIELDS = ("link_efficiency", "allreduce_latency_s", "allgather_latency_s",
                "allgather_link_efficiency", "reduce_scatter_latency_s",
                "reduce_scatter_link_efficiency")


def same_link(gpu_id: str, donor: str) -> bool:
    """Whether ``gpu_id``'s collectives run on the same link as ``donor``'s (the catalog's
    link and PCIe fallback are equal, e.g. the H200 and the H100 SXM on NVLink 4, both RTX
    PRO 6000 editions on PCIe Gen5 x16): a transfer then keeps the donor's measured
    collective fits, where on another link it keeps the catalog's NCCL defaults."""
    gpu, source = load_gpu(gpu_id, profile="default"), load_gpu(donor, profile="default")
    return gpu.link == source.link and gpu.pcie == source.pcie


@dataclass(frozen=True)
class GemmRows:
    """One GEMM measurement per row: FLOPs per token, bytes at that many tokens, time."""

    tokens: np.ndarray
    flops_per_token: np.ndarray
    bytes: np.ndarray
    time_s: np.ndarray


def fit_gemm(rows: GemmRows, peak_flops: float, bytes_per_s: float,
             halves: tuple[float, ...] = (0.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0),
             floors: tuple[float, ...] | None = None, log_spaced: bool = True,
             lowest: float = 0.30) -> dict[str, float]:
    """Grid-search ``(eff_c, eff_m, t_half)`` minimising the squared log error of the roofline
    over ``halves`` (the FP8 tables saturate later than the 16-bit ones: a longer grid).

    ``floors`` (seconds) adds a per-call floor to the search, ``floor + max(...)``, and the
    result's ``floor_s``: every ``(t_half, floor)`` pair on a coarse efficiency grid, then the
    fine grid around the best pair. None: the plain roofline, on the fine grid throughout.
    ``log_spaced``: keep only the rows at 1, 2, 3, 4, 6, 8, 12, ... tokens (every regime, few
    rows); False for rows whose ``tokens`` are not whole (rows per expert). ``lowest``: the
    lowest efficiency searched (a fused-MoE kernel may run far below a dense GEMM's)."""
    if log_spaced:
        keep = _log_spaced(rows.tokens)
        rows = GemmRows(*(getattr(rows, f)[keep] for f in GemmRows.__annotations__))
    fine = np.linspace(lowest, 1.0, round((1.0 - lowest) * 100) + 1)
    if floors is None:
        best = min(_gemm_grid(rows, peak_flops, bytes_per_s, half, 0.0, fine) for half in halves)
    else:
        coarse = np.linspace(lowest, 1.0, 15)
        _, _, _, half, floor = min(_gemm_grid(rows, peak_flops, bytes_per_s, h, f, coarse)
                                   for h in halves for f in floors)
        near_h = _neighbours(halves, half)
        near_f = _neighbours(floors, floor)
        best = min(_gemm_grid(rows, peak_flops, bytes_per_s, h, f, fine)
                   for h in near_h for f in near_f)
    err, eff_c, eff_m, half, floor = best
    out = {
        "compute_efficiency": round(eff_c, 3),
        "memory_efficiency": round(eff_m, 3),
        "compute_half_tokens": half,
        "rms_log_error": round(err ** 0.5, 4),
        "num_rows": int(rows.time_s.size),
    }
    if floors is not None:
        out["floor_s"] = round(floor, 9)
    return out


def _gemm_grid(rows: GemmRows, peak_flops: float, bytes_per_s: float, half: float,
               floor: float, effs: np.ndarray) -> tuple[float, float, float, float, float]:
    """(mean squared log error, eff_c, eff_m, half, floor) of the best efficiencies on ``effs``
    for one ``half`` and ``floor``."""
    comp = (rows.tokens + half) * rows.flops_per_token / peak_flops  # at eff_c = 1
    mem = rows.bytes / bytes_per_s  # at eff_m = 1
    # pred[i, j, row] = floor + max(comp / eff_c[i], mem / eff_m[j])
    pred = floor + np.maximum(comp[None, None, :] / effs[:, None, None],
                              mem[None, None, :] / effs[None, :, None])
    err = ((np.log(pred) - np.log(rows.time_s)) ** 2).mean(axis=2)
    i, j = np.unravel_index(np.argmin(err), err.shape)
    return float(err[i, j]), float(effs[i]), float(effs[j]), half, floor


def _neighbours(grid: tuple[float, ...], value: float) -> tuple[float, ...]:
    """``value`` and the grid points either side of it."""
    i = grid.index(value)
    return grid[max(0, i - 1): i + 2]


def _log_spaced(tokens: np.ndarray) -> np.ndarray:
    t = tokens.astype(np.int64)
    power = t & (t - 1) == 0
    three = (t % 3 == 0) & ((t // 3) & (t // 3 - 1) == 0)
    return power | three


def fit_attention(
    flops: np.ndarray, kv_bytes: np.ndarray, time_s: np.ndarray, gpu: GpuSpec, eff_m: float
) -> dict[str, float]:
    """The attention efficiency that best prices prefill attention rows (log least squares)."""
    effs = np.linspace(0.05, 1.0, 96)
    mem = kv_bytes / (eff_m * gpu.mem_bytes_per_s)
    pred = np.maximum(flops[None, :] / (effs[:, None] * gpu.peak_flops), mem[None, :])
    err = ((np.log(pred) - np.log(time_s)) ** 2).mean(axis=1)
    k = int(np.argmin(err))
    return {
        "attention_efficiency": round(float(effs[k]), 3),
        "rms_log_error": round(float(err[k]) ** 0.5, 4),
        "num_rows": int(time_s.size),
    }


def _fit_alpha_busbw(bytes_moved: np.ndarray, time_s: np.ndarray, gpu: GpuSpec,
                     latency_key: str) -> dict[str, float]:
    """``t = alpha + bytes_moved / busbw`` by relative least squares (each row divided by its
    time, so small messages count as much); busbw as a fraction of ``gpu.link``."""
    design = np.stack([np.ones_like(bytes_moved), bytes_moved], axis=1) / time_s[:, None]
    (alpha, s_per_byte), *_ = np.linalg.lstsq(design, np.ones_like(time_s), rcond=None)
    busbw = 1.0 / s_per_byte
    return {
        latency_key: round(float(alpha), 7),
        "link_efficiency": round(float(min(1.0, busbw / (gpu.link.bw_gb_per_s_per_dir * 1e9))), 3),
        "busbw_gb_per_s": round(float(busbw) / 1e9, 1),
        "num_rows": int(time_s.size),
    }


def fit_allreduce(frame: pd.DataFrame, gpu: GpuSpec) -> dict[str, float]:
    """``alpha`` and bus bandwidth of NCCL all-reduce inside one node, over all worker counts:
    a ring moves ``2(n-1)/n x bytes`` over each GPU's link."""
    ring = 2 * (frame.num_workers - 1) / frame.num_workers
    return _fit_alpha_busbw(ring.to_numpy() * frame["size"].to_numpy(),
                            frame.all_reduce_median.to_numpy() * 1e-3, gpu,
                            "allreduce_latency_s")


def fit_collective(bytes_: np.ndarray, time_s: np.ndarray, num_gpus: int,
                   gpu: GpuSpec) -> dict[str, float]:
    """``alpha`` and bus bandwidth of an all-gather (``bytes_``: each rank's input) or a
    reduce-scatter (each rank's output): every rank receives ``(n - 1) x bytes``."""
    return _fit_alpha_busbw((num_gpus - 1) * bytes_, time_s, gpu, "latency_s")


# ------------------------------------------------------------------ readers
def _vidur_gemm_rows(frame: pd.DataFrame) -> GemmRows:
    tp = frame.num_tensor_parallel_workers.to_numpy()
    h = frame.n_embd.to_numpy()
    d = h // frame.n_head.to_numpy()
    q = frame.n_head.to_numpy() // tp * d
    kv = np.maximum(1, frame.n_kv_head.to_numpy() // tp) * d
    f = frame.n_expanded_embd.to_numpy() / tp
    up = np.where(frame.use_gated_mlp.astype(bool), 2 * f, f)
    shapes = {
        "attn_pre_proj": (h, q + 2 * kv),
        "attn_post_proj": (q, h),
        "mlp_up_proj": (h, up),
        "mlp_down_proj": (f, h),
    }
    tokens = frame.num_tokens.to_numpy().astype(float)
    parts = [
        _gemm_rows(tokens, k, n, frame[f"{op}.median"].to_numpy() * 1e-3)
        for op, (k, n) in shapes.items()
    ]
    return _concat(parts)


def _gemm_rows(tokens, k, n, time_s) -> GemmRows:
    k, n = np.broadcast_to(k, tokens.shape), np.broadcast_to(n, tokens.shape)
    return GemmRows(
        tokens=tokens,
        flops_per_token=2.0 * k * n,
        bytes=(k * n + tokens * (k + n)) * _BF16_BYTES,
        time_s=np.asarray(time_s, dtype=float),
    )


def _concat(parts: Iterable[GemmRows]) -> GemmRows:
    parts = list(parts)
    rows = GemmRows(
        *(np.concatenate([getattr(p, f) for p in parts]) for f in GemmRows.__annotations__)
    )
    keep = rows.time_s > 0
    return GemmRows(*(getattr(rows, f)[keep] for f in GemmRows.__annotations__))


def _layer_profile_gemm_rows(frame: pd.DataFrame, tp: int = 1) -> GemmRows:
    """LLMServingSim's one-layer vLLM profiles of Llama-3.1-8B: one rank's GEMM shards at
    ``tp`` (full widths at TP1)."""
    m = load_model("llama-3.1-8b")
    h, q, kv, f = m.hidden_size, m.q_size, m.kv_size, m.intermediate_size
    shapes = {"qkv_proj": (h, (q + 2 * kv) / tp), "o_proj": (q / tp, h),
              "gate_up_proj": (h, 2 * f / tp), "down_proj": (f / tp, h)}
    parts = []
    for op, (k, n) in shapes.items():
        sub = frame[frame.layer == op]
        parts.append(_gemm_rows(sub.tokens.to_numpy().astype(float), k, n,
                                sub.time_us.to_numpy() * 1e-6))
    return _concat(parts)


# ------------------------------------------------------------------ the fit
def calibrate(read: Reader = pd.read_csv) -> dict[str, dict]:
    """Fit every measured GPU, then transfer to the others; returns ``{gpu_id: profile}``.

    ``read`` opens the CSV files (a test passes a spy). Every path it is given is under
    ``FIT_DIR``.
    """
    profiles: dict[str, dict] = {}
    for gpu_id, (folder, models) in _VIDUR_MLP.items():
        gpu = load_gpu(gpu_id, profile="default")
        files = [FIT_DIR / "vidur" / f"mlp_{folder}_{model}.csv" for model in models]
        rows = _concat(_vidur_gemm_rows(read(path)) for path in files)
        gemm = fit_gemm(rows, gpu.peak_flops, gpu.mem_bytes_per_s)
        net_file = FIT_DIR / "vidur" / f"allreduce_{_VIDUR_NET[gpu_id]}.csv"
        net = fit_allreduce(read(net_file), gpu)
        profiles[gpu_id] = {"gemm": gemm, "allreduce": net, "sources": [*files, net_file]}
    # attention: the only Vidur attention table is A100; H100 borrows its efficiency
    a100 = load_gpu("a100-80gb-sxm", profile="default")
    attn_file = FIT_DIR / "vidur" / "attention_a100.csv"
    attn = read(attn_file)
    # chunks of 256+ tokens: below that the kernel floor, not FLOPs, sets the time
    pre = attn[attn.is_prefill.astype(bool) & (attn.prefill_chunk_size >= _MIN_ATTN_CHUNK)]
    q_heads = pre.n_q_head.to_numpy() // pre.num_tensor_parallel_workers.to_numpy()
    d = pre.n_embd.to_numpy() // pre.n_q_head.to_numpy()
    kv_heads = np.maximum(1, pre.n_kv_head.to_numpy() // pre.num_tensor_parallel_workers.to_numpy())
    s, c = pre.prefill_chunk_size.to_numpy(), pre.kv_cache_size.to_numpy()
    pairs = s * c + s * (s + 1) / 2
    attn_fit = fit_attention(
        4.0 * pairs * q_heads * d,
        2.0 * kv_heads * d * (c + 2 * s) * _BF16_BYTES,
        pre["attn_prefill.median"].to_numpy() * 1e-3,
        a100,
        profiles["a100-80gb-sxm"]["gemm"]["memory_efficiency"],
    )
    for gpu_id in _VIDUR_MLP:
        profiles[gpu_id]["attention"] = {**attn_fit, "measured_on": "a100-80gb-sxm"}
        profiles[gpu_id]["sources"].append(attn_file)

    profiles["rtx4090"] = _calibrate_rtx4090(read)
    profiles["rtx-pro-6000-server"] = _calibrate_rtx_pro_6000(read)
    return _with_fp8(_assemble(profiles), {gpu_id: calibrate_fp8(gpu_id, read)
                                           for gpu_id in FP8_TABLES})


NVFP4_BYTES = 0.5 + 1.0 / 16
"""Bytes per NVFP4 element as stored and read: a 4-bit E2M1 code and one FP8 E4M3 scale per 16
(the per-tensor FP32 scale aside)."""


def _aic_gemm_rows(frame: pd.DataFrame, dtype: str) -> GemmRows:
    """One aiconfigurator GEMM dtype's rows; 16-bit rows read and write 2 bytes per element,
    FP8 rows read one-byte weights and activations, NVFP4 rows half-byte ones with their
    scales (``NVFP4_BYTES``); both write 16-bit outputs."""
    sub = frame[frame.gemm_dtype == dtype]
    m, n, k = (sub[c].to_numpy(dtype=float) for c in ("m", "n", "k"))
    if dtype == "bfloat16":
        return _gemm_rows(m, k, n, sub.latency.to_numpy() * 1e-3)
    element = NVFP4_BYTES if dtype == "nvfp4" else _FP8_BYTES
    return GemmRows(tokens=m, flops_per_token=2.0 * k * n,
                    bytes=k * n * element + m * (k * element + n * _BF16_BYTES),
                    time_s=sub.latency.to_numpy() * 1e-3)


def calibrate_fp8(gpu_id: str, read: Reader = pd.read_csv) -> dict:
    """The FP8 GEMM fit of a GPU aiconfigurator measured, and the same table's BF16 rows fitted
    alike for reference."""
    gpu = load_gpu(gpu_id, profile="default")
    assert gpu.fp8_dense_tflops is not None
    path = FIT_DIR / "aiconfigurator" / FP8_TABLES[gpu_id]
    frame = read(path)
    frame = frame[(frame.n >= FP8_MIN_WIDTH) & (frame.k >= FP8_MIN_WIDTH)]
    fp8 = fit_gemm(_aic_gemm_rows(frame, "fp8"), gpu.fp8_dense_tflops * 1e12,
                   gpu.mem_bytes_per_s, _FP8_HALVES)
    bf16 = fit_gemm(_aic_gemm_rows(frame, "bfloat16"), gpu.peak_flops, gpu.mem_bytes_per_s,
                    _FP8_HALVES)
    return {"fp8_gemm": {**fp8, "kernel": _AIC_FP8_KERNEL, "min_width": FP8_MIN_WIDTH},
            "bf16_same_table": bf16, "sources": [path]}


def _with_fp8(out: dict[str, dict], fits: dict[str, dict]) -> dict[str, dict]:
    """Profiles with the FP8 GEMM fits of the measured GPUs, lent to ``FP8_TRANSFERS``."""
    def entry(fit: dict, label: str) -> dict:
        return {"compute_efficiency": fit["compute_efficiency"],
                "compute_half_tokens": fit["compute_half_tokens"],
                "memory_efficiency": fit["memory_efficiency"], "calibration": label}

    result = {}
    for gpu_id, profile in out.items():
        donor = gpu_id if gpu_id in fits else FP8_TRANSFERS.get(gpu_id)
        if donor is None:
            result[gpu_id] = profile
            continue
        label = f"{FIT_ID}:{donor}" if donor == gpu_id else f"{FIT_ID}:{donor}->{gpu_id}"
        values = {k: v for k, v in profile.items() if k not in ("calibration", "provenance")}
        provenance = dict(profile["provenance"])
        if donor == gpu_id:
            provenance["fp8"] = {
                **{k: v for k, v in fits[donor].items() if k != "sources"},
                "sources": [str(p.relative_to(FIT_DIR)) for p in fits[donor]["sources"]],
            }
        else:
            provenance["fp8_transferred_from"] = donor
        result[gpu_id] = {
            **values,
            "fp8_gemm": entry(fits[donor]["fp8_gemm"], label),
            "calibration": profile["calibration"],
            "provenance": provenance,
        }
    return result


def _calibrate_rtx_pro_6000(read: Reader) -> dict:
    """GEMMs from its own layer profile (the TP1 layer and a TP2 rank's shards, as the Vidur
    fits take every TP degree), prefill attention from the profile's prefill-only rows, the
    all-reduce from its 2-rank NCCL samples (PCIe)."""
    gpu = load_gpu("rtx-pro-6000-server", profile="default")  # the card the profiles measured
    folder = FIT_DIR / "rtx-pro-6000"
    dense_file, dense_tp2_file = folder / "dense.csv", folder / "dense_tp2.csv"
    rows = _concat([_layer_profile_gemm_rows(read(dense_file)),
                    _layer_profile_gemm_rows(read(dense_tp2_file), tp=2)])
    gemm = fit_gemm(rows, gpu.peak_flops, gpu.mem_bytes_per_s)
    attn_file = folder / "attention_prefill.csv"
    attn = read(attn_file)
    # prefill_key is the keys each prefill sequence attends to (its cached context plus the
    # chunk); a key below the chunk means several short sequences whose split is not
    # recorded, so only single-sequence rows are priced
    pre = attn[(attn.n_decode == 0) & (attn.prefill_chunk >= _MIN_ATTN_CHUNK)
               & (attn.prefill_key >= attn.prefill_chunk)]
    m = load_model("llama-3.1-8b")
    s = pre.prefill_chunk.to_numpy()
    c = pre.prefill_key.to_numpy() - s
    pairs = s * c + s * (s + 1) / 2
    attention = {
        **fit_attention(4.0 * pairs * m.q_size, m.kv_size * 2.0 * (c + 2 * s) * _BF16_BYTES,
                        pre.time_us.to_numpy() * 1e-6, gpu, gemm["memory_efficiency"]),
        "measured_on": "rtx-pro-6000-server",
    }
    net_file = folder / "allreduce_2rank.csv"
    samples = read(net_file)
    by_kind = {kind: rows for kind, rows in samples.groupby("collective")}
    reduce = by_kind["all_reduce"]
    frame = pd.DataFrame({"all_reduce_median": reduce.us.to_numpy() * 1e-3,
                          "num_workers": 2, "size": reduce["bytes"].to_numpy()})
    gathers = {kind: fit_collective(by_kind[kind]["bytes"].to_numpy(dtype=float),
                                    by_kind[kind].us.to_numpy() * 1e-6, 2, gpu)
               for kind in ("all_gather", "reduce_scatter")}
    return {
        "gemm": gemm,
        "attention": attention,
        "allreduce": fit_allreduce(frame, gpu),
        **gathers,
        "sources": [dense_file, dense_tp2_file, attn_file, net_file],
    }


def _calibrate_rtx4090(read: Reader) -> dict:
    gpu = load_gpu("rtx4090", profile="default")
    dense_file = FIT_DIR / "rtx4090" / "dense.csv"
    gemm = fit_gemm(_layer_profile_gemm_rows(read(dense_file)), gpu.peak_flops,
                    gpu.mem_bytes_per_s)
    attn_file = FIT_DIR / "rtx4090" / "attention.csv"
    attn = read(attn_file)
    pre = attn[(attn.n_decode == 0) & (attn.prefill_chunk >= _MIN_ATTN_CHUNK)]
    m = load_model("llama-3.1-8b")
    s, c = pre.prefill_chunk.to_numpy(), pre.kv_prefill.to_numpy()
    pairs = s * c + s * (s + 1) / 2
    attn_fit = fit_attention(
        4.0 * pairs * m.q_size,
        m.kv_size * 2.0 * (c + 2 * s) * _BF16_BYTES,
        pre.time_us.to_numpy() * 1e-6,
        gpu,
        gemm["memory_efficiency"],
    )
    return {
        "gemm": gemm,
        "attention": {**attn_fit, "measured_on": "rtx4090"},
        "sources": [dense_file, attn_file],
    }



def collective_values(fit: dict) -> dict:
    """The GpuSpec fields a fit's NCCL collectives set: all-reduce, all-gather and
    reduce-scatter latency and link efficiency, each where the fit has it."""
    values = {}
    if "allreduce" in fit:
        values["allreduce_latency_s"] = fit["allreduce"]["allreduce_latency_s"]
        values["link_efficiency"] = fit["allreduce"]["link_efficiency"]
    for name, field in (("all_gather", "allgather"), ("reduce_scatter", "reduce_scatter")):
        if name in fit:
            values[f"{field}_latency_s"] = fit[name]["latency_s"]
            values[f"{field}_link_efficiency"] = fit[name]["link_efficiency"]
    return values


def _assemble(fits: dict[str, dict]) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for gpu_id, fit in fits.items():
        values = {
            "compute_efficiency": fit["gemm"]["compute_efficiency"],
            "memory_efficiency": fit["gemm"]["memory_efficiency"],
            "compute_half_tokens": fit["gemm"]["compute_half_tokens"],
            "attention_efficiency": fit["attention"]["attention_efficiency"],
            **BLIS_OVERHEADS,
        }
        values.update(collective_values(fit))
        out[gpu_id] = {
            **values,
            "calibration": f"{FIT_ID}:{gpu_id}",
            "provenance": {
                "gemm": fit["gemm"],
                "attention": fit["attention"],
                **{k: fit[k] for k in ("allreduce", "all_gather", "reduce_scatter") if k in fit},
                "overheads": BLIS_SOURCE,
                "sources": [str(p.relative_to(FIT_DIR)) for p in fit["sources"]],
            },
        }
    for gpu_id, donor in TRANSFERS.items():
        values = {k: v for k, v in out[donor].items() if k not in ("calibration", "provenance")}
        for key in () if same_link(gpu_id, donor) else _LINK_FIELDS:
            values.pop(key, None)  # links differ between variants: keep the catalog's
        out[gpu_id] = {
            **values,
            "calibration": f"{FIT_ID}:{donor}->{gpu_id}",
            "provenance": {"transferred_from": donor},
        }
    return out


def distserve_check(profiles: dict[str, dict]) -> list[dict[str, float]]:
    """DistServe's fitted 2023-vLLM A100 decode step at batch 1 vs our kernel-only estimate.

    The gap is the old stack's fixed per-step overhead, which the kernel fit cannot see.
    """
    path = FIT_DIR / "distserve" / "profiler-a100-80g.vllm.json"
    table = json.loads(path.read_text())
    gpu = apply_profile(load_gpu("a100-80gb-sxm", profile="default"), profiles["a100-80gb-sxm"])
    rows = []
    for hf_name, by_tp in table.items():
        model = load_model(hf_name.split("/")[-1])
        for tp, coeffs in by_tp.items():
            a, b, c = coeffs["decoding_smallbs"]
            measured_s = (a + b * 513 + c) * 1e-3
            batch = BatchShape.from_chunks([(1, 512, True)])
            cost = CostModel(model, gpu, int(tp)).step_time(batch)
            rows.append({"model": model.id, "tp": int(tp), "distserve_ms": measured_s * 1e3,
                         "ours_ms": cost.time_s * 1e3})
    return rows

