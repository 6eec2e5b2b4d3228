"""The rows of ``clustersim validate``'s tables, and plain-text / Markdown table rendering."""

from __future__ import annotations

from collections.abc import Sequence

from clustersim.calibration.comparison import (
    FITS,
    MISS_RUNS,
    PartScore,
    Validation,
    ship_scores,
    ship_verdict,
)
from clustersim.calibration.fit import HOST_MEASURED_ON
from clustersim.calibration.fitsets import SETS, SHIPPED
from clustersim.calibration.holdout import HOLD_OUT_EVERY, HeldOutScore
from clustersim.calibration.silicon import RowScore, by_concurrency
from clustersim.calibration.splitwise import GroupScore
from clustersim.calibration.tp_check import CHECK_HEADER, StepCheck
from clustersim.calibration.vllm_runs import METRICS, STATS, RunScore

_METRIC_NAMES = {"ttft_s": "TTFT", "tpot_s": "TPOT", "e2e_s": "E2E"}
FIT_LABELS = {name: fit_id for name, fit_id in SETS.items()}
"""Fit set -> the label tables show (fit-v1, fit-v2)."""
MEASURED = ("h100-sxm", "a100-80gb-sxm", "l40s", "rtx4090", "rtx-pro-6000-server")
"""The GPUs fitted on their own measurements, in table order."""


def text_table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    widths = [min(w, 40) for w in widths]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


# ------------------------------------------------------------------ scores
SPLITWISE_HEADER = ["model", "hardware", "TP", "fit", "prefill MAPE %", "prefill bias %", "n",
                    "decode MAPE %", "decode bias %", "n"]
VLLM_HEADER = ["run", "metric", "fit", "vLLM mean", "sim mean", "mean %", "p50 %", "p90 %",
               "p99 %", "MAPE %", "bias %"]


def splitwise_rows(scores: Sequence[GroupScore], mode: str) -> list[list[str]]:
    """One row per (group, fit) of ``mode``, the fits of a group side by side."""
    rows = []
    for s in sorted((s for s in scores if s.mode == mode),
                    key=lambda s: (s.model, s.hardware, s.tp, _fit_order(s.fit))):
        rows.append([
            s.model, s.hardware, str(s.tp), FIT_LABELS.get(s.fit, s.fit),
            f"{s.prefill_mape:.1f}", f"{s.prefill_bias:+.1f}", str(s.num_prefill),
            f"{s.decode_mape:.1f}", f"{s.decode_bias:+.1f}", str(s.num_decode),
        ])
    return rows


def vllm_rows(scores: Sequence[RunScore], mode: str) -> list[list[str]]:
    """One row per (run, metric, fit) of ``mode``."""
    runs = list(dict.fromkeys(s.run for s in scores))
    rows = []
    for run in runs:
        mine = sorted((s for s in scores if s.run == run and s.mode == mode),
                      key=lambda s: _fit_order(s.fit))
        for metric in METRICS:
            for s in mine:
                errs = [s.error_pct(metric, stat) for stat in STATS]
                unit = 1e3 if metric == "tpot_s" else 1.0
                suffix = " ms" if metric == "tpot_s" else " s"
                rows.append([
                    s.run, _METRIC_NAMES[metric], FIT_LABELS.get(s.fit, s.fit),
                    f"{s.measured[metric]['mean'] * unit:.1f}{suffix}",
                    f"{s.simulated[metric]['mean'] * unit:.1f}{suffix}",
                    *(f"{e:+.1f}" for e in errs),
                    f"{sum(abs(e) for e in errs) / len(errs):.1f}",
                    f"{sum(errs) / len(errs):+.1f}",
                ])
    return rows


def _fit_order(fit: str) -> int:
    return FITS.index(fit) if fit in FITS else len(FITS)


TP_CHECK_HEADER = [*CHECK_HEADER[:8], "fit-v1 GPU time", "fit-v1 with CPU overhead",
                   "fit-v2 GPU time", "fit-v2 with CPU overhead"]


def tp_check_rows(checks: dict[str, list[StepCheck]]) -> list[list[str]]:
    """The profile's sums once, then each fit's price of the same steps."""
    rows = []
    for i, c in enumerate(checks[FITS[0]]):
        rows.append([str(c.batch), f"{c.context:,}", *(f"{v:.1f}" for v in (
            c.gemm_ms, c.attention_ms, c.elementwise_ms, c.lm_head_ms, c.collectives_ms,
            c.profile_ms)), *(f"{v:.1f}" for fit in FITS for v in (
                checks[fit][i].clustersim_ms, checks[fit][i].clustersim_total_ms))])
    return rows


