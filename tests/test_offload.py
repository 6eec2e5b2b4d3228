"""The CPU tier below HBM (``engine.kv_offloading_size``, ``engine.offload``): its LRU, its
host link, a load's time, no prefix recomputed with an unbounded tier, a tier nobody hits
changing no timing, and its bad fields."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from clustersim.catalog import load_gpu, load_model
from clustersim.engine.offload import CpuKVTier, HostLink
from clustersim.engine.request import Request
from clustersim.engine.settings import MAX_KV_OFFLOADING_GIB
from clustersim.scenario import parse_scenario
from clustersim.sim import run_scenario
from tests.helpers import explicit, run_cli, scenario, write_scenario

FIXED_STEP = {"kind": "fixed", "step_time_s": 0.01}
BLOCK = 16


# ----------------------------------------------------------------- the tier, pure
def test_stores_are_readable_only_once_copied_and_evict_least_recently_used_first():
    tier = CpuKVTier(4)
    hashes = (1, 2, 3, 4, 5, 6)
    assert tier.prepare_store(hashes, 0, 3) == [1, 2, 3]
    assert tier.lookup(hashes, 0, 6) == (0, False)  # copying: not readable yet
    tier.complete_store([1, 2, 3])
    assert tier.lookup(hashes, 0, 6) == (3, False)
    tier.touch((3,), 1)  # 3 used now: 1 is the least recently used
    assert tier.prepare_store(hashes, 3, 5) == [4, 5]  # one free block, one eviction
    assert 1 not in tier and 2 in tier and 3 in tier
    # pending blocks are not evicted: 4 and 5 still copying, 2 and 3 readable
    assert tier.prepare_store((7, 8, 9), 0, 3) is None
    tier.check_invariants()


def test_a_store_never_evicts_its_own_blocks_nor_blocks_a_load_reads():
    tier = CpuKVTier(3)
    assert tier.prepare_store((1, 2, 3), 0, 3) == [1, 2, 3]
    tier.complete_store([1, 2, 3])
    tier.prepare_load((1,))
    # 1 is being read, 2 is the store's own: only 3 can go
    assert tier.prepare_store((2, 4), 0, 2) == [4]
    assert [h for h in (1, 2, 3, 4) if h in tier] == [1, 2, 4]
    assert tier.lookup((1, 2, 4), 0, 3) == (2, True)  # 4 still copying; a load reads 1
    tier.complete_load((1,))
    tier.complete_store([4])
    assert tier.lookup((1, 2, 4), 0, 3) == (3, False)
    tier.check_invariants()


def test_touching_a_request_keeps_its_first_block_the_most_recently_used():
    tier = CpuKVTier(4)
    tier.prepare_store((1, 2, 3, 4), 0, 4)
    tier.complete_store([1, 2, 3, 4])
    tier.touch((1, 2), 2)
    # LRU order now 3, 4, 2, 1: two new blocks evict 3 and 4
    tier.prepare_store((5, 6), 0, 2)
    assert [h for h in (1, 2, 3, 4) if h in tier] == [1, 2]


def test_copies_take_bytes_over_the_rate_and_queue_per_direction():
    link = HostLink(bytes_per_s=1e9, bytes_per_block=1_000_000)
    assert link.load(0.0, 10) == pytest.approx(0.010)
    assert link.load(0.004, 5) == pytest.approx(0.015)  # behind the first load
    assert link.store(0.004, 5) == pytest.approx(0.009)  # the other direction is free
    assert link.load_wait_s == pytest.approx(0.006)
    assert (link.loaded_bytes, link.stored_bytes) == (15_000_000, 5_000_000)


# ----------------------------------------------------------------- in a run
def _hashes(first: int, count: int) -> list[int]:
    return list(range(first, first + count))


def test_a_load_from_the_cpu_tier_takes_its_bytes_over_the_pcie_links():
    """A's 10 blocks are stored, B evicts them from HBM, C (A's prompt again) loads them:
    its first token comes a copy of 10 blocks over the GPU's PCIe link after it arrives, one
    poll interval and one step later."""
    a = {"block_hashes": _hashes(100, 10)}
    data = scenario(
        engine={"max_model_len": 304, "num_gpu_blocks_override": 20,
                "kv_offloading_size": 1.0, "async_scheduling": False},
        cost=FIXED_STEP,
        workload=explicit(("A", 0.0, 160, 4), ("B", 1.0, 288, 4), ("C", 2.0, 160, 4),
                          A=a, B={"block_hashes": _hashes(500, 18)}, C=a),
    )
    spec = parse_scenario(data)
    result = run_scenario(spec)
    by_id = {r.request_id: r for r in result.requests}
    c = by_id["C"]
    assert (c.num_cached_tokens, c.num_cpu_hit_tokens) == (0, 160)
    model = load_model(spec.model)
    block_bytes = model.kv_bytes_per_token(1) * BLOCK
    rate = load_gpu(spec.gpu).pcie.effective_bytes_per_s
    copy_s = 10 * block_bytes / rate
    poll_s = 1e-3  # layout.kv_transfer.poll_interval_s's default
    assert c.first_token_s - c.arrival_s == pytest.approx(copy_s + poll_s + 0.01, rel=1e-9)
    link = next(iter(result.host_links.values()))
    assert link.loaded_bytes == 10 * block_bytes and link.num_loads == 1
    assert link.bytes_per_s == pytest.approx(rate)


def _sessions_scenario(tier_gib: float | None) -> dict[str, Any]:
    # (sync scheduling: under async scheduling vLLM never stores the block its last
    # in-flight token would fill, its offloading connector's open TODO, as modelled here)
    engine: dict[str, Any] = {"max_model_len": 2048, "num_gpu_blocks_override": 300,
                              "async_scheduling": False}
    if tier_gib is not None:
        engine["kv_offloading_size"] = tier_gib
    return scenario(
        engine=engine, cost=FIXED_STEP,
        workload={"kind": "sessions", "arrivals": {"kind": "poisson", "rate_per_s": 2.0},
                  "num_sessions": 40, "system_prompt_tokens": 200, "num_system_prompts": 3,
                  "turns": {"kind": "uniform", "low": 2, "high": 6},
                  "user_tokens": {"kind": "lognormal", "mean": 80, "cv": 1},
                  "output_tokens": {"kind": "uniform", "low": 5, "high": 60},
                  "think_time_s": 2.0, "max_context_tokens": 1500})


def _recomputed_blocks(requests: list[Request]) -> int:
    """Full prompt blocks each request computed although an earlier request had computed the
    same prefix and finished before it arrived."""
    done = sorted(requests, key=lambda r: r.finish_s or 0.0)
    recomputed = 0
    for request in requests:
        seen: set[int] = set()
        for earlier in done:
            if earlier.finish_s is None or earlier.finish_s >= request.arrival_s:
                break
            computed = (earlier.num_prompt_tokens + earlier.num_output_tokens - 1) // BLOCK
            seen.update(earlier.block_hashes[:computed])
        prompt_blocks = request.block_hashes[:request.num_prompt_tokens // BLOCK]
        known = 0
        for block_hash in prompt_blocks:
            if block_hash not in seen:
                break
            known += 1
        served = (request.num_cached_tokens + request.num_cpu_hit_tokens) // BLOCK
        recomputed += max(0, known - served)
    return recomputed


def test_with_an_unbounded_cpu_tier_no_prefix_is_computed_twice():
    """HBM holds 300 blocks, far less than the sessions' contexts: without a tier, turns
    whose conversation HBM evicted compute it again; with a tier larger than every block the
    run computes, every prefix an earlier request finished is served from HBM or the tier."""
    without = run_scenario(parse_scenario(_sessions_scenario(None)))
    assert all(r.status.value == "finished" for r in without.requests)
    assert _recomputed_blocks(without.requests) > 100
    with_tier = run_scenario(parse_scenario(_sessions_scenario(MAX_KV_OFFLOADING_GIB)))
    assert all(r.status.value == "finished" for r in with_tier.requests)
    assert sum(r.num_cpu_hit_tokens for r in with_tier.requests) > 100 * BLOCK
    assert _recomputed_blocks(with_tier.requests) == 0


@pytest.mark.parametrize(("tier_gib", "async_scheduling"), [
    (0.5, False), (8.0, False), (8.0, True)])  # 585 blocks (651 evicted), 9,362
def test_coalesced_runs_give_what_stepping_gives_with_a_tier(tier_gib: float,
                                                            async_scheduling: bool):
    data = _sessions_scenario(tier_gib)
    data["engine"]["async_scheduling"] = async_scheduling
    spec = parse_scenario(data)

    def outcome(coalesce: bool):
        result = run_scenario(spec, coalesce=coalesce)
        link = next(iter(result.host_links.values()))
        return ([(r.request_id, r.first_token_s, r.finish_s, r.num_cached_tokens,
                  r.num_cpu_hit_tokens) for r in result.requests],
                (link.loaded_bytes, link.stored_bytes, link.num_loads, link.num_stores))

    stepped = outcome(False)
    assert stepped[1][2] > 0  # loads happened
    assert outcome(True) == stepped


def test_a_tier_nothing_hits_changes_no_request_and_no_step():
    """Stores copy beside the steps and take no GPU time: with a workload that never repeats
    a prefix, a tier changes no request's timing and no step (it only moves bytes)."""
    def run(tier: float | None):
        engine: dict[str, Any] = {"max_model_len": 4096}
        if tier is not None:
            engine["kv_offloading_size"] = tier
        data = scenario(engine=engine, workload={  # 300 prompts, each sent once
            "kind": "prompt_pool", "num_groups": 300, "num_prompts_per_group": 1,
            "system_prompt_tokens": {"kind": "uniform", "low": 40, "high": 600},
            "question_tokens": {"kind": "uniform", "low": 10, "high": 300},
            "output_tokens": {"kind": "uniform", "low": 1, "high": 80},
            "arrivals": {"kind": "poisson", "rate_per_s": 20.0}, "num_requests": 300})
        return run_scenario(parse_scenario(data))

    off, on = run(None), run(64.0)
    assert not off.host_links and on.host_links
    link = next(iter(on.host_links.values()))
    assert link.stored_bytes > 0 and link.loaded_bytes == 0
    def timings(result):
        return [(r.request_id, r.first_token_s, r.finish_s, r.num_cached_tokens)
                for r in result.requests]
    assert timings(off) == timings(on)
    assert [(s.start_s, s.end_s, s.num_scheduled_tokens) for s in off.steps] == [
        (s.start_s, s.end_s, s.num_scheduled_tokens) for s in on.steps]


