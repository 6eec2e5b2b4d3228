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
from clustersim.plan import generations, story
from clustersim.scenario import SLO, Scenario
from clustersim.workload.spec import (
    EmpiricalLengths,
    GammaArrivals,
    SyntheticWorkload,
)

if TYPE_CHECKING:
    from clustersim.cluster.build import InstanceInfo
    from clustersim.engine.settings import EngineSettings
    from clustersim.plan.result import (
        CandidateResult,
        LossCheck,
        NPlusOne,
        PlanResult,
    )
    from clustersim.plan.screen import TrafficStats
    from clustersim.plan.sensitivity import CliffPoint
    from clustersim.plan.space import Candidate, PoolChoice

STATUS_ORDER = {"simulated": 0, "infeasible": 1, "screened": 2, "pruned": 3}
LABELS = {"ttft_s": "TTFT", "tpot_s": "TPOT", "itl_s": "ITL (p99 per request)"}
LINK_FRAGILE = 0.8
"""A KV link busier than this at goodput leaves no room for a burst."""
CLIFF_DROP = 0.10
"""Attainment this far under the target 5 % above goodput is a cliff; by 10 % above, steep."""
NIXL = json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both"},
                  separators=(",", ":"))


def _s(value: float) -> str:
    return f"{value * 1e3:,.0f} ms" if value < 1 else f"{value:,.2f} s"


def plural(n: int, word: str) -> str:
    return f"{n:,} {word}" if n == 1 else f"{n:,} {word}s"


def is_length_refusal(reason: str) -> bool:
    """A request refused for its length (prompt + output over max_model_len): the same at
    every rate, a property of the traffic, not of the load."""
    return "max_model_len" in reason


def _rejections(summary: RunSummary) -> str | None:
    """The load-dependent rejections of a run (length refusals left out), in words."""
    counts: dict[str, int] = {}
    first: dict[str, str] = {}
    for reason, n in summary.rejections.items():
        if is_length_refusal(reason):
            continue
        kind = "KV capacity" if "KV" in reason or "preempted" in reason else "rejected"
        counts[kind] = counts.get(kind, 0) + n
        first.setdefault(kind, reason)
    parts = [f"{kind}: {plural(n, 'request')} rejected (e.g. {first[kind]})"
             if kind != "rejected" else f"{plural(n, 'request')} rejected (e.g. {first[kind]})"
             for kind, n in counts.items()]
    return "; ".join(parts) or None


def length_refusals(result: CandidateResult | None) -> tuple[str, ...]:
    """Requests the engine refuses for their length in ``result``'s run at goodput, said
    once as a property of the traffic (they are refused at every rate)."""
    at = None if result is None else result.at_goodput
    if at is None:
        return ()
    refused = {reason: n for reason, n in at.rejections.items() if is_length_refusal(reason)}
    if not refused:
        return ()
    n = sum(refused.values())
    total = max(1, at.num_requests)
    verb = "is" if n == 1 else "are"
    return (f"{n:,} of {total:,} requests ({n / total:.2%}) {verb} refused at every rate for "
            f"their length (e.g. {next(iter(refused))}): a property of the traffic, counted "
            "against attainment, not a limit of the deployment",)


def binding_constraint(summary: RunSummary, slo: SLO, handoff_budget_s: float) -> str:
    """What breaks first just above goodput, read off the lowest failing probe."""
    verdict = summary.slo
    assert verdict is not None
    parts = []
    busiest = next(iter(summary.link_utilization.items()), None)
    if busiest is not None and busiest[1] > LINK_FRAGILE:
        parts.append(f"KV link {busiest[0]} {busiest[1]:.0%} busy")
    rejected = _rejections(summary)
    if rejected:
        parts.append(rejected)
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
        # a symptom at this failing rate; the handoff's budget is judged at the operating rate
        parts.append(f"KV handoffs queue (p95 {_s(handoff)} at this rate)")
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