# ------------------------------------------------------------------ parameters
PARAM_HEADER = ["GPU", "fit", "eff_c", "t_half", "eff_m", "GEMM floor (µs)", "eff_attn",
                "K_half (keys)", "attn floor (µs)", "decode eff_kv / c_half",
                "NCCL all-reduce α (µs) / eff", "custom all-reduce α (µs) / eff",
                "all-gather α (µs) / eff", "reduce-scatter α (µs) / eff",
                "fused MoE eff_c / t_half / eff_m / floor (µs)",
                "small kernels floor (µs) / cta (ps/B) / eff", "calibration"]


def param_row(gpu_id: str, p: dict, fit: str) -> list[str]:
    """Every priced field of one profile entry (``-`` where the catalog default holds)."""
    def pair(latency: str, eff: str | None) -> str:
        if p.get(latency) is None:
            return "-"
        return f"{p[latency] * 1e6:.1f} / {p.get(eff, '-') if eff else '-'}"

    decode = ("-" if p.get("decode_attention_memory_efficiency") is None else
              f"{p['decode_attention_memory_efficiency']:.2f} / "
              f"{p.get('decode_attention_half_tokens', 0):.0f}")
    moe = p.get("moe_gemm")
    moe_cell = ("-" if moe is None else
                f"{moe['compute_efficiency']:.2f} / {moe['compute_half_tokens']:.0f} / "
                f"{moe['memory_efficiency']:.2f} / {moe.get('floor_s', 0) * 1e6:.0f}")
    small = ("-" if p.get("small_kernel_floor_s") is None else
             f"{p['small_kernel_floor_s'] * 1e6:.2f} / "
             f"{p['small_kernel_cta_s_per_byte'] * 1e12:.1f} / "
             f"{p['small_kernel_memory_efficiency']:.2f}")
    return [
        gpu_id, fit, f"{p['compute_efficiency']:.2f}", f"{p['compute_half_tokens']:.0f}",
        f"{p['memory_efficiency']:.2f}", f"{p.get('gemm_floor_s', 0.0) * 1e6:.2f}",
        f"{p['attention_efficiency']:.2f}", f"{p.get('attention_half_keys', 0.0):.0f}",
        f"{p.get('attention_floor_s', 0.0) * 1e6:.1f}", decode,
        pair("allreduce_latency_s", "link_efficiency"),
        pair("custom_allreduce_latency_s", "custom_allreduce_link_efficiency"),
        pair("allgather_latency_s", "allgather_link_efficiency"),
        pair("reduce_scatter_latency_s", "reduce_scatter_link_efficiency"),
        moe_cell, small, p["calibration"],
    ]


def shipped_param_rows() -> list[list[str]]:
    """Every GPU of the shipped profile, as it ships."""
    from clustersim.calibration.fitsets import shipped_set
    from clustersim.catalog import load_profiles

    return [param_row(gpu_id, p, FIT_LABELS[shipped_set(gpu_id)])
            for gpu_id, p in load_profiles().items()]


def fit_param_rows() -> list[list[str]]:
    """The measured GPUs on both fits, fit-v1 above fit-v2."""
    from clustersim.catalog import load_profiles

    sets = {fit: load_profiles(fit) for fit in FITS}
    return [param_row(gpu_id, sets[fit][gpu_id], FIT_LABELS[fit])
            for gpu_id in MEASURED for fit in FITS]


FORM_HEADER = ["GPU", "table", "form", "rms log error", "without the new term", "rows"]


