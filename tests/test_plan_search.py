"""The planner's pure parts without simulation: bisection, intervals, the analytic screen's
queueing arithmetic, the search space and the fleets it builds."""

from __future__ import annotations

import math

import numpy as np
import pytest

from clustersim.catalog import load_gpu, load_model
from clustersim.cost.roofline import CostModel
from clustersim.metrics.goodput import log_odds
from clustersim.plan.bisect import RateSearch, mean_interval
from clustersim.plan.fleet import NodeTemplate, nodes_needed
from clustersim.plan.screen import (
    Engine,
    TrafficStats,
    _wait,
    capacity,
    colocated_state,
    prefill_state,
)
from clustersim.plan.space import Candidate, PoolChoice, fill_budget
from clustersim.scenario import SLO
from clustersim.scenario.plan import PlanSpec


# ------------------------------------------------------------- bisection
def run(search: RateSearch, meets) -> RateSearch:
    while (rate := search.next_rate()) is not None:
        search.record(rate, meets(rate))
    return search


@pytest.mark.parametrize("threshold", [0.5, 3.0, 41.5])
@pytest.mark.parametrize("start", [1.0, 100.0])
def test_bisection_brackets_the_threshold_within_its_tolerance(threshold, start):
    search = run(RateSearch(start, tolerance=0.02), lambda rate: rate <= threshold)
    assert search.converged
    assert search.lo <= threshold < search.hi
    assert (search.hi - search.lo) / search.lo <= 0.02
    assert search.goodput == search.lo
    assert search.num_probes <= 24


def test_a_search_that_fails_at_a_trickle_is_infeasible():
    search = run(RateSearch(10.0, tolerance=0.02), lambda rate: False)
    assert search.infeasible and search.goodput == 0.0
    assert search.hi == pytest.approx(10.0 / 256)


def test_a_search_that_never_fails_stops_at_its_cap():
    search = run(RateSearch(10.0, tolerance=0.02, max_rate=80.0), lambda rate: True)
    assert search.capped and search.goodput == 80.0


def test_a_search_stops_at_max_probes():
    search = run(RateSearch(1.0, tolerance=1e-6, max_probes=5), lambda rate: rate < 3.3)
    assert search.num_probes == 5 and not search.converged


def run_with_margins(search: RateSearch, attainment, target: float = 0.9) -> RateSearch:
    while (rate := search.next_rate()) is not None:
        a = attainment(rate)
        search.record(rate, a >= target, margin=log_odds(a) - log_odds(target))
    return search


@pytest.mark.parametrize("cliff", [0.6, 3.0, 41.5, 630.0])
@pytest.mark.parametrize("width", [0.01, 0.05, 0.2])
@pytest.mark.parametrize("start", [0.2, 0.97, 1.0, 1.6, 7.0])
def test_margins_close_the_same_bracket_in_no_more_probes(cliff, width, start):
    """Attainment falling off a cliff (a logistic in the rate, steep or gentle), the search
    starting below or above it: guided by margins, it brackets the crossing as plain
    bisection does, within the tolerance."""
    def attainment(rate: float) -> float:
        return 1 / (1 + math.exp(min(50.0, (rate - cliff) / (width * cliff))))

    start *= cliff

    crossing = cliff + width * cliff * math.log(1 / 0.9 - 1)
    plain = run(RateSearch(start, tolerance=0.02), lambda rate: attainment(rate) >= 0.9)
    guided = run_with_margins(RateSearch(start, tolerance=0.02), attainment)
    for search in (plain, guided):
        assert search.converged
        assert search.lo <= crossing * (1 + 1e-9) and crossing <= search.hi * (1 + 1e-9)
    assert guided.num_probes <= plain.num_probes


def test_margins_save_probes_near_a_steep_cliff():
    """From a start just under goodput (the screen's usual error), a steep cliff is closed in
    about half the probes of bisection."""
    def attainment(rate: float) -> float:
        return 1 / (1 + math.exp(min(50.0, (rate - 640.0) / 6.4)))

    plain = run(RateSearch(620.0, tolerance=0.02), lambda rate: attainment(rate) >= 0.9)
    guided = run_with_margins(RateSearch(620.0, tolerance=0.02), attainment)
    assert guided.lo == pytest.approx(plain.lo, rel=0.02)
    assert guided.num_probes <= plain.num_probes - 2, (guided.num_probes, plain.num_probes)


