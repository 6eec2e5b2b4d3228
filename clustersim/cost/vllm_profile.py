"""What each vLLM release's start-up memory profile does, version by version.

vLLM sizes its KV cache from a profile it runs at start-up (``Worker.determine_available_memory``,
vllm/v1/worker/gpu_worker.py): a dummy forward of ``max_num_batched_tokens`` tokens followed by
a dummy sampler run over ``min(max_num_seqs, max_num_batched_tokens)`` rows of logits
(``GPUModelRunner.profile_run``), whose PyTorch peak is the *activation peak*; the memory that
grew outside PyTorch meanwhile (NCCL's buffers, lazily loaded kernels) is the *non-torch*
increase. What the sampler holds at its peak, whether the CUDA-graph estimate is subtracted,
the default ``gpu_memory_utilization`` and how the "GPU KV cache size: N tokens" line counts
changed between releases; the rules below were read from the released wheels' sources::

    release   sampler at the profile's peak                  graphs   util   log line
    < 0.17    V1: sort-based top-k/top-p (38.35 B a logit)    no       0.90   blocks/groups x size
    0.17      V1: Triton top-k/top-p (14 B + SMs x vocab)     no       0.90   blocks/groups x size
    0.20      (same)                                          yes      0.92   blocks/groups x size
    0.21      (same)                                          yes      0.92   concurrency x len
    0.24      V2 model runner, plain dummy pass (2 B)         yes      0.92   concurrency x len
    0.33      V2, plus a warm-up pass in fp32 (6 B + SMs)     yes      0.92   concurrency x len
    0.34      extensible KV cache: sized after warm-up from free memory, util 1.0

(0.22 and 0.23 ran the V2 runner for dense, unquantized Qwen3 only and V1 for everything
else; clustersim gives them the V1 rule.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from clustersim.catalog.specs import GpuSpec, ModelSpec

GIB = 1 << 30

SORT_SAMPLER_BYTES_PER_LOGIT = 38.35
"""Live bytes per logit at the sampler's peak before vLLM 0.17, whose dummy run asks for top-k
and top-p and so sorts the whole vocabulary (``apply_top_k_top_p``, vllm/v1/sample/ops/
topk_topp_sampler.py at v0.11.0). Counted from the code: the bf16 logits (2), their fp32 copy
(4), the sorted values and int64 indices (12) and the sort's own scratch (alternate key and
value buffers and the index iota, 20): 38. Fitted: 38.35, the mean over three of llm-d's vLLM
0.11.0 H100 profiles at max_num_seqs 1024 (Llama-3.1-8B 38.41, Qwen3-32B 38.39, gpt-oss-20b
38.25: their logged "peak activation" less the profile's hidden states, over 1024 x vocab;
github.com/llm-d/llm-d-benchmark config_explorer/empirical-vllm-memory-results.md)."""

TRITON_SAMPLER_BYTES_PER_LOGIT = 14
"""From vLLM 0.17 the V1 sampler masks top-k and top-p in place with a Triton kernel
(``apply_top_k_top_p_triton``): the bf16 logits (2), the fp32 copy (4), the softmax (4) and the
exponential noise of ``random_sample`` (4) are live at its peak."""

V2_PLAIN_SAMPLER_BYTES_PER_LOGIT = 2
"""vLLM 0.24-0.32's V2 model runner profiles the sampler with default dummy requests
(``_dummy_sampler_run``, vllm/v1/worker/gpu/model_runner.py): no logits processing, so only
the bf16 logits are held."""

V2_WARMUP_SAMPLER_BYTES_PER_LOGIT = 6
"""From vLLM 0.33 the V2 runner repeats the dummy sampler pass with every sampling parameter
on (``SamplingParams.for_sampler_warmup``): the bf16 logits and their fp32 copy (2 + 4), the
penalties and top-k/top-p applied in place (their state is allocated before the profile)."""

TRITON_TOPK_BUFFER_BYTES = 4
"""The Triton top-k/top-p kernel keeps one fp32 row of vocabulary per program, one program per
SM at most (``_TRITON_BUFFER_CACHE``), allocated on its first call: inside the profile."""

DEFAULT_SM_COUNT = 132
"""SMs assumed for the Triton top-k buffer where the catalog has no ``sm_count`` (an H100's)."""

EXTENSIBLE_MARGIN_FLOOR_BYTES = 1 << 30
EXTENSIBLE_MARGIN_FRACTION = 0.75
"""vLLM 0.34's extensible KV cache keeps ``max(1 GiB, 0.75 x the transient peak)`` free on top
of the transient peak itself (``KV_CACHE_MARGIN_FLOOR_BYTES``, ``KV_CACHE_MARGIN_FRACTION``,
vllm/v1/worker/extensible_kv_cache.py ``measure_kv_cache_bytes``)."""

STARTUP_RESERVED_BYTES = int(0.61 * GIB)
STARTUP_RESERVED_TP_BYTES = int(0.93 * GIB)
"""Device memory in use before vLLM's start-up snapshot (CUDA context, cuBLAS handles; with
tp > 1 NCCL's communicators too): llm-d's H100 logs read "Free memory on device 78.57/79.18
GiB on startup" at tp 1 and "77.64/79.18" at tp 2. Only vLLM 0.34's extensible KV cache,
sized from the memory actually free, sees it."""

_MAX_CUDAGRAPH_CAPTURE_SIZE = 512

CUDA_GRAPH_BYTES_PER_GRAPH_LAYER = 180_000
"""CUDA-graph memory vLLM's profiler estimates per captured graph and decoder layer. From the
one published estimate with its graph counts: vLLM 0.21.0 serving Qwen3-8B (36 layers) on an
RTX A5000 logged "Profiling CUDA graph memory: PIECEWISE=51 (largest=512), FULL=35
(largest=256)" and "Estimated CUDA graph memory: 0.52 GiB total" (LMCache issue #3430):
0.52 GiB / (86 graphs x 36 layers) = 180 kB."""


@dataclass(frozen=True, slots=True)
class ProfileRules:
    """What one vLLM release's start-up profile does (module docstring)."""

    version: tuple[int, int]
    default_gpu_memory_utilization: float
    sampler_bytes_per_logit: float
    triton_topk_buffer: bool
    """The profiled sampler pass runs the Triton top-k/top-p kernel (its buffer counts)."""
    subtracts_cuda_graphs: bool
    """The CUDA-graph estimate comes off the KV budget (``VLLM_MEMORY_PROFILER_ESTIMATE_
    CUDAGRAPHS``, default 1 in vllm/envs.py from v0.20.0)."""
    logs_tokens_by_concurrency: bool
    """"GPU KV cache size" is ``max_concurrency x max_model_len`` (from v0.21.0,
    ``_report_kv_cache_config``), not ``num_blocks // groups x block_size``."""
    extensible_kv_cache: bool
    """The KV cache is sized after warm-up from the memory then free (v0.34.0)."""


def parse_vllm_version(version: str) -> tuple[int, int]:
    """``"0.19"`` or ``"0.19.1"`` as ``(0, 19)``."""
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def profile_rules(version: str) -> ProfileRules:
    """The start-up profile of vLLM ``version`` (``major.minor[.patch]``)."""
    v = parse_vllm_version(version)
    if v < (0, 17):
        sampler, triton = SORT_SAMPLER_BYTES_PER_LOGIT, False
    elif v < (0, 24):
        sampler, triton = TRITON_SAMPLER_BYTES_PER_LOGIT, True
    elif v < (0, 33):
        sampler, triton = V2_PLAIN_SAMPLER_BYTES_PER_LOGIT, False
    else:
        sampler, triton = V2_WARMUP_SAMPLER_BYTES_PER_LOGIT, True
    extensible = v >= (0, 34)
    return ProfileRules(
        version=v,
        default_gpu_memory_utilization=1.0 if extensible else 0.92 if v >= (0, 20) else 0.9,
        sampler_bytes_per_logit=sampler,
        triton_topk_buffer=triton,
        subtracts_cuda_graphs=v >= (0, 20),
        logs_tokens_by_concurrency=v >= (0, 21),
        extensible_kv_cache=extensible,
    )


def profiles_cuda_graphs(vllm_version: str) -> bool:
    """Whether this vLLM release subtracts its CUDA-graph estimate from the KV budget."""
    return profile_rules(vllm_version).subtracts_cuda_graphs


# ------------------------------------------------------------------ the activation peak
def forward_peak_bytes(model: ModelSpec, tp: int, num_tokens: int) -> int:
    """Peak activation memory of the profile's dummy forward over ``num_tokens`` on one rank.

    The largest live set is at the end of the MLP: the residual stream, the normed input that
    the caller still holds, the up-projection output (2f/tp for gate+up, f/tp for fc1), the
    activation output (f/tp) and the down-projection's output (h), as vLLM's ``LlamaMLP``
    keeps its locals until it returns. Attention scratch is smaller (the profile skips
    attention from the V2 runner on). A mixture-of-experts layer (vLLM's fused MoE) holds,
    per token and routed expert, one workspace as wide as the larger of the gate+up output and
    the hidden size, and the activation output; a MoE model with leading dense layers peaks in
    whichever MLP is wider.
    """
    hidden = 3 * model.hidden_size
    dense_f = model.intermediate_size / tp
    dense = hidden + (model.mlp_matrices - 1) * dense_f + dense_f
    if model.is_moe:
        f_shard = model.moe_intermediate_size / tp
        up_out = (model.mlp_matrices - 1) * f_shard
        width = hidden + model.num_experts_per_tok * (max(up_out, model.hidden_size) + f_shard)
        if model.num_dense_layers:
            width = max(width, dense)
    else:
        width = dense
    return math.ceil(num_tokens * width * model.dtype_bytes)


def sampler_peak_bytes(model: ModelSpec, tp: int, num_reqs: int, rules: ProfileRules,
                       gpu: GpuSpec) -> int:
    """Peak of the profile's dummy sampler run over ``num_reqs`` rows of logits on one rank:
    the release's live bytes per logit over the whole vocabulary (the logits are gathered on
    every rank, each of which samples; llm-d's tp 2 logs show the same peak as tp 1), and the
    Triton top-k/top-p buffer where that kernel runs."""
    vocab = model.vocab_size
    logits = num_reqs * vocab * rules.sampler_bytes_per_logit
    if rules.triton_topk_buffer:
        sms = gpu.sm_count or DEFAULT_SM_COUNT
        programs = min(sms, num_reqs)
        rows = min(1 << max(0, programs - 1).bit_length(), sms)
        logits += rows * vocab * TRITON_TOPK_BUFFER_BYTES
    return math.ceil(logits)


def activation_peak_bytes(model: ModelSpec, tp: int, num_tokens: int, num_reqs: int,
                          rules: ProfileRules, gpu: GpuSpec) -> int:
    """The PyTorch peak of vLLM's start-up profile on one rank: the dummy forward's, or the
    sampler's on top of the forward's hidden states (held until the profile returns),
    whichever is larger. ``num_reqs``: ``min(max_num_seqs, max_num_batched_tokens)``."""
    kept = num_tokens * model.hidden_size * model.dtype_bytes
    return max(forward_peak_bytes(model, tp, num_tokens),
               kept + sampler_peak_bytes(model, tp, num_reqs, rules, gpu))


# ------------------------------------------------------------------------- CUDA graphs
def cudagraph_capture_sizes(max_num_seqs: int, max_num_batched_tokens: int) -> list[int]:
    """vLLM's default ``cudagraph_capture_sizes``: 1, 2, 4, then every 8 up to 256, then every
    16, up to ``min(2 x max_num_seqs, 512, max_num_batched_tokens)`` (the RTX 4090 run's
    resolved config lists 51 sizes, 1 to 512, at max_num_seqs 256)."""
    largest = min(2 * max_num_seqs, _MAX_CUDAGRAPH_CAPTURE_SIZE, max_num_batched_tokens)
    sizes = [1, 2, 4, *range(8, 256, 8), *range(256, _MAX_CUDAGRAPH_CAPTURE_SIZE + 1, 16)]
    return [size for size in sizes if size <= largest]


def cuda_graph_bytes(model: ModelSpec, max_num_seqs: int, max_num_batched_tokens: int) -> int:
    """vLLM's start-up estimate of its CUDA graphs on one rank (0.20 and later): piecewise
    graphs at every capture size and full graphs at those up to ``max_num_seqs``, each
    :data:`CUDA_GRAPH_BYTES_PER_GRAPH_LAYER` per decoder layer."""
    sizes = cudagraph_capture_sizes(max_num_seqs, max_num_batched_tokens)
    graphs = len(sizes) + sum(1 for size in sizes if size <= max_num_seqs)
    return graphs * model.num_layers * CUDA_GRAPH_BYTES_PER_GRAPH_LAYER


# ------------------------------------------------------------- the logged token count
def logged_kv_tokens(model: ModelSpec, num_blocks: int, block_size: int, max_model_len: int,
                     max_num_batched_tokens: int, rules: ProfileRules) -> int:
    """The token count vLLM logs as "GPU KV cache size: N tokens" for ``num_blocks`` blocks.

    Before 0.21: ``num_blocks // groups x block_size`` (vllm/v1/core/kv_cache_utils.py
    ``get_kv_cache_config_from_groups`` at v0.11.0). From 0.21: ``max_concurrency x
    max_model_len``, the concurrency being ``num_blocks`` over the blocks one max_model_len
    request takes in every group: ``cdiv(max_model_len, block_size)`` in the full-attention
    group, ``cdiv(min(window - 1 + max_num_batched_tokens, max_model_len), block_size) + 1``
    in each sliding-window one (``SlidingWindowSpec.max_admission_blocks_per_request``).
    """
    groups = 1 + model.kv_window_groups
    if not rules.logs_tokens_by_concurrency:
        return num_blocks // groups * block_size
    per_request = -(-max_model_len // block_size)
    if model.sliding_window is not None:
        window = min(model.sliding_window - 1 + max_num_batched_tokens, max_model_len)
        per_request += model.kv_window_groups * (-(-window // block_size) + 1)
    return int(num_blocks / per_request * max_model_len)
