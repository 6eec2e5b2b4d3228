"""Each engine knob is declared once: the ``engine:`` settings carry every scheduler knob by
its name, with the same default and the same type, to the scheduler's config."""

from __future__ import annotations

from dataclasses import MISSING, fields

from clustersim.catalog import load_gpu, load_model
from clustersim.engine.config import QueuePolicy, SchedulerConfig, StepPolicy
from clustersim.engine.defaults import (
    ENGINE_ONLY_FIELDS,
    RESOLVED_FIELDS,
    SETTINGS_FIELDS,
    resolve_engine,
)
from clustersim.engine.settings import EngineSettings

CHANGED = {
    "block_size": 32,
    "max_num_scheduled_tokens": 4096,
    "enable_chunked_prefill": False,
    "long_prefill_token_threshold": 512,
    "long_prefill_token_threshold_adaptive": True,
    "long_prefill_threshold_single_request": True,
    "policy": "priority",
    "scheduler_reserve_full_isl": False,
    "watermark": 0.01,
    "enable_prefix_caching": False,
    "async_scheduling": True,
    "step_policy": "balanced",
    "prefill_reserve_fraction": 0.25,
    "decode_reserve_tokens": 3,
}
"""A value other than the default for every knob the settings carry as they are."""


def test_every_scheduler_knob_is_a_setting_of_the_same_name():
    scheduler = {f.name for f in fields(SchedulerConfig)}
    settings = set(EngineSettings.model_fields)
    assert scheduler - set(ENGINE_ONLY_FIELDS) <= settings
    assert set(RESOLVED_FIELDS) <= settings
    assert set(SETTINGS_FIELDS) == scheduler - set(RESOLVED_FIELDS) - set(ENGINE_ONLY_FIELDS)


VERSION_DEFAULTS = {"async_scheduling"}
"""Knobs whose setting left unset takes vLLM's default for ``engine.vllm_version``."""


def test_carried_knobs_share_their_default_and_type():
    defaults = EngineSettings()
    for f in fields(SchedulerConfig):
        if f.name not in SETTINGS_FIELDS:
            continue
        assert f.default is not MISSING, f.name
        if f.name in VERSION_DEFAULTS:
            assert getattr(defaults, f.name) is None, f.name
            continue
        assert getattr(defaults, f.name) == f.default, f.name
    model, gpu = load_model("llama-3.1-8b"), load_gpu("h100-sxm")
    for version, on in (("0.13", False), ("0.14", True), ("0.33", True)):
        settings = EngineSettings(max_model_len=4096, vllm_version=version)
        assert resolve_engine(settings, model, gpu, 1).scheduler.async_scheduling is on, version
    for name, literal in (("policy", QueuePolicy), ("step_policy", StepPolicy)):
        assert EngineSettings.model_fields[name].annotation is literal, name

def test_every_carried_knob_reaches_the_scheduler():
    assert set(CHANGED) == set(SETTINGS_FIELDS), "give the new knob a changed value here"
    settings = EngineSettings(max_model_len=4096, **CHANGED)
    setup = resolve_engine(settings, load_model("llama-3.1-8b"), load_gpu("h100-sxm"), 1)
    for name, value in CHANGED.items():
        assert getattr(setup.scheduler, name) == value, name
    assert setup.scheduler.max_model_len == 4096
