"""KV-cache capacity the way vLLM sizes it at start-up (vllm_scheduler_spec.md section 6).

Per GPU, for vLLM up to 0.33 (``Worker.determine_available_memory``)::

    requested  = ceil(total x gpu_memory_utilization)      total: what PyTorch reports
    available  = requested - weights - activation peak - non-torch increase
                 - CUDA-graph estimate                      (vLLM 0.20 and later)
    num_blocks = available // bytes_per_block

and for vLLM 0.34's extensible KV cache, sized after warm-up from the memory actually free
(``measure_kv_cache_bytes``, vllm/v1/worker/extensible_kv_cache.py)::

    used       = weights + non-torch + CUDA graphs
    available  = min(requested - used, total - startup - used - margin) - activation peak
    margin     = max(1 GiB, 0.75 x activation peak)

``total`` is the device memory PyTorch reports (``GpuSpec.mem_capacity_bytes``), ``weights``
what loading the model allocates (:func:`loaded_weight_bytes`: the weights as stored, the
rotary table, MXFP4 experts in the layout their kernel needs), the activation peak and the
release's rules are in :mod:`clustersim.cost.vllm_profile`, and the non-torch increase is a
per-GPU catalog constant (``non_torch_memory_bytes``, plus ``tp_non_torch_memory_bytes`` on
every rank of a tensor-parallel group).

A block holds ``block_size`` tokens' K and V in the engine's ``kv_cache_dtype``:
vllm/v1/kv_cache_interface.py ``AttentionSpec.real_page_size_bytes`` is 2 x block_size x heads
x head_dim x the cache dtype's size per layer, so fp8 (one byte per element) halves a BF16
block and doubles the blocks that fit. Under multi-head latent attention (DeepSeek-V2/V3) a
block holds one ``kv_lora_rank + qk_rope_head_dim`` vector per token and layer
(``MLAAttentionSpec``: one head of that size, no separate K and V), and every TP rank holds all
of it (``ModelSpec.kv_bytes_per_token``): TP shrinks each rank's weights but not its bytes per
cached token. Sliding-window layers split the cache into groups of layers that share the
blocks (``ModelSpec.kv_bytes_per_page``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from clustersim.catalog.specs import GIGA, GpuSpec, ModelSpec
from clustersim.cost.vllm_profile import (
    CUDA_GRAPH_BYTES_PER_GRAPH_LAYER,
    EXTENSIBLE_MARGIN_FLOOR_BYTES,
    EXTENSIBLE_MARGIN_FRACTION,
    STARTUP_RESERVED_BYTES,
    STARTUP_RESERVED_TP_BYTES,
    activation_peak_bytes,
    cuda_graph_bytes,
    cudagraph_capture_sizes,
    parse_vllm_version,
    profile_rules,
    profiles_cuda_graphs,
)
from clustersim.errors import ConfigError

__all__ = [
    "CUDA_GRAPH_BYTES_PER_GRAPH_LAYER",
    "KvBudget",
    "activation_peak_bytes",
    "cuda_graph_bytes",
    "cudagraph_capture_sizes",
    "draft_weight_bytes_per_gpu",
    "kv_budget",
    "kv_bytes_per_block",
    "loaded_weight_bytes",
    "num_gpu_blocks",
    "parse_vllm_version",
    "profile_rules",
    "profiles_cuda_graphs",
    "weight_bytes_per_gpu",
]

DEFAULT_VLLM_VERSION = "0.33"
"""The release whose profile :func:`kv_budget` follows when none is given (the scheduler's)."""


def kv_bytes_per_block(
    model: ModelSpec, tp: int, block_size: int = 16, kv_dtype_bytes: int | None = None
) -> int:
    """Bytes one KV block takes on one TP rank: K and V of ``block_size`` tokens in every
    layer, or in one group's layers where sliding-window layers split the cache into groups
    (``ModelSpec.kv_bytes_per_page``)."""
    return block_size * model.kv_bytes_per_page(tp, kv_dtype_bytes)


@dataclass(frozen=True, slots=True)
class KvBudget:
    """How one GPU's memory splits at start-up, in bytes, and the KV blocks that fit."""

    requested_bytes: int
    weight_bytes: int
    activation_bytes: int
    non_torch_bytes: int
    cuda_graph_bytes: int
    reserved_bytes: int
    """What vLLM 0.34's extensible KV cache keeps free besides (the startup memory and its
    margin, where they bind rather than ``requested``); 0 before 0.34."""
    available_bytes: int
    bytes_per_block: int
    num_gpu_blocks: int


def kv_budget(
    model: ModelSpec,
    gpu: GpuSpec,
    tp: int,
    *,
    gpu_memory_utilization: float | None = None,
    block_size: int,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    vllm_version: str = DEFAULT_VLLM_VERSION,
    kv_dtype_bytes: int | None = None,
    dp: int = 1,
    cuda_graph_bytes: int = 0,
    draft_weight_bytes: int = 0,
) -> KvBudget:
    """Split one GPU's memory as vLLM ``vllm_version`` does; raise ``ConfigError`` if no KV
    block fits. ``gpu_memory_utilization``: None for the release's default.
    ``max_num_seqs``: bounds the rows of the profile's dummy sampler run.
    ``dp``: data-parallel ranks sharing a MoE model's experts (spread over ``dp x tp`` GPUs).
    ``cuda_graph_bytes``: the CUDA-graph estimate (:func:`cuda_graph_bytes`), subtracted where
    the release does. ``draft_weight_bytes``: a speculative draft's own weights on this GPU
    (:func:`draft_weight_bytes_per_gpu`), loaded beside the model's before the profile."""
    rules = profile_rules(vllm_version)
    util = (rules.default_gpu_memory_utilization if gpu_memory_utilization is None
            else gpu_memory_utilization)
    if not 0.0 < util <= 1.0:
        raise ConfigError("engine.gpu_memory_utilization", f"must be in (0, 1], got {util}")
    model.check_tp(tp)
    total = gpu.mem_capacity_bytes
    requested = math.ceil(total * util)
    weights = math.ceil(loaded_weight_bytes(model, gpu, tp, dp)) + draft_weight_bytes
    num_reqs = min(max_num_seqs, max_num_batched_tokens)
    activation = activation_peak_bytes(model, tp, max_num_batched_tokens, num_reqs, rules, gpu)
    non_torch = gpu.non_torch_memory_bytes + (gpu.tp_non_torch_memory_bytes if tp > 1 else 0)
    graphs = cuda_graph_bytes if rules.subtracts_cuda_graphs else 0
    used = weights + non_torch + graphs
    available = requested - used - activation
    reserved = 0
    if rules.extensible_kv_cache:
        reserved = (STARTUP_RESERVED_BYTES + (STARTUP_RESERVED_TP_BYTES if tp > 1 else 0)
                    + max(EXTENSIBLE_MARGIN_FLOOR_BYTES,
                          int(EXTENSIBLE_MARGIN_FRACTION * activation)))
        available = min(available, total - reserved - used - activation)
        reserved = max(0, requested - used - activation - available)
    bytes_per_block = kv_bytes_per_block(model, tp, block_size, kv_dtype_bytes)
    num_blocks = max(0, available) // bytes_per_block
    if num_blocks < 1:
        raise ConfigError(
            "engine",
            f"{model.id} does not fit on {gpu.id} at tensor_parallel_size {tp}: "
            f"{util:g} x {total / GIGA:.2f} GB = "
            f"{requested / GIGA:.2f} GB requested, weights {weights / GIGA:.2f} GB"
            + (f" (the draft's {draft_weight_bytes / GIGA:.2f} GB included)"
               if draft_weight_bytes else "")
            + f" + activations {activation / GIGA:.2f} GB + non-torch {non_torch / GIGA:.2f} GB"
            + (f" + CUDA graphs {graphs / GIGA:.2f} GB" if graphs else "")
            + (f" + {reserved / GIGA:.2f} GB kept free" if reserved else "")
            + " leave "
            f"{available / GIGA:.2f} GB, less than one {bytes_per_block}-byte KV block",
        )
    return KvBudget(
        requested_bytes=requested,
        weight_bytes=weights,
        activation_bytes=activation,
        non_torch_bytes=non_torch,
        cuda_graph_bytes=graphs,
        reserved_bytes=reserved,
        available_bytes=available,
        bytes_per_block=bytes_per_block,
        num_gpu_blocks=num_blocks,
    )


def loaded_weight_bytes(model: ModelSpec, gpu: GpuSpec, tp: int, dp: int = 1) -> float:
    """What loading the model allocates on one GPU (vLLM's "Model loading took N GiB"): the
    weights as stored (:func:`weight_bytes_per_gpu`), MXFP4 experts in the layout their kernel
    takes (:func:`mxfp4_expert_padding`), and the rotary embedding's cos/sin table, one row
    per position in the model's dtype on every rank (``RotaryEmbedding.cos_sin_cache``:
    Llama-3.1-8B 14.96 GiB of weights + 0.03 GiB of table, "Model loading took 14.99 GiB")."""
    weights = weight_bytes_per_gpu(model, tp, dp)
    pad = mxfp4_expert_padding(model, gpu)
    if pad != 1.0:
        weights += (pad - 1.0) * model.expert_weight_bytes / (tp * dp)
    rotary_dim = model.qk_rope_head_dim if model.is_mla else model.head_dim
    return weights + model.max_position_embeddings * rotary_dim * model.dtype_bytes


_MXFP4_HOPPER_ALIGN = 256
_MARLIN_N_ALIGN, _MARLIN_K_ALIGN = 256, 128
_FLASHINFER_ALIGN = 256


def mxfp4_expert_padding(model: ModelSpec, gpu: GpuSpec) -> float:
    """How much larger than stored MXFP4 experts are once loaded for their kernel
    (``Mxfp4MoEMethod.create_weights``, vllm/model_executor/layers/quantization/mxfp4.py):
    Marlin (compute capability below 9.0) rounds the hidden size up to 256 and the expert
    width to 128; FlashInfer (10.x) both to 256; Hopper's Triton kernels swizzle them into a
    layout of 256-wide tiles. gpt-oss's 2880 becomes 3072 on an H100, the 16/15 by which
    llm-d's vLLM 0.11.0 logs exceed the stored bytes ("Model loading took 13.47 GiB" for
    gpt-oss-20b, 64.38 GiB for gpt-oss-120b: 12.83 and 60.79 GiB stored). 1.0 for other
    formats."""
    q = model.quantization
    if q is None or q.method != "mxfp4" or not model.is_moe:
        return 1.0
    capability = gpu.capability or 0
    h, f = model.hidden_size, model.moe_intermediate_size
    if capability < 90:
        h_pad, f_pad = _round_up(h, _MARLIN_N_ALIGN), _round_up(f, _MARLIN_K_ALIGN)
    elif capability < 100:
        h_pad, f_pad = _round_up(h, _MXFP4_HOPPER_ALIGN), f
    else:
        h_pad, f_pad = _round_up(h, _FLASHINFER_ALIGN), _round_up(f, _FLASHINFER_ALIGN)
    return h_pad * f_pad / (h * f)


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


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


def num_gpu_blocks(model: ModelSpec, gpu: GpuSpec, tp: int, **settings) -> int:
    """KV blocks per GPU (vLLM's ``num_gpu_blocks``, block 0 included); see :func:`kv_budget`."""
    return kv_budget(model, gpu, tp, **settings).num_gpu_blocks
