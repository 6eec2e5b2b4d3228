"""Coalesced decode runs against the step-by-step loop, and lean runs against full ones.

Every scenario here is run three ways: step by step (``coalesce=False``, the reference), with
coalesced decode runs, and lean (``record_steps=False``). The first two must agree on every
request's timestamps and every token time, on the whole engine trace, and on the summary; the
lean run must summarize to the very same ``to_json``. The property tests do the same on random
small workloads, many of them arranged so that arrivals land exactly on step ends (ties).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import simpy
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clustersim.catalog import load_model
from clustersim.cluster.build import FixedPricer
from clustersim.cluster.system import Cluster
from clustersim.engine.clock import Clock
from clustersim.engine.config import SchedulerConfig
from clustersim.engine.instance import Instance
from clustersim.engine.kv_manager import KVCacheManager
from clustersim.engine.request import Request
from clustersim.engine.scheduler import Scheduler
from clustersim.engine.step_plan import NOTHING, StepPlan
from clustersim.metrics import summarize_run
from clustersim.scenario import parse_scenario
from clustersim.sim import RunResult, run_scenario
from clustersim.workload import chain_block_hashes
from tests.helpers import explicit, scenario
from tests.test_cluster_properties import cases, data_parallel_cases, split_data_parallel_cases
from tests.test_scheduler_properties import check_plan, configs


def check_bulk_plan(scheduler: Scheduler, plan: StepPlan) -> None:
    """The property test's checks, counting the decode set's members (scheduled in bulk,
    not listed in the plan)."""
    cfg = scheduler.config
    listed = sum(n for _, n in plan.scheduled)
    assert plan.num_scheduled_tokens == listed + plan.num_bulk <= cfg.token_budget
    assert all(n > 0 for _, n in plan.scheduled)
    members = set(map(id, scheduler.running[:plan.num_bulk]))
    assert not members & {id(r) for r, _ in plan.scheduled}
    assert len(scheduler.running) <= cfg.max_num_seqs
    scheduler.kv.check_invariants()


class CheckingPricer(FixedPricer):
    """A fixed step time that first checks each plan it prices (every step run one by one,
    and the first step of every coalesced run)."""

    __slots__ = ("scheduler", "check", "num_checked")

    def __init__(self, step_time_s: float, scheduler: Scheduler, bulk: bool) -> None:
        super().__init__(step_time_s)
        self.scheduler = scheduler
        self.check = check_bulk_plan if bulk else check_plan
        self.num_checked = 0

    def __call__(self, plan: StepPlan) -> float:
        self.check(self.scheduler, plan)
        self.num_checked += 1
        return self.step_time_s


ROOT = Path(__file__).resolve().parents[1]
FIXED = {"kind": "fixed", "step_time_s": 1.0}


def _decodes(n: int, output_tokens: int = 50) -> list[tuple[str, float, int, int]]:
    return [(f"d{i}", 0.0, 1, output_tokens) for i in range(1, n + 1)]


G4 = {"max_num_batched_tokens": 16, "max_num_seqs": 8, "max_model_len": 64,
      "num_gpu_blocks_override": 5}
S5 = {"max_num_seqs": 4, "max_num_batched_tokens": 8, "long_prefill_token_threshold": 2,
      "decode_reserve_tokens": 1}
GOLDEN = {  # tests/test_golden.py's inputs: (requests, engine, per-request fields)
    "g1": ([*_decodes(3), ("P", 0.5, 12, 5)], {"max_num_batched_tokens": 8, "max_num_seqs": 8}),
    "g2": ([*_decodes(6), ("A", 0.5, 18, 5), ("B", 0.5, 5, 5)],
           {"max_num_batched_tokens": 16, "max_num_seqs": 16}),
    "g3": ([("R1", 0.0, 32, 3), ("R2", 0.0, 32, 3)],
           {"max_num_batched_tokens": 64, "max_num_seqs": 8, "max_model_len": 64,
            "num_gpu_blocks_override": 5}),
    "g4": ([("R1", 0.0, 20, 8), ("N", 1.5, 40, 2)], G4),
    "g4-gate-off": ([("R1", 0.0, 20, 8), ("N", 1.5, 40, 2)],
                    {**G4, "scheduler_reserve_full_isl": False}),
    "g5": ([("A", 0.0, 10, 2), ("B", 0.0, 10, 2)],
           {"max_num_batched_tokens": 16, "max_num_seqs": 8, "long_prefill_token_threshold": 4}),
    "g5-old": ([("A", 0.0, 10, 2)],
               {"max_num_batched_tokens": 16, "max_num_seqs": 8,
                "long_prefill_token_threshold": 4, "long_prefill_threshold_single_request": True}),
    "g6": ([("d1", 0.0, 1, 3), ("d2", 0.0, 1, 20), ("d3", 0.0, 1, 20), ("A", 0.5, 8, 5),
            ("B", 0.5, 8, 5)], {"max_num_batched_tokens": 32, "max_num_seqs": 4}),
    "g6-async": ([("d1", 0.0, 1, 4), ("d2", 0.0, 1, 20), ("d3", 0.0, 1, 20), ("A", 0.5, 8, 5),
                  ("B", 0.5, 8, 5)],
                 {"max_num_batched_tokens": 32, "max_num_seqs": 4, "async_scheduling": True}),
    "g7": ([("d1", 0.0, 1, 2), ("d2", 0.0, 1, 3), ("d3", 0.0, 1, 4), ("A", 0.5, 30, 2),
            ("B", 0.5, 2, 3)], {"enable_chunked_prefill": False, "max_model_len": 32,
                                "max_num_batched_tokens": 32, "max_num_seqs": 8}),
    "g8": ([("X", 0.0, 40, 1), ("a", 5.0, 40, 1), ("b", 10.0, 32, 1)],
           {"max_num_batched_tokens": 64, "max_num_seqs": 8},
           {rid: {"block_hashes": [11, 12]} for rid in ("X", "a", "b")}),
    "s1-prefill-first": ([*_decodes(4), ("P", 0.5, 48, 2)],
                         {"max_num_batched_tokens": 16, "max_num_seqs": 8,
                          "step_policy": "prefill_first"}),
    "s1-decode-first": ([*_decodes(4), ("P", 0.5, 48, 2)],
                        {"max_num_batched_tokens": 16, "max_num_seqs": 8}),
    **{f"s5-{policy}": ([("d1", 0.0, 1, 9), ("d2", 0.0, 1, 9), ("p1", 0.5, 5, 2),
                         ("p2", 0.5, 2, 2)],
                        {**S5, "max_num_scheduled_tokens": budget, "step_policy": policy})
       for policy, budget in (("balanced", 4), ("decode_first", 3), ("prefill_first", 3))},
    "s4-strict": ([*_decodes(8, 400), ("L", 0.5, 64, 2)],
                  {"max_num_batched_tokens": 16, "max_num_scheduled_tokens": 8,
                   "max_num_seqs": 9}),
    "s4-reserve": ([*_decodes(8, 400), ("L", 0.5, 64, 2)],
                   {"max_num_batched_tokens": 16, "max_num_scheduled_tokens": 8,
                    "max_num_seqs": 9, "prefill_reserve_fraction": 0.25}),
}


def _golden(name: str) -> dict:
    requests, engine, *fields = GOLDEN[name]
    return scenario(engine=engine, cost=FIXED,
                    workload=explicit(*requests, **(fields[0] if fields else {})))


def _shipped(name: str, **workload) -> dict:
    data = yaml.safe_load((ROOT / "scenarios" / f"{name}.yaml").read_text())
    data["workload"].update(workload)
    return data


def _poisson(num: int, rate: float, prompt: tuple[int, int], output: tuple[int, int]) -> dict:
    return {"kind": "poisson", "rate_per_s": rate, "num_requests": num,
            "prompt_tokens": {"kind": "uniform", "low": prompt[0], "high": prompt[1]},
            "output_tokens": {"kind": "uniform", "low": output[0], "high": output[1]}}


SCENARIOS = {
    # KV pressure: growing decodes preempt by recompute (benchmarks/engine_speed.py's A100)
    "preempting-a100": {
        "name": "a100", "seed": 2, "model": "llama-3.1-8b", "gpu": "a100-40gb-sxm",
        "engine": {"max_model_len": 8192}, "workload": _poisson(200, 40.0, (500, 4000),
                                                               (200, 1000)),
        "slo": {"ttft_s": 2.0, "itl_s": 0.2},
    },
    # prefix caching: Mooncake replay with block hashes
    "mooncake-prefix": {
        "name": "mooncake", "seed": 0, "model": "llama-3.1-8b", "gpu": "h100-sxm",
        "engine": {"max_model_len": 131072},
        "workload": {"kind": "replay", "trace": "mooncake-conversation",
                     "window_start_s": 600, "window_end_s": 660},
    },
    "moe-dp-ep": _shipped("moe_dp_ep_h100", window_end_s=630),
    "dense-dp": {
        "name": "dense-dp", "seed": 4, "model": "llama-3.1-8b", "gpu": "h100-sxm",
        "data_parallel_size": 2, "workload": _poisson(300, 30.0, (100, 2000), (50, 500)),
    },
    "pd-azure-conv": _shipped("pd_azure_conv_dgx"),
    "async-h100": {
        "name": "async", "seed": 1, "model": "llama-3.1-8b", "gpu": "h100-sxm",
        "engine": {"async_scheduling": True}, "workload": _poisson(300, 20.0, (100, 2000),
                                                                   (50, 500)),
        "slo": {"ttft_s": 1.0, "itl_s": 0.1},
    },
    "three-pool-sglang": {
        "name": "three-pool", "seed": 5, "model": "llama-3.1-8b", "gpu": "h100-sxm",
        "topology": "dgx-h100", "engine": {"max_model_len": 16384},
        "layout": {"kind": "three_pool", "kv_transfer": {"connector": "sglang"}, "pools": [
            {"name": "p", "role": "prefill", "instances": 2},
            {"name": "d", "role": "decode", "instances": 2},
            {"name": "s", "role": "colocated", "instances": 2}]},
        "workload": {"kind": "replay", "trace": "azure-code-2023", "window_start_s": 0,
                     "window_end_s": 120, "rate_multiplier": 4.0},
    },
    "closed-loop-3x": {
        "name": "closed", "seed": 6, "model": "qwen2.5-7b-instruct", "gpu": "h100-sxm",
        "layout": {"kind": "colocated", "pools": [{"name": "main", "instances": 3}],
                   "router": {"kind": "round_robin"}},
        "workload": {"kind": "synthetic", "arrivals": {"kind": "closed_loop", "num_users": 20},
                     "lengths": {"kind": "independent",
                                 "prompt_tokens": {"kind": "uniform", "low": 10, "high": 400},
                                 "output_tokens": {"kind": "uniform", "low": 10, "high": 200}},
                     "num_requests": 300},
    },
    # vllm bench serve: warm-ups, a semaphore, the API server's jittered times (shipped)
    "benchmark-api-server": {**_shipped("bench_rtx4090_mistral7b", max_concurrency=8,
                                        num_warmups=4, num_prompts=120)},
    "benchmark-rate-burstiness": {
        "name": "bench-rate", "seed": 8, "model": "llama-3.1-8b", "gpu": "h100-sxm",
        "api_server": {"jitter_cv": 0.5},
        "workload": {"kind": "benchmark", "num_prompts": 200, "max_concurrency": 24,
                     "request_rate": 40.0, "burstiness": 0.4, "num_warmups": 3,
                     "lengths": {"kind": "independent",
                                 "prompt_tokens": {"kind": "uniform", "low": 10, "high": 900},
                                 "output_tokens": {"kind": "uniform", "low": 5, "high": 300}}},
    },
    # three identical engines in lockstep: step ends coincide with each other and with the
    # arrivals (multiples of 0.25 s), the case the clock's stand-in order keys are for
    "fixed-step-ties": scenario(
        cost={"kind": "fixed", "step_time_s": 0.25},
        engine={"max_num_batched_tokens": 64, "max_num_seqs": 4},
        layout={"kind": "colocated", "pools": [{"name": "main", "instances": 3}],
                "router": {"kind": "least_outstanding_requests"}},
        workload=explicit(*[(f"r{i}", 0.25 * (i // 2), 8 + (7 * i) % 40, 3 + (5 * i) % 17)
                            for i in range(40)]),
    ),
    **{f"golden-{name}": _golden(name) for name in GOLDEN},
    # faults: engines die mid-run (coalesced runs cut at the step in progress) and come back
    "pd-decode-failure": _shipped("pd_decode_failure"),
    "pd-kv-link-failure": {**_shipped("pd_kv_link_failure"),
                           "topology": str(ROOT / "topologies" / "dgx-h100-x2-spine.yaml")},
    "moe-dp-ep-failure": {**_shipped("moe_dp_ep_h100", window_end_s=630), "faults": {
        "events": [{"kind": "instance", "name": "main-0", "at_s": 1.5, "repair_after_s": 1.0}],
        "client": {"max_retries": 1, "retry_delay_s": 0.25}}},
    "three-pool-sglang-faults": {
        "name": "three-pool-faults", "seed": 5, "model": "llama-3.1-8b", "gpu": "h100-sxm",
        "topology": "dgx-h100", "engine": {"max_model_len": 16384},
        "layout": {"kind": "three_pool", "kv_transfer": {"connector": "sglang"}, "pools": [
            {"name": "p", "role": "prefill", "instances": 2},
            {"name": "d", "role": "decode", "instances": 2},
            {"name": "s", "role": "colocated", "instances": 2}]},
        "workload": {"kind": "replay", "trace": "azure-code-2023", "window_start_s": 0,
                     "window_end_s": 120, "rate_multiplier": 8.0},
        "faults": {"events": [
            {"kind": "instance", "name": "p-1", "at_s": 2.0, "repair_after_s": 4.0},
            {"kind": "instance", "name": "d-0", "at_s": 5.0, "repair_after_s": 2.0},
            {"kind": "instance", "name": "s-1", "at_s": 4.0}],
            "kv_transfer_failure_probability": 0.2, "client": {"max_retries": 1}},
    },
}


for _data in SCENARIOS.values():
    # the scenarios run vLLM's sync loop (the default before v0.14) unless they are about
    # async scheduling (the default since): those below run both ways
    _data["engine"] = {"async_scheduling": False, **(_data.get("engine") or {})}

ASYNC_VARIANTS = (
    "preempting-a100",  # KV pressure: runs end where blocks run out, sets dissolve mid-step
    "mooncake-prefix",  # prefix hits
    "dense-dp",  # data-parallel ranks, each its own loop
    "pd-azure-conv",  # decode instances: pulls land and requests arrive during runs
    "closed-loop-3x",  # arrivals as requests finish
    "benchmark-rate-burstiness",
    "fixed-step-ties",  # arrivals exactly at step ends
    "pd-decode-failure",  # an engine dies during a run
    "three-pool-sglang-faults",
    "golden-g3", "golden-g4", "golden-g7", "golden-s4-strict", "golden-s5-balanced",
)
"""Scenarios also run with async scheduling (``<name>-async``); a lockstep data-parallel group
(``moe-dp-ep``) schedules synchronously only."""
SCENARIOS.update({
    f"{name}-async": {**SCENARIOS[name],
                      "engine": {**SCENARIOS[name]["engine"], "async_scheduling": True}}
    for name in ASYNC_VARIANTS
})


def _run(name: str, **kw) -> RunResult:
    return run_scenario(parse_scenario(SCENARIOS[name]), **kw)


def _request_record(r: Request) -> tuple:
    return (r.request_id, r.status, r.arrival_s, r.first_token_s, r.finish_s,
            r.num_output_tokens, r.num_preemptions, r.reject_reason, r.prefill_instance,
            r.decode_instance, r.handoff_bytes, r.handoff_start_s, r.handoff_end_s)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_coalesced_runs_match_the_step_by_step_loop(name):
    stepped = _run(name, coalesce=False)
    coalesced = _run(name, coalesce=True)
    assert [_request_record(r) for r in coalesced.requests] == [
        _request_record(r) for r in stepped.requests]
    for a, b in zip(stepped.requests, coalesced.requests, strict=True):
        assert list(a.token_times_s) == list(b.token_times_s), a.request_id
    assert coalesced.steps == stepped.steps
    assert coalesced.transfers == stepped.transfers
    assert coalesced.end_s == stepped.end_s
    assert summarize_run(coalesced).to_json() == summarize_run(stepped).to_json()
    assert NOTHING == [], "the plans' shared empty list was appended to"


@pytest.mark.parametrize("name", sorted(SCENARIOS))
@pytest.mark.parametrize("coalesce", [True, False])
def test_a_lean_run_summarizes_like_the_full_one(name, coalesce):
    full = _run(name, coalesce=coalesce)
    lean = _run(name, coalesce=coalesce, record_steps=False)
    assert lean.steps == [] and all(r.kept_token_times() is None for r in lean.requests)
    assert summarize_run(lean).to_json() == summarize_run(full).to_json()
    assert [_request_record(r) for r in lean.requests] == [
        _request_record(r) for r in full.requests]


def test_the_scenarios_exercise_what_they_are_named_for():
    for name in ("preempting-a100", "preempting-a100-async"):
        assert sum(r.num_preemptions for r in _run(name).requests) > 0, name
    cached = _run("mooncake-prefix")
    prefilled = sum(n for s in cached.steps for _, n in s.prefill_chunks)
    assert prefilled < sum(r.num_prompt_tokens for r in cached.requests)  # prefix hits
    assert _run("pd-azure-conv").transfers
    assert any("." in s.instance for s in _run("moe-dp-ep").steps)  # data-parallel ranks
    for name in ("pd-decode-failure", "pd-decode-failure-async", "moe-dp-ep-failure",
                 "three-pool-sglang-faults"):
        tallies = _run(name).faults.tallies.values()
        assert sum(t.num_lost for t in tallies) and sum(t.num_retried for t in tallies), name
    for name in ("benchmark-api-server", "benchmark-rate-burstiness"):
        bench = _run(name)
        assert bench.warmup_start_s is not None and bench.warmup_start_s < bench.measured_start_s
        assert any(r.arrival_s > r.dispatch_s for r in bench.requests), name  # slots waited for
    linked = _run("pd-kv-link-failure").faults
    assert linked.num_rerouted and sum(t.num_recomputed for t in linked.tallies.values())


@pytest.mark.parametrize(("name", "share"), [
    ("pd-azure-conv", 0.8), ("async-h100", 0.8),
    # async: a run's first two steps are priced alone, and a decode instance takes each
    # arrival's KV pull in two steps it does not coalesce (scheduled, then started)
    ("pd-azure-conv-async", 0.6),
])
def test_coalescing_advances_many_steps_per_event(monkeypatch, name, share):
    # every run priced, and every extension of one, goes through the pricer's decode_run
    from clustersim.cluster import build

    runs: list[int] = []
    make_pricer = build.make_pricer

    class Counting:
        def __init__(self, pricer):
            self.pricer = pricer

        def __call__(self, plan):
            return self.pricer(plan)

        def decode_run(self, num_decodes, decode_kv_tokens, num_steps):
            runs.append(num_steps)
            return self.pricer.decode_run(num_decodes, decode_kv_tokens, num_steps)

    monkeypatch.setattr(build, "make_pricer", lambda *args: Counting(make_pricer(*args)))
    result = _run(name)
    # most decode steps are priced in runs: far fewer pricings than steps
    assert len(runs) > 100
    assert len(result.steps) > 4 * len(runs)
    assert sum(runs) > share * len(result.steps)


# ------------------------------------------------------------ property tests
@st.composite
def tie_workloads(draw) -> list[Request]:
    """Arrivals on a 0.25 s grid: with 0.25 s steps they land exactly on step ends."""
    n = draw(st.integers(1, 12))
    prefixes = [tuple(range(k * 10, k * 10 + 6)) for k in range(3)]
    requests = [
        Request(f"r{i}", draw(st.integers(0, 20)) * 0.25, draw(st.integers(1, 100)),
                draw(st.integers(1, 40)), draw(st.integers(0, 2)),
                draw(st.sampled_from([(), *prefixes])))
        for i in range(n)
    ]
    return sorted(requests, key=lambda r: r.arrival_s)


def _engine(config, blocks: int, requests: list[Request], coalesce: bool, step_s: float,
            lean: bool = False) -> Instance:
    env = Clock() if coalesce else simpy.Environment()
    kv = KVCacheManager(blocks, config.block_size, config.max_model_len,
                        config.enable_prefix_caching)
    scheduler = Scheduler(config, kv, keep_token_times=not lean, bulk_decodes=coalesce)
    pricer = CheckingPricer(step_s, scheduler, bulk=coalesce)
    engine = Instance(env, "i0", scheduler, pricer, coalesce=coalesce)

    def arrivals():
        for request in requests:
            if request.arrival_s > env.now:
                yield env.timeout(request.arrival_s - env.now)
            engine.submit(request)

    env.process(arrivals())
    env.run(until=10_000)
    assert pricer.num_checked or not engine.steps  # the invariants were checked
    return engine


def _copies(requests: list[Request]) -> list[Request]:
    return [Request(r.request_id, r.arrival_s, r.num_prompt_tokens, r.max_tokens, r.priority,
                    r.block_hashes) for r in requests]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(configs(), tie_workloads(), st.sampled_from([0.25, 0.01]))
def test_a_coalesced_engine_matches_the_step_by_step_one(setup, requests, step_s):
    config, blocks = setup
    stepped, coalesced = _copies(requests), _copies(requests)
    a = _engine(config, blocks, stepped, False, step_s)
    b = _engine(config, blocks, coalesced, True, step_s)
    assert b.steps == a.steps
    for x, y in zip(stepped, coalesced, strict=True):
        assert _request_record(x) == _request_record(y)
        assert list(x.token_times_s) == list(y.token_times_s)
    b.scheduler.kv.check_invariants()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(configs(), tie_workloads(), st.sampled_from([0.25, 0.01]))
def test_a_coalesced_async_engine_matches_the_step_by_step_one(setup, requests, step_s):
    """The same with async scheduling and the FCFS policy only: the engines coalesce."""
    config, blocks = setup
    config = replace(config, async_scheduling=True, policy="fcfs")
    stepped, coalesced = _copies(requests), _copies(requests)
    a = _engine(config, blocks, stepped, False, step_s)
    b = _engine(config, blocks, coalesced, True, step_s)
    assert b.steps == a.steps
    for x, y in zip(stepped, coalesced, strict=True):
        assert _request_record(x) == _request_record(y)
        assert list(x.token_times_s) == list(y.token_times_s)
    b.scheduler.kv.check_invariants()


class RunCounting(CheckingPricer):
    """Counts the steps the engine prices as runs of its decode set."""

    __slots__ = ("num_run_steps",)

    def __init__(self, step_time_s: float, scheduler: Scheduler, bulk: bool) -> None:
        super().__init__(step_time_s, scheduler, bulk)
        self.num_run_steps = 0

    def decode_run(self, num_decodes: int, decode_kv_tokens: int, num_steps: int) -> list[float]:
        self.num_run_steps += num_steps
        return super().decode_run(num_decodes, decode_kv_tokens, num_steps)


def _async_engine(requests: list[Request], coalesce: bool, blocks: int = 64) -> Instance:
    """An async engine stepping 0.25 s, whose requests arrive at their times."""
    config = SchedulerConfig(max_num_batched_tokens=32, max_num_seqs=6, max_model_len=128,
                             block_size=4, async_scheduling=True)
    env = Clock() if coalesce else simpy.Environment()
    kv = KVCacheManager(blocks, config.block_size, config.max_model_len, True)
    scheduler = Scheduler(config, kv, bulk_decodes=coalesce)
    engine = Instance(env, "i0", scheduler, RunCounting(0.25, scheduler, coalesce),
                      coalesce=coalesce)

    def arrivals():
        for request in requests:
            if request.arrival_s > env.now:
                yield env.timeout(request.arrival_s - env.now)
            engine.submit(request)

    env.process(arrivals())
    env.run(until=1_000)
    return engine


# four decodes from t = 0 (their prompts' one step, then a run), finishing at different
# steps; one more request arriving during step 0, 1 or a later one of a run, or exactly at
# a step's end (0.25 s steps), or after the first ones finished
@pytest.mark.parametrize("arrival_s", [0.1, 0.25, 0.3, 0.5, 0.6, 1.0, 2.1, 4.75, 6.0, 9.3])
@pytest.mark.parametrize("blocks", [64, 19])  # 19: the decodes outgrow the KV cache
def test_an_async_run_cut_anywhere_matches_the_step_by_step_loop(arrival_s, blocks):
    def requests() -> list[Request]:
        return [Request("a", 0.0, 5, 9), Request("b", 0.0, 7, 14), Request("c", 0.0, 3, 30),
                Request("d", 0.0, 9, 22), Request("late", arrival_s, 6, 12)]

    stepped, coalesced = requests(), requests()
    a = _async_engine(stepped, False, blocks)
    b = _async_engine(coalesced, True, blocks)
    assert b.steps == a.steps
    for x, y in zip(stepped, coalesced, strict=True):
        assert _request_record(x) == _request_record(y)
        assert list(x.token_times_s) == list(y.token_times_s)
    assert b.price_step.num_run_steps > len(b.steps) / 2  # (it coalesced)
    b.scheduler.kv.check_invariants()


def _cluster(data: dict, model: str, requests, coalesce: bool, quantum: float):
    env = Clock() if coalesce else simpy.Environment()
    done: list[Request] = []
    cluster = Cluster(env, parse_scenario(data), load_model(model), np.random.default_rng(0),
                      on_done=done.append, coalesce=coalesce)
    objects = [Request(r[0], round(r[1] / quantum) * quantum, r[2], r[3],
                       priority=r[5] if len(r) > 5 else 0,
                       block_hashes=chain_block_hashes(r[4])) for r in requests]

    def arrivals():
        for request in sorted(objects, key=lambda r: r.arrival_s):
            if request.arrival_s > env.now:
                yield env.timeout(request.arrival_s - env.now)
            cluster.submit(request)

    env.process(arrivals())
    env.run(until=1_000)
    return cluster, done, objects


def _same_cluster_run(data: dict, model: str, requests, quantum: float) -> None:
    a_cluster, a_done, a_requests = _cluster(data, model, requests, False, quantum)
    b_cluster, b_done, b_requests = _cluster(data, model, requests, True, quantum)
    assert [r.request_id for r in b_done] == [r.request_id for r in a_done]
    for x, y in zip(a_requests, b_requests, strict=True):
        assert _request_record(x) == _request_record(y)
        assert list(x.token_times_s) == list(y.token_times_s)
    for x, y in zip(a_cluster.all_instances(), b_cluster.all_instances(), strict=True):
        assert y.steps == x.steps, x.name


EXPLICIT = {"kind": "explicit", "requests": [
    {"id": "x", "arrival_s": 0, "prompt_tokens": 1, "output_tokens": 1}]}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(), st.sampled_from([0.01, 0.05]), st.sampled_from([0.01, 0.05]))
def test_coalesced_disaggregated_clusters_match_step_by_step(case, quantum, step_s):
    requests, engine, layout = case
    data = {"name": "prop", "model": "llama-3.1-8b", "gpu": "h100-sxm", "topology": "dgx-h100",
            "engine": engine, "layout": layout, "workload": EXPLICIT,
            "cost": {"kind": "fixed", "step_time_s": step_s}}
    _same_cluster_run(data, "llama-3.1-8b", requests, quantum)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data_parallel_cases(), st.sampled_from([0.01, 0.001]))
def test_coalesced_data_parallel_ranks_match_step_by_step(case, quantum):
    model, pools, engine, cost, requests = case
    data = {"name": "prop", "model": model, "gpu": "h100-sxm", "engine": engine, "cost": cost,
            "layout": {"kind": "colocated", "pools": pools}, "workload": EXPLICIT}
    _same_cluster_run(data, model, requests, quantum)


@pytest.mark.parametrize("name", ["preempting-a100", "pd-azure-conv", "moe-dp-ep",
                                  "golden-g3"])
def test_the_totals_a_run_keeps_are_its_records_summed(name):
    from clustersim.engine.steplog import StepTotals

    result = _run(name)
    assert result.step_totals == StepTotals.of_records(result.steps)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(split_data_parallel_cases(), st.sampled_from([0.01, 0.001]))
def test_coalesced_split_data_parallel_groups_match_step_by_step(case, quantum):
    model, engine, layout, cost, requests = case
    data = {"name": "prop", "model": model, "gpu": "h100-sxm", "topology": "dgx-h100",
            "engine": engine, "layout": layout, "cost": cost, "workload": EXPLICIT}
    _same_cluster_run(data, model, requests, quantum)
