"""What a plan answers, typed: every candidate's fate (the ledger) and the recommendation;
with ``plan.gpus``, each GPU generation's best layout beside it (:class:`Generations`, which
``clustersim.plan.generations`` compares and words).

``PlanResult.to_json()`` is ``plan.json``; ``ledger_rows()`` is ``ledger.csv``. Neither holds
wall times or anything else that varies between runs: the same scenario and seed give the same
bytes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from typing import Any

from clustersim.metrics import RunSummary
from clustersim.metrics.goodput import cost_per_million_tokens
from clustersim.plan.day import DayPlan
from clustersim.plan.ledger import Ledger, Ledgers
from clustersim.plan.sensitivity import CliffPoint, Sensitivity
from clustersim.plan.space import Candidate

STATUSES = ("simulated", "infeasible", "screened", "pruned")
"""simulated: goodput measured; infeasible: simulated, fails its SLO even at a trickle;
screened: feasible on paper but ranked below the simulated ones; pruned: cannot run (memory,
TP across nodes, KV too small) or hopeless on paper, with the reason."""


@dataclass(frozen=True, slots=True, order=True)
class Probe:
    """One simulation of a bisection: the offered rate, the attainment it measured (with its
    Wilson 95 % interval over the run's requests) and whether that met the SLO."""

    seed: int
    """The seed's index (0 is the scenario's own seed)."""
    rate_per_s: float
    attainment: float
    attainment_low: float
    attainment_high: float
    met: bool
    num_requests: int

    def to_json(self) -> dict[str, Any]:
        return {"seed": self.seed, "rate_per_s": self.rate_per_s, "attainment": self.attainment,
                "attainment_ci95": [self.attainment_low, self.attainment_high],
                "met": self.met, "num_requests": self.num_requests}


@dataclass(frozen=True)
class Goodput:
    """A candidate's goodput over seeds: per-seed values, their mean and 95 % interval."""

    per_seed_per_s: tuple[float, ...]
    mean_per_s: float
    low_per_s: float
    high_per_s: float
    probes: int
    converged: bool
    """Every seed's bisection met its tolerance."""
    capped: bool = False
    """A seed met the SLO at the highest rate tried: goodput is at least that."""
    short_window_s: float | None = None
    """Set when a draw's passing probe at goodput held too little traffic to judge the SLO
    (a trace replayed faster than its own span allows): its arrival window in seconds. Such a
    goodput is optimistic (a short burst drains before a queue can build)."""

    @property
    def lower_per_s(self) -> float:
        """The lowest draw's goodput: the highest rate at which every traffic draw met the
        SLO."""
        return min(self.per_seed_per_s)

    @property
    def measured(self) -> bool:
        """Bracketed within the tolerance on every draw, on probes long enough to judge:
        neither capped, nor cut short, nor too short a window."""
        return self.converged and not self.capped and self.short_window_s is None

    @property
    def quality(self) -> str:
        """measured; at least (capped: the SLO held at the highest rate tried); short window
        (too little traffic at that rate to judge the SLO: at most); or unconverged (the
        bisection ran out of probes before its tolerance)."""
        if self.short_window_s is not None:
            return "short window"
        if self.capped:
            return "at least"
        return "measured" if self.converged else "unconverged"

    def to_json(self) -> dict[str, Any]:
        return {"mean_per_s": self.mean_per_s, "ci95_per_s": [self.low_per_s, self.high_per_s],
                "per_seed_per_s": list(self.per_seed_per_s), "lower_per_s": self.lower_per_s,
                "probes": self.probes, "converged": self.converged, "capped": self.capped,
                "short_window_s": self.short_window_s, "quality": self.quality}


@dataclass(frozen=True)
class CandidateResult:
    """One row of the ledger."""

    candidate: Candidate
    status: str
    reason: str | None = None
    screen_per_s: float | None = None
    """The analytic screen's estimate of goodput (None when pruned before it)."""
    screen_binding: str | None = None
    goodput: Goodput | None = None
    at_goodput: RunSummary | None = None
    """The run at goodput (the median seed's highest passing probe): the figures a review
    reads."""
    at_goodput_rate_per_s: float | None = None
    """The offered rate of ``at_goodput`` (one of ``probes``; its seed is ``at_goodput.seed``):
    what ``Planner.full_run`` reruns to get that run with every record."""
    above_goodput: RunSummary | None = None
    """The first seed's lowest failing probe: what breaks first (the binding constraint)."""
    above_goodput_rate_per_s: float | None = None
    """The offered rate of ``above_goodput``."""
    binding: str | None = None
    cost_per_hour: float | None = None
    cost_per_million_output_tokens: float | None = None
    probes: list[Probe] = field(default_factory=list)
    """Every simulation of its bisections, by seed and rate: attainment vs offered rate."""
    operating_rate_per_s: float | None = None
    """The rate to run it at: the lowest draw's goodput less the plan's headroom (every draw
    met the SLO there), or the target rate where the plan has one and it reaches it."""
    cliff: tuple[CliffPoint, ...] = ()
    """Attainment 5 % and 10 % above goodput (measured for the answer's candidates)."""
    notes: tuple[str, ...] = ()
    """What a reviewer should know reading this row (an explained coincidence, a tie)."""
    at_operating: RunSummary | None = None
    """The run at the operating rate, on the seed of the run at goodput (measured for the
    answer's candidates): what the deployment sees where the plan says to run it. The KV
    handoff statistic and the report's step timeline and KV links read it."""

    @property
    def id(self) -> str:
        return self.candidate.id

    @property
    def handoff_p95_s(self) -> float | None:
        """The one KV handoff statistic: p95 (prefill finished -> KV resident on the decode
        instance, per request) of the run at the operating rate; None for a layout without
        handoffs or a candidate not in the answer."""
        s = self.at_operating
        return None if s is None or s.handoff_s is None else s.handoff_s.p95

    @property
    def goodput_per_gpu(self) -> float | None:
        return None if self.goodput is None else self.goodput.mean_per_s / self.candidate.num_gpus

    def to_json(self) -> dict[str, Any]:
        c = self.candidate
        out: dict[str, Any] = {
            "id": c.id,
            "label": c.label(),
            "layout": c.layout,
            "status": self.status,
            "reason": self.reason,
            "num_gpus": c.num_gpus,
            "gpus": c.gpus_by_type,
            "pools": [{"role": p.role, "gpu": p.gpu, "tensor_parallel_size":
                       p.tensor_parallel_size, "instances": p.instances,
                       **({"pipeline_parallel_size": p.pipeline_parallel_size}
                          if p.pipeline_parallel_size > 1 else {}),
                       **({"data_parallel_size": p.data_parallel_size,
                           "enable_expert_parallel": True}
                          if p.data_parallel_size > 1 else {})} for p in c.pools],
            "pd_ratio": c.pd_ratio,
            "max_num_batched_tokens": c.max_num_batched_tokens,
            "enable_chunked_prefill": c.enable_chunked_prefill,
            "quantization": c.quantization,
            "kv_cache_dtype": c.kv_cache_dtype,
            **({} if c.speculative is None else {"speculative": json.loads(c.speculative)}),
            **({"kv_offloading_size": c.kv_offloading_gib} if c.kv_offloading_gib else {}),
            "baseline": c.baseline,
            "screen_per_s": self.screen_per_s,
            "screen_binding": self.screen_binding,
            "goodput": None if self.goodput is None else self.goodput.to_json(),
            "goodput_per_gpu": self.goodput_per_gpu,
            "binding": self.binding,
            "binding_rate_per_s": self.above_goodput_rate_per_s,
            "cost_per_hour": self.cost_per_hour,
            "cost_per_million_output_tokens": self.cost_per_million_output_tokens,
            "operating_rate_per_s": self.operating_rate_per_s,
            "cliff": [point.to_json() for point in self.cliff],
            "notes": list(self.notes),
            "probes": [probe.to_json() for probe in self.probes],
        }
        if self.at_goodput is not None:
            out["at_goodput"] = self.at_goodput.to_json()
        if self.at_operating is not None:
            out["at_operating"] = self.at_operating.to_json()
            out["handoff_p95_s"] = self.handoff_p95_s
        return out


@dataclass(frozen=True)
class SplitVerdict:
    """The keep-or-reject rule for a split, between the plan's best colocated layout and its
    best split (``PlanResult.best``)."""

    keep_split: bool
    reasons: tuple[str, ...]
    rate_per_s: float
    """The common offered rate both were run at to compare their p95 latencies."""
    against: tuple[str, ...] = ()
    """The reasons that reject the split (empty when it is kept)."""
    colocated: str = ""
    split: str = ""
    """The two candidates' ids."""
    handoff_p95_s: float | None = None
    """The split's KV handoff p95 at its operating rate (``CandidateResult.handoff_p95_s``)."""
    handoff_budget_s: float = 0.0
    handoff_rate_per_s: float | None = None
    """The split's operating rate, where its handoff p95 was read."""
    within: float = 0.0
    """A relative change this small holds (the plan's tolerance)."""

    @property
    def handoff_within_budget(self) -> bool | None:
        return None if self.handoff_p95_s is None else self.handoff_p95_s <= self.handoff_budget_s

    def to_json(self) -> dict[str, Any]:
        return {"keep_split": self.keep_split, "reasons": list(self.reasons),
                "against": list(self.against), "rate_per_s": self.rate_per_s,
                "colocated": self.colocated,
                "split": self.split, "handoff_p95_s": self.handoff_p95_s,
                "handoff_budget_s": self.handoff_budget_s,
                "handoff_rate_per_s": self.handoff_rate_per_s,
                "handoff_within_budget": self.handoff_within_budget,
                "holds_within": self.within}


@dataclass(frozen=True)
class LossCheck:
    """The recommendation at its goodput rate with one instance or one node lost mid-run,
    for the rest of the run (``plan.n_plus_one``)."""

    kind: str
    """instance or node."""
    lost: str
    """The instance (decode-0) or node (node0) that fails."""
    gpus: dict[str, int]
    """The GPUs it takes down, by type."""
    at_s: float
    attainment: float | None
    """Joint attainment over the whole run (the lost requests count)."""
    attainment_after: float | None
    """Joint attainment of the requests that first arrived at or after the failure."""
    meets: bool
    """The SLO verdict (its criterion) over the whole run."""
    meets_after: bool
    """The same over the requests from the failure on."""
    num_lost: int
    num_retried_requests: int
    num_failed: int
    spare_cost_per_hour: float | None
    """What one more of what was lost costs (its GPUs at the plan's prices)."""
    spare_cost_per_million_output_tokens: float | None
    """That spare's cost per 1M output tokens of the recommendation at goodput."""
    summary: RunSummary | None = None
    """The run (its ``faults`` hold the timeline the report draws); not in ``to_json``."""
    roles: dict[str, int] = field(default_factory=dict)
    """The instances it takes down, by role (an instance: its own; a node: every failure
    domain with a GPU on it): what a spare must replace."""

    @property
    def holds(self) -> bool:
        return self.meets and self.meets_after

    @property
    def num_gpus(self) -> int:
        return sum(self.gpus.values())

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "lost": self.lost, "gpus": self.gpus, "at_s": self.at_s,
                "attainment": self.attainment, "attainment_after": self.attainment_after,
                "meets": self.meets, "meets_after": self.meets_after, "holds": self.holds,
                "num_lost": self.num_lost, "num_retried_requests": self.num_retried_requests,
                "num_failed": self.num_failed,
                "spare_cost_per_hour": self.spare_cost_per_hour,
                "spare_cost_per_million_output_tokens":
                    self.spare_cost_per_million_output_tokens, "roles": self.roles}


