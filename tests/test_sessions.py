"""Sessions (``workload.kind: sessions``): each request's prompt is the one before it, its
answer and the new message, with the keys to match; the context cap; the closed loop per
session on the simulator's clock."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from clustersim.errors import ConfigError
from clustersim.metrics import summarize_run
from clustersim.scenario import parse_scenario
from clustersim.sim import run_scenario
from clustersim.workload import build_workload
from clustersim.workload.blocks import BlockChain
from clustersim.workload.sessions import SessionRequests, draw_sessions
from tests.helpers import scenario

FIXED_STEP = {"kind": "fixed", "step_time_s": 0.01}


def sessions(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "kind": "sessions", "arrivals": {"kind": "poisson", "rate_per_s": 0.5},
        "num_sessions": 12, "system_prompt_tokens": 300, "num_system_prompts": 2,
        "turns": {"kind": "uniform", "low": 1, "high": 6},
        "user_tokens": {"kind": "lognormal", "mean": 60, "cv": 1},
        "output_tokens": {"kind": "uniform", "low": 5, "high": 40},
        "think_time_s": {"kind": "exponential", "mean_s": 3},
    }
    return {**base, **fields}


def parsed(data: dict[str, Any], **fields: Any):
    return parse_scenario(scenario(workload=data, cost=FIXED_STEP, **fields))


def built(spec, seed: int = 0):
    """Every session's requests, built in order, and the plan they come from."""
    plan = draw_sessions(spec, np.random.default_rng(seed))
    build = SessionRequests(plan, 16)
    first = plan.first.tolist()
    return plan, [[build(s, r) for r in range(first[s], first[s + 1])]
                  for s in range(plan.num_sessions)]


def test_a_prompt_is_the_one_before_it_its_answer_and_the_new_message():
    plan, by_session = built(parsed(sessions()).workload)
    assert sum(map(len, by_session)) == plan.num_requests > plan.num_sessions
    for s, requests in enumerate(by_session):
        base = plan.first[s]
        for j, r in enumerate(requests):
            answer = r.max_tokens
            # keys for every full block of the prompt and of the answer but its last token
            assert len(r.block_hashes) == (r.num_prompt_tokens + answer - 1) // 16
            assert r.request_id == f"{s}-{j}"
            if j == 0:
                assert r.num_prompt_tokens == (plan.system_tokens[s]
                                               + plan.message_tokens[base])
                continue
            before = requests[j - 1]
            assert r.num_prompt_tokens == (before.num_prompt_tokens + before.max_tokens
                                           + plan.message_tokens[base + j])
            assert r.block_hashes[:len(before.block_hashes)] == before.block_hashes
    # sessions of one system prompt share its 18 full blocks, the others none
    firsts = [requests[0].block_hashes[:18] for requests in by_session]
    assert len(set(firsts)) == len(set(plan.system_ids.tolist())) == 2


def test_agent_loops_append_tool_outputs_after_each_call_and_wait_for_the_tool():
    spec = parsed(sessions(turns=2, tool_calls={
        "calls_per_turn": 3, "latency_s": 1.5, "output_tokens": 200},
        think_time_s=7.0)).workload
    plan, by_session = built(spec)
    assert all(len(requests) == 6 for requests in by_session)
    for s in range(plan.num_sessions):
        base = plan.first[s]
        # the user's message opens each turn; tool outputs follow calls 1 and 2
        assert plan.wait_s[base:base + 6].tolist() == [0.0, 1.5, 1.5, 7.0, 1.5, 1.5]
        tools = plan.message_tokens[base:base + 6][[1, 2, 4, 5]]
        assert tools.tolist() == [200] * 4