def test_a_margin_that_contradicts_its_verdict_is_ignored():
    search = RateSearch(10.0, tolerance=0.02)
    search.record(10.0, True, margin=-0.5)
    search.record(20.0, False, margin=0.3)
    assert search.margins == {}
    assert search.next_rate() == pytest.approx(math.sqrt(200.0))


def test_mean_interval_is_students_t():
    mean, low, high = mean_interval([1.0, 2.0, 3.0])
    half = 4.303 * 1.0 / math.sqrt(3)
    assert mean == 2.0 and low == pytest.approx(0.0) and high == pytest.approx(2 + half)
    assert mean_interval([5.0]) == (5.0, 5.0, 5.0)
    mean, low, high = mean_interval([10.0, 10.0, 10.0])
    assert low == high == 10.0


def test_draws_that_end_on_one_probe_keep_their_brackets_spread():
    """Two searches that pass at 10 and fail at 11 know their goodputs only to within that
    bracket: the interval is as wide as two uniforms on it make it, not zero."""
    mean, low, high = mean_interval([10.0, 10.0], widths=[1.0, 1.0])
    half = 12.706 * math.sqrt(1 / 12 / 2)
    assert mean == 10.0 and low == pytest.approx(10 - half) and high == pytest.approx(10 + half)
    search = RateSearch(start_rate=10.0, tolerance=0.2)
    assert search.bracket_width == 0.0
    search.record(10.0, True)
    search.record(11.0, False)
    assert search.bracket_width == pytest.approx(1.0)


# ---------------------------------------------------------------- screen
def test_erlang_c_and_allen_cunneen_against_known_queues():
    # M/M/1 at load 0.5 with mean service 1 s: waits with probability 0.5, mean wait 1 s
    waits, mean = _wait(1, 0.5, 1.0, 1.0, 1.0)
    assert waits == pytest.approx(0.5) and mean == pytest.approx(1.0)
    # M/M/2 at per-server load 0.5: Erlang C = 1/3, mean wait C x S / (2 (1 - rho)) = 1/3
    waits, mean = _wait(2, 0.5, 1.0, 1.0, 1.0)
    assert waits == pytest.approx(1 / 3) and mean == pytest.approx(1 / 3)
    # deterministic service (cs^2 = 0) halves the M/M/1 wait (Pollaczek-Khinchine's M/D/1)
    assert _wait(1, 0.5, 1.0, 1.0, 0.0)[1] == pytest.approx(0.5)


def h100_engine(tokens: int = 8192) -> Engine:
    model, gpu = load_model("llama-3.1-8b"), load_gpu("h100-sxm")
    return Engine(CostModel(model, gpu, 1), tokens, 1024, 10_000_000)


def traffic(prompt: int = 2000, output: int = 200) -> TrafficStats:
    return TrafficStats.of(np.full(100, prompt), np.full(100, output), 1.0)


def test_a_fixed_prompt_carries_half_its_length_in_causal_pairs_per_token():
    assert traffic(prompt=2001).pairs_per_prompt_token == pytest.approx(1001)
    assert traffic().service_cv_sq == pytest.approx(0.0)


def test_capacity_falls_with_a_tighter_ttft_and_rises_with_pooling():
    engine, t = h100_engine(), traffic()

    def colocated(ttft: float, servers: int = 1) -> float:
        slo = SLO(ttft_s=ttft, tpot_s=0.2)
        return capacity(lambda lam: colocated_state(engine, t, slo, 0.9, lam, servers)).rate_per_s

    # 0.1 s: a 2,000-token prompt's prefill alone takes about 45 ms on the H100, so queueing
    # for the prefill binds well below the TPOT-bound rate
    loose, tight = colocated(2.0), colocated(0.1)
    assert 0 < tight < loose
    assert colocated(0.1, servers=8) > tight  # one queue over 8 instances waits less


def test_a_limit_no_load_can_meet_gives_zero_capacity_and_names_it():
    engine, t = h100_engine(), traffic(prompt=6000)
    est = capacity(lambda lam: prefill_state(engine, t, SLO(ttft_s=0.01), 0.9, lam, 0.0, 0.0))
    assert est.rate_per_s == 0.0 and est.binding == "ttft"