def goodput_text(r: CandidateResult) -> str:
    """Goodput as measured: its mean and interval, 'at least' when the search hit its ceiling,
    'about' when the bisection ran out of probes."""
    g = r.goodput
    assert g is not None
    if g.short_window_s is not None:
        return (f"at most {g.mean_per_s:,.2f} req/s (not measured: at that rate the traffic "
                f"spans only {g.short_window_s:,.2f} s, too short for a queue to build; a "
                "longer trace or workload measures it)")
    if g.capped:
        return (f"at least {g.lower_per_s:,.2f} req/s (not measured: the SLO still held at the "
                f"highest rate tried), at least {g.lower_per_s / r.candidate.num_gpus:,.3f} "
                "req/s per GPU")
    interval = (f" (95% CI {g.low_per_s:,.2f}-{g.high_per_s:,.2f})"
                if len(g.per_seed_per_s) > 1 else " (one traffic draw)")
    about = "" if g.converged else "about "
    text = (f"{about}{g.mean_per_s:,.2f} req/s{interval}, {r.goodput_per_gpu:,.3f} req/s "
            "per GPU")
    if not g.converged:
        text += " (not converged: the bisection ran out of probes before its tolerance)"
    return text


def operating_text(r: CandidateResult, target_rate: float | None = None,
                   headroom: float = 0.0) -> str | None:
    """The operating rate in words: what to run it at and why."""
    g, rate = r.goodput, r.operating_rate_per_s
    if g is None or rate is None or not rate > 0:
        return None
    draws = len(g.per_seed_per_s)
    lowest = (f"the lowest of its {draws} draws' goodputs (the others were higher)"
              if draws > 1 else "its one traffic draw's goodput")
    if target_rate is not None and rate == target_rate:
        reserve = f", less the {headroom:.0%} headroom," if headroom else ""
        return (f"operate at the target {rate:,.2f} req/s: {lowest}, {g.lower_per_s:,.2f} "
                f"req/s{reserve} reaches it")
    if headroom:
        return (f"operate at {rate:,.2f} req/s: {lowest}, {g.lower_per_s:,.2f} req/s, less "
                f"the {headroom:.0%} headroom")
    if draws == 1:
        return (f"operate at {rate:,.2f} req/s, {lowest}: one draw shows no spread, so this "
                "is the edge itself; set plan.headroom to keep a margin")
    margin = 1 - rate / g.mean_per_s
    return f"operate at {rate:,.2f} req/s, {lowest}, {margin:.0%} below the mean goodput"


def cliff_verdict(points: tuple[CliffPoint, ...], target: float) -> str | None:
    """'falls off a cliff', 'falls steeply' or 'degrades gradually': attainment above goodput."""
    by = {round(p.factor, 2): p for p in points}
    five, ten = by.get(1.05), by.get(1.1)
    if five is None:
        return None
    if five.attainment < target - CLIFF_DROP:
        return "falls off a cliff"
    if ten is not None and ten.attainment < target - CLIFF_DROP:
        return "falls steeply"
    return "degrades gradually"


def cliff_text(r: CandidateResult, target: float) -> str | None:
    """Attainment just above goodput, every draw: the slope a fleet meets on a busy day."""
    if not r.cliff:
        return None
    parts = [f"{p.attainment:.1%} at +{p.factor - 1:.0%} ({p.num_meeting} of "
             f"{plural(len(p.attainments), 'draw')} met the SLO)" for p in r.cliff]
    verdict = cliff_verdict(r.cliff, target)
    return f"past goodput it {verdict}: attainment " + ", ".join(parts)


def headroom_text(r: CandidateResult, target_rate: float) -> str:
    g = r.goodput
    assert g is not None
    low = g.lower_per_s / target_rate - 1
    if g.short_window_s is not None:
        return (f"headroom over the target {target_rate:g} req/s: at most {low:+.0%} (a "
                "window too short to judge)")
    if g.capped:
        return f"headroom over the target {target_rate:g} req/s: at least {low:+.0%}"
    mean = g.mean_per_s / target_rate - 1
    if len(g.per_seed_per_s) == 1:
        return f"headroom over the target {target_rate:g} req/s: {low:+.0%}"
    return (f"headroom over the target {target_rate:g} req/s: {low:+.0%} on the lowest draw "
            f"({mean:+.0%} on the mean)")


