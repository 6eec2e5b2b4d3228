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
    summary = summarize([one], [], {}, SLO(ttft_s=0.5, tpot_s=0.01))
    assert summary["tpot_s"]["count"] == 0
    assert summary["slo"]["attainment"] == 1.0


def test_attainment_counts_every_arrived_request_and_rejections_miss():
    fast = finished("fast", 0.0, [0.1, 0.2, 0.3])
    slow_ttft = finished("slow", 0.0, [3.0, 3.1])
    slow_tpot = finished("choppy", 0.0, [0.1, 1.1])
    requests = [fast, slow_ttft, slow_tpot, rejected("gone", 0.5)]
    summary = summarize(requests, [], {}, SLO(ttft_s=1.0, tpot_s=0.5))
    assert summary["slo"]["attainment"] == 0.25
    assert summary["num_rejected"] == 1
    assert summary["rejections"] == {"prompt too long": 1}


def test_percentiles_are_numpy_linear_and_itl_pools_all_gaps():
    requests = [finished(str(i), 0.0, [1.0 + i, 2.0 + i, 2.5 + i]) for i in range(5)]
    summary = summarize(requests, [], {})
    assert summary["ttft_s"]["p50"] == pytest.approx(3.0)
    assert summary["ttft_s"]["p90"] == pytest.approx(4.6)
    assert summary["itl_s"]["count"] == 10
    assert summary["itl_s"]["mean"] == pytest.approx(0.75)
    # throughput window: arrivals all at 0, so first arrival to last finish (6.5 s)
    assert summary["throughput"]["output_tokens_per_s"] == pytest.approx(15 / 6.5)
