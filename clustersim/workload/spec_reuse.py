"""Workloads whose prompts repeat, so that a prefix cache sees the reuse it would see in service.

``prompt_pool``: a fixed pool of prompts in groups, each group's prompts opening with one
shared system prompt, drawn again and again (as the shared-prefix generators of the
benchmark tools are). ``sessions``: multi-turn chats and agent loops, each request sent when
the answer before it is back::

    prompt_pool   | system prompt of group g | question p |            any draw of prompt (g, p)
    sessions      | system | msg 1 | answer 1 | msg 2 | answer 2 | msg 3 |     request 3's prompt
                                                  (a tool's output instead of a msg in agents)
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
    ValidationInfo,
    field_validator,
    model_validator,
)

from clustersim.limits import (
    MAX_NUM_REQUESTS,
    REQUESTS_REASON,
    NumRequests,
    PositiveSeconds,
    Seconds,
    Tokens,
    Within,
)
from clustersim.validation import Strict, kind_union
from clustersim.workload.spec import (
    MAX_THINK_TIME_S,
    Arrivals,
    ConstantArrivals,
    FixedLength,
    GammaArrivals,
    LengthDist,
    LognormalLength,
    OnOffArrivals,
    OutputLengthDist,
    PoissonArrivals,
    RateCurveArrivals,
    UniformLength,
    check_how_many,
)

MAX_POOL_PROMPTS = 1_000_000
"""Most prompts in a pool (num_groups x num_prompts_per_group)."""
MAX_TURNS = 10_000
"""Most user turns of a session, or model calls of one turn."""
TURNS_REASON = "a session of more is a trace to replay, not a distribution to draw"


# ------------------------------------------------------------------ waits
def _number_as_fixed(value: Any) -> Any:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return {"kind": "fixed", "value_s": value}
    return value


WaitSeconds = Annotated[NonNegativeFloat, Within(
    high=MAX_THINK_TIME_S, unit="s", reason="a client that waits longer between an answer and "
    "its next request no longer closes the loop: give the sessions' arrivals that pace instead")]


class FixedWait(Strict):
    kind: Literal["fixed"]
    value_s: WaitSeconds = Field(description="Every wait lasts this long.")


class ExponentialWait(Strict):
    """Memoryless waits of the given mean."""

    kind: Literal["exponential"]
    mean_s: WaitSeconds = Field(description="Mean wait.")


class LognormalWait(Strict):
    """A lognormal with the given mean and coefficient of variation, cut at ``high_s``."""

    kind: Literal["lognormal"]
    mean_s: Annotated[PositiveFloat, Within(high=MAX_THINK_TIME_S, unit="s", reason="a "
                                            "wait is at most 10 minutes")] = Field(
        description="Mean wait (before the cut).")
    cv: Annotated[PositiveFloat, Within(
        high=100.0, reason="beyond it nearly every draw is cut to 0 or high_s")] = Field(
        description="Standard deviation / mean (before the cut).")
    high_s: WaitSeconds = Field(MAX_THINK_TIME_S, description="Longer draws are cut to this.")


class UniformWait(Strict):
    """Waits drawn uniformly from [low_s, high_s]."""

    kind: Literal["uniform"]
    low_s: WaitSeconds = Field(description="Shortest wait.")
    high_s: WaitSeconds = Field(description="Longest wait.")

    @model_validator(mode="after")
    def _ordered(self) -> UniformWait:
        if self.low_s > self.high_s:
            raise ValueError(f"low_s ({self.low_s}) must be <= high_s ({self.high_s})")
        return self


WaitDist = Annotated[
    kind_union(FixedWait, ExponentialWait, LognormalWait, UniformWait),
    BeforeValidator(_number_as_fixed),
]
"""A distribution of waits, seconds; a plain number means ``{kind: fixed, value_s: x}``."""


def _check_count(dist: Any) -> Any:
    """Refuse a count distribution (of turns or calls) that reaches past ``MAX_TURNS``."""
    if isinstance(dist, FixedLength):
        high: int | None = dist.value
    elif isinstance(dist, UniformLength | LognormalLength):
        high = dist.high
    else:
        high = None
    if high is None:
        raise ValueError(f"give the lognormal a high (at most {MAX_TURNS:,})")
    if high > MAX_TURNS:
        raise ValueError(f"{high:,} is more than {MAX_TURNS:,}: {TURNS_REASON}")
    return dist


CountDist = Annotated[LengthDist, AfterValidator(_check_count)]
"""A count's distribution (of turns, of calls), at most ``MAX_TURNS``; as a length's."""


# ------------------------------------------------------------- prompt pool
class PromptPoolWorkload(Strict):
    """A pool of ``num_groups`` x ``num_prompts_per_group`` prompts; the prompts of a group
    open with the group's system prompt, then their own question. Each request draws a prompt
    (``order``) and an answer length; a prompt drawn again is the same tokens, so a prefix
    cache holds every full block of it, and prompts of one group share the system prompt's.

    The parameters are those of inference-perf's ``shared_prefix`` data
    (``num_groups``, ``num_prompts_per_group``, ``system_prompt_len``, ``question_len``,
    ``output_len``: inference_perf/config/datagen/config.py) and of SGLang's
    ``generated-shared-prefix`` dataset (``--gsp-num-groups``, ``--gsp-prompts-per-group``,
    ``--gsp-system-prompt-len``, ``--gsp-question-len``, ``--gsp-output-len``:
    python/sglang/benchmark/datasets/generated_shared_prefix.py). Both draw a system prompt
    length per group and a question length per prompt, and shuffle the pool once; inference-perf
    then sends it in that order, starting over after the last prompt (``order: cycle``)."""

    kind: Literal["prompt_pool"]
    num_groups: Annotated[PositiveInt, Within(high=MAX_POOL_PROMPTS, reason="a pool holds at "
                                              "most a million prompts")] = Field(
        description="Groups of prompts, each with its own system prompt (inference-perf "
        "num_groups, SGLang --gsp-num-groups).")
    num_prompts_per_group: Annotated[PositiveInt, Within(
        high=MAX_POOL_PROMPTS, reason="a pool holds at most a million prompts")] = Field(
        description="Prompts of each group (inference-perf num_prompts_per_group, SGLang "
        "--gsp-prompts-per-group).")
    system_prompt_tokens: LengthDist = Field(
        description="Length of a group's shared system prompt, drawn once per group "
        "(inference-perf system_prompt_len).")
    question_tokens: LengthDist = Field(
        description="Length of a prompt's own question after the system prompt, drawn once "
        "per prompt (inference-perf question_len).")
    output_tokens: OutputLengthDist = Field(
        description="Answer length, drawn for every request (inference-perf output_len).")
    order: Literal["cycle", "random"] = Field(
        "cycle", description="cycle: the pool shuffled once, then sent in that order, starting "
        "over after the last prompt (inference-perf); random: each request draws any prompt "
        "of the pool, all equally likely.")
    arrivals: Arrivals = Field(description="When requests arrive (as in synthetic).")
    num_requests: NumRequests | None = Field(
        None, description="How many requests (required for closed_loop).")
    duration_s: PositiveSeconds | None = Field(
        None, description="Open loop: only requests arriving within this long after start_s; "
        "with num_requests, whichever ends first.")
    start_s: Seconds = Field(
        0.0, description="When traffic starts (as in synthetic).")

    @field_validator("num_prompts_per_group")
    @classmethod
    def _pool_size(cls, value: int, info: ValidationInfo) -> int:
        groups = info.data.get("num_groups")
        if groups is not None and groups * value > MAX_POOL_PROMPTS:
            raise ValueError(f"{groups:,} groups of {value:,} prompts are "
                             f"{groups * value:,} prompts, more than {MAX_POOL_PROMPTS:,}")
        return value

    @model_validator(mode="after")
    def _how_many(self) -> PromptPoolWorkload:
        check_how_many(self.arrivals, self.num_requests, self.duration_s)
        return self


# ---------------------------------------------------------------- sessions
SessionArrivals = kind_union(PoissonArrivals, GammaArrivals, ConstantArrivals, OnOffArrivals,
                             RateCurveArrivals)


class ToolCalls(Strict):
    """An agent loop: each user turn is answered by several model calls. The first follows the
    user's message; each later one is sent when a tool call the model asked for has run
    (``latency_s``) and its output (``output_tokens``) has been appended to the context."""

    calls_per_turn: CountDist = Field(
        description="Model calls per user turn, at least 1 (1: no tool call).")
    latency_s: WaitDist = Field(
        description="How long a tool runs, from the answer asking for it to the next call.")
    output_tokens: LengthDist = Field(description="Tokens of a tool's output.")


class SessionsWorkload(Strict):
    """Sessions (chats, agent runs) start by the arrival process; within one, each request is
    sent when the answer before it is back and the user has thought (``think_time_s``) or the
    tool has run (``tool_calls.latency_s``): a closed loop per session. Request k's prompt is
    request k-1's prompt, its answer and the new message (the user's, or a tool's output), with
    prefix-cache keys over all of it, so that a prefix cache holds the conversation so far:

        request 1   | system | msg 1 |
        request 2   | system | msg 1 | answer 1 | msg 2 |
        request 3   | system | msg 1 | answer 1 | msg 2 | answer 2 | msg 3 |

    With ``max_context_tokens``, a request whose prompt and answer would exceed it is
    handled by ``at_context_cap``. Chat front ends drop the oldest messages and keep the
    system prompt (LibreChat's ``maxContextTokens`` pruning, Open WebUI's context-length
    filters), agents summarise them (OpenHands' ``LLMSummarizingCondenser``), and a client
    that sends the whole history to vLLM gets HTTP 400 once prompt + max_tokens passes
    ``max_model_len``, which ends the conversation. The default is ``truncate``, the chat
    front ends' way."""

    kind: Literal["sessions"]
    arrivals: SessionArrivals = Field(
        description="When sessions start (an open-loop process; its rate is sessions/s).")
    num_sessions: NumRequests | None = Field(None, description="How many sessions.")
    duration_s: PositiveSeconds | None = Field(
        None, description="Only sessions starting within this long after start_s; with "
        "num_sessions, whichever ends first. Sessions started run to their end.")
    start_s: Seconds = Field(0.0, description="Session starts begin one gap after this.")
    system_prompt_tokens: LengthDist | None = Field(
        None, description="Length of a session's system prompt (null: none).")
    num_system_prompts: Annotated[PositiveInt, Within(
        high=MAX_NUM_REQUESTS, reason=REQUESTS_REASON)] | None = Field(
        None, description="Sessions share this many distinct system prompts, each session "
        "drawing one (an app's few prompts and tool definitions); null: every session its "
        "own.")
    turns: CountDist = Field(description="User turns per session.")
    user_tokens: LengthDist = Field(description="Tokens of each new user message.")
    output_tokens: OutputLengthDist = Field(description="Length of each answer.")
    think_time_s: WaitDist = Field(
        0.0, validate_default=True, description="From an answer to the user's next "
        "message (seconds, or a distribution).")
    tool_calls: ToolCalls | None = Field(
        None, description="Agent loops: tool calls between the model calls of a turn "
        "(null: a chat, one call per turn).")
    max_context_tokens: Tokens | None = Field(
        None, description="Most tokens of a prompt plus its answer (its max_tokens, for "
        "stop_or_length answers): the context window the client keeps to; null: no cap "
        "(the engine rejects what passes max_model_len).")
    at_context_cap: Literal["truncate", "end_session"] = Field(
        "truncate", description="truncate: drop the oldest messages and answers (the system "
        "prompt is kept) until the request fits; a session whose newest message alone does "
        "not fit ends there. end_session: the session ends at the first request that would "
        "not fit.")

    @field_validator("num_system_prompts")
    @classmethod
    def _with_system_prompts(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value is not None and info.data.get("system_prompt_tokens", 0) is None:
            raise ValueError("shared system prompts need system_prompt_tokens")
        return value

    @model_validator(mode="after")
    def _how_many(self) -> SessionsWorkload:
        check_how_many(self.arrivals, self.num_sessions, self.duration_s,
                       num_field="num_sessions", what="sessions")
        return self
