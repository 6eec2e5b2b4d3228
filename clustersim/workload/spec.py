"""The ``workload:`` section of a scenario: which requests arrive, when, and how long they are.

Each kind is a strict pydantic model chosen by its ``kind:`` field; every request stream is
reproducible from the scenario's seed. The kinds::

    explicit     requests listed one by one
    poisson      Poisson arrivals + lengths, flat (the short form of synthetic)
    synthetic    arrivals:  poisson | gamma | constant | on_off | rate_curve | closed_loop
                 lengths:   independent | mixture | empirical
    replay       a trace file's arrivals and lengths (Azure, Mooncake, Vidur, vLLM, BurstGPT, ...)
    benchmark    `vllm bench serve`: warm-ups, then requests dispatched at a rate through a
                 semaphore of max_concurrency (the client's own queue)
    prompt_pool  prompts drawn from groups sharing a system prompt (``spec_reuse``)
    sessions     multi-turn chats and agent loops, each turn sent after the last answer
                 (``spec_reuse``)

``kinds.Workload`` is the union of them all.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    ValidationInfo,
    field_validator,
    model_validator,
)

from clustersim.limits import (
    MAX_NUM_REQUESTS,
    MAX_RATE_PER_S,
    MAX_TOKENS,
    MIN_RATE_PER_S,
    RATE_REASON,
    REQUESTS_REASON,
    TOKENS_REASON,
    Count,
    NonNegativeRate,
    NumRequests,
    PositiveSeconds,
    Rate,
    Seconds,
    Tokens,
    Within,
)
from clustersim.validation import Strict, kind_union


# ------------------------------------------------------------------ one length
def _int_as_fixed(value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool):
        return {"kind": "fixed", "value": value}
    return value


class FixedLength(Strict):
    kind: Literal["fixed"]
    value: Tokens = Field(description="Every request has this many tokens.")


class UniformLength(Strict):
    """Integers drawn uniformly from [low, high]."""

    kind: Literal["uniform"]
    low: Tokens = Field(description="Shortest length, tokens.")
    high: Tokens = Field(description="Longest length, tokens (inclusive).")

    @model_validator(mode="after")
    def _ordered(self) -> UniformLength:
        if self.low > self.high:
            raise ValueError(f"low ({self.low}) must be <= high ({self.high})")
        return self


class LognormalLength(Strict):
    """A lognormal with the given mean and coefficient of variation, rounded, then clipped."""

    kind: Literal["lognormal"]
    mean: Annotated[PositiveFloat, Within(high=MAX_TOKENS, reason=TOKENS_REASON)] = Field(
        description="Mean length in tokens (before rounding/clipping).")
    cv: Annotated[PositiveFloat, Within(
        high=100.0, reason="beyond it nearly every draw is clipped to low or high")] = Field(
        description="Standard deviation / mean (before clipping).")
    low: Tokens = Field(1, description="Shorter draws are raised to this.")
    high: Tokens | None = Field(None, description="Longer draws are cut to this (default "
                                f"{MAX_TOKENS:,}).")

    @model_validator(mode="after")
    def _ordered(self) -> LognormalLength:
        if self.high is not None and self.low > self.high:
            raise ValueError(f"low ({self.low}) must be <= high ({self.high})")
        return self


LengthDist = Annotated[
    kind_union(FixedLength, UniformLength, LognormalLength),
    BeforeValidator(_int_as_fixed),
]
"""A token-length distribution; a plain integer means ``{kind: fixed, value: n}``."""


class StopOrLengthOutput(Strict):
    """Answers that either stop early or run to ``max_tokens``, as vLLM ends a request with
    ``finish_reason`` "stop" (EOS or a stop string) or "length" (``max_tokens`` reached):
    a share ``stop_fraction`` of the answers stop at a length drawn from ``stop_tokens`` (a
    draw above ``max_tokens`` is cut to it), the others are ``max_tokens`` long."""

    kind: Literal["stop_or_length"]
    max_tokens: Tokens = Field(description="The requests' max_tokens: no answer is longer.")
    stop_fraction: Annotated[NonNegativeFloat, Within(
        high=1.0, reason="it is a share of the answers")] = Field(
        description="Share of the answers that stop (EOS) before max_tokens, 0 to 1.")
    stop_tokens: LengthDist = Field(
        description="Length of an answer that stops; draws above max_tokens end at it.")


OutputLengthDist = Annotated[
    kind_union(FixedLength, UniformLength, LognormalLength, StopOrLengthOutput),
    BeforeValidator(_int_as_fixed),
]
"""An answer-length distribution: a token-length one, or answers that stop early or at
``max_tokens`` (``stop_or_length``)."""


# ------------------------------------------------------------- traffic classes
SOURCE_CLASSES: dict[str, tuple[int, int]] = {
    "decode_baseline": (16, 512),
    "short_interactive": (256, 64),
    "long_document_16k": (16384, 32),
    "long_document_32k": (32768, 32),
}
"""The named traffic classes, (prompt, output) tokens: a class of one of these
names that gives no lengths takes these."""


class LengthClass(Strict):
    """One traffic class of a mixture: its share of requests and its lengths."""

    name: str = Field(description=f"Class name; {', '.join(SOURCE_CLASSES)} have default lengths.")
    weight: PositiveFloat = Field(description="Relative share of requests (weights need not sum "
                                  "to 1).")
    prompt_tokens: LengthDist = Field(description="Prompt length of this class's requests.")
    output_tokens: OutputLengthDist = Field(description="Output length of this class's "
                                            "requests.")

    @model_validator(mode="before")
    @classmethod
    def _shipped_lengths(cls, data: Any) -> Any:
        if not isinstance(data, dict) or "prompt_tokens" in data or "output_tokens" in data:
            return data
        name = data.get("name")
        if not isinstance(name, str) or name not in SOURCE_CLASSES:
            raise ValueError(
                f"class {name!r} needs prompt_tokens and output_tokens "
                f"(classes with default lengths: {', '.join(SOURCE_CLASSES)})"
            )
        prompt, output = SOURCE_CLASSES[name]
        return {**data, "prompt_tokens": prompt, "output_tokens": output}


# ---------------------------------------------------------------- trace files
TimeUnit = Literal["s", "ms", "us", "ns", "datetime"]


class TraceColumns(Strict):
    """Column (or JSON key) names that replace the format's own; required for csv and jsonl."""

    arrival: str | None = Field(None, description="Arrival time column (none: lengths only).")
    prompt_tokens: str | None = Field(None, description="Prompt length column, tokens.")
    output_tokens: str | None = Field(None, description="Output length column, tokens.")


