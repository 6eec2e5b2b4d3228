"""The measured serving sweeps: every shipped row maps to the deployment it ran (model, GPU,
TP/DP/EP, clients, vLLM release), and the fitted and held-out splits are fixed and disjoint."""

from __future__ import annotations

import pytest

from clustersim.calibration.silicon import RowScore, scenario
from clustersim.calibration.silicon_split import (
    FITTED,
    HELD_OUT,
    by_dimension,
    config,
    contradiction,
    criteria,
    errors,
    measurements,
    set_aside,
)
from clustersim.calibration.sweeps import SWEEP_FILES, all_rows, deployment
from clustersim.scenario import parse_scenario


def _row(sweep: str, row_id: str) -> dict[str, str]:
    (row,) = [r for r in all_rows() if r["sweep"] == f"silicon_vllm_{sweep}.csv"
              and r["id"] == row_id]
    return row


def test_every_shipped_row_maps_to_a_deployment():
    table = all_rows()
    assert [len([r for r in table if r["sweep"] == name]) for name in SWEEP_FILES] == [
        45, 30, 30, 54, 45]
    parallel = {(r["sweep"], deployment(r).parallel) for r in table}
    assert {p for _, p in parallel} == {"TP2", "TP4", "TP8", "TP4 EP4", "TP8 EP8"}
    for row in table:
        scenario(row)  # precision, concurrency and columns consistent, or ValueError


def test_a_minimax_h100_row_runs_tp4_with_expert_parallelism_on_vllm_0_18():
    row = _row("minimax_m25_fp8_h100_v0180",
               "2026_03_25_minimax_m2_5_h100_sxm_vllm_fp8_agg_8192x1024_c16_tp4_0_ep4_0_237")
    data = scenario(row)
    assert (data["model"], data["gpu"], data["tensor_parallel_size"]) == (
        "minimax-m2.5", "h100-sxm", 4)
    assert data["enable_expert_parallel"] and "data_parallel_size" not in data
    # vLLM 0.18's async scheduling (on since 0.14); the recipe's 0.90 of the GPU's memory
    # and 256 seats; the FP8 checkpoint carries its own quantization_config
    assert data["engine"] == {"max_model_len": 8192 + 1024 + 256, "vllm_version": "0.18",
                              "gpu_memory_utilization": 0.9, "max_num_seqs": 256,
                              "async_scheduling": True}
    assert data["workload"]["max_concurrency"] == 16
    assert data["workload"]["num_prompts"] == 160 and data["workload"]["num_warmups"] == 32
    parse_scenario(data)


def test_attention_dp_columns_against_the_row_id():
    """The 2026-04-06 MiniMax H100 rows: columns DP4 x TP4, EP16, 8 clients a rank; id
    tp4_ep4. Replayed as the id says (32 clients on TP4 EP4); as the columns say, a 16-GPU
    data-parallel group over two nodes, every rank's clients together."""
    row = _row("minimax_m25_fp8_h100_v0180",
               "2026_04_06_minimax_m2_5_h100_sxm_vllm_fp8_agg_8192x1024_c32_tp4_ep4_1322")
    assert (row["attention_dp_size"], row["moe_ep_size"], row["batch_size"]) == (
        "4.0", "16.0", "8.0")
    dep = deployment(row)
    assert (dep.parallel, dep.concurrency) == ("TP4 EP4", 32) and "tp4_ep4" in dep.note
    columns = scenario(row, as_columns=True)
    assert (columns["tensor_parallel_size"], columns["data_parallel_size"]) == (4, 4)
    assert columns["enable_expert_parallel"]
    assert columns["topology"] == {"node": "dgx-h100", "count": 2}
    assert columns["workload"]["max_concurrency"] == 32
    # clustersim steps data-parallel MoE ranks with synchronous scheduling only
    assert columns["engine"]["async_scheduling"] is False
    assert deployment(row, as_columns=True).parallel == "DP4 x TP4 EP16"
    parse_scenario(columns)