def form_rows() -> list[list[str]]:
    """What each new term buys on the table it was fitted on: fit-v2's residual beside the
    same table fitted without it (fit-v1's form)."""
    from clustersim.catalog import load_profiles

    rows = []
    for gpu_id, p in load_profiles("aiconfigurator").items():
        prov = p["provenance"]
        small = prov.get("small_kernels")
        if small is not None and "->" not in small["calibration"]:
            rows.append([gpu_id, "small kernels", "floor + bytes at one block or the bandwidth",
                         f"{small['rms_log_error']:.3f}", "-", f"{small['num_rows']:,}"])
        if "gemm" not in prov:
            continue  # borrowed
        gemm = prov["gemm"]
        rows.append([gpu_id, "16-bit GEMMs", "floor + saturating roofline",
                     f"{gemm['rms_log_error']:.3f}",
                     f"{gemm['without_floor_rms_log_error']:.3f}" if
                     "without_floor_rms_log_error" in gemm else "- (floor lent)",
                     f"{gemm['num_rows']:,}"])
        for key, label in (("fp8_gemm", "FP8 GEMMs"), ("fp4_gemm", "NVFP4 GEMMs")):
            fit = prov.get(key)
            if fit is not None:
                rows.append([gpu_id, label, "floor + saturating roofline",
                             f"{fit['rms_log_error']:.3f}",
                             f"{fit['without_floor_rms_log_error']:.3f}",
                             f"{fit['num_rows']:,}"])
        attn = prov["attention"]
        rows.append([gpu_id, "prefill attention", "floor + pairs saturating in keys/query",
                     f"{attn['rms_log_error']:.3f}",
                     f"{attn['flat_rms_log_error']:.3f}" if "flat_rms_log_error" in attn
                     else "-", f"{attn['num_rows']:,}"])
        dec = prov.get("decode_attention")
        if dec is not None:
            rows.append([gpu_id, "decode attention", "floor + KV read + per-sequence tokens",
                         f"{dec['rms_log_error']:.3f}", "-", f"{dec['num_rows']:,}"])
        moe = prov.get("moe_gemm")
        if moe is not None:
            rows.append([gpu_id, "fused MoE", "floor + saturating roofline, own efficiencies",
                         f"{moe['rms_log_error']:.3f}", "-", f"{moe['num_rows']:,}"])
    return rows


# ------------------------------------------------------------------ FP8
FP8_HEADER = ["GPU", "FP8 eff_c", "t_half (tokens)", "FP8 eff_m", "floor (µs)", "rms log error",
              "rows", "same-table BF16 eff_c / eff_m / rms", "calibration"]


MOE_KERNEL_HEADER = ["GPU", "format", "kernel", "fit eff_c / t_half / eff_m / floor (µs)",
                     "rms log error", "rows", "curves", "calibration"]


def moe_kernel_rows() -> list[list[str]]:
    """One row per fused-MoE kernel a shipped profile measured (``moe_kernels`` with its own
    curves): its fit, the fit's error and rows, and the shapes and splits it holds curves of."""
    from clustersim.catalog import load_profiles

    rows = []
    for gpu_id, p in load_profiles().items():
        fitted = {(k["dtype"], k["kernel"]): k for k in p["provenance"].get("moe_kernels", ())}
        for k in p.get("moe_kernels", ()):
            if not k["curves"]:
                continue  # borrowed: the fit alone, listed under its GPU
            fit, prov = k["fit"], fitted[k["dtype"], k["kernel"]]
            rows.append([
                gpu_id, k["dtype"], k["kernel"],
                f"{fit['compute_efficiency']:.2f} / {fit['compute_half_tokens']:.0f} / "
                f"{fit['memory_efficiency']:.2f} / {fit['floor_s'] * 1e6:.0f}",
                f"{prov['rms_log_error']:.3f}", f"{prov['num_rows']:,}", str(len(k["curves"])),
                fit["calibration"],
            ])
    return rows


def fp8_rows() -> list[list[str]]:
    """One row per GPU with an FP8 GEMM fit in the shipped profile: its values, and the
    measured fit's errors and the same table's BF16 fit (or the GPU it borrows from)."""
    from clustersim.catalog import load_profiles

    rows = []
    for gpu_id, p in load_profiles().items():
        fit = p.get("fp8_gemm")
        if fit is None:
            continue
        prov = p["provenance"]
        own = prov.get("fp8", {})
        measured = own.get("fp8_gemm") or prov.get("fp8_gemm")
        bf16 = own.get("bf16_same_table") or prov.get("gemm") if measured else None
        rows.append([
            gpu_id, f"{fit['compute_efficiency']:.2f}", f"{fit['compute_half_tokens']:.0f}",
            f"{fit['memory_efficiency']:.2f}", f"{fit.get('floor_s', 0.0) * 1e6:.1f}",
            "-" if measured is None else f"{measured['rms_log_error']:.3f}",
            "-" if measured is None else f"{measured['num_rows']:,}",
            "-" if bf16 is None else (f"{bf16['compute_efficiency']:.2f} / "
                                      f"{bf16['memory_efficiency']:.2f} / "
                                      f"{bf16['rms_log_error']:.3f}"),
            fit["calibration"],
        ])
    return rows


