"""Async scheduling hides the host's per-step and per-request time behind the GPU's work: the
CPU prepares step N+1 while the GPU runs step N (vLLM's --async-scheduling)."""

from __future__ import annotations

import pytest

from clustersim.catalog import load_gpu, load_model
from clustersim.cost.roofline import BatchShape, CostModel
from clustersim.metrics import summarize_run
from clustersim.scenario import parse_scenario
from clustersim.sim import run_scenario


def _model(hidden: bool) -> tuple[CostModel, object]:
    gpu = load_gpu("h100-sxm")
    model = CostModel(load_model("llama-3.1-8b"), gpu, 1)
    model.prices.host_hidden = hidden
    return model, gpu


def test_a_step_longer_than_the_host_time_keeps_only_the_per_layer_part():
    (sync, gpu), (hidden, _) = _model(False), _model(True)
    batch = BatchShape.from_chunks([(1, 2000, True)] * 64)
    plain, overlapped = sync.step_time(batch), hidden.step_time(batch)
    layers = load_model("llama-3.1-8b").num_layers * gpu.per_layer_overhead_s
    host = gpu.per_step_overhead_s + 64 * gpu.per_request_overhead_s
    assert plain.overhead_s == pytest.approx(layers + host)
    assert overlapped.overhead_s == pytest.approx(layers)
    assert overlapped.time_s == pytest.approx(plain.time_s - host)
    assert (overlapped.compute_s, overlapped.memory_s) == (plain.compute_s, plain.memory_s)


def test_host_time_longer_than_the_gpu_work_shows_its_excess():
    _, gpu = _model(False)
    hidden, _ = _model(True)
    hidden.prices.step_host_s = 1.0  # a host far slower than any step's GPU work
    step = hidden.step_time(BatchShape.from_chunks([(1, 100, True)]))
    assert step.time_s == pytest.approx(1.0 + 1 * gpu.per_request_overhead_s)


def _tpot(async_scheduling: bool) -> float:
    data = {"name": "async-host", "seed": 0, "model": "llama-3.1-8b", "gpu": "h100-sxm",
            "engine": {"async_scheduling": async_scheduling, "max_model_len": 4096},
            "workload": {"kind": "poisson", "rate_per_s": 4.0, "num_requests": 60,
                         "prompt_tokens": 512, "output_tokens": 128}}
    return summarize_run(run_scenario(parse_scenario(data), record_steps=False)).tpot_s.mean


def test_an_async_engine_decodes_faster_by_its_hidden_host_time():
    sync, overlapped = _tpot(False), _tpot(True)
    assert overlapped < sync
    assert overlapped > 0.8 * sync


def _async(engine: dict, model: str = "llama-3.1-8b", **parallel) -> bool:
    from clustersim.engine.defaults import resolve_engine
    from clustersim.engine.settings import EngineSettings

    settings = EngineSettings(max_model_len=4096, **engine)
    return resolve_engine(settings, load_model(model), load_gpu("h100-sxm"),
                          parallel.get("tp", 1), parallel.get("dp", 1),
                          parallel.get("pp", 1)).scheduler.async_scheduling


def test_async_scheduling_is_on_by_default_from_vllm_0_14():
    assert not _async({"vllm_version": "0.13"})
    assert _async({"vllm_version": "0.14"})
    assert _async({})  # the default release, 0.33
    assert not _async({"vllm_version": "0.33", "async_scheduling": False})


def test_async_scheduling_by_default_stays_off_where_it_is_not_modelled():
    # pipeline parallelism, speculative decoding and data-parallel MoE ranks run synchronously
    assert not _async({}, "llama-3.1-70b", tp=4, pp=2)
    spec = {"method": "ngram", "num_speculative_tokens": 2, "acceptance_rate": 0.5}
    assert not _async({"speculative": spec})
    assert not _async({}, "qwen3-30b-a3b", dp=2)
    assert _async({}, "qwen3-30b-a3b")