@pytest.mark.parametrize(("sweep", "row_id", "model", "tp", "version"), [
    ("minimax_m25_fp8_h200_v0160", "minimaxm2_5_h200_vllm_fp8_agg_8192x1024_c8_cfg606",
     "minimax-m2.5", 4, "0.16"),
    ("kimi_k25_int4_h200_v0160",
     "2026_03_25_kimi_k2_5_h200_sxm_vllm_int4_agg_8192x1024_c4_tp8_0_ep1_0_597",
     "kimi-k2.5", 8, "0.16"),
])
def test_the_h200_rows_run_tensor_parallel_without_expert_parallelism(sweep, row_id, model, tp,
                                                                      version):
    data = scenario(_row(sweep, row_id))
    assert (data["model"], data["gpu"], data["tensor_parallel_size"]) == (model, "h200", tp)
    assert "enable_expert_parallel" not in data and "data_parallel_size" not in data
    assert data["engine"]["vllm_version"] == version and "quantization" not in data["engine"]
    parse_scenario(data)


def test_minimax_tp8_rows_run_with_expert_parallelism():
    """The vLLM 0.18 H200 rows say TP8 with moe_tp_size 8: 192-wide slices of 128-wide FP8
    blocks, which vLLM refuses to load. Replayed as the only layout of those eight GPUs vLLM
    starts (its recipe's TP8 with expert parallelism), in either reading of the row."""
    row = _row("minimax_m25_fp8_h200_v0180", "minimaxm2_5_h200_vllm_fp8_agg_8192x1024_c8_cfg637")
    assert (row["tp_size"], row["moe_tp_size"], row["moe_ep_size"]) == ("8.0", "8.0", "1.0")
    for as_columns in (False, True):
        dep = deployment(row, as_columns=as_columns)
        assert (dep.parallel, dep.expert_parallel) == ("TP8 EP8", True)
        assert "192-wide slices" in dep.note
    data = scenario(row)
    assert (data["tensor_parallel_size"], data["enable_expert_parallel"]) == (8, True)
    assert "data_parallel_size" not in data and data["engine"]["vllm_version"] == "0.18"
    parse_scenario(data)


@pytest.mark.parametrize(("change", "message"), [
    ({"moe_tp_size": "2.0"}, "is not tp_size 8 x attention_dp_size 1"),
    ({"batch_size": "8.0"}, "silicon_concurrency 4 is not batch_size"),
    ({"moe_quant_mode": "fp8"}, "not the model's W4A16 experts"),
    ({"backend_version": "0.17.0"}, "backend_version 0.17.0 but image v0.16.0"),
    ({"pp_size": "2.0"}, "without pipeline parallelism"),
    ({"model_path": "Qwen/Qwen3-235B-A22B"}, "no catalog model"),
])
def test_a_row_that_contradicts_itself_is_refused(change, message):
    row = _row("kimi_k25_int4_h200_v0160",
               "2026_03_25_kimi_k2_5_h200_sxm_vllm_int4_agg_8192x1024_c4_tp8_0_ep1_0_597")
    with pytest.raises(ValueError, match=message):
        scenario({**row, **change})


def test_the_split_holds_out_a_third_of_each_moe_sweep_and_no_llama_row():
    kept = measurements(all_rows())
    split = {}
    for row, side in kept:
        assert split.setdefault(config(row), side) == side  # repeats fall on one side
    assert all(side == FITTED for row, side in kept if row["sweep"] == SWEEP_FILES[0])
    for sweep in SWEEP_FILES[1:]:
        sides = [s for c, s in split.items() if c[0] == sweep]
        assert sides.count(HELD_OUT) == len(range(1, len(sides), 3))  # positions 1, 4, 7, ...
        shapes = {side: {c[4:6] for c, s in split.items() if c[0] == sweep and s == side}
                  for side in (FITTED, HELD_OUT)}
        assert shapes[HELD_OUT] == shapes[FITTED] == {(1024, 1024), (1024, 8192), (8192, 1024)}
    # runs listed twice count once: Kimi's third copy (rounded), MiniMax H200's two dumps;
    # the two runs their sweeps contradict count on neither side
    counts = {name: sum(r["sweep"] == name for r, _ in kept) for name in SWEEP_FILES}
    assert list(counts.values()) == [45, 29, 15, 36, 29]
    assert kept == measurements(all_rows())  # deterministic


