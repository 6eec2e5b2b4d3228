"""Run a scenario's plan: one :class:`Planner`, or with ``plan.gpus`` one per GPU generation,
their answers side by side.

    plan.gpus [h100-sxm, h200, b200]
        -> every generation checked before any simulation (a known GPU; a price where the
           objective ranks by cost; at least one priced generation to rank)
        -> each generation's plan in turn on the one executor: the scenario with every pool
           on that GPU (its own layout a candidate only on the generation it runs on)
        -> the comparison (clustersim.plan.generations)
        -> the winner's plan, every generation's candidates in its ledger, the comparison in
           its answer

The winner's plan answers as a plan of one generation does (its best of each layout kind,
split rule, N+1, launch lines); the other generations are there beside it.
"""

from __future__ import annotations

from dataclasses import replace

from clustersim.catalog import default_prices, load_gpu
from clustersim.errors import ConfigError
from clustersim.plan import answer as answers
from clustersim.plan import headline, story
from clustersim.plan.executors import Executor
from clustersim.plan.generations import compare, sentence, shortfall
from clustersim.plan.ledger import Ledgers
from clustersim.plan.outcome import outcome_of
from clustersim.plan.planner import Planner, Progress, plan_prices
from clustersim.plan.result import Generation, Generations, PlanResult
from clustersim.scenario import Scenario


def run_plan(scenario: Scenario, executor: Executor, progress: Progress | None = None,
             n_plus_one: bool = True) -> tuple[PlanResult, Planner]:
    """The scenario's plan and the planner whose candidates its answer names (the winning
    generation's; the first one's when none wins)."""
    plan = scenario.plan
    if plan is None or plan.gpus is None:
        planner = Planner(scenario, executor, progress, n_plus_one)
        return planner.run(), planner
    planners = generation_planners(scenario, executor, progress, n_plus_one)
    results = {gpu: p.run() for gpu, p in planners.items()}
    result = combine(scenario, results)
    winner = result.generations.winner if result.generations is not None else None
    return result, planners[winner or next(iter(planners))]


def generation_scenario(scenario: Scenario, gpu: str) -> tuple[Scenario, bool]:
    """The scenario with every pool on ``gpu``, and whether its own ``layout:`` runs on it
    (then it is a candidate of this generation's plan, as in any plan)."""
    plan = scenario.plan
    assert plan is not None
    own = scenario.layout
    keeps = own is not None and all((p.gpu or scenario.gpu) == gpu for p in own.pools)
    return scenario.model_copy(update={
        "gpu": gpu, "plan": plan.model_copy(update={"gpus": None})}), keeps


def generation_planners(scenario: Scenario, executor: Executor, progress: Progress | None,
                        n_plus_one: bool) -> dict[str, Planner]:
    """One planner per generation, every input checked before the first simulation."""
    plan = scenario.plan
    assert plan is not None and plan.gpus is not None
    for i, gpu in enumerate(plan.gpus):
        load_gpu(gpu, path=f"plan.gpus[{i}]")
    prices = plan_prices(plan)
    unpriced = [(i, gpu) for i, gpu in enumerate(plan.gpus) if gpu not in prices]
    if unpriced and plan.objective == "min_cost":
        i, gpu = unpriced[0]
        raise ConfigError(f"plan.gpus[{i}]", f"{gpu} has no price, and min_cost ranks by "
                          f"cost: set plan.prices_usd_per_gpu_hour.{gpu} (defaults exist for "
                          f"{', '.join(default_prices())})")
    if len(unpriced) == len(plan.gpus):
        raise ConfigError("plan.gpus", f"none of {', '.join(plan.gpus)} has a price, and the "
                          "generations are ranked by cost per token: set "
                          "plan.prices_usd_per_gpu_hour (defaults exist for "
                          f"{', '.join(default_prices())})")
    planners = {}
    for gpu in plan.gpus:
        variant, keeps = generation_scenario(scenario, gpu)
        planners[gpu] = Planner(variant, executor, _prefixed(progress, gpu), n_plus_one,
                                own_layout=keeps)
    return planners


def _prefixed(progress: Progress | None, gpu: str) -> Progress | None:
    if progress is None:
        return None
    return lambda stage, done, total: progress(f"{gpu}: {stage}", done, total)


def combine(scenario: Scenario, results: dict[str, PlanResult]) -> PlanResult:
    """The generations' plans as one answer: the winner's plan with every generation's
    candidates, prices and simulations, the comparison, and the answer told again with it."""
    plan, slo = scenario.plan, scenario.slo
    assert plan is not None and slo is not None
    prices = plan_prices(plan)
    entries = []
    for gpu, r in results.items():
        price = prices.get(gpu)
        entries.append(Generation(
            gpu, r.recommended, None if price is None else price[0],
            None if price is None else price[1],
            shortfall(gpu, r, None if price is None else price[0], outcome_of(r).headline),
            answer=r.short_answer, serve_commands=r.serve_commands,
            num_simulations=r.num_simulations, num_candidates=len(r.candidates)))
    comparison = compare(entries, plan.objective, plan.search.tolerance)
    first = next(iter(results.values()))
    base = results[comparison.winner] if comparison.winner is not None else _without_answer(
        first)
    ledger = Ledgers([r.candidates for r in results.values()])
    simulated = [r for r in ledger.measured if r.status == "simulated"]
    result = replace(
        base, candidates=ledger, generations=comparison,
        prices={gpu: p for r in results.values() for gpu, p in r.prices.items()},
        num_simulations=sum(r.num_simulations for r in results.values()),
        num_simulated_requests=sum(r.num_simulated_requests for r in results.values()),
        pareto=answers.pareto_front(simulated),
        traffic_notes=base.traffic_notes or first.traffic_notes)
    result = replace(result, chosen_by=story.chosen_by(result))
    parts = (answers.answer_parts(result, slo) if result.recommended is not None
             else [sentence(comparison), *(_sentence_of(r) for r in results.values())])
    return replace(result, answer=" ".join(parts), answer_parts=tuple(parts),
                   short_answer=(headline.short_answer(result, slo)
                                 if result.recommended is not None
                                 else _no_winner_lines(comparison)))


def _without_answer(result: PlanResult) -> PlanResult:
    """A generation's plan stripped of its own recommendation: the frame of an answer that
    names no generation."""
    return replace(result, recommended=None, runner_up=None, split_verdict=None, best={},
                   tie=None, survival=None, n_plus_one=None, runner_up_n_plus_one=None,
                   serve_commands=(), bench_command=None, sensitivity=None, day=None)


def _sentence_of(result: PlanResult) -> str:
    return result.short_answer[0] if result.short_answer else result.answer


def _no_winner_lines(comparison: Generations) -> tuple[str, ...]:
    """The short answer when no generation can be named: why, one generation a line."""
    lines = ["No generation can be named the cheapest that meets the SLO and the plan's "
             "target:"]
    lines += [f"{e.gpu}: {e.shortfall}" for e in comparison.entries]
    if len(lines) > 5:  # at most five lines: the rest of the generations on the last one
        lines = [*lines[:4], "; ".join(lines[4:])]
    return tuple(lines)
