"""Rebuild ``clustersim/data/calibration/`` from the reference data folder (maintainers only).

``python -m clustersim.calibration.shipdata ../shared/data`` copies the small files verbatim and
cuts the large Vidur tables down to the columns and rows the fits read (median times only), and
NVIDIA aiconfigurator's GEMM parquet tables down to a CSV of the shapes the FP8 fit reads
(reading parquet needs ``pip install -e '.[maintainer]'``: pyarrow); the README beside the data
says which is which. Nothing here runs at calibration time.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pandas as pd

from clustersim.calibration.sources import DATA_DIR

_MLP_OPS = (
    "attn_pre_proj",
    "attn_post_proj",
    "mlp_up_proj",
    "mlp_down_proj",
    "input_layernorm",
    "post_attention_layernorm",
    "attn_rope",
    "mlp_act",
    "add",
)
_MLP_SHAPE = ["n_head", "n_kv_head", "n_embd", "n_expanded_embd", "vocab_size", "use_gated_mlp"]
_VIDUR_MODELS = {
    "a100": ("Llama-2-7b-hf", "Llama-2-70b-hf", "Meta-Llama-3-8B"),
    "h100": ("Llama-2-7b-hf", "Llama-2-70b-hf"),
}
_AIC_GPUS = {"h100_sxm": "h100_sxm", "a100_sxm": "a100_sxm", "l40s": "l40s",
             "h200_sxm": "h200_sxm", "b200_sxm": "b200_sxm", "b300_sxm": "b300_sxm",
             "gb200": "gb200", "gb300": "gb300"}
"""aiconfigurator system folder -> shipped file stem."""
AIC_VLLM = {"h100_sxm": "0.24.0", "a100_sxm": "0.14.0", "l40s": "0.24.0", "h200_sxm": "0.24.0",
            "b200_sxm": "0.24.0", "b300_sxm": "0.24.0", "gb200": "0.24.0", "gb300": "0.24.0"}
"""The vLLM release of each system's GEMM and attention tables read: aiconfigurator's current
one (``query_versions.yaml``: vLLM 0.24.0, the A100's 0.14.0). The B200 folder also holds a
0.22.0 attention table, not read."""
_AIC_MOE_STEMS = {"h100_sxm": "h100_sxm", "h200_sxm": "h200_sxm", "b200_sxm": "b200_sxm",
                  "b300_sxm": "b300_sxm", "gb200": "gb200", "gb300": "gb300"}
AIC_DTYPES = ("bfloat16", "fp8", "nvfp4")
"""GEMM dtypes cut: 16-bit, per-tensor FP8 and, on the Blackwell tables that hold it, NVFP4
(``FlashInferCuteDslNvFp4LinearKernel``: FP4 weights and activations, one FP8 scale per 16)."""
AIC_WIDTHS = (1024, 2048, 3584, 4096, 7168, 8192, 16384)
"""n and k kept from aiconfigurator's GEMM grid: the TP shards of 7B-70B models' layers (the
grid's 32-65,536 reaches far past them)."""
AIC_TOKENS = (1, 2, 3, 4, 6, 8, 12, 16, 32, 48, 64, 96, 128, 192, 256, 512, 768, 1024, 1536,
              2048, 3072, 4096, 8192, 16384, 32768)
"""m kept: the grid's powers of two and three times a power of two (every regime, few rows);
the A100 grid has 18 of them."""
_FLASHINFER_TRTLLM = ("vllm_flashinfer_trtllmprefill", "vllm_flashinfer_trtllmdecode")
AIC_ATTENTION_KERNELS = {
    "h100_sxm": ("vllm_flash_attn_fa3",) * 2, "a100_sxm": ("vllm_flash_attn",) * 2,
    "l40s": ("vllm_flash_attn_fa2",) * 2, "h200_sxm": ("vllm_flash_attn_fa3",) * 2,
    "b200_sxm": _FLASHINFER_TRTLLM, "b300_sxm": _FLASHINFER_TRTLLM, "gb200": _FLASHINFER_TRTLLM,
    "gb300": _FLASHINFER_TRTLLM,
}
"""The attention backend vLLM picks by default for 16-bit KV with head_dim 128 on each GPU:
the (context, generation) table rows kept. FlashAttention 3 on Hopper, FlashAttention 2 before
it; on compute capability 10.x FlashInfer comes first (``_get_backend_priorities`` in
vllm/platforms/cuda.py), which runs TensorRT-LLM's prefill and decode kernels there
(aiconfigurator's ``vllm_flashinfer_trtllmprefill`` / ``..decode`` rows)."""
AIC_HEADS = ((8, 1), (16, 2), (32, 4), (64, 8), (32, 8), (16, 16), (32, 32))
"""(query heads, KV heads) per GPU kept: grouped-query shards of Llama-3/Qwen3-class models at
TP 1-8 and two multi-head ones (the Blackwell decode tables hold neither multi-head pair)."""
AIC_COMM_GPUS = {"h100_sxm": ("0.24.0", "2.27.3"), "a100_sxm": ("0.14.0", "2.27.3"),
                 "h200_sxm": ("0.24.0", "2.26.2"), "b200_sxm": ("0.24.0", "2.27.3"),
                 "b300_sxm": ("0.24.0", "2.27"), "gb200": ("0.24.0", "2.23"),
                 "gb300": ("0.24.0", "2.27")}
"""The systems with collective tables and the (vLLM, NCCL) versions cut: the GPU's GEMM tables'
vLLM and the NCCL its aiconfigurator system description names (``misc.nccl_version`` in
``systems/<system>.yaml``; the folders hold more versions of both). 8-GPU NVLink nodes, but
for the GB200 and GB300, whose tables stop at the 4 GPUs of one compute tray."""
AIC_NCCL_OPS = ("all_reduce", "all_gather", "reduce_scatter")
AIC_MOE_GPUS = {"h100_sxm": "0.24.0", "h200_sxm": "0.24.0", "b200_sxm": "0.24.0",
                "b300_sxm": "0.24.0", "gb200": "0.24.0", "gb300": "0.24.0"}
"""The systems whose fused-MoE tables are cut, and the vLLM version read (each system's newest;
the H200's 0.19.0 table is not read: its collector called ``fused_experts`` directly, so its
``kernel_source`` names no kernel vLLM's MoE methods pick, and its ``int4_wo`` rows are Triton's
WNA16 kernel, not the Marlin kernel vLLM serves 4-bit experts with; nor are the B200's 0.19.0
and 0.22.0 tables, the same collector's)."""
AIC_MOE_KERNELS = {
    "vllm_unquantizedfusedmoe_triton_tritonexperts": "triton",
    "vllm_modeloptfp8moe_flashinfer_cutlass_flashinferexperts": "flashinfer_cutlass",
    "vllm_fp8moe_flashinfer_cutlass_flashinferexperts": "flashinfer_cutlass",
    "vllm_fp8moe_triton_tritonexperts": "triton",
    "vllm_compressedtensorswna16marlinmoe_marlin_marlinexperts": "marlin",
    "vllm_gptossmxfp4moe_triton_oaitritonmxfp4expertsmonolithic": "triton_mxfp4",
    "vllm_unquantizedfusedmoe_flashinfer_trtllm_trtllmbf16experts": "flashinfer_trtllm",
    "vllm_modeloptfp8moe_flashinfer_trtllm_trtllmfp8expertsmonolithic": "flashinfer_trtllm",
    "vllm_fp8moe_flashinfer_trtllm_trtllmfp8expertsmonolithic": "flashinfer_trtllm",
    "vllm_gptossmxfp4moe_flashinfer_trtllm_mxfp4_bf16_trtllmmxfp4expertsmonolithic":
        "flashinfer_trtllm_mxfp4",
    "vllm_compressedtensorsw4a4nvfp4moe_flashinfer_trtllm_trtllmnvfp4expertsmonolithic":
        "flashinfer_trtllm",
}
"""``kernel_source`` -> the kernel's short name (clustersim.cost.moe): the kernels vLLM's MoE
methods pick on Hopper, and on Blackwell (compute capability 10.x) FlashInfer's TensorRT-LLM
experts, which the oracles put first there. Left out: the Marlin MXFP4 rows collected with a
'situ-as-silu' approximation (their collection_meta.yaml), a kernel no priced model runs; the
Blackwell tables' FlashInfer CUTLASS and modular TensorRT-LLM rows (none at the catalog's
shapes and routing) and their MXFP8-activation format. NVFP4 experts (W4A4) are the table's
compressed-tensors method on FlashInfer's TensorRT-LLM experts, the kernel vLLM's NVFP4 MoE
oracle puts first on compute capability 10.x for ModelOpt's NVFP4 checkpoints too (the two
methods share the oracle and the experts kernel)."""
AIC_MOE_SHAPES = (
    (4096, 14336, 2, 8),  # mixtral-8x7b
    (2048, 768, 8, 128),  # qwen3-30b-a3b
    (4096, 1536, 8, 128),  # qwen3-235b-a22b
    (7168, 2048, 8, 256),  # deepseek-v3, deepseek-r1
    (7168, 2048, 8, 384),  # kimi-k2-instruct-0905, kimi-k2.5
    (2880, 2880, 4, 128),  # gpt-oss-120b
    (2880, 2880, 4, 32),  # gpt-oss-20b
    (3072, 1536, 8, 256),  # minimax-m2.5
)
"""(hidden_size, inter_size, topk, num_experts) of the catalog's MoE models: the shapes whose
measured curves the profiles keep."""
AIC_MOE_TP = (1, 2, 4, 8)
"""moe_tp_size kept (one node)."""
AIC_MOE_EP = (1, 2, 4, 8, 16, 32, 64)
"""moe_ep_size kept: one node, and expert-parallel groups of up to 8 nodes."""
AIC_A2A_BACKENDS = (("deepep_ht", 20), ("deepep_ll", 0))
"""(comm_backend, sms) of the expert all-to-all rows kept: DeepEP's normal (high-throughput)
kernels on their default 20 SMs and its low-latency ones, as vLLM's ``deepep_high_throughput``
and ``deepep_low_latency`` all2all backends run them."""
AIC_MOE_DISTRIBUTION = "power_law_1.01"
"""The routing of the rows kept (clustersim.calibration.aiconfigurator.MOE_DISTRIBUTION says
why)."""
AIC_QUANT_GPUS = {"h100_sxm": "h100_sxm", "h200_sxm": "h200_sxm", "b200_sxm": "b200_sxm",
                  "b300_sxm": "b300_sxm", "gb200": "gb200", "gb300": "gb300"}
"""The systems whose element-wise FP8 quantization kernel is measured (the small-kernel fit)."""
_LLMSS_RUNS = (
    "RTX4090_Llama-3.1-8B",
    "RTXPRO6000_Llama-3.1-8B",
    "RTXPRO6000_Qwen3-32B",
    "RTXPRO6000_Qwen3-30B-A3B-Instruct-2507",
)


def ship(shared: Path, out: Path = DATA_DIR) -> None:
    fit, val = out / "fit", out / "validation"
    vidur = shared / "vidur"
    for gpu, models in _VIDUR_MODELS.items():
        for model in models:
            frame = pd.read_csv(vidur / "compute" / gpu / "meta-llama" / model / "mlp.csv")
            keep = [f"time_stats.{op}.median" for op in _MLP_OPS]
            frame = frame[keep + _MLP_SHAPE + ["num_tokens", "num_tensor_parallel_workers"]]
            frame.columns = [c.removeprefix("time_stats.") for c in frame.columns]
            _write_csv(frame, fit / "vidur" / f"mlp_{gpu}_{model}.csv")
    attn = pd.read_csv(vidur / "a100" / "attention.csv")
    cols = ["time_stats.attn_prefill.median", "time_stats.attn_decode.median"]
    shape = ["n_embd", "n_q_head", "n_kv_head", "num_tensor_parallel_workers", "batch_size",
             "prefill_chunk_size", "kv_cache_size", "is_prefill"]
    attn = attn[cols + shape]
    decode = attn[~attn.is_prefill & attn.batch_size.isin([1, 2, 4, 8, 16, 32, 64, 128])]
    decode = decode[decode.kv_cache_size.isin(sorted(decode.kv_cache_size.unique())[::8])]
    attn = pd.concat([attn[attn.is_prefill], decode])
    attn.columns = [c.removeprefix("time_stats.") for c in attn.columns]
    _write_csv(attn, fit / "vidur" / "attention_a100.csv")
    for net in ("a100_dgx", "h100_dgx"):
        frame = pd.read_csv(vidur / "network" / net / "all_reduce.csv")
        frame = frame[frame.devices_per_node >= frame.num_workers]
        frame = frame[["time_stats.all_reduce.median", "num_workers", "size"]]
        frame.columns = ["all_reduce_median", "num_workers", "size"]
        frame = frame.sort_values(["num_workers", "size"])
        _write_csv(frame, fit / "vidur" / f"allreduce_{net}.csv")
    shutil.copy(vidur / "LICENSE.vidur-MIT.txt", fit / "vidur")
    prof = shared / "llmservingsim" / "RTX4090_Llama-3.1-8B" / "profiler_bf16_tp1"
    (fit / "rtx4090").mkdir(parents=True, exist_ok=True)
    for name in ("dense.csv", "attention.csv", "per_sequence.csv", "meta.yaml"):
        shutil.copy(prof / name, fit / "rtx4090" / name)
    shutil.copy(shared / "llmservingsim" / "LICENSE.LLMServingSim-MIT.txt", fit / "rtx4090")
    (fit / "distserve").mkdir(parents=True, exist_ok=True)
    for name in ("profiler-a100-80g.vllm.json", "LICENSE.DistServe-Apache-2.0.txt"):
        shutil.copy(shared / "distserve" / name, fit / "distserve" / name)

    ship_aiconfigurator(shared / "aiconfigurator", fit / "aiconfigurator")

    (val / "splitwise").mkdir(parents=True, exist_ok=True)
    for name in ("perf_model.csv", "LICENSE.splitwise-sim.txt"):
        shutil.copy(shared / "splitwise" / name, val / "splitwise" / name)
    for run in _LLMSS_RUNS:
        (val / "llmservingsim" / run).mkdir(parents=True, exist_ok=True)
        for name in ("vllm_requests.jsonl", "vllm_meta.json", "vllm_timeseries.csv"):
            shutil.copy(shared / "llmservingsim" / run / name, val / "llmservingsim" / run / name)
    shutil.copy(shared / "llmservingsim" / "LICENSE.LLMServingSim-MIT.txt", val / "llmservingsim")


def ship_aiconfigurator(source: Path, out: Path) -> None:
    """Cut NVIDIA aiconfigurator's parquet tables to the CSV files the fits read (values as
    measured, latency in ms per call; the calibration README describes each cut):

    - ``gemm_<gpu>.csv``: bf16, fp8 (per-tensor) and, where measured, nvfp4 GEMMs at
      ``AIC_WIDTHS`` x ``AIC_WIDTHS`` x ``AIC_TOKENS``, columns ``gemm_dtype, m, n, k,
      latency``;
    - ``context_attention_<gpu>.csv`` / ``generation_attention_<gpu>.csv``: the default kernel's
      rows with head_dim 128, 16-bit KV, full attention, at ``AIC_HEADS``, columns
      ``batch_size, isl, step, num_heads, num_key_value_heads, latency``;
    - ``allreduce_<gpu>.csv``: vLLM's all-reduce under CUDA graphs (``vllm_graph``) and
      nccl-tests' half-precision all_reduce, all_gather and reduce_scatter, columns
      ``source, op, num_gpus, message_size, latency`` (message_size in elements);
    - ``moe_a2a_<gpu>.csv``: DeepEP's dispatch and combine in one node (``AIC_A2A_BACKENDS``),
      every row; columns ``comm_backend, phase, ep_size, hidden_size, topk, num_experts,
      num_tokens, latency_us`` (the table's ``latency``, which is in microseconds: it equals
      its ``transmit_us``).
    - ``moe_<gpu>.csv``: vLLM's fused MoE as its MoE methods run it on Hopper, every format
      (``moe_dtype``) of ``AIC_MOE_KERNELS``, at the catalog's expert shapes
      (``AIC_MOE_SHAPES``), ``AIC_MOE_TP`` x ``AIC_MOE_EP`` splits, every token count
      measured, routing ``AIC_MOE_DISTRIBUTION``; columns ``moe_dtype, kernel, distribution,
      hidden_size, inter_size, topk, num_experts, moe_tp_size, moe_ep_size, num_tokens,
      latency`` (``kernel`` the short name of ``kernel_source``).
    - ``quant_<gpu>.csv``: vLLM's ``static_scaled_fp8_quant`` (one 16-bit read and one
      8-bit write per element, one thread block per row), every ``m`` and ``k`` measured,
      columns ``m, k, latency`` (``clustersim.calibration.small_kernels`` fits on it).
    - ``silicon_vllm_<model>_<gpu>[_<version>].csv``: the measured serving sweeps of
      ``silicon_calibration/``, verbatim (``clustersim.calibration.sweeps`` reads them).
    """
    out.mkdir(parents=True, exist_ok=True)
    data = source / "systems" / "data"
    for folder, stem in _AIC_GPUS.items():
        frame = pd.read_parquet(data / folder / "gemm" / "vllm" / AIC_VLLM[folder]
                                / "gemm_perf.parquet")
        keep = (frame.gemm_dtype.isin(AIC_DTYPES) & frame.n.isin(AIC_WIDTHS)
                & frame.k.isin(AIC_WIDTHS) & frame.m.isin(AIC_TOKENS))
        frame = frame.loc[keep, ["gemm_dtype", "m", "n", "k", "latency"]]
        frame = frame.sort_values(["gemm_dtype", "n", "k", "m"])
        _write_csv(frame, out / f"gemm_{stem}.csv")
        kernels = dict(zip(("context_attention", "generation_attention"),
                           AIC_ATTENTION_KERNELS[folder], strict=True))
        for table, kernel in kernels.items():
            frame = pd.read_parquet(data / folder / "attention" / "vllm" / AIC_VLLM[folder]
                                    / f"{table}_perf.parquet")
            heads = pd.Series(list(zip(frame.num_heads, frame.num_key_value_heads, strict=True)),
                              index=frame.index)
            keep = ((frame.kernel_source == kernel)
                    & (frame.head_dim == 128) & (frame.kv_cache_dtype == "bfloat16")
                    & heads.isin(AIC_HEADS))
            if "window_size" in frame:
                keep &= frame.window_size == 0
            columns = ["batch_size", "isl", "step", "num_heads", "num_key_value_heads", "latency"]
            frame = frame.loc[keep, columns].sort_values(columns[:-1])
            _write_csv(frame, out / f"{table}_{stem}.csv")
    for folder, (vllm, nccl_version) in AIC_COMM_GPUS.items():
        custom = pd.read_parquet(data / folder / "comm" / "vllm" / vllm
                                 / "custom_allreduce_perf.parquet")
        custom = custom[custom.backend == "vllm_graph"].assign(source="vllm_graph")
        nccl = pd.read_parquet(data / folder / "comm" / "nccl" / nccl_version
                               / "nccl_perf.parquet")
        nccl = nccl[nccl.op_name.isin(AIC_NCCL_OPS) & (nccl.nccl_dtype == "half")]
        columns = ["source", "op", "num_gpus", "message_size", "latency"]
        frame = pd.concat([
            custom.rename(columns={"op_name": "op"})[columns],
            nccl.assign(source="nccl").rename(columns={"op_name": "op"})[columns],
        ]).sort_values(columns[:-1])
        _write_csv(frame, out / f"allreduce_{_AIC_GPUS[folder]}.csv")
    for folder, version in AIC_MOE_GPUS.items():
        frame = pd.read_parquet(data / folder / "moe" / "vllm" / version / "moe_perf.parquet")
        shapes = pd.Series(list(zip(frame.hidden_size, frame.inter_size, frame.topk,
                                    frame.num_experts, strict=True)), index=frame.index)
        keep = (frame.kernel_source.isin(AIC_MOE_KERNELS) & shapes.isin(AIC_MOE_SHAPES)
                & (frame.distribution == AIC_MOE_DISTRIBUTION)
                & frame.moe_tp_size.isin(AIC_MOE_TP) & frame.moe_ep_size.isin(AIC_MOE_EP))
        frame = frame[keep].assign(kernel=frame.kernel_source.map(AIC_MOE_KERNELS))
        columns = ["moe_dtype", "kernel", "distribution", "hidden_size", "inter_size", "topk",
                   "num_experts", "moe_tp_size", "moe_ep_size", "num_tokens", "latency"]
        frame = frame[columns].sort_values(columns[:-1])
        _write_csv(frame, out / f"moe_{_AIC_MOE_STEMS[folder]}.csv")
    for folder, version in AIC_MOE_GPUS.items():
        frame = pd.read_parquet(data / folder / "comm" / "vllm" / version
                                / "moe_a2a_perf.parquet")
        keep = pd.Series(list(zip(frame.comm_backend, frame.sms, strict=True)),
                         index=frame.index).isin(AIC_A2A_BACKENDS)
        frame = frame[keep].rename(columns={"latency": "latency_us"})
        columns = ["comm_backend", "phase", "ep_size", "hidden_size", "topk", "num_experts",
                   "num_tokens", "latency_us"]
        frame = frame[columns].sort_values(columns[:-1])
        _write_csv(frame, out / f"moe_a2a_{_AIC_MOE_STEMS[folder]}.csv")
    ship_quant(data, out)
    for sweep in sorted((source / "silicon_calibration").glob("vllm_*.csv")):
        shutil.copy(sweep, out / f"silicon_{sweep.name}")
    license_file = out / "LICENSE.aiconfigurator-Apache-2.0.txt"
    license_file.write_bytes((source / license_file.name).read_bytes())


def ship_quant(data: Path, out: Path) -> None:
    """``quant_<gpu>.csv`` of :func:`ship_aiconfigurator`, from ``systems/data``."""
    for folder, stem in AIC_QUANT_GPUS.items():
        frame = pd.read_parquet(data / folder / "quantize" / "vllm" / AIC_VLLM[folder]
                                / "scale_matrix_perf.parquet")
        frame = frame.loc[frame.kernel_source == "static_scaled_fp8_quant", ["m", "k", "latency"]]
        _write_csv(frame.sort_values(["k", "m"]), out / f"quant_{stem}.csv")


def _write_csv(frame: pd.DataFrame, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(path, index=False, float_format="%.6g")


if __name__ == "__main__":  # pragma: no cover - maintenance entry point
    ship(Path(sys.argv[1]))