class TraceSource(Strict):
    """Where a trace comes from and how to read it (shared by ``replay`` and ``empirical``)."""

    trace: str = Field(
        min_length=1,
        description="A shipped trace's name (`clustersim trace list`: azure-conv-2023, "
        "azure-code-2023, mooncake-conversation) or a file path; a relative path is relative "
        "to the scenario's folder. A .gz file is decompressed."
    )
    format: Literal[
        "auto", "azure", "mooncake", "vidur", "vllm", "llmservingsim", "burstgpt", "lengths",
        "csv", "jsonl",
    ] = Field("auto", description="File format; auto detects it from the header/first record.")
    columns: TraceColumns | None = Field(None, description="Column names replacing the format's.")
    time_unit: TimeUnit | None = Field(
        None, description="Unit of the arrival column (datetime: ISO 8601 text); default the "
        "format's own (s for csv/jsonl)."
    )

    @model_validator(mode="after")
    def _generic_needs_columns(self) -> TraceSource:
        if self.format in ("csv", "jsonl"):
            cols = self.columns
            if cols is None or cols.prompt_tokens is None or cols.output_tokens is None:
                raise ValueError(
                    f"format {self.format} needs columns: {{prompt_tokens: ..., "
                    "output_tokens: ..., arrival: ...} (arrival optional)"
                )
        return self


