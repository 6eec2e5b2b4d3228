"""KV-cache capacity the way vLLM sizes it at start-up (vllm_scheduler_spec.md section 6).

Per GPU::

    requested  = ceil(mem_capacity x gpu_memory_utilization)
    available  = requested - weights / tp - activation peak - non-torch reserve
                 - CUDA-graph estimate                      (vLLM 0.21 and later)
    num_blocks = available // bytes_per_block

Weights count as stored (4-bit AWQ codes plus their scales, FP8 bytes, ...; see
``ModelSpec.weight_bytes``), and a block holds ``block_size`` tokens' K and V in the engine's
``kv_cache_dtype``: vllm/v1/kv_cache_interface.py ``AttentionSpec.real_page_size_bytes`` is
2 x block_size x heads x head_dim x the cache dtype's size per layer, so fp8 (one byte per
element) halves a BF16 block and doubles the blocks that fit. Under multi-head latent attention
(DeepSeek-V2/V3) a block holds one ``kv_lora_rank + qk_rope_head_dim`` vector per token and
layer (``MLAAttentionSpec``: one head of that size, no separate K and V), and every TP rank
holds all of it (``ModelSpec.kv_bytes_per_token``): TP shrinks each rank's weights but not its
bytes per cached token.

vLLM measures the activation peak and the non-torch memory by profiling a dummy forward of
``max_num_batched_tokens`` tokens; here the first is estimated from the layer shapes and the
second is a per-GPU catalog constant (``non_torch_memory_bytes``, to be calibrated).

CUDA graphs are captured after the KV cache is allocated. Up to vLLM 0.20 the profile leaves
them out (they take part of the memory ``gpu_memory_utilization`` leaves over); PR #30515 added
an estimate behind ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS``, on by default since v0.21.0
(its log line: "CUDA graph memory profiling is enabled (default since v0.21.0)"), which is
subtracted from the KV budget. vLLM captures one piecewise graph per capture size and, with
``FULL_AND_PIECEWISE`` (the default mode), one full graph per size up to ``max_num_seqs``
(uniform decode batches); :func:`cuda_graph_bytes` prices each graph per decoder layer, with
the one published estimate we have (:data:`CUDA_GRAPH_BYTES_PER_GRAPH_LAYER`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from clustersim.catalog.specs import GIGA, GpuSpec, ModelSpec
from clustersim.errors import ConfigError

# Hidden-size tensors alive at the MLP's peak: the residual stream and the normed input.
_HIDDEN_TENSORS_AT_PEAK = 2

CUDA_GRAPH_PROFILE_SINCE = (0, 21)
"""The first vLLM release whose start-up profile subtracts CUDA-graph memory by default."""

CUDA_GRAPH_BYTES_PER_GRAPH_LAYER = 180_000
"""CUDA-graph memory vLLM's profiler estimates per captured graph and decoder layer. From the
one published estimate with its graph counts: vLLM 0.21.0 serving Qwen3-8B (36 layers) on an
RTX A5000 logged "Profiling CUDA graph memory: PIECEWISE=51 (largest=512), FULL=35
(largest=256)" and "Estimated CUDA graph memory: 0.52 GiB total" (LMCache issue #3430):
0.52 GiB / (86 graphs x 36 layers) = 180 kB."""

_MAX_CUDAGRAPH_CAPTURE_SIZE = 512


def cudagraph_capture_sizes(max_num_seqs: int, max_num_batched_tokens: int) -> list[int]:
    """vLLM's default ``cudagraph_capture_sizes``: 1, 2, 4, then every 8 up to 256, then every
    16, up to ``min(2 x max_num_seqs, 512, max_num_batched_tokens)`` (the RTX 4090 run's
    resolved config lists 51 sizes, 1 to 512, at max_num_seqs 256)."""
    largest = min(2 * max_num_seqs, _MAX_CUDAGRAPH_CAPTURE_SIZE, max_num_batched_tokens)
    sizes = [1, 2, 4, *range(8, 256, 8), *range(256, _MAX_CUDAGRAPH_CAPTURE_SIZE + 1, 16)]
    return [size for size in sizes if size <= largest]


def cuda_graph_bytes(model: ModelSpec, max_num_seqs: int, max_num_batched_tokens: int) -> int:
    """vLLM's start-up estimate of its CUDA graphs on one rank (0.21 and later): piecewise
    graphs at every capture size and full graphs at those up to ``max_num_seqs``, each
    :data:`CUDA_GRAPH_BYTES_PER_GRAPH_LAYER` per decoder layer."""
    sizes = cudagraph_capture_sizes(max_num_seqs, max_num_batched_tokens)
    graphs = len(sizes) + sum(1 for size in sizes if size <= max_num_seqs)
    return graphs * model.num_layers * CUDA_GRAPH_BYTES_PER_GRAPH_LAYER


def parse_vllm_version(version: str) -> tuple[int, int]:
    """``"0.19"`` or ``"0.19.1"`` as ``(0, 19)``."""
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def profiles_cuda_graphs(vllm_version: str) -> bool:
    """Whether this vLLM release subtracts its CUDA-graph estimate from the KV budget."""
    return parse_vllm_version(vllm_version) >= CUDA_GRAPH_PROFILE_SINCE


def kv_bytes_per_block(
    model: ModelSpec, tp: int, block_size: int = 16, kv_dtype_bytes: int | None = None
) -> int:
    """Bytes one KV block takes on one TP rank: K and V of ``block_size`` tokens in every
    layer, or in one group's layers where sliding-window layers split the cache into groups
    (``ModelSpec.kv_bytes_per_page``)."""
    return block_size * model.kv_bytes_per_page(tp, kv_dtype_bytes)


def activation_peak_bytes(model: ModelSpec, tp: int, num_tokens: int) -> int:
    """Estimated peak activation memory of one forward over ``num_tokens`` tokens on one rank.

    The largest live set is inside the MLP: the residual stream and normed input (hidden wide),
    the up-projection output (2f/tp for gate+up, f/tp for fc1) and the activation output
    (f/tp). Attention scratch is smaller with FlashAttention and is left out; the sampler's
    logits are part of the non-torch reserve. In a mixture-of-experts layer every token has
    ``num_experts_per_tok`` routed rows of expert width (vLLM's fused-MoE caches are
    tokens x top-k wide); the router logits are small and left out. Weights (``kv_budget``)
    count every expert. A MoE model with leading dense layers (DeepSeek's
    ``first_k_dense_replace``) peaks in whichever MLP is wider.
    """
    hidden = _HIDDEN_TENSORS_AT_PEAK * model.hidden_size
    if model.is_moe:
        f_shard = model.moe_intermediate_size / tp
        up_out = (model.mlp_matrices - 1) * f_shard
        width = hidden + model.num_experts_per_tok * (up_out + f_shard)
        if model.num_dense_layers:
            f_shard = model.intermediate_size / tp
            width = max(width, hidden + (model.mlp_matrices - 1) * f_shard + f_shard)
    else:
        f_shard = model.intermediate_size / tp
        up_out = (model.mlp_matrices - 1) * f_shard
        width = hidden + up_out + f_shard
    return math.ceil(num_tokens * width * model.dtype_bytes)


@dataclass(frozen=True, slots=True)
class KvBudget:
    """How one GPU's memory splits at start-up, in bytes, and the KV blocks that fit."""

    requested_bytes: int
    weight_bytes: int
    activation_bytes: int
    non_torch_bytes: int
    cuda_graph_bytes: int
    available_bytes: int
    bytes_per_block: int
    num_gpu_blocks: int


