"""Worked examples of vLLM's scheduler (token budget, chunking, preemption, the admission gate,
the long-prefill cap, the seat cap, prefix-cache hits, step policies), end to end through
``clustersim simulate``; each test's name says its case and cites golden_examples.md's S1-S5,
S8 or vllm_scheduler_spec.md's G1-G8.

Each scenario uses a fixed 1 s step so that arrivals can be placed inside a chosen step:
step k runs over [k, k+1) seconds, and a request arriving at k + 0.5 is first seen by step k+1.
"Decodes" dN are requests with a one-token prompt that arrive at t=0: step 0 prefills them and
from step 1 on they decode, which is the "running [d1, d2, ...]" state of the spec's tables.
"""

from __future__ import annotations

from pathlib import Path

from tests.helpers import explicit, scenario, schedule, simulate

FIXED = {"kind": "fixed", "step_time_s": 1.0}


def decodes(n: int, output_tokens: int = 50, start: int = 1) -> list[tuple[str, float, int, int]]:
    return [(f"d{i}", 0.0, 1, output_tokens) for i in range(start, start + n)]


def run(tmp_path: Path, requests, engine, **extra) -> dict:
    # the worked examples are synchronous scheduling's (vLLM's default before v0.14)
    engine = {"async_scheduling": False, **engine}
    data = scenario(engine=engine, workload=explicit(*requests, **extra.pop("fields", {})),
                    cost=FIXED, **extra)
    return simulate(tmp_path, data)


def plans(result: dict, first: int, last: int) -> list[dict[str, int]]:
    return [schedule(s) for s in result["steps"][first:last + 1]]


def test_g1_s2_budget_8_three_decodes_chunks_5_5_2(tmp_path):
    result = run(tmp_path, [*decodes(3), ("P", 0.5, 12, 5)],
                 {"max_num_batched_tokens": 8, "max_num_seqs": 8})
    assert plans(result, 1, 4) == [
        {"decodes": 3, "P": 5},
        {"decodes": 3, "P": 5},
        {"decodes": 3, "P": 2},
        {"decodes": 4},
    ]
    assert [int(s["num_scheduled_tokens"]) for s in result["steps"][1:5]] == [8, 8, 5, 4]
    # P samples its first token at the end of step 3 (t = 4), having arrived at 0.5.
    assert float(result["requests"]["P"]["first_token_s"]) == 4.0
    assert float(result["requests"]["P"]["ttft_s"]) == 3.5


def test_g2_s3_concurrent_partial_prefills_fcfs(tmp_path):
    result = run(tmp_path, [*decodes(6), ("A", 0.5, 18, 5), ("B", 0.5, 5, 5)],
                 {"max_num_batched_tokens": 16, "max_num_seqs": 16})
    assert plans(result, 1, 4) == [
        {"decodes": 6, "A": 10},
        {"decodes": 6, "A": 8, "B": 2},
        {"decodes": 7, "B": 3},
        {"decodes": 8},
    ]
    assert float(result["requests"]["A"]["first_token_s"]) == 3.0
    assert float(result["requests"]["B"]["first_token_s"]) == 4.0


def test_g3_kv_exhaustion_preempts_newest_and_recomputes(tmp_path):
    result = run(tmp_path, [("R1", 0.0, 32, 3), ("R2", 0.0, 32, 3)],
                 {"max_num_batched_tokens": 64, "max_num_seqs": 8, "max_model_len": 64,
                  "num_gpu_blocks_override": 5})
    steps = result["steps"]
    assert plans(result, 0, 4) == [
        {"R1": 32, "R2": 32},
        {"decodes": 1},           # R1 decodes; R2 preempted to free its 2 blocks
        {"decodes": 1},           # R1 finishes; R2 still fails the full-ISL gate (3 > 1 free)
        {"R2": 33},               # recompute: 32 prompt + 1 generated token
        {"decodes": 1},
    ]
    assert [int(s["num_preempted"]) for s in steps[:5]] == [0, 1, 0, 0, 0]
    assert [int(s["kv_blocks_used"]) for s in steps[:5]] == [4, 3, 3, 3, 3]
    assert result["requests"]["R2"]["preemptions"] == "1"
    assert result["requests"]["R2"]["outcome"] == "finished"
    assert result["requests"]["R1"]["finish_s"] == "3.000000000"