# ----------------------------------------------------------------- bad fields
@pytest.mark.parametrize(("engine", "extra", "expected"), [
    ({"kv_offloading_size": -4}, {}, "engine.kv_offloading_size: "),
    ({"kv_offloading_size": 1e9}, {}, "engine.kv_offloading_size: "),
    ({"kv_offloading_size": 0.0005}, {}, "engine.kv_offloading_size: 0.0005 GiB holds no KV "
     "block"),
    ({"kv_offloading_size": 64}, {"model": "gpt-oss-20b"},
     "engine.kv_offloading_size: a CPU KV tier is not modelled"),
    ({"kv_offloading_size": 64}, {
        "topology": "dgx-h100",
        "layout": {"kind": "disaggregated", "pools": [
            {"name": "p", "role": "prefill", "instances": 1},
            {"name": "d", "role": "decode", "instances": 1}]}},
     "engine.kv_offloading_size: a CPU KV tier is modelled on colocated pools only"),
])
def test_bad_tier_fields_say_where_in_one_line_and_exit_2(tmp_path: Path, engine, extra,
                                                           expected):
    path = write_scenario(tmp_path, scenario(engine=engine, **extra))
    code, output = run_cli("simulate", str(path), "--out", str(tmp_path / "out"))
    assert code == 2, output
    lines = output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{path}: {expected}"), output
