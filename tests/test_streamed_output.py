"""``simulate`` writes requests.csv and transfers.csv as the run goes and keeps no request
once it is written, nor any transfer: the same bytes as writing the whole run at its end, for
every kind of run (a synthetic workload built on arrival, faults and retries, a benchmark with
warm-ups, a disaggregated layout with KV handoffs, an ITL limit), and Parquet tables with
``--format``."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from clustersim.engine.request import Request
from clustersim.metrics.records import RequestRecords
from clustersim.output import simulate_run, write_run
from clustersim.scenario import load_scenario, parse_scenario
from clustersim.sim import run_scenario
from tests.helpers import run_cli, scenario, write_scenario

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ["quickstart", "pd_decode_failure", "bench_rtx4090_mistral7b", "three_class_mix",
           "long_context_prefix"]


def _synthetic(num_requests: int = 300, **slo: float) -> dict:
    return scenario(
        workload={"kind": "poisson", "rate_per_s": 40.0, "num_requests": num_requests,
                  "prompt_tokens": {"kind": "uniform", "low": 16, "high": 600},
                  "output_tokens": {"kind": "uniform", "low": 1, "high": 80}},
        **({"slo": slo} if slo else {}))


def _bytes(folder: Path) -> dict[str, bytes]:
    return {f.name: f.read_bytes() for f in sorted(folder.iterdir())}


def _both_ways(spec, tmp_path: Path, steps: bool = False) -> tuple[dict, dict]:
    whole, streamed = tmp_path / "whole", tmp_path / "streamed"
    whole.mkdir()
    streamed.mkdir()
    write_run(run_scenario(spec, record_steps=steps, ideal_times=True), whole, steps=steps)
    result, _ = simulate_run(spec, streamed, steps=steps)
    assert result.requests == [] and result.transfers == []  # written as the run went
    return _bytes(whole), _bytes(streamed)


@pytest.mark.parametrize("name", SHIPPED)
def test_streamed_files_are_the_bytes_written_at_the_end(name, tmp_path):
    spec = load_scenario(ROOT / "scenarios" / f"{name}.yaml")
    whole, streamed = _both_ways(spec, tmp_path)
    assert streamed == whole


@pytest.mark.parametrize("steps", [False, True])
def test_a_synthetic_run_built_on_arrival_writes_the_same_bytes(steps, tmp_path):
    whole, streamed = _both_ways(parse_scenario(_synthetic(itl_s=0.02, ttft_s=0.5)),
                                 tmp_path, steps=steps)
    assert streamed == whole


@pytest.mark.parametrize("workload", [
    {"kind": "synthetic", "arrivals": {"kind": "closed_loop", "num_users": 6,
                                       "think_time_s": 0.05},
     "lengths": {"kind": "independent", "prompt_tokens": {"kind": "uniform", "low": 16,
                                                          "high": 400},
                 "output_tokens": {"kind": "uniform", "low": 1, "high": 60}},
     "num_requests": 120},
    {"kind": "benchmark", "num_prompts": 120, "num_warmups": 4, "max_concurrency": 8,
     "ramp_up_s": 0.5, "lengths": {"kind": "independent", "prompt_tokens": 300,
                                   "output_tokens": 40}},
    {"kind": "benchmark", "num_prompts": 120, "request_rate": 30.0, "burstiness": 0.5,
     "max_concurrency": 4, "lengths": {"kind": "independent", "prompt_tokens": 200,
                                       "output_tokens": 30}},
], ids=["closed-loop", "benchmark-warmups-ramp", "benchmark-rate"])
def test_closed_loops_and_benchmarks_build_each_request_when_sent(workload, tmp_path):
    spec = parse_scenario(scenario(workload=workload))
    whole, streamed = _both_ways(spec, tmp_path)
    assert streamed == whole


class _Counting:
    """A sink that keeps no request, and counts the requests alive at each hand-over."""

    def __init__(self) -> None:
        self.records = RequestRecords(0)
        self.most_alive = 0
        self.num_added = 0

    def open(self, num_requests: int) -> None:
        self.records = RequestRecords(num_requests)

    def add(self, index: int, request: Request) -> None:
        self.records.add(index, request)
        self.num_added += 1
        if self.num_added % 100 == 0:
            alive = sum(1 for o in gc.get_objects() if isinstance(o, Request))
            self.most_alive = max(self.most_alive, alive)


def test_a_streamed_run_holds_only_the_requests_in_flight():
    spec = parse_scenario(_synthetic(num_requests=2000))
    sink = _Counting()
    gc.collect()
    result = run_scenario(spec, record_steps=False, sink=sink)
    assert sink.num_added == 2000
    assert sink.most_alive < 200  # at 40 req/s, a few seconds' worth in flight
    kept = run_scenario(spec, record_steps=False)
    from clustersim.metrics.run import summarize_run
    assert summarize_run(result, sink.records) == summarize_run(kept)


def test_a_streamed_replay_builds_each_request_on_arrival():
    """A trace replay with prefix ids (the Mooncake window of long_context_prefix.yaml) keeps
    only the requests in flight, each built with its prefix keys when it arrives; the same
    summary as the run that built them all first."""
    spec = load_scenario(ROOT / "scenarios" / "long_context_prefix.yaml")
    sink = _Counting()
    gc.collect()
    result = run_scenario(spec, record_steps=False, sink=sink)
    kept = run_scenario(spec, record_steps=False)
    assert sink.num_added == len(kept.requests) > 1000
    assert sink.most_alive < len(kept.requests) / 4
    from clustersim.metrics.run import summarize_run
    assert summarize_run(result, sink.records) == summarize_run(kept)


def test_parquet_without_pyarrow_is_one_line_and_exit_2(tmp_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_pyarrow(name, *args, **kwargs):
        if name.split(".")[0] == "pyarrow":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pyarrow)
    path = write_scenario(tmp_path, scenario())
    code, output = run_cli("simulate", str(path), "--out", str(tmp_path / "out"),
                           "--format", "parquet")
    assert code == 2
    assert output.strip().startswith("--format: parquet needs pyarrow")
    assert len(output.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_an_unknown_format_is_refused(tmp_path):
    path = write_scenario(tmp_path, scenario())
    code, output = run_cli("simulate", str(path), "--out", str(tmp_path / "out"),
                           "--format", "xlsx")
    assert code == 2 and output.strip() == "--format: 'xlsx' is not one of csv, parquet"


def test_parquet_tables_hold_the_csv_values(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    import csv

    spec = load_scenario(ROOT / "scenarios" / "pd_decode_failure.yaml")
    csv_out, parquet_out = tmp_path / "csv", tmp_path / "parquet"
    csv_out.mkdir()
    parquet_out.mkdir()
    simulate_run(spec, csv_out, steps=True)
    simulate_run(spec, parquet_out, steps=True, output_format="parquet")
    assert (parquet_out / "summary.json").read_bytes() == (csv_out / "summary.json").read_bytes()
    for name in ("requests", "steps", "transfers"):
        assert not (parquet_out / f"{name}.csv").exists()
        table = pq.read_table(parquet_out / f"{name}.parquet").to_pydict()
        with (csv_out / f"{name}.csv").open() as f:
            rows = list(csv.DictReader(f))
        assert list(table) == list(rows[0])
        for i, row in enumerate(rows):
            for column, text in row.items():
                value = table[column][i]
                if value is None or (column == "handoff_bytes" and value == 0):
                    assert text == ""
                elif isinstance(value, float):
                    assert text == f"{value:.9f}"
                else:
                    assert text == str(value)