# ---------------------------------------------------------------- arrivals
MAX_CURVE_POINTS = 100_000
"""Most points of a rate curve."""


class PoissonArrivals(Strict):
    """Exponential gaps: the memoryless open-loop client (`vllm bench serve --request-rate`)."""

    kind: Literal["poisson"]
    rate_per_s: Rate = Field(description="Mean arrival rate, requests per second.")


class GammaArrivals(Strict):
    """Gamma-distributed gaps with mean 1/rate; cv > 1 is burstier than Poisson (cv = 1)."""

    kind: Literal["gamma"]
    rate_per_s: Rate = Field(description="Mean arrival rate, requests per second.")
    cv: Annotated[PositiveFloat, Within(
        low=1e-3, high=100.0, reason="gaps with a smaller cv are constant (kind: constant); "
        "with a larger one nearly every gap is 0")] = Field(
        description="Coefficient of variation of the gaps (burstiness).")


class ConstantArrivals(Strict):
    """One request every 1/rate seconds."""

    kind: Literal["constant"]
    rate_per_s: Rate = Field(description="Requests per second, evenly spaced.")


class OnOffArrivals(Strict):
    """Bursts: Poisson at on_rate_per_s for on_s, then at off_rate_per_s for off_s, repeated."""

    kind: Literal["on_off"]
    on_rate_per_s: Rate = Field(description="Rate during each burst, requests/s.")
    on_s: PositiveSeconds = Field(description="Length of each burst.")
    off_s: PositiveSeconds = Field(description="Length of each pause between bursts.")
    off_rate_per_s: NonNegativeRate = Field(0.0, description="Rate during the pauses.")


class RateCurveArrivals(Strict):
    """Poisson arrivals whose rate follows a curve over time (e.g. a diurnal day)."""

    kind: Literal["rate_curve"]
    points: list[tuple[Seconds, NonNegativeRate]] = Field(
        min_length=1,
        description="[time_s, rate_per_s] pairs from time 0, times increasing; after the last "
        "point the rate stays at its value (or the curve repeats, with period_s).",
    )
    interpolation: Literal["linear", "step"] = Field(
        "linear", description="linear: the rate ramps between points; step: it holds until the "
        "next point."
    )
    period_s: PositiveSeconds | None = Field(
        None, description="Repeat the curve with this period (> the last point's time); the "
        "last point leads back to the first."
    )

    @model_validator(mode="after")
    def _shape(self) -> RateCurveArrivals:
        if len(self.points) > MAX_CURVE_POINTS:
            raise ValueError(f"{len(self.points):,} points, more than {MAX_CURVE_POINTS:,} (a "
                             "day at one point a second)")
        times = [t for t, _ in self.points]
        if times[0] != 0:
            raise ValueError(f"the first point must be at time 0, not {times[0]}")
        for before, after in zip(times, times[1:], strict=False):
            if after <= before:
                raise ValueError(f"point times must increase: {after} after {before}")
        if not any(rate > 0 for _, rate in self.points):
            raise ValueError("every rate is 0: no request would ever arrive")
        return self

    @field_validator("period_s")
    @classmethod
    def _after_last_point(cls, period: float | None, info: ValidationInfo) -> float | None:
        points = info.data.get("points")
        if period is not None and points and period <= points[-1][0]:
            raise ValueError(f"period_s ({period}) must exceed the last point's time "
                             f"({points[-1][0]})")
        return period


MAX_THINK_TIME_S = 600.0
"""Longest pause of a closed-loop client between an answer and its next request: 10 minutes."""
ThinkTime = Annotated[NonNegativeFloat, Within(
    high=MAX_THINK_TIME_S, unit="s", reason="a client that waits longer between an answer and "
    "its next request no longer closes the loop: its requests come at its own pace whatever "
    "the server does (give the arrivals that rate instead); a pause in milliseconds is that "
    "number over 1000")]


