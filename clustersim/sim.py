"""Run a scenario: build the instance, feed it the workload, collect the records."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import simpy

from clustersim.catalog import load_gpu, load_model
from clustersim.catalog.specs import GpuSpec, ModelSpec
from clustersim.cost.roofline import BatchShape, CostModel
from clustersim.engine.defaults import EngineSetup, resolve_engine
from clustersim.engine.instance import Instance, StepRecord
from clustersim.engine.kv_manager import KVCacheManager
from clustersim.engine.request import Request
from clustersim.engine.scheduler import Scheduler, StepPlan
from clustersim.errors import ConfigError
from clustersim.scenario import Cost, FixedCost, Scenario
from clustersim.workload import build_workload


@dataclass(frozen=True, slots=True)
class InstanceInfo:
    name: str
    gpu: str
    tensor_parallel_size: int
    num_gpu_blocks: int
    block_size: int
    max_num_batched_tokens: int
    max_num_seqs: int
    max_model_len: int
    busy_s: float


@dataclass(frozen=True, slots=True)
class RunResult:
    """Everything a run produced: per-request state and the per-step engine trace."""

    scenario: Scenario
    requests: list[Request]
    steps: list[StepRecord]
    instances: list[InstanceInfo]
    end_s: float


def make_pricer(model: ModelSpec, gpu: GpuSpec, tp: int, cost: Cost):
    """StepPlan -> seconds, through the roofline cost model (or a fixed time per step)."""
    if isinstance(cost, FixedCost):
        step_time_s = cost.step_time_s
        return lambda plan: step_time_s
    cost_model = CostModel(model, gpu, tp)

    def price(plan: StepPlan) -> float:
        batch = BatchShape(
            num_prefill_tokens=plan.num_prefill_tokens,
            prefill_attn_pairs=plan.prefill_attn_pairs,
            prefill_kv_tokens=plan.prefill_kv_tokens,
            num_decode_tokens=plan.num_decode_tokens,
            decode_kv_tokens=plan.decode_kv_tokens,
            num_sampled=len(plan.sampled),
            num_seqs=len(plan.scheduled),
        )
        return cost_model.step_time(batch).time_s

    return price


def run_scenario(scenario: Scenario) -> RunResult:
    model = load_model(scenario.model)
    gpu = load_gpu(scenario.gpu)
    tp = scenario.tensor_parallel_size
    if model.num_attention_heads % tp:
        raise ConfigError(
            "tensor_parallel_size",
            f"{tp} does not divide the model's {model.num_attention_heads} attention heads",
        )
    setup: EngineSetup = resolve_engine(scenario.engine, model, gpu, tp)
    config = setup.scheduler
    kv = KVCacheManager(
        setup.num_gpu_blocks,
        config.block_size,
        config.max_model_len,
        enable_prefix_caching=config.enable_prefix_caching,
    )
    rng = np.random.default_rng(scenario.seed)
    source = build_workload(scenario.workload, rng)

    env = simpy.Environment()
    pricer = make_pricer(model, gpu, tp, scenario.cost)
    instance = Instance(env, "i0", Scheduler(config, kv), pricer, on_done=source.on_done)
    env.process(source.run(env, instance.submit))
    env.run()
    requests = source.requests

    unfinished = [r for r in requests if not r.is_done]
    if unfinished:
        raise AssertionError(f"{len(unfinished)} requests neither finished nor rejected")
    info = InstanceInfo(
        name=instance.name,
        gpu=gpu.id,
        tensor_parallel_size=tp,
        num_gpu_blocks=setup.num_gpu_blocks,
        block_size=config.block_size,
        max_num_batched_tokens=config.max_num_batched_tokens,
        max_num_seqs=config.max_num_seqs,
        max_model_len=config.max_model_len,
        busy_s=instance.busy_s,
    )
    return RunResult(
        scenario=scenario,
        requests=requests,
        steps=instance.steps,
        instances=[info],
        end_s=float(env.now),
    )
