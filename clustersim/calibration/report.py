"""``clustersim validate``'s output: the plain-text tables and the docs page (Markdown).

Every figure the prose quotes is computed here from the scores and profiles, so the page
cannot drift from its tables; the one exception is the page's last section, beside NVIDIA
aiconfigurator, the static record of a benchmark run (``aiconfigurator_section.py``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from clustersim.calibration.aiconfigurator_section import AICONFIGURATOR_SECTION
from clustersim.calibration.comparison import (
    COMPARE_RULE,
    FITS,
    MISS_RUNS,
    PARTS,
    PartScore,
    Validation,
    ship_scores,
    ship_verdict,
)
from clustersim.calibration.holdout import HOLD_OUT_EVERY, HeldOutScore
from clustersim.calibration.silicon import by_concurrency
from clustersim.calibration.splitwise import FEW_SHOT_RULE, GroupScore
from clustersim.calibration.tables import (
    FIT_LABELS,
    FORM_HEADER,
    FP8_CROSSCHECK_HEADER,
    FP8_HEADER,
    HELD_OUT_HEADER,
    HELD_OUT_TITLE,
    MOE_KERNEL_HEADER,
    PARAM_HEADER,
    PARTS_HEADER,
    PRICED_HEADER,
    SHIP_HEADER,
    SILICON_HEADER,
    SPLITWISE_HEADER,
    TP_CHECK_HEADER,
    VLLM_HEADER,
    fit_param_rows,
    form_rows,
    fp8_crosscheck_rows,
    fp8_rows,
    held_out_rows,
    markdown_table,
    moe_kernel_rows,
    parts_rows,
    priced_rows,
    ship_rows,
    shipped_param_rows,
    silicon_rows,
    splitwise_rows,
    text_table,
    tp_check_rows,
    vllm_rows,
)
from clustersim.calibration.tp_check import StepCheck
from clustersim.calibration.vllm_runs import FEW_SHOT_RULE as RUNS_RULE
from clustersim.calibration.vllm_runs import METRICS, STATS, RunScore, full_decode_step_ms

__all__ = ["render_markdown", "render_text"]


def render_text(validation: Validation) -> str:
    v = validation
    blocks = [
        "Splitwise perf_model.csv, zero-shot (shipped calibration only), fit-v1 (Vidur) and "
        "fit-v2 (aiconfigurator)",
        text_table(SPLITWISE_HEADER, splitwise_rows(v.splitwise, "zero-shot")),
        f"Splitwise perf_model.csv, few-shot ({FEW_SHOT_RULE}; scored on the other rows)",
        text_table(SPLITWISE_HEADER, splitwise_rows(v.splitwise, "few-shot")),
        "Splitwise perf_model.csv, the same three parameters fitted on all rows of each group "
        "(a reference for what the model's shape allows)",
        text_table(SPLITWISE_HEADER, splitwise_rows(v.splitwise, "all-rows")),
        "vLLM 0.19 serving runs, zero-shot (engine args + KV size from the meta file); "
        "signed error % of the simulated statistic",
        text_table(VLLM_HEADER, vllm_rows(v.runs, "zero-shot")),
        f"vLLM 0.19 serving runs, few-shot ({RUNS_RULE})",
        text_table(VLLM_HEADER, vllm_rows(v.runs, "few-shot")),
        "cross-check (calibration data only): Qwen3-32B TP2 decode steps on the RTX PRO 6000 "
        "summed from their own kernel profile and NCCL samples vs clustersim's GPU time and "
        "price on each fit, ms",
        text_table(TP_CHECK_HEADER, tp_check_rows(v.tp_checks)),
    ]
    if v.silicon:
        blocks += [SILICON_TITLE, text_table(SILICON_HEADER, silicon_rows(v.silicon))]
    if v.parts:
        blocks += ["fit-v1 with each part of fit-v2 alone: the two misses (signed error % of "
                   "the mean, zero-shot) and Splitwise (mean MAPE %)",
                   text_table(PARTS_HEADER, parts_rows(v.parts))]
    blocks += [f"both fits on each GPU's held-out data ({COMPARE_RULE}); every GPU ships "
               "fit-v2, chosen without these scores", text_table(SHIP_HEADER, ship_rows(v))]
    blocks += ["the kernel tables that price each GPU (the shipped profile)",
               text_table(PRICED_HEADER, priced_rows())]
    if v.held_out:
        blocks += [HELD_OUT_TITLE, text_table(HELD_OUT_HEADER, held_out_rows(v.held_out))]
    return "\n\n".join(blocks)


SILICON_TITLE = (
    "calibration rows, not held out (fit-v2's host time is fitted on their TPOT): NVIDIA's 45 "
    "measured vLLM runs, Llama-3.1-70B FP8 on H100 SXM, TP 2-8, 4-64 closed-loop clients, "
    "replayed with the benchmark client as their recipe ran it (lengths drawn from 0.8 to 1 x "
    "the named ones) and the API server's defaults; mean TTFT and TPOT errors")


# ------------------------------------------------------------------ prose figures
_TARGET_PCT = 10.0


def _span(values: Sequence[float]) -> str:
    return f"{min(values):.1f}-{max(values):.1f} %" if values else "n/a"


def _of(scores: Sequence, fit: str, mode: str) -> list:
    return [s for s in scores if s.fit == fit and s.mode == mode]


def splitwise_summary(scores: Sequence[GroupScore]) -> dict[str, str]:
    """Splitwise figures of both fits for the prose."""
    out = {}
    for fit, tag in zip(FITS, ("v1", "v2"), strict=True):
        few, bound = _of(scores, fit, "few-shot"), _of(scores, fit, "all-rows")
        zero = _of(scores, fit, "zero-shot")
        decode = [s.decode_mape for s in few]
        within = sum(v <= _TARGET_PCT for v in decode)
        worst = max(few, key=lambda s: s.decode_mape, default=None)
        if worst is None:
            out[f"few_decode_{tag}"] = "n/a"
        elif within == len(decode):
            out[f"few_decode_{tag}"] = f"{_span(decode)} in every group"
        else:
            out[f"few_decode_{tag}"] = (
                f"{_span(decode)}, within {_TARGET_PCT:.0f} % in {within} of {len(decode)} "
                f"groups (worst: {worst.model} {worst.hardware} TP{worst.tp})")
        prefill = [s.prefill_mape for s in few]
        above = sum(v > _TARGET_PCT for v in prefill)
        out[f"few_prefill_{tag}"] = (f"{_span(prefill)}, above the {_TARGET_PCT:.0f} % target "
                                     f"in {above} of {len(prefill)} groups")
        out[f"bound_prefill_{tag}"] = _span([s.prefill_mape for s in bound])
        out[f"zero_prefill_{tag}"] = _span([s.prefill_mape for s in zero])
        out[f"zero_decode_{tag}"] = _span([s.decode_mape for s in zero])
    return out


_MOE_RUN = "RTXPRO6000_Qwen3-30B-A3B-Instruct-2507"
_TP2_RUN = "RTXPRO6000_Qwen3-32B"


def _errors(runs: Sequence[RunScore], run: str, fit: str,
            metrics: Sequence[str] = METRICS) -> list[float]:
    """|error| (%) of every statistic of ``run``'s zero-shot ``metrics`` on ``fit``."""
    return [abs(r.error_pct(m, st)) for r in _of(runs, fit, "zero-shot") if r.run == run
            for m in metrics for st in STATS]