# ----------------------------------------------------------------- space
def family(*tps: int) -> Candidate:
    roles = ("colocated",) if len(tps) == 1 else ("prefill", "decode")
    return Candidate("colocated" if len(tps) == 1 else "disaggregated",
                     tuple(PoolChoice(r, "h100-sxm", tp, 1) for r, tp in zip(roles, tps,
                                                                             strict=True)),
                     None, True)


def test_filling_a_budget_gives_every_pd_ratio_once():
    plan = PlanSpec(gpu_budget=6)
    ratios = [c.pd_ratio for c in fill_budget(family(1, 1), 6, plan)]
    assert ratios == ["1:5", "2:4", "3:3", "4:2", "5:1"]
    # TP2 prefill + TP1 decode: 2x + y = 6 (or 5, when no TP1 instance fits the last GPU)
    sizes = [(c.pool("prefill").instances, c.pool("decode").instances)
             for c in fill_budget(family(2, 1), 6, plan)]
    assert sizes == [(1, 4), (2, 2)]
    assert [c.num_gpus for c in fill_budget(family(4), 64, plan)] == [64]
    only = PlanSpec(gpu_budget=6, prefill={"instances": [2]}, decode={"instances": [1, 2]})
    assert [c.pd_ratio for c in fill_budget(family(1, 1), 6, only)] == ["2:1", "2:2"]


def test_candidate_ids_are_unique_and_labels_read_like_xpyd():
    c = family(2, 1).resized({"prefill": 3, "decode": 2})
    assert c.label() == "3P (h100-sxm TP2) + 2D (h100-sxm TP1)"
    assert c.num_gpus == 8 and c.gpus_by_type == {"h100-sxm": 8}
    ids = {x.id for x in fill_budget(family(1, 1), 6, PlanSpec(gpu_budget=6))}
    assert len(ids) == 5


def test_nodes_are_filled_first_fit_in_pool_order():
    template = NodeTemplate("dgx-h100", "dgx-h100", "h100-sxm", 8, True, 1.0, 1.0)
    c = family(2, 4).resized({"prefill": 3, "decode": 1})  # 6 GPUs, then a TP4 group
    assert nodes_needed(c, {"h100-sxm": template}) == {"h100-sxm": 2}
    c = family(2, 2).resized({"prefill": 2, "decode": 2})
    assert nodes_needed(c, {"h100-sxm": template}) == {"h100-sxm": 1}


