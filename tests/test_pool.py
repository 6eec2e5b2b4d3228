"""Prompt pools (``workload.kind: prompt_pool``): the pool's prefix-cache keys, its draws, and
the hit rate a big enough cache gives once every prompt has been seen."""

from __future__ import annotations

from typing import Any

import numpy as np

from clustersim.scenario import parse_scenario
from clustersim.sim import run_scenario
from clustersim.workload import build_requests, build_workload
from clustersim.workload.pool import draw_pool
from tests.helpers import scenario

FIXED_STEP = {"kind": "fixed", "step_time_s": 0.01}


def pool(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "kind": "prompt_pool", "num_groups": 3, "num_prompts_per_group": 4,
        "system_prompt_tokens": 100, "question_tokens": {"kind": "uniform", "low": 5,
                                                         "high": 60},
        "output_tokens": 4, "arrivals": {"kind": "poisson", "rate_per_s": 2},
        "num_requests": 60,
    }
    return {**base, **fields}


def spec_of(data: dict[str, Any], **fields: Any):
    return parse_scenario(scenario(workload=data, cost=FIXED_STEP, **fields))


def test_a_prompt_drawn_again_has_the_same_keys_and_its_group_the_system_prompts():
    spec = spec_of(pool())
    requests = build_requests(spec.workload, np.random.default_rng(spec.seed))
    prompt_ids = draw_pool(spec.workload, 60, _after_arrivals(spec)).prompt_ids.tolist()
    assert len(set(prompt_ids)) == 12  # 60 draws cycle through all 12
    for a, pa in zip(requests, prompt_ids, strict=True):
        assert len(a.block_hashes) == a.num_prompt_tokens // 16  # full blocks only
        for b, pb in zip(requests, prompt_ids, strict=True):
            if pa == pb:
                assert a.block_hashes == b.block_hashes
            elif pa // 4 == pb // 4:  # one group: its 100-token system prompt's 6 blocks
                assert a.block_hashes[:6] == b.block_hashes[:6]
                if len(a.block_hashes) > 6 and len(b.block_hashes) > 6:
                    assert a.block_hashes[6] != b.block_hashes[6]
            else:
                assert a.block_hashes[0] != b.block_hashes[0]


def test_cycle_sends_the_shuffled_pool_in_order_and_random_draws_any_prompt():
    spec = spec_of(pool(num_requests=30)).workload
    draw = draw_pool(spec, 30, np.random.default_rng(1))
    ids = draw.prompt_ids.tolist()
    assert sorted(ids[:12]) == list(range(12))  # each prompt once per pass
    assert ids[12:24] == ids[:12] and ids[24:] == ids[:6]
    spec = spec_of(pool(num_requests=30, order="random")).workload
    ids = draw_pool(spec, 30, np.random.default_rng(1)).prompt_ids.tolist()
    assert all(0 <= i < 12 for i in ids) and ids[12:24] != ids[:12]


def test_same_seed_same_requests_different_seed_different():
    spec = spec_of(pool()).workload

    def fingerprint(seed: int):
        return [(r.request_id, r.arrival_s, r.num_prompt_tokens, r.max_tokens, r.block_hashes)
                for r in build_requests(spec, np.random.default_rng(seed))]

    assert fingerprint(3) == fingerprint(3)
    assert fingerprint(3) != fingerprint(4)
    built = build_workload(spec, np.random.default_rng(3), on_arrival=True)
    assert [(r.request_id, r.block_hashes) for r in map(built._build, range(60))] == [
        (f[0], f[4]) for f in fingerprint(3)]


def test_after_warm_up_the_hit_rate_is_the_pools_share_of_cached_tokens():
    """Once every prompt has been sent, a cache that holds the whole pool hits every full
    block of a prompt but the one holding its last token (vLLM computes at least one):
    request i hits 16 x floor((P_i - 1) / 16) tokens, so a pass over the pool hits
    sum_k 16 floor((P_k - 1) / 16) / sum_k P_k of its prompt tokens."""
    data = scenario(workload=pool(num_requests=48, arrivals={"kind": "poisson",
                                                             "rate_per_s": 1}),
                    cost=FIXED_STEP, engine={"enable_prefix_caching": True})
    spec = parse_scenario(data)
    result = run_scenario(spec)
    requests = sorted(result.requests, key=lambda r: int(r.request_id))
    draw = draw_pool(spec.workload, 48, _after_arrivals(spec))
    prompts = draw.prompt_tokens()
    assert [r.num_prompt_tokens for r in requests] == prompts.tolist()
    warm = requests[12:]  # the first pass over the 12 prompts warms the cache
    hits = np.array([r.num_cached_tokens for r in warm])
    assert hits.tolist() == [16 * ((r.num_prompt_tokens - 1) // 16) for r in warm]
    pool_prompts = np.concatenate([
        draw.system_tokens[g] + draw.question_tokens[g * 4:(g + 1) * 4] for g in range(3)])
    closed_form = (16 * ((pool_prompts - 1) // 16)).sum() / pool_prompts.sum()
    measured = hits.sum() / sum(r.num_prompt_tokens for r in warm)
    assert measured == closed_form  # three whole passes: every prompt equally often
    # in the first pass a prompt finds its group's system prompt (6 full blocks) if one of
    # its group came before, and nothing else
    seen: set[int] = set()
    for r, prompt in zip(requests[:12], draw.prompt_ids[:12].tolist(), strict=True):
        group = prompt // 4
        assert r.num_cached_tokens == (96 if group in seen else 0)
        seen.add(group)


def _after_arrivals(spec) -> np.random.Generator:
    """The generator as the pool's draws find it: after the arrival times."""
    from clustersim.workload.arrivals import arrival_times

    rng = np.random.default_rng(spec.seed)
    w = spec.workload
    arrival_times(w.arrivals, rng, num_requests=w.num_requests, duration_s=w.duration_s,
                  start_s=w.start_s)
    return rng


def test_a_closed_loop_pool_runs_and_the_summary_reports_the_hit_rate():
    data = scenario(workload=pool(arrivals={"kind": "closed_loop", "num_users": 3},
                                  num_requests=24),
                    cost=FIXED_STEP, engine={"enable_prefix_caching": True})
    result = run_scenario(parse_scenario(data))
    from clustersim.metrics import summarize_run

    summary = summarize_run(result)
    assert summary.num_finished == 24
    cache = summary.prefix_cache
    assert cache is not None
    assert cache.cached_tokens == sum(r.num_cached_tokens for r in result.requests) > 0
    assert cache.prompt_tokens == sum(r.num_prompt_tokens for r in result.requests)
    assert summary.to_json()["prefix_cache"]["hit_rate"] == cache.hit_rate