def tie_text(result: PlanResult) -> str | None:
    """The tie at the top of the ranking: with whom, why, the rule, and what goodput alone
    would pick; said of the recommendation only when it is the tie's choice."""
    tie = result.tie
    if tie is None:
        return None
    if not tie.chose(result.recommended):
        names = "; ".join(result.by_id(i).candidate.label() for i in tie.tied)
        return f"the best by the objective was a statistical tie among {names} ({tie.why})"
    others = [result.by_id(i).candidate.label() for i in tie.tied[1:]]
    text = f"a statistical tie with {'; '.join(others)} ({tie.why}); {tie.rule}"
    if tie.by_goodput != tie.tied[0]:
        text += (f"; the mean goodput alone would pick "
                 f"{result.by_id(tie.by_goodput).candidate.label()}")
    return text


def _survival_loss(requirement: str) -> str:
    return ("one instance lost" if requirement == "n_plus_one_instance"
            else "one instance or one node lost")


def survival_text(result: PlanResult) -> str | None:
    """plan.require: what the better-ranked candidates lost, which repair (one more of what
    their loss broke) was tried and what became of it, and what survival costs."""
    sv = result.survival
    if sv is None:
        return None
    best = result.by_id(sv.unconstrained)
    rec = result.recommended
    loss = _survival_loss(sv.requirement)
    tried = [f"{r.added} ({r.detail})" for r in sv.repairs if r.outcome != "survives"]
    if not sv.met:
        text = (f"No candidate keeps its SLO with {loss} at its operating rate: of the "
                f"{sv.num_checked} best checked, "
                + "; ".join(f"{result.by_id(n1.candidate).candidate.label()} "
                            f"{_failed_losses(n1, sv.requirement)}" for n1 in sv.failed) + ".")
        if tried:
            text += " Repairs tried: " + "; ".join(tried) + "."
        return (text + f" The best without that requirement is {best.candidate.label()}. More "
                "GPUs (a larger gpu_budget), a plan.headroom that keeps capacity in reserve, or "
                "more servers would make one survive.")
    if rec is None or rec.id == best.id:
        return f"It keeps its SLO with {loss}, as the plan requires."
    lost = "; ".join(f"{result.by_id(n1.candidate).candidate.label()} "
                     f"{_failed_losses(n1, sv.requirement)}" for n1 in sv.failed)
    repaired = next((r for r in sv.repairs if r.outcome == "survives" and r.candidate == rec.id),
                    None)
    how = ("this is the best candidate that keeps its SLO then" if repaired is None else
           f"this is {result.by_id(repaired.of).candidate.label()} with {repaired.added}, the "
           "best candidate that keeps its SLO then")
    cost = (f"{rec.goodput_per_gpu:,.3f} against {best.goodput_per_gpu:,.3f} req/s per GPU"
            if result.objective == "max_goodput_per_gpu"
            else f"{rec.candidate.num_gpus} against {best.candidate.num_gpus} GPUs")
    if rec.cost_per_hour is not None and best.cost_per_hour is not None:
        cost += f", ${rec.cost_per_hour:,.2f}/h against ${best.cost_per_hour:,.2f}/h"
    text = f"The plan requires surviving {loss}: {how} ({lost})."
    if tried:
        text += " Other repairs: " + "; ".join(tried) + "."
    return text + f" Survival costs {cost}."


def _failed_losses(n1: NPlusOne, requirement: str) -> str:
    """``does not: losing decode-0 leaves 41.2% within the SLO`` (the losses the requirement
    counts: instances only for n_plus_one_instance)."""
    parts = [f"losing {c.lost} leaves {c.attainment_after or 0.0:.1%} within the SLO"
             for c in n1.tried if not c.holds
             and (c.kind == "instance" or requirement != "n_plus_one_instance")]
    return "does not: " + ("; ".join(parts) or "a loss could not be simulated")


def _sentence(text: str) -> str:
    return f"{text[0].upper()}{text[1:]}" + ("" if text.endswith(".") else ".")


