"""Scheduler rules not covered by the golden tables: priority, watermark, cost aggregates."""

from __future__ import annotations

from clustersim.engine.config import SchedulerConfig
from clustersim.engine.kv_manager import KVCacheManager
from clustersim.engine.request import Request
from clustersim.engine.scheduler import Scheduler


def make_scheduler(blocks: int = 100, **config) -> Scheduler:
    defaults = {"max_num_batched_tokens": 64, "max_num_seqs": 8, "max_model_len": 64}
    cfg = SchedulerConfig(**{**defaults, **config})
    return Scheduler(cfg, KVCacheManager(blocks, cfg.block_size, cfg.max_model_len))


def step(scheduler: Scheduler, now: float = 1.0) -> dict[str, int]:
    plan = scheduler.schedule()
    scheduler.update_from_output(plan, now)
    return {r.request_id: n for r, n in plan.scheduled}


def test_priority_queue_serves_lower_priority_value_first_then_arrival():
    s = make_scheduler(policy="priority", max_num_batched_tokens=16)
    for rid, arrival, priority in (("late_urgent", 2.0, 0), ("early_lax", 0.0, 5),
                                   ("early_urgent", 1.0, 0)):
        s.add_request(Request(rid, arrival, 8, 2, priority=priority))
    assert step(s) == {"early_urgent": 8, "late_urgent": 8}


def test_priority_preemption_takes_the_least_urgent_running_request():
    # 4 usable blocks; three running 16-token requests hold one block each, 1 block free.
    s = make_scheduler(blocks=5, policy="priority")
    for rid, priority in (("a", 0), ("lax", 9), ("b", 1)):
        s.add_request(Request(rid, 0.0, 16, 9, priority=priority))
    assert step(s) == {"a": 16, "lax": 16, "b": 16}
    # Every decode now needs a second block. a takes the free one; lax, the least urgent,
    # preempts itself and v0.33 moves on (continue, not break): b gets the block lax freed.
    plan = s.schedule()
    assert [r.request_id for r, _ in plan.scheduled] == ["a", "b"]
    assert [r.request_id for r in plan.preempted] == ["lax"]


def test_priority_self_preemption_after_refunding_a_scheduled_victim_schedules_nobody_twice():
    # 5 usable blocks: a and x hold one each, y's first 38-token chunk three. Next step a and
    # x decode within their blocks (scheduled, no allocation); y's next chunk needs two more
    # blocks: victim x (least urgent, already scheduled: refunded, one block back), still
    # short, then y itself. vLLM steps req_index back for x only, so the running loop goes on
    # after a (once counted for y as well, it went back to a and scheduled it twice).
    s = make_scheduler(blocks=6, policy="priority", max_num_batched_tokens=40,
                       max_model_len=128, scheduler_reserve_full_isl=False)
    s.add_request(Request("a", 0.0, 8, 30, priority=0))
    s.add_request(Request("x", 0.0, 8, 30, priority=9))
    step(s)
    s.add_request(Request("y", 1.0, 100, 5, priority=5))
    assert step(s) == {"a": 1, "x": 1, "y": 38}
    plan = s.schedule()
    assert [(r.request_id, n) for r, n in plan.scheduled] == [("a", 1)]
    assert [r.request_id for r in plan.preempted] == ["x", "y"]
    assert plan.num_scheduled_tokens == 1


def test_fcfs_preemption_takes_the_newest_and_stops():
    s = make_scheduler(blocks=5)
    for rid in ("a", "lax", "b"):
        s.add_request(Request(rid, 0.0, 16, 9))
    step(s)
    plan = s.schedule()
    # a needs a block: takes the free one. lax needs one: victim running[-1] = b frees its
    # block and lax gets it. Nothing left behind lax to schedule.
    assert [r.request_id for r, _ in plan.scheduled] == ["a", "lax"]
    assert [r.request_id for r in plan.preempted] == ["b"]
    assert [r.request_id for r in s.waiting] == ["b"]


def test_watermark_keeps_blocks_free_only_when_others_are_running():
    # 10 usable blocks, watermark int(0.2 * 11) = 2 blocks
    s = make_scheduler(blocks=11, watermark=0.2, max_model_len=256, max_num_batched_tokens=256)
    s.add_request(Request("big", 0.0, 128, 50))    # 8 blocks: nobody running, no watermark
    assert step(s) == {"big": 128}
    s.add_request(Request("small", 1.0, 16, 5))    # 1 block + 2 watermark > 2 free
    assert step(s) == {"big": 1}
    no_watermark = make_scheduler(blocks=11, max_model_len=256, max_num_batched_tokens=256)
    no_watermark.add_request(Request("big", 0.0, 128, 50))
    step(no_watermark)
    no_watermark.add_request(Request("small", 1.0, 16, 5))
    assert step(no_watermark) == {"big": 1, "small": 16}


def test_plan_aggregates_what_the_cost_model_prices():
    s = make_scheduler(max_num_batched_tokens=64)
    s.add_request(Request("d", 0.0, 10, 5))
    step(s)                                   # d: prompt of 10, samples its first token
    s.add_request(Request("p", 1.0, 30, 5))
    plan = s.schedule()
    assert [(r.request_id, n) for r, n in plan.scheduled] == [("d", 1), ("p", 30)]
    assert plan.num_decode_tokens == 1 and plan.decode_kv_tokens == 11
    assert plan.num_prefill_tokens == 30
    assert plan.prefill_attn_pairs == 30 * 31 / 2          # causal, empty prefix
    assert plan.prefill_kv_tokens == 30
    assert {r.request_id for r in plan.sampled} == {"d", "p"}
    assert [(r.request_id, n) for r, n in plan.prefill_chunks] == [("p", 30)]


def test_deferred_decodes_never_preempt_a_request_admitted_in_the_same_step():
    # D's next decode needs a third block; W (30 tokens) takes the last two free blocks.
    for policy, expected in (("decode_first", [("D", 1)]), ("prefill_first", [("W", 30)])):
        s = make_scheduler(blocks=5, step_policy=policy)
        s.add_request(Request("D", 0.0, 32, 10))
        step(s)
        w = Request("W", 1.0, 30, 5)
        s.add_request(w)
        plan = s.schedule()
        assert [(r.request_id, n) for r, n in plan.scheduled] == expected, policy
        assert not plan.preempted and w.num_preemptions == 0, policy


def test_async_producer_preempted_with_its_token_in_flight_is_not_held():
    s = make_scheduler(blocks=3, max_num_batched_tokens=32, max_model_len=128,
                       async_scheduling=True, scheduler_reserve_full_isl=False,
                       long_prefill_token_threshold=16)
    y, x = Request("Y", 0.0, 40, 1, kv_producer=True), Request("X", 0.1, 16, 1, kv_producer=True)
    s.add_request(y)
    s.add_request(x)
    first = s.schedule()             # Y:16, X:16 (X samples its only token)
    second = s.schedule()            # before update(first): Y needs a block, X is the victim
    assert [r.request_id for r in second.preempted] == ["X"]
    finished = s.update_from_output(first, 1.0)
    assert [r.request_id for r in finished] == ["X"]
    assert "X" not in s.kv_held      # its blocks are gone: the cluster re-runs the prefill
    s.kv.check_invariants()
