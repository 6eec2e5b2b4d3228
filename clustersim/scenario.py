"""The scenario file: pydantic models, strict, the only place user input is validated.

Every field is documented once, here. Unknown fields and impossible values are errors that the
CLI prints as ``path: message`` lines with exit code 2.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import Field, NonNegativeInt, PositiveFloat, PositiveInt

from clustersim.errors import InputError
from clustersim.validation import Strict, validate
from clustersim.workload.spec import Workload


# ------------------------------------------------------------------ engine
class EngineSettings(Strict):
    """vLLM engine arguments (same names and meaning), plus clustersim's step policies.

    Fields left unset take vLLM's defaults for the GPU (``vllm serve``, spec §5.3).
    """

    max_num_batched_tokens: PositiveInt | None = Field(
        None, description="Token budget of one step (vLLM default depends on the GPU)."
    )
    max_num_seqs: PositiveInt | None = Field(
        None, description="Most requests running at once (vLLM default depends on the GPU)."
    )
    max_model_len: PositiveInt | None = Field(
        None, description="Longest prompt + output; default the model's max_position_embeddings."
    )
    max_num_scheduled_tokens: PositiveInt | None = Field(
        None, description="Tokens the scheduler may issue per step; default max_num_batched_tokens."
    )
    enable_chunked_prefill: bool = Field(True, description="Split prompts across steps.")
    long_prefill_token_threshold: NonNegativeInt = Field(
        0, description="Cap on one request's prompt chunk per step; 0 = off."
    )
    long_prefill_token_threshold_adaptive: bool = Field(
        False, description="Floor the cap at max_num_batched_tokens // eligible requests."
    )
    long_prefill_threshold_single_request: bool = Field(
        False, description="Apply the cap even with one eligible request (vLLM before v0.33)."
    )
    policy: Literal["fcfs", "priority"] = Field("fcfs", description="Waiting-queue order.")
    scheduler_reserve_full_isl: bool = Field(
        True, description="Admit a request only if its whole input fits in free KV (v0.33)."
    )
    watermark: float = Field(
        0.0, ge=0.0, lt=1.0, description="Share of KV blocks kept free when admitting."
    )
    enable_prefix_caching: bool = Field(True, description="Reuse cached prompt blocks.")
    block_size: Literal[1, 8, 16, 32, 64, 128] = Field(16, description="Tokens per KV block.")
    gpu_memory_utilization: float = Field(
        0.92, gt=0.0, le=1.0, description="Share of GPU memory vLLM may use (v0.33: 0.92)."
    )
    num_gpu_blocks_override: int | None = Field(
        None, ge=2, description="Use exactly this many KV blocks (block 0 is reserved)."
    )
    async_scheduling: bool = Field(
        False, description="Schedule step N+1 while step N runs (vLLM v0.33 default on)."
    )
    step_policy: Literal["decode_first", "prefill_first", "balanced"] = Field(
        "decode_first",
        description="decode_first = vLLM; prefill_first: prompt chunks before decodes; "
        "balanced: decode_reserve_tokens decodes, then prompt chunks, then the other decodes.",
    )
    prefill_reserve_fraction: float = Field(
        0.0,
        ge=0.0,
        lt=1.0,
        description="Share of each step's budget decodes may not take before prompt chunks "
        "have had their turn (anti-starvation).",
    )
    decode_reserve_tokens: NonNegativeInt = Field(
        1, description="balanced: decode tokens served before prompt chunks."
    )


# ------------------------------------------------------------------- cost
class RooflineCost(Strict):
    """Step times from the roofline model of the scenario's GPU (the default)."""

    kind: Literal["roofline"] = "roofline"


class FixedCost(Strict):
    """Every step takes the same time: for step-counting exercises and engine-trace checks."""

    kind: Literal["fixed"]
    step_time_s: PositiveFloat


Cost = Annotated[RooflineCost | FixedCost, Field(discriminator="kind")]


# --------------------------------------------------------------- scenario
class SLO(Strict):
    """Per-request latency targets; a request attains only if it meets every one set."""

    ttft_s: PositiveFloat | None = None
    tpot_s: PositiveFloat | None = None
    itl_s: PositiveFloat | None = Field(None, description="Bound on each request's p99 ITL.")


class Scenario(Strict):
    name: str
    description: str | None = None
    seed: int = 0
    model: str = Field(description="Catalog model id or a path to a HuggingFace config.json.")
    gpu: str = Field(description="Catalog GPU id.")
    tensor_parallel_size: PositiveInt = 1
    engine: EngineSettings = EngineSettings()
    workload: Workload
    cost: Cost = RooflineCost()
    slo: SLO | None = None


# ------------------------------------------------------------------ loading
def parse_scenario(data: Any) -> Scenario:
    return validate(Scenario, data)


def load_scenario(path: str | Path) -> Scenario:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as error:
        raise InputError(str(path), f"cannot read scenario: {error.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        problem = getattr(error, "problem", None) or str(error)
        raise InputError(where, f"invalid YAML: {problem}") from None
    if not isinstance(data, dict):
        raise InputError(str(path), "a scenario must be a YAML mapping")
    return parse_scenario(data)
