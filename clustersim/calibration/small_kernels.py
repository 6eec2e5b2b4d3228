"""The small memory-bound kernels' fit: ``floor + bytes x max(cta, tokens / (efficiency x
bandwidth))`` per call (``clustersim.cost.small_kernels``), on measured element-wise kernels.

- H100 SXM, H200, B200, B300, GB200 and GB300: NVIDIA aiconfigurator's vLLM 0.24
  ``static_scaled_fp8_quant`` (one 16-bit
  read and one 8-bit write per element, one thread block per row, the layout of vLLM's norm,
  rotary and activation kernels), timed under CUDA graphs, ``m`` 1-32,768 rows of ``k``
  32-65,536. The efficiency is the median over the rows that move at least
  :data:`MIN_STREAM_BYTES` (past the L2 cache); the floor and ``cta`` a least-squares line of
  time over one row's bytes on the rows of at most :data:`ONE_WAVE_ROWS` (one block per SM or
  fewer: the time of one row through one block) and rows no wider than :data:`MAX_WIDTH`.
- RTX 4090 and RTX PRO 6000 Server Edition: LLMServingSim's Llama-3.1-8B layer profiles (vLLM
  0.19 / 0.28, eager, CUDA events around each op): ``layernorm`` and ``final_layernorm``
  (RMSNorm without the residual: one read, one write of the hidden states), ``rotary_emb`` (q
  and k, in place) and ``act_fn`` (``silu_and_mul``); the floor and ``cta`` the same line on
  their rows of at most :data:`PROFILE_MAX_TOKENS` tokens. Their largest rows (2,048 tokens,
  at most 176 MB) are barely past those cards' L2 caches (72 and 128 MB) and read faster than
  DRAM, so the efficiency is the card's own GEMM weight-streaming fit (``memory_efficiency``)
  instead.

Eager and graph times: the aiconfigurator floor (1.96 us on the H100) is a kernel replayed in a
CUDA graph; the eager profiles time each op between two CUDA events on the GPU's stream, which
leaves out the host's launch cost, and show the same floors (1.7-2.6 us). A decode step under
CUDA graphs pays the floor per kernel; the host's launch of each kernel is what a graph replay
saves, and belongs to the per-layer host time (``per_layer_overhead_s``), not here.

GPUs without a measured kernel take a measured GPU's fit (:data:`TRANSFERS`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from clustersim.calibration.sources import FIT_DIR
from clustersim.catalog import load_gpu, load_model
from clustersim.cost.small_kernels import FLOAT32_BYTES

Reader = type(pd.read_csv)

AIC_DIR = FIT_DIR / "aiconfigurator"
QUANT_TABLES = {"h100-sxm": "quant_h100_sxm.csv", "h200": "quant_h200_sxm.csv",
                "b200": "quant_b200_sxm.csv", "b300": "quant_b300_sxm.csv",
                "gb200": "quant_gb200.csv", "gb300": "quant_gb300.csv"}
"""GPU -> its measured element-wise kernel (``clustersim.calibration.shipdata.ship_quant``)."""
PROFILES = {"rtx4090": "rtx4090", "rtx-pro-6000-server": "rtx-pro-6000"}
"""GPU -> the folder of its LLMServingSim layer profile."""
TRANSFERS = {
    "h100-pcie": "h100-sxm",
    "a100-80gb-sxm": "h100-sxm",
    "a100-40gb-sxm": "h100-sxm",
    "a100-40gb-pcie": "h100-sxm",
    "a100-80gb-pcie": "h100-sxm",
    "l40s": "rtx4090",
    "rtx-pro-6000": "rtx-pro-6000-server",
}
"""GPU -> the measured GPU whose small-kernel fit it borrows (datacenter parts the H100's
graph-timed kernel, the Ada card the RTX 4090's; the bytes at the GPU's own bandwidth)."""
QUANT_BYTES_PER_ELEMENT = 3
"""``static_scaled_fp8_quant`` reads a 16-bit element and writes an 8-bit one."""
MIN_STREAM_BYTES = 256 * 2**20
"""Rows that stream at least this much set the efficiency: over five times the H100's and
H200's 50 MB L2 cache (NVIDIA H100 Tensor Core GPU Architecture whitepaper), twice the B200's
126 MB."""
ONE_WAVE_ROWS = 128
"""At most this many rows (one block each) fit one wave of the H100's and H200's 132 SMs (the
Blackwell GPUs have 148-160)."""
MAX_WIDTH = 16384
"""The widest row fitted: wider than any catalog model's norm or activation shard at TP2+."""
PROFILE_MAX_TOKENS = 32
"""Profile rows of at most this many tokens set the floor and ``cta`` (one wave on both cards:
128 and 188 SMs)."""
SAMPLER_MIN_ROWS = 144
"""The RTX 4090 sampler rows fitted: from 144 rows the float32 logits of Llama-3.1-8B
(128,256 x 4 bytes a row) outgrow its 72 MB L2 cache (Ada AD102: 72 MB on the RTX 4090)."""
ROUND = 3


