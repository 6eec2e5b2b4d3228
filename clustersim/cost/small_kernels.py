"""The small memory-bound kernels of a step, counted per architecture.

Between its GEMMs and its attention, a vLLM decoder layer runs element-wise kernels of its own
(vllm/model_executor/models/llama.py, qwen3.py, opt.py, deepseek_v2.py)::

    RMSNorm models                          LayerNorm models (OPT, BLOOM)
      input_layernorm (+ residual add)        self_attn_layer_norm
      [q_norm, k_norm: Qwen3]                 residual add
      rotary_emb on q and k                   final_layer_norm
      post_attention_layernorm (+ residual)   residual add
      act_fn: silu_and_mul (dense MLP)        act_fn: GELU / ReLU

RMSNorm layers take the residual add into the norm (``fused_add_rms_norm``: reads the hidden
states and the residual, writes both), so their residual adds are no kernels of their own;
LayerNorm models add the residual in a kernel of its own. Qwen3 normalises every query and key
head (``q_norm`` and ``k_norm``, two RMSNorm calls per layer) before the rotary embedding; Llama
does not. MiniMax-M2 normalises q and k over all heads of the layer at once
(``MiniMaxText01RMSNormTP``, vllm/model_executor/models/minimax_m2.py): under TP each rank sums
its channels' squares, the ranks all-reduce the two sums per token (priced with the step's
all-reduces, ``clustersim.cost.roofline``), and a second kernel normalises: three launches a
layer, as SGLang counts its fused version (sum, all-reduce, norm: sgl-project/sglang PR #14416),
the scheme vLLM took up (vllm-project/vllm PR #31493); one kernel on one GPU. A multi-head
latent attention layer norms its query and KV latents
(``q_a_layernorm``, ``kv_a_layernorm``) and rotates only the rotary part of each head. A MoE
layer picks each token's experts in a kernel of its own (``topk_softmax``); its activation
runs inside the fused-MoE kernel (its measured fit holds it), its shared experts' does not.
Once per step the embedding gather and the final norm run on every token.

Each kernel is priced as one memory-bound call per layer: ``floor + bytes x max(cta,
tokens / (efficiency x bandwidth))``, where ``bytes`` is what one token reads and writes in it
and ``cta`` the seconds per byte of one thread block streaming one token's row (vLLM's
element-wise kernels give each token one block: a small batch takes as long as one row through
one block, a large one as long as its bytes at the GPU's bandwidth). The GPU's profile holds
``floor``, ``cta`` and ``efficiency`` (``clustersim.calibration.small_kernels``). Because every
kernel shares ``cta`` and the efficiency, the sum over kernels is ``calls x floor + (sum of
bytes) x max(cta, tokens / (efficiency x bandwidth))``: three constants per step
(:class:`SmallKernelPrices`).

The sampler reads the logits of every sampled row on every rank (vLLM V1 samples on each TP
rank): :data:`SAMPLER_PASSES` float32 passes over the vocabulary per row, at the same
efficiency; its fixed part is host time (``per_step_overhead_s``).
"""

from __future__ import annotations

from dataclasses import dataclass

from clustersim.catalog.specs import GpuSpec, ModelSpec

FLOAT32_BYTES = 4
"""The sampler's logits are float32 (vllm/v1/sample/sampler.py casts them)."""
INT32_BYTES = 4
"""The router's expert ids."""
SAMPLER_PASSES = 2.7
"""Float32 passes over the vocabulary the sampler makes per sampled row (the cast, the
temperature, the top-k/top-p draw): fitted on LLMServingSim's RTX 4090 sampler profile beyond
its L2 cache (``clustersim.calibration.small_kernels.fit_sampler_passes``: 144-256 rows of
Llama-3.1-8B, 1.60 us a row at the fitted bandwidth), the card whose L2 (72 MB) is nearest a
datacenter GPU's."""


@dataclass(frozen=True, slots=True)
class SmallKernel:
    """One kind of small kernel of a step: its vLLM name, how many calls a step makes (one
    per layer that runs it, or one per step) and the bytes one token reads and writes in one
    call, on one TP rank."""

    name: str
    calls: int
    bytes_per_token: float


