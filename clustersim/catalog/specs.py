"""Validated GPU and model specs: what the catalog YAML files and HF ``config.json`` become.

Both are frozen pydantic models (hashable, safe to share and cache). ``ModelSpec`` derives the
numbers the cost and memory models need (parameter count, weight bytes, KV bytes per token)
from the architecture fields alone, so a user's ``config.json`` gets the same treatment as a
catalog entry.
"""

from __future__ import annotations

import itertools
from functools import lru_cache
from typing import Annotated, Literal, NamedTuple

from pydantic import (
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    model_validator,
)

from clustersim.catalog.quantization import QuantizationSpec
from clustersim.errors import ConfigError
from clustersim.limits import (
    MAX_MODEL_WIDTH,
    MAX_NUM_EXPERTS,
    MAX_NUM_LAYERS,
    MAX_OVERHEAD_S,
    MAX_TOKENS,
    MAX_VOCAB_SIZE,
    TOKENS_REASON,
    NonNegativeTokens,
    Tokens,
    Within,
)
from clustersim.validation import Strict

GIGA = 1e9
TERA = 1e12

DType = Literal["bfloat16", "float16"]
KvCacheDType = Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2"]
"""vLLM's ``--kv-cache-dtype`` (vllm/config/cache.py ``CacheDType``; ``fp8`` means E4M3)."""

DTYPE_BYTES: dict[str, int] = {
    "float32": 4,
    "bfloat16": 2,
    "float16": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
}
"""Bytes per element of the dtypes weights and KV caches are stored in."""