@dataclass(frozen=True)
class SmallKernelFit:
    """One GPU's fit, as the profile records it."""

    floor_s: float
    cta_s_per_byte: float
    memory_efficiency: float
    rms_log_error: float
    num_rows: int
    measured_on: str
    source: str = ""
    """The file it was fitted on, under ``clustersim/data/calibration/fit/``."""

    def values(self) -> dict[str, float]:
        """The GpuSpec fields it sets."""
        return {"small_kernel_floor_s": self.floor_s,
                "small_kernel_cta_s_per_byte": self.cta_s_per_byte,
                "small_kernel_memory_efficiency": self.memory_efficiency}

    def provenance(self) -> dict:
        return {"floor_s": self.floor_s, "cta_s_per_byte": self.cta_s_per_byte,
                "memory_efficiency": self.memory_efficiency,
                "rms_log_error": self.rms_log_error, "num_rows": self.num_rows,
                "measured_on": self.measured_on, "source": self.source}


def predict(row_bytes: np.ndarray, tokens: np.ndarray, floor_s: float, cta_s_per_byte: float,
            s_per_byte: float) -> np.ndarray:
    """Seconds of calls moving ``row_bytes`` per token over ``tokens`` tokens."""
    return floor_s + row_bytes * np.maximum(cta_s_per_byte, tokens * s_per_byte)


def _line(row_bytes: np.ndarray, time_s: np.ndarray) -> tuple[float, float]:
    """(floor, seconds per byte): least squares of time over one row's bytes."""
    slope, intercept = np.polyfit(row_bytes, time_s, 1)
    return float(intercept), float(max(slope, 0.0))


def fit_quant_table(frame: pd.DataFrame, gpu_id: str) -> SmallKernelFit:
    """The fit on aiconfigurator's element-wise FP8 quantization kernel of ``gpu_id``."""
    gpu = load_gpu(gpu_id, profile="default")
    frame = frame[frame.k <= MAX_WIDTH]
    m = frame.m.to_numpy(dtype=float)
    row_bytes = QUANT_BYTES_PER_ELEMENT * frame.k.to_numpy(dtype=float)
    time_s = frame.latency.to_numpy() * 1e-3
    streaming = m * row_bytes >= MIN_STREAM_BYTES
    efficiency = float(np.median(m[streaming] * row_bytes[streaming] / time_s[streaming])
                       / gpu.mem_bytes_per_s)
    wave = m <= ONE_WAVE_ROWS
    floor_s, cta = _line(row_bytes[wave], time_s[wave])
    return _scored(row_bytes, m, time_s, floor_s, cta, efficiency, gpu.mem_bytes_per_s, gpu_id)