class ClosedLoopArrivals(Strict):
    """N users, each sending its next request when its previous one finishes (plus think time),
    as `vllm bench serve --max-concurrency N` and most vendor tables measure."""

    kind: Literal["closed_loop"]
    num_users: NumRequests = Field(description="Concurrent users = most requests in flight.")
    think_time_s: ThinkTime = Field(
        0.0, description="Pause between a user's answer and its next request."
    )


Arrivals = kind_union(
    PoissonArrivals, GammaArrivals, ConstantArrivals, OnOffArrivals, RateCurveArrivals,
    ClosedLoopArrivals,
)


# ------------------------------------------------------------ joint lengths
class IndependentLengths(Strict):
    """Prompt and output lengths drawn independently, each from its own distribution."""

    kind: Literal["independent"]
    prompt_tokens: LengthDist = Field(description="Prompt length distribution.")
    output_tokens: OutputLengthDist = Field(description="Output length distribution.")


class MixtureLengths(Strict):
    """Each request picks a class by weight, then draws that class's lengths."""

    kind: Literal["mixture"]
    classes: list[LengthClass] = Field(min_length=1, description="The traffic classes.")


class EmpiricalLengths(TraceSource):
    """(prompt, output) pairs taken together from the rows of a trace or length table
    (ShareGPT etc.), so their correlation is kept; arrival times and prefix hashes are not used."""

    kind: Literal["empirical"]
    sample: Literal["random", "in_order"] = Field(
        "random", description="random: rows drawn with replacement; in_order: rows in file "
        "order, starting over after the last."
    )
    max_total_tokens: Tokens | None = Field(
        None, description="Drop rows whose prompt + output exceed this (a model's context, as "
        "DistServe's ShareGPT preparation does for OPT's 2,048 positions)."
    )


Lengths = kind_union(IndependentLengths, MixtureLengths, EmpiricalLengths)


# ----------------------------------------------------------------- workloads
class ExplicitRequest(Strict):
    id: str
    arrival_s: Seconds
    prompt_tokens: Tokens
    output_tokens: Tokens
    block_hashes: list[int] | None = Field(
        None, description="Prefix-cache keys of the prompt's full blocks, first block first."
    )
    priority: Count = Field(0, description="Lower is served first under policy: priority.")

    @field_validator("id", mode="before")
    @classmethod
    def _id_as_text(cls, value: Any) -> Any:
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


class ExplicitWorkload(Strict):
    """Requests listed one by one."""

    kind: Literal["explicit"]
    requests: list[ExplicitRequest] = Field(min_length=1, max_length=MAX_NUM_REQUESTS)

    @field_validator("requests")
    @classmethod
    def _unique_ids(cls, requests: list[ExplicitRequest]) -> list[ExplicitRequest]:
        seen: set[str] = set()
        for request in requests:
            if request.id in seen:
                raise ValueError(f"duplicate request id {request.id!r}")
            seen.add(request.id)
        return requests


class PoissonWorkload(Strict):
    """Poisson arrivals at ``rate_per_s``; lengths from one distribution or a class mixture.

    The short form of ``synthetic`` with ``arrivals: {kind: poisson}``; both give the same
    requests for the same seed.
    """

    kind: Literal["poisson"]
    rate_per_s: Rate = Field(description="Mean arrival rate, requests per second.")
    num_requests: NumRequests = Field(description="How many requests.")
    start_s: Seconds = Field(0.0, description="Arrivals begin one gap after this.")
    prompt_tokens: LengthDist | None = Field(None, description="Prompt length (without classes).")
    output_tokens: OutputLengthDist | None = Field(
        None, description="Output length (without classes).")
    classes: list[LengthClass] | None = Field(
        None, min_length=1, description="A mixture of traffic classes instead of one length pair."
    )

    @model_validator(mode="after")
    def _one_length_source(self) -> PoissonWorkload:
        has_lengths = self.prompt_tokens is not None or self.output_tokens is not None
        if self.classes is not None and has_lengths:
            raise ValueError("give either classes or prompt_tokens/output_tokens, not both")
        if self.classes is None and (self.prompt_tokens is None or self.output_tokens is None):
            raise ValueError("prompt_tokens and output_tokens are required without classes")
        return self