@dataclass(frozen=True)
class NPlusOne:
    """Whether the recommendation keeps its SLO when it loses one instance or one node."""

    candidate: str
    rate_per_s: float
    """The offered rate of the checks: the operating point, at most goodput."""
    rate_basis: str
    """Where that rate comes from: the target rate, the scenario's own traffic, or goodput."""
    max_retries: int
    """How many times clients retry a lost request in these runs."""
    instance: LossCheck | None
    """The worst instance to lose (each role's first instance is tried)."""
    node: LossCheck | None
    """The node whose loss takes down the most instances."""
    tried: tuple[LossCheck, ...] = ()
    """Every loss simulated, the worst ones included."""
    notes: tuple[str, ...] = ()
    """Checks that could not run, and why."""

    @property
    def holds(self) -> bool:
        return all(c.holds for c in (self.instance, self.node) if c is not None)

    def meets(self, requirement: str) -> bool:
        """Whether it survives what ``requirement`` (plan.require) asks; a loss that could
        not be simulated is no survival."""
        if self.instance is None or not self.instance.holds:
            return False
        return requirement == "n_plus_one_instance" or self.holds

    def to_json(self) -> dict[str, Any]:
        return {"candidate": self.candidate, "rate_per_s": self.rate_per_s,
                "rate_basis": self.rate_basis,
                "max_retries": self.max_retries, "holds": self.holds,
                "instance": None if self.instance is None else self.instance.to_json(),
                "node": None if self.node is None else self.node.to_json(),
                "tried": [c.to_json() for c in self.tried], "notes": list(self.notes)}