def kv_budget(
    model: ModelSpec,
    gpu: GpuSpec,
    tp: int,
    *,
    gpu_memory_utilization: float,
    block_size: int,
    max_num_batched_tokens: int,
    kv_dtype_bytes: int | None = None,
    dp: int = 1,
    cuda_graph_bytes: int = 0,
    draft_weight_bytes: int = 0,
) -> KvBudget:
    """Split one GPU's memory as vLLM does; raise ``ConfigError`` if no KV block fits.
    ``dp``: data-parallel ranks sharing a MoE model's experts (spread over ``dp x tp`` GPUs).
    ``cuda_graph_bytes``: the CUDA-graph estimate the profile subtracts (0: vLLM before 0.21,
    or no graphs). ``draft_weight_bytes``: a speculative draft's own weights on this GPU
    (:func:`draft_weight_bytes_per_gpu`), loaded beside the model's before the profile."""
    if not 0.0 < gpu_memory_utilization <= 1.0:
        raise ConfigError(
            "engine.gpu_memory_utilization", f"must be in (0, 1], got {gpu_memory_utilization}"
        )
    model.check_tp(tp)
    requested = math.ceil(gpu.mem_capacity_bytes * gpu_memory_utilization)
    weights = math.ceil(weight_bytes_per_gpu(model, tp, dp)) + draft_weight_bytes
    activation = activation_peak_bytes(model, tp, max_num_batched_tokens)
    non_torch = gpu.non_torch_memory_bytes
    available = requested - weights - activation - non_torch - cuda_graph_bytes
    bytes_per_block = kv_bytes_per_block(model, tp, block_size, kv_dtype_bytes)
    num_blocks = max(0, available) // bytes_per_block
    if num_blocks < 1:
        raise ConfigError(
            "engine",
            f"{model.id} does not fit on {gpu.id} at tensor_parallel_size {tp}: "
            f"{gpu_memory_utilization:g} x {gpu.mem_capacity_bytes / GIGA:.2f} GB = "
            f"{requested / GIGA:.2f} GB requested, weights {weights / GIGA:.2f} GB"
            + (f" (the draft's {draft_weight_bytes / GIGA:.2f} GB included)"
               if draft_weight_bytes else "")
            + f" + activations {activation / GIGA:.2f} GB + non-torch {non_torch / GIGA:.2f} GB"
            + (f" + CUDA graphs {cuda_graph_bytes / GIGA:.2f} GB" if cuda_graph_bytes else "")
            + " leave "
            f"{available / GIGA:.2f} GB, less than one {bytes_per_block}-byte KV block",
        )
    return KvBudget(
        requested_bytes=requested,
        weight_bytes=weights,
        activation_bytes=activation,
        non_torch_bytes=non_torch,
        cuda_graph_bytes=cuda_graph_bytes,
        available_bytes=available,
        bytes_per_block=bytes_per_block,
        num_gpu_blocks=num_blocks,
    )