TRT_LLM_FP8_TTFT_MS = {
    # (model, GPU, TP, prompt tokens): TTFT at batch 1, FP8, TensorRT-LLM v0.5/v0.6.1
    ("llama-2-7b", "h100-sxm", 1, 128): 7, ("llama-2-7b", "h100-sxm", 1, 2048): 36,
    ("llama-2-7b", "l40s", 1, 128): 14, ("llama-2-7b", "l40s", 1, 2048): 73,
    ("llama-2-70b", "h100-sxm", 4, 128): 26, ("llama-2-70b", "h100-sxm", 4, 2048): 109,
}
"""NVIDIA/TensorRT-LLM@138f96d4:docs/source/performance.md (confirmed in TensorRT-LLM issue
281), as hardware_and_roofline.md section 5.1 quotes it: another engine, a cross-check only."""
FP8_CROSSCHECK_HEADER = ["model", "GPU", "prompt tokens", "TensorRT-LLM FP8 TTFT (ms)",
                         "clustersim FP8 prefill step (ms)", "difference"]


def fp8_crosscheck_rows() -> list[list[str]]:
    """clustersim's FP8 prefill step (``--quantization fp8``) beside TensorRT-LLM's published
    batch-1 FP8 TTFT on the same shapes."""
    from clustersim.catalog import load_gpu, load_model
    from clustersim.cost.roofline import BatchShape, CostModel
    from clustersim.engine.quantization import served_model

    rows = []
    for (model_id, gpu_id, tp, tokens), ttft_ms in TRT_LLM_FP8_TTFT_MS.items():
        gpu = load_gpu(gpu_id)
        model = served_model(load_model(model_id), gpu, "fp8")
        ours_ms = CostModel(model, gpu, tp).step_time(
            BatchShape.from_chunks([(tokens, 0, True)])).time_s * 1e3
        rows.append([model_id, f"{gpu_id} TP{tp}", f"{tokens:,}", f"{ttft_ms}",
                     f"{ours_ms:.1f}", f"{(ours_ms - ttft_ms) / ttft_ms:+.0%}"])
    return rows


# ------------------------------------------------------------------ choice and parts
SHIP_HEADER = ["GPU", "held-out data", "fit-v1 mean error %", "fit-v2 mean error %",
               "lower error", "ships"]


def ship_rows(validation: Validation) -> list[list[str]]:
    scores = ship_scores(validation)
    verdict = ship_verdict(scores)
    data = {"a100-80gb-sxm": "Splitwise, few-shot", "h100-sxm": "Splitwise, few-shot",
            "rtx4090": "1 vLLM run, zero-shot", "rtx-pro-6000-server": "3 vLLM runs, zero-shot"}
    rows = [[gpu, data.get(gpu, "-"), f"{s['vidur']:.2f}", f"{s['aiconfigurator']:.2f}",
             FIT_LABELS[verdict[gpu]], FIT_LABELS[SHIPPED[gpu]]]
            for gpu, s in sorted(scores.items())]
    rows += [[gpu, "none", "-", "-", "-", FIT_LABELS[fit]]
             for gpu, fit in SHIPPED.items() if gpu not in scores]
    return rows


SILICON_HEADER = ["rows", "n", "fit", "TTFT MAPE %", "TTFT bias %", "TPOT MAPE %",
                  "TPOT bias %"]


def silicon_rows(silicon: dict[str, list[RowScore]]) -> list[list[str]]:
    """Both fits on the calibration rows, over all rows and per concurrency."""
    rows = []
    groups = {fit: by_concurrency(scores) for fit, scores in silicon.items() if scores}
    for i in range(len(next(iter(groups.values()), []))):
        for fit, table in groups.items():
            name, n, ttft_mape, ttft_bias, tpot_mape, tpot_bias = table[i]
            rows.append([name, str(n), FIT_LABELS[fit], f"{100 * ttft_mape:.1f}",
                         f"{100 * ttft_bias:+.1f}", f"{100 * tpot_mape:.1f}",
                         f"{100 * tpot_bias:+.1f}"])
    return rows


PARTS_HEADER = ["fit", "Qwen3-32B TP2 TTFT / TPOT / E2E %", "Qwen3-30B-A3B TTFT / TPOT / E2E %",
                "A100 Splitwise zero-shot prefill / decode", "A100 few-shot prefill / decode",
                "H100 Splitwise zero-shot prefill / decode", "H100 few-shot prefill / decode"]


