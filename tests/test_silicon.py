"""The calibration rows of the time outside the kernels: NVIDIA's 45 measured vLLM runs load,
replay as their InferenceX recipe ran them (lengths drawn from 0.8 to 1 x the named ones), and
the shipped host time keeps their TPOT."""

from __future__ import annotations

import pytest

from clustersim.calibration.silicon import by_concurrency, replay, round_ttfts_ms, rows, scenario
from clustersim.calibration.tables import SILICON_HEADER, silicon_rows


def _row(tp: int, isl: int, osl: int, clients: int) -> dict[str, str]:
    (row,) = [r for r in rows() if (r["tp_size"], r["isl"], r["osl"], r["batch_size"])
              == (str(tp), str(isl), str(osl), str(clients))]
    return row


def test_the_45_rows_cover_three_tps_three_shapes_five_concurrencies():
    table = rows()
    assert len(table) == 45
    assert {(r["tp_size"], r["isl"], r["osl"], r["batch_size"]) for r in table} == {
        (str(tp), str(i), str(o), str(c)) for tp in (2, 4, 8)
        for i, o in ((1024, 1024), (1024, 8192), (8192, 1024)) for c in (4, 8, 16, 32, 64)}


def test_a_row_replays_as_its_recipe_ran():
    data = scenario(_row(4, 8192, 1024, 16), spread=True)
    workload, engine = data["workload"], data["engine"]
    # kimbochen/bench_serving of October 2025: one test request alone, no warm-ups
    assert workload["num_prompts"] == 160 and workload["num_warmups"] == 1
    assert workload["max_concurrency"] == 16 and data["api_server"] == {}
    assert workload["lengths"] == {
        "kind": "independent", "prompt_tokens": {"kind": "uniform", "low": 6553, "high": 8192},
        "output_tokens": {"kind": "uniform", "low": 819, "high": 1024}}
    assert engine["quantization"] == "fp8" and data["tensor_parallel_size"] == 4
    assert engine["gpu_memory_utilization"] == 0.9 and engine["max_num_seqs"] == 16
    assert engine["enable_prefix_caching"] is False
    # replayed as the host time was fitted: synchronously, with a 16-bit KV cache
    assert engine["async_scheduling"] is False and "kv_cache_dtype" not in engine
    served = scenario(_row(4, 8192, 1024, 16), as_served=True)["engine"]
    assert served["async_scheduling"] is True and served["kv_cache_dtype"] == "fp8"
    fixed = scenario(_row(4, 8192, 1024, 16), fixed_lengths=True)["workload"]["lengths"]
    assert (fixed["prompt_tokens"], fixed["output_tokens"]) == (8192, 1024)
    # one measured cycle: 731.5 ms + 1,023 x 21.06 ms, the last client opened 15/16 into it
    assert workload["ramp_up_s"] == pytest.approx((0.7315 + 1023 * 0.02106) * 15 / 16, rel=1e-3)
    assert "ramp_up_s" not in scenario(_row(4, 8192, 1024, 16))["workload"]


def test_every_measured_request_has_lengths_the_recipe_could_draw():
    from clustersim.scenario import parse_scenario
    from clustersim.sim import run_scenario
    from clustersim.workload.benchmark import WARMUP_PREFIX

    result = run_scenario(parse_scenario(scenario(_row(8, 1024, 1024, 4))), record_steps=False)
    measured = [r for r in result.requests if not str(r.request_id).startswith(WARMUP_PREFIX)]
    prompts = [r.num_prompt_tokens for r in measured]
    outputs = [r.num_output_tokens for r in measured]
    assert len(measured) == 40
    assert min(prompts) >= 819 and max(prompts) <= 1024 and len(set(prompts)) > 20
    assert min(outputs) >= 819 and max(outputs) <= 1024 and len(set(outputs)) > 20


@pytest.mark.parametrize("shape", [(8, 1024, 1024, 4), (4, 1024, 1024, 64)])
def test_the_shipped_host_time_keeps_the_measured_tpot(shape):
    score = replay(_row(*shape))
    assert abs(score.tpot_error) < 0.06, score
    assert abs(score.ttft_error) < 0.25, score


def test_drawn_lengths_dissolve_the_cohorts_that_fixed_lengths_keep():
    """Four clients of 8K prompts on TP4: the measured mean TTFT (453 ms) is about one prefill.
    With the recipe's drawn lengths the replay lands there; with every prompt and answer the
    named length, requests prefilled in consecutive steps finish in consecutive steps and send
    again into each other's prefills, every round, and the mean is near three prefills."""
    row = _row(4, 8192, 1024, 4)
    drawn, fixed = replay(row), replay(row, fixed_lengths=True)
    assert abs(drawn.ttft_error) < 0.25, drawn
    assert fixed.sim_ttft_ms > 2 * drawn.sim_ttft_ms, (drawn, fixed)
    assert abs(drawn.tpot_error) < 0.06 and abs(fixed.tpot_error) < 0.06


def test_the_validate_table_groups_both_fits_by_concurrency():
    fake = replay(_row(8, 1024, 1024, 4))
    table = silicon_rows({"vidur": [fake], "aiconfigurator": [fake]})
    assert [r[:3] for r in table] == [["all", "1", "fit-v1"], ["all", "1", "fit-v2"],
                                      ["C=4", "1", "fit-v1"], ["C=4", "1", "fit-v2"]]
    assert len(SILICON_HEADER) == len(table[0])
    assert by_concurrency([fake])[0][4] == pytest.approx(abs(fake.tpot_error))


def test_rounds_split_the_cold_burst_from_the_later_rounds():
    """Ten rounds of 16: the cold first round queues every prompt behind the others; with the
    drawn lengths the later rounds wait far less, with fixed lengths every round repeats it."""
    row = _row(8, 1024, 1024, 16)
    drawn = round_ttfts_ms(row)
    fixed = round_ttfts_ms(row, fixed_lengths=True)
    assert len(drawn) == len(fixed) == 10
    assert drawn[0] > 3 * max(drawn[1:])
    assert min(fixed[1:]) > 0.8 * fixed[0]
