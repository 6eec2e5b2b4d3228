"""Roofline step time: what one engine step of a mixed prefill/decode batch costs on a GPU.

Every op of a layer is priced ``max(FLOPs / (eff_c x peak), bytes / (eff_m x bandwidth))`` and
the layer repeats ``num_layers`` times; a step adds TP all-reduces and fixed CPU/launch
overheads (hardware_and_roofline.md section 3.6). GEMM efficiency saturates with the number of
rows M, ``eff_c x M / (M + compute_half_tokens)``; the efficiencies, overheads and all-reduce
cost come from the GPU's calibrated profile (``clustersim calibrate``, docs/validation.md)::

    per layer, sharded tp ways         tokens = prefill chunk tokens + decodes
      qkv_proj  (tokens x h) @ (h x (n_q + 2 n_kv) d / tp)
      attention prefill chunks: causal query-key pairs;   decodes: context each attends to
      o_proj    (tokens x n_q d / tp) @ (n_q d / tp x h)  -> all-reduce
      gate_up   (tokens x h) @ (h x 2f / tp)   [plain MLP: fc1, h x f / tp]
      down      (tokens x f / tp) @ (f / tp x h)           -> all-reduce
    once per step
      embedding vocab-sharded lookup                            -> all-reduce
      lm_head   (sampled x h) @ (h x V / tp)   only rows that sample a token -> all-gather

A mixture-of-experts layer replaces gate_up and down with (vLLM's fused MoE)::

      router    (tokens x h) @ (h x E)          replicated on every rank
      per expert touched, rows = tokens x k / touched
        gate_up (rows x h) @ (h x 2 f_moe / n)
        down    (rows x f_moe / n) @ (f_moe / n x h)  -> all-reduce

A DeepSeek-style MoE model keeps the dense MLP in its first ``first_k_dense_replace`` layers and
adds its shared experts to every MoE layer as one gated MLP of ``n_shared x f_moe`` that every
token runs, sharded tp ways like a dense MLP.

Multi-head latent attention (DeepSeek-V2/V3) replaces qkv_proj and the attention::

      q_a+kv_a  (tokens x h) @ (h x (q_lora + kv_lora + rope))   replicated on every rank
      q_b       (tokens x q_lora) @ (q_lora x n_q (nope + rope) / tp)
      kv_b      (tokens x kv_lora) @ (kv_lora x n_q (nope + v) / tp)
      attention prefill chunks (not absorbed): nope + rope + v MACs per pair and head, and
                kv_b again on every cached context token a chunk attends to;
                decodes (absorbed into the latent): (kv_lora + rope) + kv_lora MACs per pair
                and head; both read kv_lora + rope cached elements per token and layer
      o_proj    (tokens x n_q v / tp) @ (n_q v / tp x h)  -> all-reduce

(kv_b on every token stands for both paths: a prefill token's latent up-projected to its heads'
keys and values, a decode token's query absorbed into the latent and its output expanded back,
the same MACs.) The latent cache is not split by TP: every rank reads all of it.

FLOPs and activations follow the tokens x k routed rows; weights are read only for the experts
the step touches. Routing is assumed uniform and independent per token, so with T tokens each
picking k of E experts, E x (1 - (1 - k/E)^T) experts are touched on average (k at T = 1,
all E for a long prefill). Each expert's GEMM pays the saturating efficiency on its own rows.

The MoE layers span the ``n = dp x tp`` GPUs of a data-parallel group (``dp = 1``: the
instance's own TP group). Without expert parallelism every GPU holds every expert's ``1/n``
slice (above); with it (``enable_expert_parallel``) each GPU holds ``E/n`` whole experts and
computes the rows routed to them, ``T x k / n`` on average. With ``dp > 1`` the tokens of all
ranks meet in every MoE layer (vLLM's default ``allgather_reducescatter`` all2all backend):
each rank all-gathers the group's hidden states before the experts and reduce-scatters the
outputs after them, ``(dp-1)/dp x T x h`` elements each way over the group's link. The ranks
pad their batches to the largest rank's token count (as vLLM does with CUDA graphs), so
``T = dp x`` the largest rank's tokens.

An expert-parallel group that spans nodes runs DeepEP's all-to-all instead
(``clustersim.cost.collectives.AllToAll``): per MoE layer a dispatch and a combine of the rank's
own tokens, each routed row's hidden state to its expert's rank over NVLink inside the node and
over the NIC across nodes, the slower of the two plus a fixed time per call. With expert
parallelism the busiest rank carries ``expert_imbalance x`` the mean routed rows (its expert
GEMMs and its all-to-all bytes; 1 by default inside a node).

GEMM weights are read once per step whatever the batch, as stored; activations in and out are
read and written once per op. A quantized model's linear layers run the kernel vLLM picks on the
GPU (``clustersim.cost.kernels``: native FP8/INT8/FP4 GEMMs at their peak and fit, or
weight-only kernels streaming 4- or 8-bit weights into 16-bit math); the router and the LM head
stay 16-bit unless the checkpoint quantizes the LM head. Attention reads the KV its tokens
attend to and writes the new tokens' KV (in the engine's ``kv_cache_dtype``),
``max(1, n_kv // tp)`` heads per rank: GQA enters only there and in the K/V projections.
The small memory-bound kernels between them (norms, Qwen3's QK-norm, the rotary embedding,
the activation, the embedding gather; ``clustersim.cost.small_kernels`` counts them per
architecture) cost a floor per call plus their bytes, and the sampler its passes over each
sampled row's logits.

``CostModel`` folds all of this into a handful of per-(model, GPU, TP) constants, so pricing a
step is a few float multiply-adds: the simulator calls it once per step. The same arithmetic
lists a step's seconds by operator under the names above (:meth:`CostModel.operators`, printed
by ``clustersim step-time``): they add up to the step's time.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

from clustersim.catalog.specs import GpuSpec, ModelSpec
from clustersim.cost.collectives import (
    DEEPEP_NORMAL_SMS,
    AllToAll,
    add_segments,
    allreduce_segments,
    deepep_call_s,
)
from clustersim.cost.kernels import GemmKernel, fused_moe_kernel, gemm_kernel
from clustersim.cost.moe import ExpertPricing, curve_segments, expert_pricing
from clustersim.cost.prices import StepPrices
from clustersim.cost.small_kernels import small_kernel_prices
from clustersim.errors import ConfigError

# FLOPs per multiply-accumulate.
_FLOPS_PER_MAC = 2
# QK^T and AV each take one MAC per (query, key, head, head_dim element).
_ATTENTION_MATMULS = 2
# Tensor parallelism all-reduces twice per layer: after o_proj and after the MLP down-proj;
# once more per step after the vocab-parallel embedding lookup.
_ALLREDUCES_PER_LAYER = 2
_ALLREDUCES_PER_STEP = 1
# A q/k norm over all heads of a layer (MiniMax-M2) all-reduces each token's q and k partial
# variances, two float32 (vLLM's MiniMaxText01RMSNormTP.forward_qk, one all-reduce of both
# since vllm-project/vllm PR #31493, December 2025, before the 0.16 and 0.18 releases): a
# latency-bound all-reduce every layer.
_QK_VARIANCE_BYTES = 2 * 4


@dataclass(frozen=True, slots=True)
class BatchShape:
    """What one engine step runs, aggregated (cheap to build incrementally in the step loop)."""

    num_prefill_tokens: int = 0
    """Tokens of the prompt (or recompute) chunks this step."""
    prefill_attn_pairs: float = 0.0
    """Causal query-key pairs of those chunks: per chunk ``s*c + s*(s+1)/2`` (s new, c cached)."""
    prefill_kv_tokens: int = 0
    """Per chunk ``c + s``: the KV tokens the chunk attends to."""
    num_decode_tokens: int = 0
    """Decoding requests this step, one new token each."""
    decode_kv_tokens: int = 0
    """Context the decodes attend to, each including its new token."""
    num_sampled: int = 0
    """Requests that sample a token (last prompt chunk or decode): LM-head rows."""
    num_seqs: int = 0
    """Requests in the step."""

    @classmethod
    def from_chunks(cls, chunks: Iterable[tuple[int, int, bool]]) -> BatchShape:
        """Aggregate ``(new_tokens, context_before, samples)`` per scheduled request.

        One new token on top of existing context that samples is a decode; anything else
        (a prompt chunk, a recompute after preemption) is priced as a prefill chunk.
        """
        prefill_tokens = prefill_kv = decode_tokens = decode_kv = sampled = seqs = 0
        pairs = 0.0
        for new_tokens, context, samples in chunks:
            if new_tokens < 1 or context < 0:
                raise ValueError(f"bad chunk: {new_tokens} new tokens after {context}")
            seqs += 1
            sampled += bool(samples)
            if new_tokens == 1 and context > 0 and samples:
                decode_tokens += 1
                decode_kv += context + 1
            else:
                prefill_tokens += new_tokens
                prefill_kv += context + new_tokens
                pairs += new_tokens * context + new_tokens * (new_tokens + 1) / 2
        return cls(
            num_prefill_tokens=prefill_tokens,
            prefill_attn_pairs=pairs,
            prefill_kv_tokens=prefill_kv,
            num_decode_tokens=decode_tokens,
            decode_kv_tokens=decode_kv,
            num_sampled=sampled,
            num_seqs=seqs,
        )


@dataclass(frozen=True, slots=True)
class StepCost:
    """Seconds one step takes, and where they went; ``time_s`` is the sum of the parts."""

    time_s: float
    compute_s: float
    """Ops whose FLOPs outweighed their bytes."""
    memory_s: float
    """Ops whose bytes outweighed their FLOPs."""
    communication_s: float
    """Tensor-parallel all-reduces."""
    overhead_s: float
    """Per-step, per-layer and per-request CPU and launch overhead."""


@dataclass(frozen=True, slots=True)
class OperatorTime:
    """One named operator's seconds in a step, booked as :class:`StepCost` books them: a GEMM's
    on its bound side, its kernel floor with the memory-bound time."""

    name: str
    compute_s: float
    memory_s: float
    communication_s: float
    overhead_s: float

    @property
    def time_s(self) -> float:
        return self.compute_s + self.memory_s + self.communication_s + self.overhead_s

    @property
    def bound(self) -> str:
        """What bounds it: compute, memory, communication or host."""
        parts = {"compute": self.compute_s, "memory": self.memory_s,
                 "communication": self.communication_s, "host": self.overhead_s}
        return max(parts, key=lambda kind: parts[kind])


IDLE_COST = StepCost(0.0, 0.0, 0.0, 0.0, 0.0)
"""An empty batch costs nothing here; the engine models idle time itself."""


class CostModel:
    """Step pricing for one (model, GPU, tensor-parallel size), constants precomputed."""

    __slots__ = ("model", "gpu", "tp", "kernel", "expert_kernel", "experts", "prices")

    def __init__(
        self,
        model: ModelSpec,
        gpu: GpuSpec,
        tp: int = 1,
        *,
        tp_link_bytes_per_s: float | None = None,
        tp_link_latency_s: float | None = None,
        dp: int = 1,
        expert_parallel: bool = False,
        dp_link_bytes_per_s: float | None = None,
        all_to_all: AllToAll | None = None,
        expert_imbalance: float = 1.0,
        two_batch_overlap: bool = False,
    ) -> None:
        """``tp_link_*`` replace ``gpu.tp_link(tp)``'s effective bandwidth and
        ``gpu.allreduce_latency_s`` for the all-reduces (a topology's ``tp_group_link``).
        ``dp``: data-parallel ranks whose MoE layers run together (their experts spread over
        ``dp x tp`` GPUs, by expert with ``expert_parallel``, else by intermediate slice);
        ``dp_link_bytes_per_s`` replaces ``gpu.tp_link(dp x tp)`` for their all-gathers.
        ``all_to_all`` (an expert-parallel group across nodes): DeepEP's dispatch and combine
        replace the all-gather and reduce-scatter. ``expert_imbalance``: the busiest rank's
        routed rows (and all-to-all bytes) over the mean, with expert parallelism.
        ``two_batch_overlap``: each step as two micro-batches, one's all-to-all under the
        other's work (:meth:`StepPrices.dense_parts`); needs ``all_to_all``."""
        if not expert_imbalance >= 1.0:
            raise ValueError(f"expert_imbalance must be >= 1, got {expert_imbalance}")
        if all_to_all is not None and not (expert_parallel and dp > 1):
            raise ValueError("an all-to-all needs data-parallel ranks with expert parallelism")
        if two_batch_overlap and all_to_all is None:
            raise ValueError("two-batch overlap needs an expert-parallel all-to-all")
        model.check_tp(tp)
        if dp < 1:
            raise ValueError(f"dp must be >= 1, got {dp}")
        refusal = model.expert_slice_refusal(dp * tp, expert_parallel)
        if refusal is not None:
            raise ConfigError("enable_expert_parallel", refusal)
        if (dp > 1 or expert_parallel) and not model.is_moe:
            raise ValueError(f"{model.id} is dense: data-parallel MoE pricing needs experts")
        if tp_link_bytes_per_s is not None and not tp_link_bytes_per_s > 0:
            raise ValueError(f"tp_link_bytes_per_s must be > 0, got {tp_link_bytes_per_s}")
        if tp_link_latency_s is not None and not tp_link_latency_s >= 0:
            raise ValueError(f"tp_link_latency_s must be >= 0, got {tp_link_latency_s}")
        self.model, self.gpu, self.tp = model, gpu, tp
        self.prices = p = StepPrices()
        """The constants below and the per-step arithmetic over them (compiled with the
        core)."""
        layers = model.num_layers
        h, d, f, e = model.hidden_size, model.head_dim, model.intermediate_size, model.dtype_bytes
        q_out = model.num_attention_heads // tp * d
        kv_out = model.kv_heads_per_gpu(tp) * d
        f_shard = f / tp
        up_out = (model.mlp_matrices - 1) * f_shard  # gate+up (gated) or fc1 (plain)
        # the kernel every quantized linear layer runs (clustersim.cost.kernels); the MoE
        # router stays 16-bit, and so does every layer the checkpoint does not quantize (its
        # exclusion list, the LM head unless it says otherwise, everything but the routed
        # experts of a checkpoint that quantizes those alone: ModelSpec.quantized_layers)
        quantized = gemm_kernel(model.quantization, gpu)
        sixteen = quantized if model.quantization is None else gemm_kernel(None, gpu)

        def quantized_in(name: str, count: int) -> int:
            return count if model.quantization is None else model.quantized_layers(name)

        dense_names = [layer.name for layer in model.linear_layers()
                       if layer.name != "lm_head" and not layer.name.startswith("experts.")]
        self.kernel = kernel = (quantized if any(model.quantization is None
                                                 or model.quantized_layers(name)
                                                 for name in dense_names) else sixteen)
        """The kernel of the quantized dense layers (attention projections, dense MLPs)."""
        self.expert_kernel = quantized
        """The kernel of the routed experts."""
        self.experts: ExpertPricing | None = None
        """The measured fused-MoE kernel and curve pricing them, where the GPU has one
        (clustersim.cost.moe)."""

        # seconds per FLOP / per byte, pre-inverted so the hot path only multiplies
        s_per_attn_flop = 1.0 / (gpu.attention_efficiency * gpu.peak_flops)
        s_per_byte = 1.0 / (gpu.memory_efficiency * gpu.mem_bytes_per_s)

        # (in, out) features of each layer GEMM on one rank
        router: tuple[tuple[float, float], ...] = ()
        mlp_shapes: tuple[tuple[float, float], ...]
        expert_shapes: tuple[tuple[float, float], ...]
        moe_gpus = dp * tp
        moe_layers = model.num_moe_layers
        # GEMMs of some layers only (in, out, layers): a MoE model's leading dense MLPs and
        # its shared experts (sharded tp ways like a dense MLP)
        partial: list[tuple[float, float, int]] = []
        # and the names of all of them, as vLLM's modules call them
        up, down = ("gate_up_proj", "down_proj") if model.mlp_matrices == 3 else ("fc1", "fc2")
        partial_names: list[str] = []
        if model.is_moe:
            router = ((h, model.num_experts),)
            mlp_shapes = ()
            f_expert = model.moe_intermediate_size / (1 if expert_parallel else moe_gpus)
            expert_shapes = ((h, (model.mlp_matrices - 1) * f_expert), (f_expert, h))
            for width, count, names in (
                    (f, model.num_dense_layers, (f"{up} (dense layers)", f"{down} (dense layers)")),
                    (model.shared_expert_width, moe_layers,
                     (f"shared_experts.{up}", f"shared_experts.{down}"))):
                if width and count:
                    partial += [(h, (model.mlp_matrices - 1) * width / tp, count),
                                (width / tp, h, count)]
                    partial_names += names
        else:
            mlp_shapes = ((h, up_out), (f_shard, h))
            expert_shapes = ()
        if model.is_mla:
            # MLA's projections (ModelSpec.attention_projections) on one rank: the replicated
            # down-projections whole, the rest 1/tp. kv_b_proj runs on every token: a prefill
            # token's latent is up-projected to its heads' keys and values; a decode token's
            # query is absorbed into the latent and its output expanded back (W_UK, W_UV, the
            # same heads x kv_lora_rank x (nope + v) MACs)
            *column, (o_in, o_out, _) = model.attention_projections()  # o_proj: row-parallel
            attention: tuple[tuple[float, float], ...] = (
                *((k, n / tp if sharded else n) for k, n, sharded in column), (o_in / tp, o_out))
            attention_names: tuple[str, ...] = (
                ("fused_qkv_a_proj", "q_b_proj") if model.q_lora_rank is not None
                else ("kv_a_proj_with_mqa", "q_proj")) + ("kv_b_proj", "o_proj")
        else:
            attention = ((h, q_out + 2 * kv_out), (q_out, h))
            attention_names = ("qkv_proj", "o_proj")
        shapes = (*attention, *mlp_shapes)
        p.gemm_names = (*attention_names, *((up, down) if mlp_shapes else ()),
                        *(("router",) if router else ()), *partial_names)
        p.expert_gemm_names = (f"experts.{up}", f"experts.{down}") if expert_shapes else ()
        # per GEMM, summed over layers: (compute s per token, weight-read s, activation s per
        # token, half-saturation tokens, floor s)
        gemm_names = (*attention_names, *((up, down) if mlp_shapes else ()))
        partial_gemms = tuple(_split_gemm((k, n), count, quantized_in(name, count), e, kernel,
                                          sixteen, gpu)
                              for (k, n, count), name in zip(partial, _partial_layer_names(
                                  model, up, down), strict=True))
        p.gemms = (*(_split_gemm(shape, layers, quantized_in(name, layers), e, kernel, sixteen,
                                 gpu) for shape, name in zip(shapes, gemm_names, strict=True)),
                   *_layer_gemms(router, moe_layers, e, sixteen, gpu), *partial_gemms)
        # the same per expert: (compute s per routed row, weight-read s per expert touched,
        # activation s per routed row, half-saturation rows, floor s of the fused call)
        # vLLM's fused MoE: one call per layer for both projections, on the measured kernel of
        # the experts' format where the GPU has one (its curve for this shape and split, else
        # its fit), else on the 16-bit fused-MoE fit or the format's dense GEMMs; a fit's
        # floor once per layer, on the first projection
        expert_kernel = quantized
        sixteen_experts = sixteen
        if gpu.moe_gemm is not None:
            sixteen_experts = GemmKernel("fused_moe", gpu.peak_flops, gpu.moe_gemm, 1.0, None,
                                         None)
            if model.quantization is None:
                expert_kernel = sixteen_experts
        quantized_experts = quantized_in(f"experts.{up}", moe_layers) if model.is_moe else 0
        pricing = None
        if model.is_moe and quantized_experts in (0, moe_layers):
            # every MoE layer's experts in one format (a checkpoint that leaves some layers'
            # experts in 16 bits mixes two kernels: their fits price it, layer by layer)
            stored = model.quantization if quantized_experts else None
            pricing = expert_pricing(model, gpu, moe_gpus, expert_parallel, stored)
            if pricing is not None:
                measured = fused_moe_kernel(pricing, stored, gpu)
                if quantized_experts:
                    expert_kernel = measured
                else:
                    sixteen_experts = measured
                if pricing.curve is not None:
                    (p.expert_curve_upto, p.expert_curve_fixed,
                     p.expert_curve_slope) = curve_segments(pricing.curve, moe_layers)
                    p.expert_curve_name = (f"experts: fused MoE {pricing.format} "
                                           f"({pricing.kernel.kernel}, measured)")
        self.experts = pricing
        if model.is_moe:
            self.expert_kernel = expert_kernel if quantized_experts else sixteen_experts
        expert_gemms = tuple(
            _split_gemm(shape, moe_layers, quantized_in(name, moe_layers), e, expert_kernel,
                        sixteen_experts, gpu)
            for shape, name in zip(expert_shapes, (f"experts.{up}", f"experts.{down}"),
                                   strict=False))
        p.expert_gemms = tuple((*g[:4], g[4] if i == 0 else 0.0)
                                   for i, g in enumerate(expert_gemms))
        # kernels that dequantize the whole weight from dequant_rows tokens on, then run a
        # 16-bit GEMM (legacy AWQ / GPTQ): the dequantization reads the codes and writes 16
        # bits per weight, a memory-bound op of its own
        p.dequant_rows = kernel.dequant_rows
        if kernel.dequant_rows < float("inf"):
            assert kernel.weight is not None
            p.gemms_large = (*_layer_gemms(shapes, layers, e, sixteen, gpu),
                                 *_layer_gemms(router, moe_layers, e, sixteen, gpu),
                                 *(g for k, n, count in partial
                                   for g in _layer_gemms(((k, n),), count, e, sixteen, gpu)))
            dequant_bytes = sum(quantized_in(name, layers) * (kernel.weight.weight_bytes(k, n)
                                                               + k * n * e)
                                for (k, n), name in zip(shapes, gemm_names, strict=True))
            p.dequant_s = dequant_bytes / (kernel.fit.memory_efficiency * gpu.mem_bytes_per_s)
            if partial:
                p.dequant_s += sum(
                    quantized_in(name, count) * (kernel.weight.weight_bytes(k, n) + k * n * e)
                    for (k, n, count), name in zip(partial, _partial_layer_names(model, up, down),
                                                   strict=True)) / (
                    kernel.fit.memory_efficiency * gpu.mem_bytes_per_s)
        else:
            p.gemms_large = p.gemms
            p.dequant_s = 0.0
        p.num_experts = model.num_experts
        p.top_k = model.num_experts_per_tok
        # the fraction of the routed rows and touched experts one GPU works on
        p.expert_share = 1.0 / moe_gpus if expert_parallel else 1.0
        p.dp = dp
        if expert_parallel:
            p.expert_imbalance = expert_imbalance
        if all_to_all is not None:
            # every MoE layer: one dispatch and one combine of the rank's tokens, each routed
            # row's hidden state to its expert's rank (FP8 or 16-bit) and back (16-bit)
            if two_batch_overlap:
                p.overlap_layers = moe_layers
                p.overlap_compute_share = 1.0
                if all_to_all.mode == "normal":
                    if gpu.sm_count is None:
                        raise ValueError(f"two-batch overlap: the catalog has no SM count for "
                                         f"{gpu.id} (DeepEP's normal kernels hold "
                                         f"{DEEPEP_NORMAL_SMS} of them)")
                    p.overlap_compute_share = 1.0 - DEEPEP_NORMAL_SMS / gpu.sm_count
            dispatch_s, combine_s = deepep_call_s(all_to_all, gpu)
            p.a2a_fixed_s = moe_layers * (dispatch_s + combine_s)
            p.a2a_s_per_token = (moe_layers * expert_imbalance * h
                                 * (all_to_all.dispatch_bytes + all_to_all.combine_bytes)
                                 * all_to_all.s_per_token_byte(model.num_experts_per_tok))
        if dp > 1 and all_to_all is None:
            if dp_link_bytes_per_s is None:  # the link that joins all dp x tp GPUs
                dp_link_bytes_per_s = gpu.tp_link(dp * tp).effective_bytes_per_s
            # an all-gather before and a reduce-scatter after the experts, every layer, each
            # moving (dp - 1) / dp of the group's tokens over every GPU's link
            if dp * tp <= max(gpu.link.max_gpus, gpu.pcie.max_gpus):
                (ag_latency, ag_speed), (rs_latency, rs_speed) = (
                    gpu.collective("all_gather", dp * tp),
                    gpu.collective("reduce_scatter", dp * tp))
            else:  # a group across nodes (a topology's link): no measured collective there
                ag_latency = rs_latency = gpu.allreduce_latency_s
                ag_speed = rs_speed = 1.0
            p.gather_fixed_s = layers * (ag_latency + rs_latency)
            p.gather_s_per_token = (layers * (dp - 1) / dp * h * e / dp_link_bytes_per_s
                                        * (1.0 / ag_speed + 1.0 / rs_speed))
        else:
            p.gather_fixed_s = p.gather_s_per_token = 0.0
        vocab_shard = model.vocab_size / tp
        lm_head_kernel = (quantized if model.quantization is not None
                          and model.quantized_layers("lm_head") else sixteen)
        ((p.lm_head_s_per_row, p.lm_head_weight_s, p.lm_head_act_s_per_row,
          p.lm_head_half, p.lm_head_floor_s),) = _layer_gemms(
            ((h, vocab_shard),), 1, e, lm_head_kernel, gpu)

        # attention: FLOPs per query-key pair over this rank's query heads; K and V of one token
        if model.is_mla:
            assert model.kv_lora_rank is not None and model.v_head_dim is not None
            assert model.qk_nope_head_dim is not None
            heads = model.num_attention_heads // tp
            # prefill, not absorbed: per head, QK^T over qk_nope + qk_rope and AV over v_head_dim
            p.attn_s_per_pair = (layers * _FLOPS_PER_MAC * heads
                                 * (model.head_dim + model.v_head_dim) * s_per_attn_flop)
            # decode, absorbed: per head, scores over the latent and rotary key, values over the
            # latent (kv_lora_rank + qk_rope_head_dim, then kv_lora_rank MACs per pair)
            p.decode_attn_s_per_pair = (
                layers * _FLOPS_PER_MAC * heads * (model.mla_latent_dim + model.kv_lora_rank)
                * s_per_attn_flop)
            # a chunk after cached context up-projects the context's latents (kv_b_proj) to
            # keys and values: a GEMM row per context token, at the kernel's saturated rate
            kv_b_flops = (_FLOPS_PER_MAC * model.kv_lora_rank * heads
                          * (model.qk_nope_head_dim + model.v_head_dim))
            p.prefill_ctx_s_per_token = layers * kv_b_flops / (
                kernel.fit.compute_efficiency * kernel.peak_flops * kernel.compute_ratio)
        else:
            p.attn_s_per_pair = (
                layers * _FLOPS_PER_MAC * _ATTENTION_MATMULS * q_out * s_per_attn_flop
            )
            p.decode_attn_s_per_pair = p.attn_s_per_pair
            p.prefill_ctx_s_per_token = 0.0
        # prefill efficiency saturates with the keys per query K: eff x K / (K + half), so a
        # chunk of s queries costs (pairs + half x s) pairs at the saturated efficiency
        if model.sliding_window is not None:
            # the sliding-window layers' queries attend to at most the window (their share of
            # the pairs and the decode KV reads; the prompt chunks' KV reads are not capped)
            p.window_share = model.sliding_window_layers / layers
            p.window_tokens = float(model.sliding_window)
        p.attn_half_keys = gpu.attention_half_keys
        p.attn_floor_s = layers * gpu.attention_floor_s
        p.kv_s_per_token = model.kv_bytes_per_token(tp) * s_per_byte
        # decode: KV read at its own efficiency; each sequence adds its new token's KV write
        # and a fixed cost of decode_attention_half_tokens tokens of KV
        decode_eff = gpu.decode_attention_memory_efficiency or gpu.memory_efficiency
        p.decode_kv_s_per_token = (model.kv_bytes_per_token(tp)
                                       / (decode_eff * gpu.mem_bytes_per_s))
        p.decode_rows_per_seq = 1.0 + gpu.decode_attention_half_tokens

        if tp > 1:
            ag_latency, ag_speed = gpu.collective("all_gather", tp)
            if tp_link_latency_s is not None:
                # a topology's link: its latency serves every collective on it
                ag_latency = tp_link_latency_s
            count = _ALLREDUCES_PER_LAYER * layers + _ALLREDUCES_PER_STEP
            segments = allreduce_segments(gpu, tp, h * e, count,
                                          link_bytes_per_s=tp_link_bytes_per_s,
                                          link_latency_s=tp_link_latency_s)
            if model.qk_norm_across_heads:
                segments = add_segments(segments, allreduce_segments(
                    gpu, tp, _QK_VARIANCE_BYTES, layers, link_bytes_per_s=tp_link_bytes_per_s,
                    link_latency_s=tp_link_latency_s))
            p.set_allreduce(segments)
            if tp_link_bytes_per_s is None:
                tp_link_bytes_per_s = gpu.tp_link(tp).effective_bytes_per_s
            # every rank samples (vLLM V1), so the vocab-sharded logits are all-gathered: each
            # rank receives the other shards of every sampled row
            p.logits_fixed_s = ag_latency
            p.logits_s_per_row = (tp - 1) * vocab_shard * e / (tp_link_bytes_per_s * ag_speed)
        else:
            p.logits_fixed_s = p.logits_s_per_row = 0.0
        small = small_kernel_prices(model, gpu, tp)
        p.small_fixed_s, p.small_row_bytes = small.fixed_s, small.row_bytes
        p.small_cta_s_per_byte, p.small_s_per_byte = small.cta_s_per_byte, small.s_per_byte
        p.sampler_s_per_row = small.sampler_s_per_row
        p.fixed_overhead_s = gpu.per_step_overhead_s + layers * gpu.per_layer_overhead_s
        p.request_overhead_s = gpu.per_request_overhead_s
        p.step_host_s = gpu.per_step_overhead_s

    def step_time(self, batch: BatchShape, moe_tokens: int | None = None) -> StepCost:
        """Price one step; an empty batch costs 0. ``moe_tokens``: the tokens the MoE layers
        see (a data-parallel group's padded total; default this batch's)."""
        if not batch.num_prefill_tokens + batch.num_decode_tokens:
            return IDLE_COST
        compute, memory, communication, overhead = self.prices.parts(
            batch.num_prefill_tokens, batch.prefill_attn_pairs, batch.prefill_kv_tokens,
            batch.num_decode_tokens, batch.decode_kv_tokens, batch.num_sampled, batch.num_seqs,
            moe_tokens,
        )
        return StepCost(
            compute + memory + communication + overhead, compute, memory, communication, overhead
        )

    def operators(self, batch: BatchShape,
                  moe_tokens: int | None = None) -> tuple[OperatorTime, ...]:
        """:meth:`step_time`'s seconds by operator, in the order it adds them (none for an
        empty batch): each column sums to the :class:`StepCost`'s."""
        if not batch.num_prefill_tokens + batch.num_decode_tokens:
            return ()
        ops: list[tuple[str, float, float, float, float]] = []
        self.prices.parts(
            batch.num_prefill_tokens, batch.prefill_attn_pairs, batch.prefill_kv_tokens,
            batch.num_decode_tokens, batch.decode_kv_tokens, batch.num_sampled, batch.num_seqs,
            moe_tokens, ops,
        )
        return tuple(OperatorTime(*op) for op in ops)

    def experts_s(self, batch: BatchShape, moe_tokens: int | None = None) -> float:
        """The routed experts' kernels' seconds in :meth:`operators` (their collectives
        apart)."""
        p = self.prices
        names = {*p.expert_gemm_names, p.expert_curve_name} - {""}
        return sum(op.time_s for op in self.operators(batch, moe_tokens)
                   if op.name.removesuffix(" (2 micro-batches)") in names)

    def step_time_s(
        self,
        num_prefill_tokens: int,
        prefill_attn_pairs: float,
        prefill_kv_tokens: int,
        num_decode_tokens: int,
        decode_kv_tokens: int,
        num_sampled: int,
        num_seqs: int,
        moe_tokens: int | None = None,
    ) -> float:
        """``step_time(BatchShape(...)).time_s`` without building either object (the hot path:
        one call per engine step; ``prices.step_time_s`` saves this call)."""
        return self.prices.step_time_s(
            num_prefill_tokens, prefill_attn_pairs, prefill_kv_tokens, num_decode_tokens,
            decode_kv_tokens, num_sampled, num_seqs, moe_tokens,
        )

    def decode_run_s(
        self, num_decodes: int, decode_kv_tokens: int, num_steps: int,
        moe_tokens: int | None = None,
    ) -> list[float]:
        """Seconds of ``num_steps`` consecutive pure-decode steps of the same ``num_decodes``
        requests, the first attending to ``decode_kv_tokens`` tokens and each later one to
        ``num_decodes`` more; element ``m`` equals ``step_time_s`` of step ``m`` bit for bit.

        Only the decode attention term changes from step to step, and it is the last op
        ``step_time`` adds, so the GEMMs, collectives and overheads are priced once; whether
        the attention is compute- or memory-bound is decided per step as ``step_time`` does
        (both sides grow linearly with the context, so it flips at most once).
        """
        return self.prices.decode_run_s(num_decodes, decode_kv_tokens, num_steps, moe_tokens)

    def kernel_floors_s(self, batch: BatchShape) -> float:
        """The kernel floors (attention, GEMMs, fused MoE, small kernels, LM head) in
        ``step_time(batch)``'s memory-bound seconds: GPU time no efficiency scales (few-shot
        fits leave them fixed)."""
        p = self.prices
        tokens = batch.num_prefill_tokens + batch.num_decode_tokens
        if not tokens:
            return 0.0
        gemms = p.gemms_large if tokens >= p.dequant_rows else p.gemms
        floors = p.attn_floor_s + p.small_fixed_s + sum(g[4] for g in gemms)
        floors += sum(g[4] for g in p.expert_gemms)
        return floors + (p.lm_head_floor_s if batch.num_sampled else 0.0)


def _split_gemm(
    shape: tuple[float, float],
    layers: int,
    quantized_layers: int,
    dtype_bytes: int,
    kernel: GemmKernel,
    sixteen: GemmKernel,
    gpu: GpuSpec,
) -> tuple[float, float, float, float, float]:
    """One GEMM summed over ``layers``, ``quantized_layers`` of them on ``kernel`` and the rest
    on ``sixteen`` (a checkpoint that leaves some layers in 16 bits): the times add up; the
    half-saturation point is the kernels' weighted by their compute time."""
    (quant,) = _layer_gemms((shape,), quantized_layers, dtype_bytes, kernel, gpu)
    if quantized_layers == layers:
        return quant
    (plain,) = _layer_gemms((shape,), layers - quantized_layers, dtype_bytes, sixteen, gpu)
    if not quantized_layers:
        return plain
    compute = quant[0] + plain[0]
    half = (quant[0] * quant[3] + plain[0] * plain[3]) / compute
    return (compute, quant[1] + plain[1], quant[2] + plain[2], half, quant[4] + plain[4])


def _partial_layer_names(model: ModelSpec, up: str, down: str) -> list[str]:
    """``ModelSpec.linear_layers`` names of the GEMMs of some layers only, in the order the
    step prices them: a MoE model's leading dense MLPs, then its shared experts."""
    names = []
    if model.is_moe and model.num_dense_layers:
        names += [up, down]
    if model.is_moe and model.shared_expert_width:
        names += [f"shared_experts.{up}", f"shared_experts.{down}"]
    return names


def _layer_gemms(
    shapes: Iterable[tuple[float, float]],
    layers: int,
    dtype_bytes: int,
    kernel: GemmKernel,
    gpu: GpuSpec,
) -> tuple[tuple[float, float, float, float, float], ...]:
    """Per (in, out) GEMM, summed over layers: (compute s per row, weight-read s, activation s
    per row, half-saturation rows, floor s) on ``kernel``: its peak, efficiencies, floor and
    stored weights."""
    fit = kernel.fit
    s_per_flop = 1.0 / (fit.compute_efficiency * kernel.peak_flops * kernel.compute_ratio)
    s_per_byte = 1.0 / (fit.memory_efficiency * gpu.mem_bytes_per_s)
    quant, a = kernel.weight, kernel.activation_bytes
    return tuple(
        (
            layers * _FLOPS_PER_MAC * k * n * s_per_flop,
            layers * k * n * dtype_bytes * s_per_byte if quant is None
            else layers * quant.weight_bytes(k, n) * s_per_byte,
            layers * (k + n) * dtype_bytes * s_per_byte if a is None
            else layers * (k * a + n * dtype_bytes) * s_per_byte,
            fit.compute_half_tokens,
            layers * fit.floor_s,
        )
        for k, n in shapes
    )


@lru_cache(maxsize=64)
def cost_model(
    model: ModelSpec,
    gpu: GpuSpec,
    tp: int = 1,
    *,
    tp_link_bytes_per_s: float | None = None,
    tp_link_latency_s: float | None = None,
    dp: int = 1,
    expert_parallel: bool = False,
) -> CostModel:
    """A shared ``CostModel`` per (model, GPU, TP, TP link, data-parallel MoE group)."""
    return CostModel(
        model,
        gpu,
        tp,
        tp_link_bytes_per_s=tp_link_bytes_per_s,
        tp_link_latency_s=tp_link_latency_s,
        dp=dp,
        expert_parallel=expert_parallel,
    )


def step_time(batch: BatchShape, model: ModelSpec, gpu: GpuSpec, tp: int = 1) -> StepCost:
    """Price one step; see :class:`CostModel` (hold one in a hot loop: hashing specs costs)."""
    return cost_model(model, gpu, tp).step_time(batch)