@pytest.mark.parametrize("mode", ["truncate", "end_session"])
def test_the_context_cap(mode):
    spec = parsed(sessions(turns=8, max_context_tokens=700, at_context_cap=mode,
                           user_tokens=80, output_tokens=60)).workload
    plan, by_session = built(spec)
    for requests in by_session:
        for r in requests:
            assert r.num_prompt_tokens + r.max_tokens <= 700
    if mode == "end_session":
        # 300 + 80 + 60 per request: the third (300 + 2 x 140 + 80 + 60 = 720) does not fit
        assert plan.num_cut > 0
        assert all(len(requests) == min(2, len(requests)) for requests in by_session)
        return
    truncated = 0
    for s, requests in enumerate(by_session):
        system = BlockChain(16).extend(int(plan.system_ids[s]), 300)
        kept = plan.first_kept[plan.first[s]:plan.first[s + 1]].tolist()
        for j in range(1, len(requests)):
            before, r = requests[j - 1], requests[j]
            if kept[j] > kept[j - 1]:  # the oldest exchange dropped
                truncated += 1
                assert r.num_prompt_tokens == 300 + 140 * (j - kept[j]) + 80
                # the system prompt's blocks are kept; the block after it changed
                assert r.block_hashes[:18] == tuple(system.keys)
                assert r.block_hashes[18] != before.block_hashes[18]
    assert truncated > 0 and plan.num_cut == 0


def test_a_cap_that_holds_no_first_request_is_a_config_error():
    spec = parsed(sessions(max_context_tokens=200)).workload  # the system prompt is 300
    with pytest.raises(ConfigError, match="workload.max_context_tokens"):
        draw_sessions(spec, np.random.default_rng(0))


def test_each_request_goes_its_wait_after_the_answer_before_it_and_hits_the_cache():
    data = scenario(workload=sessions(think_time_s=2.0), cost=FIXED_STEP,
                    engine={"enable_prefix_caching": True})
    spec = parse_scenario(data)
    result = run_scenario(spec)
    by_id = {r.request_id: r for r in result.requests}
    plan = draw_sessions(spec.workload, np.random.default_rng(spec.seed))
    assert len(by_id) == plan.num_requests
    num_followers = 0
    for s in range(plan.num_sessions):
        first = by_id[f"{s}-0"]
        assert first.arrival_s == pytest.approx(plan.start_s[s])
        j = 1
        while f"{s}-{j}" in by_id:
            before, r = by_id[f"{s}-{j - 1}"], by_id[f"{s}-{j}"]
            assert r.arrival_s == pytest.approx(before.finish_s + 2.0)
            # the whole conversation so far is cached (whole blocks; at least one token
            # of the prompt is computed)
            cached = 16 * min((before.num_prompt_tokens + before.max_tokens - 1) // 16,
                              (r.num_prompt_tokens - 1) // 16)
            assert r.num_cached_tokens == cached
            num_followers += 1
            j += 1
    assert num_followers > 10
    summary = summarize_run(result)
    assert summary.prefix_cache is not None and summary.prefix_cache.hit_rate > 0.5


def test_same_seed_same_sessions_and_the_same_run():
    spec = parse_scenario(scenario(workload=sessions(), cost=FIXED_STEP,
                                   engine={"enable_prefix_caching": True}))

    def run() -> tuple[Any, ...]:
        result = run_scenario(spec)
        return tuple((r.request_id, r.arrival_s, r.num_prompt_tokens, r.max_tokens,
                      r.block_hashes, r.finish_s) for r in result.requests)

    assert run() == run()
    a = built(spec.workload, seed=1)[1]
    b = built(spec.workload, seed=1)[1]
    c = built(spec.workload, seed=2)[1]
    keys = [[(r.num_prompt_tokens, r.block_hashes) for r in rs] for rs in a]
    assert keys == [[(r.num_prompt_tokens, r.block_hashes) for r in rs] for rs in b]
    assert keys != [[(r.num_prompt_tokens, r.block_hashes) for r in rs] for rs in c]
    lean = build_workload(spec.workload, np.random.default_rng(1), on_arrival=True)
    assert lean.requests == [] and lean.num_requests == sum(map(len, a))
