"""The plan's answer in words and commands: the binding constraint, the Pareto front, the
paragraph a review reads, and the ``vllm serve`` / ``vllm bench serve`` lines that check it.

Pure functions over results; nothing here runs a simulation.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING

from clustersim.catalog.specs import ModelSpec
from clustersim.metrics import RunSummary
from clustersim.scenario import SLO, Scenario
from clustersim.workload.spec import (
    EmpiricalLengths,
    GammaArrivals,
    SyntheticWorkload,
)

if TYPE_CHECKING:
    from clustersim.plan.result import CandidateResult, LossCheck, NPlusOne, PlanResult
    from clustersim.plan.screen import TrafficStats

STATUS_ORDER = {"simulated": 0, "infeasible": 1, "screened": 2, "pruned": 3}
LABELS = {"ttft_s": "TTFT", "tpot_s": "TPOT", "itl_s": "ITL (p99 per request)"}
LINK_FRAGILE = 0.8
"""A KV link busier than this at goodput leaves no room for a burst."""
NIXL = json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both"},
                  separators=(",", ":"))


def _s(value: float) -> str:
    return f"{value * 1e3:,.0f} ms" if value < 1 else f"{value:,.2f} s"


def binding_constraint(summary: RunSummary, slo: SLO, handoff_budget_s: float) -> str:
    """What breaks first just above goodput, read off the lowest failing probe."""
    verdict = summary.slo
    assert verdict is not None
    parts = []
    busiest = next(iter(summary.link_utilization.items()), None)
    if busiest is not None and busiest[1] > LINK_FRAGILE:
        parts.append(f"KV link {busiest[0]} {busiest[1]:.0%} busy")
    if summary.num_rejected:
        reason = next(iter(summary.rejections))
        parts.append(f"KV capacity: {summary.num_rejected} requests rejected ({reason})")
    limits = verdict.limits()
    if slo.criterion == "mean":
        metric = max((m for m in limits if verdict.means.get(m) is not None),
                     key=lambda m: verdict.means[m] / limits[m], default=None)
        if metric is not None:
            parts.append(f"{LABELS[metric]}: mean {_s(verdict.means[metric])} against "
                         f"{_s(limits[metric])}")
    else:
        metric = min(verdict.marginal, key=lambda m: (verdict.marginal[m], m))
        weakest = (f"{LABELS[metric]} ({verdict.marginal[metric]:.1%} of requests within "
                   f"{_s(limits[metric])})")
        if slo.criterion == "joint" and len(limits) > 1:
            parts.append(f"joint attainment {verdict.attainment:.1%} < "
                         f"{slo.attainment_target:.0%}, weakest limit {weakest}")
        else:
            parts.append(weakest)
    preempted = summary.num_preempted_requests / max(1, summary.num_requests)
    if preempted > 0.05:
        parts.append(f"{preempted:.0%} of requests preempted (KV cache pressure)")
    handoff = summary.handoff_s.p95 if summary.handoff_s is not None else None
    if handoff is not None and handoff > handoff_budget_s:
        parts.append(f"KV handoff p95 {_s(handoff)} over its {_s(handoff_budget_s)} budget")
    return "; ".join(parts)


def trickle_failure(summary: RunSummary, slo: SLO) -> str:
    """Why a candidate fails even when requests barely overlap."""
    verdict = summary.slo
    assert verdict is not None
    worst = min(verdict.marginal, key=lambda m: (verdict.marginal[m], m))
    limit = verdict.limits()[worst]
    dist = getattr(summary, worst if worst != "itl_s" else "itl_s")
    q = int(round(slo.attainment_target * 100))
    value = dist.percentile(q) if q in (50, 90, 95, 99) else dist.p90
    stat = f"p{q}" if q in (50, 90, 95, 99) else "p90"
    return (f"fails at a trickle: {verdict.marginal[worst]:.0%} of requests meet "
            f"{worst} <= {limit:g} s; {LABELS[worst]} {stat} is {_s(value or math.nan)}")


def pareto_front(results: list[CandidateResult]) -> tuple[str, ...]:
    """Ids of the simulated candidates no other beats on both output tokens/s per GPU and
    tokens/s per user (1 / mean TPOT) at goodput, by tokens/s per user."""
    points = []
    for r in results:
        s = r.at_goodput
        if s is None or s.tokens_per_s_per_user is None or s.output_tokens_per_s_per_gpu is None:
            continue
        points.append((s.tokens_per_s_per_user, s.output_tokens_per_s_per_gpu, r.id))
    front = [p for p in points
             if not any(o[0] >= p[0] and o[1] >= p[1] and (o[0], o[1]) != (p[0], p[1])
                        for o in points)]
    return tuple(p[2] for p in sorted(front))


def _goodput_text(r: CandidateResult) -> str:
    g = r.goodput
    assert g is not None
    interval = (f" (95 % CI {g.low_per_s:,.2f}-{g.high_per_s:,.2f})"
                if len(g.per_seed_per_s) > 1 else "")
    return (f"{g.mean_per_s:,.2f} req/s{interval}, {r.goodput_per_gpu:,.3f} req/s per GPU")


def explain(result: PlanResult, slo: SLO) -> str:
    """The answer in one paragraph: the recommendation and why, or why there is none."""
    rec = result.recommended
    limits = ", ".join(f"{k} <= {v:g} s" for k, v in slo.model_dump().items()
                       if k in LABELS and v is not None)
    target = f"{slo.attainment_target:.0%} of requests ({slo.criterion})"
    if rec is not None:
        c = rec.candidate
        gpus = f"{c.num_gpus} GPU{'s' if c.num_gpus != 1 else ''}"
        if result.gpu_budget and c.num_gpus < result.gpu_budget:
            gpus += f" of the {result.gpu_budget} budgeted"
        budget = "" if c.max_num_batched_tokens else f", max_num_batched_tokens {_budget(rec)}"
        text = (f"Deploy {c.label()}: {gpus}{budget}. Goodput {_goodput_text(rec)} with "
                f"{target} meeting {limits}.")
        if rec.cost_per_million_output_tokens is not None:
            text += (f" ${rec.cost_per_hour:,.2f}/h, ${rec.cost_per_million_output_tokens:,.3f}"
                     " per 1M output tokens at goodput.")
        if result.target_rate_per_s is not None:
            headroom = rec.goodput.mean_per_s / result.target_rate_per_s - 1
            text += (f" Headroom over the target {result.target_rate_per_s:g} req/s: "
                     f"{headroom:+.0%}.")
        if rec.binding:
            text += f" Binding just above goodput: {rec.binding}."
        if result.runner_up is not None:
            ru = result.runner_up
            text += (f" Best {ru.candidate.layout} alternative: {ru.candidate.label()}, "
                     f"{_goodput_text(ru)}.")
        if result.n_plus_one is not None:
            text += " " + n_plus_one_sentence(result.n_plus_one)
        if result.split_verdict is not None:
            v = result.split_verdict
            keep = ("keep the split" if v.keep_split else "stay colocated")
            if (v.keep_split and c.layout == "colocated") or (
                    not v.keep_split and c.layout == "disaggregated"):
                keep += (", which this plan overrules: goodput within the SLO decides, S7 "
                         "weighs p95 latency and the handoff on their own")
            text += (f" Golden S7 at {v.rate_per_s:,.2f} req/s: {keep} ("
                     + "; ".join(v.reasons) + ").")
        return text
    simulated = [r for r in result.candidates if r.goodput is not None]
    if not simulated:
        pruned = [r for r in result.candidates if r.status == "pruned"]
        why = pruned[0].reason if pruned else "no candidate"
        return (f"No candidate can run: every one was pruned (e.g. {why}). More GPUs, another "
                "GPU type or a larger tensor-parallel size would make one fit.")
    best = max(simulated, key=lambda r: (r.goodput.mean_per_s, r.id))
    if best.goodput.mean_per_s <= 0:
        return (f"No candidate meets {limits} for {target} even at a trickle of traffic. "
                f"Closest: {best.candidate.label()}, which {best.reason or 'fails'}. Loosen "
                "that limit to about the value it reaches, or use a faster GPU or a larger "
                "tensor-parallel size.")
    return (f"No candidate reaches the target {result.target_rate_per_s:g} req/s within "
            f"{'the budget' if result.gpu_budget else 'the search space'}. Closest: "
            f"{best.candidate.label()} at {_goodput_text(best)} (binding: {best.binding}). "
            "More GPUs (raise gpu_budget), faster GPUs or looser limits would reach it.")


def _budget(r: CandidateResult) -> str:
    if r.at_goodput is not None and r.at_goodput.engines:
        return f"{r.at_goodput.engines[0].max_num_batched_tokens:,}"
    value = r.candidate.max_num_batched_tokens
    return "vLLM's default" if value is None else f"{value:,}"


def serve_commands(rec: CandidateResult | None, model: ModelSpec,
                   scenario: Scenario) -> tuple[str, ...]:
    """One ``vllm serve`` line per pool of the recommendation, with its instance count."""
    if rec is None or rec.at_goodput is None:
        return ()
    engines = {info.pool: info for info in rec.at_goodput.engines}
    lines = []
    for pool in rec.candidate.pools:
        info = engines.get(pool.role) or next(iter(engines.values()))
        args = [f"vllm serve {model.hf_repo or model.id}",
                f"--tensor-parallel-size {pool.tensor_parallel_size}",
                f"--max-num-batched-tokens {info.max_num_batched_tokens}",
                f"--max-num-seqs {info.max_num_seqs}",
                f"--max-model-len {info.max_model_len}",
                f"--gpu-memory-utilization {scenario.engine.gpu_memory_utilization:g}"]
        if rec.candidate.quantization is not None:
            args.append(f"--quantization {rec.candidate.quantization}")
        if rec.candidate.kv_cache_dtype != "auto":
            args.append(f"--kv-cache-dtype {rec.candidate.kv_cache_dtype}")
        if not rec.candidate.enable_chunked_prefill:
            args.append("--no-enable-chunked-prefill")
        if not scenario.engine.enable_prefix_caching:
            args.append("--no-enable-prefix-caching")
        if pool.role != "colocated":
            args.append(f"--kv-transfer-config '{NIXL}'")
        where = {"colocated": "behind a load-balancing router",
                 "prefill": "prefill (KV producers)",
                 "decode": "decode (KV consumers)"}[pool.role]
        lines.append(f"{' '.join(args)}   # x{pool.instances} on {pool.gpu}, {where}")
    if rec.candidate.layout == "disaggregated":
        lines.append("# a proxy sends each request to a prefill instance with max_tokens=1, "
                     "then to a decode instance (vLLM's NIXL disaggregated-serving proxy)")
    return tuple(lines)


def bench_command(rec: CandidateResult | None, model: ModelSpec, scenario: Scenario,
                  traffic: TrafficStats) -> str | None:
    """The ``vllm bench serve`` run that checks the plan on real GPUs at its goodput."""
    if rec is None or rec.goodput is None:
        return None
    slo = scenario.slo
    assert slo is not None
    goodput = [f"{k.removesuffix('_s')}:{v * 1e3:g}" for k, v in
               (("ttft_s", slo.ttft_s), ("tpot_s", slo.tpot_s)) if v is not None]
    workload = scenario.workload
    num = max(1000, int(round(rec.goodput.mean_per_s * 600)))  # ten minutes, as MLPerf asks
    args = [f"vllm bench serve --model {model.hf_repo or model.id}"]
    if isinstance(workload, SyntheticWorkload) and isinstance(workload.lengths, EmpiricalLengths):
        args.append("--dataset-name sharegpt --dataset-path <your ShareGPT json>")
    else:
        args.append(f"--dataset-name random --random-input-len "
                    f"{round(traffic.mean_prompt_tokens)} --random-output-len "
                    f"{round(traffic.mean_output_tokens)}")
    args.append(f"--request-rate {rec.goodput.mean_per_s:.2f}")
    if isinstance(workload, SyntheticWorkload) and isinstance(workload.arrivals, GammaArrivals):
        args.append(f"--burstiness {1 / workload.arrivals.cv ** 2:.3g}")
    args += [f"--num-prompts {num}", f"--goodput {' '.join(goodput)}" if goodput else "",
             "--percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 50,90,99"]
    return " ".join(a for a in args if a)


# ---------------------------------------------------------------------- N+1
def _lost(check: LossCheck) -> str:
    gpus = ", ".join(f"{n} {gpu}" for gpu, n in check.gpus.items())
    return f"{check.lost} ({gpus})"


def loss_line(check: LossCheck, target: float) -> str:
    """One loss: what failed when, the SLO over the run and after it, and a spare's price."""
    def share(x: float | None) -> str:
        return "-" if x is None else f"{x:.1%}"

    verdict = "holds" if check.holds else "FAILS"
    spare = "node" if check.kind == "node" else "instance"
    cost = ""
    if check.spare_cost_per_hour is not None:
        cost = f"; a spare {spare} costs ${check.spare_cost_per_hour:,.2f}/h"
        if check.spare_cost_per_million_output_tokens is not None:
            cost += (f", +${check.spare_cost_per_million_output_tokens:,.3f} per 1M output "
                     "tokens")
    return (f"lose {_lost(check)} at {check.at_s:g} s: attainment {share(check.attainment)} "
            f"over the run, {share(check.attainment_after)} from the failure on (target "
            f"{target:.0%}): {verdict}; {check.num_lost} attempts lost, "
            f"{check.num_retried_requests} requests retried, {check.num_failed} failed{cost}")


def n_plus_one_sentence(n1: NPlusOne) -> str:
    """The N+1 verdict in one sentence, for the answer paragraph."""
    parts = []
    for check in (n1.instance, n1.node):
        if check is None:
            continue
        verb = "still meets" if check.holds else "misses"
        parts.append(f"losing {check.lost} it {verb} the SLO (attainment "
                     f"{'-' if check.attainment_after is None else f'{check.attainment_after:.1%}'}"
                     " after the failure)")
    if not parts:
        return "N+1 could not be checked (" + "; ".join(n1.notes) + ")."
    headroom = "has N+1 headroom" if n1.holds else "has no N+1 headroom"
    text = (f"At {n1.rate_per_s:,.2f} req/s ({n1.rate_basis}) the recommendation {headroom}: "
            + "; ".join(parts))
    spares = [c for c in (n1.instance, n1.node) if c is not None and not c.holds
              and c.spare_cost_per_hour is not None]
    if spares:
        text += "; a spare " + " or ".join(
            f"{'node' if c.kind == 'node' else 'instance'} costs ${c.spare_cost_per_hour:,.2f}/h"
            for c in spares)
    return text + "."
