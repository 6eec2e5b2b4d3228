"""The ``plan:`` section of a scenario: what to optimise and over which deployments.

The scenario's own model, engine, workload and SLO are the fixed part; ``plan:`` names the
choices (layouts, GPU types, tensor and pipeline parallelism per pool, instance counts, engine
budgets, speculative decoding) and the objective. Every choice left out takes the scenario's
own value, so a plan section can be as short as ``plan: {gpu_budget: 8}``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    Field,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
    field_validator,
    model_validator,
)

from clustersim.catalog.quantization import QuantMethod
from clustersim.catalog.specs import KvCacheDType
from clustersim.engine.settings import MAX_KV_OFFLOADING_GIB, SpeculativeSettings
from clustersim.limits import (
    GPUS_REASON,
    MAX_CHOICES,
    MAX_NUM_GPUS,
    DataParallelSize,
    PipelineParallelSize,
    Rate,
    Seconds,
    TensorParallelSize,
    Tokens,
    Within,
)
from clustersim.validation import Strict

LayoutKind = Literal["colocated", "disaggregated", "three_pool"]
Objective = Literal["max_goodput_per_gpu", "min_gpus", "min_cost"]


class PoolChoices(Strict):
    """The choices for one pool role; each left out takes the scenario's own value."""

    gpus: list[str] | None = Field(
        None, min_length=1, max_length=MAX_CHOICES,
        description="Catalog GPU ids to try; default the scenario's gpu."
    )
    tensor_parallel_sizes: list[TensorParallelSize] | None = Field(
        None, min_length=1, max_length=MAX_CHOICES,
        description="Tensor-parallel sizes to try; default the scenario's."
    )
    pipeline_parallel_sizes: list[PipelineParallelSize] | None = Field(
        None, min_length=1, max_length=MAX_CHOICES,
        description="Pipeline-parallel sizes to try (vLLM --pipeline-parallel-size: stages of "
        "tensor_parallel_size GPUs each), e.g. [1, 2]; colocated pools only (vLLM's NIXL "
        "connector, which the plan's serve lines use, refuses a staged engine; simulate runs "
        "staged prefill and decode pools). A size above 1 is tried only where the GPU at that "
        "tensor-parallel size cannot hold the model alone. Default the scenario's "
        "pipeline_parallel_size (colocated), 1 (prefill, decode).",
    )
    data_parallel_sizes: list[DataParallelSize] | None = Field(
        None, min_length=1, max_length=MAX_CHOICES,
        description="Data-parallel ranks per instance to try (vLLM --data-parallel-size with "
        "--enable-expert-parallel: each rank its own scheduler and KV cache, a MoE model's "
        "experts spread whole over the instance's dp x tp GPUs, the wide-EP deployments of "
        "DeepSeek-class models), e.g. [1, 8]; MoE models only. Default the scenario's "
        "data_parallel_size.")
    instances: list[Annotated[PositiveInt, Within(
        high=MAX_NUM_GPUS, reason=GPUS_REASON)]] | None = Field(
        None, min_length=1, max_length=MAX_CHOICES,
        description="Instance counts to try; default: sized from the GPU budget (max_goodput_"
        "per_gpu) or from the analytic screen's estimate for the target rate (min_gpus, "
        "min_cost).",
    )


class SearchSettings(Strict):
    """How hard the simulation tier works per candidate."""

    tolerance: PositiveFloat = Field(
        0.02, lt=1.0, description="Goodput bisection stops when (fail - pass) / pass <= this."
    )
    seeds: PositiveInt = Field(
        3, le=32, description="Independent traffic draws per contender; goodput is their mean "
        "with a 95 % t-interval."
    )
    contenders: PositiveInt = Field(
        3, le=64, description="The best candidates of each layout kind on their first traffic "
        "draw (and the scenario's own layout) get every seed; the others keep one draw."
    )
    simulate_top: PositiveInt = Field(
        4, le=64, description="Best screened candidates of each layout kind that are simulated."
    )
    neighbours: bool = Field(
        True, description="After the first round, also simulate the instance counts next to "
        "the best candidate of each kind (the P:D ratios beside the best one), while they win."
    )
    max_probes: PositiveInt = Field(
        24, le=64, description="Most simulations one bisection may take (per seed)."
    )
    min_requests: PositiveInt = Field(
        1000, le=10_000_000,
        description="A count-bounded workload (num_requests) is lengthened to at least this "
        "many requests per simulation: attainment over a few hundred requests is noise.",
    )
    min_duration_s: Annotated[NonNegativeFloat, Within(
        high=3600.0, unit="s", reason="a queue that grows under overload shows within minutes, "
        "and every probe simulates this long")] = Field(
        60.0, description="... and to at least this long at the probed rate, so that a queue "
        "that grows under overload has time to show (a short burst drains before it hurts). "
        "Trace replays and duration-bounded workloads keep their own span.",
    )


