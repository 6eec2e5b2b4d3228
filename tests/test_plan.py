"""The planner end to end on small scenarios: its answers move the way the physics says, its
statistics hold on fresh seeds, and it gives the same bytes wherever it runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from clustersim.plan.executors import ProcessExecutor, SerialExecutor, run_job
from clustersim.plan.planner import Planner
from clustersim.plan.result import PlanResult
from clustersim.scenario import parse_scenario
from tests.helpers import run_cli

FAST = {"seeds": 2, "tolerance": 0.05, "simulate_top": 3, "min_requests": 200,
        "min_duration_s": 10}


def scenario(**overrides) -> dict:
    data = {
        "name": "plan-test", "seed": 3, "model": "llama-3.1-8b", "gpu": "h100-sxm",
        "engine": {"max_model_len": 8192},
        "workload": {"kind": "poisson", "rate_per_s": 10, "num_requests": 200,
                     "prompt_tokens": {"kind": "uniform", "low": 3000, "high": 6000},
                     "output_tokens": {"kind": "uniform", "low": 100, "high": 300}},
        "slo": {"ttft_s": 3.0, "tpot_s": 0.03},
        "plan": {"gpu_budget": 6, "layouts": ["disaggregated"], "search": FAST},
    }
    for key, value in overrides.items():
        data[key] = {**data[key], **value} if isinstance(value, dict) and key in data else value
    return data


def plan(data: dict, executor=None) -> PlanResult:
    return Planner(parse_scenario(data), executor or SerialExecutor()).run()


def prefill_share(result: PlanResult) -> float:
    c = result.recommended.candidate
    return c.pool("prefill").num_gpus / c.num_gpus


def one_gpu_node(tmp_path: Path, gbit_per_s: float) -> str:
    """A server of one H100 with one NIC of ``gbit_per_s``: every instance on its own node,
    so every KV handoff crosses the network."""
    path = tmp_path / f"h100-nic-{gbit_per_s:g}g.yaml"
    path.write_text(yaml.safe_dump({
        "name": path.stem,
        "links": {
            "pcie": {"bw_gb_per_s_per_dir": 63, "efficiency": 0.83, "latency_us": 5,
                     "source": "test: PCIe Gen5 x16"},
            "nic": {"bw_gb_per_s_per_dir": gbit_per_s / 8, "efficiency": 0.85,
                    "latency_us": 2, "source": "test"},
        },
        "nodes": [{"name": "node0", "gpus": {"type": "h100-sxm", "count": 1},
                   "pcie_link": "pcie", "gpu_fabric": {"kind": "pcie"},
                   "nics": {"count": 1, "link": "nic"}}],
    }))
    return str(path)


# ------------------------------------------------------------ the physics
def test_a_tighter_ttft_limit_moves_the_answer_toward_more_prefill():
    # a TPOT limit of 20 ms makes the decode side need half the GPUs when TTFT is loose
    loose = plan(scenario(slo={"ttft_s": 3.0, "tpot_s": 0.02}))
    tight = plan(scenario(slo={"ttft_s": 0.3, "tpot_s": 0.02}))
    assert loose.recommended.candidate.pd_ratio == "3:3"
    assert tight.recommended.candidate.pd_ratio == "4:2"
    assert prefill_share(tight) > prefill_share(loose)


def test_a_slower_kv_link_moves_the_answer_toward_colocation(tmp_path):
    def answer(gbit_per_s: float) -> PlanResult:
        return plan(scenario(
            workload={"prompt_tokens": {"kind": "uniform", "low": 2000, "high": 5000}},
            slo={"ttft_s": 1.0, "tpot_s": 0.02},
            plan={"gpu_budget": 2, "layouts": ["colocated", "disaggregated"],
                  "nodes": {"h100-sxm": one_gpu_node(tmp_path, gbit_per_s)},
                  "handoff_budget_s": 0.05}))

    fast, slow = answer(400), answer(4)
    # on the fast link the split serves the most (two draws may leave it tied with colocation,
    # whose fewer pools then take the tie: the physics is the goodput's)
    best = max((c for c in fast.candidates if c.goodput is not None),
               key=lambda c: c.goodput.mean_per_s)
    assert best.candidate.layout == "disaggregated"
    assert fast.recommended.candidate.layout == "disaggregated" or (
        fast.tie is not None and fast.tie.by_goodput == best.id)
    assert slow.recommended.candidate.layout == "colocated"
    split = next(c for c in slow.candidates if c.candidate.layout == "disaggregated")
    assert split.status == "infeasible" and "TTFT" in split.reason


def test_a_higher_target_rate_never_needs_fewer_gpus():
    sizes = []
    for target in (8.0, 40.0, 80.0):
        result = plan(scenario(
            workload={"prompt_tokens": {"kind": "uniform", "low": 500, "high": 1500}},
            slo={"ttft_s": 1.0, "tpot_s": 0.05},
            plan={"objective": "min_gpus", "target_rate_per_s": target,
                  "layouts": ["colocated"], "gpu_budget": None}))
        assert result.recommended is not None, result.answer
        assert result.recommended.goodput.mean_per_s >= target
        sizes.append(result.recommended.candidate.num_gpus)
    assert sizes == sorted(sizes) and sizes[0] < sizes[-1]


# --------------------------------------------------------- the statistics
@pytest.fixture(scope="module")
def loose_plan() -> tuple[Planner, PlanResult]:
    planner = Planner(parse_scenario(scenario()), SerialExecutor())
    return planner, planner.run()


def test_every_bisection_meets_its_tolerance(loose_plan):
    _, result = loose_plan
    for c in result.candidates:
        if c.status != "simulated":
            continue
        assert c.goodput.converged, c.id
        for seed in range(len(c.goodput.per_seed_per_s)):
            passed = [p.rate_per_s for p in c.probes if p.seed == seed and p.met]
            failed = [p.rate_per_s for p in c.probes if p.seed == seed and not p.met]
            assert max(passed) == c.goodput.per_seed_per_s[seed]
            assert min(failed) / max(passed) - 1 <= result.tolerance + 1e-12


def test_the_recommendation_holds_on_fresh_seeds_within_its_interval(loose_plan):
    planner, result = loose_plan
    rec = result.recommended
    low = rec.goodput.low_per_s
    fresh = [run_job(planner._job(rec.candidate, 100 + k, low)) for k in range(3)]
    target = planner.slo.attainment_target
    # The interval is on the mean over traffic draws: over fresh draws together, attainment at
    # its low end meets the target (one short draw near the cliff alone may still miss it).
    attainments = [summary.slo.attainment for summary in fresh]
    assert sum(attainments) / len(attainments) >= target, attainments
    high = rec.goodput.high_per_s * (1 + result.tolerance)
    above = [run_job(planner._job(rec.candidate, 100 + k, high * 1.25)) for k in range(3)]
    assert not all(summary.slo.meets for summary in above)


def test_an_sglang_handoff_gets_sglang_launch_lines(loose_plan):
    """The same recommendation, the scenario's KV handed over by SGLang's connector: SGLang's
    server with its disaggregation mode, behind its router, not vllm serve with NIXL."""
    from clustersim.cluster.build import default_layout
    from clustersim.plan.answer import serve_commands

    planner, result = loose_plan
    layout = planner.scenario.layout or default_layout()
    sglang = planner.scenario.model_copy(update={"layout": layout.model_copy(update={
        "kv_transfer": layout.kv_transfer.model_copy(update={"connector": "sglang"})})})
    lines = serve_commands(result.recommended, planner.model, sglang)
    servers = [line for line in lines if not line.startswith("#")]
    assert len(servers) == len(result.recommended.candidate.pools)
    assert all(line.startswith("python -m sglang.launch_server --model-path meta-llama/")
               for line in servers)
    roles = {pool.role for pool in result.recommended.candidate.pools}
    for role in roles - {"colocated"}:
        assert any(f"--disaggregation-mode {role}" in line for line in servers)
    assert not any("NixlConnector" in line or "vllm serve" in line for line in lines)
    if "prefill" in roles:
        assert "sglang_router.launch_router --pd-disaggregation" in lines[-1]


def test_the_ledger_keeps_every_candidate_with_figures_or_a_reason(loose_plan):
    _, result = loose_plan
    assert len(result.candidates) == 5  # x + y = 6 with x, y >= 1
    for c in result.candidates:
        if c.status == "simulated":
            assert c.goodput.mean_per_s > 0 and c.at_goodput is not None and c.binding
        else:
            assert c.reason, c.id
    assert result.recommended.id in result.pareto or result.pareto
    assert result.serve_commands[0].startswith("vllm serve meta-llama/Llama-3.1-8B")
    assert "NixlConnector" in result.serve_commands[0]
    assert "--goodput ttft:3000 tpot:30" in result.bench_command


# -------------------------------------------------------------- answers
def test_an_unsatisfiable_slo_is_an_answer_that_names_the_closest_candidate():
    result = plan(scenario(slo={"ttft_s": 0.001},
                           plan={"gpu_budget": 2, "layouts": ["colocated", "disaggregated"]}))
    assert result.recommended is None
    assert "even at a trickle" in result.answer and "Closest" in result.answer
    assert all(c.status in ("infeasible", "pruned", "screened") for c in result.candidates)


def test_candidates_that_cannot_run_are_pruned_with_their_reason():
    result = plan(scenario(model="llama-3.1-70b", gpu="rtx4090", engine={"max_model_len": 4096},
                           plan={"gpu_budget": 16, "layouts": ["colocated"],
                                 "colocated": {"tensor_parallel_sizes": [1, 16]}}))
    reasons = {c.candidate.pool("colocated").tensor_parallel_size: c.reason
               for c in result.candidates}
    assert "does not fit on rtx4090" in reasons[1]
    assert "spans nodes" in reasons[16]
    assert result.recommended is None and "pruned" in result.answer


# ----------------------------------------------------------- executors
def test_the_same_plan_serially_in_a_process_pool_and_twice():
    data = scenario(plan={"gpu_budget": 2, "layouts": ["colocated", "disaggregated"]})
    serial = plan(data).to_json()
    executor = ProcessExecutor(2)
    try:
        pooled = plan(data, executor).to_json()
    finally:
        executor.close()
    assert json.dumps(serial) == json.dumps(pooled)
    assert json.dumps(plan(data).to_json()) == json.dumps(serial)


def test_plan_json_is_written_one_candidate_at_a_time_with_the_same_bytes():
    from dataclasses import replace

    result = plan(scenario(plan={"gpu_budget": 2, "layouts": ["colocated", "disaggregated"]}))
    assert len(result.candidates) > 1
    assert "".join(result.json_chunks()) == json.dumps(result.to_json(), indent=2)
    empty = replace(result, candidates=(), recommended=None, runner_up=None)
    assert "".join(empty.json_chunks()) == json.dumps(empty.to_json(), indent=2)


@pytest.mark.slow
def test_the_ray_executor_gives_the_process_pools_plan(monkeypatch):
    ray = pytest.importorskip("ray")
    from clustersim.plan.executors import RayExecutor

    data = scenario(plan={"gpu_budget": 2, "layouts": ["colocated", "disaggregated"]})
    # a Ray of its own, never one already running on the machine: address="local" starts a
    # new local instance even when another runs, and RAY_ADDRESS (which ray.init reads only
    # when the address is None or "auto") is cleared so its workers do not inherit it either
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert not ray.is_initialized()
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        on_ray = plan(data, RayExecutor()).to_json()
    finally:
        ray.shutdown()
    pool = ProcessExecutor(2)
    try:
        assert on_ray == plan(data, pool).to_json()
    finally:
        pool.close()


# ----------------------------------------------------------------- CLI
def test_plan_cli_writes_the_plan_and_the_ledger(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(scenario(plan={"gpu_budget": 2,
                                                  "layouts": ["colocated", "disaggregated"]})))
    code, output = run_cli("plan", str(path), "--out", str(tmp_path / "out"),
                           "--executor", "serial", "--no-report")
    assert code == 0, output
    assert "recommendation: " in output and "vllm serve" in output and "vllm bench serve" in output
    assert "wrote report" not in output
    # not a terminal: one plain progress line per round, the plan's count so far in each
    rounds = [line for line in output.splitlines() if line.startswith("plan: goodput, round")]
    assert rounds and rounds[0].startswith("plan: goodput, round 1: ")
    assert all(" in " in line and line.endswith(" s so far)") for line in rounds)
    data = json.loads((tmp_path / "out" / "plan.json").read_text())
    assert data["recommended"] and len(data["candidates"]) == 2  # 2 x TP1 and 1P + 1D
    ledger = (tmp_path / "out" / "ledger.csv").read_text().splitlines()
    assert ledger[0].startswith("id,label,layout,status") and len(ledger) == 3
    code, output = run_cli("plan", str(path), "--out", str(tmp_path / "again"),
                           "--executor", "serial", "--json", "--no-report")
    assert code == 0 and json.loads(output) == data


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"plan": None}, "plan: the scenario has no plan: section"),
        ({"plan": {"objective": "min_gpus"}}, "plan: Value error, min_gpus needs target_rate"),
        ({"plan": {"gpu_budget": 2, "layouts": ["colocated", "colocated"]}},
         "plan.layouts: Value error, layouts repeat"),
        ({"plan": {"gpu_budget": 2, "nodes": {"h100-sxm": "a100-8x"}}},
         "plan.nodes.h100-sxm: 'a100-8x' holds a100-80gb-sxm GPUs, not h100-sxm"),
        ({"plan": {"gpu_budget": 0}}, "plan.gpu_budget: Input should be greater than 0"),
        ({"plan": {"objective": "min_cost", "target_rate_per_s": 5,
                   "colocated": {"gpus": ["gb300"]}}},
         "plan.prices_usd_per_gpu_hour: min_cost needs a price for every GPU it may use; none "
         "for gb300"),
    ],
)
def test_bad_plans_exit_2_with_one_line(tmp_path, change, message):
    data = scenario()
    data.update(change)
    if data["plan"] is None:
        del data["plan"]
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    code, output = run_cli("plan", str(path), "--out", str(tmp_path / "out"),
                           "--executor", "serial", "--report", str(tmp_path / "report"))
    assert code == 2, output
    first = output.strip().splitlines()[0]
    assert first.startswith(f"{path}: {message.replace('Value error, ', '')}")
    assert "Traceback" not in output


def test_a_three_pool_plan_routes_each_class_to_its_pool():
    data = scenario(engine={"max_model_len": 32768}, slo={"ttft_s": 3.0, "tpot_s": 0.05},
                    plan={"gpu_budget": 3, "layouts": ["three_pool"]})
    data["workload"] = {"kind": "poisson", "rate_per_s": 10, "num_requests": 200, "classes": [
        {"name": "long_document_16k", "weight": 0.1},
        {"name": "decode_baseline", "weight": 0.45},
        {"name": "short_interactive", "weight": 0.45}]}
    result = plan(data)
    (c,) = result.candidates
    assert c.candidate.label() == ("1P (h100-sxm TP1) + 1D (h100-sxm TP1) + "
                                   "1 x h100-sxm TP1")
    assert c.status == "simulated" and result.recommended is c
    assert c.at_goodput.handoff_s is not None  # the long documents took the split
    assert result.serve_commands[-1].endswith("behind a load-balancing router")


def test_quantization_is_a_search_axis_and_reaches_the_serve_line():
    result = plan(scenario(plan={"gpu_budget": 2, "layouts": ["colocated"],
                                 "quantization": [None, "fp8"],
                                 "kv_cache_dtype": ["auto", "fp8"]}))
    labels = {c.candidate.label() for c in result.candidates}
    assert labels == {"2 x h100-sxm TP1", "2 x h100-sxm TP1, fp8", "2 x h100-sxm TP1, fp8 KV",
                      "2 x h100-sxm TP1, fp8, fp8 KV"}
    best = result.recommended.candidate
    assert (best.quantization, best.kv_cache_dtype) == ("fp8", "fp8")  # fewer bytes per step
    line = result.serve_commands[0]
    assert "--quantization fp8" in line and "--kv-cache-dtype fp8" in line
