"""The ``benchmark`` workload: vllm bench serve's client (semaphore, dispatch, warm-ups) and the
figures it reports."""

from __future__ import annotations

import json
import math
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest

from clustersim.engine.settings import EngineSettings
from clustersim.metrics import summarize_run
from clustersim.metrics.benchmark import peak_concurrency
from clustersim.scenario import Scenario, parse_scenario
from clustersim.scenario.api_server import ApiServerSpec
from clustersim.sim import run_scenario
from clustersim.validation import ValidationFailed
from clustersim.workload import build_requests
from clustersim.workload.benchmark import WARMUP_PREFIX, dispatch_offsets
from clustersim.workload.spec import BenchmarkWorkload
from tests.helpers import run_cli, scenario, simulate, write_scenario

FIXED = {"kind": "fixed", "step_time_s": 0.01}
EQUAL = {"kind": "independent", "prompt_tokens": 64, "output_tokens": 20}
VARIED = {"kind": "independent", "prompt_tokens": {"kind": "uniform", "low": 16, "high": 300},
          "output_tokens": {"kind": "uniform", "low": 2, "high": 60}}


def bench(cost=FIXED, api_server=None, **workload):
    data = scenario(cost=cost, workload={"kind": "benchmark", "num_prompts": 60,
                                         "lengths": EQUAL, **workload})
    if api_server is not None:
        data["api_server"] = api_server
    return parse_scenario(data)


# ------------------------------------------------------------------ dispatch
def test_an_infinite_rate_dispatches_everything_at_the_start():
    assert dispatch_offsets(5, math.inf, 1.0, np.random.default_rng(0)).tolist() == [0.0] * 5


def test_gamma_gaps_are_rescaled_to_end_at_num_prompts_over_rate():
    offsets = dispatch_offsets(400, 8.0, 0.5, np.random.default_rng(3))
    assert offsets[-1] == pytest.approx(400 / 8.0, rel=1e-12)
    assert np.all(np.diff(offsets) >= 0)
    gaps = np.diff(np.concatenate(([0.0], offsets)))
    # gamma shape 0.5: CV 1/sqrt(0.5) = 1.41, burstier than Poisson
    assert gaps.std() / gaps.mean() == pytest.approx(math.sqrt(2), rel=0.15)
    even = dispatch_offsets(4, 2.0, math.inf, np.random.default_rng(0))
    assert even.tolist() == [0.5, 1.0, 1.5, 2.0]


def test_request_rate_takes_the_word_inf():
    assert bench(request_rate="inf").workload.request_rate == math.inf
    with pytest.raises(ValidationFailed) as info:
        bench(max_concurrency=0)
    assert info.value.lines[0].startswith("workload.max_concurrency:")


# ----------------------------------------------------------------- semaphore
@pytest.mark.parametrize("fields", [{"max_concurrency": 4},
                                    {"max_concurrency": 7, "request_rate": 30.0,
                                     "burstiness": 0.3},
                                    {"max_concurrency": 3, "num_warmups": 5}])
def test_the_semaphore_is_never_exceeded(fields):
    result = run_scenario(bench(lengths=VARIED, **fields))
    limit = fields["max_concurrency"]
    every = result.requests
    assert peak_concurrency(every) == limit
    # at every send, fewer than `limit` other requests are still in flight
    for r in every:
        in_flight = sum(1 for o in every if o is not r and o.arrival_s <= r.arrival_s < o.finish_s)
        assert in_flight < limit, r.request_id


def test_queued_requests_are_sent_first_come_first_served_as_slots_free():
    result = run_scenario(bench(max_concurrency=4, lengths=VARIED))
    sends = [r.arrival_s for r in result.requests]
    assert sends == sorted(sends)
    finishes = sorted(r.finish_s for r in result.requests)
    # request i (after the first four) goes out when the (i - 4)-th answer is back
    for i, r in enumerate(result.requests[4:]):
        assert r.arrival_s == pytest.approx(finishes[i])