def test_a_run_its_own_sweep_contradicts_is_set_aside_with_its_reason():
    """Kimi-K2.5's 1K/8K at 16 clients was measured twice: 16.00 and 63.98 ms a token, the
    second above the 22.4 ms of 32 clients and the 31.9 ms of 64. More clients never make a
    token faster, so the 63.98 ms run is listed apart and scored on neither split; its twin
    stays held out. Likewise one of the two MiniMax H100 8K/1K runs at 16 clients (31.69 ms,
    its twin 19.72 ms, 32 clients 29.34 and 29.77 ms). Nothing else in the files is."""
    table = all_rows()
    aside = set_aside(table)
    assert [(r["id"][-5:], split) for r, split, _ in aside] == [("_1358", FITTED),
                                                                ("0_605", HELD_OUT)]
    kimi = aside[1]
    assert float(kimi[0]["silicon_tpot_ms"]) == pytest.approx(63.98, abs=0.01)
    assert "63.98 ms at 16 clients, 186% above the 22.36 ms" in kimi[2]
    kept = measurements(table)
    assert all(row is not r for row, _, _ in aside for r, _ in kept)
    twin = [(float(r["silicon_tpot_ms"]), side) for r, side in kept
            if config(r) == config(kimi[0])]
    assert twin == [(pytest.approx(16.00, abs=0.01), HELD_OUT)]
    # the rule reads measurements only: a run within the repeats' scatter of one at more
    # clients stands, one beyond it does not
    base = [r for r in table if r["sweep"] == SWEEP_FILES[0]]
    low, high = _pair(base)
    assert contradiction({**low, "silicon_tpot_ms": str(1.04 * float(high["silicon_tpot_ms"]))},
                         [high]) is None
    assert "above the" in (contradiction(
        {**low, "silicon_tpot_ms": str(1.06 * float(high["silicon_tpot_ms"]))}, [high]) or "")


def _pair(rows: list[dict[str, str]]) -> tuple[dict[str, str], dict[str, str]]:
    """Two rows of one configuration but their clients, the first with fewer."""
    for a in rows:
        for b in rows:
            if config(a)[:-1] == config(b)[:-1] and config(a)[-1] < config(b)[-1]:
                return a, b
    raise AssertionError("no pair")


def _score(model: str, isl: int, tpot_error: float, ttft_error: float) -> RowScore:
    return RowScore(tp=8, isl=isl, osl=1024, concurrency=4, ttft_ms=100.0, tpot_ms=10.0,
                    sim_ttft_ms=100.0 * (1 + ttft_error), sim_tpot_ms=10.0 * (1 + tpot_error),
                    model=model, gpu="h200", parallel="TP8", vllm_version="0.16.0")


def test_errors_by_dimension_and_split_and_the_targets():
    scored = [(_score("kimi-k2.5", 1024, -0.2, 0.5), FITTED),
              (_score("kimi-k2.5", 8192, 0.0, -0.1), FITTED),
              (_score("kimi-k2.5", 8192, 0.04, 0.3), HELD_OUT)]
    e = errors([s for s, _ in scored[:2]])
    assert (e.n, e.tpot_mape, e.tpot_bias, e.long_n, e.long_ttft_mape) == pytest.approx(
        (2, 0.1, -0.1, 1, 0.1))
    table = by_dimension(scored, "prompt/output")
    assert [(name, split, e.n) for name, split, e in table] == [
        ("1024/1024", FITTED, 1), ("8192/1024", FITTED, 1), ("8192/1024", HELD_OUT, 1),
        ("8192/1024", "all", 2)]
    verdicts = {(c.split, c.what): c.met for c in criteria(scored)}
    assert verdicts == {(FITTED, "TPOT MAPE"): True, (FITTED, "TPOT bias"): False,
                        (FITTED, "TTFT MAPE, prompts >= 4096"): True,
                        (HELD_OUT, "TPOT MAPE"): True, (HELD_OUT, "TPOT bias"): True,
                        (HELD_OUT, "TTFT MAPE, prompts >= 4096"): False}


def test_a_moe_row_replays_end_to_end():
    """TP4 with expert parallelism and async scheduling, 4 clients: the replay runs the 48
    requests and prices their decode within a factor of two of the measured mean."""
    from clustersim.calibration.silicon import replay

    score = replay(_row("minimax_m25_fp8_h100_v0180",
                        "2026_03_25_minimax_m2_5_h100_sxm_vllm_fp8_agg_1024x1024_c4_tp4_0_ep4_0_234"))
    assert (score.model, score.parallel, score.concurrency) == ("minimax-m2.5", "TP4 EP4", 4)
    assert 0.5 < score.sim_tpot_ms / score.tpot_ms < 2.0
    assert 0.5 < score.sim_ttft_ms / score.ttft_ms < 2.0
