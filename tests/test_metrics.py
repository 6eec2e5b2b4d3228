"""Metric definitions (reference/metrics.md) on hand-built requests."""

from __future__ import annotations

import pytest

from clustersim.engine.request import Request, RequestStatus
from clustersim.metrics import request_metrics, summarize
from clustersim.scenario import SLO


def finished(rid: str, arrival: float, token_times: list[float], prompt: int = 10) -> Request:
    r = Request(rid, arrival, prompt, len(token_times))
    r.status = RequestStatus.FINISHED
    r.num_output_tokens = len(token_times)
    r.token_times_s.extend(token_times)
    r.first_token_s = token_times[0]
    r.finish_s = token_times[-1]
    return r


def rejected(rid: str, arrival: float) -> Request:
    r = Request(rid, arrival, 10, 5)
    r.status = RequestStatus.REJECTED
    r.reject_reason = "prompt too long"
    r.finish_s = arrival
    return r


def test_ttft_tpot_e2e_and_itl():
    m = request_metrics(finished("a", 1.0, [1.5, 1.6, 1.8, 2.1]))
    assert m.ttft_s == pytest.approx(0.5)
    assert m.e2e_s == pytest.approx(1.1)
    assert m.tpot_s == pytest.approx(0.6 / 3)
    assert m.itl_p99_s == pytest.approx(0.3, abs=0.01)


def test_one_token_outputs_have_no_tpot_but_count_for_attainment():
    one = finished("one", 0.0, [0.2])
    assert request_metrics(one).tpot_s is None
    summary = summarize([one], [], [], SLO(ttft_s=0.5, tpot_s=0.01))
    assert summary.tpot_s.count == 0
    assert summary.slo.attainment == 1.0


def test_attainment_counts_every_arrived_request_and_rejections_miss():
    fast = finished("fast", 0.0, [0.1, 0.2, 0.3])
    slow_ttft = finished("slow", 0.0, [3.0, 3.1])
    slow_tpot = finished("choppy", 0.0, [0.1, 1.1])
    requests = [fast, slow_ttft, slow_tpot, rejected("gone", 0.5)]
    summary = summarize(requests, [], [], SLO(ttft_s=1.0, tpot_s=0.5))
    assert summary.slo.attainment == 0.25
    assert summary.num_rejected == 1
    assert summary.rejections == {"prompt too long": 1}


def test_percentiles_are_numpy_linear_and_itl_pools_all_gaps():
    requests = [finished(str(i), 0.0, [1.0 + i, 2.0 + i, 2.5 + i]) for i in range(5)]
    summary = summarize(requests, [], [])
    assert summary.ttft_s.p50 == pytest.approx(3.0)
    assert summary.ttft_s.p90 == pytest.approx(4.6)
    assert summary.itl_s.count == 10
    assert summary.itl_s.mean == pytest.approx(0.75)
    # throughput window: arrivals all at 0, so first arrival to last finish (6.5 s)
    assert summary.throughput.output_tokens_per_s == pytest.approx(15 / 6.5)


def test_joint_marginal_and_mean_verdicts_read_the_same_requests_differently():
    # 10 requests: one slow on TTFT only, another slow on TPOT only. Each limit alone holds
    # for 9 of 10 (marginal 0.9 passes), but only 8 of 10 meet both (joint 0.8 fails).
    requests = [finished(str(i), 0.0, [0.1, 0.2, 0.3]) for i in range(8)]
    requests.append(finished("slow-first", 0.0, [2.0, 2.1, 2.2]))
    requests.append(finished("slow-stream", 0.0, [0.1, 1.1, 2.1]))
    summary = summarize(requests, [], [], SLO(ttft_s=1.0, tpot_s=0.5))
    verdict = summary.slo
    assert verdict.attainment == pytest.approx(0.8)
    assert verdict.marginal == {"ttft_s": pytest.approx(0.9), "tpot_s": pytest.approx(0.9)}
    assert verdict.passes == {"joint": False, "marginal": True, "mean": True}
    assert not verdict.meets  # the default criterion is joint
    marginal = summarize(requests, [], [], SLO(ttft_s=1.0, tpot_s=0.5, criterion="marginal"))
    assert marginal.slo.meets
    lo, hi = verdict.attainment_interval
    assert lo < 0.8 < hi and hi <= 1.0