def answer_parts(result: PlanResult, slo: SLO) -> list[str]:
    """The answer's sentences by topic (the deployment and its goodput, the operating rate,
    cost, cliff, binding limit, tie, survival, N+1, the handoff, the alternative, the split
    rule, the traffic), each a sentence or a few: ``plan.json``'s ``answer`` joins them, the
    report lists them."""
    rec = result.recommended
    limits = ", ".join(f"{k} <= {v:g} s" for k, v in slo.model_dump().items()
                       if k in LABELS and v is not None)
    target = f"{slo.attainment_target:.0%} of requests ({slo.criterion})"
    notes = [_sentence(n) for n in result.traffic_notes]
    if rec is None:
        return [_no_recommendation(result, limits, target), *notes]
    c = rec.candidate
    gpus = plural(c.num_gpus, "GPU")
    if result.gpu_budget and c.num_gpus < result.gpu_budget:
        gpus += f" of the {result.gpu_budget} budgeted"
    budget = "" if c.max_num_batched_tokens else f", max_num_batched_tokens {_budget(rec)}"
    parts = [f"Deploy {c.label()}: {gpus}{budget}, chosen as {result.chosen_by}. Goodput "
             f"{goodput_text(rec)} with {target} meeting {limits}."]
    operate = operating_text(rec, result.target_rate_per_s, result.headroom)
    if operate:
        parts.append(_sentence(operate))
    if rec.cost_per_million_output_tokens is not None:
        parts.append(f"${rec.cost_per_hour:,.2f}/h, ${rec.cost_per_million_output_tokens:,.3f}"
                     " per 1M output tokens at goodput.")
    if result.generations is not None:
        parts.append(generations.sentence(result.generations))
    if result.target_rate_per_s is not None:
        parts.append(f"{headroom_text(rec, result.target_rate_per_s).capitalize()}.")
    cliff = cliff_text(rec, slo.attainment_target)
    if cliff:
        parts.append(_sentence(cliff))
    if rec.binding:
        parts.append(f"Binding just above goodput{binding_rate(rec)}: {rec.binding}.")
    tie = tie_text(result)
    if tie:
        won = result.tie is not None and result.tie.chose(rec)
        parts.append(f"It won {tie}." if won else _sentence(tie))
    survival = survival_text(result)
    if survival:
        parts.append(survival)
    if result.n_plus_one is not None:
        parts.append(n_plus_one_sentence(result.n_plus_one, "the recommendation"))
    verdict = result.split_verdict
    handoff = story.handoff_sentence(rec, result.handoff_budget_s or 0.0)
    if handoff and (verdict is None or verdict.split != rec.id):
        parts.append(_sentence(handoff))
    if result.runner_up is not None:
        ru = result.runner_up
        text = (f"The {story.kind_name(ru.candidate.layout)} is {ru.candidate.label()}: "
                f"{goodput_text(ru)}.")
        if result.runner_up_n_plus_one is not None:
            text += " " + n_plus_one_sentence(result.runner_up_n_plus_one, "the alternative")
        parts.append(text)
    rule = story.split_rule_sentence(result)
    if rule is not None and verdict is not None:
        parts.append(f"{rule} Its readings: " + "; ".join(verdict.reasons) + ".")
    if result.memory_note is not None:
        parts.append(result.memory_note)
    return parts + notes


def _no_recommendation(result: PlanResult, limits: str, target: str) -> str:
    """Why there is no recommendation, the closest candidate, and what would make one."""
    if result.survival is not None:
        return survival_text(result) or ""
    simulated = result.measured
    if not simulated:
        pruned = next((r for r in result.candidates if r.status == "pruned"), None)
        why = pruned.reason if pruned is not None else "no candidate"
        return (f"No candidate can run: every one was pruned (e.g. {why}). More GPUs, another "
                "GPU type or a larger tensor-parallel size would make one fit.")
    best = max(simulated, key=lambda r: (r.goodput.lower_per_s, r.goodput.mean_per_s, r.id))
    if best.goodput.mean_per_s <= 0:
        return (f"No candidate meets {limits} for {target} even at a trickle of traffic. "
                f"Closest: {best.candidate.label()}, which {best.reason or 'fails'}. Loosen "
                "that limit to about the value it reaches, or use a faster GPU or a larger "
                "tensor-parallel size.")
    wanted = result.target_rate_per_s or 0.0
    usable = best.goodput.lower_per_s * (1 - result.headroom)
    short = 1 - usable / wanted if wanted else 0.0
    reserve = f" less the {result.headroom:.0%} headroom" if result.headroom else ""
    return (f"No candidate reaches the target {wanted:g} req/s on every traffic draw within "
            f"{'the budget' if result.gpu_budget else 'the search space'}. Closest: "
            f"{best.candidate.label()} at {goodput_text(best)}: its lowest draw{reserve} "
            f"carries {usable:,.2f} req/s, {short:.0%} short of the target (binding: "
            f"{best.binding}). More GPUs (raise gpu_budget), faster GPUs or looser limits would "
            "reach it.")