G4_ENGINE = {"max_num_batched_tokens": 16, "max_num_seqs": 8, "max_model_len": 64,
             "num_gpu_blocks_override": 5}


def test_g4_full_isl_gate_waits_without_wasted_prefill(tmp_path):
    # R1: prompt 20 (steps 0-1), then 7 decodes (steps 2-8). N(40) arrives during step 1.
    result = run(tmp_path, [("R1", 0.0, 20, 8), ("N", 1.5, 40, 2)], G4_ENGINE)
    assert plans(result, 2, 11) == [{"decodes": 1}] * 7 + [{"N": 16}, {"N": 16}, {"N": 8}]
    assert result["summary"]["num_preemptions"] == 0


def test_g4_gate_off_self_preempts_and_wastes_prefill(tmp_path):
    engine = {**G4_ENGINE, "scheduler_reserve_full_isl": False}
    result = run(tmp_path, [("R1", 0.0, 20, 8), ("N", 1.5, 40, 2)], engine)
    round_trip = [{"decodes": 1, "N": 15}, {"decodes": 1, "N": 15}, {"decodes": 1}]
    assert plans(result, 2, 10) == [*round_trip, *round_trip,
                                    {"decodes": 1, "N": 15}, {"N": 16}, {"N": 9}]
    assert result["requests"]["N"]["preemptions"] == "2"
    prefill = sum(schedule(s).get("N", 0) for s in result["steps"])
    assert prefill == 100  # 100 prompt tokens computed for a 40-token prompt


def test_g5_long_prefill_threshold(tmp_path):
    two = [("A", 0.0, 10, 2), ("B", 0.0, 10, 2)]
    capped = run(tmp_path / "a", two, {"max_num_batched_tokens": 16, "max_num_seqs": 8,
                                       "long_prefill_token_threshold": 4})
    assert plans(capped, 0, 3) == [{"A": 4, "B": 4}, {"A": 4, "B": 4}, {"A": 2, "B": 2},
                                   {"decodes": 2}]
    uncapped = run(tmp_path / "b", two, {"max_num_batched_tokens": 16, "max_num_seqs": 8})
    assert plans(uncapped, 0, 1) == [{"A": 10, "B": 6}, {"decodes": 1, "B": 4}]


def test_g5_threshold_is_off_for_a_single_request_unless_old_vllm(tmp_path):
    engine = {"max_num_batched_tokens": 16, "max_num_seqs": 8, "long_prefill_token_threshold": 4}
    alone = run(tmp_path / "a", [("A", 0.0, 10, 2)], engine)
    assert plans(alone, 0, 0) == [{"A": 10}]
    old = run(tmp_path / "b", [("A", 0.0, 10, 2)],
              {**engine, "long_prefill_threshold_single_request": True})
    assert plans(old, 0, 2) == [{"A": 4}, {"A": 4}, {"A": 2}]


def test_g6_max_num_seqs_seat_cap(tmp_path):
    requests = [("d1", 0.0, 1, 3), ("d2", 0.0, 1, 20), ("d3", 0.0, 1, 20),
                ("A", 0.5, 8, 5), ("B", 0.5, 8, 5)]
    result = run(tmp_path, requests, {"max_num_batched_tokens": 32, "max_num_seqs": 4})
    assert plans(result, 1, 3) == [{"decodes": 3, "A": 8}, {"decodes": 4}, {"decodes": 3, "B": 8}]
    assert [int(s["num_waiting"]) for s in result["steps"][1:4]] == [1, 1, 0]


def test_g6_async_scheduling_admits_one_step_later(tmp_path):
    # Async: schedule(N+1) runs before update(N). The decodes' first step is scheduled at
    # t=0 before A arrives, so the table's step 1 is step 2 here, and d1 needs one more token.
    requests = [("d1", 0.0, 1, 4), ("d2", 0.0, 1, 20), ("d3", 0.0, 1, 20),
                ("A", 0.5, 8, 5), ("B", 0.5, 8, 5)]
    result = run(tmp_path, requests, {"max_num_batched_tokens": 32, "max_num_seqs": 4,
                                      "async_scheduling": True})
    assert plans(result, 2, 5) == [
        {"decodes": 3, "A": 8},
        {"decodes": 4},            # A decodes right after its prefill: no bubble
        {"decodes": 3},            # d1 skipped (its last token is in flight), still seated
        {"decodes": 3, "B": 8},    # the seat d1 freed is usable only now
    ]


