"""Blocks every report shares: a run in ``vllm bench serve``'s words, its SLO verdict in
MLPerf LoadGen's, the engines that ran, and the metric definitions.

    ============ Serving Benchmark Result ============     vllm/benchmarks/serve.py's layout:
    Successful requests:                     1258         a label padded to 40 columns, the
    ...                                                   value; a dashed rule per metric with
    ---------------Time to First Token----------------     Mean, Median and the percentiles of
    Mean TTFT (ms):                          312.40       `--metric-percentiles 50,90,99`
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from clustersim.metrics.run import DEFINITIONS, FAULT_DEFINITIONS
from clustersim.report import fmt
from clustersim.report.document import Bullets, Pre, Span, Table, Text

if TYPE_CHECKING:
    from clustersim.metrics import RunSummary
    from clustersim.metrics.goodput import SloVerdict
    from clustersim.scenario import Scenario

GLOSSARY_DOC = "docs/glossary.md"
"""Cited by name, never linked: a report is one file to mail, with no path into a checkout."""
BENCH_PERCENTILES = (50, 90, 99)
"""The percentiles of the plan's ``vllm bench serve --metric-percentiles 50,90,99``."""
_WIDTH = 50
_METRICS = (
    ("ttft_s", "TTFT", "Time to First Token"),
    ("tpot_s", "TPOT", "Time per Output Token (excl. 1st token)"),
    ("itl_s", "ITL", "Inter-token Latency"),
    ("e2e_s", "E2EL", "End-to-end Latency"),
)
LIMIT_NAMES = {"ttft_s": "TTFT", "tpot_s": "TPOT", "itl_s": "ITL"}
LIMIT_MEANING = {
    "ttft_s": "TTFT",
    "tpot_s": "TPOT",
    "itl_s": "each request's p99 ITL",
}


def lead(scenario: Scenario) -> str:
    """The scenario's description as a subtitle's first sentence."""
    return f"{scenario.description.rstrip('.')}. " if scenario.description else ""


def _line(label: str, value: str) -> str:
    return f"{label:<40} {value}".rstrip()


