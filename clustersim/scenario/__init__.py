"""The scenario file: pydantic models, strict, the only place user input is validated.

Every field is documented once, on the field (sections live beside their subsystem:
``engine.settings``, ``workload.spec``, ``cluster.spec``). Unknown fields and impossible values
are errors that the CLI prints as ``path: message`` lines with exit code 2.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, PositiveFloat, PrivateAttr, model_validator

from clustersim.engine.settings import EngineSettings
from clustersim.errors import ConfigError, InputError
from clustersim.inputs import load_yaml
from clustersim.limits import (
    GPUS_REASON,
    MAX_NUM_GPUS,
    MAX_SEED,
    MAX_STEP_TIME_S,
    MIN_STEP_TIME_S,
    DataParallelSize,
    PipelineParallelSize,
    PositiveSeconds,
    TensorParallelSize,
    Within,
)
from clustersim.scenario.api_server import ApiServerSpec
from clustersim.scenario.faults import FaultsSpec
from clustersim.scenario.layout import LayoutSpec, TopologyRef
from clustersim.scenario.plan import PlanSpec
from clustersim.scenario.plausible import MAX_TOKEN_GAP_S, MAX_TTFT_S, implausible_limits
from clustersim.validation import Strict, ValidationFailed, kind_union, validate
from clustersim.workload.kinds import Workload


# ------------------------------------------------------------------- cost
class RooflineCost(Strict):
    """Step times from the roofline model of the scenario's GPU (the default)."""

    kind: Literal["roofline"] = "roofline"


class FixedCost(Strict):
    """Every step takes the same time: for step-counting exercises and engine-trace checks."""

    kind: Literal["fixed"]
    step_time_s: Annotated[PositiveFloat, Within(
        low=MIN_STEP_TIME_S, high=MAX_STEP_TIME_S, unit="s",
        reason="a GPU runs one engine step in microseconds to seconds")] = Field(
        description="Seconds every engine step takes, whatever it runs.")


Cost = kind_union(RooflineCost, FixedCost)


# ------------------------------------------------------------------- name
MAX_NAME_CHARS = 100
"""Longest scenario name: it names folders (``reports/<name>-<time>``), and a file name may
have 255 bytes."""
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_.-]+")


def _plain_name(name: str) -> str:
    """The name as one plain file name: it is the output folders' name (``runs/<name>``,
    ``runs/plan/<name>``, ``reports/<name>-<time>``), so that a ``/``, a ``..``, an absolute
    path or a control character must not reach a path."""
    if len(name) > MAX_NAME_CHARS:
        raise ValueError(f"{len(name):,} characters, more than {MAX_NAME_CHARS}: it names the "
                         "output folders")
    if not _PLAIN_NAME.fullmatch(name) or name in (".", ".."):
        shown = repr(name) if len(name) <= 40 else repr(name[:37]) + "..."
        raise ValueError("must be a plain file name (letters, digits, '.', '_', '-'; no '/' "
                         f"or '..'): it names the output folders; got {shown}")
    return name


ScenarioName = Annotated[str, AfterValidator(_plain_name), Field(json_schema_extra={
    "pattern": f"^{_PLAIN_NAME.pattern}$", "maxLength": MAX_NAME_CHARS})]


# --------------------------------------------------------------- scenario
class SLO(Strict):
    """Per-request latency limits and the share of requests that must meet them.

    A request is good when it meets every limit set at once; attainment is the share of all
    arrived requests that are good (rejected ones are not). ``clustersim.metrics.goodput``
    also reads the same requests marginally and by means; ``criterion`` picks the verdict.
    """

    ttft_s: PositiveSeconds | None = Field(
        None, description="Time to first token limit, seconds (over 10 minutes: see "
        "long_limits).")
    tpot_s: PositiveSeconds | None = Field(
        None, description="Time per output token limit, seconds: (E2E - TTFT) / (output "
        "tokens - 1) (over 5 s: see long_limits)."
    )
    itl_s: PositiveSeconds | None = Field(
        None, description="Bound on each request's p99 ITL, seconds (over 5 s: see "
        "long_limits).")
    attainment_target: float = Field(
        0.9, gt=0.0, le=1.0, description="Share of requests that must meet the limits."
    )
    criterion: Literal["joint", "marginal", "mean"] = Field(
        "joint",
        description="joint: share meeting every limit at once >= target (DistServe, vLLM "
        "--goodput); marginal: share within each limit alone >= target (p90 per metric at "
        "0.9, as DistServe's search; MLPerf's p99 at 0.99); mean: each mean within its limit "
        "(aiconfigurator).",
    )
    long_limits: bool = Field(
        False, description=f"The limits are meant as long as they are: without it, a ttft_s "
        f"over {MAX_TTFT_S / 60:g} minutes, a tpot_s or itl_s over {MAX_TOKEN_GAP_S:g} s, or "
        "a plan.handoff_budget_s longer than ttft_s is refused as milliseconds typed where "
        "seconds go (vLLM's --goodput takes milliseconds).",
    )

    @model_validator(mode="after")
    def _some_limit(self) -> SLO:
        if self.ttft_s is None and self.tpot_s is None and self.itl_s is None:
            raise ValueError("set at least one of ttft_s, tpot_s, itl_s")
        return self