@dataclass(frozen=True)
class Tie:
    """The top of the ranking was a statistical tie, broken by a stated rule."""

    tied: tuple[str, ...]
    """The candidates tied with the best by goodput (the chosen one first)."""
    by_goodput: str
    """The one the mean goodput alone would have chosen."""
    rule: str
    """The rule that chose among them, in words."""
    reasons: tuple[str, ...] = ()
    """Why they are tied (a gain under the tolerance, draws that cannot tell them apart)."""

    @property
    def why(self) -> str:
        return " or ".join(self.reasons) or "a statistical tie"

    def chose(self, result: CandidateResult | None) -> bool:
        """Whether ``result`` (the recommendation) is the tie's choice; plan.require may have
        recommended another."""
        return result is not None and result.id == self.tied[0]

    def to_json(self) -> dict[str, Any]:
        return {"tied": list(self.tied), "by_goodput": self.by_goodput, "rule": self.rule,
                "reasons": list(self.reasons)}


@dataclass(frozen=True)
class Repair:
    """A candidate that lost its SLO with a part lost, with one more of that part: what
    became of it."""

    of: str
    """The candidate repaired."""
    candidate: str
    """The repaired one."""
    added: str
    """What was added, in words (one more decode instance, one more server's instances)."""
    num_gpus: int
    outcome: str
    """survives | fails | over_budget | pruned | short | outranked"""
    detail: str
    """The outcome in words, with its figures."""

    def to_json(self) -> dict[str, Any]:
        return {"of": self.of, "candidate": self.candidate, "added": self.added,
                "num_gpus": self.num_gpus, "outcome": self.outcome, "detail": self.detail}