def small_kernels(model: ModelSpec, tp: int = 1) -> tuple[SmallKernel, ...]:
    """The separate small kernels one step of ``model`` runs on one of ``tp`` ranks."""
    e = model.dtype_bytes
    h = model.hidden_size
    layers = model.num_layers
    kernels: list[SmallKernel] = []
    if model.norm == "rmsnorm":
        # fused_add_rms_norm: reads the hidden states and the residual, writes both
        kernels.append(SmallKernel("input_layernorm, post_attention_layernorm "
                                   "(fused_add_rms_norm)", 2 * layers, 4.0 * h * e))
    else:
        kernels.append(SmallKernel("self_attn_layer_norm, final_layer_norm (LayerNorm)",
                                   2 * layers, 2.0 * h * e))
        kernels.append(SmallKernel("residual adds", 2 * layers, 3.0 * h * e))
    if model.is_mla:
        assert model.kv_lora_rank is not None and model.qk_rope_head_dim is not None
        if model.q_lora_rank is not None:
            kernels.append(SmallKernel("q_a_layernorm", layers, 2.0 * model.q_lora_rank * e))
        kernels.append(SmallKernel("kv_a_layernorm", layers, 2.0 * model.kv_lora_rank * e))
        rope = model.qk_rope_head_dim
        # each rank's query heads' rotary part and the one shared rotary key, in place
        rotated = model.num_attention_heads // tp * rope + rope
        kernels.append(SmallKernel("rotary_emb", layers, 2.0 * rotated * e))
    else:
        q_out = model.num_attention_heads // tp * model.head_dim
        kv_out = model.kv_heads_per_gpu(tp) * model.head_dim
        if model.qk_norm:
            kernels.append(SmallKernel("q_norm", layers, 2.0 * q_out * e))
            kernels.append(SmallKernel("k_norm", layers, 2.0 * kv_out * e))
        if model.qk_norm_across_heads and tp > 1:
            # the rank's share of each token's sums of squares (reads q and k, writes two
            # float32), all-reduced over TP, then the normalisation (reads q and k, writes both)
            kernels.append(SmallKernel("q/k norm over all heads: partial variances", layers,
                                       (q_out + kv_out) * e + 2 * FLOAT32_BYTES))
            kernels.append(SmallKernel("q/k norm over all heads: normalise", layers,
                                       2.0 * (q_out + kv_out) * e))
        elif model.qk_norm_across_heads:
            kernels.append(SmallKernel("q_norm, k_norm over all heads", layers,
                                       2.0 * (q_out + kv_out) * e))
        if has_rotary(model):
            kernels.append(SmallKernel("rotary_emb", layers, 2.0 * (q_out + kv_out) * e))
    # gated: silu_and_mul reads gate and up, writes their product; plain: one in, one out
    per_width = 3.0 if model.mlp == "gated" else 2.0
    act = "act_fn (silu_and_mul)" if model.mlp == "gated" else "act_fn"
    if model.num_dense_layers:
        width = model.intermediate_size / tp
        kernels.append(SmallKernel(act, model.num_dense_layers, per_width * width * e))
    if model.is_moe:
        # the router's top-k (vLLM's topk_softmax, before the fused experts): reads each
        # token's expert logits, writes its k weights (float32) and expert ids (int32)
        kernels.append(SmallKernel("router top-k (topk_softmax)", model.num_moe_layers,
                                   model.num_experts * e + model.num_experts_per_tok
                                   * (FLOAT32_BYTES + INT32_BYTES)))
    if model.is_moe and model.num_shared_experts:
        width = model.shared_expert_width / tp
        kernels.append(SmallKernel(f"{act}, shared experts", model.num_moe_layers,
                                   per_width * width * e))
    kernels.append(SmallKernel("embed_tokens (gather)", 1, 2.0 * h * e))
    kernels.append(SmallKernel("norm (final)", 1, (4.0 if model.norm == "rmsnorm" else 2.0)
                               * h * e))
    return tuple(kernels)


def has_rotary(model: ModelSpec) -> bool:
    """Rotary position embedding on q and k: every RMSNorm model of the catalog; the LayerNorm
    ones position by a learned table (OPT) or ALiBi (BLOOM)."""
    return model.norm == "rmsnorm" and not model.learned_position_rows


def sampler_bytes_per_row(model: ModelSpec) -> float:
    """Bytes the sampler moves per sampled row: its float32 passes over the whole vocabulary."""
    return SAMPLER_PASSES * model.vocab_size * FLOAT32_BYTES


@dataclass(frozen=True, slots=True)
class SmallKernelPrices:
    """A step's small kernels as three constants and the sampler's per-row seconds: a step of
    ``tokens`` costs ``fixed_s + row_bytes x max(cta_s_per_byte, tokens x s_per_byte)``."""

    fixed_s: float
    """Every call's floor."""
    row_bytes: float
    """Bytes one token reads and writes over every call of the step."""
    cta_s_per_byte: float
    """Seconds per byte of one token's row through one thread block."""
    s_per_byte: float
    """Seconds per byte at the kernels' share of the GPU's bandwidth."""
    sampler_s_per_row: float

    def step_s(self, tokens: float) -> float:
        """The small kernels of a step of ``tokens`` tokens (no sampler)."""
        return self.fixed_s + self.row_bytes * max(self.cta_s_per_byte,
                                                   tokens * self.s_per_byte)


def small_kernel_prices(model: ModelSpec, gpu: GpuSpec, tp: int = 1) -> SmallKernelPrices:
    """``model``'s small kernels on one of ``tp`` ranks of ``gpu``, at its profile's floor,
    per-block rate and efficiency (``small_kernel_*``; the efficiency ``memory_efficiency``
    where the profile has none)."""
    kernels = small_kernels(model, tp)
    efficiency = gpu.small_kernel_memory_efficiency or gpu.memory_efficiency
    s_per_byte = 1.0 / (efficiency * gpu.mem_bytes_per_s)
    return SmallKernelPrices(
        fixed_s=sum(k.calls for k in kernels) * gpu.small_kernel_floor_s,
        row_bytes=sum(k.calls * k.bytes_per_token for k in kernels),
        cta_s_per_byte=gpu.small_kernel_cta_s_per_byte,
        s_per_byte=s_per_byte,
        sampler_s_per_row=sampler_bytes_per_row(model) * s_per_byte,
    )