SHIPPED_CURVES = ("servegen-deepseek-r1", "servegen-mm-image")
"""Daily rate curves shipped with clustersim (clustersim/data/traces/servegen_rate_*.csv)."""


class TrafficCurve(Strict):
    """``plan.traffic_curve``: the traffic over a day, for sizing the recommended deployment
    window by window. Its shape comes from a curve (``curve``) or a list (``rates_per_s``);
    its level from ``peak_rate_per_s``."""

    curve: str | None = Field(
        None, description="A shipped daily rate curve (servegen-deepseek-r1: DeepSeek-R1 on "
        "Alibaba Cloud Model Studio, 144 ten-minute windows; servegen-mm-image: a multimodal "
        "model, the same day) or a CSV file with window_start_s and total_rate_rps (or "
        "rate_per_s) columns in equal windows; one of curve and rates_per_s.")
    rates_per_s: list[NonNegativeFloat] | None = Field(
        None, min_length=1, max_length=10_000,
        description="The rate of each window in turn, requests/s (windows of window_s).")
    window_s: Annotated[PositiveFloat, Within(high=86_400.0, unit="s",
                                              reason="a window longer than a day")] = Field(
        3600.0, description="The window the fleet is sized for: the curve's windows are "
        "averaged into windows this long (a multiple of theirs); rates_per_s has one rate "
        "per window of this length.")
    span_s: Annotated[PositiveFloat, Within(high=31 * 86_400.0, unit="s",
                                            reason="a month")] = Field(
        86_400.0, description="How much of the curve, from its start (a day).")
    peak_rate_per_s: Rate | None = Field(
        None, description="The busiest window's rate: the curve is scaled to it. Default: the "
        "plan's target_rate_per_s, else the scenario's own rate.")
    scale_up_delay_s: Seconds = Field(
        300.0, description="How long after a window begins the instances it adds serve: the "
        "autoscaler's decision (Dynamo's planner decides every 180 s) and the new engines' "
        "start. An assumption: set it from your own start-up times. Scaling down is at once.")

    @model_validator(mode="after")
    def _one_source(self) -> TrafficCurve:
        if (self.curve is None) == (self.rates_per_s is None):
            raise ValueError("give one of curve and rates_per_s")
        return self