def test_the_margin_is_the_share_in_log_odds_less_the_targets_signed_as_the_verdict():
    """What the goodput search reads between two probes: 0.8 of requests meet both limits
    against a 0.9 target (joint: below, by log(4) - log(9)); each limit alone holds for 0.9
    (marginal: exactly on it); the mean criterion has no share to read."""
    import math

    requests = [finished(str(i), 0.0, [0.1, 0.2, 0.3]) for i in range(8)]
    requests.append(finished("slow-first", 0.0, [2.0, 2.1, 2.2]))
    requests.append(finished("slow-stream", 0.0, [0.1, 1.1, 2.1]))
    joint = summarize(requests, [], [], SLO(ttft_s=1.0, tpot_s=0.5)).slo
    assert joint.margin == pytest.approx(math.log(4) - math.log(9))
    assert (joint.margin >= 0) == joint.meets
    marginal = summarize(requests, [], [], SLO(ttft_s=1.0, tpot_s=0.5,
                                                criterion="marginal")).slo
    assert marginal.margin == pytest.approx(0.0, abs=1e-12) and marginal.meets
    mean = summarize(requests, [], [], SLO(ttft_s=1.0, tpot_s=0.5, criterion="mean")).slo
    assert mean.margin is None
    every = summarize(requests[:8], [], [], SLO(ttft_s=1.0, tpot_s=0.5)).slo
    assert every.margin == pytest.approx(math.log(999) - math.log(9))  # held off infinity


def test_a_rejected_request_fails_the_mean_verdict_past_the_allowed_share():
    requests = [finished(str(i), 0.0, [0.1, 0.2]) for i in range(8)]
    requests += [rejected("x", 0.0), rejected("y", 0.0)]
    summary = summarize(requests, [], [], SLO(ttft_s=1.0, attainment_target=0.9))
    assert summary.slo.means["ttft_s"] == pytest.approx(0.1)
    assert summary.slo.rejected_share == pytest.approx(0.2)
    assert summary.slo.passes["mean"] is False


def test_itl_limit_bounds_each_requests_p99_gap():
    smooth = finished("smooth", 0.0, [0.1 * k for k in range(1, 12)])
    spiky = finished("spiky", 0.0, [0.1, 0.2, 1.2, 1.3])
    summary = summarize([smooth, spiky], [], [], SLO(itl_s=0.5))
    assert summary.slo.attainment == 0.5


def test_an_slo_needs_a_limit():
    from clustersim.validation import ValidationFailed

    with pytest.raises(ValidationFailed, match="at least one"):
        from clustersim.validation import validate

        validate(SLO, {"attainment_target": 0.9})


def test_wilson_interval_and_cost_per_million_tokens():
    from clustersim.metrics.goodput import cost_per_million_tokens, wilson_interval

    lo, hi = wilson_interval(90, 100)
    assert lo == pytest.approx(0.8256, abs=1e-4) and hi == pytest.approx(0.9448, abs=1e-4)
    assert wilson_interval(0, 10)[0] == 0.0
    # 8 GPUs at $2.50/h producing 10,000 output tokens/s: $20/h over 36M tokens/h
    assert cost_per_million_tokens({"h100-sxm": 8}, {"h100-sxm": 2.5}, 10_000) == pytest.approx(
        20 / 36
    )


# ------------------------------------------------- exact statistics from multisets
from fractions import Fraction  # noqa: E402
from unittest.mock import patch  # noqa: E402

import numpy as np  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from clustersim.metrics import requests as requests_module  # noqa: E402
from clustersim.metrics.requests import (  # noqa: E402
    Distribution,
    exact_sum,
    linear_percentile,
    pooled_gaps,
    token_gaps,
)

gaps = st.lists(st.floats(1e-6, 10.0, allow_nan=False), min_size=1, max_size=300)


@settings(max_examples=200, deadline=None)
@given(gaps, st.sampled_from([0, 1, 50, 90, 95, 99, 99.9, 100]))
def test_linear_percentile_is_numpys_bit_for_bit(values, p):
    data = np.array(values)
    assert linear_percentile(data, p) == float(np.percentile(data, p, method="linear"))