def runs_summary(runs: Sequence[RunScore]) -> dict[str, str]:
    """Serving-run figures of both fits for the prose."""
    def worst(run: str, fit: str) -> str:
        errs = _errors(runs, run, fit)
        return f"{max(errs):.1f}" if errs else "n/a"

    def span(run: str, metric: str, fit: str) -> str:  # whole percents around the range
        errs = _errors(runs, run, fit, [metric])
        return f"{math.floor(min(errs))}-{math.ceil(max(errs))}" if errs else "n/a"

    def mean_err(run: str, metric: str, fit: str) -> str:
        found = [r for r in _of(runs, fit, "zero-shot") if r.run == run]
        return f"{found[0].error_pct(metric, 'mean'):+.1f}" if found else "n/a"

    out = {}
    for fit, tag in zip(FITS, ("v1", "v2"), strict=True):
        out[f"z_4090_{tag}"] = worst("RTX4090_Llama-3.1-8B", fit)
        out[f"z_pro_llama_{tag}"] = worst("RTXPRO6000_Llama-3.1-8B", fit)
        out[f"z_pro_llama_tpot_{tag}"] = mean_err("RTXPRO6000_Llama-3.1-8B", "tpot_s", fit)
        out[f"z_pro_llama_ttft_{tag}"] = mean_err("RTXPRO6000_Llama-3.1-8B", "ttft_s", fit)
        out[f"z_qwen_tpot_{tag}"] = span(_TP2_RUN, "tpot_s", fit)
        out[f"z_qwen_ttft_{tag}"] = span(_TP2_RUN, "ttft_s", fit)
        out[f"z_moe_tpot_{tag}"] = span(_MOE_RUN, "tpot_s", fit)
        moe = next((r for r in _of(runs, fit, "zero-shot") if r.run == _MOE_RUN), None)
        out[f"moe_sim_ttft_{tag}"] = ("n/a" if moe is None
                                      else f"{moe.simulated['ttft_s']['mean']:.2f}")
        if moe is not None:
            out["moe_ttft"] = f"{moe.measured['ttft_s']['mean']:.2f}"
            out["moe_ttft_p50"] = f"{moe.measured['ttft_s']['p50']:.2f}"
    few = _of(runs, FITS[0], "few-shot")
    worst_abs = {r.run: max(abs(r.error_pct(m, st)) for m in METRICS for st in STATS)
                 for r in few}
    best = min(worst_abs, key=worst_abs.__getitem__, default=None)
    others = [r.error_pct("ttft_s", "mean") for r in few if r.run != best]
    out.update({
        "few_best_run": best or "n/a",
        "few_best_pct": f"{worst_abs[best]:.0f}" if best else "n/a",
        "few_other_ttft": f"{min(others):+.0f} % to {max(others):+.0f} %" if others else "n/a",
    })
    return out


def tp_check_summary(validation: Validation) -> dict[str, str]:
    out = {"tp_table": markdown_table(TP_CHECK_HEADER, tp_check_rows(validation.tp_checks))}
    for fit, tag in zip(FITS, ("v1", "v2"), strict=True):
        full = max(validation.tp_checks[fit], key=lambda c: c.batch)
        out.update({
            "tp_batch": str(full.batch), "tp_context": f"{full.context:,}",
            "tp_profile": f"{full.profile_ms:.1f}", f"tp_sim_{tag}": f"{full.clustersim_ms:.1f}",
            f"tp_sim_total_{tag}": f"{full.clustersim_total_ms:.1f}",
        })
    log = full_decode_step_ms(_TP2_RUN)
    out["tp_log"] = f"{min(log):.1f}-{max(log):.1f}" if log else "n/a"
    out["tp_log_steps"] = f"{1e3 / max(log):.0f}-{1e3 / min(log):.0f}" if log else "n/a"
    return out


def parts_summary(parts: Sequence[PartScore]) -> dict[str, str]:
    """The misses under fit-v1, under each part alone and under fit-v2."""
    by = {p.part: p for p in parts}
    if not by:
        return {}

    def err(label: str, run: str, metric: str) -> str:
        return f"{by[label].run_errors[run][metric]:+.1f}"

    tp2, moe = MISS_RUNS
    gemm, prefill, decode, comm, fused = PARTS
    return {
        "p_tp2_tpot_v1": err("fit-v1", tp2, "tpot_s"),
        "p_tp2_tpot_v2": err("fit-v2", tp2, "tpot_s"),
        "p_tp2_tpot_gemm": err(gemm, tp2, "tpot_s"),
        "p_tp2_tpot_decode": err(decode, tp2, "tpot_s"),
        "p_tp2_tpot_prefill": err(prefill, tp2, "tpot_s"),
        "p_tp2_tpot_comm": err(comm, tp2, "tpot_s"),
        "p_moe_ttft_v1": err("fit-v1", moe, "ttft_s"),
        "p_moe_ttft_v2": err("fit-v2", moe, "ttft_s"),
        "p_moe_ttft_fused": err(fused, moe, "ttft_s"),
        "p_moe_tpot_fused": err(fused, moe, "tpot_s"),
        "p_moe_ttft_gemm": err(gemm, moe, "ttft_s"),
        "p_moe_ttft_prefill": err(prefill, moe, "ttft_s"),
    }


def ship_summary(validation: Validation) -> dict[str, str]:
    """The held-out comparison of both fits per GPU (it chooses nothing: ``fitsets.SHIPPED``)."""
    verdict = ship_verdict(ship_scores(validation))

    def named(fit: str) -> str:
        gpus = [gpu for gpu, f in sorted(verdict.items()) if f == fit]
        return ", ".join(gpus) if gpus else "no GPU"

    return {
        "ship_table": markdown_table(SHIP_HEADER, ship_rows(validation)),
        "ship_rule": COMPARE_RULE,
        "better_v1": named("vidur"),
        "better_v2": named("aiconfigurator"),
    }


