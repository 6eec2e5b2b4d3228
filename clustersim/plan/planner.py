"""``clustersim plan``: screen every candidate, simulate the promising ones, answer.

    scenario + plan:  ->  candidates (space)  ->  analytic screen (ms each; prune, rank)
        ->  goodput bisection per survivor and seed, in rounds on an executor
        ->  the P:D ratios and sizes next to the best of each kind, while they win
        ->  every draw for each candidate that can still win (no one-draw winner)
        ->  the ranking; a statistical tie at its top broken by the tie rule
        ->  the cliff (every draw 5 % and 10 % above goodput) and N+1 at the operating rate,
            for the recommendation and the best of the other kind
        ->  the keep-or-reject rule between the best of each kind, the ledger of every candidate

The operating rate is what a fleet carries: the goodput of its lowest traffic draw (every draw
met the SLO there) less ``plan.headroom``, or the plan's target when that reaches it. min_gpus
and min_cost size on it, so a size that one draw misses is never returned.

The planner only decides; simulations run wherever the executor puts them and come back as
run summaries. Everything it reads from them is in ``clustersim.metrics``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace

from clustersim.catalog import default_prices, host_memory_price, load_gpu, load_model
from clustersim.catalog.specs import ModelSpec
from clustersim.errors import ConfigError
from clustersim.metrics import RunSummary
from clustersim.metrics.goodput import cost_per_million_tokens
from clustersim.plan import answer as answers
from clustersim.plan import headline, n_plus_one, story, traffic
from clustersim.plan.bisect import RateSearch, mean_interval
from clustersim.plan.compare import common_rate_verdict
from clustersim.plan.day import plan_day
from clustersim.plan.estimate import Screen, Screened
from clustersim.plan.executors import Executor
from clustersim.plan.fleet import NodeTemplate, fleet_for, node_templates
from clustersim.plan.ledger import Ledger, ScreenRows
from clustersim.plan.result import (
    CandidateResult,
    Goodput,
    NPlusOne,
    PlanResult,
    Probe,
    Repair,
    Survival,
    Tie,
)
from clustersim.plan.sensitivity import (
    CliffPoint,
    LinkReading,
    Sensitivity,
    link_readings,
    load_reading,
)
from clustersim.plan.space import Candidate, baseline, families, fill_budget, variant
from clustersim.plan.tie import TIE_RULE, tie_reason
from clustersim.scenario import SLO, Scenario
from clustersim.scenario.plan import PlanSpec
from clustersim.workload import resolve_paths
from clustersim.workload.scale import offered_rate

Progress = Callable[[str, int, int], None]
"""(stage, jobs done, jobs known so far)."""

MAX_NEIGHBOUR_ROUNDS = 3
LOCAL_STEP = 1.08
"""First bracketing factor of the seeds after the first, which start at its goodput."""
MAX_DRAW_ROUNDS = 3
"""Rounds that give every draw to the candidates that can still win."""
CLIFF_FACTORS = (1.05, 1.10)
"""Where the cliff is measured: these multiples of the mean goodput, on every draw."""
SHORT_WINDOW = 0.5
"""A passing probe whose arrivals span less than this share of ``search.min_duration_s`` is
too short to judge the SLO (Poisson spans scatter around the asked duration; a squeezed trace
replay falls far below it)."""
MAX_SURVIVAL_CHECKS = 6
"""plan.require: the best candidates checked, in rank order, before giving up."""
MAX_REPAIR_ROUNDS = 2
"""plan.require: how many times a repair that still fails is repaired again."""
UNRANKED = math.inf
"""A ledger row's place among the ranked simulated candidates when it is not one of them."""


