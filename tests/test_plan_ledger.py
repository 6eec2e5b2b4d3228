"""The ledger: every candidate's row in the plan's order, the screen's verdicts spilled to
disk past a size and merged back as read, with the same rows in the same order."""

from __future__ import annotations

import random

from clustersim.plan import ledger
from clustersim.plan.estimate import Screened
from clustersim.plan.executors import SerialExecutor
from clustersim.plan.ledger import Ledger, ScreenRows
from clustersim.plan.planner import Planner
from clustersim.plan.result import CandidateResult, ledger_rows
from clustersim.plan.space import Candidate, PoolChoice
from clustersim.scenario import parse_scenario
from tests.test_plan import scenario


def verdict(n: int, estimate: float, reason: str | None = None) -> Screened:
    pools = (PoolChoice("colocated", "h100-sxm", 1, n),)
    return Screened(Candidate("colocated", pools, None, True), estimate, None, reason)


def key(s: Screened) -> tuple:
    return (s.reason is not None, -s.estimate_per_s, s.candidate.num_gpus, s.candidate.id)


def test_verdicts_spilled_in_runs_read_back_in_key_order():
    rng = random.Random(7)
    verdicts = [verdict(n, rng.choice([0.0, 1.5, 2.0, rng.random()]),
                        "does not fit" if n % 5 == 0 else None) for n in range(1, 400)]
    held, spilled = ScreenRows(key), ScreenRows(key, spill_at=17)
    for v in verdicts:
        held.add(v)
        spilled.add(v)
    assert spilled.spilled == len(verdicts) // 17 and held.spilled == 0
    want = sorted(verdicts, key=key)
    assert [v for _, v in held] == want
    assert [v for _, v in spilled] == want
    assert [v for _, v in spilled] == want  # every pass reads afresh
    assert len(spilled) == len(verdicts) and spilled.gpus == {"h100-sxm"}


def test_the_ledger_puts_measured_rows_in_their_place_once():
    verdicts = [verdict(n, float(n)) for n in range(1, 60)]
    rows = ScreenRows(key, spill_at=8)
    for v in verdicts:
        rows.add(v)

    def row(s: Screened) -> CandidateResult:
        return CandidateResult(s.candidate, "screened", screen_per_s=s.estimate_per_s)

    # two of them simulated: one ranked first, one left where the screen put it
    first = CandidateResult(verdicts[10].candidate, "simulated")
    kept = CandidateResult(verdicts[30].candidate, "simulated")
    book = Ledger([((-1,), first), (key(verdicts[30]), kept)], rows, row,
                  skip=[key(verdicts[10]), key(verdicts[30])])
    out = list(book)
    assert len(book) == len(out) == len(verdicts)
    assert out[0] is first and kept in out and out.count(kept) == 1
    ids = [r.id for r in out]
    assert len(set(ids)) == len(ids)
    assert [r.id for r in out[1:]] == [v.candidate.id for v in sorted(
        (v for v in verdicts if v is not verdicts[10]), key=key)]
    assert book.measured == (first, kept)


def test_a_plan_with_its_ledger_spilled_writes_the_same_bytes(monkeypatch):
    data = scenario(plan={"gpu_budget": 6, "layouts": ["colocated", "disaggregated"]})

    def run():
        result = Planner(parse_scenario(data), SerialExecutor()).run()
        return result, "".join(result.json_chunks()), list(ledger_rows(result))

    held, held_json, held_rows = run()
    assert held.candidates.spilled == 0
    monkeypatch.setattr(ledger, "SPILL_AT", 2)
    spilled, spilled_json, spilled_rows = run()
    assert spilled.candidates.spilled >= 3, len(held_rows)
    assert spilled_json == held_json and spilled_rows == held_rows
    assert len(spilled.candidates) == len(held.candidates) == len(held_rows)
