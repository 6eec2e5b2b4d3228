"""Two-batch overlap (SGLang --enable-two-batch-overlap, vLLM --enable-dbo): a step of an
expert-parallel group across nodes as two micro-batches, one's all-to-all under the other's
work (``StepPrices.dense_parts``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from clustersim.catalog import load_gpu, load_model
from clustersim.cost.collectives import DEEPEP_NORMAL_SMS, FP8_DISPATCH_BYTES, AllToAll
from clustersim.cost.roofline import CostModel
from tests.helpers import run_cli, write_scenario
from tests.test_wide_ep import _cluster, _decode_prices, _scenario

MODEL = load_model("deepseek-r1")
GPU = load_gpu("h100-sxm")


def _cost(mode: str, overlap: bool) -> CostModel:
    """One DP-attention rank of an EP 24 group over three DGX H100s (the NIC at 50 GB/s)."""
    a2a = AllToAll(24, 8, 450e9, 50e9, dispatch_bytes=FP8_DISPATCH_BYTES, combine_bytes=2.0,
                   mode=mode, call_latency_s=5e-6)
    cost = CostModel(MODEL, GPU, 1, dp=24, expert_parallel=True, all_to_all=a2a,
                     two_batch_overlap=overlap)
    cost.prices.moe_token_scale = 24.0  # every rank runs a batch like this one's
    return cost


def _step(cost: CostModel, tokens: float, rows: float) -> tuple[float, float]:
    """(the step's seconds, its all-to-all's) for a batch of ``tokens`` past attention."""
    ops: list[Any] = []
    parts = cost.prices.dense_parts(tokens, rows, None, ops)
    a2a = sum(op[3] for op in ops if op[0].startswith("experts' all-to-all"))
    return sum(parts), a2a


def test_a_prefill_step_hides_part_of_its_all_to_all_and_no_more() -> None:
    plain, a2a = _step(_cost("normal", False), 16_000, 8)
    overlapped, half_a2a = _step(_cost("normal", True), 16_000, 8)
    assert overlapped < plain
    # the micro-batches' all-to-alls (half_a2a: both of them) and their work cannot go faster
    # than either alone
    work = plain - a2a
    assert overlapped >= half_a2a and overlapped >= work
    assert plain - overlapped < a2a  # it hides at most the all-to-all


def test_the_sms_deepep_holds_slow_the_work_under_it() -> None:
    held = _cost("normal", True)
    assert held.prices.overlap_compute_share == pytest.approx(
        1 - DEEPEP_NORMAL_SMS / GPU.sm_count)
    free = _cost("normal", True)
    free.prices.overlap_compute_share = 1.0
    assert _step(held, 16_000, 8)[0] > _step(free, 16_000, 8)[0]
    # DeepEP's low-latency kernels hold no SM
    assert _cost("low_latency", True).prices.overlap_compute_share == 1.0


def test_a_small_decode_batch_comes_out_slower_and_a_large_one_faster() -> None:
    """Each micro-batch reads the weights and pays each call's fixed latency again: a gain
    only where there is enough all-to-all to hide."""
    plain, overlapped = _cost("low_latency", False), _cost("low_latency", True)
    assert _step(overlapped, 2, 2)[0] > _step(plain, 2, 2)[0]
    assert _step(overlapped, 256, 256)[0] < _step(plain, 256, 256)[0]
    # one token cannot be split: the same step
    assert _step(overlapped, 1, 1) == _step(plain, 1, 1)


def test_overlap_needs_an_all_to_all() -> None:
    with pytest.raises(ValueError, match="all-to-all"):
        CostModel(MODEL, GPU, 1, dp=24, expert_parallel=True, two_batch_overlap=True)


def test_a_pool_without_an_all_to_all_is_refused_in_one_line(tmp_path: Path) -> None:
    # a decode group inside one node prices its experts' all-gather: nothing to overlap
    data = _scenario(8, nodes=2)
    data["layout"]["pools"][1]["engine"] = {"two_batch_overlap": True}
    path = write_scenario(tmp_path, data)
    code, output = run_cli("simulate", str(path), "--out", str(tmp_path / "out"))
    assert code == 2, output
    assert output.strip().splitlines()[-1] == (
        f"{path}: layout.pools[1].engine.two_batch_overlap: overlaps an expert-parallel "
        "all-to-all, which pool 'decode' does not run: it needs data_parallel_size > 1 with "
        "enable_expert_parallel on a MoE model, across hosts (nodes of a topology, or the "
        "compute trays of an NVL72 rack)"), output
    # set for the scenario, it names the scenario's field (and the first pool it cannot fit)
    path = write_scenario(tmp_path, _scenario(16, nodes=3, two_batch_overlap=True))
    code, output = run_cli("simulate", str(path), "--out", str(tmp_path / "out"))
    assert code == 2 and f"{path}: engine.two_batch_overlap: " in output, output
    # across nodes it runs, and its decode steps are priced with the overlap
    data = _scenario(16, nodes=3)
    data["layout"]["pools"][1]["engine"] = {"two_batch_overlap": True}
    cluster = _cluster(data)
    assert _decode_prices(cluster).overlap_layers == load_model("qwen3-30b-a3b").num_moe_layers
    assert _decode_prices(_cluster(_scenario(16, nodes=3))).overlap_layers == 0


def test_the_launch_lines_turn_the_overlap_on_where_it_is_priced() -> None:
    from clustersim.cluster.build import InstanceInfo
    from clustersim.engine.settings import EngineSettings
    from clustersim.plan.answer import _sglang_args, _vllm_args
    from clustersim.plan.space import Candidate, PoolChoice

    pool = PoolChoice("prefill", "h100-sxm", 1, 1, data_parallel_size=24)
    candidate = Candidate("disaggregated", (pool,), 16384, True)
    info = InstanceInfo("prefill-0.dp0", "prefill", "prefill", "h100-sxm", 1, ("g0",), 1000, 64,
                        16384, 256, 8192, data_parallel_size=24)
    on, off = EngineSettings(two_batch_overlap=True), EngineSettings()
    assert "--enable-two-batch-overlap" in _sglang_args(pool, info, candidate, MODEL, on)
    assert "--enable-two-batch-overlap" not in _sglang_args(pool, info, candidate, MODEL, off)
    vllm = " ".join(_vllm_args(pool, info, candidate, MODEL, on))
    assert ("--enable-dbo --dbo-decode-token-threshold 1 --dbo-prefill-token-threshold 1"
            in vllm)
    assert "--enable-dbo" not in " ".join(_vllm_args(pool, info, candidate, MODEL, off))