@dataclass(frozen=True)
class Survival:
    """``plan.require: [n_plus_one]``: the ranked candidates checked until one survives, and
    the repairs of those that did not (one more of what their loss broke)."""

    unconstrained: str
    """The best candidate without the requirement."""
    requirement: str
    """n_plus_one (an instance and a node) or n_plus_one_instance."""
    failed: tuple[NPlusOne, ...]
    """The checks of the better-ranked candidates that did not survive, best first."""
    met: bool
    """Some candidate survived (it is the recommendation)."""
    num_checked: int = 0
    """How many ranked candidates were checked."""
    repairs: tuple[Repair, ...] = ()
    """Every repair tried, in the order tried."""
    survivor: str | None = None
    """The candidate that survived (the recommendation), when one did."""

    def to_json(self) -> dict[str, Any]:
        return {"unconstrained": self.unconstrained, "requirement": self.requirement,
                "met": self.met, "survivor": self.survivor, "num_checked": self.num_checked,
                "failed": [n1.to_json() for n1 in self.failed],
                "repairs": [r.to_json() for r in self.repairs]}


@dataclass(frozen=True)
class Generation:
    """One GPU generation's plan, as the comparison reads it."""

    gpu: str
    best: CandidateResult | None
    """Its plan's recommendation (None: none of its layouts met the SLO and the plan's
    requirements)."""
    price_usd_per_gpu_hour: float | None
    price_source: str | None
    shortfall: str | None = None
    """Why it cannot be named the cheapest: unpriced, no layout meets the SLO, short of the
    target (None: it can)."""
    answer: tuple[str, ...] = ()
    """Its own plan's short answer."""
    serve_commands: tuple[str, ...] = ()
    """The launch lines of its best layout."""
    num_simulations: int = 0
    num_candidates: int = 0

    @property
    def eligible(self) -> bool:
        return self.shortfall is None

    @property
    def cost_per_hour(self) -> float | None:
        if self.best is None or self.price_usd_per_gpu_hour is None:
            return None
        return self.best.candidate.num_gpus * self.price_usd_per_gpu_hour

    @property
    def cost_per_million_output_tokens(self) -> float | None:
        """$ per 1M output tokens of its best layout at goodput (the run of the median draw's
        highest passing probe), at this generation's price."""
        at = None if self.best is None else self.best.at_goodput
        if at is None or self.price_usd_per_gpu_hour is None:
            return None
        return cost_per_million_tokens({self.gpu: self.best.candidate.num_gpus},
                                       {self.gpu: self.price_usd_per_gpu_hour},
                                       at.throughput.output_tokens_per_s or 0.0)

    @property
    def tokens_per_dollar(self) -> float | None:
        """Output tokens per dollar per req/s of goodput: a draw's goodput times this is its
        output tokens per dollar (the run at goodput's tokens per request, this price)."""
        r, cost = self.best, self.cost_per_hour
        at = None if r is None else r.at_goodput
        tokens = None if at is None else at.throughput.output_tokens_per_s
        rate = None if r is None else r.at_goodput_rate_per_s
        if not tokens or not rate or not cost:
            return None
        return tokens / rate * 3600.0 / cost

    def cost_interval(self) -> tuple[float, float] | None:
        """$ per 1M output tokens at the ends of its goodput's 95 % interval (the dearer end
        infinite where the interval reaches zero)."""
        g, scale = (None if self.best is None else self.best.goodput), self.tokens_per_dollar
        if g is None or scale is None or len(g.per_seed_per_s) < 2:
            return None
        return (1e6 / (g.high_per_s * scale),
                1e6 / (g.low_per_s * scale) if g.low_per_s > 0 else math.inf)

    def to_json(self) -> dict[str, Any]:
        r = self.best
        at = None if r is None else r.at_goodput
        ci = self.cost_interval()
        return {
            "gpu": self.gpu, "eligible": self.eligible, "shortfall": self.shortfall,
            "price_usd_per_gpu_hour": self.price_usd_per_gpu_hour,
            "price_source": self.price_source,
            "best": None if r is None else r.id,
            "label": None if r is None else r.candidate.label(),
            "num_gpus": None if r is None else r.candidate.num_gpus,
            "goodput_per_s": None if r is None or r.goodput is None else r.goodput.mean_per_s,
            "goodput_per_gpu": None if r is None else r.goodput_per_gpu,
            "operating_rate_per_s": None if r is None else r.operating_rate_per_s,
            "tokens_per_s_per_user": None if at is None else at.tokens_per_s_per_user,
            "cost_per_hour": self.cost_per_hour,
            "cost_per_million_output_tokens": self.cost_per_million_output_tokens,
            "cost_per_million_output_tokens_ci95": None if ci is None else [
                ci[0], None if math.isinf(ci[1]) else ci[1]],
            "answer": list(self.answer), "serve_commands": list(self.serve_commands),
            "num_simulations": self.num_simulations, "num_candidates": self.num_candidates,
        }