def binding_rate(r: CandidateResult) -> str:
    """Where the binding constraint was read: the first draw's lowest failing probe."""
    rate = r.above_goodput_rate_per_s
    return "" if rate is None else f" (at {rate:,.2f} req/s, the lowest failing probe)"


def _budget(r: CandidateResult) -> str:
    if r.at_goodput is not None and r.at_goodput.engines:
        return f"{r.at_goodput.engines[0].max_num_batched_tokens:,}"
    value = r.candidate.max_num_batched_tokens
    return "vLLM's default" if value is None else f"{value:,}"


DRAFT_MODEL = {"eagle": "<your EAGLE draft head>"}
"""vLLM's speculative ``model`` where the method needs a draft checkpoint (mtp reads the
target's own layers; ngram needs none); the plan priced its acceptance, not its weights."""


def speculative_config(choice: str) -> str:
    """vLLM's --speculative-config JSON for a candidate's speculative choice: its method and
    k (the acceptance is what the simulator was told, not a vLLM argument)."""
    spec = json.loads(choice)
    config = {"method": spec["method"], "num_speculative_tokens": spec["num_speculative_tokens"]}
    if spec["method"] in DRAFT_MODEL:
        config["model"] = DRAFT_MODEL[spec["method"]]
    return json.dumps(config)


def serve_commands(rec: CandidateResult | None, model: ModelSpec,
                   scenario: Scenario) -> tuple[str, ...]:
    """One launch line per pool of the recommendation, with its instance count: ``vllm
    serve``, or SGLang's server where the scenario hands KV over with SGLang's connector; a
    split adds the proxy or router in front."""
    if rec is None or rec.at_goodput is None:
        return ()
    layout = scenario.layout
    sglang = layout is not None and layout.kv_transfer.connector == "sglang"
    args_of, roles, front = ((_sglang_args, SGLANG_ROLES, SGLANG_ROUTER) if sglang
                             else (_vllm_args, VLLM_ROLES, VLLM_PROXY))
    engines = {info.pool: info for info in rec.at_goodput.engines}
    lines = []
    for pool in rec.candidate.pools:
        info = engines.get(pool.role) or next(iter(engines.values()))
        args = args_of(pool, info, rec.candidate, model, scenario.engine)
        lines.append(f"{' '.join(args)}   # x{pool.instances} on {pool.gpu}, "
                     f"{roles[pool.role]}")
    if rec.candidate.layout == "disaggregated":
        lines.append(front)
    return tuple(lines)


VLLM_ROLES = {"colocated": "behind a load-balancing router",
              "prefill": "prefill (KV producers)", "decode": "decode (KV consumers)"}
VLLM_PROXY = ("# a proxy sends each request to a prefill instance with max_tokens=1, then to "
              "a decode instance (vLLM's NIXL disaggregated-serving proxy)")