class PlanSpec(Strict):
    """What ``clustersim plan`` optimises, over which deployments."""

    objective: Objective = Field(
        "max_goodput_per_gpu",
        description="max_goodput_per_gpu: the layout that serves the most requests per second "
        "per GPU within gpu_budget, filling the budget; min_gpus / min_cost: the fewest GPUs / "
        "the lowest $ per hour whose goodput reaches target_rate_per_s.",
    )
    gpu_budget: PositiveInt | None = Field(
        None, le=4096, description="Most GPUs a deployment may use (all pools, every TP rank)."
    )
    target_rate_per_s: Rate | None = Field(
        None, description="Requests per second the deployment must serve within the SLO "
        "(required by min_gpus and min_cost; with max_goodput_per_gpu, reported as headroom)."
    )
    gpus: list[str] | None = Field(
        None, min_length=1, max_length=MAX_CHOICES,
        description="GPU generations to compare, e.g. [h100-sxm, h200, b200]: each is planned "
        "on its own for the same traffic and SLO (every pool on that GPU, its servers from "
        "plan.nodes or the shipped one), and the answer is the cheapest per 1M output tokens "
        "at goodput of the generations' best layouts that meet the target (a tie within the "
        "tolerance broken by the tie rule); a generation without a price is planned and "
        "shown, not ranked. Not with per-pool gpus.")
    layouts: list[LayoutKind] = Field(
        ["colocated", "disaggregated"], min_length=1, max_length=3,
        description="Layout kinds to consider. three_pool: prefill-heavy requests "
        "take a prefill -> decode split, decode-heavy ones a decode pool, the rest a colocated "
        "pool, split by the layout's long_prompt_tokens / long_output_tokens (a scenario "
        "layout sets them, else 2048 / 256).",
    )
    colocated: PoolChoices = Field(default_factory=PoolChoices,
                                   description="Choices for colocated pools.")
    prefill: PoolChoices = Field(default_factory=PoolChoices,
                                 description="Choices for prefill pools.")
    decode: PoolChoices = Field(default_factory=PoolChoices,
                                description="Choices for decode pools.")
    max_num_batched_tokens: list[Tokens] | None = Field(
        None, min_length=1, max_length=MAX_CHOICES,
        description="Step budgets to try; default the scenario's engine value (or vLLM's).",
    )
    enable_chunked_prefill: list[bool] | None = Field(
        None, min_length=1, max_length=2,
        description="Chunked prefill on and/or off; default the scenario's."
    )
    quantization: list[QuantMethod | None] | None = Field(
        None, min_length=1,
        description="vLLM --quantization values to try (null: the checkpoint's own, 16-bit for "
        "a plain one), e.g. [null, fp8]; default the scenario's engine value.",
    )
    kv_cache_dtype: list[KvCacheDType] | None = Field(
        None, min_length=1, description="KV cache dtypes to try, e.g. [auto, fp8]; default the "
        "scenario's.",
    )
    speculative: list[SpeculativeSettings | None] | None = Field(
        None, min_length=1, max_length=MAX_CHOICES,
        description="Speculative decoding settings to try, each as engine.speculative (vLLM "
        "--speculative-config plus the acceptance clustersim is told), null for off, e.g. "
        "[null, {method: eagle, num_speculative_tokens: 3, acceptance_rate: 0.7}]; default "
        "the scenario's engine.speculative.",
    )
    kv_offloading_sizes: list[Annotated[NonNegativeFloat, Within(
        high=MAX_KV_OFFLOADING_GIB, unit="GiB",
        reason="more host memory than a server holds (two sockets take up to 12 TB)")]
    ] | None = Field(
        None, min_length=1, max_length=MAX_CHOICES,
        description="CPU KV tier sizes to try, GiB of host memory per engine as "
        "engine.kv_offloading_size (0: no tier), e.g. [0, 256, 1024]; colocated layouts only "
        "(split layouts keep the scenario's engine). A tier costs its GiB at "
        "price_usd_per_gib_hour_host_memory, so min_cost weighs host memory against GPUs; "
        "the neighbours of the best candidate are tried with every size, one instance fewer "
        "too. Default the scenario's engine.kv_offloading_size.",
    )
    price_usd_per_gib_hour_host_memory: NonNegativeFloat | None = Field(
        None, description="$ per GiB-hour of host memory for a CPU KV tier; default the "
        "catalog's prices.yaml host_memory (a cloud on-demand rate, with its source).",
    )
    nodes: dict[str, str] = Field(
        default_factory=dict,
        description="GPU id -> the one-node topology its servers look like (a shipped name or "
        "a path), e.g. {h100-sxm: dgx-h100}: each candidate gets as many such nodes as it "
        "needs on one non-blocking switch. Default: the scenario's topology node, else the "
        "shipped server of that GPU (dgx-h100, a100-8x, rtx4090-pcie-box).",
    )
    prices_usd_per_gpu_hour: dict[str, NonNegativeFloat] = Field(
        default_factory=dict,
        description="$ per GPU-hour by GPU id; default the snapshots in the catalog's "
        "prices.yaml (each names its source and date; prices move, set your own).",
    )
    handoff_budget_s: Seconds = Field(
        0.010, description="Largest acceptable p95 KV handoff, seconds (the keep-or-reject "
        "rule for a split); longer than slo.ttft_s: see slo.long_limits."
    )
    headroom: float = Field(
        0.0, ge=0.0, lt=1.0,
        description="Share of capacity kept in reserve: a candidate's operating rate is the "
        "goodput of its lowest traffic draw (the highest rate at which every draw met the SLO) "
        "times 1 - headroom. min_gpus / min_cost need the operating rate to reach "
        "target_rate_per_s; N+1 runs at the operating rate.",
    )
    require: list[Literal["n_plus_one", "n_plus_one_instance"]] = Field(
        default_factory=list, max_length=1,
        description="Constraints beyond the SLO. n_plus_one: the recommendation must keep its "
        "SLO at its operating rate with one instance lost and with one node lost; "
        "n_plus_one_instance: with one instance lost (a fleet on one server cannot survive "
        "that server). The best candidates are checked in rank order until one does, and the "
        "answer says what survival costs.",
    )
    sensitivity: list[Literal["link", "load"]] = Field(
        default_factory=list, max_length=2,
        description="Readings of the recommendation beyond the plan: link, its goodput with "
        "every link a KV transfer crosses at half and at double its bandwidth (a split; a "
        "colocated answer moves no KV); load, its SLO attainment with 20 % more traffic than "
        "its operating rate. Each runs the plan's own probes again.")
    traffic_curve: TrafficCurve | None = Field(
        None, description="A day of traffic: the recommendation's deployment sized window by "
        "window (each window's instances from its operating rate), a fleet sized for the peak "
        "against one scaled per window, in GPU-hours, cost and SLO attainment over the day.")
    search: SearchSettings = Field(
        default_factory=SearchSettings,
        description="The goodput bisection's tolerance, the traffic draws per candidate and "
        "how many candidates are simulated.")

    @model_validator(mode="after")
    def _objective_inputs(self) -> PlanSpec:
        if self.objective == "max_goodput_per_gpu" and self.gpu_budget is None:
            raise ValueError("max_goodput_per_gpu needs gpu_budget")
        if self.objective in ("min_gpus", "min_cost") and self.target_rate_per_s is None:
            raise ValueError(f"{self.objective} needs target_rate_per_s")
        return self

    @model_validator(mode="after")
    def _generations_or_pool_gpus(self) -> PlanSpec:
        if self.gpus is None:
            return self
        pools = [role for role in ("colocated", "prefill", "decode")
                 if getattr(self, role).gpus is not None]
        if pools:
            raise ValueError(f"gpus (the generations to compare) and {pools[0]}.gpus (a "
                             "pool's GPU choices within one plan): give one of them")
        return self

    @model_validator(mode="after")
    def _pipelines_on_colocated_pools(self) -> PlanSpec:
        for role in ("prefill", "decode"):
            sizes = getattr(self, role).pipeline_parallel_sizes or []
            if any(pp > 1 for pp in sizes):
                raise ValueError(f"{role}.pipeline_parallel_sizes {sizes}: the planner "
                                 "tries pipeline stages on colocated pools only, as vLLM's "
                                 "NIXL connector (its serve lines') refuses a staged engine; "
                                 "simulate and compare run staged prefill and decode pools")
        return self

    @field_validator("speculative")
    @classmethod
    def _distinct_speculative(cls, choices: list[SpeculativeSettings | None] | None
                              ) -> list[SpeculativeSettings | None] | None:
        if choices is not None:
            seen = [None if c is None else c.model_dump(exclude_none=True) for c in choices]
            if any(seen.index(c) != i for i, c in enumerate(seen)):
                raise ValueError("speculative choices repeat")
        return choices

    @field_validator("gpus")
    @classmethod
    def _distinct_gpus(cls, gpus: list[str] | None) -> list[str] | None:
        if gpus is not None and len(set(gpus)) != len(gpus):
            raise ValueError(f"GPUs repeat: {gpus}")
        return gpus

    @field_validator("kv_offloading_sizes")
    @classmethod
    def _distinct_sizes(cls, sizes: list[float] | None) -> list[float] | None:
        if sizes is not None and len(set(sizes)) != len(sizes):
            raise ValueError(f"sizes repeat: {sizes}")
        return sizes

    @field_validator("sensitivity")
    @classmethod
    def _once_each(cls, readings: list[str]) -> list[str]:
        if len(set(readings)) != len(readings):
            raise ValueError(f"readings repeat: {readings}")
        return readings

    @field_validator("layouts")
    @classmethod
    def _plannable(cls, layouts: list[str]) -> list[str]:
        if len(set(layouts)) != len(layouts):
            raise ValueError(f"layouts repeat: {layouts}")
        return layouts