@dataclass(frozen=True)
class Generations:
    """The comparison: every generation in the plan's order, and the one named."""

    entries: tuple[Generation, ...]
    winner: str | None
    """The GPU named: the cheapest per 1M output tokens of those eligible, or the tie rule's
    choice among those tied with it (None: none is eligible)."""
    by_cost: str | None = None
    """The cheapest by the figure alone (the winner unless a tie was broken)."""
    tied: tuple[str, ...] = ()
    """The generations statistically tied with the cheapest, the winner first (empty: no
    tie)."""
    tie_reasons: tuple[str, ...] = ()
    tolerance: float = 0.02
    ranking: tuple[str, ...] = field(default_factory=tuple)
    """The eligible generations, cheapest first."""
    objective: str = "max_goodput_per_gpu"
    """The plans' objective: how each generation's best layout was chosen."""
    rule: str = ""
    """The tie rule that chose among the tied, in words (empty: no tie)."""

    def entry(self, gpu: str) -> Generation:
        return next(g for g in self.entries if g.gpu == gpu)

    @property
    def gpus(self) -> tuple[str, ...]:
        return tuple(g.gpu for g in self.entries)

    def to_json(self) -> dict[str, Any]:
        return {"gpus": list(self.gpus), "objective": self.objective, "winner": self.winner,
                "by_cost": self.by_cost, "ranking": list(self.ranking), "tied": list(self.tied),
                "tie_reasons": list(self.tie_reasons), "tie_rule": self.rule or None,
                "tolerance": self.tolerance,
                "entries": [g.to_json() for g in self.entries]}