def facts(checks: Sequence[StepCheck]) -> dict[str, str]:
    """The calibration figures the prose quotes, read from the fit profiles, the shipped
    calibration cuts and the TP2 cross-check's ``checks``."""
    import pandas as pd

    from clustersim.calibration.aiconfigurator import AIC_DIR, DECODE_MIN_KV_BYTES
    from clustersim.calibration.sources import FIT_DIR
    from clustersim.catalog import load_gpu, load_profiles
    from clustersim.cost.collectives import allreduce_segments

    v1, v2 = load_profiles("vidur"), load_profiles("aiconfigurator")
    h100 = load_gpu("h100-sxm", profile="default")
    gemm = pd.read_csv(AIC_DIR / "gemm_h100_sxm.csv")
    bf16 = gemm[gemm.gemm_dtype == "bfloat16"]
    small = bf16[(bf16.n == 1024) & (bf16.k == 1024) & (bf16.m <= 256)]
    big = bf16[(bf16.n == 4096) & (bf16.k == 4096) & (bf16.m == 1)]
    attn = pd.read_csv(AIC_DIR / "context_attention_h100_sxm.csv")
    attn = attn[(attn.batch_size == 1) & (attn.num_heads == 32) & (attn.num_key_value_heads == 8)]
    s = attn.isl.to_numpy(dtype=float)
    eff = 4 * 32 * 128 * s * (s + 1) / 2 / (attn.latency.to_numpy() * 1e-3) / h100.peak_flops
    by_isl = dict(zip(attn.isl, eff, strict=True))
    comm = {gpu: pd.read_csv(AIC_DIR / f"allreduce_{gpu}.csv") for gpu in ("a100_sxm", "h100_sxm")}

    def latency_us(gpu: str, source: str, n: int, elements: int) -> float:
        f = comm[gpu]
        rows = f[(f.source == source) & (f.op == "all_reduce") & (f.num_gpus == n)
                 & (f.message_size == elements)]
        return float(rows.latency.mean()) * 1e3

    measured = ("h100-sxm", "a100-80gb-sxm", "l40s", "rtx4090", "rtx-pro-6000-server")
    eff_m_v2 = [v2[g]["memory_efficiency"] for g in measured if v2[g].get("gemm_floor_s", 0) > 1e-6]
    eff_m_v1 = [v1[g]["memory_efficiency"] for g in measured]
    pro1, pro2, h2 = v1["rtx-pro-6000-server"], v2["rtx-pro-6000-server"], v2["h100-sxm"]
    halves = [v2[g]["compute_half_tokens"] for g in measured]
    flat = [v2[g]["provenance"]["attention"]["flat_rms_log_error"] for g in measured
            if "flat_rms_log_error" in v2[g]["provenance"]["attention"]]
    l40s = load_gpu("l40s", profile="default")
    gen = pd.read_csv(AIC_DIR / "generation_attention_l40s.csv")
    kv = gen.batch_size * (gen.step + 1) * gen.num_key_value_heads * 128 * 2 * 2
    cached = gen[(kv < DECODE_MIN_KV_BYTES) & (kv > 16 * 2**20)]
    cached_kv = kv[cached.index]
    cache_speed = (cached_kv / (cached.latency * 1e-3) / l40s.mem_bytes_per_s).max()
    h_gen = pd.read_csv(AIC_DIR / "generation_attention_h100_sxm.csv")
    h_kv = h_gen.batch_size * (h_gen.step + 1) * h_gen.num_key_value_heads * 128 * 2 * 2
    fitted_ctx = int(h_gen.step[h_kv >= DECODE_MIN_KV_BYTES].max()) + 1
    dense_4090 = pd.read_csv(FIT_DIR / "rtx4090" / "dense.csv")
    gemm_4090 = dense_4090[(dense_4090.tokens == 1) & dense_4090.layer.isin(
        ["qkv_proj", "o_proj", "gate_up_proj", "down_proj"])].time_us
    elementwise = [c.elementwise_ms for c in checks]
    ar_ratio = latency_us("h100_sxm", "nccl", 8, 1024) / latency_us("h100_sxm", "vllm_graph", 8,
                                                                     1024)
    eight_mib = 4 * 1024 * 1024  # elements of 16 bits
    def fit_128_mib_s(gpu_id: str) -> float:
        """One 8-GPU all-reduce of 128 MiB as the fits price it (the profile's curve set
        aside): one 128 MiB token's segment."""
        gpu = load_gpu(gpu_id, profile="aiconfigurator").model_copy(
            update={"allreduce_curves": ()})
        _, fixed, per_token, _ = next(segment for segment in
                                      allreduce_segments(gpu, 8, 128 << 20, 1)
                                      if segment[0] > 1.0)
        return fixed + per_token

    return {
        "f_halves": f"{min(halves):.0f}-{max(halves):.0f}",
        "f_flat_rms": f"{min(flat):.1f}-{max(flat):.1f}",
        "f_cache_speed": f"{cache_speed:.1f}",
        "f_fitted_ctx": f"{fitted_ctx:,}",
        "f_4090_gemm": f"{gemm_4090.min():.0f}-{gemm_4090.max():.0f}",
        "f_elementwise": f"{min(elementwise):.1f}-{max(elementwise):.1f}",
        "f_ar_ratio": f"{ar_ratio:.1f}",
        "f_small_us": f"{small.latency.median() * 1e3:.1f}",
        "f_small_need_us": f"{1024 * 1024 * 2 / h100.mem_bytes_per_s * 1e6:.1f}",
        "f_big_us": f"{big.latency.mean() * 1e3:.0f}",
        "f_big_need_us": f"{4096 * 4096 * 2 / h100.mem_bytes_per_s * 1e6:.0f}",
        "f_eff_m_v2": f"{min(eff_m_v2):.0%}-{max(eff_m_v2):.0%}",
        "f_eff_m_v1": f"{min(eff_m_v1):.0%}-{max(eff_m_v1):.0%}",
        "f_l40s_v2": f"{v2['l40s']['compute_efficiency']:.2f}",
        "f_l40s_v1": f"{v1['l40s']['compute_efficiency']:.2f}",
        "f_fp8_floor": f"{h2['fp8_gemm']['floor_s'] * 1e6:.0f}",
        "f_attn_2048": f"{by_isl[2048]:.0%}",
        "f_attn_long": "-".join(f"{x:.0%}" for x in sorted((by_isl[8192], by_isl[16384]))),
        "f_a100_8mib_vllm": f"{latency_us('a100_sxm', 'vllm_graph', 2, eight_mib):.1f}",
        "f_a100_8mib_nccl": f"{latency_us('a100_sxm', 'nccl', 2, eight_mib):.1f}",
        "f_h100_small_vllm": f"{latency_us('h100_sxm', 'vllm_graph', 8, 1024):.1f}",
        "f_h100_small_nccl": f"{latency_us('h100_sxm', 'nccl', 8, 1024):.1f}",
        "f_h100_128_vllm": f"{latency_us('h100_sxm', 'vllm_graph', 8, 64 << 20) / 1e3:.3f}",
        "f_h100_128_fit": f"{fit_128_mib_s('h100-sxm') * 1e3:.3f}",
        "f_a100_128_vllm": f"{latency_us('a100_sxm', 'vllm_graph', 8, 64 << 20) / 1e3:.3f}",
        "f_a100_128_fit": f"{fit_128_mib_s('a100-80gb-sxm') * 1e3:.3f}",
        "f_moe_h100": f"{h2['moe_gemm']['compute_efficiency']:.2f}",
        "f_dense_h100": f"{h2['compute_efficiency']:.2f}",
        "f_moe_h100_floor": f"{h2['moe_gemm']['floor_s'] * 1e6:.0f}",
        "f_moe_pro": f"{pro2['moe_gemm']['compute_efficiency']:.2f}",
        "f_dense_pro": f"{pro2['compute_efficiency']:.2f}",
        "f_moe_pro_floor": f"{pro2['moe_gemm']['floor_s'] * 1e6:.0f}",
        "f_moe_pro_eff_m": f"{pro2['moe_gemm']['memory_efficiency']:.0%}",
        "f_moe_slower":
            f"{pro1['compute_efficiency'] / pro2['moe_gemm']['compute_efficiency']:.1f}",
        "f_pro_eff_m_v2": f"{pro2['memory_efficiency']:.0%}",
        "f_pro_floor_v2": f"{pro2['gemm_floor_s'] * 1e6:.2f}",
        "f_pro_eff_m_v1": f"{pro1['memory_efficiency']:.0%}",
        "f_pro_eff_kv": f"{pro2['decode_attention_memory_efficiency']:.0%}",
    }


