"""``clustersim plan``: screen every candidate, simulate the promising ones, answer.

    scenario + plan:  ->  candidates (space)  ->  analytic screen (ms each; prune, rank)
        ->  goodput bisection per survivor and seed, in rounds on an executor
        ->  the P:D ratios and sizes next to the best of each kind, while they win
        ->  figures at goodput, golden S7 between the best of each kind
        ->  the recommendation, its runner-up, the ledger of every candidate

The planner only decides; simulations run wherever the executor puts them and come back as
run summaries. Everything it reads from them is in ``clustersim.metrics``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

from clustersim.catalog import default_prices, load_gpu, load_model
from clustersim.catalog.specs import ModelSpec
from clustersim.errors import ConfigError
from clustersim.metrics import RunSummary
from clustersim.metrics.goodput import cost_per_million_tokens
from clustersim.plan import answer as answers
from clustersim.plan import n_plus_one, traffic
from clustersim.plan.bisect import RateSearch, mean_interval
from clustersim.plan.compare import common_rate_verdict
from clustersim.plan.estimate import Screen, Screened
from clustersim.plan.executors import Executor
from clustersim.plan.fleet import NodeTemplate, fleet_for, node_templates
from clustersim.plan.result import (
    CandidateResult,
    Goodput,
    PlanResult,
    Probe,
)
from clustersim.plan.space import Candidate, baseline, families, fill_budget, variant
from clustersim.plan.spec import PlanSpec
from clustersim.scenario import SLO, Scenario
from clustersim.workload import resolve_paths
from clustersim.workload.scale import offered_rate

Progress = Callable[[str, int, int], None]
"""(stage, jobs done, jobs known so far)."""

MAX_NEIGHBOUR_ROUNDS = 3
LOCAL_STEP = 1.08
"""First bracketing factor of the seeds after the first, which start at its goodput."""


class Planner:
    """One plan: built from a scenario with a ``plan:`` section, run with :meth:`run`."""

    def __init__(self, scenario: Scenario, executor: Executor,
                 progress: Progress | None = None, n_plus_one: bool = True) -> None:
        """``n_plus_one``: check the recommendation with one instance and one node lost
        (``plan.n_plus_one``; a few more simulations)."""
        if scenario.plan is None:
            raise ConfigError("plan", "the scenario has no plan: section (objective, budget, "
                              "choices); see README 'Planning'")
        if scenario.slo is None:
            raise ConfigError("slo", "a plan needs an slo: the limits goodput is measured "
                              "against")
        base_dir = scenario.base_dir
        workload = resolve_paths(scenario.workload, base_dir) if base_dir else scenario.workload
        self.scenario = scenario.model_copy(update={"workload": workload})
        self.plan: PlanSpec = scenario.plan
        self.slo: SLO = scenario.slo
        self.executor = executor
        self.progress = progress
        self.model: ModelSpec = load_model(scenario.model, path="model")
        self.base_rate = offered_rate(workload, base_dir=base_dir,
                                      block_size=scenario.engine.block_size)
        self.templates: dict[str, NodeTemplate] = node_templates(self.scenario, self.plan)
        self.prices = self._prices()
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
        self.check_n_plus_one = n_plus_one

    # ------------------------------------------------------------- inputs
    def _prices(self) -> dict[str, tuple[float, str]]:
        prices = dict(default_prices())
        for gpu, value in self.plan.prices_usd_per_gpu_hour.items():
            load_gpu(gpu, path=f"plan.prices_usd_per_gpu_hour.{gpu}")
            prices[gpu] = (value, "the scenario's plan.prices_usd_per_gpu_hour")
        return prices

    def _search_gpus(self) -> set[str]:
        """Every GPU type a candidate of this plan may use."""
        gpus = {self.scenario.gpu}
        for role in ("colocated", "prefill", "decode"):
            gpus |= set(getattr(self.plan, role).gpus or ())
        layout = self.scenario.layout
        if layout is not None:
            gpus |= {pool.gpu for pool in layout.pools if pool.gpu}
        return gpus

    def cost_per_hour(self, candidate: Candidate) -> float | None:
        try:
            return sum(n * self.prices[gpu][0] for gpu, n in candidate.gpus_by_type.items())
        except KeyError:
            return None

    # ------------------------------------------------------------- search
    def candidates(self) -> list[Candidate]:
        """Every candidate the plan considers, the scenario's own layout first."""
        plan = self.plan
        out: list[Candidate] = []
        own = baseline(self.scenario)
        if own is not None:
            out.append(own)
        for family in families(plan, self.scenario):
            if plan.objective == "max_goodput_per_gpu":
                assert plan.gpu_budget is not None
                out += fill_budget(family, plan.gpu_budget, plan)
            else:
                assert plan.target_rate_per_s is not None
                sized = self.screen.sized_for(family, plan.target_rate_per_s)
                budget = plan.gpu_budget
                out.append(sized if budget is None or sized.num_gpus <= budget else family)
        seen: set[str] = set()
        unique = []
        for c in out:  # the scenario's own layout comes first and stands for its twin
            key = c.id.removeprefix("baseline/")
            if key not in seen:
                seen.add(key)
                unique.append(c)
        return unique

    def run(self) -> PlanResult:
        plan = self.plan
        screened = [self.screen(c) for c in self.candidates()]
        by_id = {s.candidate.id: s for s in screened}
        survivors = self._survivors(screened)
        measured: dict[str, CandidateResult] = {}
        self._measure(survivors, by_id, measured)
        if plan.search.neighbours:
            for _ in range(MAX_NEIGHBOUR_ROUNDS):
                fresh = [c for c in self._neighbours(measured)
                         if c.id not in measured and c.id not in {s.id for s in survivors}]
                fresh = [c for c in fresh if self._admissible(c)]
                if not fresh:
                    break
                for c in fresh:
                    by_id.setdefault(c.id, self.screen(c))
                fresh = [c for c in fresh if by_id[c.id].reason is None]
                if not fresh:
                    break
                self._measure(fresh, by_id, measured)
        return self._answer(screened, by_id, measured)

    def _admissible(self, candidate: Candidate) -> bool:
        if any(p.instances < 1 for p in candidate.pools):
            return False
        budget = self.plan.gpu_budget
        return budget is None or candidate.num_gpus <= budget

    def _rank_key(self, candidate: Candidate, rate_per_s: float) -> tuple:
        """Smaller is better, by the objective."""
        objective = self.plan.objective
        target = self.plan.target_rate_per_s or 0.0
        if objective == "max_goodput_per_gpu":
            return (-rate_per_s / candidate.num_gpus, candidate.num_gpus, candidate.id)
        meets = rate_per_s >= target
        cost = self.cost_per_hour(candidate)
        size = candidate.num_gpus if objective == "min_gpus" else (cost or math.inf)
        return (not meets, size if meets else -rate_per_s, -rate_per_s, candidate.id)

    def _survivors(self, screened: list[Screened]) -> list[Candidate]:
        keep = self.plan.search.simulate_top
        out: list[Candidate] = []
        for layout in self.plan.layouts:
            ranked = sorted((s for s in screened if s.reason is None and not s.candidate.baseline
                             and s.candidate.layout == layout),
                            key=lambda s: self._rank_key(s.candidate, s.estimate_per_s))
            out += [s.candidate for s in ranked[:keep]]
        own = next((s for s in screened if s.candidate.baseline and s.reason is None), None)
        if own is not None:
            out.insert(0, own.candidate)
        return out

    def _neighbours(self, measured: dict[str, CandidateResult]) -> list[Candidate]:
        """Sizes next to the best simulated candidate of each layout kind: one instance moved
        between the pools (the neighbouring P:D ratios), or one more / one fewer."""
        out: list[Candidate] = []
        budget = self.plan.gpu_budget
        for layout in self.plan.layouts:
            best = self._best([r for r in measured.values()
                               if r.candidate.layout == layout and not r.candidate.baseline])
            if best is None:
                continue
            c = best.candidate
            counts = {p.role: p.instances for p in c.pools}
            if layout == "colocated":
                if self.plan.objective != "max_goodput_per_gpu":
                    out += [c.resized({"colocated": counts["colocated"] + d}) for d in (-1, 1)]
                continue
            if self.plan.objective != "max_goodput_per_gpu" or budget is None:
                out += [c.resized({role: counts[role] + step})
                        for role in counts for step in (-1, 1)]
                continue
            # keep filling the budget: one instance more in a pool, the GPUs it takes out of
            # another (the neighbouring P:D ratios of a split; of each pair in a three-pool)
            tps = {p.role: p.tensor_parallel_size for p in c.pools}
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

    def _best(self, results: list[CandidateResult]) -> CandidateResult | None:
        good = [r for r in results if r.goodput is not None and r.goodput.mean_per_s > 0]
        if not good:
            return None
        return min(good, key=lambda r: self._rank_key(r.candidate, r.goodput.mean_per_s))

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
                 measured: dict[str, CandidateResult]) -> None:
        """Goodput of each candidate, the bisections advancing in rounds (one executor batch
        per round). The first seed of every candidate starts at the screen's estimate; then the
        contenders (see :meth:`_contenders`) get the other seeds, which start at the first
        one's answer with a finer first step (``LOCAL_STEP``), for their interval."""
        settings = self.plan.search
        searches: dict[tuple[str, int], RateSearch] = {}
        errors: dict[str, str] = {}
        for c in candidates:
            start = screened[c.id].estimate_per_s
            if not start > 0 or not math.isfinite(start):
                start = self.base_rate
            searches[c.id, 0] = RateSearch(start, settings.tolerance, settings.max_probes)
        by_id = {c.id: c for c in candidates}
        round_no = 0
        seeded = False
        while True:
            if not seeded and all(searches[c.id, 0].next_rate() is None or c.id in errors
                                  for c in candidates):
                # every first seed has its answer: the contenders get the other seeds
                seeded = True
                for c in self._contenders(candidates, searches, errors, measured):
                    first = searches[c.id, 0]
                    start = first.goodput or first.min_rate
                    for k in range(1, self.num_seeds):
                        searches[c.id, k] = RateSearch(
                            start, settings.tolerance, settings.max_probes, step=LOCAL_STEP,
                            min_rate=first.min_rate, max_rate=first.max_rate)
            batch = [(key, rate) for key, search in searches.items()
                     if key[0] not in errors and (rate := search.next_rate()) is not None]
            if not batch:
                break
            round_no += 1
            jobs = [self._job(by_id[cid], k, rate) for (cid, k), rate in batch]
            for ((cid, k), rate), outcome in zip(batch, self._run_jobs(
                    f"goodput, round {round_no}", jobs), strict=True):
                if isinstance(outcome, str):
                    errors[cid] = outcome
                    continue
                assert outcome.slo is not None
                searches[cid, k].record(rate, outcome.slo.meets, outcome)
        for c in candidates:
            s = screened[c.id]
            if c.id in errors:
                measured[c.id] = CandidateResult(c, "pruned", reason=errors[c.id],
                                                 screen_per_s=s.estimate_per_s,
                                                 screen_binding=s.binding)
                continue
            runs = [searches[c.id, k] for k in range(self.num_seeds) if (c.id, k) in searches]
            measured[c.id] = self._result(c, s, runs)

    def _contenders(self, candidates: list[Candidate], searches: dict[tuple[str, int], RateSearch],
                    errors: dict[str, str], measured: dict[str, CandidateResult]
                    ) -> list[Candidate]:
        """The candidates whose first-seed goodput ranks within ``search.contenders`` of their
        layout kind, among these and those measured before, and the scenario's own layout: the
        ones whose interval can change the answer. The others keep one traffic draw."""
        keep = self.plan.search.contenders
        first = {c.id: searches[c.id, 0].goodput for c in candidates if c.id not in errors}
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
        mean, low, high = mean_interval(values)
        goodput = Goodput(
            per_seed_per_s=tuple(values), mean_per_s=mean, low_per_s=low, high_per_s=high,
            probes=sum(r.num_probes for r in runs),
            converged=all(r.converged for r in runs), capped=any(r.capped for r in runs))
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
            binding=None if above is None else answers.binding_constraint(
                above, self.slo, self.plan.handoff_budget_s),
            cost_per_hour=self.cost_per_hour(c), probes=list(probes)), runs)

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
        return replace(result, at_goodput=at, at_goodput_rate_per_s=runs[k].lo,
                       cost_per_million_output_tokens=cost)

    # ------------------------------------------------------------ answer
    def _answer(self, screened: list[Screened], by_id: dict[str, Screened],
                measured: dict[str, CandidateResult]) -> PlanResult:
        plan = self.plan
        ledger: list[CandidateResult] = []
        for s in [*screened, *(by_id[i] for i in measured if i not in
                               {x.candidate.id for x in screened})]:
            if s.candidate.id in measured:
                ledger.append(measured[s.candidate.id])
            elif s.reason is not None:
                ledger.append(CandidateResult(s.candidate, "pruned", reason=s.reason))
            else:
                ledger.append(CandidateResult(
                    s.candidate, "screened", screen_per_s=s.estimate_per_s,
                    screen_binding=s.binding, cost_per_hour=self.cost_per_hour(s.candidate),
                    reason="ranked below the simulated candidates by the analytic screen"))
        ledger.sort(key=lambda r: (answers.STATUS_ORDER[r.status],
                                   self._rank_key(r.candidate, r.goodput.mean_per_s
                                                  if r.goodput else r.screen_per_s or 0.0)))
        simulated = [r for r in ledger if r.status == "simulated"]
        recommended = self._best(simulated)
        if recommended is not None and not self._qualifies(recommended):
            recommended = None  # nothing reaches the target: say so, name the closest
        runner_up = None
        verdict = None
        if recommended is not None:
            other_kind = [r for r in simulated if _kind(r) != _kind(recommended)]
            runner_up = self._best(other_kind)
            # golden S7 is a second opinion, reported beside the answer; the SLO decides
            verdict = common_rate_verdict(recommended, runner_up, self.plan.handoff_budget_s,
                                          self._job, self._run_jobs)
        pareto = answers.pareto_front(simulated)
        seeds = tuple(self.scenario.seed + k for k in range(self.num_seeds))
        result = PlanResult(
            scenario=self.scenario.name, objective=plan.objective, criterion=self.slo.criterion,
            target_rate_per_s=plan.target_rate_per_s, gpu_budget=plan.gpu_budget,
            base_rate_per_s=self.base_rate, seeds=seeds, tolerance=plan.search.tolerance,
            candidates=tuple(ledger), recommended=recommended, runner_up=runner_up,
            split_verdict=verdict, pareto=pareto, answer="",
            prices={gpu: {"usd_per_gpu_hour": v, "source": src}
                    for gpu, (v, src) in sorted(self.prices.items())
                    if any(gpu in r.candidate.gpus_by_type for r in ledger)},
        )
        if recommended is not None and self.check_n_plus_one:
            result = replace(result, n_plus_one=n_plus_one.check(
                recommended, self.scenario, self.base_rate, self.model,
                {gpu: price for gpu, (price, _) in self.prices.items()},
                self._job, self._run_jobs))
        return replace(
            result,
            num_simulations=self.num_simulations,
            num_simulated_requests=self.num_simulated_requests,
            answer=answers.explain(result, self.slo),
            serve_commands=answers.serve_commands(recommended, self.model, self.scenario),
            bench_command=answers.bench_command(recommended, self.model, self.scenario,
                                                self.traffic),
        )

    def _qualifies(self, result: CandidateResult | None) -> bool:
        """Meets the objective's requirement: some goodput, and the target rate if set."""
        if result is None or result.goodput is None or result.goodput.mean_per_s <= 0:
            return False
        if self.plan.objective == "max_goodput_per_gpu":
            return True
        return result.goodput.mean_per_s >= (self.plan.target_rate_per_s or 0.0)


def _work(job: Scenario) -> int:
    """A rough measure of a job's simulation time: its requests, where the traffic is
    count-bounded (a benchmark's prompts); 0 where the count is only known after the run
    (ties keep their order)."""
    workload = job.workload
    return getattr(workload, "num_requests", None) or getattr(workload, "num_prompts", 0)


def _kind(result: CandidateResult) -> str:
    return result.candidate.layout