@dataclass(frozen=True)
class PlanResult:
    scenario: str
    objective: str
    criterion: str
    target_rate_per_s: float | None
    gpu_budget: int | None
    base_rate_per_s: float
    seeds: tuple[int, ...]
    tolerance: float
    candidates: Collection[CandidateResult]
    """The ledger: every candidate's row, in its order (a :class:`Ledger` from the planner,
    which makes the rows as they are read: iterate it, do not index it)."""
    recommended: CandidateResult | None
    runner_up: CandidateResult | None
    """The best candidate of another layout kind than the recommendation's (one of
    ``best``)."""
    split_verdict: SplitVerdict | None
    pareto: tuple[str, ...]
    """Candidate ids on the front of output tokens/s per GPU vs tokens/s per user."""
    answer: str
    """The recommendation, or why there is none and what would make it feasible, in prose."""
    serve_commands: tuple[str, ...] = ()
    bench_command: str | None = None
    num_simulations: int = 0
    """Every simulation the plan ran (bisection probes, the keep-or-reject pair, the cliff
    and N+1 checks)."""
    num_simulated_requests: int = 0
    """The requests those simulations served, all together."""
    prices: dict[str, dict[str, Any]] = field(default_factory=dict)
    """GPU id -> {usd_per_gpu_hour, source} as used."""
    n_plus_one: NPlusOne | None = None
    """The recommendation with one instance and one node lost (None: no recommendation, or
    the check was not asked for)."""
    runner_up_n_plus_one: NPlusOne | None = None
    """The same check of the best alternative of the other layout kind."""
    headroom: float = 0.0
    """plan.headroom: the share of the lowest draw's goodput kept in reserve."""
    tie: Tie | None = None
    """Set when the recommendation was one of a statistical tie."""
    survival: Survival | None = None
    """Set when the plan requires surviving a loss (plan.require)."""
    traffic_notes: tuple[str, ...] = ()
    """Properties of the traffic that hold at every rate (requests refused for their
    length)."""
    day: DayPlan | None = None
    """The recommendation over a day of traffic (``plan.traffic_curve``)."""
    sensitivity: Sensitivity | None = None
    """The recommendation's readings on another KV fabric and a busier day
    (``plan.sensitivity``)."""
    best: dict[str, str] = field(default_factory=dict)
    """The plan's pick of each layout kind simulated (colocated, disaggregated, three_pool ->
    candidate id), chosen once by the ranking that chose the recommendation (which is the pick
    of its own kind): the printout, plan.json, the report and its figures name these."""
    chosen_by: str = ""
    """What chose the recommendation, in words (the objective, a tie rule, a requirement)."""
    handoff_budget_s: float | None = None
    """plan.handoff_budget_s: the KV handoff p95's budget."""
    memory_note: str | None = None
    """A plan that tries CPU KV tier sizes: the best deployment with a tier and the best
    without, and which buys the SLO cheaper (a sentence of the answer)."""
    answer_parts: tuple[str, ...] = ()
    """``answer`` by topic, one or a few sentences each (``answer`` joins them; the report
    lists them); not in ``plan.json``, which holds ``answer``."""
    short_answer: tuple[str, ...] = ()
    """The answer in a few lines: what to deploy, what it serves, what it costs, whether it
    survives a loss, and the best alternative; the printout and the report open with them."""
    generations: Generations | None = None
    """``plan.gpus``: every GPU generation's best layout and the cheapest per token named
    (this plan is the winner's, its ledger every generation's candidates)."""

    def best_of(self, layout: str) -> CandidateResult | None:
        """The plan's pick of ``layout`` (``best``), or None."""
        cid = self.best.get(layout)
        return None if cid is None else self.by_id(cid)

    @property
    def measured(self) -> tuple[CandidateResult, ...]:
        """The rows with a measured goodput (simulated or infeasible), in the ledger's order:
        a handful, where the ledger holds every candidate the plan weighed."""
        rows = self.candidates
        if isinstance(rows, Ledger | Ledgers):
            rows = rows.measured
        return tuple(r for r in rows if r.goodput is not None)

    def by_id(self, candidate_id: str) -> CandidateResult:
        for c in self.measured:
            if c.id == candidate_id:
                return c
        return next(c for c in self.candidates if c.id == candidate_id)

    def to_json(self, candidates: bool = True) -> dict[str, Any]:
        """``plan.json`` as a dict (``candidates=False``: with an empty ledger, for
        :meth:`json_chunks`, which writes it one candidate at a time)."""
        verdict = self.split_verdict
        return {
            "scenario": self.scenario,
            "objective": self.objective,
            "criterion": self.criterion,
            "target_rate_per_s": self.target_rate_per_s,
            "gpu_budget": self.gpu_budget,
            "base_rate_per_s": self.base_rate_per_s,
            "seeds": list(self.seeds),
            "tolerance": self.tolerance,
            "num_simulations": self.num_simulations,
            "num_simulated_requests": self.num_simulated_requests,
            "short_answer": list(self.short_answer),
            "answer": self.answer,
            "recommended": None if self.recommended is None else self.recommended.id,
            "chosen_by": self.chosen_by,
            "runner_up": None if self.runner_up is None else self.runner_up.id,
            "best": dict(self.best),
            "handoff_budget_s": self.handoff_budget_s,
            "split_verdict": None if verdict is None else verdict.to_json(),
            "pareto": list(self.pareto),
            "serve_commands": list(self.serve_commands),
            "bench_command": self.bench_command,
            "prices": self.prices,
            "n_plus_one": None if self.n_plus_one is None else self.n_plus_one.to_json(),
            "runner_up_n_plus_one": None if self.runner_up_n_plus_one is None
            else self.runner_up_n_plus_one.to_json(),
            "headroom": self.headroom,
            "tie": None if self.tie is None else self.tie.to_json(),
            "survival": None if self.survival is None else self.survival.to_json(),
            "traffic_notes": list(self.traffic_notes),
            "candidates": [c.to_json() for c in self.candidates] if candidates else [],
        } | ({} if self.generations is None else {"generations": self.generations.to_json()}
             ) | ({} if self.day is None else {"day": self.day.to_json()}) | (
            {} if self.sensitivity is None else {"sensitivity": self.sensitivity.to_json()})

    def json_chunks(self) -> Iterator[str]:
        """The text of ``json.dumps(self.to_json(), indent=2)``, in pieces, one candidate's at
        a time: a plan of a thousand GPUs weighs about a million candidates, whose dicts and
        text at once took ten times the planner's memory."""
        yield "{"
        for i, (key, value) in enumerate(self.to_json(candidates=False).items()):
            yield ("," if i else "") + "\n  " + json.dumps(key) + ": "
            if key == "candidates" and self.candidates:
                yield "["
                for k, c in enumerate(self.candidates):
                    text = json.dumps(c.to_json(), indent=2)
                    yield ("," if k else "") + "\n    " + text.replace("\n", "\n    ")
                yield "\n  ]"
            else:  # (json escapes a newline inside a string: each one here is layout)
                yield json.dumps(value, indent=2).replace("\n", "\n  ")
        yield "\n}"


