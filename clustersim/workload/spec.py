"""The ``workload:`` section of a scenario: which requests arrive, when, and how long they are.

Each kind is a strict pydantic model chosen by its ``kind:`` field; every request stream is
reproducible from the scenario's seed.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    Field,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
    field_validator,
    model_validator,
)

from clustersim.validation import Strict


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