def _vllm_args(pool: PoolChoice, info: InstanceInfo, candidate: Candidate, model: ModelSpec,
               settings: EngineSettings) -> list[str]:
    """``vllm serve``'s arguments for one pool. The same on every GPU generation: vLLM picks
    each GPU's kernels at start-up and needs no flag to run on Blackwell what the plan priced
    (gpt-oss's MXFP4 experts take FlashInfer's MXFP4 x BF16 MoE there by default,
    ``get_mxfp4_backend`` in vllm/model_executor/layers/quantization/mxfp4.py). The vLLM
    recipe's Blackwell config (vllm-project/recipes OpenAI/GPT-OSS.md, GPT-OSS_Blackwell.yaml)
    adds ``--kv-cache-dtype fp8``, a fusion pass and ``VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1``:
    tuning that changes what runs (an FP8 KV cache, MXFP8 activations into the experts), so a
    line here adds it only where the candidate simulated it (``plan.kv_cache_dtype``)."""
    args = [f"vllm serve {model.hf_repo or model.id}",
            f"--tensor-parallel-size {pool.tensor_parallel_size}",
            *([f"--pipeline-parallel-size {pool.pipeline_parallel_size}"]
              if pool.pipeline_parallel_size > 1 else []),
            *([f"--data-parallel-size {pool.data_parallel_size}",
               "--enable-expert-parallel"] if pool.data_parallel_size > 1 else []),
            f"--max-num-batched-tokens {info.max_num_batched_tokens}",
            f"--max-num-seqs {info.max_num_seqs}",
            f"--max-model-len {info.max_model_len}",
            f"--gpu-memory-utilization {settings.resolved_gpu_memory_utilization:g}"]
    if candidate.quantization is not None:
        args.append(f"--quantization {candidate.quantization}")
    if candidate.kv_cache_dtype != "auto":
        args.append(f"--kv-cache-dtype {candidate.kv_cache_dtype}")
    if not candidate.enable_chunked_prefill:
        args.append("--no-enable-chunked-prefill")
    if candidate.speculative is not None:
        args.append(f"--speculative-config '{speculative_config(candidate.speculative)}'")
    if not settings.enable_prefix_caching:
        args.append("--no-enable-prefix-caching")
    if candidate.kv_offloading_gib:
        args.append(f"--kv-offloading-backend native --kv-offloading-size "
                    f"{candidate.kv_offloading_gib:g}")
    if settings.two_batch_overlap and pool.data_parallel_size > 1:
        # every step of two or more tokens split in two, as simulated (vLLM's defaults split
        # only decode batches over 32 tokens and prefill steps over 512)
        args.append("--enable-dbo --dbo-decode-token-threshold 1 "
                    "--dbo-prefill-token-threshold 1")
    if pool.role != "colocated":
        args.append(f"--kv-transfer-config '{NIXL}'")
    return args


SGLANG_ROLES = {"colocated": "behind a load-balancing router",
                "prefill": "prefill (KV senders)", "decode": "decode (KV receivers)"}
SGLANG_ROUTER = ("# SGLang's router sends each request to a prefill and a decode server at "
                 "once: python -m sglang_router.launch_router --pd-disaggregation "
                 "--prefill http://PREFILL:30000 --decode http://DECODE:30000")
SGLANG_KV_DTYPES = {"fp8": "fp8_e4m3", "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2"}
"""clustersim's KV cache dtypes as SGLang's --kv-cache-dtype names them."""
SGLANG_SPEC_ALGORITHMS = {"eagle": "EAGLE", "mtp": "NEXTN"}
"""SGLang's --speculative-algorithm for a speculative method (its MTP is NEXTN)."""


def _sglang_args(pool: PoolChoice, info: InstanceInfo, candidate: Candidate,
                 model: ModelSpec, settings: EngineSettings) -> list[str]:
    """``python -m sglang.launch_server``'s arguments for one pool (SGLang's server
    arguments): ``--tp-size`` counts every GPU of an engine, DP attention splits them into
    ``--dp-size`` ranks, expert parallelism runs DeepEP (its normal kernels on prefill, its
    low-latency ones on decode, as simulated), a split pool its ``--disaggregation-mode``."""
    gpus = pool.tensor_parallel_size * pool.data_parallel_size
    args = [f"python -m sglang.launch_server --model-path {model.hf_repo or model.id}",
            f"--tp-size {gpus}"]
    if pool.pipeline_parallel_size > 1:
        args.append(f"--pp-size {pool.pipeline_parallel_size}")
    if pool.data_parallel_size > 1:
        args += [f"--dp-size {pool.data_parallel_size}", "--enable-dp-attention",
                 f"--ep-size {gpus}", "--moe-a2a-backend deepep",
                 "--deepep-mode " + {"prefill": "normal", "decode": "low_latency"}.get(
                     pool.role, "auto")]
        if settings.eplb:
            args.append("--enable-eplb")
        if settings.two_batch_overlap:
            args.append("--enable-two-batch-overlap")
        if settings.num_redundant_experts:
            args.append(f"--ep-num-redundant-experts {settings.num_redundant_experts}")
    chunk = info.max_num_batched_tokens if candidate.enable_chunked_prefill else -1
    args += [f"--chunked-prefill-size {chunk}",  # (-1: SGLang's "no chunking")
             f"--max-running-requests {info.max_num_seqs}",
             f"--context-length {info.max_model_len}",
             f"--mem-fraction-static {settings.resolved_gpu_memory_utilization:g}",
             f"--page-size {settings.block_size}"]
    if candidate.quantization is not None:
        args.append(f"--quantization {candidate.quantization}")
    if candidate.kv_cache_dtype != "auto":
        name = SGLANG_KV_DTYPES.get(candidate.kv_cache_dtype, candidate.kv_cache_dtype)
        args.append(f"--kv-cache-dtype {name}")
    if candidate.speculative is not None:
        spec = json.loads(candidate.speculative)
        algorithm = SGLANG_SPEC_ALGORITHMS.get(spec["method"], spec["method"].upper())
        k = spec["num_speculative_tokens"]
        args += [f"--speculative-algorithm {algorithm}", f"--speculative-num-steps {k}",
                 "--speculative-eagle-topk 1", f"--speculative-num-draft-tokens {k + 1}"]
    if not settings.enable_prefix_caching:
        args.append("--disable-radix-cache")
    if pool.role != "colocated":
        args += [f"--disaggregation-mode {pool.role}",
                 "--disaggregation-transfer-backend mooncake"]
    return args


