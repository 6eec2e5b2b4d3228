"""The API-server stage: its time is in the client's TTFT and E2E, its jitter has its own random
stream, a zero stage changes nothing, and its jitter breaks the lockstep of equal clients."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from clustersim.output import write_run
from clustersim.scenario import load_scenario, parse_scenario
from clustersim.sim import run_scenario
from tests.helpers import explicit, run_cli, scenario, write_scenario

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted((ROOT / "scenarios").glob("*.yaml"))
BENCH = ROOT / "scenarios" / "bench_rtx4090_mistral7b.yaml"
FIXED = {"kind": "fixed", "step_time_s": 0.01}
ZERO = {"request_s": 0.0, "prompt_token_s": 0.0, "output_s": 0.0}


def _files(data: dict, out: Path) -> dict[str, bytes]:
    spec = parse_scenario(data)
    spec._base_dir = ROOT / "scenarios"
    out.mkdir(parents=True)
    write_run(run_scenario(spec, record_steps=False), out)
    return {f.name: f.read_bytes() for f in sorted(out.iterdir())}


@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_a_zero_api_server_changes_no_byte_of_any_shipped_scenario(path, tmp_path):
    data = yaml.safe_load(path.read_text())
    data.pop("api_server", None)
    today = _files(data, tmp_path / "without")
    assert _files({**data, "api_server": {**ZERO, "jitter_cv": 0.3}}, tmp_path / "zero") == today


def test_the_client_sees_the_api_server_time_in_ttft_and_e2e_not_in_the_token_gaps():
    api = {"request_s": 0.005, "prompt_token_s": 1e-4, "output_s": 0.002, "jitter_cv": 0.0}
    base = scenario(cost=FIXED, workload=explicit(("a", 0.0, 100, 5)))
    plain = run_scenario(parse_scenario(base)).requests[0]
    served = run_scenario(parse_scenario({**base, "api_server": api})).requests[0]
    before, after = 0.005 + 100 * 1e-4, 0.002
    assert plain.first_token_s - plain.arrival_s == pytest.approx(0.01)
    assert served.first_token_s - served.arrival_s == pytest.approx(before + 0.01 + after)
    assert served.finish_s - served.arrival_s == pytest.approx(before + 0.05 + after)
    assert list(np.diff(served.token_times_s)) == pytest.approx(list(np.diff(plain.token_times_s)))


def _gaps_scenario(api: dict, seed: int = 0) -> dict:
    """Requests a second apart on an idle engine: each waits only for its API server."""
    requests = [(f"r{i}", float(i), 10 + i % 7, 2) for i in range(300)]
    return scenario(seed=seed, cost=FIXED, workload=explicit(*requests), api_server=api)


def _before_engine_s(data: dict) -> np.ndarray:
    result = run_scenario(parse_scenario(data))
    starts = {}
    for step in result.steps:
        for rid, _ in step.prefill_chunks:
            starts.setdefault(rid, step.start_s)
    return np.array([starts[r.request_id] - r.arrival_s for r in result.requests])


def test_jitter_has_the_coefficient_of_variation_asked_for():
    api = {"request_s": 0.01, "prompt_token_s": 0.0, "output_s": 0.0, "jitter_cv": 0.5}
    delays = _before_engine_s(_gaps_scenario(api))
    assert delays.mean() == pytest.approx(0.01, rel=0.1)
    assert delays.std() / delays.mean() == pytest.approx(0.5, rel=0.15)
    exact = _before_engine_s(_gaps_scenario({**api, "jitter_cv": 0.0}))
    assert exact == pytest.approx(np.full(300, 0.01))


def test_jitter_draws_from_its_own_stream():
    """The traffic of a seed is the same with or without the API server, and with its jitter
    on or off; the jitter itself follows the seed."""
    def traffic(api):
        data = yaml.safe_load((ROOT / "scenarios" / "quickstart.yaml").read_text())
        if api is not None:
            data["api_server"] = api
        return [(r.arrival_s, r.num_prompt_tokens, r.max_tokens)
                for r in run_scenario(parse_scenario(data), record_steps=False).requests]

    assert traffic(None) == traffic({}) == traffic({"jitter_cv": 0.0})
    api = {"request_s": 0.01, "jitter_cv": 0.3}
    seed_a = _before_engine_s(_gaps_scenario(api))
    assert np.array_equal(seed_a, _before_engine_s(_gaps_scenario(api)))
    assert not np.array_equal(seed_a, _before_engine_s(_gaps_scenario(api, seed=1)))


def test_jitter_breaks_the_lockstep_of_equal_clients_and_none_keeps_it():
    """The shipped benchmark at 8 clients, whose 8 prompts fill one 2,048-token step: without
    jitter every round is sent at one instant and prefilled in one step, for ever; with the
    measured jitter the clients drift apart."""
    base = load_scenario(BENCH)
    workload = base.workload.model_copy(update={"max_concurrency": 8})

    def rounds(api):
        spec = base.model_copy(update={"workload": workload, "api_server": api})
        result = run_scenario(spec)
        sends = {r.arrival_s for r in result.requests}
        batches = [len(s.prefill_chunks) for s in result.steps if s.prefill_chunks]
        return len(sends), batches

    for api in (None, base.api_server.model_copy(update={"jitter_cv": 0.0})):
        sends, batches = rounds(api)
        assert sends == 38  # ceil(300 / 8): rounds of 8, then 4
        assert batches == [8] * 37 + [4]
    sends, batches = rounds(base.api_server)
    assert sends > 250
    assert sum(b == 8 for b in batches) < len(batches) / 2


def test_closed_loop_users_with_equal_lengths_drift_apart_only_with_jitter():
    """Eight closed-loop users, equal prompts and answers, no think time: every round goes out
    at one instant and is prefilled in one step unless the API server's times vary."""
    def rounds(api: dict | None) -> tuple[int, list[int]]:
        data = scenario(cost=FIXED, workload={
            "kind": "synthetic", "num_requests": 160,
            "arrivals": {"kind": "closed_loop", "num_users": 8},
            "lengths": {"kind": "independent", "prompt_tokens": 64, "output_tokens": 6}})
        if api is not None:
            data["api_server"] = api
        result = run_scenario(parse_scenario(data))
        batches = [len(s.prefill_chunks) for s in result.steps if s.prefill_chunks]
        return len({r.arrival_s for r in result.requests}), batches

    measured = {"request_s": 0.004, "output_s": 0.001}
    for api in (None, {**measured, "jitter_cv": 0.0}):
        sends, batches = rounds(api)
        assert sends == 20 and batches == [8] * 20  # 160 requests in 20 rounds of 8
    sends, batches = rounds({**measured, "jitter_cv": 0.1})
    assert sends == 160 - 7  # after the first round (all at 0), every send at its own time
    assert max(batches) < 8


@pytest.mark.parametrize(("field", "value", "says"), [
    ("request_s", -0.1, "greater than or equal to 0"),
    ("jitter_cv", 11, "11 is more than 10: "),
    ("prompt_token_s", "fast", "valid number"),
    ("output_s", 61, "61 s is more than 60 s: "),
    ("startup_s", 1.0, "unknown field"),
])
def test_bad_api_server_values_are_one_line_each_and_exit_2(tmp_path, field, value, says):
    data = scenario(api_server={field: value})
    path = write_scenario(tmp_path, data)
    code, output = run_cli("simulate", str(path), "--out", str(tmp_path / "out"))
    assert code == 2
    (line,) = output.strip().splitlines()
    assert line.startswith(f"{path}: api_server.{field}: ") and says in line