class Planner:
    """One plan: built from a scenario with a ``plan:`` section, run with :meth:`run`."""

    def __init__(self, scenario: Scenario, executor: Executor,
                 progress: Progress | None = None, n_plus_one: bool = True,
                 own_layout: bool = True) -> None:
        """``n_plus_one``: check the recommendation with one instance and one node lost
        (``plan.n_plus_one``; a few more simulations). ``own_layout``: the scenario's own
        ``layout:`` is a candidate (a generation it does not run on leaves it out)."""
        if scenario.plan is None:
            raise ConfigError("plan", "the scenario has no plan: section (objective, budget, "
                              "choices); see docs/planning.md")
        if scenario.plan.gpus is not None:
            raise ValueError("plan.gpus plans each generation on its own: "
                             "clustersim.plan.generations.run_plan runs them")
        for role in ("colocated", "prefill", "decode"):
            for i, gpu in enumerate(getattr(scenario.plan, role).gpus or ()):
                load_gpu(gpu, path=f"plan.{role}.gpus[{i}]")
        if scenario.slo is None:
            raise ConfigError("slo", "a plan needs an slo: the limits goodput is measured "
                              "against")
        base_dir = scenario.base_dir
        workload = resolve_paths(scenario.workload, base_dir) if base_dir else scenario.workload
        self.scenario = scenario.model_copy(update={"workload": workload})
        self.plan: PlanSpec = scenario.plan
        self.own_layout = own_layout
        self.slo: SLO = scenario.slo
        self.executor = executor
        self.progress = progress
        self.model: ModelSpec = load_model(scenario.model, path="model")
        self.base_rate = offered_rate(workload, base_dir=base_dir,
                                      block_size=scenario.engine.block_size)
        self.templates: dict[str, NodeTemplate] = node_templates(self.scenario, self.plan)
        self.prices = self._prices()
        self.host_memory_price: tuple[float, str] = (
            (self.plan.price_usd_per_gib_hour_host_memory,
             "the scenario's plan.price_usd_per_gib_hour_host_memory")
            if self.plan.price_usd_per_gib_hour_host_memory is not None
            else host_memory_price())
        """USD per GiB-hour of host memory for CPU KV tiers, and where it comes from."""
        if self.plan.objective == "min_cost":
            missing = sorted(gpu for gpu in self._search_gpus() if gpu not in self.prices)
            if missing:
                raise ConfigError(
                    "plan.prices_usd_per_gpu_hour",
                    f"min_cost needs a price for every GPU it may use; none for "
                    f"{', '.join(missing)} (defaults exist for {', '.join(default_prices())})")
        self.num_seeds = self.plan.search.seeds if traffic.is_random(self.scenario) else 1
        prompts, outputs, arrival_cv = traffic.sample(self.scenario)
        self.screen = Screen(self.scenario, self.model, (prompts, outputs), arrival_cv,
                             self.slo, self.templates, self.base_rate)
        self.traffic = self.screen.traffic
        self.num_simulations = 0
        self.num_simulated_requests = 0
        self.check_n_plus_one = n_plus_one or bool(self.plan.require)
        self._searches: dict[tuple[str, int], RateSearch] = {}
        """Every bisection so far, by (candidate id, seed index)."""
        self._errors: dict[str, str] = {}
        """Candidates whose simulation raised, with the error."""
        self._round = 0

    # ------------------------------------------------------------- inputs
    def _prices(self) -> dict[str, tuple[float, str]]:
        return plan_prices(self.plan)

    def _search_gpus(self) -> set[str]:
        """Every GPU type a candidate of this plan may use."""
        gpus = {self.scenario.gpu}
        for role in ("colocated", "prefill", "decode"):
            gpus |= set(getattr(self.plan, role).gpus or ())
        layout = self.scenario.layout
        if layout is not None and self.own_layout:
            gpus |= {pool.gpu for pool in layout.pools if pool.gpu}
        return gpus

    def cost_per_hour(self, candidate: Candidate) -> float | None:
        return cost_per_hour(candidate, self.prices, self.host_memory_price[0])

    # ------------------------------------------------------------- search
    def candidates(self) -> Iterator[Candidate]:
        """Every candidate the plan considers, one at a time, the scenario's own layout first
        (it stands for its twin among the generated ones). Families repeat only when the
        plan's choices repeat, and a family's sizes are distinct, so one family is made once
        and no list of candidates is ever held."""
        plan = self.plan
        own = baseline(self.scenario) if self.own_layout else None
        twin = None
        if own is not None:
            twin = own.id.removeprefix("baseline/")
            yield own
        made: set[tuple] = set()
        for family in families(plan, self.scenario):
            if family.family in made:
                continue
            made.add(family.family)
            sizes: Iterable[Candidate]
            if plan.objective == "max_goodput_per_gpu":
                assert plan.gpu_budget is not None
                sizes = fill_budget(family, plan.gpu_budget, plan)
            else:
                assert plan.target_rate_per_s is not None
                sized = self.screen.sized_for(family, plan.target_rate_per_s)
                budget = plan.gpu_budget
                sizes = (sized if budget is None or sized.num_gpus <= budget else family,)
            for c in sizes:
                if twin is None or c.id != twin:
                    yield c

    def run(self) -> PlanResult:
        plan = self.plan
        verdicts, chosen = self.screen_space()
        by_id = {s.candidate.id: s for s in chosen}
        survivors = [s.candidate for s in chosen]
        measured: dict[str, CandidateResult] = {}
        self._measure(survivors, by_id, measured)
        if plan.search.neighbours:
            for _ in range(MAX_NEIGHBOUR_ROUNDS):
                fresh = [c for c in self._neighbours(measured)
                         if c.id not in measured and c.id not in {s.id for s in survivors}]
                fresh = [c for c in fresh if self._admissible(c)]
                if not fresh:
                    break
                for c in fresh:  # (the screen is a function of the candidate: the same verdict)
                    by_id.setdefault(c.id, self.screen(c))
                fresh = [c for c in fresh if by_id[c.id].reason is None]
                if not fresh:
                    break
                self._measure(fresh, by_id, measured, self._near(fresh, by_id, measured))
        self._equalise_draws(by_id, measured)
        return self._answer(verdicts, by_id, measured)

    def screen_space(self) -> tuple[ScreenRows, list[Screened]]:
        """Every candidate screened as it is made: the verdicts (the ledger's rows to be) and
        those to simulate, the scenario's own layout first, then the best
        ``search.simulate_top`` of each layout kind by the screen's estimate. Holds no more
        than that in memory (:class:`ScreenRows` spills the verdicts)."""
        plan = self.plan
        verdicts = ScreenRows(self._verdict_key)
        keep = plan.search.simulate_top
        best: dict[str, list[tuple[tuple, Screened]]] = {layout: [] for layout in plan.layouts}
        own: Screened | None = None
        for c in self.candidates():
            s = self._over_budget(c) or self.screen(c)
            verdicts.add(s)
            if s.reason is not None:
                continue
            if c.baseline:
                own = own or s
            elif c.layout in best:
                kept = best[c.layout]
                kept.append((self._rank_key(c, s.estimate_per_s), s))
                if len(kept) > 2 * keep + 64:
                    _keep_smallest(kept, keep)
        chosen = [s for layout in plan.layouts
                  for _, s in _keep_smallest(best[layout], keep)]
        return verdicts, ([own] if own is not None else []) + chosen

    def _verdict_key(self, s: Screened) -> tuple:
        """A screen verdict's place in the ledger, unless its candidate is simulated (see
        :meth:`_answer`): the screened before the pruned, each by rank on the estimate."""
        if s.reason is not None:
            return (answers.STATUS_ORDER["pruned"], UNRANKED, self._rank_key(s.candidate, 0.0))
        return (answers.STATUS_ORDER["screened"], UNRANKED,
                self._rank_key(s.candidate, s.estimate_per_s or 0.0))

    def _over_budget(self, candidate: Candidate) -> Screened | None:
        """The scenario's own layout may be larger than the plan's budget: pruned, not run."""
        budget = self.plan.gpu_budget
        if budget is None or candidate.num_gpus <= budget:
            return None
        return Screened(candidate, 0.0, None, f"uses {candidate.num_gpus} GPUs, over the "
                        f"plan's gpu_budget of {budget}")

    def _admissible(self, candidate: Candidate) -> bool:
        if any(p.instances < 1 for p in candidate.pools):
            return False
        budget = self.plan.gpu_budget
        return budget is None or candidate.num_gpus <= budget

    def _rank_key(self, candidate: Candidate, rate_per_s: float,
                  usable_per_s: float | None = None) -> tuple:
        """Smaller is better, by the objective. ``usable_per_s`` is the rate that must reach
        the target (the operating capacity; default ``rate_per_s``)."""
        objective = self.plan.objective
        target = self.plan.target_rate_per_s or 0.0
        if objective == "max_goodput_per_gpu":
            return (-rate_per_s / candidate.num_gpus, candidate.num_gpus, candidate.id)
        usable = rate_per_s if usable_per_s is None else usable_per_s
        meets = usable >= target
        size = self._size(candidate)
        return (not meets, size if meets else -usable, -rate_per_s, candidate.id)

    def _size(self, candidate: Candidate) -> float:
        """What min_gpus / min_cost minimise."""
        if self.plan.objective == "min_cost":
            cost = self.cost_per_hour(candidate)
            return math.inf if cost is None else cost
        return candidate.num_gpus

    def _usable(self, goodput: Goodput) -> float:
        """The operating capacity: every draw met the SLO there, less the plan's headroom."""
        return goodput.lower_per_s * (1 - self.plan.headroom)

    def _key(self, result: CandidateResult) -> tuple:
        g = result.goodput
        assert g is not None
        return self._rank_key(result.candidate, g.mean_per_s, self._usable(g))

    def _neighbours(self, measured: dict[str, CandidateResult]) -> list[Candidate]:
        """Sizes next to the best simulated candidate of each layout kind: one instance moved
        between the pools (the neighbouring P:D ratios), or one more / one fewer."""
        out: list[Candidate] = []
        budget = self.plan.gpu_budget
        for layout in self.plan.layouts:
            best = self._best_generated(layout, measured)
            if best is None:
                continue
            c = best.candidate
            counts = {p.role: p.instances for p in c.pools}
            if layout == "colocated":
                if self.plan.objective != "max_goodput_per_gpu":
                    out += [c.resized({"colocated": counts["colocated"] + d}) for d in (-1, 1)]
                out += self._tier_neighbours(c)
                continue
            if self.plan.objective != "max_goodput_per_gpu" or budget is None:
                out += [c.resized({role: counts[role] + step})
                        for role in counts for step in (-1, 1)]
                continue
            # keep filling the budget: one instance more in a pool, the GPUs it takes out of
            # another (the neighbouring P:D ratios of a split; of each pair in a three-pool)
            tps = {p.role: p.gpus_per_instance for p in c.pools}
            for grow in counts:
                for shrink in counts:
                    if grow == shrink:
                        continue
                    moved = dict(counts)
                    moved[grow] += 1
                    moved[shrink] -= math.ceil(tps[grow] / tps[shrink])
                    spare = budget - sum(moved[r] * tps[r] for r in moved)
                    moved[shrink] += max(0, spare) // tps[shrink]  # refill what is left over
                    if min(moved.values()) >= 1:
                        out.append(c.resized(moved))
        return out

    def _tier_neighbours(self, c: Candidate) -> list[Candidate]:
        """The best colocated candidate with each other CPU KV tier size of the plan, and
        (min_gpus, min_cost) with one instance fewer too: whether host memory buys the SLO
        with fewer GPUs, or a GPU does it cheaper."""
        out: list[Candidate] = []
        n = c.pool("colocated").instances
        for gib in self.plan.kv_offloading_sizes or ():
            if gib == c.kv_offloading_gib:
                continue
            other = c.with_tier(gib)
            out.append(other)
            if self.plan.objective != "max_goodput_per_gpu" and n > 1:
                out.append(other.resized({"colocated": n - 1}))
        return out

    def _memory_note(self, measured: dict[str, CandidateResult]) -> str | None:
        """Host memory against GPUs (a plan that tries CPU KV tier sizes): the best simulated
        colocated deployment with a tier and the best without one, by the plan's objective,
        and which of the two buys the SLO cheaper (None: the plan tries no tier, or one side
        has no measured candidate)."""
        if not any(self.plan.kv_offloading_sizes or ()):
            return None
        colocated = [r for r in measured.values() if r.candidate.layout == "colocated"]
        with_tier = self._best([r for r in colocated if r.candidate.kv_offloading_gib])
        without = self._best([r for r in colocated if not r.candidate.kv_offloading_gib])
        if with_tier is None or without is None:
            return None
        price, source = self.host_memory_price

        def told(r: CandidateResult) -> str:
            cost = "" if r.cost_per_hour is None else f", ${r.cost_per_hour:,.2f}/h"
            return f"{r.candidate.label()} ({answers.goodput_text(r)}{cost})"

        objective = self.plan.objective
        tier_wins = self._key(with_tier) < self._key(without)
        target = self.plan.target_rate_per_s
        if objective != "max_goodput_per_gpu" and target is not None and not any(
                self._usable(r.goodput) >= target for r in (with_tier, without)
                if r.goodput is not None):
            verdict = f"neither reaches the target of {target:g} req/s"
        elif objective == "max_goodput_per_gpu":
            verdict = ("the tier serves more per GPU" if tier_wins
                       else "the tier adds nothing per GPU")
        else:
            what = "cheaper" if objective == "min_cost" else "with fewer GPUs"
            verdict = (f"host memory buys the SLO {what}" if tier_wins
                       else f"GPUs without a tier buy it {what}")
        return (f"Host memory against GPUs: the best with a CPU KV tier is {told(with_tier)}, "
                f"without one {told(without)}: {verdict} (host memory at ${price:g} per "
                f"GiB-hour: {source}).")

    def _best_generated(self, layout: str, measured: dict[str, CandidateResult]
                        ) -> CandidateResult | None:
        """The best measured candidate of this layout kind the plan generated (not the
        scenario's own): the one whose neighbours are tried next."""
        return self._best([r for r in measured.values()
                           if r.candidate.layout == layout and not r.candidate.baseline])

    def _best(self, results: list[CandidateResult]) -> CandidateResult | None:
        good = [r for r in results if r.goodput is not None and r.goodput.mean_per_s > 0]
        if not good:
            return None
        return min(good, key=self._key)

    # ------------------------------------------------------ simulation
    def _job(self, candidate: Candidate, seed_index: int, rate_per_s: float) -> Scenario:
        base = self.scenario
        topology = base.topology if candidate.baseline else fleet_for(candidate, self.templates)
        scenario = variant(base, candidate, topology)
        return scenario.model_copy(update={
            "seed": base.seed + seed_index,
            "workload": traffic.at_rate(base, self.base_rate, rate_per_s, self.plan.search),
            "faults": None,  # a plan sizes the healthy deployment; N+1 injects its own
        })

    def full_run(self, candidate: Candidate, rate_per_s: float, seed_index: int = 0):
        """The candidate at ``rate_per_s`` with every record kept (steps, token times,
        transfers), as a probe would run it: what a report draws its timelines from."""
        from clustersim.sim import run_scenario

        return run_scenario(self._job(candidate, seed_index, rate_per_s))

    def _run_jobs(self, stage: str, jobs: list[Scenario]) -> list[RunSummary | str]:
        total = len(jobs)
        done = 0
        self.num_simulations += total

        def tick(n: int) -> None:
            nonlocal done
            done += n
            if self.progress is not None:
                self.progress(stage, done, total)

        tick(0)  # the round shows as it starts, not when its first job ends
        # the longest first (by requests), so that a round's last job is a
        # short one and no worker idles long at its end; results come back in the caller's order
        order = sorted(range(total), key=lambda i: -_work(jobs[i]))
        ran = self.executor.map([jobs[i] for i in order], tick)
        outcomes: list[RunSummary | str] = [""] * total
        for i, outcome in zip(order, ran, strict=True):
            outcomes[i] = outcome
        self.num_simulated_requests += sum(o.num_requests for o in outcomes
                                           if not isinstance(o, str))
        return outcomes

    def _measure(self, candidates: list[Candidate], screened: dict[str, Screened],
                 measured: dict[str, CandidateResult],
                 near: dict[str, float] | None = None) -> None:
        """Goodput of each candidate, the bisections advancing in rounds (one executor batch
        per round). The first seed of every candidate starts at the screen's estimate, or
        where ``near`` says with a finer first step (``LOCAL_STEP``); then the contenders (see
        :meth:`_contenders`) get the other seeds, which start at the first one's answer with
        that finer step, for their interval."""
        settings = self.plan.search
        by_id = {c.id: c for c in candidates}
        near = near or {}
        for c in candidates:
            if c.id in near:
                self._searches[c.id, 0] = RateSearch(near[c.id], settings.tolerance,
                                                     settings.max_probes, step=LOCAL_STEP)
                continue
            start = screened[c.id].estimate_per_s
            if not start > 0 or not math.isfinite(start):
                start = self.base_rate
            self._searches[c.id, 0] = RateSearch(start, settings.tolerance, settings.max_probes)
        self._advance([(c.id, 0) for c in candidates], by_id)
        self._advance(self._more_draws(self._contenders(candidates, measured)), by_id)
        for c in candidates:
            measured[c.id] = self._result_of(c, screened[c.id])

    def _near(self, fresh: list[Candidate], screened: dict[str, Screened],
              measured: dict[str, CandidateResult]) -> dict[str, float]:
        """Where each neighbour's first bisection starts: the measured goodput of the best
        candidate of its layout kind (the one it neighbours), times the screen's ratio of the
        two. The screen is often off in level for a whole family (queueing it does not model)
        and much less in the change one instance makes, so the search starts near its answer
        and brackets it in a finer step."""
        out: dict[str, float] = {}
        for layout in {c.layout for c in fresh}:
            best = self._best_generated(layout, measured)
            if best is None or (best.id, 0) not in self._searches:
                continue
            goodput = self._searches[best.id, 0].goodput
            base = screened[best.id].estimate_per_s
            for c in fresh:
                estimate = screened[c.id].estimate_per_s
                if c.layout == layout and goodput > 0 and base > 0 and math.isfinite(
                        estimate) and estimate > 0:
                    out[c.id] = goodput * estimate / base
        return out

    def _more_draws(self, candidates: list[Candidate]) -> list[tuple[str, int]]:
        """Start the seeds each candidate lacks, at its first seed's goodput."""
        settings = self.plan.search
        keys = []
        for c in candidates:
            first = self._searches[c.id, 0]
            start = first.goodput or first.min_rate
            for k in range(1, self.num_seeds):
                if (c.id, k) not in self._searches:
                    self._searches[c.id, k] = RateSearch(
                        start, settings.tolerance, settings.max_probes, step=LOCAL_STEP,
                        min_rate=first.min_rate, max_rate=first.max_rate)
                    keys.append((c.id, k))
        return keys

    def _advance(self, keys: list[tuple[str, int]], by_id: dict[str, Candidate]) -> None:
        """Run these bisections to their end, all of them in each round."""
        while True:
            batch = [(key, rate) for key in keys if key[0] not in self._errors
                     and (rate := self._searches[key].next_rate()) is not None]
            if not batch:
                return
            self._round += 1
            jobs = [self._job(by_id[cid], k, rate) for (cid, k), rate in batch]
            for ((cid, k), rate), outcome in zip(batch, self._run_jobs(
                    f"goodput, round {self._round}", jobs), strict=True):
                if isinstance(outcome, str):
                    self._errors[cid] = outcome
                    continue
                assert outcome.slo is not None
                self._searches[cid, k].record(rate, outcome.slo.meets, outcome,
                                              outcome.slo.margin)

    def _result_of(self, c: Candidate, s: Screened) -> CandidateResult:
        if c.id in self._errors:
            return CandidateResult(c, "pruned", reason=self._errors[c.id],
                                   screen_per_s=s.estimate_per_s, screen_binding=s.binding)
        runs = [self._searches[c.id, k] for k in range(self.num_seeds)
                if (c.id, k) in self._searches]
        return self._result(c, s, runs)

    def _equalise_draws(self, screened: dict[str, Screened],
                        measured: dict[str, CandidateResult]) -> None:
        """Every candidate that can still win gets every draw before it is ranked: one whose
        one-draw goodput would rank at or above the lower interval bound of the best fully
        drawn candidate, overall or of its own layout kind (the best alternative is ranked
        too). A one-draw figure never outranks an interval it might tie with."""
        if self.num_seeds == 1:
            return
        for _ in range(MAX_DRAW_ROUNDS):
            good = [r for r in measured.values() if r.status == "simulated"
                    and r.goodput is not None and r.goodput.mean_per_s > 0]
            full = [r for r in good if len(r.goodput.per_seed_per_s) == self.num_seeds]
            overall = min(full, key=self._key, default=None)
            short = []
            for r in good:
                if len(r.goodput.per_seed_per_s) == self.num_seeds:
                    continue
                own = min((f for f in full if _kind(f) == _kind(r)), key=self._key,
                          default=None)
                if any(bar is None or self._could_tie(r, bar) for bar in (overall, own)):
                    short.append(r)
            if not short:
                return
            by_id = {r.id: r.candidate for r in short}
            self._advance(self._more_draws(list(by_id.values())), by_id)
            for cid, c in by_id.items():
                measured[cid] = self._result_of(c, screened[cid])

    def _could_tie(self, challenger: CandidateResult, best: CandidateResult) -> bool:
        """Whether ``challenger``'s goodput, taken as sure, ranks at or above ``best``'s lower
        interval bound (or within the tolerance of its mean), each judged on its own operating
        capacity where a target decides."""
        g, b = challenger.goodput, best.goodput
        assert g is not None and b is not None
        low = min(b.low_per_s, b.mean_per_s * (1 - self.plan.search.tolerance))
        return (self._rank_key(challenger.candidate, g.mean_per_s, self._usable(g))
                <= self._rank_key(best.candidate, low, self._usable(b)))

    def _contenders(self, candidates: list[Candidate], measured: dict[str, CandidateResult]
                    ) -> list[Candidate]:
        """The candidates whose first-seed goodput ranks within ``search.contenders`` of their
        layout kind, among these and those measured before, and the scenario's own layout: the
        ones whose interval can change the answer. The others keep one traffic draw (unless
        they can still win: :meth:`_equalise_draws`)."""
        if self.num_seeds == 1:
            return []
        keep = self.plan.search.contenders
        first = {c.id: self._searches[c.id, 0].goodput for c in candidates
                 if c.id not in self._errors}
        pool = {**{r.id: (r.candidate, r.goodput.per_seed_per_s[0]) for r in measured.values()
                   if r.goodput is not None},
                **{c.id: (c, first[c.id]) for c in candidates if c.id in first}}
        chosen: set[str] = set()
        for layout in {c.layout for c, _ in pool.values()}:
            ranked = sorted((v for v in pool.values() if v[0].layout == layout and v[1] > 0),
                            key=lambda v: self._rank_key(v[0], v[1]))
            chosen |= {c.id for c, _ in ranked[:keep]}
        return [c for c in candidates if c.id in first and (c.id in chosen or c.baseline)
                and first[c.id] > 0]

    def _result(self, c: Candidate, s: Screened, runs: list[RateSearch]) -> CandidateResult:
        values = [r.goodput for r in runs]
        mean, low, high = mean_interval(values, widths=[r.bracket_width for r in runs])
        goodput = Goodput(
            per_seed_per_s=tuple(values), mean_per_s=mean, low_per_s=low, high_per_s=high,
            probes=sum(r.num_probes for r in runs),
            converged=all(r.converged for r in runs), capped=any(r.capped for r in runs),
            short_window_s=self._short_window(runs))
        probes = sorted(
            Probe(k, rate, outcome.slo.attainment, *outcome.slo.attainment_interval, met,
                  outcome.num_requests)
            for k, run in enumerate(runs)
            for met, pairs in ((True, run.passed), (False, run.failed))
            for rate, outcome in pairs)
        first = runs[0]
        above = first.outcome_at(first.hi)
        infeasible = all(r.infeasible for r in runs)
        status = "infeasible" if infeasible else "simulated"
        reason = None
        if infeasible and above is not None:
            reason = answers.trickle_failure(above, self.slo)
        return self._figures(CandidateResult(
            c, status, reason=reason, screen_per_s=s.estimate_per_s, screen_binding=s.binding,
            goodput=goodput, above_goodput=above,
            above_goodput_rate_per_s=None if above is None else first.hi,
            binding=None if above is None else answers.binding_constraint(
                above, self.slo, self.plan.handoff_budget_s),
            cost_per_hour=self.cost_per_hour(c), probes=list(probes),
            operating_rate_per_s=self._operating_rate(goodput)), runs)

    def _short_window(self, runs: list[RateSearch]) -> float | None:
        """The shortest arrival window of the draws' passing probes at goodput, when it is
        too short to judge the SLO: under ``SHORT_WINDOW`` of ``search.min_duration_s`` (a
        trace replay keeps its own span, so a high rate squeezes it), else None."""
        need = self.plan.search.min_duration_s * SHORT_WINDOW
        windows = [outcome.window_s for r in runs if r.lo is not None
                   and (outcome := r.outcome_at(r.lo)) is not None]
        shortest = min(windows, default=None)
        return shortest if shortest is not None and shortest < need else None

    def _operating_rate(self, goodput: Goodput) -> float:
        """The rate the deployment will carry: the plan's target where its operating capacity
        reaches it, else that capacity (the lowest draw's goodput less the headroom)."""
        usable = self._usable(goodput)
        target = self.plan.target_rate_per_s
        return target if target is not None and usable >= target else usable

    def _rate_basis(self, result: CandidateResult) -> str:
        g = result.goodput
        assert g is not None and result.operating_rate_per_s is not None
        if result.operating_rate_per_s == self.plan.target_rate_per_s:
            return "the target rate"
        draws = ("its traffic draw's goodput" if len(g.per_seed_per_s) == 1
                 else "the lowest of its traffic draws' goodputs")
        if self.plan.headroom:
            return f"{draws} less the plan's {self.plan.headroom:.0%} headroom"
        return draws

    def _figures(self, result: CandidateResult, runs: list[RateSearch]) -> CandidateResult:
        """The figures a review reads: the run at the median seed's goodput (its highest
        passing probe, a run that met the SLO), and the cost per token there."""
        passing = sorted((r.goodput, k) for k, r in enumerate(runs) if r.lo is not None)
        if not passing:
            return result
        _, k = passing[(len(passing) - 1) // 2]
        at = runs[k].outcome_at(runs[k].lo)
        tokens = at.throughput.output_tokens_per_s or 0.0
        gpus = result.candidate.gpus_by_type
        price = {gpu: self.prices[gpu][0] for gpu in gpus if gpu in self.prices}
        cost = (cost_per_million_tokens(gpus, price, tokens) if len(price) == len(gpus)
                else None)
        if cost is not None and result.candidate.kv_offloading_gib and tokens > 0:
            cost += (result.candidate.host_memory_gib * self.host_memory_price[0]
                     / (tokens * 3600.0) * 1e6)  # (the CPU tiers' host memory, likewise)
        return replace(result, at_goodput=at, at_goodput_rate_per_s=runs[k].lo,
                       cost_per_million_output_tokens=cost)

    # ------------------------------------------------------------ answer
    def _answer(self, verdicts: ScreenRows, by_id: dict[str, Screened],
                measured: dict[str, CandidateResult]) -> PlanResult:
        plan = self.plan
        ranked, tie = self._ranked(measured)
        checks: dict[str, NPlusOne | None] = {}
        survival = None
        recommended = ranked[0] if ranked else None
        if recommended is not None and plan.require:
            recommended, survival = self._survivor(ranked, checks, by_id, measured)
            if survival.repairs:  # the repairs measured join the ranking
                ranked, tie = self._ranked(measured)
        rows = dict(measured)
        simulated = [r for r in rows.values() if r.status == "simulated"]
        best: dict[str, str] = {}
        runner_up = None
        if recommended is not None:
            best = story.best_of_each_kind(recommended, ranked, simulated, self._best)
            runner_up = next((rows[cid] for kind, cid in best.items()
                              if kind != _kind(recommended)), None)
        shown = [r for r in (recommended, runner_up) if r is not None]
        if self.check_n_plus_one:
            for r in shown:
                if r.id not in checks:
                    checks[r.id] = self._n_plus_one(r)
        for cid, points in self._cliffs(shown).items():
            rows[cid] = replace(rows[cid], cliff=points)
        for cid, summary in self._at_operating([rows[cid] for cid in best.values()]).items():
            rows[cid] = replace(rows[cid], at_operating=summary)
        for cid, notes in _coincidences(simulated).items():
            rows[cid] = replace(rows[cid], notes=rows[cid].notes + notes)
        if tie is not None:
            for cid in tie.tied:
                rows[cid] = replace(rows[cid], notes=rows[cid].notes + (
                    f"statistical tie for first among {len(tie.tied)} candidates",))
        recommended = None if recommended is None else rows[recommended.id]
        runner_up = None if runner_up is None else rows[runner_up.id]
        order = {r.id: i for i, r in enumerate(ranked)}
        if recommended is not None:
            order[recommended.id] = -1
        ledger = Ledger(
            [((answers.STATUS_ORDER[r.status], order.get(r.id, UNRANKED),
               self._key(r) if r.goodput is not None and r.goodput.mean_per_s > 0
               else self._rank_key(r.candidate, r.screen_per_s or 0.0)), r)
             for r in rows.values()],
            verdicts, VerdictRow(self.prices, self.host_memory_price[0]),
            skip=[self._verdict_key(by_id[cid]) for cid in rows if cid in by_id])
        gpus = verdicts.gpus | {p.gpu for r in rows.values() for p in r.candidate.pools}
        # the keep-or-reject rule for a split is a second opinion beside the answer
        verdict = common_rate_verdict(
            rows.get(best.get("colocated", "")), rows.get(best.get("disaggregated", "")),
            self.plan.handoff_budget_s, plan.search.tolerance, self._job, self._run_jobs)
        pareto = answers.pareto_front([r for r in ledger.measured if r.status == "simulated"])
        sensitivity = self._sensitivity(recommended, runner_up)
        seeds = tuple(self.scenario.seed + k for k in range(self.num_seeds))
        result = PlanResult(
            scenario=self.scenario.name, objective=plan.objective, criterion=self.slo.criterion,
            target_rate_per_s=plan.target_rate_per_s, gpu_budget=plan.gpu_budget,
            base_rate_per_s=self.base_rate, seeds=seeds, tolerance=plan.search.tolerance,
            candidates=ledger, recommended=recommended, runner_up=runner_up,
            split_verdict=verdict, pareto=pareto, answer="",
            prices={gpu: {"usd_per_gpu_hour": v, "source": src}
                    for gpu, (v, src) in sorted(self.prices.items())
                    if gpu in gpus},
            n_plus_one=None if recommended is None else checks.get(recommended.id),
            runner_up_n_plus_one=None if runner_up is None else checks.get(runner_up.id),
            headroom=plan.headroom, tie=tie, survival=survival,
            traffic_notes=answers.length_refusals(recommended or next(
                (r for r in ledger.measured if r.at_goodput is not None), None)),
            best=best, handoff_budget_s=plan.handoff_budget_s,
        )
        result = replace(result, chosen_by=story.chosen_by(result),
                         memory_note=self._memory_note(measured))
        parts = answers.answer_parts(result, self.slo)
        return replace(
            result,
            num_simulations=self.num_simulations,
            num_simulated_requests=self.num_simulated_requests,
            answer=" ".join(parts),
            answer_parts=tuple(parts),
            short_answer=headline.short_answer(result, self.slo),
            serve_commands=answers.serve_commands(recommended, self.model, self.scenario),
            bench_command=answers.bench_command(recommended, self.model, self.scenario,
                                                self.traffic),
            sensitivity=sensitivity,
            day=None if plan.traffic_curve is None else plan_day(
                plan.traffic_curve, recommended, target=self.slo.attainment_target,
                default_peak=plan.target_rate_per_s or self.base_rate,
                base_dir=self.scenario.base_dir),
        )

    def _sensitivity(self, rec: CandidateResult | None,
                     runner_up: CandidateResult | None) -> Sensitivity | None:
        """``plan.sensitivity``'s readings of the recommendation (:mod:`.sensitivity`); the
        link's of the best split when the recommendation is colocated."""
        asked = self.plan.sensitivity
        if not asked or rec is None or rec.goodput is None:
            return None

        def job_of(c: Candidate) -> Callable[[int, float], Scenario]:
            return lambda k, rate: self._job(c, k, rate)

        notes: list[str] = []
        link: tuple[LinkReading, ...] = ()
        split = rec if rec.candidate.layout != "colocated" else runner_up
        if "link" in asked:
            if split is None or split.candidate.layout == "colocated" or split.goodput is None:
                split = None
                notes.append("KV links: no split was simulated, and a colocated deployment "
                             "moves no KV between instances")
            else:
                if split is not rec:
                    notes.append(f"KV links: read on the best split, {split.candidate.label()}"
                                 ", as the colocated recommendation moves no KV")
                settings = self.plan.search
                searches = [self._searches[split.id, k] for k in range(self.num_seeds)
                            if (split.id, k) in self._searches]
                link = link_readings(job_of(split.candidate), self._run_jobs,
                                     list(split.goodput.per_seed_per_s), searches,
                                     settings.tolerance, settings.max_probes, LOCAL_STEP)
        load = None
        if "load" in asked and rec.operating_rate_per_s:
            load = load_reading(job_of(rec.candidate), self._run_jobs,
                                rec.operating_rate_per_s, len(rec.goodput.per_seed_per_s))
        return Sensitivity(rec.id, rec.goodput.mean_per_s, link,
                           None if not link or split is None else split.id, load, tuple(notes))

    def _qualifies(self, result: CandidateResult | None) -> bool:
        """Meets the objective's requirement: some goodput on every draw, and the target
        rate, at the operating capacity, if set."""
        g = None if result is None else result.goodput
        if g is None or g.lower_per_s <= 0:
            return False  # a draw that meets the SLO at no rate: nothing to operate at
        if self.plan.objective == "max_goodput_per_gpu":
            return True
        # an upper bound (a window too short to judge) cannot prove that a target is reached
        return g.short_window_s is None and self._usable(g) >= (
            self.plan.target_rate_per_s or 0.0)

    # ------------------------------------------------------ judgement
    def _break_tie(self, ranked: list[CandidateResult]
                   ) -> tuple[list[CandidateResult], Tie | None]:
        """When the best by goodput is statistically tied with others (it wins by less than
        the tolerance, or the draws cannot tell them apart; same size where size is the
        objective), ``TIE_RULE`` chooses among them and the answer says so."""
        if len(ranked) < 2:
            return ranked, None
        top = ranked[0]
        why = {r.id: reason for r in ranked[1:] if (reason := self._tied(top, r)) is not None}
        group = [top, *(r for r in ranked[1:] if r.id in why)]
        if len(group) == 1:
            return ranked, None
        chosen = min(group, key=self._tie_key)
        reasons = tuple(dict.fromkeys(why.values()))
        tie = Tie(tied=(chosen.id, *(r.id for r in group if r is not chosen)),
                  by_goodput=top.id, rule=TIE_RULE, reasons=reasons)
        return [chosen, *(r for r in ranked if r is not chosen)], tie

    def _tied(self, best: CandidateResult, other: CandidateResult) -> str | None:
        """Why ``best`` is statistically tied with ``other``, or None (:func:`tie_reason`, on
        goodput per GPU, or on goodput between candidates of one size where size is the
        objective: different sizes never tie)."""
        a, b = best.goodput, other.goodput
        assert a is not None and b is not None
        if self.plan.objective != "max_goodput_per_gpu":
            if self._size(best.candidate) != self._size(other.candidate):
                return None
            return tie_reason(a, 1.0, b, 1.0, self.plan.search.tolerance)
        return tie_reason(a, 1 / best.candidate.num_gpus, b, 1 / other.candidate.num_gpus,
                          self.plan.search.tolerance)

    def _tie_key(self, r: CandidateResult) -> tuple:
        g = r.goodput
        assert g is not None
        cost = r.cost_per_hour if r.cost_per_hour is not None else math.inf
        per = g.mean_per_s / (r.candidate.num_gpus
                              if self.plan.objective == "max_goodput_per_gpu" else 1)
        return (len(r.candidate.pools), cost, r.candidate.num_gpus, -per, r.id)

    def _n_plus_one(self, r: CandidateResult) -> NPlusOne | None:
        if r.operating_rate_per_s is None:
            return None
        return n_plus_one.check(
            r, r.operating_rate_per_s, self._rate_basis(r), self.scenario, self.model,
            {gpu: price for gpu, (price, _) in self.prices.items()}, self._job, self._run_jobs)

    def _ranked(self, measured: dict[str, CandidateResult]
                ) -> tuple[list[CandidateResult], Tie | None]:
        """The simulated candidates that qualify, best first, a tie at the top broken."""
        ranked = sorted((r for r in measured.values()
                         if r.status == "simulated" and self._qualifies(r)), key=self._key)
        return self._break_tie(ranked)

    def _check(self, r: CandidateResult, checks: dict[str, NPlusOne | None]
               ) -> NPlusOne | None:
        if r.id not in checks:
            checks[r.id] = self._n_plus_one(r)
        return checks[r.id]

    def _survivor(self, ranked: list[CandidateResult], checks: dict[str, NPlusOne | None],
                  screened: dict[str, Screened], measured: dict[str, CandidateResult]
                  ) -> tuple[CandidateResult | None, Survival]:
        """``plan.require``: the best candidate that keeps its SLO with one instance (and one
        node) lost. The ranked candidates are checked in order (at most
        ``MAX_SURVIVAL_CHECKS``) until one survives; each one that fails on the way is
        repaired, one more of what its loss broke (:meth:`_repairs_of`), and each repair that
        could still rank above the survivor is measured like any candidate (every traffic
        draw) and checked in turn, its own failures repaired again, up to
        ``MAX_REPAIR_ROUNDS`` times. The best survivor by the objective is the answer."""
        requirement = self.plan.require[0]
        failed: list[NPlusOne] = []
        repairs: list[Repair] = []
        survivor: CandidateResult | None = None
        pending: list[tuple[CandidateResult, Candidate, str]] = []
        remaining = list(ranked)
        seen: set[str] = set()
        num_checked = 0
        while remaining and num_checked < MAX_SURVIVAL_CHECKS:
            r = remaining.pop(0)
            if r.goodput is not None and len(r.goodput.per_seed_per_s) < self.num_seeds:
                # a candidate is judged on every draw before it can be the answer: drawn
                # again, it may rank lower (or no longer reach the target)
                self._draw_fully([r.candidate], screened, measured)
                r = measured[r.id]
                if self._qualifies(r):
                    remaining = sorted([*remaining, r], key=self._key)
                continue
            num_checked += 1
            seen.add(r.id)
            n1 = self._check(r, checks)
            if n1 is not None and n1.meets(requirement):
                survivor = r
                break
            if n1 is not None:
                failed.append(n1)
                pending += self._repairs_of(r, n1, requirement)
        for _ in range(MAX_REPAIR_ROUNDS):
            todo: list[tuple[CandidateResult, Candidate, str]] = []
            for origin, c, added in pending:
                if c.id in seen:
                    continue
                seen.add(c.id)
                note = self._repair_refused(c, survivor)
                if note is not None:
                    repairs.append(Repair(origin.id, c.id, added, c.num_gpus, *note))
                    continue
                todo.append((origin, c, added))
            pending = []
            if not todo:
                break
            fresh = [c for _, c, _ in todo if c.id not in measured]
            for c in fresh:
                screened.setdefault(c.id, self.screen(c))
            runnable = {c.id: c for c in fresh if screened[c.id].reason is None}
            if runnable:
                self._measure(list(runnable.values()), screened, measured)
            # every draw for each repair, measured now or before (as one that can still win)
            self._draw_fully([c for _, c, _ in todo], screened, measured)
            tried = []
            for origin, c, added in todo:
                why = screened[c.id].reason if c.id in screened else None
                if c.id not in measured:
                    repairs.append(Repair(origin.id, c.id, added, c.num_gpus, "pruned",
                                          f"{c.label()} cannot run: {why}"))
                    continue
                tried.append((measured[c.id], origin, added))
            tried.sort(key=lambda t: self._key(t[0]) if t[0].goodput is not None
                       else (math.inf, t[0].id))
            for res, origin, added in tried:
                label = res.candidate.label()
                if not self._qualifies(res):
                    repairs.append(Repair(origin.id, res.id, added, res.candidate.num_gpus,
                                          "short", f"{label} {self._shortfall(res)}"))
                    continue
                if survivor is not None and self._key(res) >= self._key(survivor):
                    repairs.append(Repair(
                        origin.id, res.id, added, res.candidate.num_gpus, "outranked",
                        f"{label} ranks below {survivor.candidate.label()}, which survives"))
                    continue
                n1 = self._check(res, checks)
                if n1 is not None and n1.meets(requirement):
                    survivor = res
                    repairs.append(Repair(origin.id, res.id, added, res.candidate.num_gpus,
                                          "survives", f"{label} keeps its SLO with "
                                          f"{_lost_parts(n1)} lost"))
                    continue
                repairs.append(Repair(origin.id, res.id, added, res.candidate.num_gpus,
                                      "fails", f"{label} still loses its SLO: "
                                      f"{_failures(n1, requirement)}"))
                if n1 is not None:
                    pending += self._repairs_of(res, n1, requirement)
        return survivor, Survival(
            ranked[0].id, requirement, tuple(failed), survivor is not None, num_checked,
            repairs=tuple(repairs), survivor=None if survivor is None else survivor.id)

    def _draw_fully(self, candidates: list[Candidate], screened: dict[str, Screened],
                    measured: dict[str, CandidateResult]) -> None:
        """Every traffic draw for each of these measured candidates."""
        drawn = {c.id: c for c in candidates if (c.id, 0) in self._searches
                 and c.id not in self._errors}
        self._advance(self._more_draws(list(drawn.values())), drawn)
        for cid, c in drawn.items():
            measured[cid] = self._result_of(c, screened[cid])

    def _repairs_of(self, r: CandidateResult, n1: NPlusOne, requirement: str
                    ) -> list[tuple[CandidateResult, Candidate, str]]:
        """The smallest additions that could make ``r`` survive what it failed: for each loss
        that broke its SLO, one more of what was lost (an instance of that pool; for a
        server, as many instances of each pool as the server held). Under a full budget with
        ``max_goodput_per_gpu``, a split also tries the same instance bought with the GPUs of
        the other pool (its neighbouring P:D ratio)."""
        c = r.candidate
        counts = {p.role: p.instances for p in c.pools}
        out: list[tuple[CandidateResult, Candidate, str]] = []
        for check in n1.tried:
            if check.holds or (check.kind == "node" and requirement == "n_plus_one_instance"):
                continue
            grow = {role: n for role, n in check.roles.items() if role in counts}
            if not grow:
                continue
            added = (f"one more {next(iter(grow))} instance"
                     if check.kind == "instance" else
                     "one more server's instances (" + ", ".join(
                         f"{n} {role}" for role, n in grow.items()) + ")")
            out.append((r, c.resized({role: counts[role] + n for role, n in grow.items()}),
                        added))
            budget = self.plan.gpu_budget
            if (budget is not None and self.plan.objective == "max_goodput_per_gpu"
                    and c.layout == "disaggregated" and check.kind == "instance"):
                (role,) = grow
                tps = {p.role: p.gpus_per_instance for p in c.pools}
                other = next(x for x in counts if x != role)
                moved = {role: counts[role] + 1,
                         other: counts[other] - math.ceil(tps[role] / tps[other])}
                if moved[other] >= 1:
                    out.append((r, c.resized(moved), f"one more {role} instance in place of "
                                f"{counts[other] - moved[other]} {other}"))
        return out

    def _repair_refused(self, c: Candidate, survivor: CandidateResult | None
                        ) -> tuple[str, str] | None:
        """Why a repair is not simulated: over the budget, or unable to rank above the
        survivor already found (by the size the objective minimises)."""
        budget = self.plan.gpu_budget
        if budget is not None and c.num_gpus > budget:
            return ("over_budget", f"{c.label()} needs {c.num_gpus} GPUs, over the plan's "
                    f"gpu_budget of {budget}")
        if (survivor is not None and self.plan.objective != "max_goodput_per_gpu"
                and self._size(c) > self._size(survivor.candidate)):
            what = ("costs more per hour than" if self.plan.objective == "min_cost"
                    else "needs more GPUs than")
            return ("outranked", f"{c.label()} {what} {survivor.candidate.label()}, which "
                    "survives")
        return None

    def _shortfall(self, r: CandidateResult) -> str:
        """Why a measured candidate does not qualify, in words."""
        g = r.goodput
        if g is None or g.lower_per_s <= 0:
            return "meets the SLO at no rate on some traffic draw"
        target = self.plan.target_rate_per_s or 0.0
        return (f"carries {self._usable(g):,.2f} req/s on its lowest draw, short of the target "
                f"{target:g}")

    def _at_operating(self, results: list[CandidateResult]) -> dict[str, RunSummary]:
        """Each result's run at its operating rate on the seed of its run at goodput (one
        executor batch; the run at goodput itself where the two rates are one)."""
        out: dict[str, RunSummary] = {}
        work = []
        for r in results:
            at, rate = r.at_goodput, r.operating_rate_per_s
            if at is None or rate is None or not rate > 0:
                continue
            if rate == r.at_goodput_rate_per_s:
                out[r.id] = at
            else:
                work.append((r, rate, at.seed - self.scenario.seed))
        if work:
            outcomes = self._run_jobs("the answer's layouts at their operating rates",
                                      [self._job(r.candidate, k, rate) for r, rate, k in work])
            for (r, _, _), outcome in zip(work, outcomes, strict=True):
                if not isinstance(outcome, str):
                    out[r.id] = outcome
        return out

    def _cliffs(self, results: list[CandidateResult]) -> dict[str, tuple[CliffPoint, ...]]:
        """Every draw of each result at ``CLIFF_FACTORS`` times its mean goodput (one executor
        batch): whether attainment slides or falls just past the edge."""
        work = [(r, f, k) for r in results
                if r.goodput is not None and r.goodput.measured and r.goodput.mean_per_s > 0
                for f in CLIFF_FACTORS for k in range(len(r.goodput.per_seed_per_s))]
        if not work:
            return {}
        jobs = [self._job(r.candidate, k, r.goodput.mean_per_s * f) for r, f, k in work]
        outcomes = self._run_jobs("cliff: 5 % and 10 % above goodput", jobs)
        seen: dict[tuple[str, float], list[tuple[float, bool]]] = {}
        for (r, f, _), outcome in zip(work, outcomes, strict=True):
            if isinstance(outcome, str) or outcome.slo is None:
                continue
            seen.setdefault((r.id, f), []).append((outcome.slo.attainment or 0.0,
                                                    outcome.slo.meets))
        out: dict[str, tuple[CliffPoint, ...]] = {}
        for r in results:
            points = []
            for f in CLIFF_FACTORS:
                got = seen.get((r.id, f))
                if got:
                    assert r.goodput is not None
                    points.append(CliffPoint(f, r.goodput.mean_per_s * f,
                                             tuple(a for a, _ in got),
                                             sum(1 for _, met in got if met)))
            if points:
                out[r.id] = tuple(points)
        return out


def _coincidences(results: list[CandidateResult]) -> dict[str, tuple[str, ...]]:
    """Different candidates with the same goodput on every draw, explained in the ledger:
    goodput is the highest passing probe, so the same probed rates with the same verdicts give
    the same figure to the last digit (their attainments there tell them apart)."""
    groups: dict[tuple[float, ...], list[CandidateResult]] = {}
    for r in results:
        if r.goodput is not None and r.goodput.mean_per_s > 0:
            groups.setdefault(r.goodput.per_seed_per_s, []).append(r)
    notes: dict[str, tuple[str, ...]] = {}
    for group in groups.values():
        if len(group) < 2:
            continue
        for r in group:
            others = ", ".join(o.candidate.label() for o in group if o is not r)
            at = r.at_goodput
            attainment = ("" if at is None or at.slo is None
                          else f"; its own attainment there {at.slo.attainment:.1%}")
            notes[r.id] = (f"same goodput on every draw as {others}: the bisections probed the "
                           f"same rates with the same verdicts{attainment}",)
    return notes


def plan_prices(plan: PlanSpec) -> dict[str, tuple[float, str]]:
    """GPU id -> ($ per GPU-hour, source): the catalog's snapshots, the plan's own over them."""
    prices = dict(default_prices())
    for gpu, value in plan.prices_usd_per_gpu_hour.items():
        load_gpu(gpu, path=f"plan.prices_usd_per_gpu_hour.{gpu}")
        prices[gpu] = (value, "the scenario's plan.prices_usd_per_gpu_hour")
    return prices


def cost_per_hour(candidate: Candidate, prices: dict[str, tuple[float, str]],
                  host_memory_usd_per_gib_hour: float = 0.0) -> float | None:
    """USD per hour of the candidate's GPUs and of its CPU KV tiers' host memory (None: a GPU
    without a price)."""
    try:
        gpus = sum(n * prices[gpu][0] for gpu, n in candidate.gpus_by_type.items())
    except KeyError:
        return None
    if not candidate.kv_offloading_gib:
        return gpus
    return gpus + candidate.host_memory_gib * host_memory_usd_per_gib_hour


@dataclass(frozen=True)
class VerdictRow:
    """The ledger row of a candidate the plan did not simulate: what the screen said."""

    prices: dict[str, tuple[float, str]]
    host_memory_usd_per_gib_hour: float = 0.0

    def __call__(self, s: Screened) -> CandidateResult:
        c = s.candidate
        if s.reason is not None:
            return CandidateResult(c, "pruned", reason=s.reason)
        return CandidateResult(
            c, "screened", screen_per_s=s.estimate_per_s, screen_binding=s.binding,
            cost_per_hour=cost_per_hour(c, self.prices, self.host_memory_usd_per_gib_hour),
            reason="ranked below the simulated candidates by the analytic screen")


def _keep_smallest(kept: list[tuple[tuple, Screened]], n: int) -> list[tuple[tuple, Screened]]:
    """Sort by key and keep the first ``n`` (keys are unique: the candidate id ends them)."""
    kept.sort(key=lambda item: item[0])
    del kept[n:]
    return kept


def _work(job: Scenario) -> int:
    """A rough measure of a job's simulation time: its requests, where the traffic is
    count-bounded (a benchmark's prompts); 0 where the count is only known after the run
    (ties keep their order)."""
    workload = job.workload
    return getattr(workload, "num_requests", None) or getattr(workload, "num_prompts", 0)


def _kind(result: CandidateResult) -> str:
    return result.candidate.layout


def _lost_parts(n1: NPlusOne) -> str:
    """What the checks took down, in words (decode-0 or node1)."""
    return " or ".join(c.lost for c in (n1.instance, n1.node) if c is not None) or "a part"


def _failures(n1: NPlusOne | None, requirement: str) -> str:
    """The losses that broke the SLO (those the requirement counts), each with its attainment
    after the failure."""
    if n1 is None:
        return "its loss could not be simulated"
    parts = [f"losing {c.lost} leaves {c.attainment_after or 0.0:.1%} within it"
             for c in n1.tried if not c.holds
             and (c.kind == "instance" or requirement != "n_plus_one_instance")]
    return "; ".join(parts) or "a loss could not be simulated (" + "; ".join(n1.notes) + ")"