def weight_bytes_per_gpu(model: ModelSpec, tp: int, dp: int = 1) -> float:
    """Weights on one GPU, as stored (a quantized model's codes, scales and zero points):
    everything sharded ``tp`` ways, except a MoE model's experts, which data-parallel ranks
    share: ``dp x tp`` ways."""
    experts = model.expert_weight_bytes
    return (model.weight_bytes - experts) / tp + experts / (tp * dp)


def draft_weight_bytes_per_gpu(model: ModelSpec, method: str, draft_layers: float, tp: int,
                               dp: int = 1) -> float:
    """A speculative draft's own weights on one GPU of the target's TP group.

    vLLM loads the draft beside the target and hands it the target's embedding and LM head
    (``EagleProposer.load_model``, vllm/v1/spec_decode/eagle.py: always for MTP, for EAGLE
    whenever the head brings none of its own), so what the draft adds is its decoder layers
    and the projection that joins the target's hidden state to the next token's embedding
    (``2h -> h``: EAGLE's ``fc``, the MTP module's ``eh_proj``, a plain linear layer that
    every rank holds whole):

    - ``mtp``: ``draft_layers`` of the target's own layers (a MoE layer for a MoE model),
      stored as the target stores its layers (DeepSeek-V3's checkpoint quantizes the MTP
      layer like the others); the experts split over ``dp x tp`` ranks as the target's do,
      the rest at the model's mean bytes per non-expert weight, over ``tp``;
    - ``eagle``: ``draft_layers`` dense decoder layers shaped like the target's, in 16-bit
      (EAGLE heads are published unquantized), over ``tp``;
    - ``ngram``: nothing (the drafts are looked up on the host).
    """
    if method == "ngram" or draft_layers <= 0:
        return 0.0
    h = model.hidden_size
    join = 2 * h * h * model.dtype_bytes
    if method == "eagle":
        return draft_layers * model.layer_params(dense=True) * model.dtype_bytes / tp + join
    routed = model.num_moe_layers * model.num_experts * model.expert_params
    per_param = (model.weight_bytes - model.expert_weight_bytes) / (model.num_params - routed)
    if not model.is_moe:
        return draft_layers * model.layer_params(dense=True) * per_param / tp + join
    experts = model.expert_weight_bytes / model.num_moe_layers
    rest = model.layer_params(dense=False, routed_experts=0) * per_param
    return draft_layers * (rest / tp + experts / (tp * dp)) + join


def num_gpu_blocks(
    model: ModelSpec,
    gpu: GpuSpec,
    tp: int,
    *,
    gpu_memory_utilization: float,
    block_size: int,
    max_num_batched_tokens: int,
    kv_dtype_bytes: int | None = None,
    dp: int = 1,
    cuda_graph_bytes: int = 0,
    draft_weight_bytes: int = 0,
) -> int:
    """KV blocks per GPU (vLLM's ``num_gpu_blocks``, block 0 included); see :func:`kv_budget`."""
    return kv_budget(
        model,
        gpu,
        tp,
        gpu_memory_utilization=gpu_memory_utilization,
        block_size=block_size,
        max_num_batched_tokens=max_num_batched_tokens,
        kv_dtype_bytes=kv_dtype_bytes,
        dp=dp,
        cuda_graph_bytes=cuda_graph_bytes,
        draft_weight_bytes=draft_weight_bytes,
    ).num_gpu_blocks