def _float(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def benchmark_text(summary: RunSummary, rate_configured_per_s: float | None) -> str:
    """The run as ``vllm bench serve`` prints a "Serving Benchmark Result"."""
    lines = [" Serving Benchmark Result ".center(_WIDTH, "=")]
    lines.append(_line("Successful requests:", str(summary.num_finished)))
    lines.append(_line("Failed requests:", str(summary.num_rejected)))
    if rate_configured_per_s is not None:
        lines.append(_line("Request rate configured (RPS):", _float(rate_configured_per_s)))
    lines.append(_line("Benchmark duration (s):", _float(summary.makespan_s)))
    t = summary.throughput
    lines.append(_line("Request throughput (req/s):", _float(t.requests_per_s)))
    lines.append(_line("Output token throughput (tok/s):", _float(t.output_tokens_per_s)))
    for key, short, header in _METRICS:
        d = getattr(summary, key)
        lines.append(header.center(_WIDTH, "-"))
        lines.append(_line(f"Mean {short} (ms):", _float(_ms(d.mean))))
        lines.append(_line(f"Median {short} (ms):", _float(_ms(d.p50))))
        for p in BENCH_PERCENTILES:
            lines.append(_line(f"P{p} {short} (ms):", _float(_ms(d.percentile(p)))))
    lines.append("=" * _WIDTH)
    return "\n".join(lines)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1e3


BENCHMARK_NOTE = Text.of(
    "clustersim's figures under vLLM's labels. Benchmark duration is the first arrival to the "
    "end of the last engine step; throughputs are over the measured window (first to last "
    "arrival), where vLLM divides by the duration; ITL pools every gap between consecutive "
    "tokens as vLLM does. Lines vLLM prints that a run summary does not carry (total tokens, "
    "request goodput, peak throughput and concurrency) are left out.")


def benchmark_block(summary: RunSummary, rate_configured_per_s: float | None) -> Pre:
    return Pre(benchmark_text(summary, rate_configured_per_s))


def slo_text(slo: SloVerdict, summary: RunSummary, offered_per_s: float | None,
             subject: str) -> str:
    """The SLO verdict in MLPerf LoadGen's words: VALID or INVALID for the scenario's
    criterion and for each limit alone, each share with its Wilson 95 % interval."""
    rule = "=" * 48
    target = slo.slo.attainment_target
    out = [rule, f"SLO verdict of {subject} (MLPerf server-scenario style)", rule]
    if offered_per_s is not None:
        out.append(f"Offered requests per second : {fmt.rate(offered_per_s)}")
    out.append(f"Completed samples per second : {fmt.rate(summary.throughput.requests_per_s)}")
    out.append("Completed tokens per second : "
               f"{fmt.tokens_per_s(summary.throughput.output_tokens_per_s)}")
    out.append(f"Result is : {'VALID' if slo.meets else 'INVALID'}")
    out.append("  Performance constraints satisfied : "
               f"{'Yes' if slo.meets else 'No'} ({slo.slo.criterion} criterion, "
               f"target {target:.0%} of requests)")
    interval = slo.attainment_interval
    if slo.attainment is not None and interval is not None:
        out.append(f"Joint attainment (every limit at once) : {fmt.share(slo.attainment)} "
                   f"[95% CI {fmt.interval(*interval)}] of {slo.num_requests:,} requests")
    for metric, limit in slo.limits().items():
        verdict = "VALID" if slo.meets_limit(metric) else "INVALID"
        low, high = slo.marginal_interval[metric]
        out.append(f"{LIMIT_NAMES[metric]} constraint ({LIMIT_MEANING[metric]} <= "
                   f"{fmt.limit_ms(limit)}, {target:.0%} of requests) : {verdict}, "
                   f"{fmt.share(slo.marginal[metric])} within [95% CI {fmt.interval(low, high)}]")
    return "\n".join(out)


def slo_note(verdicts: list[tuple[str, SloVerdict]], at_goodput: bool = False) -> Text:
    """How to read the SLO verdicts above it, and where each joint share's interval lies
    against the target (above it, below it, or straddling it); ``verdicts``: (subject, as in
    "In this run", verdict)."""
    parts = ["VALID: the share of requests within the limit reaches the target (for the "
             "result line: the scenario's criterion, joint = every limit at once). The "
             "interval is Wilson's 95 % score interval with the run's requests as independent "
             "trials."]
    for subject, verdict in verdicts:
        reading = interval_reading(verdict)
        if reading:
            parts.append(f" In {subject}, {reading}.")
    if at_goodput:
        parts.append(" The goodput interval over seeds says how firm the rate is.")
    return Text.of("".join(parts))


def interval_reading(verdict: SloVerdict) -> str:
    """Where the joint share's interval lies against the target, in words ("" without
    one)."""
    interval = verdict.attainment_interval
    if verdict.attainment is None or interval is None:
        return ""
    low, high = interval
    target = verdict.slo.attainment_target
    share = (f"the joint share, {fmt.share(verdict.attainment)} [95% CI "
             f"{fmt.interval(low, high)}]")
    if low >= target:
        return (f"{share}, lies above the {target:.0%} target with its whole interval: the "
                "run's requests clear it beyond their own noise")
    if high < target:
        return f"{share}, lies below the {target:.0%} target with its whole interval"
    return (f"{share}, straddles the {target:.0%} target: these requests alone cannot tell "
            "whether the rate meets it")


def engines_table(summary: RunSummary) -> Table:
    """One row per pool: how many instances of what engine, with the profile that priced it."""
    pools: Counter[tuple] = Counter()
    for info in summary.engines:
        tp = str(info.tensor_parallel_size)
        if info.pipeline_parallel_size > 1:  # (pipeline stages of that many GPUs each)
            tp += f" x PP{info.pipeline_parallel_size}"
        pools[(info.pool, info.role, info.gpu, tp,
               info.max_num_batched_tokens, info.max_num_seqs, info.max_model_len,
               info.num_gpu_blocks, info.block_size, info.data_parallel_size,
               info.calibration)] += 1
    rows = tuple(
        (pool, role, str(n), gpu, tp, str(dp), str(mnbt), str(seqs), str(model_len),
         f"{blocks:,} x {block}", calibration)
        for (pool, role, gpu, tp, mnbt, seqs, model_len, blocks, block, dp, calibration), n
        in pools.items())
    return Table(("pool", "role", "engines", "GPU", "TP", "DP", "max_num_batched_tokens",
                  "max_num_seqs", "max_model_len", "KV blocks x tokens", "calibration"),
                 rows, "llrlrrrrrrl")


def definitions() -> list[Text | Bullets]:
    """reference/metrics.md's definitions, as every summary states them, and the plan's."""
    per_run = tuple(part.strip() for part in DEFINITIONS.split(";"))
    return [
        Text.of("Every abbreviation and term of art of this report (mnbt = "
                "max_num_batched_tokens, xP + yD, TP, P:D, N+1, CI, goodput, attainment, the "
                "cliff, ...) is defined in ", Span(GLOSSARY_DOC, "code"),
                " in clustersim's source repository."),
        Text.of("As written into every ", Span("summary.json", "code"), " (",
                Span("clustersim.metrics.run.DEFINITIONS", "code"), "):"),
        Bullets.of(*per_run),
        Text.of("And for plans:"),
        Bullets.of(
            "goodput = the highest offered rate (req/s) at which the SLO attainment reaches "
            "the target, found by bisection on the rate to the plan's tolerance, once per seed "
            "(an independent traffic draw); its interval is the 95 % Student-t interval of the "
            "per-seed values",
            "goodput per GPU = goodput / every GPU of the layout (prefill and decode pools, "
            "every TP rank)",
            "attainment interval = Wilson 95 % score interval over the run's requests",
            "handoff = prefill finished -> KV resident on the decode instance, link queueing "
            "included; KV handoff p95 (the split rule's statistic, and the one the text, the "
            "tables and the KV-links figure state) = the p95 of a split's handoffs in its run "
            "at its operating rate, on the seed of its run at goodput, against "
            "plan.handoff_budget_s",
            "operating rate = the lowest traffic draw's goodput less plan.headroom, or the "
            "target rate where that reaches it: the rate the answer says to run at",
            "best colocated, best split = the plan's pick of each layout kind, by the ranking "
            "that chose the recommendation (the recommendation is the pick of its own kind)",
            "holds, rises, falls = how a figure moves between two layouts: a relative change "
            "of the plan's tolerance or less holds, a larger one rises or falls",
            "tokens/s per user = 1 / mean TPOT; output tokens/s per GPU = output throughput / "
            "GPUs",
            "cost per 1M output tokens = GPUs x price per GPU-hour / output tokens per hour x "
            "1e6, at the run at goodput; prices are inputs, listed with their sources",
            "N+1 = the recommendation at the rate its section states (with where that rate "
            "comes from) and the seed of its run at goodput, an instance or a node lost at "
            "the time its table gives, for the rest of the run; it holds when the SLO is met "
            "over the whole run and over the requests that arrived from the failure on; a "
            "spare's cost per 1M output tokens is over the recommendation's output at goodput",
        ),
        Text.of("And for runs with failures (", Span("FAULT_DEFINITIONS", "code"), "):"),
        Bullets.of(*(part.strip() for part in FAULT_DEFINITIONS.split(";"))),
    ]


def fault_blocks(summary: RunSummary) -> list[Text | Table]:
    """What a run's failures cost: one row per failure, the totals, the SLO around them."""
    f = summary.faults
    assert f is not None
    rows = tuple(
        (i.fault, _seconds(i.repair_s), str(i.num_lost), str(i.num_retried), str(i.num_failed),
         str(i.num_kv_load_failures), str(i.num_recomputed)) for i in f.faults)
    table = Table(("failure", "back at (s)", "attempts lost", "retried", "failed",
                   "KV loads failed", "recomputed"), rows, "lrrrrrr")
    parts = [f"{f.num_lost:,} attempts lost, {f.num_retried_requests:,} requests retried "
             f"({f.num_retries:,} retries), {f.num_failed:,} requests failed (rejected because "
             f"of a failure); {f.num_kv_load_failures:,} KV loads failed, {f.num_recomputed:,} "
             f"of them recomputed on the decode side; {f.num_rerouted:,} KV flows moved to "
             "another path."]
    if f.warmups is not None:
        w = f.warmups
        parts.append(f" The benchmark's warm-ups, not measured and in none of these counts: "
                     f"{w.num_lost:,} attempts lost, {w.num_retried:,} retried, "
                     f"{w.num_failed:,} failed, {w.num_kv_load_failures:,} KV loads failed.")
    if summary.slo is not None and f.first_fault_s is not None:
        after = f.after
        parts.append(
            f" SLO attainment of the {f.num_requests_before:,} requests that arrived before "
            f"the first failure: {fmt.share(f.attainment_before)}; of the "
            f"{0 if after is None else after.num_requests:,} that arrived from it on: "
            f"{fmt.share(None if after is None else after.attainment)} (the whole run: "
            f"{fmt.share(summary.slo.attainment)}).")
    return [Text.of(*parts), table]


def _seconds(seconds: float | None) -> str:
    return fmt.DASH if seconds is None else f"{seconds:g}"
