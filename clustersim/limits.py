"""The largest sizes clustersim accepts, each with the reason it is the limit.

Every count, length and duration a user gives is checked against these before anything is
allocated for it, so that an impossible input is a ``path: message`` error rather than minutes
of work and a ``MemoryError``. The limits are set by what hardware and vLLM allow, or by what
one simulation can hold, not by what the shipped scenarios happen to use.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import (
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
)
from pydantic_core import core_schema

MAX_TOKENS = 100_000_000
"""Most tokens in one prompt, one output or one context: ten times the longest context any
model offers (Llama 4 Scout's 10M positions). Token sums and attention pairs (tokens^2) of
requests this long stay exact in int64 and float64."""

MAX_NUM_REQUESTS = 10_000_000
"""Most requests in one run: a run holds every request in memory (about 1 KB each with its
records), so 10M requests is about 10 GB."""

MAX_TIME_S = 1e8
"""Latest time in seconds (arrivals, durations, windows, delays): about 3 years. Simulated
times are float64 seconds, which keep 15 ns resolution up to here; further out a
microsecond-long engine step would start to round away."""

MIN_STEP_TIME_S = 1e-6
"""Shortest fixed step time: no GPU runs an engine step in under a microsecond, and shorter
steps would round away next to arrival times of hours."""

MAX_STEP_TIME_S = 3600.0
"""Longest fixed step time: an hour; vLLM's slowest steps take seconds."""

MIN_RATE_PER_S = 1e-8
"""Lowest positive arrival rate: one request in MAX_TIME_S."""

MAX_RATE_PER_S = 1e7
"""Highest arrival rate: ten million requests per second, the most requests one run holds
arriving in one second."""

MAX_GPUS_PER_NODE = 72
"""Most GPUs in one server of a topology: the largest NVLink domain sold (GB200 NVL72)."""

MAX_NUM_GPUS = 16_384
"""Most GPUs a scenario may place (instances x data-parallel ranks x tensor-parallel GPUs, over
every pool): as many as the largest clusters in use (Llama 3 was trained on 16K H100s). Each
instance gets its own engine state, placed before the run starts."""

MAX_NUM_NODES = 1024
"""Most servers a topology may have (its graph and paths are built before the run)."""

MAX_MODEL_WIDTH = 1 << 20
"""Widest model dimension (hidden size, MLP or expert width, head size, head count): 20 times
the widest model published (Llama 3.1 405B: MLP width 53,248)."""

MAX_NUM_LAYERS = 1024
"""Most decoder layers: eight times the deepest model published (Llama 3.1 405B: 126)."""

MAX_VOCAB_SIZE = 1 << 24
"""Largest vocabulary: 64 times the largest in use (Gemma's 256K tokens)."""

MAX_NUM_EXPERTS = 1 << 16
"""Most routed experts per layer: 256 times DeepSeek-V3's 256."""

MAX_OVERHEAD_S = 60.0
"""Longest fixed cost one step, layer, request or collective may add in a GPU profile: a
minute; measured ones are microseconds to milliseconds."""

MAX_CHOICES = 64
"""Most values in one list of a plan's choices: every list multiplies the candidates."""

MAX_SEED = 2**63 - 1
"""numpy's generators take any non-negative integer as a seed; clustersim keeps seeds within
int64, as they are written to JSON and CSV files and offset per plan draw."""

MAX_COUNT = 2**31 - 1
"""Cap of counts that no other limit covers (priorities, engine knobs measured in tokens or
requests): int32, what vLLM's own arguments take."""


# ---------------------------------------------------------------- in models
class Within:
    """``Annotated`` metadata that bounds a number and says why when it is out of bounds:
    ``Annotated[PositiveInt, Within(high=MAX_TOKENS, reason=...)]``. The bounds also appear in
    the model's JSON schema as ``minimum`` and ``maximum``."""

    __slots__ = ("high", "low", "reason", "unit")

    def __init__(self, *, high: float | None = None, low: float | None = None, reason: str,
                 unit: str = "") -> None:
        self.high, self.low, self.reason, self.unit = high, low, reason, unit

    def _show(self, value: float) -> str:
        if isinstance(value, int) or (float(value).is_integer() and abs(value) < 1e15):
            text = f"{int(value):,}"
        else:
            text = f"{value:g}"
        return f"{text} {self.unit}" if self.unit else text

    def check(self, value: Any) -> Any:
        if self.high is not None and value > self.high:
            raise ValueError(f"{self._show(value)} is more than {self._show(self.high)}: "
                             f"{self.reason}")
        if self.low is not None and value < self.low:
            raise ValueError(f"{self._show(value)} is less than {self._show(self.low)}: "
                             f"{self.reason}")
        return value

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> Any:
        return core_schema.no_info_after_validator_function(self.check, handler(source))

    def __get_pydantic_json_schema__(self, schema: Any, handler: GetJsonSchemaHandler) -> Any:
        result = handler(schema)
        if self.high is not None:
            result["maximum"] = self.high
        if self.low is not None:
            result["minimum"] = self.low
        return result


TOKENS_REASON = "ten times the longest context of any model (Llama 4 Scout: 10M)"
TIME_REASON = "about 3 years, past which float64 seconds round microsecond steps away"

Tokens = Annotated[PositiveInt, Within(high=MAX_TOKENS, reason=TOKENS_REASON)]
"""A positive token count."""
NonNegativeTokens = Annotated[NonNegativeInt, Within(high=MAX_TOKENS, reason=TOKENS_REASON)]
Seconds = Annotated[NonNegativeFloat, Within(high=MAX_TIME_S, reason=TIME_REASON, unit="s")]
"""A time or duration in seconds, 0 allowed."""
PositiveSeconds = Annotated[PositiveFloat, Within(high=MAX_TIME_S, reason=TIME_REASON, unit="s")]
RATE_REASON = ("from one request in the longest run (3 years) to the most requests one run "
               "holds in one second")
Rate = Annotated[PositiveFloat, Within(
    low=MIN_RATE_PER_S, high=MAX_RATE_PER_S, unit="/s", reason=RATE_REASON)]
"""A positive rate, requests per second."""
NonNegativeRate = Annotated[NonNegativeFloat, Within(
    high=MAX_RATE_PER_S, unit="/s",
    reason="ten million requests per second is the most requests one run holds, in one second")]
REQUESTS_REASON = "a run holds every request in memory (about 1 KB each)"
NumRequests = Annotated[PositiveInt, Within(high=MAX_NUM_REQUESTS, reason=REQUESTS_REASON)]
Count = Annotated[int, Within(low=-MAX_COUNT - 1, high=MAX_COUNT, reason="int32, as vLLM takes "
                              "it")]
GPUS_REASON = "as many as the largest clusters in use hold (Llama 3 trained on 16K H100s)"
TensorParallelSize = Annotated[PositiveInt, Within(
    high=MAX_GPUS_PER_NODE, reason="tensor parallelism stays inside one NVLink domain, and the "
    "largest sold has 72 GPUs (GB200 NVL72)")]
DataParallelSize = Annotated[PositiveInt, Within(high=MAX_NUM_GPUS, reason=GPUS_REASON)]
MAX_PIPELINE_STAGES = 128
"""Most pipeline stages: each holds at least one layer, and no catalog model has 128."""
PipelineParallelSize = Annotated[PositiveInt, Within(
    high=MAX_PIPELINE_STAGES, reason="every pipeline stage holds at least one layer, and no "
    "model served here has more than 128")]
