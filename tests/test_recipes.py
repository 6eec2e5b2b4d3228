"""Each shipped serving sweep's InferenceX recipe: the client's length draws and warm-ups and the
server flags the replay takes from it."""

from __future__ import annotations

import pytest

from clustersim.calibration.recipes import RECIPES, length_range
from clustersim.calibration.silicon import recipe, scenario
from clustersim.calibration.sweeps import SWEEP_FILES, all_rows


def test_every_shipped_sweep_has_its_recipe():
    assert set(RECIPES) == set(SWEEP_FILES)
    for r in RECIPES.values():
        assert len(r.commit) == 40 and r.script.startswith("benchmarks/")


def test_the_client_draws_from_four_fifths_of_the_named_length_to_all_of_it():
    # numpy randint(int(L x 0.8), L + 1): both ends drawn
    assert length_range(8192) == (6553, 8192)
    assert length_range(1024) == (819, 1024)


def test_warm_ups_follow_the_client_of_the_sweeps_date():
    llama = RECIPES[SWEEP_FILES[0]]
    assert [llama.num_warmups(c) for c in (4, 64)] == [1, 1]  # one test request, alone
    for name in SWEEP_FILES[1:]:
        assert RECIPES[name].num_warmups(16) == 32  # utils/bench_serving: 2 x concurrency


def _first(sweep: str, isl: str = "8192", concurrency: str = "16") -> dict[str, str]:
    return next(r for r in all_rows() if r["sweep"] == sweep and r["isl"] == isl
                and concurrency in r["silicon_data_source"].split("silicon_concurrency=")[1]
                .split(";")[0])


@pytest.mark.parametrize("sweep, memory, seats, warmups", [
    ("silicon_vllm_minimax_m25_fp8_h100_v0180.csv", 0.9, 256, 32),
    ("silicon_vllm_minimax_m25_fp8_h200_v0160.csv", 0.95, None, 32),
    ("silicon_vllm_minimax_m25_fp8_h200_v0180.csv", 0.95, None, 32),
    ("silicon_vllm_kimi_k25_int4_h200_v0160.csv", 0.95, 16, 32),
])
def test_a_moe_row_takes_its_recipes_server_flags(sweep, memory, seats, warmups):
    row = _first(sweep)
    assert recipe(row) is RECIPES[sweep]
    data = scenario(row)
    engine = data["engine"]
    assert engine["gpu_memory_utilization"] == memory
    assert engine.get("max_num_seqs") == seats
    assert "enable_prefix_caching" not in engine  # vLLM's default: on
    assert data["workload"]["num_warmups"] == warmups
    assert data["workload"]["lengths"]["prompt_tokens"] == {"kind": "uniform", "low": 6553,
                                                            "high": 8192}