KV_CACHE_DTYPE_BYTES: dict[str, int] = {"fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}
"""Bytes per KV element of each ``kv_cache_dtype`` but ``auto`` (the model's dtype)."""

Fraction = Annotated[float, Field(gt=0.0, le=1.0), Within(
    low=1e-3, reason="a kernel or link measured at under 0.1% of its datasheet peak is a "
    "broken measurement, and it would price steps at hours")]
Overhead = Annotated[NonNegativeFloat, Within(
    high=MAX_OVERHEAD_S, unit="s", reason="measured overheads are microseconds to milliseconds")]
"""A fixed cost in seconds that a GPU profile adds per step, layer, request or collective."""
Width = Annotated[PositiveInt, Within(high=MAX_MODEL_WIDTH, reason=(
    "20 times the widest model published (Llama 3.1 405B's MLP: 53,248)"))]
"""A model dimension: a hidden, MLP, expert or head size, or a head count."""

OptionalWidth = Width | None
"""A model dimension that only some architectures have (MLA's ranks and head splits)."""

HalfTokens = Annotated[NonNegativeFloat, Within(high=MAX_TOKENS, reason=TOKENS_REASON)]
"""A fitted half-saturation point or fixed cost, in tokens (may be fractional)."""


WorldSize = Annotated[int, Field(ge=2), Within(
    high=72, reason="the most GPUs one NVLink domain joins (GB200 NVL72)")]
"""GPUs in one tensor-parallel collective."""

Experts = Annotated[NonNegativeInt, Within(
    high=MAX_NUM_EXPERTS, reason="256 times the most experts of any model (DeepSeek-V3: 256)")]


class _Spec(Strict):
    """Base of the catalog specs: the input models' strict, frozen, finite-only base."""


class LinkSpec(_Spec):
    """A GPU-to-GPU path inside one node, as tensor-parallel collectives see it."""

    kind: Literal["nvlink", "nvlink_bridge", "pcie", "infinity_fabric"]
    bw_gb_per_s_per_dir: PositiveFloat = Field(
        description="Theoretical bandwidth per direction per GPU (GB/s = 1e9 B/s)."
    )
    efficiency: Fraction = Field(description="Achieved all-reduce bus bandwidth / theoretical.")
    max_gpus: PositiveInt = Field(description="Most GPUs this link joins (an NVLink bridge: 2).")
    host_gpus: PositiveInt | None = Field(
        None, description="Of those, how many one host holds (one operating system, one vLLM "
        "node: a Grace-Blackwell compute tray's 4 of its NVL72 rack's 72); None: all of them. "
        "vLLM's custom all-reduce stays inside one host.")
    source: str

    @model_validator(mode="after")
    def _host_within_link(self) -> LinkSpec:
        if self.host_gpus is not None and (self.host_gpus > self.max_gpus
                                           or self.max_gpus % self.host_gpus):
            raise ValueError(f"host_gpus {self.host_gpus} must divide max_gpus {self.max_gpus}")
        return self

    @property
    def effective_bytes_per_s(self) -> float:
        return self.bw_gb_per_s_per_dir * GIGA * self.efficiency


class GemmFit(_Spec):
    """The saturating GEMM roofline of one kernel family, fitted on its own measurements:
    ``floor_s + max((M + compute_half_tokens) x FLOPs / (compute_efficiency x peak), bytes /
    (memory_efficiency x bandwidth))``."""

    compute_efficiency: Fraction
    compute_half_tokens: HalfTokens
    memory_efficiency: Fraction
    floor_s: Overhead = Field(
        0.0, description="GPU time every call takes whatever its size (launch and tail of the "
        "kernel), added to the roofline; 0: a plain roofline.")
    calibration: str = Field(description="The fit it came from ('fit-v1:l40s', or "
                             "'fit-v1:l40s->rtx4090' where borrowed).")


class AllReduceCurve(_Spec):
    """One all-reduce measured at rising message sizes among ``gpus`` GPUs: a message between
    two points is priced on the line between them, past the last on the last segment's slope,
    below the first at the first point's time."""

    gpus: WorldSize
    points: tuple[tuple[PositiveFloat, Overhead], ...] = Field(
        description="``[message bytes, seconds]`` per measured size, in rising size.")

    @model_validator(mode="after")
    def _rises(self) -> AllReduceCurve:
        if len(self.points) < 2:
            raise ValueError(f"needs at least 2 points, got {len(self.points)}")
        for (b0, t0), (b1, t1) in itertools.pairwise(self.points):
            if not b1 > b0 or t1 < t0:
                raise ValueError(f"[{b1:g}, {t1:g}] after [{b0:g}, {t0:g}]: sizes must rise "
                                 "and a larger message cannot take less time")
        return self


MoeDType = Literal["bfloat16", "fp8", "fp8_block", "int4_wo", "w4a16_mxfp4", "nvfp4"]
"""The expert formats NVIDIA aiconfigurator measures vLLM's fused MoE in (its ``moe_dtype``):
16-bit, FP8 W8A8 with per-tensor scales, FP8 W8A8 with 128x128 block scales, 4-bit integer
weight-only (group 128), MXFP4 weights with 16-bit activations, NVFP4 W4A4 (one FP8 scale per
16)."""


class MoeCurve(_Spec):
    """One fused-MoE layer call measured on one GPU at rising token counts, for one expert
    shape split one way: ``moe_tp`` GPUs each hold every expert's ``1/moe_tp`` slice, or
    ``moe_ep`` GPUs each hold ``1/moe_ep`` of the experts whole. ``tokens`` are those entering
    the layer (with expert parallelism, the whole group's: one GPU works on ``tokens x topk /
    moe_ep`` routed rows). A token count between two points is priced on the line between
    them, past the last on the last segment's slope, below the first at the first point."""

    hidden_size: Width
    inter_size: Width = Field(description="The model's expert width, before any split.")
    topk: Annotated[PositiveInt, Within(high=MAX_NUM_EXPERTS, reason="top-k <= experts")]
    num_experts: Annotated[PositiveInt, Within(
        high=MAX_NUM_EXPERTS, reason="256 times the most experts of any model")]
    moe_tp: Annotated[PositiveInt, Within(high=MAX_NUM_EXPERTS, reason="a split of the experts")]
    moe_ep: Annotated[PositiveInt, Within(high=MAX_NUM_EXPERTS, reason="a split of the experts")]
    points: tuple[tuple[PositiveFloat, Overhead], ...] = Field(
        description="``[tokens, seconds]`` per measured token count, in rising tokens.")

    @model_validator(mode="after")
    def _rises(self) -> MoeCurve:
        if len(self.points) < 2:
            raise ValueError(f"needs at least 2 points, got {len(self.points)}")
        for (n0, t0), (n1, t1) in itertools.pairwise(self.points):
            if not n1 > n0 or t1 < t0:
                raise ValueError(f"[{n1:g}, {t1:g}] after [{n0:g}, {t0:g}]: token counts must "
                                 "rise and more tokens cannot take less time")
        return self

    def matches(self, hidden: int, inter: int, topk: int, experts: int, moe_tp: int,
                moe_ep: int) -> bool:
        return (self.hidden_size, self.inter_size, self.topk, self.num_experts, self.moe_tp,
                self.moe_ep) == (hidden, inter, topk, experts, moe_tp, moe_ep)


class MoeKernelSpec(_Spec):
    """vLLM's fused-MoE kernel for one expert format, as measured on this GPU: the table's
    curves price the shapes it holds, the fit the others."""

    dtype: MoeDType
    kernel: str = Field(
        min_length=1, max_length=64,
        description="The expert kernel vLLM runs for this format (triton, flashinfer_cutlass, "
        "marlin, triton_mxfp4).")
    table: str = Field(
        min_length=1, max_length=200,
        description="Where the measurements come from (file, framework version, routing).")
    fit: GemmFit = Field(
        description="The floored saturating roofline over the table's rows, both projections "
        "of a layer at once, ``floor_s`` once per layer; weights as the format stores them.")
    fit_rms_log_error: NonNegativeFloat = Field(
        description="The fit's rms log error over the rows it was fitted on.")
    curves: tuple[MoeCurve, ...] = Field(
        (), description="Measured layer times of the catalog's expert shapes; empty where "
        "borrowed from another GPU (a fit transfers to its peaks, a time does not).")

    def curve(self, hidden: int, inter: int, topk: int, experts: int, moe_tp: int,
              moe_ep: int) -> MoeCurve | None:
        """The measured curve of this shape and split, if the table has one."""
        for curve in self.curves:
            if curve.matches(hidden, inter, topk, experts, moe_tp, moe_ep):
                return curve
        return None


class DeepEpCalls(_Spec):
    """DeepEP's dispatch and combine measured on this GPU's NVLink (one node): each call's
    fixed time, at the fewest tokens measured, which a group across nodes pays besides its
    bytes and its NIC path's latency (clustersim.cost.collectives.AllToAll)."""

    low_latency_dispatch_s: Overhead
    low_latency_combine_s: Overhead
    normal_dispatch_s: Overhead
    normal_combine_s: Overhead
    table: str = Field(min_length=1, max_length=200,
                       description="Where the measurements come from.")


class GpuSpec(_Spec):
    """One accelerator: datasheet peaks, links, and the default efficiencies that price work."""

    id: str
    name: str
    bf16_dense_tflops: PositiveFloat = Field(
        description="Dense BF16/FP16 tensor peak with FP32 accumulate (what PyTorch GEMMs use)."
    )
    fp8_dense_tflops: PositiveFloat | None = Field(description="None where there is no FP8.")
    int8_dense_tops: PositiveFloat | None = Field(
        None, description="Dense INT8 tensor peak (TOPS); None where not in the catalog.")
    fp4_dense_tflops: PositiveFloat | None = Field(
        None, description="Dense FP4 tensor peak; None where there is no FP4 tensor core.")
    platform: Literal["cuda", "rocm"] = Field(
        "cuda", description="vLLM's platform: which quantization methods it accepts at all.")
    compute_capability: str | None = Field(
        None, pattern=r"^[0-9]+\.[0-9]$",
        description="What vLLM's get_device_capability() reports, 'major.minor' (8.9 = Ada); "
        "each quantization method has a minimum. None: unknown, quantization refused.")
    sm_count: PositiveInt | None = Field(
        None, description="Streaming multiprocessors: what DeepEP's normal kernels take a share "
        "of under two-batch overlap, and how many vocabulary rows vLLM's Triton top-k/top-p "
        "buffer holds; None where not in the catalog.")
    mem_capacity_bytes: PositiveInt = Field(description="Device memory the framework can see.")
    mem_bw_gb_per_s: PositiveFloat
    link: LinkSpec = Field(description="The fastest intra-node path for TP collectives.")
    pcie_gen: PositiveInt
    pcie: LinkSpec = Field(description="PCIe fallback when TP spans more GPUs than ``link``.")
    compute_efficiency: Fraction = Field(description="Large-GEMM MFU.")
    compute_half_tokens: HalfTokens = Field(
        0.0,
        description="Tokens at which a GEMM reaches half of ``compute_efficiency``: small-M "
        "GEMMs run at ``compute_efficiency x tokens / (tokens + compute_half_tokens)``.",
    )
    gemm_floor_s: Overhead = Field(
        0.0, description="Per GEMM call: GPU time the kernel takes whatever its size, added to "
        "its roofline (the 16-bit fit's ``floor_s``).")
    attention_efficiency: Fraction = Field(
        description="Prefill attention MFU on long prompts (the saturated value).")
    attention_half_keys: HalfTokens = Field(
        0.0, description="Keys per query at which prefill attention reaches half of "
        "``attention_efficiency``: a chunk whose queries attend to K keys on average runs at "
        "``attention_efficiency x K / (K + attention_half_keys)``.")
    attention_floor_s: Overhead = Field(
        0.0, description="Per layer and step: GPU time of the attention kernel whatever its "
        "batch (one varlen call serves the step's prefills and decodes).")
    decode_attention_memory_efficiency: Fraction | None = Field(
        None, description="Achieved / peak bandwidth of decode attention's KV reads; None: "
        "``memory_efficiency``.")
    decode_attention_half_tokens: HalfTokens = Field(
        0.0, description="Per decoding sequence and layer: a fixed cost, in tokens of KV read "
        "(a sequence of context c costs as c + this many tokens).")
    fp8_gemm: GemmFit | None = Field(
        None, description="FP8 W8A8 GEMMs at the FP8 peak (fitted on per-tensor-scale kernels, "
        "used for block-scaled ones too); None: the 16-bit efficiencies at the FP8 peak.")
    fp4_gemm: GemmFit | None = Field(
        None, description="NVFP4 W4A4 GEMMs at the FP4 peak, fitted on the GPU's own NVFP4 "
        "table; None: the FP8 fit at the FP4 peak (clustersim.cost.kernels).")
    moe_gemm: GemmFit | None = Field(
        None, description="16-bit experts in vLLM's fused MoE (Triton): both projections of a "
        "layer priced on this fit, ``floor_s`` once per layer, where ``moe_kernels`` has no "
        "16-bit entry; None: the 16-bit GEMM fit.")
    moe_kernels: tuple[MoeKernelSpec, ...] = Field(
        (), description="vLLM's fused-MoE kernels measured on this GPU, one per expert format "
        "and kernel (clustersim.cost.moe picks the one vLLM runs); a format without one is "
        "priced as its dense GEMMs are.")
    deepep_calls: DeepEpCalls | None = Field(
        None, description="DeepEP's per-call dispatch and combine times measured on ``link``; "
        "None: the cited defaults (clustersim.cost.collectives).")
    weight_only_compute_ratio: Fraction = Field(
        1.0, description="Throughput of a weight-only (W4A16, W8A16) Marlin GEMM where it is "
        "compute-bound, relative to the 16-bit GEMM: the cost of dequantizing in registers.")
    memory_efficiency: Fraction = Field(description="Achieved / peak HBM bandwidth.")
    small_kernel_floor_s: Overhead = Field(
        0.0, description="Per call of a small memory-bound kernel (a norm, the rotary "
        "embedding, an activation; clustersim.cost.small_kernels): GPU time it takes whatever "
        "its size; 0: none (a profile whose per-layer overhead holds them).")
    small_kernel_cta_s_per_byte: NonNegativeFloat = Field(
        0.0, description="Seconds per byte of one token's row through one thread block of a "
        "small kernel: what a batch smaller than the GPU's blocks takes beyond the floor.")
    small_kernel_memory_efficiency: Fraction | None = Field(
        None, description="Achieved / peak bandwidth of the small kernels and the sampler "
        "on large batches; None: ``memory_efficiency``.")
    per_step_overhead_s: Overhead = Field(description="Scheduler + launch cost per step.")
    per_layer_overhead_s: Overhead = Field(
        description="Per layer, beyond its kernels' GPU time: launches and gaps a CUDA-graph "
        "replay leaves.")
    per_request_overhead_s: Overhead = Field(description="Input prep per request.")
    allreduce_latency_s: Overhead = Field(description="Fixed cost of one all-reduce.")
    custom_allreduce_latency_s: Overhead | None = Field(
        None, description="Fixed cost of vLLM's custom (peer-to-peer) all-reduce, used below "
        "its size limit where vLLM enables it (clustersim.cost.collectives); None: not "
        "measured, NCCL's cost at every size.")
    custom_allreduce_link_efficiency: Fraction | None = Field(
        None, description="vLLM custom all-reduce bus bandwidth / the link's theoretical.")
    allreduce_curves: tuple[AllReduceCurve, ...] = Field(
        (), description="vLLM's tensor-parallel all-reduce as measured on ``link``, one curve "
        "per world size. A world size with a curve is priced on it in place of the latency and "
        "bandwidth fits, which price the sizes without one and groups on slower links "
        "(clustersim.cost.collectives).")
    allgather_latency_s: Overhead | None = Field(
        None, description="Fixed cost of one all-gather; None: as an all-reduce.")
    allgather_link_efficiency: Fraction | None = Field(
        None, description="All-gather bus bandwidth / the link's theoretical; None: as an "
        "all-reduce (``link.efficiency``).")
    reduce_scatter_latency_s: Overhead | None = Field(
        None, description="Fixed cost of one reduce-scatter; None: as an all-reduce.")
    reduce_scatter_link_efficiency: Fraction | None = Field(
        None, description="Reduce-scatter bus bandwidth / the link's theoretical; None: as an "
        "all-reduce.")
    non_torch_memory_bytes: NonNegativeInt = Field(
        description="Memory outside PyTorch that grows during vLLM's start-up profile on one "
        "GPU (kernels loaded on first use, library workspaces): its 'non-torch memory'.")
    tp_non_torch_memory_bytes: NonNegativeInt = Field(
        0, description="What each rank of a tensor-parallel group adds to it (NCCL's buffers, "
        "vLLM's custom all-reduce).")
    calibration: str = Field(description="Provenance of the efficiencies: 'default' or a fit id.")
    source: str

    @model_validator(mode="after")
    def _one_moe_kernel_a_format(self) -> GpuSpec:
        keys = [(k.dtype, k.kernel) for k in self.moe_kernels]
        if len(set(keys)) < len(keys):
            raise ValueError(f"moe_kernels: two entries for one format and kernel ({keys})")
        return self

    def moe_kernel(self, dtype: str, kernel: str) -> MoeKernelSpec | None:
        """The measured fused-MoE kernel of ``dtype`` experts run by ``kernel``, if any."""
        for entry in self.moe_kernels:
            if entry.dtype == dtype and entry.kernel == kernel:
                return entry
        return None

    @model_validator(mode="after")
    def _one_curve_a_size(self) -> GpuSpec:
        sizes = [curve.gpus for curve in self.allreduce_curves]
        if len(set(sizes)) < len(sizes):
            raise ValueError(f"allreduce_curves: two curves for one world size ({sizes})")
        return self

    @model_validator(mode="after")
    def _memory_left(self) -> GpuSpec:
        reserved = self.non_torch_memory_bytes + self.tp_non_torch_memory_bytes
        if reserved >= self.mem_capacity_bytes:
            raise ValueError(f"non_torch_memory_bytes + tp_non_torch_memory_bytes {reserved:,} "
                             f"leave nothing of the {self.mem_capacity_bytes:,} bytes of memory")
        return self

    @property
    def peak_flops(self) -> float:
        return self.bf16_dense_tflops * TERA

    @property
    def capability(self) -> int | None:
        """``compute_capability`` as vLLM's ``DeviceCapability.to_int()``: 8.9 -> 89."""
        if self.compute_capability is None:
            return None
        major, minor = self.compute_capability.split(".")
        return int(major) * 10 + int(minor)

    @property
    def mem_bytes_per_s(self) -> float:
        return self.mem_bw_gb_per_s * GIGA

    def collective(
        self, kind: Literal["all_gather", "reduce_scatter"], num_gpus: int
    ) -> tuple[float, float]:
        """``(latency s, bandwidth relative to an all-reduce's)`` of one collective among
        ``num_gpus``: measured where the profile has it and the collective runs over ``link``
        (the samples' link), else the all-reduce's; never faster than the all-reduce."""
        latency, efficiency = (
            (self.allgather_latency_s, self.allgather_link_efficiency)
            if kind == "all_gather"
            else (self.reduce_scatter_latency_s, self.reduce_scatter_link_efficiency)
        )
        on_link = self.tp_link(num_gpus) is self.link
        speed = 1.0 if efficiency is None or not on_link else efficiency / self.link.efficiency
        return (self.allreduce_latency_s if latency is None else latency, min(1.0, speed))

    def allreduce_curve(self, gpus: int) -> AllReduceCurve | None:
        """The measured all-reduce curve among ``gpus`` GPUs on ``link``, if there is one."""
        for curve in self.allreduce_curves:
            if curve.gpus == gpus:
                return curve
        return None

    @property
    def gpus_per_host(self) -> int:
        """GPUs one host (one operating system, one vLLM node) holds: the link's
        ``host_gpus`` where its NVLink domain spans hosts (an NVL72 rack's compute tray),
        else every GPU its links join (an 8-GPU server)."""
        if self.link.host_gpus is not None:
            return self.link.host_gpus
        return max(self.link.max_gpus, self.pcie.max_gpus)

    def tp_link(self, tp: int) -> LinkSpec:
        """The link a ``tp``-way all-reduce runs over: ``link`` if it joins that many GPUs."""
        if tp <= self.link.max_gpus:
            return self.link
        if tp <= self.pcie.max_gpus:
            return self.pcie
        if self.link.host_gpus is not None:  # the NVLink domain spans hosts: a rack
            raise ConfigError(
                "tensor_parallel_size",
                f"{tp} GPUs exceed the {self.link.max_gpus} that one {self.id} rack joins in "
                "its NVLink domain; tensor parallelism across NVLink domains is not modelled",
            )
        raise ConfigError(
            "tensor_parallel_size",
            f"{tp} GPUs exceed the {max(self.link.max_gpus, self.pcie.max_gpus)} that one "
            f"{self.id} node connects; tensor parallelism across nodes is not modelled",
        )


class ModelSpec(_Spec):
    """A decoder-only transformer, described by its HF config fields.

    A mixture-of-experts model (``num_experts > 0``) replaces the MLP of every layer from
    ``first_k_dense_replace`` on with ``num_experts`` gated experts of width
    ``moe_intermediate_size`` behind an ``h x E`` router, of which each token runs
    ``num_experts_per_tok``, plus ``num_shared_experts`` experts every token runs (DeepSeek's
    shared experts, one gated MLP ``num_shared_experts x moe_intermediate_size`` wide, as vLLM's
    ``DeepseekV2MoE`` builds it); the first ``first_k_dense_replace`` layers keep a dense MLP of
    width ``intermediate_size`` (unused when there are none). Dense-MLP layers between MoE
    layers (``decoder_sparse_step``, ``moe_layer_freq`` > 1) are not modelled.

    Multi-head latent attention (DeepSeek-V2/V3, ``kv_lora_rank`` set) caches one latent vector
    of ``kv_lora_rank + qk_rope_head_dim`` elements per token and layer, shared by every head;
    queries go through a ``q_lora_rank`` bottleneck (``q_a_proj``/``q_b_proj``; a plain
    ``q_proj`` when None), keys and values are up-projected from the latent by ``kv_b_proj``.
    ``head_dim`` is then the query/key head size ``qk_nope_head_dim + qk_rope_head_dim`` and
    ``num_key_value_heads`` is unused (vLLM caches the latent as one head: see
    :meth:`kv_bytes_per_token`).
    """

    id: str
    hf_repo: str | None = None
    num_layers: Annotated[PositiveInt, Within(
        high=MAX_NUM_LAYERS, reason="eight times the deepest model published (126 layers)")]
    hidden_size: Width
    num_attention_heads: Width
    num_key_value_heads: Width
    head_dim: Width
    intermediate_size: Width
    vocab_size: Annotated[PositiveInt, Within(
        high=MAX_VOCAB_SIZE, reason="64 times the largest vocabulary in use (256K)")]
    max_position_embeddings: Tokens
    tie_word_embeddings: bool
    dtype: DType
    mlp: Literal["gated", "plain"] = Field(
        description="gated: SwiGLU gate/up/down (3 matrices); plain: fc1/fc2 (2 matrices)."
    )
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = Field(False, description="Per-head RMSNorm on q and k (Qwen3).")
    qk_norm_across_heads: bool = Field(
        False, description="RMSNorm on q and on k over all heads of a layer at once (MiniMax-M2: "
        "qk_norm_type per_layer): under TP the ranks all-reduce each token's partial variances."
    )
    norm: Literal["rmsnorm", "layernorm"] = Field(
        "rmsnorm", description="layernorm carries a bias as well as a weight."
    )
    learned_position_rows: NonNegativeTokens = Field(
        0, description="Rows of a learned position table (OPT: max_pos + 2); 0 for RoPE."
    )
    num_experts: Experts = Field(0, description="Routed experts per layer; 0 for dense.")
    num_experts_per_tok: Experts = Field(
        0, description="Experts each token is routed to (top-k); 0 for dense."
    )
    moe_intermediate_size: Annotated[NonNegativeInt, Within(
        high=MAX_MODEL_WIDTH, reason="20 times the widest model published")] = Field(
        0, description="Intermediate width of one expert (Mixtral: its intermediate_size)."
    )
    num_shared_experts: Experts = Field(
        0, description="Shared experts every token runs in each MoE layer (DeepSeek's "
        "n_shared_experts), each moe_intermediate_size wide; 0: none.")
    num_expert_groups: Experts = Field(
        0, description="Groups of consecutive routed experts the router chooses among first "
        "(DeepSeek's n_group): each token's experts come from topk_expert_groups of them; 0 "
        "or 1: no grouping.")
    topk_expert_groups: Experts = Field(
        0, description="Groups each token's experts may come from (DeepSeek's topk_group), "
        "chosen by their best experts' scores; 0: every group.")
    first_k_dense_replace: Annotated[NonNegativeInt, Within(
        high=MAX_NUM_LAYERS, reason="eight times the deepest model published (126 layers)")] = (
        Field(0, description="Leading layers whose MLP stays dense (intermediate_size wide) "
              "in a MoE model (DeepSeek's first_k_dense_replace); 0: every layer is MoE."))
    q_lora_rank: OptionalWidth = Field(
        None, description="MLA: the query bottleneck (q_a_proj h -> q_lora_rank, q_b_proj "
        "q_lora_rank -> heads x head_dim); None: a plain q_proj (or not MLA).")
    kv_lora_rank: OptionalWidth = Field(
        None, description="MLA: the compressed KV latent each token caches per layer; None: "
        "standard (grouped-query) attention.")
    qk_nope_head_dim: OptionalWidth = Field(
        None, description="MLA: per-head query/key dimensions without rotary embedding.")
    qk_rope_head_dim: OptionalWidth = Field(
        None, description="MLA: per-head query/key dimensions with rotary embedding; the key "
        "part is shared by all heads and cached beside the latent.")
    v_head_dim: OptionalWidth = Field(None, description="MLA: per-head value dimensions.")
    sliding_window: Tokens | None = Field(
        None, description="Tokens a sliding-window attention layer attends to, its own "
        "included (the config's sliding_window); None: every layer attends to the whole "
        "context.")
    sliding_window_layers: Annotated[NonNegativeInt, Within(
        high=MAX_NUM_LAYERS, reason="eight times the deepest model published (126 layers)")] = (
        Field(0, description="Layers that attend through the sliding window (the config's "
              "layer_types entries 'sliding_attention'; every layer where it has none); the "
              "others attend to the whole context. 0 without sliding_window."))
    attention_sinks: bool = Field(
        False, description="A learned sink logit per attention head and layer that joins "
        "every softmax (gpt-oss); its weights count, its FLOPs do not.")
    quantization: QuantizationSpec | None = Field(
        None, description="How the linear layers are stored (the config's quantization_config, "
        "or what the engine's --quantization makes of it); None: in dtype.")
    kv_cache_dtype: KvCacheDType = Field(
        "auto", description="KV cache element type the engine stores; auto: dtype.")
    source: str

    @model_validator(mode="after")
    def _heads_group_evenly(self) -> ModelSpec:
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_attention_heads {self.num_attention_heads} is not a multiple of "
                f"num_key_value_heads {self.num_key_value_heads}"
            )
        return self

    @model_validator(mode="after")
    def _one_qk_norm(self) -> ModelSpec:
        if self.qk_norm and self.qk_norm_across_heads:
            raise ValueError("qk_norm (per head) and qk_norm_across_heads (per layer) exclude "
                             "each other")
        return self

    @model_validator(mode="after")
    def _experts_are_complete(self) -> ModelSpec:
        moe = (self.num_experts, self.num_experts_per_tok, self.moe_intermediate_size)
        if not self.num_experts:
            if any(moe):
                raise ValueError(
                    "num_experts_per_tok and moe_intermediate_size need num_experts > 0"
                )
            return self
        if not 1 <= self.num_experts_per_tok <= self.num_experts:
            raise ValueError(
                f"num_experts_per_tok {self.num_experts_per_tok} must be in "
                f"[1, num_experts {self.num_experts}]"
            )
        if not self.moe_intermediate_size:
            raise ValueError("a mixture-of-experts model needs moe_intermediate_size > 0")
        if self.mlp != "gated":
            raise ValueError("experts are modelled as gated MLPs")
        if self.first_k_dense_replace >= self.num_layers:
            raise ValueError(
                f"first_k_dense_replace {self.first_k_dense_replace} leaves no MoE layer of "
                f"the {self.num_layers}"
            )
        return self

    @model_validator(mode="after")
    def _expert_groups_divide_the_experts(self) -> ModelSpec:
        groups, chosen = self.num_expert_groups, self.topk_expert_groups
        if not groups and not chosen:
            return self
        if not self.num_experts:
            raise ValueError("num_expert_groups and topk_expert_groups need num_experts > 0")
        if not groups or self.num_experts % groups:
            raise ValueError(f"num_expert_groups {groups} must divide num_experts "
                             f"{self.num_experts}")
        if not 1 <= chosen <= groups:
            raise ValueError(f"topk_expert_groups {chosen} must be in [1, num_expert_groups "
                             f"{groups}]")
        if chosen * (self.num_experts // groups) < self.num_experts_per_tok:
            raise ValueError(f"{chosen} groups of {self.num_experts // groups} experts cannot "
                             f"hold a token's {self.num_experts_per_tok}")
        return self

    @property
    def expert_group_limit(self) -> tuple[int, int] | None:
        """(groups, groups a token may use) where the router limits a token's experts to
        some groups (DeepSeek-V3: 8 groups of 32, 4 of them); None: any expert."""
        groups, chosen = self.num_expert_groups, self.topk_expert_groups
        return (groups, chosen) if groups > 1 and chosen < groups else None

    @model_validator(mode="after")
    def _dense_moe_fields_need_experts(self) -> ModelSpec:
        if not self.num_experts and (self.num_shared_experts or self.first_k_dense_replace):
            raise ValueError("num_shared_experts and first_k_dense_replace need num_experts > 0")
        return self

    @model_validator(mode="after")
    def _latent_attention_is_complete(self) -> ModelSpec:
        parts = {"qk_nope_head_dim": self.qk_nope_head_dim,
                 "qk_rope_head_dim": self.qk_rope_head_dim, "v_head_dim": self.v_head_dim}
        if self.kv_lora_rank is None:
            given = [k for k, v in {"q_lora_rank": self.q_lora_rank, **parts}.items()
                     if v is not None]
            if given:
                raise ValueError(f"{', '.join(given)} need kv_lora_rank (multi-head latent "
                                 "attention)")
            return self
        missing = [k for k, v in parts.items() if v is None]
        if missing:
            raise ValueError(f"multi-head latent attention (kv_lora_rank) needs "
                             f"{', '.join(missing)}")
        assert self.qk_nope_head_dim is not None and self.qk_rope_head_dim is not None
        if self.head_dim != self.qk_nope_head_dim + self.qk_rope_head_dim:
            raise ValueError(
                f"with multi-head latent attention head_dim is the query/key head size "
                f"qk_nope_head_dim + qk_rope_head_dim = "
                f"{self.qk_nope_head_dim + self.qk_rope_head_dim}, got {self.head_dim}"
            )
        if self.qkv_bias or self.o_bias or self.qk_norm or self.qk_norm_across_heads:
            raise ValueError("multi-head latent attention is modelled without attention biases "
                             "or q/k norms")
        return self

    @model_validator(mode="after")
    def _sliding_window_is_complete(self) -> ModelSpec:
        if self.sliding_window is None:
            if self.sliding_window_layers:
                raise ValueError("sliding_window_layers needs sliding_window")
            return self
        if not 1 <= self.sliding_window_layers <= self.num_layers:
            raise ValueError(f"sliding_window_layers must be in [1, num_layers "
                             f"{self.num_layers}] with a sliding_window, got "
                             f"{self.sliding_window_layers}")
        if self.is_mla:
            raise ValueError("sliding-window attention is not modelled with multi-head latent "
                             "attention")
        full = self.num_layers - self.sliding_window_layers
        if not full:
            raise ValueError("every layer has a sliding window: KV caches without a "
                             "full-attention layer are not modelled")
        if full > self.sliding_window_layers:
            raise ValueError(
                f"{full} full-attention layers beside {self.sliding_window_layers} "
                "sliding-window ones: KV-cache layouts with more full-attention than "
                "sliding-window layers are not modelled")
        return self

    # ---------------------------------------------------------------- derived
    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def mlp_matrices(self) -> int:
        """Weight matrices of the MLP, each hidden x intermediate."""
        return 3 if self.mlp == "gated" else 2

    @property
    def q_size(self) -> int:
        return self.num_attention_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_key_value_heads * self.head_dim

    def kv_heads_per_gpu(self, tp: int = 1) -> int:
        """KV heads each TP rank stores; vLLM replicates them when there are fewer than ``tp``."""
        return max(1, self.num_key_value_heads // tp)

    @property
    def kv_dtype_bytes(self) -> int:
        """Bytes of one cached K or V element: ``kv_cache_dtype``'s, or ``dtype``'s for auto."""
        return KV_CACHE_DTYPE_BYTES.get(self.kv_cache_dtype, self.dtype_bytes)

    @property
    def is_mla(self) -> bool:
        """Multi-head latent attention (DeepSeek-V2/V3)."""
        return self.kv_lora_rank is not None

    @property
    def mla_latent_dim(self) -> int:
        """Elements an MLA layer caches per token: the latent and the shared rotary key."""
        assert self.kv_lora_rank is not None and self.qk_rope_head_dim is not None
        return self.kv_lora_rank + self.qk_rope_head_dim

    @property
    def o_in_size(self) -> int:
        """Input width of o_proj: every head's value output."""
        if self.is_mla:
            assert self.v_head_dim is not None
            return self.num_attention_heads * self.v_head_dim
        return self.q_size

    def kv_bytes_per_token(self, tp: int = 1, kv_dtype_bytes: int | None = None) -> int:
        """KV-cache bytes one token occupies on one TP rank, over all layers.

        Standard attention: K and V of this rank's KV heads. Multi-head latent attention: one
        ``kv_lora_rank + qk_rope_head_dim`` vector per layer, whatever ``tp``: vLLM caches it
        as a single head (``ModelConfig.get_num_kv_heads`` returns 1 under MLA, "When using MLA
        during decode it becomes MQA"; ``get_head_size`` is ``kv_lora_rank +
        qk_rope_head_dim``; ``MLAAttentionSpec`` pages hold ``block_size x 1 x head_size`` of
        the cache dtype, no separate K and V), so every TP rank holds the whole latent cache of
        its requests: replicated, not split. DeepSeek-V3 (512 + 64, 61 layers): 70,272 B in
        16 bits, 35,136 B in FP8."""
        elem = self.kv_dtype_bytes if kv_dtype_bytes is None else kv_dtype_bytes
        if self.is_mla:
            return self.num_layers * self.mla_latent_dim * elem
        return 2 * self.num_layers * self.kv_heads_per_gpu(tp) * self.head_dim * elem

    @property
    def num_full_attention_layers(self) -> int:
        """Layers that attend to the whole context (every layer without a sliding window)."""
        return self.num_layers - self.sliding_window_layers

    @property
    def kv_group_layers(self) -> int:
        """Layers one KV block covers. vLLM's hybrid KV-cache manager (``kv_cache_utils.
        _get_kv_cache_groups_uniform_page_size``) cuts the layers of each attention type into
        groups of the smallest type's layer count; one block is one page of every layer of
        one group, and the pool's blocks serve every group (one full-attention group: the
        validators refuse more full-attention than sliding-window layers). One attention type:
        every layer (one group)."""
        full, window = self.num_full_attention_layers, self.sliding_window_layers
        return min(full, window) if window else self.num_layers

    @property
    def kv_window_groups(self) -> int:
        """Sliding-window KV-cache groups (0 without a window): each holds a request's blocks
        within the window only."""
        return -(-self.sliding_window_layers // self.kv_group_layers)

    def kv_bytes_per_page(self, tp: int = 1, kv_dtype_bytes: int | None = None) -> int:
        """KV bytes one token takes in one block on one TP rank: its entries in the
        :attr:`kv_group_layers` layers of one group (every layer with one attention type)."""
        per_layer = self.kv_bytes_per_token(tp, kv_dtype_bytes) // self.num_layers
        return per_layer * self.kv_group_layers

    def kv_bytes_by_attention(self, tp: int = 1) -> tuple[int, int]:
        """KV bytes one token takes on one TP rank in the full-attention layers and in the
        sliding-window ones (0 without a window): ``kv_bytes_per_token`` split by layer."""
        per_layer = self.kv_bytes_per_token(tp) // self.num_layers
        return (per_layer * self.num_full_attention_layers,
                per_layer * self.sliding_window_layers)

    def kv_cached_bytes(self, num_tokens: int, tp: int = 1) -> int:
        """KV bytes a request of ``num_tokens`` tokens holds on one TP rank once its prompt
        is in: every token in the full-attention layers, the last ``sliding_window`` in the
        sliding-window ones (what a P/D handoff moves)."""
        full, window = self.kv_bytes_by_attention(tp)
        return full * num_tokens + window * min(num_tokens, self.sliding_window or 0)

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def expert_params(self) -> int:
        """Weights of one expert (gate, up and down, hidden x moe_intermediate_size each)."""
        return self.mlp_matrices * self.hidden_size * self.moe_intermediate_size

    @property
    def params_per_layer(self) -> int:
        """All of a layer's parameters: for MoE, every expert and the router (of a MoE layer,
        where leading layers are dense)."""
        return self.layer_params(dense=not self.is_moe)

    def layer_params(self, dense: bool, routed_experts: int | None = None) -> int:
        """One layer's parameters with a dense MLP (``dense``) or a MoE one holding
        ``routed_experts`` of its routed experts (default: all), its shared experts and
        router."""
        experts = self.num_experts if routed_experts is None else routed_experts
        return self._params_per_layer(experts, dense=dense)

    @property
    def num_dense_layers(self) -> int:
        """Layers with a dense MLP: every layer of a dense model, the first
        ``first_k_dense_replace`` of a MoE one."""
        return self.first_k_dense_replace if self.is_moe else self.num_layers

    @property
    def num_moe_layers(self) -> int:
        """Layers whose MLP is a mixture of experts."""
        return self.num_layers - self.num_dense_layers

    @property
    def shared_expert_width(self) -> int:
        """Intermediate width of a MoE layer's shared experts, fused into one gated MLP."""
        return self.num_shared_experts * self.moe_intermediate_size

    def attention_projections(self) -> tuple[tuple[int, int, bool], ...]:
        """``(in, out, sharded)`` of one layer's attention linear layers, unsharded: q/k/v and
        o (standard attention), or MLA's as vLLM's ``DeepseekV2MLAAttention`` builds them:
        ``fused_qkv_a_proj`` h -> q_lora_rank + kv_lora_rank + qk_rope_head_dim, replicated
        on every TP rank (``disable_tp``; without q_lora_rank a replicated
        ``kv_a_proj_with_mqa`` and a column-parallel ``q_proj``), ``q_b_proj`` q_lora_rank ->
        heads x head_dim, ``kv_b_proj`` kv_lora_rank -> heads x (qk_nope_head_dim +
        v_head_dim), ``o_proj`` heads x v_head_dim -> h. ``sharded``: split ``tp`` ways
        (column- or row-parallel)."""
        h = self.hidden_size
        if not self.is_mla:
            return ((h, self.q_size + 2 * self.kv_size, True), (self.q_size, h, True))
        assert self.kv_lora_rank is not None and self.qk_nope_head_dim is not None
        assert self.v_head_dim is not None
        heads, latent = self.num_attention_heads, self.mla_latent_dim
        if self.q_lora_rank is None:
            q: tuple[tuple[int, int, bool], ...] = ((h, latent, False), (h, self.q_size, True))
        else:
            q = ((h, self.q_lora_rank + latent, False), (self.q_lora_rank, self.q_size, True))
        return (*q, (self.kv_lora_rank, heads * (self.qk_nope_head_dim + self.v_head_dim), True),
                (self.o_in_size, h, True))

    @property
    def num_params(self) -> int:
        """Parameters computed from the architecture (embeddings, untied LM head, norms, biases,
        every expert)."""
        return self._params(self.num_experts)

    @property
    def active_params(self) -> int:
        """Parameters one token runs through: ``num_params`` with only the top-k experts of each
        layer (the router counts); equal to ``num_params`` for a dense model."""
        return self._params(self.num_experts_per_tok)

    def _params(self, experts: int) -> int:
        h = self.hidden_size
        embeddings = self.vocab_size * h + self.learned_position_rows * h
        lm_head = 0 if self.tie_word_embeddings else self.vocab_size * h
        final_norm = (2 if self.norm == "layernorm" else 1) * h
        layers = (self.num_dense_layers * self._params_per_layer(experts, dense=True)
                  + self.num_moe_layers * self._params_per_layer(experts, dense=False))
        return embeddings + lm_head + final_norm + layers

    def _params_per_layer(self, experts: int, dense: bool) -> int:
        """A layer's parameters: a dense-MLP one, or a MoE one counting ``experts`` routed
        experts (and the shared experts and the router)."""
        h, f = self.hidden_size, self.intermediate_size
        if self.is_mla:
            assert self.kv_lora_rank is not None
            attention = sum(k * n for k, n, _ in self.attention_projections())
            # RMSNorms on the query bottleneck and on the KV latent
            attention += (self.q_lora_rank or 0) + self.kv_lora_rank
        else:
            qkv = h * (self.q_size + 2 * self.kv_size)
            if self.qkv_bias:
                qkv += self.q_size + 2 * self.kv_size
            attention = qkv + self.q_size * h + (h if self.o_bias else 0)
        if not dense:
            shared = self.mlp_matrices * h * self.shared_expert_width
            mlp = experts * self.expert_params + shared + h * self.num_experts  # + router
            if self.mlp_bias:  # gate/up and down biases of each expert, the router's bias
                mlp += (experts * ((self.mlp_matrices - 1) * self.moe_intermediate_size + h)
                        + self.num_experts)
        else:
            mlp = self.mlp_matrices * h * f
            if self.mlp_bias:
                # every up-projection has an f-wide bias, the down-projection an h-wide one
                mlp += (self.mlp_matrices - 1) * f + h
        if self.attention_sinks:
            attention += self.num_attention_heads
        norm_width = 2 if self.norm == "layernorm" else 1
        norms = 2 * norm_width * h
        if self.qk_norm:
            norms += 2 * self.head_dim
        if self.qk_norm_across_heads:  # one weight per query and per key channel of the layer
            norms += self.q_size + self.kv_size
        return attention + mlp + norms

    def linear_layers(self) -> tuple[LinearLayer, ...]:
        """Every kind of linear layer a quantization method may quantize, with the layers it
        sits in and the checkpoint module names of one instance (``{i}``: its layer): q/k/v and
        o projections (MLA's as ``attention_projections``), the dense MLPs, the routed experts
        (``count`` per layer: every expert), the shared experts and the LM head. The router,
        embeddings, norms and biases are never quantized (vLLM builds them as 16-bit
        layers)."""
        h, layers = self.hidden_size, self.num_layers
        gate_up = self.mlp_matrices - 1
        up, down = ("gate_up_proj", "down_proj") if gate_up == 2 else ("fc1", "fc2")
        up_names = ("gate_proj", "up_proj") if gate_up == 2 else ("fc1",)
        down_name = "down_proj" if gate_up == 2 else "fc2"
        every = tuple(range(layers))
        attn = "model.layers.{i}.self_attn."
        if self.is_mla:
            names = ((("fused_qkv_a_proj", ("q_a_proj", "kv_a_proj_with_mqa")),
                      ("q_b_proj", ("q_b_proj",))) if self.q_lora_rank is not None
                     else (("kv_a_proj_with_mqa", ("kv_a_proj_with_mqa",)),
                           ("q_proj", ("q_proj",))))
            names += (("kv_b_proj", ("kv_b_proj",)), ("o_proj", ("o_proj",)))
        else:
            names = (("qkv_proj", ("q_proj", "k_proj", "v_proj")), ("o_proj", ("o_proj",)))
        result = [LinearLayer(name, k, n, every, tuple(attn + m for m in modules))
                  for (name, modules), (k, n, _) in zip(names, self.attention_projections(),
                                                        strict=True)]
        mlp = "model.layers.{i}.mlp."
        dense = tuple(range(self.num_dense_layers))
        if dense:
            f = self.intermediate_size
            result += [LinearLayer(up, h, gate_up * f, dense, tuple(mlp + m for m in up_names)),
                       LinearLayer(down, f, h, dense, (mlp + down_name,))]
        if self.is_moe:
            moe = tuple(range(self.num_dense_layers, layers))
            f, expert = self.moe_intermediate_size, mlp + "experts.0."
            result += [LinearLayer(f"experts.{up}", h, gate_up * f, moe,
                                   tuple(expert + m for m in up_names), self.num_experts),
                       LinearLayer(f"experts.{down}", f, h, moe, (expert + down_name,),
                                   self.num_experts)]
            if self.num_shared_experts:
                f, shared = self.shared_expert_width, mlp + "shared_experts."
                result += [LinearLayer(f"shared_experts.{up}", h, gate_up * f, moe,
                                       tuple(shared + m for m in up_names)),
                           LinearLayer(f"shared_experts.{down}", f, h, moe,
                                       (shared + down_name,))]
        result.append(LinearLayer("lm_head", h, self.vocab_size, (0,), ("lm_head",)))
        return tuple(result)

    def quantized_layers(self, name: str) -> int:
        """In how many layers the checkpoint quantizes linear layer ``name`` (one of
        :meth:`linear_layers`'): none for the layers its exclusion list names (every module
        of a fused layer), the LM head only where the format quantizes it, only the routed
        experts where it quantizes those alone (MXFP4); 0 without quantization."""
        return _quantized_layers(self).get(name, 0)

    def linear_shapes(self) -> tuple[tuple[int, int, int], ...]:
        """``(in, out, count)`` of every linear layer the checkpoint quantizes, counted over
        the layers (and experts) it quantizes them in (:meth:`quantized_layers`); without
        quantization, of every layer a method would quantize (the LM head aside)."""
        if self.quantization is None:
            return tuple((layer.in_features, layer.out_features,
                          len(layer.layers) * layer.per_layer)
                         for layer in self.linear_layers() if layer.name != "lm_head")
        return tuple((layer.in_features, layer.out_features,
                      self.quantized_layers(layer.name) * layer.per_layer)
                     for layer in self.linear_layers() if self.quantized_layers(layer.name))

    @property
    def weight_bytes(self) -> float:
        """Bytes of every weight as stored: quantized layers in their format, the rest in
        ``dtype``."""
        if self.quantization is None:
            return self.num_params * self.dtype_bytes
        return self._stored_bytes(self.num_params, self.linear_shapes())

    @property
    def expert_weight_bytes(self) -> float:
        """Bytes of every routed expert of every MoE layer, as stored (0 for a dense model;
        shared experts are not routed: they are sharded like a dense MLP)."""
        if self.quantization is None:
            return self.num_moe_layers * self.num_experts * self.expert_params * self.dtype_bytes
        if not self.is_moe:
            return 0
        shapes = tuple((layer.in_features, layer.out_features,
                        self.quantized_layers(layer.name) * layer.per_layer)
                       for layer in self.linear_layers() if layer.name.startswith("experts."))
        count = self.num_moe_layers * self.num_experts
        return self._stored_bytes(count * self.expert_params, shapes)

    def _stored_bytes(self, num_params: int, quantized: tuple[tuple[int, int, int], ...]) -> float:
        """``num_params`` weights of which the ``quantized`` layers are in the quantized
        format and the rest in ``dtype``."""
        assert self.quantization is not None
        q = self.quantization
        plain = num_params - sum(k * n * count for k, n, count in quantized)
        return plain * self.dtype_bytes + sum(q.weight_bytes(k, n) * count
                                              for k, n, count in quantized)

    def check_tp(self, tp: int) -> None:
        """Raise ``ConfigError`` unless vLLM could shard this model ``tp`` ways."""
        if tp < 1 or self.num_attention_heads % tp:
            raise ConfigError(
                "tensor_parallel_size",
                f"{tp} does not divide the {self.num_attention_heads} attention heads of {self.id}",
            )

    def expert_slice_refusal(self, moe_gpus: int, expert_parallel: bool) -> str | None:
        """Why vLLM refuses to load the routed experts sliced over ``moe_gpus`` GPUs, or None.

        Without expert parallelism each of the ``moe_gpus`` GPUs (TP x DP: vLLM flattens a
        data-parallel group's MoE layers into one tensor-parallel split) holds a
        ``moe_intermediate_size / moe_gpus`` slice of every expert. With FP8 blocks that
        slice must be whole blocks: ``Fp8MoEMethod.create_weights`` raises "The output_size of
        gate's and up's weight = 192 is not divisible by weight quantization block_n = 128"
        for MiniMax-M2.5 at TP8 (vllm/model_executor/layers/quantization/fp8.py; the same
        check in compressed-tensors' FP8 MoE method), and vLLM's MiniMax-M2 recipe says "pure
        TP8 is not supported", running 8 GPUs as TP8 or DP8 with ``--enable-expert-parallel``
        (vllm-project/recipes, MiniMax/MiniMax-M2.md). Whole experts per GPU never split a
        block."""
        q = self.quantization
        if (expert_parallel or moe_gpus <= 1 or not self.is_moe or q is None
                or q.weight_block_size is None or not self.quantized_layers("experts.down_proj")):
            return None
        block_n, block_k = q.weight_block_size
        width = self.moe_intermediate_size / moe_gpus
        if width == int(width) and not width % block_n and not width % block_k:
            return None
        return (f"{self.id}'s {self.moe_intermediate_size:,}-wide experts sliced over "
                f"{moe_gpus} GPUs leave {width:g} columns a GPU, not whole {block_n}x{block_k} "
                f"FP8 blocks: vLLM refuses to load them (\"The output_size of gate's and up's "
                f"weight = {width:g} is not divisible by weight quantization block_n = "
                f"{block_n}\"); enable expert parallelism (whole experts a GPU) or split them "
                "fewer ways")


class LinearLayer(NamedTuple):
    """One kind of linear layer of a decoder (:meth:`ModelSpec.linear_layers`)."""

    name: str
    """vLLM's name for it (``qkv_proj``, ``experts.gate_up_proj``, ``lm_head``, ...)."""
    in_features: int
    out_features: int
    layers: tuple[int, ...]
    """The decoder layers it sits in (the LM head: one)."""
    modules: tuple[str, ...]
    """The checkpoint's module names of one instance, ``{i}`` for its layer: the shards vLLM
    fuses into it (``q_proj``, ``k_proj``, ``v_proj``), one expert's for the routed experts."""
    per_layer: int = 1
    """Instances in each layer (a MoE layer's routed experts)."""


@lru_cache(maxsize=512)
def _quantized_layers(model: ModelSpec) -> dict[str, int]:
    """:meth:`ModelSpec.quantized_layers` for every kind of linear layer (cached: the
    exclusion patterns are matched once per model)."""
    q = model.quantization
    if q is None:
        return {}
    counts: dict[str, int] = {}
    for layer in model.linear_layers():
        if q.modules == "experts" and not layer.name.startswith("experts."):
            continue
        if layer.name == "lm_head" and not q.lm_head:
            continue
        counts[layer.name] = sum(
            1 for i in layer.layers
            if not all(q.excludes(module.format(i=i)) for module in layer.modules))
    return counts
