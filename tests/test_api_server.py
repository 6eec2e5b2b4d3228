"""The API-server stage: its time is in the client's TTFT and E2E, its jitter has its own random
stream, a zero stage changes nothing, its queue spreads a burst over its service times (and so
breaks the lockstep of equal clients), and streaming takes its share of the servers."""

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
ZERO = {"request_s": 0.0, "prompt_s": 0.0, "prompt_token_s": 0.0, "output_s": 0.0}


def _files(data: dict, out: Path) -> dict[str, bytes]:
    spec = parse_scenario(data)
    spec._base_dir = ROOT / "scenarios"
    out.mkdir(parents=True)
    write_run(run_scenario(spec, record_steps=False), out)
    return {f.name: f.read_bytes() for f in sorted(out.iterdir())}


@pytest.mark.slow
@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_a_zero_api_server_changes_no_byte_of_any_shipped_scenario(path, tmp_path):
    data = yaml.safe_load(path.read_text())
    data.pop("api_server", None)
    today = _files(data, tmp_path / "without")
    assert _files({**data, "api_server": {**ZERO, "jitter_cv": 0.3}}, tmp_path / "zero") == today


def test_the_client_sees_the_api_server_time_in_ttft_and_e2e_not_in_the_token_gaps():
    api = {"request_s": 0.005, "prompt_s": 0.0, "prompt_token_s": 1e-4, "output_s": 0.002,
           "jitter_cv": 0.0}
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
    api = {"request_s": 0.01, "prompt_s": 0.0, "prompt_token_s": 0.0, "output_s": 0.0,
           "jitter_cv": 0.5}
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


def test_the_queue_breaks_the_lockstep_of_equal_clients_and_enough_servers_keep_it():
    """The shipped benchmark at 8 clients, whose 8 prompts fill one 2,048-token step: with no
    API server, or one server per client and no jitter, every round is sent at one instant and
    prefilled in one step, for ever; one server takes the round's prompts one after another,
    so they reach the engine apart: the first is prefilled alone, the round's sends spread out
    and no step prefills a whole round again."""
    base = load_scenario(BENCH)
    workload = base.workload.model_copy(update={"max_concurrency": 8})

    def rounds(api):
        spec = base.model_copy(update={"workload": workload, "api_server": api})
        result = run_scenario(spec)
        sends = {r.arrival_s for r in result.requests}
        batches = [len(s.prefill_chunks) for s in result.steps if s.prefill_chunks]
        return len(sends), batches

    for api in (None, base.api_server.model_copy(update={"jitter_cv": 0.0, "count": 8})):
        sends, batches = rounds(api)
        assert sends == 38  # ceil(300 / 8): rounds of 8, then 4
        assert batches == [8] * 37 + [4]
    for api in (base.api_server, base.api_server.model_copy(update={"jitter_cv": 0.0})):
        sends, batches = rounds(api)
        assert sends > 38
        assert 8 not in batches and batches.count(1) >= 38


def test_closed_loop_users_with_equal_lengths_drift_apart_only_through_the_queue():
    """Eight closed-loop users, equal prompts and answers, no think time: every round goes out
    at one instant and is prefilled in one step unless the server queues the prompts."""
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

    measured = {"request_s": 0.004, "prompt_token_s": 5e-5, "output_s": 0.001}
    for api in (None, {**measured, "jitter_cv": 0.0, "count": 8}):
        sends, batches = rounds(api)
        assert sends == 20 and batches == [8] * 20  # 160 requests in 20 rounds of 8
    sends, batches = rounds({**measured, "jitter_cv": 0.0})
    assert sends > 20 and max(batches[1:]) < 8


def _engine_arrivals(api: dict, num: int = 8) -> list[float]:
    """Seconds to the engine of ``num`` requests sent at one instant."""
    from clustersim.cluster.api_server import ApiServer, ApiServerSpec
    from clustersim.engine.request import Request

    server = ApiServer(ApiServerSpec(**api), seed=0)
    return [server.before_engine_s(Request(f"r{i}", 0.0, 32, 2), 0.0) for i in range(num)]


def test_a_burst_reaches_the_engine_one_tokenization_apart_per_server():
    """32 prompt tokens at 0.3 ms each: 9.6 ms a tokenization, after 5 ms of each request's own
    processing (a delay every request takes at once); a per-prompt part queues with them."""
    api = {"request_s": 0.005, "prompt_s": 0.0, "prompt_token_s": 3e-4, "output_s": 0.0,
           "jitter_cv": 0.0}
    assert _engine_arrivals(api) == pytest.approx([0.005 + 0.0096 * k for k in range(1, 9)])
    two = _engine_arrivals({**api, "count": 2})
    assert two == pytest.approx([0.005 + 0.0096 * k for k in (1, 1, 2, 2, 3, 3, 4, 4)])
    assert _engine_arrivals({**api, "count": 8}) == pytest.approx([0.0146] * 8)
    untokenized = _engine_arrivals({**api, "prompt_token_s": 0.0})
    assert untokenized == pytest.approx([0.005] * 8)
    per_prompt = _engine_arrivals({**api, "prompt_s": 0.0014})
    assert per_prompt == pytest.approx([0.005 + 0.011 * k for k in range(1, 9)])


def test_streaming_takes_its_share_of_the_server_before_a_new_request():
    """Ten requests in flight streaming a token each 10 ms at 0.5 ms a token take half of one
    server: a new prompt's 10 ms of tokenization then takes 20 ms; two servers share the
    load."""
    from clustersim.cluster.api_server import ApiServer, ApiServerSpec
    from clustersim.engine.request import Request, RequestStatus

    def served(count: int) -> float:
        server = ApiServer(ApiServerSpec(request_s=0.0, prompt_s=0.0, prompt_token_s=1.25e-3,
                                         output_s=5e-4, jitter_cv=0.0, count=count), seed=0)
        done = Request("done", 0.0, 8, 11)
        done.first_token_s, done.finish_s, done.num_output_tokens = 1.0, 1.1, 11
        done.status = RequestStatus.FINISHED
        server.before_engine_s(done, 0.0)
        server.served()
        server.answered(done)  # one finished request: 10 ms between tokens
        for _ in range(10):
            server.num_in_flight += 1
        return server.before_engine_s(Request("new", 2.0, 8, 4), 2.0)

    assert served(1) == pytest.approx(0.02)
    assert served(2) == pytest.approx(0.01 / 0.75)


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


def test_every_attempt_stops_streaming_lost_ones_included(monkeypatch):
    """A failure that loses requests ends their attempts at the API server too: after a run
    with lost and retried requests, nothing is left streaming through it."""
    from clustersim import sim

    built = []

    class Recorded(sim.Cluster):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            built.append(self)

    monkeypatch.setattr(sim, "Cluster", Recorded)
    data = yaml.safe_load((ROOT / "scenarios" / "pd_decode_failure.yaml").read_text())
    data["api_server"] = {}
    spec = parse_scenario(data)
    spec._base_dir = ROOT / "scenarios"
    result = run_scenario(spec, record_steps=False)
    assert sum(t.num_lost for t in result.faults.tallies.values()) > 0
    assert built[0].api_server.num_in_flight == 0
