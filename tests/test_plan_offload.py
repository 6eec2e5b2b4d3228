"""The CPU KV tier as a plan axis (``plan.kv_offloading_sizes``): its host memory priced
beside the GPUs, the candidates it makes, its serve line, and the answers it gives: a tier
that turns recomputed prompts into loads buys the SLO with fewer GPUs, and a tier slower than
recomputing is never chosen."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from clustersim.catalog import host_memory_price
from clustersim.plan.executors import SerialExecutor
from clustersim.plan.planner import Planner, cost_per_hour
from clustersim.plan.result import PlanResult
from clustersim.plan.space import Candidate, PoolChoice, families
from clustersim.scenario import parse_scenario
from tests.helpers import run_cli, write_scenario

FAST = {"seeds": 1, "tolerance": 0.05, "simulate_top": 2, "min_requests": 400,
        "min_duration_s": 10}


def pool_scenario(**plan: Any) -> dict[str, Any]:
    """A pool of 50 prompts of about 2,000 tokens each, sent in turn: 100K tokens, more than
    the 4,000 HBM blocks (64K tokens) hold, so that HBM's LRU misses every prompt; a tier of
    64 GiB (32K blocks of Llama-3.1-8B) holds them all."""
    return {
        "name": "pool-tier", "seed": 0, "model": "llama-3.1-8b", "gpu": "h100-sxm",
        "engine": {"max_model_len": 4096, "num_gpu_blocks_override": 4000},
        "workload": {"kind": "prompt_pool", "num_groups": 50, "num_prompts_per_group": 1,
                     "system_prompt_tokens": {"kind": "uniform", "low": 1500, "high": 2500},
                     "question_tokens": {"kind": "uniform", "low": 50, "high": 150},
                     "output_tokens": {"kind": "uniform", "low": 20, "high": 60},
                     "order": "cycle", "arrivals": {"kind": "poisson", "rate_per_s": 10},
                     "num_requests": 400},
        "slo": {"ttft_s": 0.5, "tpot_s": 0.05},
        "plan": {"objective": "min_cost", "target_rate_per_s": 20, "layouts": ["colocated"],
                 "kv_offloading_sizes": [0, 64], "search": FAST, **plan},
    }


def run_plan(data: dict[str, Any]) -> PlanResult:
    return Planner(parse_scenario(data), SerialExecutor(), n_plus_one=False).run()


def slow_pcie_node(tmp_path: Path, gb_per_s: float) -> str:
    """A server of eight H100s whose PCIe links to the host move ``gb_per_s`` each."""
    path = tmp_path / f"h100-pcie-{gb_per_s:g}.yaml"
    path.write_text(yaml.safe_dump({
        "name": path.stem,
        "links": {"pcie": {"bw_gb_per_s_per_dir": gb_per_s, "efficiency": 1.0,
                           "latency_us": 5, "source": "test"},
                  "nvlink": {"bw_gb_per_s_per_dir": 450, "efficiency": 0.82,
                             "latency_us": 5, "source": "test"},
                  "nic": {"bw_gb_per_s_per_dir": 50, "efficiency": 0.85, "latency_us": 2,
                          "source": "test"}},
        "nodes": [{"name": "node0", "gpus": {"type": "h100-sxm", "count": 8},
                   "pcie_link": "pcie", "gpu_fabric": {"kind": "nvswitch", "link": "nvlink"},
                   "nics": {"count": 8, "link": "nic"}}],
    }))
    return str(path)


def test_a_tier_is_priced_per_engine_at_the_host_memory_price():
    pools = (PoolChoice("colocated", "h100-sxm", 2, 3),)
    bare = Candidate("colocated", pools, None, True)
    tier = bare.with_tier(256.0)
    prices = {"h100-sxm": (2.0, "test")}
    assert cost_per_hour(bare, prices, 0.01) == pytest.approx(12.0)
    assert cost_per_hour(tier, prices, 0.01) == pytest.approx(12.0 + 3 * 256 * 0.01)
    assert tier.id.endswith("/cpu-kv-256gib") and tier.label().endswith(", 256 GiB CPU KV tier")
    assert tier.family != bare.family and tier.resized({"colocated": 2}).kv_offloading_gib == 256
    assert host_memory_price()[0] > 0


def test_tier_sizes_multiply_colocated_families_only():
    data = pool_scenario(layouts=["colocated", "disaggregated"],
                         kv_offloading_sizes=[0, 64, 1024])
    data["topology"] = "dgx-h100"
    found = families(parse_scenario(data).plan, parse_scenario(data))
    tiers = {(c.layout, c.kv_offloading_gib) for c in found}
    assert tiers == {("colocated", 0.0), ("colocated", 64.0), ("colocated", 1024.0),
                     ("disaggregated", 0.0)}


@pytest.mark.parametrize(("sizes", "message"), [
    ([0, 64, 64], "plan.kv_offloading_sizes: sizes repeat"),
    ([-1], "plan.kv_offloading_sizes[0]: Input should be greater than or equal to 0"),
])
def test_bad_tier_sizes_exit_2_with_one_line(tmp_path: Path, sizes, message):
    path = write_scenario(tmp_path, pool_scenario(kv_offloading_sizes=sizes))
    code, output = run_cli("plan", str(path), "--out", str(tmp_path / "out"))
    assert code == 2, output
    lines = output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{path}: {message}"), output


def test_a_tier_that_saves_recomputation_buys_the_slo_with_fewer_gpus():
    result = run_plan(pool_scenario())
    best = result.recommended
    assert best is not None and best.candidate.kv_offloading_gib == 64
    bare = [r for r in result.candidates if r.status == "simulated"
            and not r.candidate.kv_offloading_gib and r.goodput is not None
            and r.goodput.lower_per_s >= 20]
    assert bare and all(r.candidate.num_gpus > best.candidate.num_gpus for r in bare)
    assert "--kv-offloading-backend native --kv-offloading-size 64" in result.serve_commands[0]
    assert "host memory buys the SLO cheaper" in result.answer


def test_a_tier_slower_than_recomputing_is_never_chosen(tmp_path: Path):
    """Over a 0.2 GB/s link, loading a 2,000-token prompt's 262 MB takes over a second, more
    than computing it: the tier candidates are simulated and lose."""
    result = run_plan(pool_scenario(nodes={"h100-sxm": slow_pcie_node(tmp_path, 0.2)}))
    simulated = [r for r in result.candidates if r.status == "simulated"]
    assert any(r.candidate.kv_offloading_gib for r in simulated)
    best = result.recommended
    assert best is not None and best.candidate.kv_offloading_gib == 0
    assert "GPUs without a tier buy it cheaper" in result.answer
