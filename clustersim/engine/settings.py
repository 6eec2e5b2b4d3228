"""The ``engine:`` section: vLLM's engine arguments, strictly validated.

Fields left unset take vLLM's defaults for the GPU (``vllm serve``, spec §5.3); see
``clustersim.engine.defaults``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field, ValidationInfo, field_validator, model_validator

from clustersim.catalog.quantization import QuantMethod
from clustersim.catalog.specs import KvCacheDType
from clustersim.engine.config import QueuePolicy, SpecMethod, StepPolicy
from clustersim.limits import MAX_COUNT, NonNegativeTokens, NumRequests, Tokens, Within
from clustersim.validation import Strict


def _vllm_version(value: str) -> str:
    """``major.minor`` or ``major.minor.patch``, numbers only."""
    parts = value.split(".")
    if not (2 <= len(parts) <= 3 and all(p.isdigit() and len(p) <= 3 for p in parts)):
        raise ValueError(f"{value!r} is not a vLLM release number: give major.minor, e.g. 0.19 "
                         "or 0.21.1")
    return value


VllmVersion = Annotated[str, AfterValidator(_vllm_version)]
"""A vLLM release as ``0.19`` or ``0.19.1``."""


MAX_KV_OFFLOADING_GIB = 65536.0
"""Largest CPU tier per engine (64 TiB): more host memory than any server takes."""

MAX_SPECULATIVE_TOKENS = 16
"""Most draft tokens per step clustersim takes (vLLM sets no cap; EAGLE trees stop near 8)."""


class SpeculativeSettings(Strict):
    """Speculative decoding: vLLM's ``--speculative-config`` (``SpeculativeConfig``,
    vllm/config/speculative.py), e.g. ``'{"method": "eagle", "num_speculative_tokens": 3,
    "model": ...}'``, plus how often the drafts are accepted: vLLM measures that
    (``vllm:spec_decode_num_accepted_tokens_per_pos``), a simulator has to be told it."""

    method: SpecMethod = Field(
        description="vLLM's method: eagle (an EAGLE draft head on the target's hidden states), "
        "mtp (the model's own multi-token-prediction layers, DeepSeek-V3's MTP module), or "
        "ngram (prompt lookup on the host, no GPU draft pass).")
    num_speculative_tokens: Annotated[int, Field(ge=1, le=MAX_SPECULATIVE_TOKENS)] = Field(
        description="vLLM's num_speculative_tokens k: drafts per decoding request per step; "
        "each decode then schedules 1 + k tokens (num_tokens_with_spec), all counted against "
        "the step's token budget.")
    acceptance_rate: Annotated[float, Field(ge=0.0, le=1.0)] | None = Field(
        None, description="Chance that a draft is accepted given the drafts before it were "
        "(the same at every position): n of k drafts accepted with probability a^n (1 - a) "
        "for n < k, a^k for n = k. Give it or acceptance_lengths.")
    acceptance_lengths: list[Annotated[float, Field(ge=0.0, le=1.0)]] | None = Field(
        None, description="A measured distribution of accepted drafts per verification step: "
        "k + 1 probabilities, of 0, 1, ..., k accepted, summing to 1 (vLLM logs the mean "
        "acceptance length, and the per-position counts it comes from). Give it or "
        "acceptance_rate.")
    draft_layers: Annotated[float, Field(ge=0.0, le=64.0)] | None = Field(
        None, description="GPU cost of one draft pass, in transformer layers shaped like the "
        "target's (each pass also runs the LM head on the drafting requests); default 1 for "
        "eagle (EAGLE's head is one decoder layer) and mtp (one MTP module per draft, "
        "num_nextn_predict_layers = 1), 0 for ngram. The k passes of a step: the first over "
        "all the step's tokens, the other k - 1 over one token per drafting request "
        "(vllm/v1/spec_decode/eagle.py, EagleProposer.propose).")

    @field_validator("acceptance_lengths")
    @classmethod
    def _lengths_fit_k(cls, value: list[float] | None,
                       info: ValidationInfo) -> list[float] | None:
        k = info.data.get("num_speculative_tokens")
        if value is None or k is None:
            return value
        if len(value) != k + 1:
            raise ValueError(f"{len(value)} probabilities for num_speculative_tokens {k}: give "
                             f"k + 1 = {k + 1}, of 0 .. {k} drafts accepted")
        total = sum(value)
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"the probabilities sum to {total:.6g}, not 1")
        return value

    @model_validator(mode="after")
    def _one_acceptance_model(self) -> SpeculativeSettings:
        if (self.acceptance_rate is None) == (self.acceptance_lengths is None):
            raise ValueError("give acceptance_rate or acceptance_lengths (exactly one): how "
                             "often drafts are accepted")
        return self

    def acceptance_cdf(self) -> tuple[float, ...]:
        """``P(accepted <= j)`` for ``j = 0 .. k - 1``."""
        k = self.num_speculative_tokens
        if self.acceptance_lengths is not None:
            probabilities = self.acceptance_lengths
        else:
            a = self.acceptance_rate
            assert a is not None
            probabilities = [a ** n * (1.0 - a) for n in range(k)] + [a ** k]
        cdf: list[float] = []
        total = 0.0
        for p in probabilities[:k]:
            total += p
            cdf.append(min(total, 1.0))
        return tuple(cdf)

    @property
    def resolved_draft_layers(self) -> float:
        if self.draft_layers is not None:
            return self.draft_layers
        return 0.0 if self.method == "ngram" else 1.0


class EngineSettings(Strict):
    """vLLM engine arguments (same names and meaning), plus clustersim's step policies.

    Fields left unset take vLLM's defaults for the GPU (``vllm serve``, spec §5.3).
    """

    max_num_batched_tokens: Tokens | None = Field(
        None, description="Token budget of one step (vLLM default depends on the GPU)."
    )
    max_num_seqs: NumRequests | None = Field(
        None, description="Most requests running at once (vLLM default depends on the GPU)."
    )
    max_model_len: Tokens | None = Field(
        None, description="Longest prompt + output; default the model's max_position_embeddings."
    )
    max_num_scheduled_tokens: Tokens | None = Field(
        None, description="Tokens the scheduler may issue per step; default max_num_batched_tokens."
    )
    enable_chunked_prefill: bool = Field(True, description="Split prompts across steps.")
    long_prefill_token_threshold: NonNegativeTokens = Field(
        0, description="Cap on one request's prompt chunk per step; 0 = off."
    )
    long_prefill_token_threshold_adaptive: bool = Field(
        False, description="Floor the cap at max_num_batched_tokens // eligible requests."
    )
    long_prefill_threshold_single_request: bool = Field(
        False, description="Apply the cap even with one eligible request (vLLM before v0.33)."
    )
    policy: QueuePolicy = Field("fcfs", description="Waiting-queue order.")
    scheduler_reserve_full_isl: bool = Field(
        True, description="Admit a request only if its whole input fits in free KV (v0.33)."
    )
    watermark: float = Field(
        0.0, ge=0.0, lt=1.0, description="Share of KV blocks kept free when admitting."
    )
    enable_prefix_caching: bool = Field(True, description="Reuse cached prompt blocks.")
    block_size: Literal[1, 8, 16, 32, 64, 128] = Field(16, description="Tokens per KV block.")
    gpu_memory_utilization: float | None = Field(
        None, gt=0.0, le=1.0, description="Share of GPU memory vLLM may use; default the "
        "vllm_version's: 0.9 before 0.20, 0.92 from 0.20, 1.0 from 0.34 (its extensible KV "
        "cache).")
    num_gpu_blocks_override: Annotated[int, Within(
        low=2, high=MAX_COUNT, reason="block 0 is reserved, and vLLM counts blocks in int32; "
        "the blocks must also fit the GPU's memory")] | None = Field(
        None, description="Use exactly this many KV blocks (block 0 is reserved); they must "
        "fit the GPU's memory."
    )
    async_scheduling: bool | None = Field(
        None, description="Schedule step N+1 while step N runs; the step's per-step and "
        "per-request host time then overlaps the GPU's work and counts only where it "
        "outlasts it. Default: vLLM's for vllm_version, on from 0.14 (vLLM PR #27614, "
        "v0.14.0 release notes), where clustersim models it (not with pipeline parallelism, "
        "speculative decoding or data-parallel MoE ranks, which then run synchronously); "
        "true there is refused."
    )
    step_policy: StepPolicy = Field(
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
    decode_reserve_tokens: NonNegativeTokens = Field(
        1, description="balanced: decode tokens served before prompt chunks."
    )
    quantization: QuantMethod | None = Field(
        None, description="vLLM's --quantization: fp8 (online from a 16-bit checkpoint, or an "
        "FP8 checkpoint), awq / awq_marlin, gptq / gptq_marlin, compressed-tensors, modelopt, "
        "modelopt_fp4; default: what the model's quantization_config says (16-bit if none).")
    kv_cache_dtype: KvCacheDType = Field(
        "auto", description="vLLM's --kv-cache-dtype: auto (the model's dtype) or fp8 "
        "(= fp8_e4m3), fp8_e5m2: one byte per cached element.")
    speculative: SpeculativeSettings | None = Field(
        None, description="Speculative decoding (vLLM's --speculative-config); default off. "
        "Runs sync scheduling only (async_scheduling false), one engine per data-parallel "
        "rank of a dense model.")
    expert_imbalance: float | None = Field(
        None, ge=1.0, le=16.0,
        description="Expert parallelism: the busiest rank's routed tokens over the mean, "
        "multiplying its all-to-all bytes and the expert GEMM rows of experts priced by a fit "
        "(1 = perfectly balanced); experts priced on a measured fused-MoE curve keep the "
        "busiest rank the table timed. Default 1 for an expert-parallel group inside one node "
        "(as before); across nodes 1.3 without EPLB and 1.05 with eplb (docs/scenarios.md, "
        "Wide expert parallelism).")
    eplb: bool = Field(
        False, description="Expert-parallel load balancer (vLLM --enable-eplb, SGLang "
        "--enable-eplb): lowers the default expert_imbalance of a group across nodes to 1.05.")
    two_batch_overlap: bool = Field(
        False, description="Two-batch overlap (SGLang --enable-two-batch-overlap, vLLM "
        "--enable-dbo): each step of an expert-parallel group across nodes runs as two "
        "micro-batches of half its tokens, one's all-to-all under the other's work. DeepEP's "
        "normal kernels (prefill) hold 20 of the GPU's SMs while they run, slowing the work "
        "under them; its low-latency ones (decode) hold none. Each micro-batch reads the "
        "weights and pays the fixed costs again, so small batches can come out slower.")
    num_redundant_experts: Annotated[int, Within(
        low=0, high=4096, reason="EPLB adds tens of replicas, not thousands")] = Field(
        0, description="EPLB's redundant expert replicas (vLLM eplb-config "
        "num_redundant_experts, SGLang --ep-num-redundant-experts): the experts plus these "
        "must split evenly over the expert-parallel GPUs (256 + 32 = 288 over 72); their "
        "weights are not counted in memory.")
    kv_offloading_size: Annotated[float, Field(gt=0.0), Within(
        high=MAX_KV_OFFLOADING_GIB, unit="GiB",
        reason="more host memory than a server holds (two sockets take up to 12 TB)")
    ] | None = Field(
        None, description="GiB of host memory for a CPU tier of KV blocks below HBM, per "
        "engine (all its GPUs together; each data-parallel rank its own), as vLLM's "
        "--kv-offloading-size with --kv-offloading-backend native (its OffloadingConnector, "
        "LRU): every full block with a prefix key that a step computes is copied out, and a "
        "request whose prefix misses HBM but hits the tier loads those blocks over PCIe "
        "before its prefill goes on, each GPU over its own link (the topology node's "
        "pcie_link, else the GPU catalog's pcie). Colocated pools; default off.")
    vllm_version: VllmVersion = Field(
        "0.33",
        description="The vLLM release whose start-up memory profile sizes the KV cache "
        "(major.minor, e.g. 0.19): its default gpu_memory_utilization, what its dummy sampler "
        "run holds, whether it subtracts its CUDA-graph estimate (from 0.20), and from 0.34 "
        "its extensible KV cache (docs/how-it-works.md, KV capacity). It also sets "
        "async_scheduling's default (on from 0.14) and the api_server section's per-request "
        "defaults. Default 0.33, the release the scheduler follows.")

    @property
    def resolved_gpu_memory_utilization(self) -> float:
        """``gpu_memory_utilization``, or the default of ``vllm_version``."""
        if self.gpu_memory_utilization is not None:
            return self.gpu_memory_utilization
        from clustersim.cost.vllm_profile import profile_rules

        return profile_rules(self.vllm_version).default_gpu_memory_utilization