def bench_command(rec: CandidateResult | None, model: ModelSpec, scenario: Scenario,
                  traffic: TrafficStats) -> str | None:
    """The ``vllm bench serve`` run that checks the plan on real GPUs at its operating rate."""
    if rec is None or rec.goodput is None:
        return None
    slo = scenario.slo
    assert slo is not None
    goodput = [f"{k.removesuffix('_s')}:{v * 1e3:g}" for k, v in
               (("ttft_s", slo.ttft_s), ("tpot_s", slo.tpot_s)) if v is not None]
    workload = scenario.workload
    num = max(1000, int(round((rec.operating_rate_per_s or rec.goodput.lower_per_s) * 600)))
    # ten minutes of traffic, as MLPerf asks
    args = [f"vllm bench serve --model {model.hf_repo or model.id}"]
    if isinstance(workload, SyntheticWorkload) and isinstance(workload.lengths, EmpiricalLengths):
        args.append("--dataset-name sharegpt --dataset-path <your ShareGPT json>")
    else:
        args.append(f"--dataset-name random --random-input-len "
                    f"{round(traffic.mean_prompt_tokens)} --random-output-len "
                    f"{round(traffic.mean_output_tokens)}")
    rate = rec.operating_rate_per_s or rec.goodput.lower_per_s
    args.append(f"--request-rate {rate:.2f}")  # the operating rate: what the plan promises
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
            f"{target:.0%}): {verdict}; {plural(check.num_lost, 'attempt')} lost, "
            f"{plural(check.num_retried_requests, 'request')} retried, {check.num_failed:,} "
            f"failed{cost}")


def same_outcome(a: LossCheck | None, b: LossCheck | None) -> bool:
    """Two losses that end the same way (losing a split's only decode instance stops every
    request, as losing their node does)."""
    return a is not None and b is not None and (
        a.attainment, a.attainment_after, a.num_lost, a.num_retried_requests, a.num_failed) == (
        b.attainment, b.attainment_after, b.num_lost, b.num_retried_requests, b.num_failed)


def n_plus_one_sentence(n1: NPlusOne, who: str = "the recommendation") -> str:
    """The N+1 verdict in one sentence, for the answer paragraph."""
    parts = []
    for check in (n1.instance, n1.node):
        if check is None:
            continue
        if check is n1.node and same_outcome(n1.instance, n1.node):
            parts.append(f"losing {check.lost} ends the same way")
            continue
        verb = "still meets" if check.holds else "misses"
        parts.append(f"losing {check.lost} it {verb} the SLO (attainment "
                     f"{'-' if check.attainment_after is None else f'{check.attainment_after:.1%}'}"
                     " after the failure)")
    if not parts:
        return "N+1 could not be checked (" + "; ".join(n1.notes) + ")."
    headroom = "has N+1 headroom" if n1.holds else "has no N+1 headroom"
    text = (f"At {n1.rate_per_s:,.2f} req/s ({n1.rate_basis}) {who} {headroom}: "
            + "; ".join(parts))
    spares = [c for c in (n1.instance, n1.node) if c is not None and not c.holds
              and c.spare_cost_per_hour is not None]
    if spares:
        text += "; " + ", ".join(
            f"a spare {'node' if c.kind == 'node' else 'instance'} costs "
            f"${c.spare_cost_per_hour:,.2f}/h" for c in spares)
    return text + "."