SORT_OR_BUCKETS = pytest.mark.parametrize("sort_at_once", [1 << 18, 0, 7],
                                          ids=["sorted whole", "in buckets", "switching"])
"""Both ways a distribution finds its order statistics: one sort of every piece (small
multisets), or buckets of the bit patterns (large ones; forced here with a limit of 0, or of
7 entries, past which it switches after the pieces it has kept)."""


@SORT_OR_BUCKETS
@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(1e-6, 10.0, allow_nan=False), st.integers(0, 50)),
                min_size=1, max_size=60), st.randoms())
def test_a_multiset_has_the_expanded_samples_percentiles_and_its_exact_mean(
        sort_at_once, pairs, rnd):
    values = np.array([v for v, _ in pairs])
    counts = np.array([c for _, c in pairs])
    expanded = np.repeat(values, counts)
    with patch.object(requests_module, "_SORT_AT_ONCE", sort_at_once):
        d = Distribution.of_counts(values, counts)
    if not expanded.size:
        assert d.count == 0 and d.mean is None
        return
    ref = Distribution.of(expanded)
    assert (d.p50, d.p90, d.p95, d.p99, d.count) == (ref.p50, ref.p90, ref.p95, ref.p99,
                                                     ref.count)
    exact = sum(Fraction(v) * c for v, c in pairs)
    # the sum rounded once, then divided: the same bits whatever order the pairs come in
    assert d.mean == float(exact) / int(counts.sum())
    shuffled = list(range(len(pairs)))
    rnd.shuffle(shuffled)
    with patch.object(requests_module, "_SORT_AT_ONCE", sort_at_once):
        assert Distribution.of_counts(values[shuffled], counts[shuffled]) == d


def test_exact_sum_survives_large_counts():
    values = np.array([0.1, 1e-3, 7.25])
    counts = np.array([3 << 40, 1 << 27, 12345])
    expected = sum(Fraction(v) * int(c) for v, c in zip(values, counts, strict=True))
    assert exact_sum(values, counts) == float(expected)


def test_a_lean_requests_token_clock_gives_the_same_gaps_as_kept_times():
    from array import array

    clock = array("d", [0.5, 0.75, 1.0, 1.5, 2.25, 2.5, 3.0])
    lean = Request("lean", 0.0, 10, 5)
    lean.status = RequestStatus.FINISHED
    lean.num_output_tokens = 5
    lean.note_tokens(clock, 1, 3)
    lean.note_tokens(clock, 5, 6)  # steps 1-3, then 5-6 (preempted in between)
    assert lean.token_streaks == [1, 3, 5, 6]
    lean.first_token_s, lean.finish_s = 0.75, 3.0
    full = finished("full", 0.0, [0.75, 1.0, 1.5, 2.5, 3.0])
    assert token_gaps(lean).tolist() == token_gaps(full).tolist() == [0.25, 0.5, 1.0, 0.5]
    assert Distribution.of_chunks(pooled_gaps([lean])) == Distribution.of_chunks(
        pooled_gaps([full]))
    assert request_metrics(lean) == request_metrics(full)


@SORT_OR_BUCKETS
@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2000), st.integers(0, 30)), min_size=1, max_size=200),
       st.integers(1, 5), st.sampled_from([2.0**-30, 2.0**-40, 2.0**-50]))
def test_clustered_and_repeated_values_are_ranked_exactly_in_pieces(
        sort_at_once, pairs, num_pieces, step):
    # values packed into one coarse and often one fine bucket, with exact repeats
    values = np.array([0.008 * (1 + k * step) for k, _ in pairs])
    counts = np.array([c for _, c in pairs])
    pieces = [(values[i::num_pieces], counts[i::num_pieces]) for i in range(num_pieces)]
    with patch.object(requests_module, "_SORT_AT_ONCE", sort_at_once):
        d = Distribution.of_chunks([lambda p=p: p for p in pieces])
    expanded = np.repeat(values, counts)
    if not expanded.size:
        assert d.count == 0
        return
    ref = Distribution.of(expanded)
    assert (d.p50, d.p90, d.p95, d.p99, d.count) == (ref.p50, ref.p90, ref.p95, ref.p99,
                                                     ref.count)
