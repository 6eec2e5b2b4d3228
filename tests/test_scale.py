"""Rate scaling: every workload kind's offered rate scales by the factor and nothing else moves."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from clustersim.errors import ConfigError
from clustersim.scenario import load_scenario, parse_scenario
from clustersim.validation import ValidationFailed
from clustersim.workload import build_requests
from clustersim.workload.scale import offered_rate, scale_rate
from tests.helpers import explicit, scenario

ROOT = Path(__file__).resolve().parents[1]
LENGTHS = {"kind": "independent", "prompt_tokens": {"kind": "uniform", "low": 1, "high": 4000},
           "output_tokens": {"kind": "lognormal", "mean": 200, "cv": 1.5}}


def workload(data: dict[str, Any]):
    return parse_scenario(scenario(workload=data)).workload


def synthetic(arrivals: dict[str, Any], lengths: dict[str, Any] | None = None, **fields):
    return workload({"kind": "synthetic", "arrivals": arrivals, "lengths": lengths or LENGTHS,
                     **fields})


ON_OFF = {"kind": "on_off", "on_rate_per_s": 20.0, "on_s": 1.0, "off_s": 3.0,
          "off_rate_per_s": 2.0}
DIURNAL = {"kind": "rate_curve", "points": [[0, 2.0], [20, 10.0], [40, 1.0]], "period_s": 60}

def _has_rate(spec) -> bool:
    """Whether the workload offers a rate (a fixed-concurrency benchmark and sessions do
    not)."""
    return getattr(spec, "max_concurrency", None) is None and spec.kind != "sessions"


BENCHMARK = {"kind": "benchmark", "num_prompts": 50, "request_rate": 6.0, "burstiness": 0.5,
             "num_warmups": 2, "lengths": LENGTHS}
# (id, workload, base_dir): every kind, from the shipped scenarios and by hand.
WORKLOADS = [
    *((f"scenario:{path.stem}", load_scenario(path).workload, path.parent)
      for path in sorted((ROOT / "scenarios").glob("*.yaml"))
      if _has_rate(load_scenario(path).workload)),
    ("benchmark_open_loop", workload(BENCHMARK), None),
    ("poisson", workload({"kind": "poisson", "rate_per_s": 4, "num_requests": 50,
                          "prompt_tokens": 64, "output_tokens": 8}), None),
    ("gamma", synthetic({"kind": "gamma", "rate_per_s": 3.0, "cv": 2.5}, num_requests=50), None),
    ("constant", synthetic({"kind": "constant", "rate_per_s": 7.0}, duration_s=30), None),
    ("on_off", synthetic(ON_OFF, num_requests=50), None),
    ("rate_curve_periodic", synthetic(DIURNAL, num_requests=50), None),
    ("rate_curve_ramp", synthetic({"kind": "rate_curve", "points": [[0, 0], [10, 10]]},
                                  num_requests=50), None),
    ("rate_curve_ends_at_0", synthetic(
        {"kind": "rate_curve", "points": [[0, 5], [30, 0]], "interpolation": "step"},
        duration_s=100), None),
    ("rate_curve_one_point", synthetic({"kind": "rate_curve", "points": [[0, 3]]},
                                       num_requests=50), None),
    ("empirical_lengths", synthetic({"kind": "poisson", "rate_per_s": 9},
                                    {"kind": "empirical", "trace": "azure-code-2023"},
                                    num_requests=50, start_s=5), None),
    ("replay_mooncake", workload({"kind": "replay", "trace": "mooncake-conversation",
                                  "spread_ties": True, "max_num_requests": 300,
                                  "rate_multiplier": 0.5}), None),
    ("prompt_pool", workload({"kind": "prompt_pool", "num_groups": 2, "num_prompts_per_group": 3,
                              "system_prompt_tokens": 64, "question_tokens": 16,
                              "output_tokens": 8, "arrivals": ON_OFF, "num_requests": 50}),
     None),
    ("explicit", workload(explicit(("a", 2.0, 10, 2), ("b", 0.5, 10, 2), ("c", 7.0, 10, 2))),
     None),
]
IDS = [case[0] for case in WORKLOADS]


@pytest.mark.parametrize(("name", "spec", "base_dir"), WORKLOADS, ids=IDS)
@pytest.mark.parametrize("factor", [0.3, 1.0, 4.0])
def test_offered_rate_scales_by_the_factor(name, spec, base_dir, factor):
    scaled = scale_rate(spec, factor)
    assert type(scaled) is type(spec)
    rate = offered_rate(spec, base_dir=base_dir)
    assert rate > 0
    assert offered_rate(scaled, base_dir=base_dir) == pytest.approx(factor * rate, rel=1e-12)


def shape(spec) -> dict[str, Any]:
    """``spec`` as data with everything that sets the pace of arrivals taken out."""
    data = spec.model_dump()
    for key in ("rate_per_s", "rate_multiplier", "request_rate"):
        data.pop(key, None)
    arrivals = data.get("arrivals", {})
    for key in ("rate_per_s", "on_rate_per_s", "off_rate_per_s"):
        arrivals.pop(key, None)
    if "points" in arrivals:
        arrivals["points"] = [t for t, _ in arrivals["points"]]
    for request in data.get("requests", []):
        request.pop("arrival_s")
    return data


@pytest.mark.parametrize(("name", "spec", "base_dir"), WORKLOADS, ids=IDS)
def test_scaling_keeps_everything_but_the_pace(name, spec, base_dir):
    scaled = scale_rate(spec, 2.5)
    assert shape(scaled) == shape(spec)
    assert scaled != spec
    assert scale_rate(spec, 1.0) == spec


def test_each_kind_scales_the_fields_that_set_its_rate():
    assert scale_rate(synthetic(ON_OFF, num_requests=5), 3).arrivals.model_dump() == {
        "kind": "on_off", "on_rate_per_s": 60.0, "on_s": 1.0, "off_s": 3.0,
        "off_rate_per_s": 6.0}
    curve = scale_rate(synthetic(DIURNAL, num_requests=5), 0.5).arrivals
    assert curve.points == [(0, 1.0), (20, 5.0), (40, 0.5)] and curve.period_s == 60
    gamma = scale_rate(synthetic({"kind": "gamma", "rate_per_s": 3.0, "cv": 2.5},
                                 num_requests=5), 2).arrivals
    assert (gamma.rate_per_s, gamma.cv) == (6.0, 2.5)
    replay = scale_rate(load_scenario(ROOT / "scenarios" / "azure_conv_h100.yaml").workload, 2)
    assert (replay.rate_multiplier, replay.window_start_s, replay.window_end_s) == (8.0, 600, 720)
    times = scale_rate(workload(explicit(("a", 2.0, 10, 2), ("b", 0.5, 10, 2))), 4).requests
    assert [(r.id, r.arrival_s) for r in times] == [("a", 0.5), ("b", 0.125)]


def test_offered_rate_by_hand():
    assert offered_rate(synthetic(ON_OFF, num_requests=5)) == (20 * 1 + 2 * 3) / 4
    # a linear ramp 0 -> 10 req/s over 10 s: 50 requests in 10 s, then 10 req/s on
    ramp = {"kind": "rate_curve", "points": [[0, 0], [10, 10]]}
    assert offered_rate(synthetic(ramp, num_requests=5)) == 5.0
    assert offered_rate(synthetic(ramp, duration_s=20)) == (50 + 100) / 20
    step = {"kind": "rate_curve", "points": [[0, 4], [30, 1]], "interpolation": "step",
            "period_s": 60}
    assert offered_rate(synthetic(step, num_requests=5)) == (4 * 30 + 1 * 30) / 60
    assert offered_rate(synthetic({"kind": "rate_curve", "points": [[0, 3]]},
                                  num_requests=5)) == 3.0
    # three requests, two gaps over 6.5 s (listed out of order)
    assert offered_rate(WORKLOADS[-1][1]) == 2 / 6.5


def test_offered_rate_of_a_replay_counts_its_window(tmp_path):
    rows = "\n".join(f"{t},100,10" for t in (0, 2, 4, 6, 8, 10))
    (tmp_path / "trace.csv").write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n"
                                        + rows + "\n")
    replay = workload({"kind": "replay", "trace": "trace.csv", "window_start_s": 2,
                       "window_end_s": 9, "rate_multiplier": 4})
    # requests at 2, 4, 6, 8 of the trace: three 2 s gaps, played 4x faster
    assert offered_rate(replay, base_dir=tmp_path) == 2.0
    assert offered_rate(scale_rate(replay, 0.5), base_dir=tmp_path) == 1.0
    alone = replay.model_copy(update={"window_end_s": 3.0})
    with pytest.raises(ConfigError) as info:
        offered_rate(alone, base_dir=tmp_path)
    assert str(info.value) == "workload: a single request has no arrival rate: give two or more"


def test_requests_at_one_time_have_no_rate():
    with pytest.raises(ConfigError, match=r"^workload.requests: all 2 requests arrive at 1.0 s"):
        offered_rate(workload(explicit(("a", 1.0, 10, 2), ("b", 1.0, 10, 2))))


def test_closed_loop_traffic_has_no_rate_to_scale():
    closed = synthetic({"kind": "closed_loop", "num_users": 4}, num_requests=20)
    for call in (lambda: scale_rate(closed, 2.0), lambda: offered_rate(closed)):
        with pytest.raises(ConfigError) as info:
            call()
        assert info.value.path == "workload.arrivals"
        assert "open-loop arrivals" in info.value.message


def test_a_fixed_concurrency_benchmark_has_no_rate_to_scale():
    closed = workload({**BENCHMARK, "max_concurrency": 8})
    unpaced = workload({**BENCHMARK, "request_rate": "inf"})
    for spec, field, says in ((closed, "workload.max_concurrency", "open-loop traffic"),
                              (unpaced, "workload.request_rate", "dispatches every request")):
        for call in (lambda spec=spec: scale_rate(spec, 2.0),
                     lambda spec=spec: offered_rate(spec)):
            with pytest.raises(ConfigError) as info:
                call()
            assert info.value.path == field
            assert says in info.value.message
    assert scale_rate(workload(BENCHMARK), 2.0).request_rate == 12.0


def test_sessions_scale_their_session_rate_and_offer_no_request_rate():
    spec = load_scenario(ROOT / "scenarios" / "chat_sessions_h100.yaml").workload
    assert scale_rate(spec, 2.0).arrivals.rate_per_s == 2 * spec.arrivals.rate_per_s
    with pytest.raises(ConfigError, match="sessions have no offered request rate") as info:
        offered_rate(spec)
    assert info.value.path == "workload.kind"


def test_the_shipped_benchmark_is_refused_by_the_planner_in_one_line():
    spec = load_scenario(ROOT / "scenarios" / "bench_rtx4090_mistral7b.yaml").workload
    with pytest.raises(ConfigError, match="has no offered rate"):
        offered_rate(spec)


@pytest.mark.parametrize("factor", [0.0, -1.0, math.inf, math.nan])
def test_the_factor_must_be_positive_and_finite(factor):
    with pytest.raises(ValueError, match="positive and finite"):
        scale_rate(WORKLOADS[0][1], factor)


def test_a_scaled_workload_is_validated_again():
    tiny = workload({"kind": "poisson", "rate_per_s": 1e-8, "num_requests": 5,
                     "prompt_tokens": 8, "output_tokens": 8})
    with pytest.raises(ValidationFailed) as info:
        scale_rate(tiny, 1e-320)  # the rate underflows to 0
    assert info.value.lines == ["workload.rate_per_s: Input should be greater than 0"]


# --------------------------------------------------------- generated traffic
def measured_rate(spec, seed: int = 0):
    """Requests per second the simulator really generates, and the requests."""
    requests = build_requests(spec, np.random.default_rng(seed))
    span_s = spec.duration_s or requests[-1].arrival_s - spec.start_s
    return len(requests) / span_s, requests


STOCHASTIC = [
    ("poisson", {"kind": "poisson", "rate_per_s": 5.0}),
    ("gamma", {"kind": "gamma", "rate_per_s": 5.0, "cv": 2.0}),
    ("on_off", ON_OFF),
    ("rate_curve", DIURNAL),
]


@pytest.mark.parametrize(("name", "arrivals"), STOCHASTIC, ids=[s[0] for s in STOCHASTIC])
@pytest.mark.parametrize("bound", [{"num_requests": 4000}, {"duration_s": 1200.0}],
                         ids=["count", "duration"])
def test_scaled_traffic_arrives_factor_times_faster(name, arrivals, bound):
    spec = synthetic(arrivals, **bound)
    factor = 3.0
    rate, _ = measured_rate(spec)
    scaled_rate, _ = measured_rate(scale_rate(spec, factor))
    assert rate == pytest.approx(offered_rate(spec), rel=0.1)
    assert scaled_rate == pytest.approx(factor * offered_rate(spec), rel=0.1)


@pytest.mark.parametrize(("name", "spec", "base_dir"), WORKLOADS, ids=IDS)
def test_count_bounded_traffic_keeps_its_lengths(name, spec, base_dir):
    if getattr(spec, "duration_s", None) is not None:
        pytest.skip("duration-bounded: the count of arrival draws depends on the rate")
    before = build_requests(spec, np.random.default_rng(3), base_dir=base_dir)
    after = build_requests(scale_rate(spec, 2.0), np.random.default_rng(3), base_dir=base_dir)
    assert [(r.num_prompt_tokens, r.max_tokens) for r in after] == [
        (r.num_prompt_tokens, r.max_tokens) for r in before]


@pytest.mark.parametrize("arrivals", [{"kind": "poisson", "rate_per_s": 5.0},
                                      {"kind": "gamma", "rate_per_s": 5.0, "cv": 0.4},
                                      {"kind": "constant", "rate_per_s": 5.0}])
def test_renewal_arrivals_are_the_same_draws_compressed(arrivals):
    spec = synthetic(arrivals, num_requests=500)
    before = build_requests(spec, np.random.default_rng(1))
    after = build_requests(scale_rate(spec, 4.0), np.random.default_rng(1))
    assert [r.arrival_s for r in after] == pytest.approx([r.arrival_s / 4 for r in before],
                                                         rel=1e-12)