def _first_fit(candidate: Candidate, sizes: dict[str, int]) -> dict[str, int]:
    """First-fit one instance at a time over a list of nodes: what nodes_needed computes."""
    free: dict[str, list[int]] = {}
    for pool in candidate.pools:
        size, nodes = sizes[pool.gpu], free.setdefault(pool.gpu, [])
        need = pool.gpus_per_instance
        for _ in range(pool.instances):
            if need > size:
                nodes += [0] * (need // size) + ([size - need % size] if need % size else [])
                continue
            slot = next((i for i, left in enumerate(nodes) if left >= need), None)
            if slot is None:
                nodes.append(size)
                slot = len(nodes) - 1
            nodes[slot] -= need
    return {gpu: len(nodes) for gpu, nodes in free.items()}


def test_node_counts_equal_first_fit_one_instance_at_a_time():
    rng = np.random.default_rng(7)
    for _ in range(3000):
        sizes = {"a": int(rng.choice([1, 2, 4, 8])), "b": int(rng.choice([4, 8, 16]))}
        templates = {gpu: NodeTemplate(gpu, gpu, gpu, n, True, 1.0, 1.0)
                     for gpu, n in sizes.items()}
        roles = ("prefill", "decode", "colocated")[:int(rng.integers(1, 4))]
        pools = tuple(PoolChoice(role, str(rng.choice(["a", "b"])),
                                 int(rng.choice([1, 2, 3, 4, 8, 16])), int(rng.integers(1, 40)),
                                 pipeline_parallel_size=int(rng.choice([1, 1, 2, 3])))
                      for role in roles)
        c = Candidate("three_pool", pools, 8192, True)
        assert nodes_needed(c, templates) == _first_fit(c, sizes), pools


def test_a_three_pool_screen_splits_the_traffic_as_the_cluster_routes_it():
    from clustersim.plan.estimate import Screen
    from clustersim.scenario import parse_scenario

    scenario = parse_scenario({
        "name": "t", "model": "llama-3.1-8b", "gpu": "h100-sxm",
        "workload": {"kind": "poisson", "rate_per_s": 1, "num_requests": 10,
                     "prompt_tokens": 100, "output_tokens": 100},
        "slo": {"ttft_s": 1.0},
    })
    prompts = np.array([4000, 4000, 256, 256, 256, 1500, 1500, 1500, 1500, 3000])
    outputs = np.array([64, 64, 512, 512, 512, 128, 128, 128, 128, 1000])
    dgx = NodeTemplate("dgx-h100", "dgx-h100", "h100-sxm", 8, True, 300e9, 42e9)
    screen = Screen(scenario, load_model("llama-3.1-8b"), (prompts, outputs), 1.0,
                    scenario.slo, {"h100-sxm": dgx}, 1.0)
    classes = screen.classes()
    # the request classes (prefill-heavy, decode-heavy, mixed) with the cluster's thresholds
    # (prompt > 2048, output > 256)
    assert classes["prefill_heavy"].share == pytest.approx(0.2)
    assert classes["decode_heavy"].share == pytest.approx(0.3)
    assert classes["mixed"].share == pytest.approx(0.5)  # both short, or both long
    assert classes["prefill_heavy"].stats.mean_prompt_tokens == 4000
    three = Candidate("three_pool", (PoolChoice("prefill", "h100-sxm", 1, 1),
                                     PoolChoice("decode", "h100-sxm", 1, 1),
                                     PoolChoice("colocated", "h100-sxm", 1, 1)), None, True)
    screened = screen(three)
    assert screened.reason is None and screened.estimate_per_s > 0
    loads = screen._loads(three)
    assert loads["prefill"][0] == pytest.approx(0.2)
    assert loads["decode"][0] == pytest.approx(0.5)  # the split's decodes and decode-heavy
    assert loads["colocated"][0] == pytest.approx(0.5)
    # the estimate is what the most loaded pool allows for the whole traffic
    assert screened.estimate_per_s == pytest.approx(
        min(rate / share for share, rate, _ in loads.values()))


def test_the_screen_prices_fp8_block_experts_the_way_vllm_loads_them():
    """MiniMax-M2.5 on eight H200s: without expert parallelism vLLM cannot load its experts
    (192-wide slices of 128-wide FP8 blocks), so the screen says why; with the scenario's
    enable_expert_parallel the engine is priced with 32 whole experts a GPU, as it runs."""
    from clustersim.plan.estimate import Screen
    from clustersim.scenario import parse_scenario

    def screen(ep: bool) -> Screen:
        scenario = parse_scenario({
            "name": "t", "model": "minimax-m2.5", "gpu": "h200",
            "enable_expert_parallel": ep,
            "workload": {"kind": "poisson", "rate_per_s": 1, "num_requests": 4,
                         "prompt_tokens": 1000, "output_tokens": 100},
            "slo": {"ttft_s": 1.0},
        })
        hgx = NodeTemplate("hgx-h200", "hgx-h200", "h200", 8, True, 450e9, 50e9)
        return Screen(scenario, load_model("minimax-m2.5"),
                      (np.array([1000] * 4), np.array([100] * 4)), 1.0, scenario.slo,
                      {"h200": hgx}, 1.0)

    candidate = Candidate("colocated", (PoolChoice("colocated", "h200", 8, 1),), None, True)
    refused = screen(False).engine("h200", 8, candidate)
    assert isinstance(refused, str)
    assert refused.startswith("h200 TP8: minimax-m2.5's 1,536-wide experts sliced over 8 GPUs")
    engine = screen(True).engine("h200", 8, candidate)
    assert not isinstance(engine, str)
    experts = engine.cost.experts
    assert experts is not None and (experts.kernel.kernel, experts.moe_ep) == (
        "flashinfer_cutlass", 8)
    tp4 = screen(False).engine("h200", 4, candidate)  # 384-wide slices load: TP as before
    assert not isinstance(tp4, str) and tp4.cost.experts.moe_tp == 4
