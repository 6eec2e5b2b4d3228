"""The calibration rows of the time outside the kernels: NVIDIA's 45 measured vLLM runs load,
replay as their benchmark ran, and the shipped host time keeps their TPOT."""

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


def test_a_row_replays_as_its_benchmark_ran():
    data = scenario(_row(4, 8192, 1024, 16), spread=True)
    workload = data["workload"]
    assert workload["num_prompts"] == 160 and workload["num_warmups"] == 32
    assert workload["max_concurrency"] == 16 and data["api_server"] == {}
    assert data["engine"]["quantization"] == "fp8" and data["tensor_parallel_size"] == 4
    # one measured cycle: 731.5 ms + 1,023 x 21.06 ms, the last client opened 15/16 into it
    assert workload["ramp_up_s"] == pytest.approx((0.7315 + 1023 * 0.02106) * 15 / 16, rel=1e-3)
    assert "ramp_up_s" not in scenario(_row(4, 8192, 1024, 16))["workload"]


@pytest.mark.parametrize("shape", [(8, 1024, 1024, 4), (4, 1024, 1024, 64)])
def test_the_shipped_host_time_keeps_the_measured_tpot(shape):
    score = replay(_row(*shape))
    assert abs(score.tpot_error) < 0.06, score
    assert score.ttft_error > 0  # the bunched clients: TTFT errs long, not short


def test_the_validate_table_groups_both_fits_by_concurrency():
    fake = replay(_row(8, 1024, 1024, 4))
    table = silicon_rows({"vidur": [fake], "aiconfigurator": [fake]})
    assert [r[:3] for r in table] == [["all", "1", "fit-v1"], ["all", "1", "fit-v2"],
                                      ["C=4", "1", "fit-v1"], ["C=4", "1", "fit-v2"]]
    assert len(SILICON_HEADER) == len(table[0])
    assert by_concurrency([fake])[0][4] == pytest.approx(abs(fake.tpot_error))


def test_rounds_split_the_cold_burst_from_the_later_rounds():
    """Ten rounds of 16; the cold first round queues every prompt behind the others, and
    clients spread over a cycle wait far less in their later rounds than the bunched ones."""
    row = _row(8, 1024, 1024, 16)
    bunched = round_ttfts_ms(row)
    spread = round_ttfts_ms(row, spread=True)
    assert len(bunched) == len(spread) == 10
    assert bunched[0] > 2 * max(spread[1:])
    assert sum(spread[1:]) < 0.5 * sum(bunched[1:])


def test_early_answers_what_if_ends_that_share_of_the_answers_before_osl():
    from clustersim.scenario import parse_scenario
    from clustersim.sim import run_scenario
    from clustersim.workload.benchmark import WARMUP_PREFIX

    row = _row(8, 1024, 1024, 16)
    assert scenario(row)["workload"]["lengths"]["output_tokens"] == 1024
    result = run_scenario(parse_scenario(scenario(row, early_fraction=0.5)), record_steps=False)
    outputs = [r.num_output_tokens for r in result.requests
               if not str(r.request_id).startswith(WARMUP_PREFIX)]
    early = [n for n in outputs if n < 1024]
    assert len(outputs) == 160 and 0.35 < len(early) / len(outputs) < 0.65
    assert min(early) >= 2 and 300 < sum(early) / len(early) < 700  # uniform on 2..1024


def test_short_answers_what_if_draws_every_answer_within_that_share_below_osl():
    from clustersim.scenario import parse_scenario
    from clustersim.sim import run_scenario
    from clustersim.workload.benchmark import WARMUP_PREFIX

    row = _row(8, 1024, 1024, 16)
    result = run_scenario(parse_scenario(scenario(row, short_answers=0.1)), record_steps=False)
    outputs = [r.num_output_tokens for r in result.requests
               if not str(r.request_id).startswith(WARMUP_PREFIX)]
    assert len(outputs) == 160 and min(outputs) >= 922 and max(outputs) <= 1024
    assert len(set(outputs)) > 50  # uniform on 922..1024, not a few values
    with pytest.raises(ValueError, match="give one"):
        scenario(row, early_fraction=0.5, short_answers=0.1)
