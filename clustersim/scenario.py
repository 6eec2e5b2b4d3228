"""The scenario file: pydantic models, strict, the only place user input is validated.

Every field is documented once, here. Unknown fields and impossible values are errors that the
CLI prints as ``path: message`` lines with exit code 2.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    ValidationError,
    field_validator,
    model_validator,
)

from clustersim.errors import ClusterSimError, InputError


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


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


# ---------------------------------------------------------------- workload
def _int_as_fixed(value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool):
        return {"kind": "fixed", "value": value}
    return value


class FixedLength(Strict):
    kind: Literal["fixed"]
    value: PositiveInt


class UniformLength(Strict):
    """Integers drawn uniformly from [low, high]."""

    kind: Literal["uniform"]
    low: PositiveInt
    high: PositiveInt

    @model_validator(mode="after")
    def _ordered(self) -> UniformLength:
        if self.low > self.high:
            raise ValueError(f"low ({self.low}) must be <= high ({self.high})")
        return self


LengthDist = Annotated[
    Annotated[FixedLength | UniformLength, Field(discriminator="kind")],
    BeforeValidator(_int_as_fixed),
]
"""A token-length distribution; a plain integer means ``{kind: fixed, value: n}``."""


class ExplicitRequest(Strict):
    id: str
    arrival_s: NonNegativeFloat
    prompt_tokens: PositiveInt
    output_tokens: PositiveInt
    block_hashes: list[int] | None = Field(
        None, description="Prefix-cache keys of the prompt's full blocks, first block first."
    )
    priority: int = Field(0, description="Lower is served first under policy: priority.")

    @field_validator("id", mode="before")
    @classmethod
    def _id_as_text(cls, value: Any) -> Any:
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


class ExplicitWorkload(Strict):
    """Requests listed one by one."""

    kind: Literal["explicit"]
    requests: list[ExplicitRequest] = Field(min_length=1)

    @field_validator("requests")
    @classmethod
    def _unique_ids(cls, requests: list[ExplicitRequest]) -> list[ExplicitRequest]:
        seen: set[str] = set()
        for request in requests:
            if request.id in seen:
                raise ValueError(f"duplicate request id {request.id!r}")
            seen.add(request.id)
        return requests


class LengthClass(Strict):
    """One traffic class of a mixture: its share of requests and its lengths."""

    name: str
    weight: PositiveFloat
    prompt_tokens: LengthDist
    output_tokens: LengthDist


class PoissonWorkload(Strict):
    """Poisson arrivals at ``rate_per_s``; lengths from one distribution or a class mixture."""

    kind: Literal["poisson"]
    rate_per_s: PositiveFloat
    num_requests: PositiveInt
    start_s: NonNegativeFloat = 0.0
    prompt_tokens: LengthDist | None = None
    output_tokens: LengthDist | None = None
    classes: list[LengthClass] | None = Field(None, min_length=1)

    @model_validator(mode="after")
    def _one_length_source(self) -> PoissonWorkload:
        has_lengths = self.prompt_tokens is not None or self.output_tokens is not None
        if self.classes is not None and has_lengths:
            raise ValueError("give either classes or prompt_tokens/output_tokens, not both")
        if self.classes is None and (self.prompt_tokens is None or self.output_tokens is None):
            raise ValueError("prompt_tokens and output_tokens are required without classes")
        return self


Workload = Annotated[ExplicitWorkload | PoissonWorkload, Field(discriminator="kind")]


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
def format_loc(loc: tuple[int | str, ...]) -> str:
    """('engine', 'max_num_seqs') -> 'engine.max_num_seqs'; list indexes as [i]."""
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text or "scenario"


class ScenarioInvalid(ClusterSimError):
    """A scenario that failed validation; ``lines`` holds one ``path: message`` per problem."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__(lines[0].split(": ", 1)[0], lines[0].split(": ", 1)[-1])
        self.lines = lines


def validation_lines(error: ValidationError) -> list[str]:
    lines = []
    for item in error.errors(include_url=False):
        # Drop pydantic's union/validator tags (e.g. 'poisson', 'function-before[...]') from paths.
        loc = tuple(
            p for p in item["loc"] if not (isinstance(p, str) and ("[" in p or p in _TAGS))
        )
        message = item["msg"].removeprefix("Value error, ")
        lines.append(f"{format_loc(loc)}: {message}")
    return lines


_TAGS = {"explicit", "poisson", "fixed", "uniform", "roofline"}


def parse_scenario(data: Any) -> Scenario:
    try:
        return Scenario.model_validate(data)
    except ValidationError as error:
        raise ScenarioInvalid(validation_lines(error)) from None


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