def test_a_turnaround_holds_each_slot_after_its_answer_for_a_draw_of_its_mean():
    result = run_scenario(bench(max_concurrency=1, num_prompts=400, num_warmups=2,
                                turnaround_s=0.05))
    measured = result.requests
    gaps = np.array([b.arrival_s - a.finish_s for a, b in pairwise(measured)])
    assert np.all(gaps > 0)
    assert gaps.mean() == pytest.approx(0.05, rel=0.15)  # 399 exponential draws
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.2)
    # the last warm-up's answer is processed too before the measured run starts
    start = result.measured_start_s
    assert start > max(s.end_s for s in result.steps if s.start_s < start)
    # the same seed draws the same turnarounds; no turnaround sends at the answer
    again = run_scenario(bench(max_concurrency=1, num_prompts=400, num_warmups=2,
                               turnaround_s=0.05))
    assert [r.arrival_s for r in again.requests] == [r.arrival_s for r in measured]
    at_once = run_scenario(bench(max_concurrency=1, num_prompts=400)).requests
    assert all(b.arrival_s == a.finish_s for a, b in pairwise(at_once))


def test_with_free_slots_a_request_is_sent_when_dispatched():
    result = run_scenario(bench(max_concurrency=60, request_rate=5.0))
    offsets = dispatch_offsets(60, 5.0, 1.0, np.random.default_rng(0))  # the run's seed
    assert all(r.arrival_s == r.dispatch_s for r in result.requests)
    assert np.diff([r.dispatch_s for r in result.requests]) == pytest.approx(np.diff(offsets))


# ------------------------------------------------------------------ warm-ups
def test_warmups_run_first_and_are_not_measured():
    result = run_scenario(bench(max_concurrency=4, num_warmups=6))
    warmup_chunks = [s for s in result.steps
                     if any(rid.startswith(WARMUP_PREFIX) for rid, _ in s.prefill_chunks)]
    assert len({rid for s in warmup_chunks for rid, _ in s.prefill_chunks}) == 6
    assert max(s.end_s for s in warmup_chunks) <= result.measured_start_s
    assert [r.request_id for r in result.requests] == [str(i) for i in range(60)]
    assert min(r.dispatch_s for r in result.requests) == result.measured_start_s
    summary = summarize_run(result)
    assert summary.num_requests == 60 and summary.benchmark.num_warmups == 6
    assert summary.benchmark.completed == 60
    # the warm-ups ran the first prompt: with prefix caching the first request hits them
    first = [n for s in result.steps for rid, n in s.prefill_chunks if rid == "0"]
    assert first == [16]  # 64 tokens, 3 of 4 blocks cached (the last block is recomputed)


def test_a_benchmark_without_warmups_starts_at_once():
    result = run_scenario(bench(max_concurrency=4, start_s=2.0))
    assert result.measured_start_s == 2.0 and result.warmup_start_s is None


# -------------------------------------------------------------------- figures
def test_ttft_runs_from_the_send_and_the_slot_wait_is_the_client_queue_time(tmp_path):
    files = simulate(tmp_path, {**scenario(cost=FIXED, workload={
        "kind": "benchmark", "num_prompts": 12, "max_concurrency": 2, "lengths": EQUAL})})
    rows = list(files["requests"].values())
    # every request is dispatched at 0; pairs go out as the previous pair is answered
    for i, row in enumerate(rows):
        arrival, queue = float(row["arrival_s"]), float(row["client_queue_s"])
        assert queue == pytest.approx(arrival)  # dispatched at 0
        assert float(row["ttft_s"]) == pytest.approx(float(row["first_token_s"]) - arrival)
        # one 128-token prefill step of 10 ms after the send, wherever the request queued
        assert float(row["ttft_s"]) == pytest.approx(0.01), i
    bench_json = files["summary"]["benchmark"]
    assert bench_json["client_queue_s"]["count"] == 12
    assert bench_json["client_queue_s"]["p50"] > 0
    assert files["summary"]["ttft_s"]["p99"] == pytest.approx(0.01)


def test_throughput_is_over_the_measured_run_as_the_tool_counts_it():
    result = run_scenario(bench(max_concurrency=5, num_warmups=5, lengths=VARIED))
    b = summarize_run(result).benchmark
    duration = max(r.finish_s for r in result.requests) - result.measured_start_s
    assert b.duration_s == pytest.approx(duration)
    assert b.request_throughput == pytest.approx(60 / duration)
    output = sum(r.num_output_tokens for r in result.requests)
    prompt = sum(r.num_prompt_tokens for r in result.requests)
    assert b.output_throughput == pytest.approx(output / duration)
    assert b.total_token_throughput == pytest.approx((output + prompt) / duration)
    assert b.max_concurrent_requests == 5
    assert b.e2e_including_client_queue_s is None  # only at a finite rate, as vLLM


