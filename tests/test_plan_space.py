"""The planner's search space made one candidate at a time: the same sizes, in the same order,
as every combination of instance counts filtered by the budget rule, without making the
combinations that the rule drops."""

from __future__ import annotations

import itertools
import time
from types import SimpleNamespace

import pytest

from clustersim.plan.space import Candidate, PoolChoice, fill_budget

ROLES = {1: ("colocated",), 2: ("prefill", "decode"), 3: ("prefill", "decode", "colocated")}


def family(*tps: int) -> Candidate:
    layout = {1: "colocated", 2: "disaggregated", 3: "three_pool"}[len(tps)]
    pools = tuple(PoolChoice(role, "h100-sxm", tp, 1)
                  for role, tp in zip(ROLES[len(tps)], tps, strict=True))
    return Candidate(layout, pools, None, True)


def plan_with(instances: dict[str, list[int] | None]) -> SimpleNamespace:
    return SimpleNamespace(**{role: SimpleNamespace(instances=instances.get(role))
                              for role in ("colocated", "prefill", "decode")})


def every_combination(fam: Candidate, budget: int, plan) -> list[tuple[int, ...]]:
    """The rule spelled out: every combination of counts, kept when it fits the budget and
    (unless every pool's counts are the plan's) leaves no room for the smallest pool."""
    pools = fam.pools
    tps = [p.tensor_parallel_size for p in pools]
    given = [getattr(plan, p.role).instances for p in pools]
    ranges = [list(dict.fromkeys(g)) if g else range(1, (budget - sum(tps) + tp) // tp + 1)
              for g, tp in zip(given, tps, strict=True)]
    explicit = all(given)
    kept = []
    for counts in itertools.product(*ranges):
        used = sum(n * tp for n, tp in zip(counts, tps, strict=True))
        if used <= budget and (explicit or budget - used < min(tps)):
            kept.append(counts)
    return kept


def counts_of(candidates) -> list[tuple[int, ...]]:
    return [tuple(p.instances for p in c.pools) for c in candidates]


@pytest.mark.parametrize("tps", [(1, 1), (2, 1), (1, 4), (8, 2), (1, 1, 1), (2, 1, 4),
                                 (4, 4, 8), (1, 8, 2)])
@pytest.mark.parametrize("budget", [1, 3, 6, 16, 29])
def test_the_sizes_are_the_filtered_combinations_in_order(tps, budget):
    fam = family(*tps)
    plan = plan_with({})
    assert counts_of(fill_budget(fam, budget, plan)) == every_combination(fam, budget, plan)


@pytest.mark.parametrize("instances", [
    {"prefill": [3, 1, 2]}, {"decode": [2, 2, 1]}, {"prefill": [1, 4], "decode": [2, 1]},
    {"prefill": [5], "decode": [1, 3], "colocated": [2, 2]}, {"colocated": [9, 1]},
])
@pytest.mark.parametrize("tps", [(1, 1, 1), (2, 1, 1), (1, 2, 4)])
def test_the_plans_instance_lists_restrict_the_sizes(instances, tps):
    fam = family(*tps)
    plan = plan_with(instances)
    for budget in (4, 7, 12):
        assert counts_of(fill_budget(fam, budget, plan)) == every_combination(fam, budget, plan)


def test_a_large_budget_is_enumerated_lazily():
    sizes = fill_budget(family(1, 1, 1), 4096, plan_with({}))
    first = next(sizes)
    assert counts_of([first]) == [(1, 1, 4094)]
    started = time.perf_counter()
    count = 1 + sum(1 for _ in itertools.islice(sizes, 99_999))
    assert count == 100_000 and time.perf_counter() - started < 20