_BLACKWELL = ("b200", "b300", "gb200", "gb300")
_HOPPER = ("h100-sxm", "h200")


def held_out_summary(scores: Sequence[HeldOutScore]) -> dict[str, str]:
    """The held-out figures the prose quotes: ranges over the GPUs of each table."""
    def span(table: str, gpus: Sequence[str] | None = None, field: str = "rms_log_error",
             pct: bool = False) -> str:
        values = [getattr(s, field) for s in scores
                  if s.table == table and (gpus is None or s.gpu in gpus)]
        if not values:
            return "-"
        low, high = min(values), max(values)
        fmt = (lambda x: f"{x:.0%}") if pct else (lambda x: f"{x:.2f}")
        return fmt(low) if fmt(low) == fmt(high) else f"{fmt(low)}-{fmt(high)}"

    return {
        "h_every": str(HOLD_OUT_EVERY),
        "h_gemm": span("bf16 GEMM"),
        "h_gemm_med": span("bf16 GEMM", field="median_abs_error", pct=True),
        "h_fp8": span("FP8 GEMM"),
        "h_decode": span("decode attention"),
        "h_bw_prefill": span("prefill attention", _BLACKWELL),
        "h_bw_prefill_med": span("prefill attention", _BLACKWELL, "median_abs_error", True),
        "h_hopper_prefill": span("prefill attention", _HOPPER),
    }


def render_markdown(validation: Validation) -> str:
    v = validation
    return _PAGE.format(
        **splitwise_summary(v.splitwise),
        **runs_summary(v.runs),
        **tp_check_summary(v),
        **parts_summary(v.parts),
        **ship_summary(v),
        **facts(v.tp_checks[FITS[0]]),
        profiles=markdown_table(PARAM_HEADER, shipped_param_rows()),
        priced=markdown_table(PRICED_HEADER, priced_rows()),
        held_out=markdown_table(HELD_OUT_HEADER, held_out_rows(v.held_out)),
        **held_out_summary(v.held_out),
        fit_params=markdown_table(PARAM_HEADER, fit_param_rows()),
        forms=markdown_table(FORM_HEADER, form_rows()),
        fp8=markdown_table(FP8_HEADER, fp8_rows()),
        fp8_check=markdown_table(FP8_CROSSCHECK_HEADER, fp8_crosscheck_rows()),
        moe_kernels=markdown_table(MOE_KERNEL_HEADER, moe_kernel_rows()),
        parts=markdown_table(PARTS_HEADER, parts_rows(v.parts)),
        rule=FEW_SHOT_RULE,
        zero=markdown_table(SPLITWISE_HEADER, splitwise_rows(v.splitwise, "zero-shot")),
        few=markdown_table(SPLITWISE_HEADER, splitwise_rows(v.splitwise, "few-shot")),
        bound=markdown_table(SPLITWISE_HEADER, splitwise_rows(v.splitwise, "all-rows")),
        runs=markdown_table(VLLM_HEADER, vllm_rows(v.runs, "zero-shot")),
        runs_rule=RUNS_RULE,
        runs_few=markdown_table(VLLM_HEADER, vllm_rows(v.runs, "few-shot")),
        silicon=markdown_table(SILICON_HEADER, silicon_rows(v.silicon)),
        silicon_v1_tpot=f"{100 * by_concurrency(v.silicon[FITS[0]])[0][4]:.1f}",
        silicon_v1_ttft=f"{100 * by_concurrency(v.silicon[FITS[0]])[0][2]:.1f}",
        silicon_v2_ttft=f"{100 * by_concurrency(v.silicon[FITS[1]])[0][2]:.1f}",
        v1=FIT_LABELS["vidur"], v2=FIT_LABELS["aiconfigurator"],
    ) + AICONFIGURATOR_SECTION