def test_an_open_loop_benchmark_lists_its_requests_ahead():
    spec = bench(request_rate=4.0, num_warmups=2).workload
    requests = build_requests(spec, np.random.default_rng(0))
    assert len(requests) == 60
    assert requests[-1].arrival_s == pytest.approx(15.0)
    with pytest.raises(ValueError, match="use build_workload"):
        build_requests(bench(max_concurrency=3).workload, np.random.default_rng(0))


# ------------------------------------------------------------------ scenario
def test_the_shipped_benchmark_scenario_runs_from_the_cli(tmp_path):
    path = Path(__file__).resolve().parents[1] / "scenarios" / "bench_rtx4090_mistral7b.yaml"
    code, output = run_cli("simulate", str(path), "--out", str(tmp_path))
    assert code == 0, output
    assert "benchmark (vllm bench serve: max concurrency 16, request rate inf" in output
    assert "300 completed, 0 failed" in output
    assert "peak concurrent requests 16" in output
    # sixteen clients, every answer 100 tokens: the run says its groups persist
    assert "note: the 16 clients start at once and every answer is 100 tokens long" in output


@pytest.mark.parametrize(("fields", "noted"), [
    ({}, True),
    ({"ramp_up_s": 0.5}, False),  # slots opened spread out
    ({"turnaround_s": 0.01}, False),
    ({"lengths": VARIED}, False),  # answers of many lengths drift apart
    ({"request_rate": 20.0}, False),  # paced sends
    ({"max_concurrency": 1}, False),  # one client meets no one
])
def test_a_fixed_length_closed_loop_is_noted_as_one(tmp_path, fields, noted):
    data = scenario(cost=FIXED, workload={"kind": "benchmark", "num_prompts": 12,
                                          "max_concurrency": 4, "lengths": EQUAL, **fields})
    code, output = run_cli("simulate", str(write_scenario(tmp_path, data)), "--out",
                           str(tmp_path / "out"))
    assert code == 0, output
    assert ("first round's groups persist" in output) == noted, output


@pytest.mark.parametrize(("field", "value", "says"), [
    ("max_concurrency", 0, "greater than 0"),
    ("num_prompts", 20_000_000, "20,000,000 is more than 10,000,000: "),
    ("request_rate", 1e9, "outside 1e-08..1e+07"),
    ("request_rate", "fast", "valid number"),
    ("burstiness", 0.0, "greater than 0"),
    ("burstiness", 1e-5, "outside 0.001..1000"),
    ("num_warmups", -1, "greater than or equal to 0"),
    ("think_time_s", 1.0, "unknown field"),
])
def test_bad_benchmark_values_are_one_line_each_and_exit_2(tmp_path, field, value, says):
    data = scenario(workload={"kind": "benchmark", "num_prompts": 5, "lengths": EQUAL,
                              field: value})
    path = write_scenario(tmp_path, data)
    code, output = run_cli("simulate", str(path), "--out", str(tmp_path / "out"))
    assert code == 2
    (line,) = output.strip().splitlines()
    assert line.startswith(f"{path}: workload.{field}: ") and says in line, line


def test_infinite_burstiness_spaces_dispatches_evenly():
    spec = bench(request_rate=4.0, burstiness="inf").workload
    requests = build_requests(spec, np.random.default_rng(0))
    assert np.diff([r.arrival_s for r in requests]) == pytest.approx(np.full(59, 0.25))


def test_every_new_field_is_documented():
    fields = {**{f"api_server.{k}": v for k, v in ApiServerSpec.model_fields.items()},
              **{f"workload.{k}": v for k, v in BenchmarkWorkload.model_fields.items()
                 if k != "kind"},
              "engine.vllm_version": EngineSettings.model_fields["vllm_version"]}
    undocumented = [name for name, info in fields.items() if not info.description]
    assert not undocumented


def test_the_schema_and_the_summary_stay_strict_json_with_infinite_settings(tmp_path):
    json.dumps(Scenario.model_json_schema(), allow_nan=False)  # no Infinity default
    files = simulate(tmp_path, scenario(cost=FIXED, workload={
        "kind": "benchmark", "num_prompts": 6, "request_rate": 50.0, "burstiness": "inf",
        "lengths": EQUAL}))
    bench_json = files["summary"]["benchmark"]
    assert (bench_json["request_rate"], bench_json["burstiness"]) == (50.0, "inf")
    json.dumps(files["summary"], allow_nan=False)