def test_g7_chunked_prefill_off_blocks_head_of_line(tmp_path):
    requests = [("d1", 0.0, 1, 2), ("d2", 0.0, 1, 3), ("d3", 0.0, 1, 4),
                ("A", 0.5, 30, 2), ("B", 0.5, 2, 3)]
    result = run(tmp_path, requests, {"enable_chunked_prefill": False, "max_model_len": 32,
                                      "max_num_batched_tokens": 32, "max_num_seqs": 8})
    assert plans(result, 1, 3) == [{"decodes": 3}, {"decodes": 2, "A": 30},
                                   {"decodes": 2, "B": 2}]
    assert result["requests"]["A"]["outcome"] == "finished"


def test_g8_prefix_cache_hit_arithmetic(tmp_path):
    hashes = {"block_hashes": [11, 12]}
    requests = [("X", 0.0, 40, 1), ("a", 5.0, 40, 1), ("b", 10.0, 32, 1)]
    result = run(tmp_path, requests, {"max_num_batched_tokens": 64, "max_num_seqs": 8},
                 fields={"X": hashes, "a": hashes, "b": hashes})
    chunks = [schedule(s) for s in result["steps"]]
    assert chunks == [{"X": 40}, {"a": 8}, {"b": 16}]


def test_s1_prefill_first_stalls_decodes_decode_first_does_not(tmp_path):
    requests = [*decodes(4), ("P", 0.5, 48, 2)]
    engine = {"max_num_batched_tokens": 16, "max_num_seqs": 8}
    first = run(tmp_path / "pf", requests, {**engine, "step_policy": "prefill_first"})
    assert plans(first, 1, 4) == [{"P": 16}] * 3 + [{"decodes": 5}]
    mixed = run(tmp_path / "df", requests, engine)
    assert plans(mixed, 1, 5) == [{"decodes": 4, "P": 12}] * 4 + [{"decodes": 5}]
    # Prefill-first delays 4 decodes x 3 steps = 12 decode tokens; decode-first delays none.
    stalled = sum(4 - schedule(s).get("decodes", 0) for s in first["steps"][1:4])
    assert stalled == 12


def test_s5_three_step_budget_policies(tmp_path):
    requests = [("d1", 0.0, 1, 9), ("d2", 0.0, 1, 9), ("p1", 0.5, 5, 2), ("p2", 0.5, 2, 2)]
    # The step budget is max_num_scheduled_tokens: vLLM wants max_num_batched_tokens >= seats.
    engine = {"max_num_seqs": 4, "max_num_batched_tokens": 8, "long_prefill_token_threshold": 2}
    cases = {
        "balanced": (4, {"decodes": 1, "p1": 2, "p2": 1}),
        "decode_first": (3, {"decodes": 2, "p1": 1}),
        "prefill_first": (3, {"p1": 2, "p2": 1}),
    }
    for policy, (budget, expected) in cases.items():
        result = run(tmp_path / policy, requests,
                     {**engine, "max_num_scheduled_tokens": budget, "step_policy": policy,
                      "decode_reserve_tokens": 1})
        step = result["steps"][1]
        assert schedule(step) == expected, policy
        assert int(step["num_scheduled_tokens"]) <= budget


def test_s4_prefill_reserve_ends_starvation(tmp_path):
    # 8 long decodes fill a step budget of 8: strict decode-first starves the prompt until
    # they finish. (vLLM needs max_num_batched_tokens >= max_num_seqs, so the budget that
    # binds is max_num_scheduled_tokens; otherwise the seat cap would stop L first.)
    requests = [*decodes(8, output_tokens=400), ("L", 0.5, 64, 2)]
    engine = {"max_num_batched_tokens": 16, "max_num_scheduled_tokens": 8, "max_num_seqs": 9}
    starved = run(tmp_path / "strict", requests, engine)
    first_token = float(starved["requests"]["L"]["first_token_s"])
    assert first_token > 400  # only after every decode finished
    reserved = run(tmp_path / "reserve", requests, {**engine, "prefill_reserve_fraction": 0.25})
    assert plans(reserved, 1, 1) == [{"decodes": 6, "L": 2}]
    assert float(reserved["requests"]["L"]["first_token_s"]) == 33.0  # 64 tokens / 2 per step