_PAGE = """\
# How far to trust clustersim's step times

<!-- GENERATED by `clustersim validate --write-docs docs/validation.md`; do not edit by hand.
     The prose lives in clustersim/calibration/report.py, the last section's in
     clustersim/calibration/aiconfigurator_section.py. -->

clustersim prices every engine step with a roofline model whose free parameters are **fitted on
kernel profiles only**, and this page scores it on **validation data it never saw**. Two fit
sets are kept and both are scored everywhere below:

- **{v1}** (`clustersim/catalog/calibrated_vidur.yaml`, profile name `vidur`): GEMMs, attention
  and NCCL all-reduces on Vidur's 2023 A100/H100 operator tables, the RTX 4090 and RTX PRO 6000
  Server Edition on LLMServingSim's layer profiles (the latter at TP1 and TP2, with its 2-rank
  NCCL samples over PCIe), plain saturating rooflines.
- **{v2}** (`clustersim/catalog/calibrated_aiconfigurator.yaml`, profile name
  `aiconfigurator`): NVIDIA aiconfigurator's measured kernels of vLLM 0.24 on the H100 SXM,
  H200, B200, B300, GB200, GB300 and L40S and vLLM 0.14 on the A100 SXM (GEMMs in bf16 and FP8,
  prefill and decode attention out to 64K cached tokens, fused MoE, vLLM's custom all-reduce and
  NCCL), each GPU on its own tables, with the forms their residuals support (below); the RTX
  4090 and RTX PRO 6000 refitted on their own profiles in the same forms (the RTX 4090's GEMM
  floor, which its {f_4090_gemm} µs batch-1 GEMMs cannot tell, lent by the L40S, its Ada
  sibling; the RTX PRO 6000's decode attention and fused MoE from its own profile's decode rows
  and Qwen3-30B-A3B MoE table).

The shipped profile (`clustersim/catalog/calibrated.yaml`) is **{v2} on every GPU**, a choice
that reads no validation score (see "Which fit ships"); {v1} stays as a
cross-check, scored beside it everywhere below. GPUs without measurements follow the GPU they
borrow from (RTX PRO 6000 Workstation from the Server Edition; H100 PCIe from the H100 SXM; the
other A100s from the A100 SXM 80GB; the MI300X keeps the uncalibrated defaults, there being no
AMD data; "Which tables price each GPU" lists them all). Any scenario can
name a set: `gpu: h100-sxm@vidur`. The per-step, per-layer and per-request CPU overheads are in
no kernel profile: {v1} keeps BLIS's public fit on H100 vLLM (126 µs/step, 32.1 µs/layer,
4.4 µs/request); {v2} prices the small kernels between the measured ones (norms, Qwen3's
QK-norm, rotary embedding, activation) per architecture on a measured element-wise kernel, and
fits what is left per layer and per request on measured serving runs (126 µs/step, 3 µs/layer,
25 µs/request; see "The calibration rows" below). Every value's
provenance is in the profile files. Reproduce: `clustersim
calibrate --out clustersim/catalog/calibrated.yaml` rewrites the shipped profile (`--fit-set
vidur` / `--fit-set aiconfigurator` with `--out` at `calibrated_vidur.yaml` /
`calibrated_aiconfigurator.yaml` the two sets); `clustersim validate --write-docs
docs/validation.md` rewrites this page.

## The calibration rows: the time outside the kernels

NVIDIA's 45 measured vLLM serving runs (aiconfigurator's silicon rows, which are SemiAnalysis
InferenceX runs: Llama-3.1-70B FP8 on H100 SXM, TP 2, 4 and 8, 4 to 64 closed-loop clients,
shapes 1K/1K, 1K/8K and 8K/1K) are calibration data, not validation: {v2}'s host time per
layer and per running request is within 0.1 point of the best of the grid `python
benchmarks/silicon_calibration.py --fit-host` prints over their mean TPOT. Each row is replayed
with the benchmark client as the recipe ran it (`clustersim/calibration/recipes.py`: one test
request, then 10 x concurrency measured requests at request rate inf, every prompt and answer
drawn uniformly from 0.8 to 1 x the named length) and the API server's defaults:

{silicon}

TPOT holds on {v2}, whose host time is fitted here; {v1} misses these FP8 decode steps by
{silicon_v1_tpot} % (TPOT MAPE). Mean TTFT is within {silicon_v2_ttft} % on {v2} and
{silicon_v1_ttft} % on {v1} (MAPE): with the lengths drawn, the clients spread after the cold
first round as the measured ones did; with every prompt and answer the named length they keep
that round's cohorts (docs/benchmarks.md shows that replay).

## Calibrated parameters, as shipped

{profiles}

A GEMM of M rows costs `floor + max((M + t_half) x FLOPs / (eff_c x peak), bytes / (eff_m x
bandwidth))`; prefill attention `(pairs + K_half x queries) x 4 h_q d / (eff_attn x peak)` (its
efficiency `eff_attn x K / (K + K_half)` at K keys per query), decode attention `Σ (c + 1 +
c_half) x KV bytes per token / (eff_kv x bandwidth)` over the decoding sequences (KV at `eff_m`
where `eff_kv` is `-`), and the attention kernel its floor once per layer and step; a TP
all-reduce on vLLM's measured curve where the profile has one for the group's size (the line
between the measured sizes around the message), else `α + 2(n-1)/n x bytes / (efficiency x
link bandwidth)`, on vLLM's custom all-reduce fit below its size limit and on NCCL's above
(`clustersim/cost/collectives.py`), an all-gather
(reduce-scatter) `α + (n-1) x bytes per rank / (efficiency x link bandwidth)`; a fused-MoE layer
prices its experts on its own fit, its floor once per layer; each small kernel of the
architecture (norms, Qwen3's QK-norm, rotary embedding, activation, embedding gather:
`clustersim/cost/small_kernels.py`) `floor + bytes per token x max(cta, tokens / (eff x
bandwidth))` per call, fitted on vLLM's element-wise FP8 quantization kernel as aiconfigurator
measured it on the H100, H200 and the four Blackwell GPUs (CUDA graphs) and on the RTX 4090's
and RTX PRO 6000's layer profiles (their GEMM fit's `eff_m`), and the sampler 2.7 float32 passes
over each sampled row's logits at the same efficiency.

## Which tables price each GPU

Each GPU's profile and the kernel tables it was fitted on, under
`clustersim/data/calibration/fit/` (their sources and checksums are in the README there); what a
profile takes from another GPU is in the last column. The H200 and the Blackwell GPUs are priced
from their own aiconfigurator tables, no longer from the H100's scaled by their peaks; the
GB200's and GB300's collectives tables stop at the 4 GPUs of a compute tray, and so does the
link their catalog entries give them (the NVL72 rack's 72-GPU NVLink domain is not modelled
yet):

{priced}

### How far the fits hold between measured sizes

Every fit above is refitted on its table without every {h_every}th token count, in rising order
(GEMM M, prefill prompt length, decode context), and scored on the rows held out
(`clustersim.calibration.holdout`; calibration data, none of the validation sets below). The
held-out error is what pricing a shape between the measured ones may miss by; the last column is
the shipped fit's error on every row it was fitted on:

{held_out}

Held out, the 16-bit GEMM fits miss by {h_gemm} rms log error ({h_gemm_med} median) and FP8
GEMMs by {h_fp8}; decode attention by {h_decode}. Prefill attention is the loosest form on the
Blackwell GPUs ({h_bw_prefill} rms log error held out, {h_bw_prefill_med} median, against
{h_hopper_prefill} on the H100 and H200): TensorRT-LLM's prefill kernel departs further from
one efficiency saturating in the keys per query than FlashAttention 3 does.

## What changed, and why

The two sets, GPU by GPU:

{fit_params}

Each new term was kept because the table it was fitted on says so: the rms log error of
{v2}'s form beside the same table fitted without the term ({v1}'s form):

{forms}

- **GEMMs: a per-call floor.** A plain saturating roofline has to price small-M GEMMs (the
  weight streaming of every decode step) with one bandwidth efficiency for all sizes; the
  aiconfigurator tables show a floor instead: a 1024 x 1024 bf16 GEMM takes {f_small_us} µs on
  the H100 at every M up to 256 (its weights need {f_small_need_us} µs at the datasheet
  bandwidth), a 4096 x 4096 one {f_big_us} µs at M = 1 (its weights: {f_big_need_us} µs). With
  the floor the weight read runs at {f_eff_m_v2} of the datasheet bandwidth where fit-v1 priced
  it at {f_eff_m_v1}, and `t_half` comes out at {f_halves} tokens. The L40S table is noisier
  (kernel selection jumps between neighbouring M) and shows no floor; its compute
  efficiency is **{f_l40s_v2}** of the 362 TFLOPS datasheet peak, where fit-v1 lent it the RTX
  4090's {f_l40s_v1}: L40S 16-bit prices were too fast.
- **FP8 GEMMs** get the same form on the same tables (the H100's floor, {f_fp8_floor} µs, is
  the dynamic activation-quantization kernel before each scaled_mm).
- **Prefill attention by keys per query.** One efficiency over causal query-key pairs misses
  the tables badly (rms log error {f_flat_rms}): short prompts are floor-bound, and FlashAttention's
  efficiency rises with the keys each query attends to (H100 FA3, 32 query heads: {f_attn_2048}
  of peak at 2,048-token prompts, {f_attn_long} at 8-16K). `eff x K / (K + K_half)` makes the
  cost of a chunk of s queries `(pairs + K_half x s)` pairs at the saturated efficiency, a
  linear term.
- **Decode attention by context.** The KV read at its own efficiency plus `c_half` tokens per
  sequence (what many short sequences cost beyond their bytes), fitted on the rows whose KV is at
  least 128 MiB: below the L2 cache the benchmark's repeated calls read cached KV (L40S rows
  there run at up to {f_cache_speed}x its DRAM bandwidth), which a serving step, reading each
  layer's KV once, does not. The H100's fitted rows reach {f_fitted_ctx} tokens of context.
- **vLLM's custom all-reduce beside NCCL.** vLLM runs its own peer-to-peer all-reduce below
  8 MiB (`CustomAllreduce(max_size=8192 * 1024)`, strict `<`; on Hopper and Blackwell with
  symmetric memory, on by default, lower at TP6/TP8: 512/256 KiB on the H100) for 2, 4, 6 or 8
  GPUs on NVLink (or two with working P2P), NCCL above. The measured vLLM all-reduce is NCCL's
  above the limit (A100 TP2, 8 MiB: {f_a100_8mib_vllm} µs against NCCL's {f_a100_8mib_nccl})
  and faster below it (H100 TP8, 2 KiB: {f_h100_small_vllm} µs against
  {f_h100_small_nccl}, {f_ar_ratio}x). The custom all-reduce was measured on NVLink only, so a
  PCIe pair (the RTX PRO 6000) stays on its NCCL samples.
- **vLLM's all-reduce as a measured curve.** Where the table times vLLM's own all-reduce at the
  group's size (2, 4 and 8 GPUs on NVLink: the H100 and A100 SXM, and the GPUs on their links),
  the profile keeps it as a curve (`allreduce_curves`, each size's median, or a larger size's
  where that is faster) and prices every message on it, custom, symmetric-memory and NCCL
  ranges alike. One latency and bus bandwidth over 2, 4 and 8 GPUs cannot follow it: at 8
  H100s the NCCL fit prices 128 MiB (an 8K-token chunk of an 8192-wide model) at
  {f_h100_128_fit} ms against {f_h100_128_vllm} measured. The fits price the world sizes and
  links without a curve (a TP6 group, a PCIe pair), and a group whose topology link is slower
  than the GPU's own.
- **Fused MoE.** vLLM's Triton fused-MoE kernel is not a dense GEMM: on the H100 table its
  compute runs at {f_moe_h100} of peak (the dense GEMMs' {f_dense_h100}) with a
  {f_moe_h100_floor} µs floor per layer, and on the RTX PRO 6000's own Qwen3-30B-A3B table at
  {f_moe_pro} (its dense GEMMs' {f_dense_pro}) with {f_moe_pro_floor} µs; its weight streaming is
  near the dense GEMMs' (on the RTX PRO 6000 the fit puts it at its bound, {f_moe_pro_eff_m}
  of the bandwidth). On the H100 SXM, H200 and the Blackwell GPUs every format's fused-MoE
  kernel is measured (below, "Fused-MoE kernels by format"), and a MoE layer is priced on the
  measured curve of its shape and split; the fit prices the rest.

## Which fit ships

{v2}, on every GPU, for reasons that read no validation file: on the H100, A100 and L40S its
tables are the newer measurements of the engine clustersim models (vLLM 0.24 and 0.14 kernels,
against Vidur's 2023 ones), and on every GPU, the RTX 4090 and RTX PRO 6000 refitted on the same
layer profiles as {v1}, its forms fit each calibration table no worse than {v1}'s form, most of
them far better (the table above). Choosing per GPU by the scores below would make them a fit on
the validation data, and they would no longer say how far to trust the model; they are reported
instead. The score per GPU ({ship_rule}):

{ship_table}

On these scores {v1} does better on {better_v1}, {v2} on {better_v2}. The kernel-level fits say
{v2} is closer to today's kernels on every GPU; the end-to-end runs say that closer kernels
alone do not make a closer step (see "Where the model is worse"). A scenario that prefers
{v1} names it: `gpu: rtx-pro-6000-server@vidur`.

### Quantized GEMMs

FP8 W8A8 GEMMs are priced at the FP8 peak with their own fit on NVIDIA aiconfigurator's
measured vLLM 0.24 FP8 GEMMs (per-tensor CUTLASS scaled_mm with dynamic activation scales;
shapes at least 2,048 wide, where the 1,024-wide ones run slower than BF16 at every size), the
same form as the GPU's 16-bit fit (a floor in {v2}, none in {v1}); the BF16 column is the same
table's 16-bit fit. GPUs without measurements borrow (the RTX 4090 and RTX PRO 6000 the L40S's):

{fp8}

No FP8 or 4-bit serving run is among the validation data, so nothing on this page scores a
quantized price end to end. A cross-check against another engine: TensorRT-LLM's published
batch-1 FP8 time to first token (v0.5/v0.6.1, hardware_and_roofline.md section 5.1) beside the
FP8 prefill step clustersim prices for the same prompt (vLLM's kernels, not TensorRT-LLM's):

{fp8_check}

### Fused-MoE kernels by format

A MoE layer's routed experts run the fused-MoE kernel vLLM picks for their format and split
(clustersim/cost/moe.py, docs/how-it-works.md "MoE experts"), measured on the H100 SXM, H200,
B200, B300, GB200 and GB300 by NVIDIA aiconfigurator (vLLM 0.24.0, power-law routing; on the
Blackwell GPUs vLLM runs FlashInfer's TensorRT-LLM experts for every format but INT4). Each
kernel keeps the measured curve of every catalog expert shape and split (27 token counts each, 1
to 16,384), which prices those layers as measured, and a fit over its one-node rows, which
prices the shapes and splits the table lacks (the rms log error is that fit's over those rows;
the H100 PCIe borrows the H100 SXM's fits without its curves):

{moe_kernels}

The dense 4-bit (AWQ, GPTQ) and FP8-on-Ampere kernels have no measured table here at all: they are
the roofline of the bytes they stream (codes, scales, zero points) at the 16-bit fit's memory
efficiency, with their compute at the 16-bit peak slowed by one cited ratio,
`weight_only_compute_ratio` = 0.82 (gpus.yaml, published values 0.60-0.90); INT8 W8A8 borrows
the FP8 fit at the INT8 peak, NVFP4 on Blackwell the FP8 fit at the FP4 peak. Read those prices
as estimates within tens of percent.

The validation data: Splitwise's measured DGX-A100/H100 prefill and per-token times (2023
vLLM-based stack) and four real vLLM 0.19 serving runs; a test checks that the calibration opens
no validation file. Errors are `(simulated - measured) / measured`: MAPE is the mean of their
absolute values, bias their signed mean (negative: clustersim is too optimistic).

## Splitwise: step times on DGX-A100 / DGX-H100

Each (model, hardware, TP) group has 19 distinct measured points (median of 5 repeats): prompts
of 128-8192 tokens at batch 1, batches of 1-64 prompts of 512 tokens, outputs of 128-8192
tokens. `n` counts the rows scored.
Prefill rows are priced as one step of `batch` prompt chunks; per-token rows as one decode step
at the mean context `prompt + output / 2`. Prefill rows faster than the GPUs' datasheet peak
FLOPs could run them are measurement artefacts and are not scored (one row: llama2-70b A100 TP2
batch 64, 32,768 prompt tokens in 0.79 s). `h100-80gb-pcap` is a power-capped H100, priced as
an H100 SXM.

### Zero-shot (calibrated profiles only)

{zero}

### Few-shot

Rule: {rule}. From those three points the per-step overhead, the per-request overhead and the
compute efficiency (GEMMs and attention together) are refitted; where the decodes are faster
than the kernel fit's weight read leaves room for (the per-step overhead would come out
negative), the memory efficiency is refitted in its place and the overhead is 0. Kernel floors
stay as fitted. Everything else keeps the calibrated profile; the table scores all the other
rows.

{few}

### The same fit on every row: what the model's shape allows

The same few-shot parameters (per-step overhead or memory efficiency, per-request overhead,
compute efficiency) fitted on all rows of each group at once (least squares on relative errors)
and scored on those rows. It is a reference rather than a strict bound (it minimises squared
relative errors, not MAPE, on the rows it scores): where it stays well above 10 %, no choice of
three points brings this model there; the gap between it and the few-shot table is what the
rule's choice of points costs.

{bound}

## Real vLLM 0.19 serving runs (LLMServingSim)

Each run's 300 ShareGPT requests are replayed at their measured arrival times with the run's
engine arguments (`max_num_seqs`, `max_num_batched_tokens`, `max_model_len`, prefix caching)
and, where vLLM's log recorded it, its KV size (RTX 4090: 2,588 blocks); the RTX PRO 6000
(Server Edition) runs did not record it, so vLLM's default `gpu_memory_utilization` 0.9 and
clustersim's memory model size the KV cache. Qwen3-30B-A3B ran as `data_parallel_size: 2` with
expert parallelism and is replayed so: two engine ranks behind vLLM's DP load balancer, stepping
together, each GPU holding 64 of the 128 experts, the ranks' tokens all-gathered and
reduce-scattered around every MoE layer over PCIe. The columns give the signed error of the
simulated mean, p50, p90 and p99; MAPE and bias are over those four statistics.

### Zero-shot

{runs}

### Few-shot

Rule: {runs_rule}. These are numbers an operator has without instrumenting anything: one
request's TTFT on a quiet server and vLLM's periodic "Running: N reqs ... Avg generation
throughput: X tokens/s" log line. The same parameters as for Splitwise are refitted on them
and the whole run is replayed again.
The same fit from your own numbers: `clustersim calibrate --gpu G --model M --tp N --prefill
TOKENS=SECONDS --decode BATCH@CONTEXT=SECONDS --out mine.yaml` (or `--from-requests FILE`,
which picks the three measurements from a run's per-request timestamps: vLLM request records
as JSON lines, or the result of `vllm bench serve --save-result --save-detailed`), then
`gpu: G@mine.yaml` in a scenario; a data-parallel MoE deployment adds `--dp N
--expert-parallel`, its decode batches being one rank's.

{runs_few}

### Cross-check: Qwen3-32B TP2 decode steps from their own kernels

Calibration data only, nothing fitted: each row sums, for one decode step (ms), LLMServingSim's
RTX PRO 6000 profile of one TP2 rank of Qwen3-32B (vLLM 0.28, eager, CUDA events around each op
of one decoder layer, x 64 layers; the layer's two RMSNorms counted twice) and the 2-rank NCCL
samples (129 all-reduces of the hidden states, the logits all-gather), next to each fit's GPU
time for the same step (its price less the CPU overhead) and its full price. clustersim's
all-reduce cost is fitted on the same NCCL samples, so that part agrees by construction; the
profile's `qk_norm` rows are its TP1 values at the commit shipped (slightly high).

{tp_table}

## The two misses, part by part

fit-v1 left two misses: the zero-shot Qwen3-32B TP2 run on the RTX PRO 6000 (TPOT
{p_tp2_tpot_v1} % on the mean, too fast) and the Qwen3-30B-A3B run's TTFT (mean
{p_moe_ttft_v1} %). Each row below is fit-v1 with one part of fit-v2 swapped in (the fields it
sets, from fit-v2's profile of the same GPU), then fit-v2 whole; the Splitwise columns show the
same swaps on the A100 and H100 (mean MAPE over their groups):

{parts}

- **Qwen3-32B TP2 (TPOT {p_tp2_tpot_v1} % under fit-v1, {p_tp2_tpot_v2} % under fit-v2).** No
  new part closes it, and the GEMM refit widens it ({p_tp2_tpot_gemm} %): on its own profile the
  RTX PRO 6000's GEMMs stream weights at {f_pro_eff_m_v2} of its bandwidth plus a
  {f_pro_floor_v2} µs floor, where fit-v1's floorless compromise priced them at
  {f_pro_eff_m_v1}; decode attention by context, on its own decode rows ({f_pro_eff_kv} of the
  bandwidth, {p_tp2_tpot_decode} %), and prefill attention ({p_tp2_tpot_prefill} %)
  move it little. The all-reduce switch does nothing here ({p_tp2_tpot_comm} %): vLLM would run
  its custom all-reduce on this P2P-capable PCIe pair, but it was measured on NVLink only, so the
  TP2 all-reduces stay on the card's own NCCL samples. The cross-check above is the reason: the
  kernels the step is made of, profiled on this GPU, sum to {tp_profile} ms at {tp_batch} x
  {tp_context} tokens of context, fit-v1 spends {tp_sim_v1} ms of GPU time there and fit-v2
  {tp_sim_v2} ms, while vLLM's log shows {tp_log} ms steps. The step is slower than its kernels
  in isolation, by more than any kernel fit can hold.
- **Qwen3-30B-A3B TTFT ({p_moe_ttft_v1} % under fit-v1, {p_moe_ttft_v2} % under fit-v2).** The
  fused-MoE fit prices prefill experts {f_moe_slower}x slower than the dense GEMMs did, yet the
  run's TTFT gets no closer ({p_moe_ttft_fused} %, TPOT {p_moe_tpot_fused} %): the same table
  streams expert weights at {f_moe_pro_eff_m} of the card's bandwidth, so decode steps get
  faster and the queue drains sooner.
  This run's TTFT is queueing (mean {moe_ttft} s, median {moe_ttft_p50} s: a burst once 256
  requests run at the end of the arrivals), and it follows the decode pace more than any prefill
  price; the GEMM refit ({p_moe_ttft_gemm} %) and prefill attention ({p_moe_ttft_prefill} %) act
  through the same queue.

## Where the model is worse, and why

- **Closer kernels are not a closer step (the RTX PRO 6000).** With its own kernels fitted more
  closely, fit-v2 prices the RTX PRO 6000's Llama-3.1-8B run {z_pro_llama_tpot_v2} % on TPOT and
  {z_pro_llama_ttft_v2} % on TTFT (fit-v1: {z_pro_llama_tpot_v1} % and
  {z_pro_llama_ttft_v1} %), and the Qwen3-32B TP2 run {z_qwen_tpot_v2} % optimistic on TPOT
  (fit-v1: {z_qwen_tpot_v1} %). The profiles are eager single-op timings; the serving steps add
  the two workers' per-step synchronisation at TP2, which no profile holds (the elementwise
  kernels, norms, rotary and SiLU, {f_elementwise} ms a step in the cross-check, are priced per
  architecture in both fits). fit-v1's lower bandwidth
  efficiency happened to absorb part of that on this card; fit-v2 ships there all the same
  (see "Which fit ships"), and this is its largest regression.
  The RTX 4090 run is within {z_4090_v1} % on every statistic on fit-v1 ({z_4090_v2} % on
  fit-v2).
- **Old stacks, zero-shot.** Splitwise's 2023 vLLM spends 43-73 ms per token for Llama-2-70B at
  TP8 where the kernels need ~22 ms: fixed Python/launch overhead per step and per request that
  no kernel profile contains and that a V1-era overhead default (0.13 ms/step) cannot know.
  Zero-shot decode MAPE is therefore {zero_decode_v1} on fit-v1 and {zero_decode_v2} on fit-v2,
  worst at TP4/TP8; fit-v2 is further off because today's kernels are faster than 2023's and its
  custom all-reduce removes most of NCCL's per-call latency at TP8, neither of which that stack
  had. Three measurements fix the decode: few-shot decode MAPE is {few_decode_v1} on fit-v1,
  {few_decode_v2} on fit-v2.
- **Batched and long prefills on the old stack, even few-shot.** Splitwise's prefill time per
  token rises once a step holds more than ~2,048 tokens, whether they come as one prompt or as a
  batch of 512-token prompts (Llama-2-70B, A100 TP8: 0.13 ms a token at 2,048, 0.19 at 8,192; 16
  x 512 tokens take 2.08 s against 1.55 s for one 8,192-token prompt), most at TP8 and least at
  TP2. A roofline whose efficiencies only grow with the tokens cannot bend that way: few-shot
  prefill MAPE is {few_prefill_v1} on fit-v1 and **{few_prefill_v2}** on fit-v2, and fitting the
  same parameters on all of a group's rows at once still leaves {bound_prefill_v1} (fit-v1) and
  {bound_prefill_v2} (fit-v2): the miss is mostly the model's shape. fit-v2's prefill shape is
  closer on the H100 (its attention efficiency grows with the prompt, as FlashAttention's does).
  Zero-shot prefill MAPE is {zero_prefill_v1} (fit-v1) and
  {zero_prefill_v2} (fit-v2), optimistic in every group: kernel tables leave out the old stack's
  per-layer host overhead, which grows with TP degree. fit-v2's host time is fitted on vLLM
  V1 serving runs (3 us a layer beside the small kernels' own GPU time, where CUDA graphs
  replay the decode step's launches, and 25 us a running request; `python
  benchmarks/silicon_calibration.py --fit-host`), so this eager 2023 stack's per-layer launches
  are in neither fit-v2's host time nor its kernels. The all-reduce's measured
  curve takes these groups up to about 3 points further off (most in the A100 TP8 few-shot
  prefill): it prices large messages at what vLLM and nccl-tests measure (8 A100s, 128 MiB:
  {f_a100_128_vllm} ms), where NCCL's one fit over 2, 4 and 8 GPUs said {f_a100_128_fit} ms, so
  a TP8 prefill comes out shorter, and that overpricing had been covering part of the old
  stack's slower prefill, which the model's shape does not follow.
- **Mixture of experts with data parallelism.** Qwen3-30B-A3B (DP2 x EP) is {z_moe_tpot_v1} %
  optimistic on TPOT on fit-v1 ({z_moe_tpot_v2} % on fit-v2). The replay's decode-only steps at
  saturation (256 running) keep vLLM's pace; the ramp-up steps, where prompt chunks on one rank
  pad the other rank's batch, run faster than vLLM's, so requests finish early and fewer run at
  once on the way down. The all-gathers and reduce-scatters around every MoE layer are priced
  from their own NCCL samples. TTFT is short in this run (mean {moe_ttft} s), and the simulated
  burst is shallower: mean {moe_sim_ttft_v1} s (fit-v1), {moe_sim_ttft_v2} s (fit-v2).
- **Few-shot is as good as its three numbers.** On {few_best_run} the rule's numbers come
  closest on fit-v1 (every statistic within {few_best_pct} %). Elsewhere the rule's numbers are
  not clean step times: these runs are at 10 req/s from the first second, so the first request
  shares its prefill with the next arrivals (RTX 4090: 0.69 s for a 2,358-token prompt the
  kernel profile prices at ~0.25 s, a cold start too), and a log line's running count is read at
  the end of the interval its throughput averages over (RTX PRO 6000 Llama-3.1-8B: "1 running"
  at 8.5 ms a token, faster than its weights can be read). The fit then concludes the GPU
  computes too slowly ({few_other_ttft} mean TTFT on fit-v1). Measurements of a warm, idle server
  do not have this problem; the rule was fixed before the runs were scored and is left as it
  is, not tuned to them.
- **What the serving replay does not model:** API-server time (tokenisation, detokenisation,
  HTTP), which vLLM's timestamps partly include; the L2 cache, which serves an element-wise
  kernel's input when it fits (the small kernels are priced at DRAM bandwidth: up to about 1.5x
  slow between 8 and 32 MB on the H100's table); CUDA-graph padding of decode batches (except
  across data-parallel ranks); vLLM's
  symmetric-memory all-reduce range where no curve was measured (priced as NCCL); the RTX PRO
  6000 KV size, which vLLM did
  not log and clustersim's memory model estimates.
"""