class SyntheticWorkload(Strict):
    """Traffic generated from an arrival process and a length distribution."""

    kind: Literal["synthetic"]
    arrivals: Arrivals = Field(description="When requests arrive (a kind: and its fields).")
    lengths: Lengths = Field(description="How long their prompts and outputs are.")
    num_requests: NumRequests | None = Field(
        None, description="How many requests (required for closed_loop)."
    )
    duration_s: PositiveSeconds | None = Field(
        None, description="Open loop: only requests arriving within this long after start_s; "
        "with num_requests, whichever ends first."
    )
    start_s: Seconds = Field(
        0.0, description="When traffic starts: closed-loop users send their first requests "
        "then; open-loop arrivals begin one gap after it."
    )

    @model_validator(mode="after")
    def _how_many(self) -> SyntheticWorkload:
        check_how_many(self.arrivals, self.num_requests, self.duration_s)
        return self


def check_how_many(arrivals: Any, num: int | None, duration_s: float | None,
                   num_field: str = "num_requests", what: str = "requests") -> None:
    """Refuse an arrival process that would bring no end of ``what`` (ValueError): closed
    loops need a count, open ones a count or a duration, and a duration alone at most
    ``MAX_NUM_REQUESTS`` arrivals at the peak rate."""
    if isinstance(arrivals, ClosedLoopArrivals):
        if num is None or duration_s is not None:
            raise ValueError(f"closed_loop arrivals need {num_field} and take no duration_s")
    elif num is None and duration_s is None:
        raise ValueError(f"give {num_field}, duration_s or both")
    if (
        isinstance(arrivals, RateCurveArrivals)
        and arrivals.period_s is None
        and arrivals.points[-1][1] == 0
        and duration_s is None
    ):
        raise ValueError("the rate curve ends at rate 0, so traffic stops there: "
                         "give duration_s")
    if num is None and duration_s is not None:
        peak = _peak_rate(arrivals)
        expected = peak * duration_s
        if expected > MAX_NUM_REQUESTS:
            raise ValueError(
                f"duration_s {duration_s:g} s at up to {peak:g} "
                f"{what}/s brings up to {expected:,.0f} {what}, more than "
                f"{MAX_NUM_REQUESTS:,} (a run holds every request in memory): shorten it "
                f"or give {num_field} too")


def _peak_rate(arrivals: Any) -> float:
    """The highest rate an open-loop arrival process reaches, requests/s."""
    if isinstance(arrivals, OnOffArrivals):
        return max(arrivals.on_rate_per_s, arrivals.off_rate_per_s)
    if isinstance(arrivals, RateCurveArrivals):
        return max(rate for _, rate in arrivals.points)
    return arrivals.rate_per_s


class ReplayWorkload(TraceSource):
    """Replay a trace's arrivals and lengths (and Mooncake's prefix-block hashes)."""

    kind: Literal["replay"]
    window_start_s: Seconds = Field(
        0.0, description="Replay from this time of the trace (seconds after its first request); "
        "that moment becomes simulated time 0."
    )
    window_end_s: PositiveSeconds | None = Field(
        None, description="Replay requests before this time of the trace (default: to the end)."
    )
    max_num_requests: NumRequests | None = Field(
        None, description="Replay at most this many requests (the first ones in the window)."
    )
    rate_multiplier: Annotated[PositiveFloat, Within(
        low=1e-6, high=1e6, reason="a replay is sped up or slowed down at most a million "
        "times")] = Field(
        1.0, description="Speed-up of the replay: gaps are divided by it (2 = twice the rate)."
    )
    spread_ties: bool = Field(
        False, description="Spread requests sharing one timestamp evenly up to the next "
        "timestamp (Mooncake's conversation trace is quantised to ~3 s ticks)."
    )

    @field_validator("window_end_s")
    @classmethod
    def _after_start(cls, end: float | None, info: ValidationInfo) -> float | None:
        start = info.data.get("window_start_s")
        if end is not None and start is not None and end <= start:
            raise ValueError(f"window_end_s ({end}) must exceed window_start_s ({start})")
        return end