def profile_rows(frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(bytes per token, tokens, seconds) of a Llama-3.1-8B layer profile's element-wise ops."""
    m = load_model("llama-3.1-8b")
    e = m.dtype_bytes
    per_token = {
        "layernorm": 2.0 * m.hidden_size * e,
        "final_layernorm": 2.0 * m.hidden_size * e,
        "rotary_emb": 2.0 * (m.q_size + m.kv_size) * e,
        "act_fn": 3.0 * m.intermediate_size * e,
    }
    rows = frame[frame.layer.isin(per_token)]
    return (rows.layer.map(per_token).to_numpy(dtype=float), rows.tokens.to_numpy(dtype=float),
            rows.time_us.to_numpy() * 1e-6)


def fit_layer_profile(frame: pd.DataFrame, gpu_id: str,
                      memory_efficiency: float) -> SmallKernelFit:
    """The fit on an LLMServingSim layer profile's element-wise ops; the efficiency is the
    card's GEMM weight-streaming fit (the profile's rows stay near its L2 cache)."""
    gpu = load_gpu(gpu_id, profile="default")
    row_bytes, tokens, time_s = profile_rows(frame)
    wave = tokens <= PROFILE_MAX_TOKENS
    floor_s, cta = _line(row_bytes[wave], time_s[wave])
    return _scored(row_bytes, tokens, time_s, floor_s, cta, memory_efficiency,
                   gpu.mem_bytes_per_s, gpu_id)


def _scored(row_bytes: np.ndarray, tokens: np.ndarray, time_s: np.ndarray, floor_s: float,
            cta: float, efficiency: float, bytes_per_s: float, gpu_id: str) -> SmallKernelFit:
    model = predict(row_bytes, tokens, floor_s, cta, 1.0 / (efficiency * bytes_per_s))
    error = float(np.sqrt(np.mean(np.log(model / time_s) ** 2)))
    return SmallKernelFit(
        floor_s=round(floor_s, 9), cta_s_per_byte=float(f"{cta:.{ROUND}g}"),
        memory_efficiency=round(min(efficiency, 1.0), 2), rms_log_error=round(error, 3),
        num_rows=int(time_s.size), measured_on=gpu_id)


def calibrate(layer_efficiency: dict[str, float],
              read: Reader = pd.read_csv) -> dict[str, SmallKernelFit]:
    """Every measured GPU's fit, then the transfers. ``layer_efficiency``: the profiled
    cards' GEMM ``memory_efficiency`` (by GPU id)."""
    fits = {gpu_id: replace(fit_quant_table(read(AIC_DIR / name), gpu_id),
                            source=f"aiconfigurator/{name}")
            for gpu_id, name in QUANT_TABLES.items()}
    for gpu_id, folder in PROFILES.items():
        fits[gpu_id] = replace(fit_layer_profile(read(FIT_DIR / folder / "dense.csv"), gpu_id,
                                                 layer_efficiency[gpu_id]),
                               source=f"{folder}/dense.csv")
    return fits


def sources() -> list:
    """The files :func:`calibrate` reads."""
    return ([AIC_DIR / name for name in QUANT_TABLES.values()]
            + [FIT_DIR / folder / "dense.csv" for folder in PROFILES.values()])


def fit_sampler_passes(read: Reader = pd.read_csv) -> float:
    """Float32 passes over the vocabulary per sampled row: the RTX 4090 sampler profile's
    seconds per row beyond its L2 cache, at its GEMM weight-streaming efficiency
    (``clustersim.cost.small_kernels.SAMPLER_PASSES`` cites it)."""
    gpu = load_gpu("rtx4090")
    frame = read(FIT_DIR / "rtx4090" / "per_sequence.csv")
    rows = frame[(frame.layer == "sampler") & (frame.sequences >= SAMPLER_MIN_ROWS)]
    slope, _ = np.polyfit(rows.sequences.to_numpy(dtype=float), rows.time_us.to_numpy() * 1e-6,
                          1)
    vocab = load_model("llama-3.1-8b").vocab_size
    return float(slope * gpu.memory_efficiency * gpu.mem_bytes_per_s / (vocab * FLOAT32_BYTES))


def apply(profiles: dict[str, dict], fit_id: str, read: Reader = pd.read_csv) -> None:
    """Set the small-kernel fields of every profile whose GPU is measured or transferred
    (:data:`TRANSFERS`), in place, with the fit's provenance; the profiled cards' efficiency
    is their profile's ``memory_efficiency``."""
    fits = calibrate({g: profiles[g]["memory_efficiency"] for g in PROFILES}, read)
    for gpu_id, profile in profiles.items():
        donor = gpu_id if gpu_id in fits else TRANSFERS.get(gpu_id)
        if donor is None:
            continue
        fit = fits[donor]
        label = f"{fit_id}:{donor}" if donor == gpu_id else f"{fit_id}:{donor}->{gpu_id}"
        calibration, provenance = profile.pop("calibration"), profile.pop("provenance")
        profile.update(fit.values())
        # the calibration label and provenance last, as every profile writes them
        profile["calibration"] = calibration
        profile["provenance"] = {**provenance,
                                 "small_kernels": {**fit.provenance(), "calibration": label}}