LEDGER_COLUMNS = (
    "id", "label", "layout", "status", "num_gpus", "pd_ratio", "max_num_batched_tokens",
    "enable_chunked_prefill", "screen_per_s", "goodput_per_s", "goodput_low_per_s",
    "goodput_high_per_s", "goodput_lower_per_s", "goodput_quality", "operating_rate_per_s",
    "goodput_per_gpu", "attainment_plus5", "attainment_plus10", "ttft_p50_s", "ttft_p90_s",
    "ttft_p99_s", "tpot_p50_s", "tpot_p90_s", "tpot_p99_s", "itl_p50_s", "itl_p90_s", "itl_p99_s",
    "attainment", "output_tokens_per_s_per_gpu", "tokens_per_s_per_user", "cost_per_hour",
    "cost_per_million_output_tokens", "binding", "reason", "notes",
)


def ledger_rows(result: PlanResult) -> Iterator[tuple[Any, ...]]:
    """One row per candidate, in the ledger's order (``LEDGER_COLUMNS``), made as read."""
    for c in result.candidates:
        g, s = c.goodput, c.at_goodput
        figures: list[Any] = []
        for key in ("ttft_s", "tpot_s", "itl_s"):
            d = getattr(s, key) if s is not None else None
            figures += [None if d is None else getattr(d, p) for p in ("p50", "p90", "p99")]
        by_factor = {round(point.factor, 2): point.attainment for point in c.cliff}
        cliff = [by_factor.get(1.05), by_factor.get(1.1)]
        yield (
            c.id, c.candidate.label(), c.candidate.layout, c.status, c.candidate.num_gpus,
            c.candidate.pd_ratio, c.candidate.max_num_batched_tokens,
            c.candidate.enable_chunked_prefill, c.screen_per_s,
            None if g is None else g.mean_per_s, None if g is None else g.low_per_s,
            None if g is None else g.high_per_s, None if g is None else g.lower_per_s,
            None if g is None else g.quality, c.operating_rate_per_s, c.goodput_per_gpu,
            *cliff, *figures,
            None if s is None or s.slo is None else s.slo.attainment,
            None if s is None else s.output_tokens_per_s_per_gpu,
            None if s is None else s.tokens_per_s_per_user,
            c.cost_per_hour, c.cost_per_million_output_tokens, c.binding, c.reason,
            "; ".join(c.notes) or None,
        )
