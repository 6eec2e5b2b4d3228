"""The keep-or-reject rule for a split: keep a disaggregated layout only if throughput, p95 and
the handoff all agree (the worked case is golden_examples.md's S7: 100 -> 126 req/s, p95 180 ->
150 ms, a handoff of 8 ms kept and of 18 ms rejected against a 10 ms budget)."""

from __future__ import annotations

from clustersim.plan.compare import split_verdict


def test_s7_keep_with_a_10ms_budget_reject_when_the_handoff_is_18ms():
    keep = split_verdict(100.0, 126.0, {"latency": 0.180}, {"latency": 0.150}, 0.008, 0.010)
    assert keep.keep_split
    reject = split_verdict(100.0, 126.0, {"latency": 0.180}, {"latency": 0.150}, 0.018, 0.010)
    assert not reject.keep_split
    assert any("over budget" in reason for reason in reject.reasons)


def test_s7_no_single_metric_decides():
    slower = split_verdict(100.0, 126.0, {"latency": 0.150}, {"latency": 0.180}, 0.001, 0.010)
    assert not slower.keep_split and any("worsens" in r for r in slower.reasons)
    flat = split_verdict(100.0, 100.0, {"latency": 0.180}, {"latency": 0.150}, 0.001, 0.010)
    assert not flat.keep_split and any("does not rise" in r for r in flat.reasons)
