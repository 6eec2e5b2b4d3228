"""Error tables of ``clustersim validate`` as plain text and as the docs page (Markdown)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from clustersim.calibration.splitwise import FEW_SHOT_RULE, GroupScore
from clustersim.calibration.tp_check import CHECK_HEADER, check_rows, decode_step_checks
from clustersim.calibration.vllm_runs import FEW_SHOT_RULE as RUNS_RULE
from clustersim.calibration.vllm_runs import METRICS, STATS, RunScore, full_decode_step_ms

_METRIC_NAMES = {"ttft_s": "TTFT", "tpot_s": "TPOT", "e2e_s": "E2E"}


def splitwise_rows(scores: Sequence[GroupScore], mode: str) -> list[list[str]]:
    rows = []
    for s in scores:
        if s.mode != mode:
            continue
        rows.append([
            s.model, s.hardware, str(s.tp),
            f"{s.prefill_mape:.1f}", f"{s.prefill_bias:+.1f}", str(s.num_prefill),
            f"{s.decode_mape:.1f}", f"{s.decode_bias:+.1f}", str(s.num_decode),
        ])
    return rows


SPLITWISE_HEADER = ["model", "hardware", "TP", "prefill MAPE %", "prefill bias %", "n",
                    "decode MAPE %", "decode bias %", "n"]
VLLM_HEADER = ["run", "metric", "vLLM mean", "sim mean", "mean %", "p50 %", "p90 %", "p99 %",
               "MAPE %", "bias %"]


def vllm_rows(scores: Sequence[RunScore], mode: str) -> list[list[str]]:
    rows = []
    for s in scores:
        if s.mode != mode:
            continue
        for metric in METRICS:
            errs = [s.error_pct(metric, stat) for stat in STATS]
            unit = 1e3 if metric == "tpot_s" else 1.0
            suffix = " ms" if metric == "tpot_s" else " s"
            rows.append([
                s.run, _METRIC_NAMES[metric],
                f"{s.measured[metric]['mean'] * unit:.1f}{suffix}",
                f"{s.simulated[metric]['mean'] * unit:.1f}{suffix}",
                *(f"{e:+.1f}" for e in errs),
                f"{sum(abs(e) for e in errs) / len(errs):.1f}",
                f"{sum(errs) / len(errs):+.1f}",
            ])
    return rows


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


def render_text(splitwise: Sequence[GroupScore], runs: Sequence[RunScore]) -> str:
    return "\n\n".join([
        "Splitwise perf_model.csv, zero-shot (shipped calibration only)",
        text_table(SPLITWISE_HEADER, splitwise_rows(splitwise, "zero-shot")),
        f"Splitwise perf_model.csv, few-shot ({FEW_SHOT_RULE}; scored on the other rows)",
        text_table(SPLITWISE_HEADER, splitwise_rows(splitwise, "few-shot")),
        "Splitwise perf_model.csv, the same three parameters fitted on all rows of each group "
        "(a reference for what the model's shape allows)",
        text_table(SPLITWISE_HEADER, splitwise_rows(splitwise, "all-rows")),
        "vLLM 0.19 serving runs, zero-shot (engine args + KV size from the meta file); "
        "signed error % of the simulated statistic",
        text_table(VLLM_HEADER, vllm_rows(runs, "zero-shot")),
        f"vLLM 0.19 serving runs, few-shot ({RUNS_RULE})",
        text_table(VLLM_HEADER, vllm_rows(runs, "few-shot")),
        "cross-check (calibration data only): Qwen3-32B TP2 decode steps on the RTX PRO 6000 "
        "summed from their own kernel profile and NCCL samples vs clustersim's GPU time and "
        "price, ms",
        text_table(CHECK_HEADER, check_rows(decode_step_checks())),
    ])


def profile_rows() -> list[list[str]]:
    from clustersim.catalog import load_profiles

    rows = []
    for gpu_id, p in load_profiles().items():
        alpha = p.get("allreduce_latency_s")
        gathers = [
            "-" if p.get(f"{kind}_latency_s") is None else
            f"{p[f'{kind}_latency_s'] * 1e6:.1f} / {p[f'{kind}_link_efficiency']}"
            for kind in ("allgather", "reduce_scatter")
        ]
        rows.append([
            gpu_id, f"{p['compute_efficiency']:.2f}", f"{p['compute_half_tokens']:.0f}",
            f"{p['memory_efficiency']:.2f}", f"{p['attention_efficiency']:.2f}",
            "-" if alpha is None else f"{alpha * 1e6:.1f}", str(p.get("link_efficiency", "-")),
            *gathers, p["calibration"],
        ])
    return rows


def fp8_rows() -> list[list[str]]:
    """One row per GPU with an FP8 GEMM fit: its values, and the measured fit's errors and the
    same table's BF16 fit (or the GPU it borrows from)."""
    from clustersim.catalog import load_profiles

    rows = []
    for gpu_id, p in load_profiles().items():
        fit = p.get("fp8_gemm")
        if fit is None:
            continue
        own = p["provenance"].get("fp8", {})
        measured, bf16 = own.get("fp8_gemm"), own.get("bf16_same_table")
        rows.append([
            gpu_id, f"{fit['compute_efficiency']:.2f}", f"{fit['compute_half_tokens']:.0f}",
            f"{fit['memory_efficiency']:.2f}",
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


FP8_CROSSCHECK_HEADER = ["model", "GPU", "prompt tokens", "TensorRT-LLM FP8 TTFT (ms)",
                         "clustersim FP8 prefill step (ms)", "difference"]

FP8_HEADER = ["GPU", "FP8 eff_c", "t_half (tokens)", "FP8 eff_m", "rms log error", "rows",
              "same-table BF16 eff_c / eff_m / rms", "calibration"]


PROFILE_HEADER = ["GPU", "eff_c", "t_half (tokens)", "eff_m", "eff_attn", "all-reduce α (µs)",
                  "link eff", "all-gather α (µs) / eff", "reduce-scatter α (µs) / eff",
                  "calibration"]


_TARGET_PCT = 10.0


def _span(values: Sequence[float]) -> str:
    return f"{min(values):.1f}-{max(values):.1f} %" if values else "n/a"


def splitwise_summary(scores: Sequence[GroupScore]) -> dict[str, str]:
    """The prose's figures, from the scores (so the page cannot drift from its tables)."""
    few = [s for s in scores if s.mode == "few-shot"]
    bound = [s for s in scores if s.mode == "all-rows"]
    decode = [s.decode_mape for s in few]
    worst = max(few, key=lambda s: s.decode_mape, default=None)
    within = sum(v <= _TARGET_PCT for v in decode)
    if worst is None:
        few_decode = "n/a"
    elif within == len(decode):
        few_decode = f"{_span(decode)} in every group"
    else:
        few_decode = (f"{_span(decode)}, within {_TARGET_PCT:.0f} % in {within} of {len(decode)} "
                      f"groups (worst: {worst.model} {worst.hardware} TP{worst.tp})")
    prefill = [s.prefill_mape for s in few]
    above = sum(v > _TARGET_PCT for v in prefill)
    return {
        "few_decode": few_decode,
        "few_prefill": f"{_span(prefill)}, above the {_TARGET_PCT:.0f} % target in {above} of "
                       f"{len(prefill)} groups",
        "bound_prefill": _span([s.prefill_mape for s in bound]),
    }


_MOE_RUN = "RTXPRO6000_Qwen3-30B-A3B-Instruct-2507"


def _zero_shot_errors(runs: Sequence[RunScore], run: str,
                      metrics: Sequence[str] = METRICS) -> list[float]:
    """|error| (%) of every statistic of ``run``'s zero-shot ``metrics`` (empty if not scored)."""
    return [abs(r.error_pct(m, st)) for r in runs if r.run == run and r.mode == "zero-shot"
            for m in metrics for st in STATS]


def zero_shot_summary(runs: Sequence[RunScore]) -> dict[str, str]:
    def worst(run: str) -> str:  # one decimal
        errs = _zero_shot_errors(runs, run)
        return f"{max(errs):.1f}" if errs else "n/a"

    def span(run: str, metric: str) -> str:  # whole percents around the range
        errs = _zero_shot_errors(runs, run, [metric])
        return f"{math.floor(min(errs))}-{math.ceil(max(errs))}" if errs else "n/a"

    moe = next((r for r in runs if r.run == _MOE_RUN and r.mode == "zero-shot"), None)
    return {
        "z_4090": worst("RTX4090_Llama-3.1-8B"),
        "z_pro_llama": worst("RTXPRO6000_Llama-3.1-8B"),
        "z_qwen_tpot": span("RTXPRO6000_Qwen3-32B", "tpot_s"),
        "z_qwen_ttft": span("RTXPRO6000_Qwen3-32B", "ttft_s"),
        "z_moe_tpot": span(_MOE_RUN, "tpot_s"),
        "moe_ttft": "n/a" if moe is None else f"{moe.measured['ttft_s']['mean']:.2f}",
        "moe_ttft_p50": "n/a" if moe is None else f"{moe.measured['ttft_s']['p50']:.2f}",
        "moe_sim_ttft": "n/a" if moe is None else f"{moe.simulated['ttft_s']['mean']:.2f}",
    }


def runs_summary(runs: Sequence[RunScore]) -> dict[str, str]:
    """Few-shot serving figures for the prose: the best run's largest error, and the mean TTFT
    error range of the runs whose few-shot numbers are not clean step times."""
    few = [r for r in runs if r.mode == "few-shot"]
    worst_abs = {r.run: max(abs(r.error_pct(m, st)) for m in METRICS for st in STATS)
                 for r in few}
    best = min(worst_abs, key=worst_abs.__getitem__, default=None)
    others = [r.error_pct("ttft_s", "mean") for r in few if r.run != best]
    return {
        "few_best_run": best or "n/a",
        "few_best_pct": f"{worst_abs[best]:.0f}" if best else "n/a",
        "few_other_ttft": (f"{min(others):+.0f} % to {max(others):+.0f} %" if others else "n/a"),
    }


TP_CHECK_RUN = "RTXPRO6000_Qwen3-32B"


def tp_check_summary() -> dict[str, str]:
    checks = decode_step_checks()
    full = max(checks, key=lambda c: c.batch)
    log = full_decode_step_ms(TP_CHECK_RUN)
    return {
        "tp_table": markdown_table(CHECK_HEADER, check_rows(checks)),
        "tp_batch": str(full.batch),
        "tp_context": f"{full.context:,}",
        "tp_profile": f"{full.profile_ms:.1f}",
        "tp_sim": f"{full.clustersim_ms:.1f}",
        "tp_sim_total": f"{full.clustersim_total_ms:.1f}",
        "tp_log": f"{min(log):.1f}-{max(log):.1f}" if log else "n/a",
        "tp_log_steps": f"{1e3 / max(log):.0f}-{1e3 / min(log):.0f}" if log else "n/a",
    }


def render_markdown(splitwise: Sequence[GroupScore], runs: Sequence[RunScore]) -> str:
    return _PAGE.format(
        **splitwise_summary(splitwise),
        **runs_summary(runs),
        **zero_shot_summary(runs),
        **tp_check_summary(),
        profiles=markdown_table(PROFILE_HEADER, profile_rows()),
        fp8=markdown_table(FP8_HEADER, fp8_rows()),
        fp8_check=markdown_table(FP8_CROSSCHECK_HEADER, fp8_crosscheck_rows()),
        rule=FEW_SHOT_RULE,
        zero=markdown_table(SPLITWISE_HEADER, splitwise_rows(splitwise, "zero-shot")),
        few=markdown_table(SPLITWISE_HEADER, splitwise_rows(splitwise, "few-shot")),
        bound=markdown_table(SPLITWISE_HEADER, splitwise_rows(splitwise, "all-rows")),
        runs=markdown_table(VLLM_HEADER, vllm_rows(runs, "zero-shot")),
        runs_rule=RUNS_RULE,
        runs_few=markdown_table(VLLM_HEADER, vllm_rows(runs, "few-shot")),
    )


_PAGE = """\
# How far to trust clustersim's step times

<!-- GENERATED by `clustersim validate --write-docs docs/validation.md`; do not edit by hand.
     The prose lives in clustersim/calibration/report.py. -->

clustersim prices every engine step with a roofline model whose free parameters (GEMM compute
and memory efficiency as a function of the number of tokens, attention efficiency, latency and
bandwidth of all-reduces, and of all-gathers and reduce-scatters where measured) are **fitted on
kernel profiles only**: Vidur's A100/H100 operator and NCCL tables, RTX 4090 and RTX PRO 6000
Server Edition layer profiles (the latter at TP1 and TP2) and the RTX PRO 6000's 2-rank NCCL
samples over PCIe (`clustersim calibrate`, data and licenses under
`clustersim/data/calibration/fit/`; a Qwen3-32B TP2 profile there serves a cross-check only).
The per-step, per-layer and per-request CPU overheads are not in any kernel profile: they are
BLIS's public fit on H100 vLLM (126 µs/step, 32.1 µs/layer, 4.4 µs/request). GPUs without
measurements borrow the nearest measured GPU's fit (L40S from the RTX 4090, the RTX PRO 6000
Workstation Edition from the Server Edition, H200/B200/H100 PCIe from the H100 SXM, the other
A100s from the A100 SXM 80GB; the MI300X keeps the uncalibrated defaults, there being no AMD
data); `clustersim/catalog/calibrated.yaml` records the provenance of every value.

## Calibrated parameters (`clustersim/catalog/calibrated.yaml`)

{profiles}

`eff_c x tokens / (tokens + t_half)` is a GEMM's compute efficiency at `tokens` rows; the
all-reduce costs `α + 2(n-1)/n x bytes / (link efficiency x link bandwidth)`, an all-gather
(reduce-scatter) `α + (n-1) x bytes per rank / (efficiency x link bandwidth)` with its own α
and efficiency where measured (else the all-reduce's; its α is charged once whatever n). One memory
efficiency serves every GEMM size: it is the best fit over 1-4096 tokens, so it prices a
batch-1 weight read lower than the largest single GEMMs reach (H100: 63 % vs 84 % of peak).
Reproduce: `clustersim calibrate --out clustersim/catalog/calibrated.yaml` rewrites the
profile; `clustersim validate --write-docs
docs/validation.md` rewrites this page (a few seconds each).

### Quantized GEMMs

FP8 W8A8 GEMMs are priced at the FP8 peak with their own fit, on NVIDIA aiconfigurator's
measured vLLM 0.24 FP8 GEMMs (per-tensor CUTLASS scaled_mm with dynamic activation scales;
shapes at least 2,048 wide, where the 1,024-wide ones run slower than BF16 at every size), the
same saturating roofline as the 16-bit fit; the same table's BF16 rows, fitted alike, show the
FP8/BF16 ratio on like-for-like data (the shipped BF16 efficiencies stay Vidur's). GPUs without
measurements borrow (the RTX 4090 the L40S's, both Ada):

{fp8}

No FP8 or 4-bit serving run is among the validation data, so nothing on this page scores a
quantized price end to end. A cross-check against another engine: TensorRT-LLM's published
batch-1 FP8 time to first token (v0.5/v0.6.1, hardware_and_roofline.md section 5.1) beside the
FP8 prefill step clustersim prices for the same prompt (vLLM's kernels, not TensorRT-LLM's):

{fp8_check}
 The 4-bit (AWQ, GPTQ) and FP8-on-Ampere kernels have no measured
table here at all: they are the roofline of the bytes they stream (codes, scales, zero points)
at the 16-bit fit's memory efficiency, with their compute at the 16-bit peak slowed by one cited
ratio, `weight_only_compute_ratio` = 0.82 (gpus.yaml, published values 0.60-0.90); INT8 W8A8
borrows the FP8 fit at the INT8 peak, NVFP4 on Blackwell the FP8 fit at the FP4 peak. Read
those prices as estimates within tens of percent.

This page scores that model on **validation data it never saw** (a test checks that the
calibration opens no validation file): Splitwise's measured DGX-A100/H100 prefill and per-token
times (2023 vLLM-based stack) and four real vLLM 0.19 serving runs. Errors are
`(simulated - measured) / measured`: MAPE is the mean of their absolute values, bias their
signed mean (negative: clustersim is too optimistic).

## Splitwise: step times on DGX-A100 / DGX-H100

Each (model, hardware, TP) group has 19 distinct measured points (median of 5 repeats): prompts
of 128-8192 tokens at batch 1, batches of 1-64 prompts of 512 tokens, outputs of 128-8192
tokens. `n` counts the rows scored.
Prefill rows are priced as one step of `batch` prompt chunks; per-token rows as one decode step
at the mean context `prompt + output / 2`. Prefill rows faster than the GPUs' datasheet peak
FLOPs could run them are measurement artefacts and are not scored (one row: llama2-70b A100 TP2
batch 64, 32,768 prompt tokens in 0.79 s). `h100-80gb-pcap` is a power-capped H100, priced as
an H100 SXM.

### Zero-shot (shipped calibration only)

{zero}

### Few-shot

Rule: {rule}. From those three points the per-step overhead, the per-request overhead and the
compute efficiency (GEMMs and attention together) are refitted; where the decodes are faster
than the kernel fit's weight read leaves room for (the per-step overhead would come out
negative), the memory efficiency is refitted in its place and the overhead is 0. Everything
else keeps the shipped calibration; the table scores all the other rows.

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
samples (129 all-reduces of the hidden states, the logits all-gather), next to clustersim's GPU
time for the same step (its price less the CPU overhead) and its full price. clustersim's
all-reduce cost is fitted on the same NCCL samples, so that part agrees by construction; the
profile's `qk_norm` rows are its TP1 values at the commit shipped (slightly high).

{tp_table}

## Where the model is worse, and why

- **Old stacks, zero-shot.** Splitwise's 2023 vLLM spends 43-73 ms per token for Llama-2-70B at
  TP8 where the kernels need ~22 ms: fixed Python/launch overhead per step and per request that
  no kernel profile contains and that a V1-era overhead default (0.13 ms/step) cannot know.
  Zero-shot decode is therefore 13-54 % optimistic at TP4/TP8 (TP2 is within ~10 %: there the
  weight read dominates). Three measurements fix that: few-shot decode MAPE is
  {few_decode}. At TP2 the old stack reads its weights faster than the kernel fit's
  single memory efficiency (the best compromise over 1-4,096-token GEMMs) prices a decode, so
  the few-shot fit raises the memory efficiency there instead of the per-step overhead.
- **Batched and long prefills on the old stack, even few-shot.** Splitwise's prefill time per
  token rises once a step holds more than ~2,048 tokens, whether they come as one prompt or as a
  batch of 512-token prompts (Llama-2-70B, A100 TP8: 0.13 ms a token at 2,048, 0.19 at 8,192; 16
  x 512 tokens take 2.08 s against 1.55 s for one 8,192-token prompt), most at TP8 and least at
  TP2. A roofline whose GEMM efficiency only grows with the number of tokens cannot bend that
  way: **few-shot prefill MAPE is {few_prefill}**, and fitting the same parameters on all of a
  group's rows at once still leaves {bound_prefill} (the table above): the miss is mostly the
  model's shape, not the choice of points. The cause sits in the 2023 stack (kernels, memory
  management or collectives of large steps) and no calibration data here measures it. Zero-shot
  prefill MAPE is 9-60 %, optimistic in every group: Vidur's kernel times (CUDA events around
  single ops) leave out the old stack's per-layer host overhead, which grows with TP degree.
- **Tensor parallelism over PCIe, zero-shot.** With its own kernel profile the RTX PRO 6000
  serves Llama-3.1-8B (TP1) within {z_pro_llama} % on every statistic. Qwen3-32B at TP2 is
  {z_qwen_tpot} % optimistic on TPOT and, the run being overloaded at 10 req/s, {z_qwen_ttft} %
  on TTFT, which is almost all queueing (a too-fast decode drains the queue early). vLLM's log
  shows decode-only steps of {tp_batch} requests at {tp_log} ms ({tp_log_steps} steps in each
  one-second log line). The kernels such a step is made of, profiled on this GPU, and the NCCL
  samples sum to {tp_profile} ms at {tp_batch} x {tp_context} tokens of context (the logged
  requests' contexts are of that order; the cross-check above), where clustersim spends {tp_sim}
  ms of GPU time and prices the step at {tp_sim_total} ms with its CPU overhead. So the model is
  close to the sum of what was measured in isolation, and the missing ~10 ms are outside those
  measurements: the two workers' per-step synchronisation, vLLM's CUDA-graph all-reduce path on
  PCIe (which need not be NCCL's), kernels slowed by running back to back. No profile here
  measures them. The RTX 4090 run is within {z_4090} % on every statistic.
- **Mixture of experts with data parallelism.** Qwen3-30B-A3B (DP2 x EP) is {z_moe_tpot} %
  optimistic on TPOT. Until the arrivals end, the replay runs as many requests at once as vLLM's
  log shows, and its decode-only steps at saturation (256 running) keep vLLM's pace; the ramp-up
  steps, where prompt chunks on one rank pad the other rank's batch, run faster than vLLM's, so
  requests finish early and fewer run at once on the way down. The all-gathers and
  reduce-scatters around every MoE layer are priced from their own NCCL samples, which are
  slower per byte than the all-reduces (they account for part of that gap, not all of it). TTFT
  is short in this run (mean {moe_ttft} s, median {moe_ttft_p50} s: a burst of queueing in the
  last seconds of the arrivals, once 256 requests run), and the simulated burst is shallower:
  mean {moe_sim_ttft} s.
- **Few-shot is as good as its three numbers.** On {few_best_run} the rule's numbers come
  closest (every statistic within {few_best_pct} %). Elsewhere the rule's numbers are not clean
  step times: these runs are at 10 req/s from the first second, so the first request shares its
  prefill with the next arrivals (RTX 4090: 0.69 s for a 2,358-token prompt the kernel profile
  prices at ~0.25 s, a cold start too), and a log line's running count is read at the end of the
  interval its throughput averages over (RTX PRO 6000 Llama-3.1-8B: "1 running" at 8.5 ms a
  token, faster than its weights can be read). The fit then concludes the GPU computes too
  slowly ({few_other_ttft} mean TTFT). Measurements of a warm, idle server do not have this
  problem; the rule was fixed before the runs were scored and is left as it is, not tuned to
  them.
- **What the serving replay does not model:** API-server time (tokenisation, detokenisation,
  HTTP), which vLLM's timestamps partly include; CUDA-graph padding of decode batches (except
  across data-parallel ranks); the RTX PRO 6000 KV size, which vLLM did not log and
  clustersim's memory model estimates.
"""
