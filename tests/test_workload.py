"""Workloads: the schema, reproducibility from the seed, the statistics of the generated
arrivals and lengths, the S6 request classes, and closed-loop clients in a real simulation."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clustersim.scenario import load_scenario, parse_scenario
from clustersim.workload import build_requests, build_workload, classify_request, load_trace
from clustersim.workload.arrivals import RateCurve, arrival_times
from clustersim.workload.classify import count_classes
from clustersim.workload.spec import (
    ClosedLoopArrivals,
    MixtureLengths,
    ReplayWorkload,
    SyntheticWorkload,
)
from tests.helpers import run_cli, scenario, simulate, write_scenario

ROOT = Path(__file__).resolve().parents[1]
FIXED_STEP = {"kind": "fixed", "step_time_s": 0.01}
SHORT = {"kind": "independent", "prompt_tokens": 32, "output_tokens": 8}


def workload(data: dict[str, Any]):
    return parse_scenario(scenario(workload=data)).workload


def synthetic(arrivals: dict[str, Any], lengths: dict[str, Any] | None = None, **fields):
    return workload({"kind": "synthetic", "arrivals": arrivals, "lengths": lengths or SHORT,
                     **fields})


def requests_of(spec, seed: int = 0):
    return build_requests(spec, np.random.default_rng(seed))


def fingerprint(requests) -> list[tuple[str, float, int, int]]:
    return [(r.request_id, r.arrival_s, r.num_prompt_tokens, r.max_tokens) for r in requests]


def arrivals_of(spec, seed: int = 0) -> np.ndarray:
    """The arrival times ``spec`` gives (drawn as build_requests draws them, lengths aside)."""
    return arrival_times(spec.arrivals, np.random.default_rng(seed),
                         num_requests=spec.num_requests, duration_s=spec.duration_s,
                         start_s=spec.start_s)


# ------------------------------------------------------------------ schema
def test_the_short_poisson_form_gives_the_same_requests_as_synthetic():
    classes = [{"name": "a", "weight": 3, "prompt_tokens": {"kind": "uniform", "low": 5,
                                                             "high": 500}, "output_tokens": 9},
               {"name": "decode_baseline", "weight": 1}]
    short = workload({"kind": "poisson", "rate_per_s": 4, "num_requests": 200, "start_s": 2,
                      "classes": classes})
    long = synthetic({"kind": "poisson", "rate_per_s": 4},
                     {"kind": "mixture", "classes": classes}, num_requests=200, start_s=2)
    assert fingerprint(requests_of(short, 5)) == fingerprint(requests_of(long, 5))
    flat = workload({"kind": "poisson", "rate_per_s": 4, "num_requests": 50,
                     "prompt_tokens": {"kind": "lognormal", "mean": 300, "cv": 2},
                     "output_tokens": 7})
    spelled = synthetic({"kind": "poisson", "rate_per_s": 4},
                        {"kind": "independent", "output_tokens": 7,
                         "prompt_tokens": {"kind": "lognormal", "mean": 300, "cv": 2}},
                        num_requests=50)
    assert fingerprint(requests_of(flat, 1)) == fingerprint(requests_of(spelled, 1))


def test_source_document_classes_take_their_lengths_by_name():
    spec = synthetic({"kind": "constant", "rate_per_s": 1}, {"kind": "mixture", "classes": [
        {"name": "decode_baseline", "weight": 1}, {"name": "short_interactive", "weight": 1},
        {"name": "long_document_16k", "weight": 1}, {"name": "long_document_32k", "weight": 1},
    ]}, num_requests=400)
    pairs = {(r.num_prompt_tokens, r.max_tokens) for r in requests_of(spec)}
    assert pairs == {(16, 512), (256, 64), (16384, 32), (32768, 32)}


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"kind": "synthetic", "arrivals": {"kind": "gamma", "rate_per_s": 1, "cv": 0},
          "lengths": SHORT, "num_requests": 3}, "workload.arrivals.cv: Input should be greater"),
        ({"kind": "synthetic", "arrivals": {"kind": "poisson", "rate_per_s": 1},
          "lengths": SHORT}, "workload: give num_requests, duration_s or both"),
        ({"kind": "synthetic", "arrivals": {"kind": "closed_loop", "num_users": 2},
          "lengths": SHORT, "duration_s": 5},
         "workload: closed_loop arrivals need num_requests and take no duration_s"),
        ({"kind": "synthetic", "arrivals": {"kind": "poisson", "rate_per_s": 1},
          "lengths": {"kind": "mixture", "classes": [{"name": "chat", "weight": 1}]},
          "num_requests": 3},
         "workload.lengths.classes[0]: class 'chat' needs prompt_tokens and output_tokens"),
        ({"kind": "synthetic", "arrivals": {"kind": "poisson", "rate_per_s": 1},
          "lengths": {"kind": "independent", "output_tokens": 3,
                      "prompt_tokens": {"kind": "lognormal", "mean": 9, "cv": 1, "low": 8,
                                        "high": 2}}, "num_requests": 3},
         "workload.lengths.prompt_tokens: low (8) must be <= high (2)"),
        ({"kind": "synthetic", "arrivals": {"kind": "rate_curve", "points": [[0, 1], [0, 2]]},
          "lengths": SHORT, "num_requests": 3},
         "workload.arrivals: point times must increase"),
        ({"kind": "synthetic", "arrivals": {"kind": "rate_curve", "points": [[0, 1], [9, 0]]},
          "lengths": SHORT, "num_requests": 3}, "workload: the rate curve ends at rate 0"),
        ({"kind": "synthetic", "arrivals": {"kind": "rate_curve", "points": [[0, 1], [9, 2]],
                                            "period_s": 9},
          "lengths": SHORT, "num_requests": 3},
         "workload.arrivals.period_s: period_s (9.0) must exceed the last point's time"),
        ({"kind": "synthetic", "arrivals": {"kind": "on_off", "on_rate_per_s": 1, "on_s": 1},
          "lengths": SHORT, "num_requests": 3}, "workload.arrivals.off_s: Field required"),
        ({"kind": "replay", "trace": "azure-conv-2023", "window_start_s": 9, "window_end_s": 9},
         "workload.window_end_s: window_end_s (9.0) must exceed window_start_s (9.0)"),
        ({"kind": "replay", "trace": "x.csv", "format": "csv"},
         "workload: format csv needs columns"),
        ({"kind": "replay", "trace": "azure-conv-2023", "speed": 2},
         "workload.speed: unknown field\n"),
        ({"kind": "synthetic", "arrivals": {"kind": "poisson", "rate_per_s": 1},
          "lengths": {"kind": "empirical", "trace": "azure-conv-2023", "format": "xls"},
          "num_requests": 3}, "workload.lengths.format: Input should be 'auto'"),
    ],
)
def test_bad_workloads_exit_2_with_path_and_message(tmp_path, data, expected):
    path = write_scenario(tmp_path, scenario(workload=data))
    code, output = run_cli("simulate", str(path), "--out", str(tmp_path / "out"))
    assert code == 2, output
    assert output.startswith(f"{path}: {expected}"), output


def test_example_scenarios_use_the_azure_trace_and_the_three_class_mixture():
    azure = load_scenario(ROOT / "scenarios" / "azure_conv_h100.yaml").workload
    assert isinstance(azure, ReplayWorkload) and azure.trace == "azure-conv-2023"
    mix = load_scenario(ROOT / "scenarios" / "three_class_mix.yaml").workload
    assert isinstance(mix, SyntheticWorkload) and isinstance(mix.lengths, MixtureLengths)
    assert {c.name for c in mix.lengths.classes} == {
        "decode_baseline", "short_interactive", "long_document_16k"}


# ------------------------------------------------------------ reproducibility
SPECS = {
    "gamma + lognormal": ({"kind": "gamma", "rate_per_s": 5, "cv": 3},
                          {"kind": "independent", "output_tokens": 9,
                           "prompt_tokens": {"kind": "lognormal", "mean": 800, "cv": 1.5}}),
    "on_off + mixture": ({"kind": "on_off", "on_rate_per_s": 20, "on_s": 5, "off_s": 10},
                         {"kind": "mixture", "classes": [{"name": "decode_baseline", "weight": 1},
                                                         {"name": "short_interactive",
                                                          "weight": 2}]}),
    "rate_curve + empirical": ({"kind": "rate_curve", "points": [[0, 1], [30, 9]],
                                "period_s": 60},
                               {"kind": "empirical", "trace": "azure-code-2023"}),
    "poisson + uniform": ({"kind": "poisson", "rate_per_s": 3},
                          {"kind": "independent", "prompt_tokens": {"kind": "uniform", "low": 1,
                                                                    "high": 4000},
                           "output_tokens": {"kind": "uniform", "low": 1, "high": 400}}),
}


@pytest.mark.parametrize("name", sorted(SPECS))
def test_same_seed_same_requests_different_seed_different(name):
    arrivals, lengths = SPECS[name]
    spec = synthetic(arrivals, lengths, num_requests=300)
    first = fingerprint(requests_of(spec, 11))
    assert first == fingerprint(requests_of(spec, 11))
    other = fingerprint(requests_of(spec, 12))
    assert [r[1] for r in first] != [r[1] for r in other]
    assert [r[2:] for r in first] != [r[2:] for r in other]


def test_traces_replay_identically_whatever_the_seed():
    spec = workload({"kind": "replay", "trace": "azure-conv-2023", "max_num_requests": 50})
    assert fingerprint(requests_of(spec, 1)) == fingerprint(requests_of(spec, 2))


def test_a_trace_file_is_read_once_per_process_until_it_changes(tmp_path):
    """A plan replays one trace hundreds of times: the process keeps what it read, and reads
    the file again once it changes (size or modification time)."""
    import os

    from clustersim import workload as workload_module

    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0.0,100,10\n0.5,200,20\n")
    spec = workload({"kind": "replay", "trace": str(trace),
                     "format": "csv", "columns": {"arrival": "arrival_s",
                                                  "prompt_tokens": "prompt_tokens",
                                                  "output_tokens": "output_tokens"}})
    first = fingerprint(requests_of(spec))
    assert first == [("0", 0.0, 100, 10), ("1", 0.5, 200, 20)]
    cached = workload_module._table(spec, None)
    assert cached is workload_module._table(spec, None)
    assert not cached.prompt_tokens.flags.writeable  # no reader can change the next one's
    stat = trace.stat()
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0.0,300,30\n0.5,200,20\n")
    os.utime(trace, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert fingerprint(requests_of(spec))[0] == ("0", 0.0, 300, 30)


# --------------------------------------------------------------- statistics
def gaps_of(spec, seed: int = 0) -> np.ndarray:
    return np.diff(np.concatenate(([0.0], arrivals_of(spec, seed))))


def test_poisson_arrivals_have_their_rate_and_cv_1():
    n, rate = 20_000, 8.0
    gaps = gaps_of(synthetic({"kind": "poisson", "rate_per_s": rate}, num_requests=n), 3)
    measured = n / gaps.sum()
    assert abs(measured - rate) < 4 * rate / np.sqrt(n)  # 4 standard errors
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.04)
    # Counts in 1 s windows: Poisson, so variance = mean.
    counts = np.bincount(np.cumsum(gaps).astype(int))[:-1]
    assert counts.var() / counts.mean() == pytest.approx(1.0, abs=0.1)


@pytest.mark.parametrize("cv", [0.5, 3.0])
def test_gamma_arrivals_have_their_rate_and_cv(cv):
    n, rate = 200_000, 10.0
    gaps = gaps_of(synthetic({"kind": "gamma", "rate_per_s": rate, "cv": cv}, num_requests=n), 4)
    assert abs(n / gaps.sum() - rate) < 4 * rate * cv / np.sqrt(n)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.03)


def test_constant_arrivals_and_the_limits():
    spec = synthetic({"kind": "constant", "rate_per_s": 4}, num_requests=100, start_s=10)
    assert [r.arrival_s for r in requests_of(spec)] == arrivals_of(spec).tolist()
    assert arrivals_of(spec).tolist() == pytest.approx([10 + 0.25 * (i + 1) for i in range(100)])
    capped = synthetic({"kind": "constant", "rate_per_s": 4}, num_requests=100, duration_s=2)
    assert arrivals_of(capped).tolist() == pytest.approx([0.25, 0.5, 0.75, 1, 1.25, 1.5, 1.75])
    by_time = synthetic({"kind": "poisson", "rate_per_s": 50}, duration_s=100, start_s=5)
    times = arrivals_of(by_time)
    assert times.min() > 5 and times.max() < 105
    assert abs(len(times) - 5000) < 4 * np.sqrt(5000)


def test_on_off_bursts_arrive_only_when_on_at_the_on_rate():
    spec = synthetic({"kind": "on_off", "on_rate_per_s": 30, "on_s": 2, "off_s": 8},
                     duration_s=5000)
    times = arrivals_of(spec, 6)
    phase = times % 10
    assert phase.max() < 2
    expected = 30 * 2 * 500
    assert abs(len(times) - expected) < 4 * np.sqrt(expected)
    trickle = synthetic({"kind": "on_off", "on_rate_per_s": 30, "on_s": 2, "off_s": 8,
                         "off_rate_per_s": 1}, duration_s=5000)
    off = (arrivals_of(trickle, 6) % 10) >= 2
    assert abs(off.sum() - 4000) < 4 * np.sqrt(4000)


def test_a_diurnal_rate_curve_is_followed_hour_by_hour():
    day = 86_400.0
    points = [[0, 0.2], [day / 2, 1.0]]  # ramps up to noon, back down to midnight
    spec = synthetic({"kind": "rate_curve", "points": points, "period_s": day},
                     duration_s=2 * day)
    times = arrivals_of(spec, 8) % day
    curve = RateCurve(np.array([0.0, day / 2]), np.array([0.2, 1.0]), linear=True, period_s=day)
    edges = np.linspace(0, day, 25)
    counts = np.histogram(times, bins=edges)[0]
    expected = 2 * np.diff([curve.cumulative(t) for t in edges])
    assert np.all(np.abs(counts - expected) < 4.5 * np.sqrt(expected))
    step = synthetic({"kind": "rate_curve", "interpolation": "step",
                      "points": [[0, 5.0], [100, 0.0], [200, 20.0]]}, duration_s=300)
    stepped = arrivals_of(step, 9)
    assert not np.any((stepped >= 100) & (stepped < 200))
    assert abs(np.sum(stepped < 100) - 500) < 4 * np.sqrt(500)
    assert abs(np.sum(stepped >= 200) - 2000) < 4 * np.sqrt(2000)


@settings(deadline=None)  # no wall-clock limit per example
@given(st.floats(min_value=0.0, max_value=1000.0))
def test_rate_curve_inverse_undoes_the_cumulative(t):
    curve = RateCurve(np.array([0.0, 10.0, 25.0, 40.0]), np.array([3.0, 0.0, 0.0, 7.0]),
                      linear=True, period_s=60.0)
    x = curve.cumulative(t)
    back = float(curve.inverse(np.array([x]))[0])
    assert curve.cumulative(back) == pytest.approx(x, abs=1e-9)
    # Where the rate is well above 0 the time itself comes back (over the zero-rate stretch
    # from 10 to 25 s, Λ is flat and the inverse is its end).
    if not 9.0 < t % 60 < 26.0:
        assert back == pytest.approx(t, abs=1e-6)


def test_arrival_times_need_a_limit():
    spec = synthetic({"kind": "poisson", "rate_per_s": 1}, num_requests=1).arrivals
    with pytest.raises(ValueError, match="num_requests or duration_s"):
        arrival_times(spec, np.random.default_rng(0), num_requests=None)


def test_lognormal_lengths_have_their_mean_and_cv_and_are_clipped():
    spec = synthetic({"kind": "constant", "rate_per_s": 100},
                     {"kind": "independent", "output_tokens": 1,
                      "prompt_tokens": {"kind": "lognormal", "mean": 1000, "cv": 0.8}},
                     num_requests=50_000)
    prompts = np.array([r.num_prompt_tokens for r in requests_of(spec, 2)])
    assert prompts.mean() == pytest.approx(1000, rel=0.02)
    assert prompts.std() / prompts.mean() == pytest.approx(0.8, rel=0.05)
    clipped = synthetic({"kind": "constant", "rate_per_s": 100},
                        {"kind": "independent", "output_tokens": 1,
                         "prompt_tokens": {"kind": "lognormal", "mean": 1000, "cv": 3,
                                           "low": 64, "high": 4096}}, num_requests=5000)
    prompts = np.array([r.num_prompt_tokens for r in requests_of(clipped, 2)])
    assert prompts.min() == 64 and prompts.max() == 4096


def test_mixture_shares_follow_the_weights():
    spec = synthetic({"kind": "poisson", "rate_per_s": 10}, {"kind": "mixture", "classes": [
        {"name": "decode_baseline", "weight": 0.45}, {"name": "short_interactive", "weight": 0.45},
        {"name": "long_document_32k", "weight": 0.10}]}, num_requests=20_000)
    prompts = np.array([r.num_prompt_tokens for r in requests_of(spec, 3)])
    share = np.mean(prompts == 32768)
    assert abs(share - 0.10) < 4 * np.sqrt(0.1 * 0.9 / 20_000)


def test_empirical_lengths_keep_each_row_s_prompt_and_output_together():
    table = load_trace("azure-code-2023")
    rows = set(zip(table.prompt_tokens.tolist(), table.output_tokens.tolist(), strict=True))
    spec = synthetic({"kind": "poisson", "rate_per_s": 2},
                     {"kind": "empirical", "trace": "azure-code-2023"}, num_requests=5000)
    pairs = [(r.num_prompt_tokens, r.max_tokens) for r in requests_of(spec, 4)]
    assert set(pairs) <= rows
    prompts = np.array([p for p, _ in pairs])
    assert prompts.mean() == pytest.approx(table.prompt_tokens.mean(), rel=0.05)
    # Drawn independently, prompts and outputs would pair up into rows the table lacks.
    shuffled = list(zip(sorted(p for p, _ in pairs), [o for _, o in pairs], strict=True))
    assert not set(shuffled) <= rows
    in_order = synthetic({"kind": "constant", "rate_per_s": 2},
                         {"kind": "empirical", "trace": "azure-code-2023", "sample": "in_order"},
                         num_requests=len(table) + 2)
    got = requests_of(in_order)
    assert [r.num_prompt_tokens for r in got[:3]] == table.prompt_tokens[:3].tolist()
    assert got[-1].num_prompt_tokens == table.prompt_tokens[1]


# ------------------------------------------------------------ request classes
def test_golden_s6_classification():
    assert classify_request(4000, 64) == "prefill_heavy"
    assert classify_request(256, 512) == "decode_heavy"
    assert classify_request(1500, 128) == "mixed"
    # Boundaries: prompt > T and output <= T/8 (T = 2048, T/8 = 256).
    assert classify_request(2049, 256) == "prefill_heavy"
    assert classify_request(2048, 256) == "mixed"
    assert classify_request(2048, 257) == "decode_heavy"
    assert classify_request(5000, 5000) == "mixed"
    assert classify_request(4000, 64, long_prompt_threshold=8192) == "mixed"


@settings(deadline=None)  # no wall-clock limit per example
@given(st.lists(st.tuples(st.integers(1, 10_000), st.integers(1, 2_000)), min_size=1,
                max_size=50), st.integers(1, 9000))
def test_class_counts_agree_with_the_classifier(pairs, threshold):
    prompts, outputs = zip(*pairs, strict=True)
    counts = count_classes(np.array(prompts), np.array(outputs), threshold)
    expected = {"prefill_heavy": 0, "decode_heavy": 0, "mixed": 0}
    for p, o in pairs:
        expected[classify_request(p, o, threshold)] += 1
    assert counts == expected


# ----------------------------------------------------------------- closed loop
def in_flight_at_arrivals(rows: dict[str, dict[str, str]]) -> list[int]:
    """For each arrival: requests arrived by then and not finished (in-flight), it included."""
    spans = [(float(r["arrival_s"]), float(r["finish_s"])) for r in rows.values()]
    return [sum(1 for a, f in spans if a <= t < f) for t, _ in spans]


@pytest.mark.parametrize("think_time_s", [0.0, 0.05])
def test_closed_loop_never_has_more_than_n_requests_in_flight(tmp_path, think_time_s):
    users = 4
    data = scenario(cost=FIXED_STEP, workload={
        "kind": "synthetic",
        "arrivals": {"kind": "closed_loop", "num_users": users, "think_time_s": think_time_s},
        "lengths": {"kind": "independent",
                    "prompt_tokens": {"kind": "uniform", "low": 16, "high": 600},
                    "output_tokens": {"kind": "uniform", "low": 1, "high": 40}},
        "num_requests": 60,
    })
    result = simulate(tmp_path, data)
    rows = result["requests"]
    assert len(rows) == 60 and all(r["outcome"] == "finished" for r in rows.values())
    counts = in_flight_at_arrivals(rows)
    assert max(counts) == users
    assert all(float(rows[str(i)]["arrival_s"]) == 0.0 for i in range(users))
    # Every later request is sent think_time_s after some earlier request finished.
    finishes = sorted(float(r["finish_s"]) for r in rows.values())
    for i in range(users, 60):
        sent = float(rows[str(i)]["arrival_s"])
        assert min(abs(sent - think_time_s - f) for f in finishes) < 1e-6
    # The engine trace agrees: never more than N requests running or waiting.
    assert max(int(s["num_running"]) + int(s["num_waiting"]) for s in result["steps"]) <= users


def test_closed_loop_carries_on_past_rejected_requests(tmp_path):
    data = scenario(cost=FIXED_STEP, engine={"max_model_len": 512}, workload={
        "kind": "synthetic", "arrivals": {"kind": "closed_loop", "num_users": 2},
        "lengths": {"kind": "independent",
                    "prompt_tokens": {"kind": "uniform", "low": 16, "high": 900},
                    "output_tokens": 8},
        "num_requests": 30,
    })
    rows = simulate(tmp_path, data)["requests"]
    outcomes = [r["outcome"] for r in rows.values()]
    assert len(outcomes) == 30
    assert any(o.startswith("rejected") for o in outcomes) and "finished" in outcomes
    assert max(in_flight_at_arrivals(rows)) <= 2


def test_closed_loop_source_is_built_with_its_users():
    spec = synthetic({"kind": "closed_loop", "num_users": 3, "think_time_s": 1.5},
                     num_requests=10)
    assert isinstance(spec.arrivals, ClosedLoopArrivals)
    source = build_workload(spec, np.random.default_rng(0))
    assert len(source.requests) == 10
    assert (source.num_users, source.think_time_s) == (3, 1.5)
    with pytest.raises(ValueError, match="build_workload"):
        build_requests(spec, np.random.default_rng(0))


def test_stop_or_length_answers_stop_early_or_run_to_max_tokens():
    stop = {"kind": "stop_or_length", "max_tokens": 500, "stop_fraction": 0.7,
            "stop_tokens": {"kind": "lognormal", "mean": 200, "cv": 1.0}}
    spec = synthetic({"kind": "constant", "rate_per_s": 100},
                     {"kind": "independent", "prompt_tokens": 8, "output_tokens": stop},
                     num_requests=40_000)
    outputs = np.array([r.max_tokens for r in requests_of(spec, 5)])
    assert outputs.max() == 500 and outputs.min() >= 1
    # at max_tokens: the 30 % that never stop, and the stoppers whose draw reached 500
    sigma2 = np.log1p(1.0)
    mu = np.log(200) - sigma2 / 2
    z = (np.log(499.5) - mu) / np.sqrt(sigma2)
    beyond = 0.5 * math.erfc(z / math.sqrt(2))  # the normal's upper tail
    expected = 0.3 + 0.7 * beyond
    assert np.mean(outputs == 500) == pytest.approx(expected, abs=4 * np.sqrt(
        expected * (1 - expected) / 40_000))
    never = {**stop, "stop_fraction": 0.0}
    spec = synthetic({"kind": "constant", "rate_per_s": 100},
                     {"kind": "mixture", "classes": [
                         {"name": "a", "weight": 1, "prompt_tokens": 8, "output_tokens": never}]},
                     num_requests=100)
    assert {r.max_tokens for r in requests_of(spec)} == {500}


def test_a_new_output_kind_leaves_the_draws_of_the_others_as_they_were():
    from clustersim.workload.lengths import draw_lengths, draw_output_lengths

    dist = workload({"kind": "poisson", "rate_per_s": 1, "num_requests": 1, "prompt_tokens": 8,
                     "output_tokens": {"kind": "lognormal", "mean": 50, "cv": 2}}).output_tokens
    assert (draw_output_lengths(dist, 100, np.random.default_rng(9))
            == draw_lengths(dist, 100, np.random.default_rng(9))).all()
