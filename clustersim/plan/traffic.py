"""The scenario's traffic as the planner reads it: a sample for the screen, whether seeds
change it, and its shape at another rate for a probe."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from clustersim.scenario import Scenario
from clustersim.scenario.plan import SearchSettings
from clustersim.workload import build_requests
from clustersim.workload.scale import scale_rate
from clustersim.workload.spec import (
    BenchmarkWorkload,
    GammaArrivals,
    PoissonWorkload,
    SyntheticWorkload,
)
from clustersim.workload.spec_reuse import PromptPoolWorkload, SessionsWorkload


def sample(scenario: Scenario) -> tuple[np.ndarray, np.ndarray, float]:
    """The scenario's own requests, as the screen reads them: prompt and output tokens, and
    the burstiness of their arrivals."""
    requests = build_requests(scenario.workload, np.random.default_rng(scenario.seed),
                              block_size=scenario.engine.block_size,
                              base_dir=scenario.base_dir)
    prompts = np.array([r.num_prompt_tokens for r in requests])
    outputs = np.array([r.max_tokens for r in requests])
    return prompts, outputs, arrival_cv(scenario, requests)


def is_random(scenario: Scenario) -> bool:
    """Whether seeds change the traffic: a trace replay or a list of requests arrives the same
    way every time (and routers that draw nothing stay as they are), so one seed says all there
    is."""
    if isinstance(scenario.workload, PoissonWorkload | SyntheticWorkload | BenchmarkWorkload
                  | PromptPoolWorkload | SessionsWorkload):
        return True
    layout = scenario.layout
    routers = ((layout.router, layout.prefill_router, layout.decode_router)
               if layout is not None else ())
    return any(r.kind == "power_of_two" for r in routers)


def at_rate(scenario: Scenario, base_rate: float, rate_per_s: float,
            settings: SearchSettings) -> Any:
    """The scenario's traffic at ``rate_per_s``, a count-bounded one lengthened to the
    search's minimum requests and duration (the shape of the traffic is kept)."""
    workload = scale_rate(scenario.workload, rate_per_s / base_rate)
    # scale_rate refuses closed loops and benchmarks that are not open-loop
    if isinstance(workload, BenchmarkWorkload):
        field = "num_prompts"
    elif isinstance(workload, PoissonWorkload) or (
            isinstance(workload, SyntheticWorkload | PromptPoolWorkload)
            and workload.num_requests is not None
            and workload.duration_s is None):
        field = "num_requests"
    else:
        return workload
    wanted = max(getattr(workload, field), settings.min_requests,
                 math.ceil(rate_per_s * settings.min_duration_s))
    return workload.model_copy(update={field: wanted})


def arrival_cv(scenario: Scenario, requests: list[Any]) -> float:
    """The coefficient of variation of the gaps between arrivals: 1 for Poisson, the
    gamma's own, else measured on the requests."""
    workload = scenario.workload
    if isinstance(workload, PoissonWorkload):
        return 1.0
    if isinstance(workload, SyntheticWorkload | PromptPoolWorkload):
        arrivals = workload.arrivals
        if isinstance(arrivals, GammaArrivals):
            return arrivals.cv
        if arrivals.kind == "poisson":
            return 1.0
        if arrivals.kind == "constant":
            return 0.0
    gaps = np.diff(np.sort([r.arrival_s for r in requests]))
    if gaps.size < 2 or gaps.mean() <= 0:
        return 1.0
    return float(gaps.std() / gaps.mean())
