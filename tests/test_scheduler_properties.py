"""Invariants of the scheduler over random small workloads (hypothesis)."""

from __future__ import annotations

import simpy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clustersim.engine.config import SchedulerConfig
from clustersim.engine.instance import MAX_STALLED_PREEMPTIONS, Instance
from clustersim.engine.kv_manager import KVCacheManager, cdiv
from clustersim.engine.request import Request, RequestStatus
from clustersim.engine.scheduler import Scheduler, StepPlan


@st.composite
def configs(draw) -> tuple[SchedulerConfig, int]:
    block_size = draw(st.sampled_from([4, 16]))
    max_model_len = draw(st.integers(16, 96))
    chunked = draw(st.booleans())
    budget = draw(st.integers(4, 64))
    if not chunked:
        budget = max(budget, max_model_len)
    max_num_seqs = draw(st.integers(1, min(8, budget)))
    blocks = draw(st.integers(cdiv(max_model_len, block_size) + 1, 3 * cdiv(96, block_size)))
    config = SchedulerConfig(
        max_num_batched_tokens=budget,
        max_num_seqs=max_num_seqs,
        max_model_len=max_model_len,
        block_size=block_size,
        enable_chunked_prefill=chunked,
        long_prefill_token_threshold=draw(st.sampled_from([0, 0, 3, 8])),
        policy=draw(st.sampled_from(["fcfs", "priority"])),
        scheduler_reserve_full_isl=draw(st.booleans()),
        watermark=draw(st.sampled_from([0.0, 0.1])),
        enable_prefix_caching=draw(st.booleans()),
        async_scheduling=draw(st.booleans()),
        step_policy=draw(st.sampled_from(["decode_first", "prefill_first", "balanced"])),
        prefill_reserve_fraction=draw(st.sampled_from([0.0, 0.25])),
        decode_reserve_tokens=draw(st.integers(0, 3)),
    )
    return config, blocks


@st.composite
def workloads(draw) -> list[Request]:
    n = draw(st.integers(1, 12))
    prefixes = [tuple(range(k * 10, k * 10 + 6)) for k in range(3)]
    requests = []
    for i in range(n):
        prompt = draw(st.integers(1, 100))
        shared = draw(st.sampled_from([(), *prefixes]))
        requests.append(
            Request(
                request_id=f"r{i}",
                arrival_s=draw(st.floats(0, 5, allow_nan=False)),
                num_prompt_tokens=prompt,
                max_tokens=draw(st.integers(1, 20)),
                priority=draw(st.integers(0, 2)),
                block_hashes=shared,
            )
        )
    return sorted(requests, key=lambda r: r.arrival_s)


def check_plan(scheduler: Scheduler, plan: StepPlan) -> None:
    """The invariants right after ``schedule()`` (the instance prices every plan then; the
    scheduler, compiled, cannot be subclassed to check them)."""
    cfg = scheduler.config
    assert plan.num_scheduled_tokens == sum(n for _, n in plan.scheduled)
    assert plan.num_scheduled_tokens <= cfg.token_budget
    assert all(n > 0 for _, n in plan.scheduled)
    assert len({id(r) for r, _ in plan.scheduled}) == len(plan.scheduled)
    assert len(scheduler.running) <= cfg.max_num_seqs
    assert scheduler.kv.num_used_blocks <= scheduler.kv.num_usable_blocks
    scheduler.kv.check_invariants()
    for request in plan.sampled:
        # every prompt token (and every earlier output) is computed before a token is sampled
        assert request.num_computed_tokens >= request.num_tokens
    for request, _ in plan.scheduled:
        assert request.num_computed_tokens <= cfg.max_model_len
        assert request.status is RequestStatus.RUNNING


def run(config: SchedulerConfig, blocks: int, requests: list[Request]) -> Instance:
    env = simpy.Environment()
    kv = KVCacheManager(blocks, config.block_size, config.max_model_len,
                        config.enable_prefix_caching)
    scheduler = Scheduler(config, kv)

    def step_time(plan: StepPlan) -> float:
        check_plan(scheduler, plan)
        return 0.01

    instance = Instance(env, "i0", scheduler, step_time)

    def arrivals():
        for request in requests:
            if request.arrival_s > env.now:
                yield env.timeout(request.arrival_s - env.now)
            instance.submit(request)

    env.process(arrivals())
    env.run(until=10_000)
    return instance


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(configs(), workloads())
def test_every_request_ends_and_invariants_hold(setup, requests):
    config, blocks = setup
    instance = run(config, blocks, requests)
    for request in requests:
        assert request.is_done, (request.request_id, request.status)
        if request.status is RequestStatus.FINISHED:
            assert request.num_output_tokens == request.max_tokens
            assert len(request.token_times_s) == request.max_tokens
            assert list(request.token_times_s) == sorted(request.token_times_s)
            assert request.first_token_s >= request.arrival_s
        else:
            assert request.reject_reason
    kv = instance.scheduler.kv
    assert kv.num_used_blocks == 0  # everything was freed
    kv.check_invariants()
    for step in instance.steps:
        assert step.num_scheduled_tokens <= config.token_budget
        assert step.num_running <= config.max_num_seqs
        assert step.kv_blocks_used <= kv.num_usable_blocks


@settings(max_examples=100, deadline=None)
@given(configs(), workloads())
def test_same_input_same_trace(setup, requests):
    config, blocks = setup

    def fresh() -> list[Request]:
        return [Request(r.request_id, r.arrival_s, r.num_prompt_tokens, r.max_tokens,
                        r.priority, r.block_hashes) for r in requests]

    assert run(config, blocks, fresh()).steps == run(config, blocks, fresh()).steps


def test_requests_that_keep_preempting_each_other_are_given_up():
    # found by the property test: with priority ties, chunked prefill and no full-ISL
    # reservation, r1 and r2 (32 blocks together, 22 usable) preempt each other forever,
    # as they would in vLLM; the one that stops making progress is rejected with the reason
    config = SchedulerConfig(
        max_num_batched_tokens=55, max_num_seqs=2, max_model_len=87, block_size=4,
        long_prefill_token_threshold=8, policy="priority", scheduler_reserve_full_isl=False,
        step_policy="balanced", decode_reserve_tokens=1,
    )
    requests = [Request("r0", 1.8, 41, 5, priority=2), Request("r1", 4.7, 43, 6),
                Request("r2", 4.7, 72, 2, block_hashes=(0, 1, 2, 3, 4, 5))]
    run(config, 23, requests)
    r0, r1, r2 = requests
    assert r0.status is RequestStatus.FINISHED and r2.status is RequestStatus.FINISHED
    assert r1.status is RequestStatus.REJECTED
    assert "without progress" in r1.reject_reason and "vLLM would thrash" in r1.reject_reason
    assert r1.stalled_preemptions == MAX_STALLED_PREEMPTIONS