def _inf_rate(value: Any) -> Any:
    return float("inf") if value in ("inf", "Infinity", "infinity") else value


def _finite_within(low: float, high: float, reason: str) -> Any:
    """A check that a finite value lies in [low, high] (inf passes: vLLM's own word)."""
    def check(value: float) -> float:
        if math.isfinite(value) and not low <= value <= high:
            raise ValueError(f"{value:g} is outside {low:g}..{high:g} (or inf): {reason}")
        return value
    return AfterValidator(check)


NumWarmups = Annotated[NonNegativeInt, Within(high=MAX_NUM_REQUESTS, reason=REQUESTS_REASON)]
BenchmarkRate = Annotated[PositiveFloat, BeforeValidator(_inf_rate), _finite_within(
    MIN_RATE_PER_S, MAX_RATE_PER_S, RATE_REASON)]
Burstiness = Annotated[PositiveFloat, BeforeValidator(_inf_rate), _finite_within(
    1e-3, 1e3, "gamma shapes below 0.001 put every request at one instant, above 1000 they "
    "are evenly spaced already (inf: exactly even)")]


class BenchmarkWorkload(Strict):
    """The client of ``vllm bench serve`` (vllm/benchmarks/serve.py, ``benchmark``): the
    ``num_warmups`` warm-up requests first, then ``num_prompts`` requests dispatched by the
    rate process, each waiting for one of ``max_concurrency`` slots before it is sent.

    Only the main requests are measured, and from their send (after the slot wait), as the
    tool measures them; the wait itself is each request's client queue time."""

    kind: Literal["benchmark"]
    num_prompts: NumRequests = Field(
        description="vLLM --num-prompts: measured requests.")
    max_concurrency: NumRequests | None = Field(
        None, description="vLLM --max-concurrency: most requests in flight; null: no limit "
        "(every dispatched request is sent at once).")
    request_rate: BenchmarkRate = Field(
        default_factory=lambda: math.inf,  # (a factory: the JSON schema gets no Infinity)
        allow_inf_nan=True,  # inf is vLLM's word for "all at once"; NaN fails gt=0
        description="vLLM --request-rate, requests/s; inf (the default): every request is "
        "dispatched at the start and only the semaphore paces them.")
    burstiness: Burstiness = Field(
        1.0, allow_inf_nan=True,
        description="vLLM --burstiness: the gamma shape of the dispatch gaps (1 = Poisson, "
        "< 1 burstier, > 1 more even, inf: evenly spaced); only with a finite request_rate.")
    num_warmups: NumWarmups = Field(
        0, description="vLLM --num-warmups: copies of the first request sent before the "
        "measured run (at most max_concurrency at a time), all finished before it starts.")
    lengths: Lengths = Field(description="Prompt and output lengths of the requests.")
    start_s: Seconds = Field(0.0, description="When the client starts.")
    ramp_up_s: Seconds = Field(
        0.0, description="Concurrency ramp of the measured run (aiperf "
        "--concurrency-ramp-duration): the slot limit rises from 1 to max_concurrency in "
        "even steps over this many seconds; 0: every slot open at once.")
    turnaround_s: ThinkTime = Field(
        0.0, description="The client's own time between an answer and the next send on its "
        "slot (aiperf's worker returns a slot's credit only after parsing the whole "
        "response), warm-ups included: each drawn from an exponential distribution of this "
        "mean (no measured spread exists); 0: the next request goes at once.")