class Scenario(Strict):
    name: ScenarioName = Field(
        description="Names the output folders (runs/<name>, runs/plan/<name>, "
        "reports/<name>-<time>): letters, digits, '.', '_' and '-', at most 100."
    )
    description: str | None = Field(None, description="Free text, shown in reports.")
    seed: Annotated[int, Within(
        low=0, high=MAX_SEED, reason="numpy's generators take non-negative seeds, and "
        "clustersim keeps them within int64")] = Field(
        0, description="Seeds every random draw of the run (arrivals, lengths, routers, "
        "faults): the same scenario and seed give the same bytes.")
    model: str = Field(description="Catalog model id or a path to a HuggingFace config.json.")
    gpu: str = Field(description="Catalog GPU id.")
    tensor_parallel_size: TensorParallelSize = Field(
        1, description="vLLM --tensor-parallel-size: GPUs per engine, within one server.")
    pipeline_parallel_size: PipelineParallelSize = Field(
        1, description="vLLM --pipeline-parallel-size: stages per engine, each a "
        "tensor-parallel group holding a share of the layers (on consecutive GPUs, across "
        "servers when they do not fit one); up to this many batches in flight.")
    data_parallel_size: DataParallelSize = Field(
        1,
        description="vLLM --data-parallel-size: engine ranks per instance behind its internal "
        "load balancer; a MoE model's ranks step together and share the experts.",
    )
    enable_expert_parallel: bool = Field(
        False, description="vLLM --enable-expert-parallel (MoE models): whole experts per GPU."
    )
    engine: EngineSettings = Field(
        EngineSettings(), description="vLLM's engine arguments for every instance (a pool's "
        "engine overrides them).")
    workload: Workload = Field(description="The requests: listed, generated (also as a pool "
                               "of prompts or as sessions), replayed from a trace, or sent by a "
                               "benchmark client.")
    cost: Cost = Field(RooflineCost(), description="What prices an engine step.")
    slo: SLO | None = Field(None, description="Latency limits for attainment and goodput; "
                            "required by `clustersim plan`.")
    topology: TopologyRef | None = Field(
        None,
        description="Shipped topology name or a YAML path (relative to the scenario file), or "
        "{node: NAME, count: N}, N copies of a one-node topology on one leaf switch: where "
        "instances are placed, which links TP all-reduces and KV handoffs use.",
    )
    layout: LayoutSpec | None = Field(
        None, description="Pools of instances and their routers; default one colocated instance."
    )
    faults: FaultsSpec | None = Field(
        None,
        description="Instances, nodes or links that fail during the run, KV transfers that "
        "fail at random, and whether clients retry what a failure lost.",
    )
    api_server: ApiServerSpec | None = Field(
        None, description="vLLM's API server in front of each engine: its time before the "
        "engine sees a request and before the client sees each token (default: none).",
    )
    plan: PlanSpec | None = Field(
        None, description="What `clustersim plan` optimises and over which deployments "
        "(ignored by simulate and compare)."
    )
    _base_dir: Path | None = PrivateAttr(None)

    @model_validator(mode="after")
    def _gpus_within_limit(self) -> Scenario:
        pools = self.layout.pools if self.layout is not None else []
        per_pool = [(f"layout.pools[{i}].instances", pool.instances
                     * (pool.tensor_parallel_size or self.tensor_parallel_size)
                     * (pool.pipeline_parallel_size or self.pipeline_parallel_size)
                     * (pool.data_parallel_size or self.data_parallel_size))
                    for i, pool in enumerate(pools)]
        if not per_pool:
            per_pool = [("data_parallel_size", self.tensor_parallel_size
                         * self.pipeline_parallel_size * self.data_parallel_size)]
        total = sum(n for _, n in per_pool)
        if total > MAX_NUM_GPUS:
            where = max(per_pool, key=lambda item: item[1])[0]
            raise ConfigError(where, f"{total:,} GPUs in all (instances x data-parallel ranks "
                              f"x tensor-parallel GPUs), more than {MAX_NUM_GPUS:,}: "
                              f"{GPUS_REASON}")
        return self

    @model_validator(mode="after")
    def _limits_meant(self) -> Scenario:
        slo, plan = self.slo, self.plan
        if slo is None or slo.long_limits:
            return self
        handoff = (plan.handoff_budget_s if plan is not None
                   and "handoff_budget_s" in plan.model_fields_set else None)
        lines = implausible_limits(slo.ttft_s, slo.tpot_s, slo.itl_s, handoff)
        if lines:
            raise ValidationFailed(lines)
        return self

    @property
    def base_dir(self) -> Path | None:
        """The scenario file's folder: relative paths inside the scenario start there."""
        return self._base_dir


# ------------------------------------------------------------------ loading
def parse_scenario(data: Any) -> Scenario:
    return validate(Scenario, data)


def load_scenario(path: str | Path) -> Scenario:
    path = Path(path)
    data = load_yaml(path, "scenario")
    if not isinstance(data, dict):
        raise InputError(str(path), "a scenario must be a YAML mapping of fields")
    scenario = parse_scenario(data)
    scenario._base_dir = path.resolve().parent
    return scenario