def parts_rows(parts: Sequence[PartScore]) -> list[list[str]]:
    """fit-v1, fit-v1 with each new part alone, fit-v2: the misses' signed mean errors and
    Splitwise's mean MAPEs."""
    rows = []
    for p in parts:
        runs = [" / ".join(f"{p.run_errors[run][m]:+.1f}" for m in METRICS) for run in MISS_RUNS]
        sw = [" / ".join(f"{p.splitwise[gpu][f'{mode}_{phase}']:.1f}"
                         for phase in ("prefill", "decode"))
              for gpu in ("a100-80gb-sxm", "h100-sxm") for mode in ("zero-shot", "few-shot")]
        label = p.part if p.part in ("fit-v1", "fit-v2") else f"fit-v1 + {p.part}"
        rows.append([label, *runs, *sw])
    return rows


# ------------------------------------------------------------------ tables per GPU
PRICED_HEADER = ["GPU", "profile",
                 "kernel tables it is fitted on (clustersim/data/calibration/fit/)", "borrowed"]


_KINDS = ("context_attention", "generation_attention", "moe_a2a", "allreduce", "gemm", "moe",
          "quant")
"""aiconfigurator cuts' name prefixes (``<kind>_<stem>.csv``), longest first."""


def _files(paths: Sequence[str]) -> str:
    """``aiconfigurator/{gemm,moe}_b200_sxm.csv`` for aiconfigurator cuts of one GPU, else
    the paths."""
    parts = []
    for path in paths:
        folder, _, name = path.rpartition("/")
        kind = next((k for k in _KINDS if name.startswith(f"{k}_")), None)
        parts.append((folder, kind, name.removeprefix(f"{kind}_")))
    if len(paths) > 1 and all(k for _, k, _ in parts) and len({(f, n) for f, _, n in parts}) == 1:
        folder, _, name = parts[0]
        return f"{folder}/{{{','.join(k for _, k, _ in parts)}}}_{name}"
    return ", ".join(dict.fromkeys(paths))


def priced_rows() -> list[list[str]]:
    """Every catalog GPU: the profile that prices it, the kernel tables that profile was
    fitted on, and what it borrows from another GPU."""
    from clustersim.catalog import gpu_ids, load_profiles

    profiles = load_profiles()
    rows = []
    for gpu_id in gpu_ids():
        p = profiles.get(gpu_id)
        if p is None:
            rows.append([gpu_id, "default", "none", "everything: the catalog's defaults"])
            continue
        prov = p["provenance"]
        donor = prov.get("transferred_from")
        sources = [*prov.get("sources", ()), *prov.get("moe_sources", ())]
        small = prov.get("small_kernels", {})
        if small and "->" not in small["calibration"]:
            sources.append(small["source"])
        own = _files(sources) if sources else "none"
        borrowed = []
        if donor is not None:
            borrowed.append(f"every kernel fit from {donor}")
        if prov.get("fp8_transferred_from") not in (None, donor):
            borrowed.append(f"FP8 GEMMs from {prov['fp8_transferred_from']}")
        if "floor_from" in prov.get("gemm", {}):
            borrowed.append(f"GEMM floor from {prov['gemm']['floor_from']}")
        if small and "->" in small["calibration"] and donor is None:
            borrowed.append(f"small kernels from {small['measured_on']}")
        if donor is None and "allreduce_latency_s" not in p:
            borrowed.append("collectives: the catalog's link defaults")
        if (donor is None and gpu_id != HOST_MEASURED_ON
                and p["calibration"].startswith(FIT_LABELS["aiconfigurator"])):
            borrowed.append(f"host time per layer and request ({HOST_MEASURED_ON} serving runs)")
        rows.append([gpu_id, p["calibration"], own, "; ".join(borrowed) or "-"])
    return rows


HELD_OUT_HEADER = ["GPU", "table", "held-out token counts", "rows fitted / held out",
                   "held-out rms log error", "held-out median |error|",
                   "rms log error, every row"]


def held_out_rows(scores: Sequence[HeldOutScore]) -> list[list[str]]:
    """One row per (GPU, table): the fit on the kept token counts, scored on the others."""
    return [[s.gpu, s.table, ", ".join(f"{t:,}" for t in s.held_out),
             f"{s.num_fit_rows:,} / {s.num_held_rows:,}", f"{s.rms_log_error:.3f}",
             f"{s.median_abs_error:.1%}", f"{s.in_sample_rms_log_error:.3f}"]
            for s in scores]


HELD_OUT_TITLE = (
    f"fit-v2's kernel fits refitted without every {HOLD_OUT_EVERY}th token count (GEMM M, "
    "prefill prompt, decode context; calibration data, not the validation sets) and scored on "
    "the rows held out, beside the shipped fit's error on every row")
