"""vLLM's engine defaults and start-up checks, applied to a scenario's ``engine:`` block.

``vllm serve`` picks the batch defaults by device memory (``EngineArgs.get_batch_defaults``,
spec §5.3), then refuses configurations it cannot run (``SchedulerConfig.verify_max_model_len``,
spec §5.1), quantization methods the GPU or the checkpoint cannot take
(``clustersim.engine.quantization``) and KV caches too small for one ``max_model_len`` request
(spec §6).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from clustersim.catalog.specs import GpuSpec, ModelSpec
from clustersim.cost.memory import (
    cuda_graph_bytes,
    draft_weight_bytes_per_gpu,
    kv_bytes_per_block,
    num_gpu_blocks,
    parse_vllm_version,
)
from clustersim.engine.config import SchedulerConfig, SpecDecodeConfig
from clustersim.engine.kv_manager import cdiv
from clustersim.engine.pipeline import stage_model
from clustersim.engine.quantization import served_model
from clustersim.engine.settings import EngineSettings, SpeculativeSettings
from clustersim.errors import ConfigError

GIB = 1 << 30
RESOLVED_FIELDS = ("max_num_batched_tokens", "max_num_seqs", "max_model_len", "speculative")
"""Scheduler knobs whose value comes from the GPU's or the model's defaults when unset, or
(``speculative``) that the engine takes in its own form (:func:`speculative_config`)."""
ENGINE_ONLY_FIELDS = ("kv_full_blocks_only",)
"""Scheduler knobs the cluster sets (the KV connector's version), not the scenario."""
SETTINGS_FIELDS = tuple(f.name for f in fields(SchedulerConfig)
                        if f.name not in RESOLVED_FIELDS + ENGINE_ONLY_FIELDS)
"""Scheduler knobs carried from the ``engine:`` settings as they are, by name."""
# (min device GiB, excluded GPU families, max_num_batched_tokens, max_num_seqs), first match wins.
_SERVE_BATCH_DEFAULTS = (
    (160, (), 16384, 1024),
    (70, ("a100",), 8192, 1024),
    (0, (), 2048, 256),
)


ASYNC_SCHEDULING_SINCE = (0, 14)
"""vLLM v0.14.0 turned async scheduling on by default (release notes: "Async scheduling is
now enabled by default", PR #27614)."""


def async_scheduling(settings: EngineSettings, model: ModelSpec, dp: int = 1,
                     pp: int = 1) -> bool:
    """``engine.async_scheduling`` as given, or unset vLLM's default for ``vllm_version``
    where clustersim models it: not under pipeline parallelism, speculative decoding or a
    data-parallel MoE group's lockstep (those run synchronously, as given ``false``)."""
    if settings.async_scheduling is not None:
        return settings.async_scheduling
    return (parse_vllm_version(settings.vllm_version) >= ASYNC_SCHEDULING_SINCE
            and pp == 1 and settings.speculative is None and not (dp > 1 and model.is_moe))


def batch_defaults(gpu: GpuSpec) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) that ``vllm serve`` uses on this GPU."""
    mem_gib = gpu.mem_capacity_bytes / GIB
    for min_gib, excluded, tokens, seqs in _SERVE_BATCH_DEFAULTS:
        if mem_gib >= min_gib and not any(family in gpu.id for family in excluded):
            return tokens, seqs
    raise AssertionError("the last batch-default tier matches every GPU")


@dataclass(frozen=True, slots=True)
class EngineSetup:
    """An instance's resolved scheduler settings, KV size and the model as it serves it."""

    scheduler: SchedulerConfig
    num_gpu_blocks: int
    model: ModelSpec
    """The model with the quantization and KV cache dtype the engine runs (its weights, KV
    bytes and GEMM kernels follow them); the input model itself when both are 16-bit."""
    offload_blocks: int = 0
    """Blocks the engine's CPU tier holds (``engine.kv_offloading_size``; 0: no tier)."""
    offload_block_bytes: int = 0
    """Bytes one block takes in the CPU tier: its KV on every GPU of the engine."""


def resolve_engine(
    settings: EngineSettings, model: ModelSpec, gpu: GpuSpec, tp: int, dp: int = 1,
    pp: int = 1,
) -> EngineSetup:
    """Fill vLLM's defaults, run its start-up checks, and size the KV cache (per rank of a
    ``dp``-way data-parallel group: a MoE model's experts are shared across the group; with
    ``pp`` pipeline stages, on the GPUs of the largest stage: its layers' weights and KV)."""
    model = served_model(model, gpu, settings.quantization, settings.kv_cache_dtype,
                         vllm_version=settings.vllm_version)
    if pp > 1:
        check_pipeline(settings, model, pp)
    stage = stage_model(model, pp)  # what one GPU holds (the model itself without PP)
    max_model_len = settings.max_model_len or model.max_position_embeddings
    if max_model_len > model.max_position_embeddings:
        raise ConfigError(
            "engine.max_model_len",
            f"{max_model_len} exceeds the model's max_position_embeddings "
            f"{model.max_position_embeddings}",
        )

    default_tokens, default_seqs = batch_defaults(gpu)
    max_num_seqs = settings.max_num_seqs
    max_num_batched_tokens = settings.max_num_batched_tokens
    if max_num_batched_tokens is None:
        tokens = default_tokens
        if not settings.enable_chunked_prefill:
            tokens = max(max_model_len, tokens)
        max_num_batched_tokens = min((max_num_seqs or default_seqs) * max_model_len, tokens)
    if max_num_seqs is None:
        max_num_seqs = min(default_seqs, max_num_batched_tokens)

    if not settings.enable_chunked_prefill and max_num_batched_tokens < max_model_len:
        raise ConfigError(
            "engine.max_num_batched_tokens",
            f"{max_num_batched_tokens} is smaller than max_model_len {max_model_len} with "
            "chunked prefill disabled; vLLM refuses to start (raise it or enable chunking)",
        )
    if (
        not settings.enable_chunked_prefill
        and settings.max_num_scheduled_tokens is not None
        and settings.max_num_scheduled_tokens < max_model_len
    ):
        raise ConfigError(
            "engine.max_num_scheduled_tokens",
            f"{settings.max_num_scheduled_tokens} is smaller than max_model_len "
            f"{max_model_len} with chunked prefill disabled: a long prompt could never be "
            "scheduled",
        )
    if max_num_batched_tokens < max_num_seqs:
        raise ConfigError(
            "engine.max_num_batched_tokens",
            f"{max_num_batched_tokens} must be >= max_num_seqs {max_num_seqs}",
        )
    if settings.long_prefill_token_threshold > max_model_len:
        raise ConfigError(
            "engine.long_prefill_token_threshold",
            f"{settings.long_prefill_token_threshold} exceeds max_model_len {max_model_len}",
        )
    if (
        settings.max_num_scheduled_tokens is not None
        and settings.max_num_scheduled_tokens > max_num_batched_tokens
    ):
        raise ConfigError(
            "engine.max_num_scheduled_tokens",
            f"{settings.max_num_scheduled_tokens} exceeds max_num_batched_tokens "
            f"{max_num_batched_tokens}",
        )

    speculative = speculative_config(settings, model, dp)
    if settings.num_gpu_blocks_override is not None:
        blocks = settings.num_gpu_blocks_override
        kv_bytes = blocks * kv_bytes_per_block(stage, tp, settings.block_size)
        if kv_bytes > gpu.mem_capacity_bytes:
            raise ConfigError(
                "engine.num_gpu_blocks_override",
                f"{blocks:,} blocks of {settings.block_size} tokens hold {kv_bytes / 1e9:,.1f} "
                f"GB of KV cache per GPU at tensor_parallel_size {tp}, more than one "
                f"{gpu.id}'s {gpu.mem_capacity_bytes / 1e9:,.1f} GB: vLLM could not allocate "
                "them",
            )
    else:
        blocks = num_gpu_blocks(
            stage,
            gpu,
            tp,
            gpu_memory_utilization=settings.resolved_gpu_memory_utilization,
            block_size=settings.block_size,
            max_num_batched_tokens=max_num_batched_tokens,
            max_num_seqs=max_num_seqs,
            vllm_version=settings.vllm_version,
            dp=dp if model.is_moe else 1,
            cuda_graph_bytes=cuda_graph_bytes(stage, max_num_seqs, max_num_batched_tokens),
            draft_weight_bytes=0 if speculative is None else math.ceil(
                draft_weight_bytes_per_gpu(model, speculative.method,
                                           speculative.draft_layers, tp, dp)),
        )
    if speculative is not None and speculative.draft_layers and (
            settings.num_gpu_blocks_override is None):
        # the draft head's layers keep their own KV in the same blocks (vLLM adds them to the
        # KV cache spec: every block holds them too), so the budget buys fewer blocks
        layers = model.num_layers
        blocks = 1 + (blocks - 1) * layers // (layers + math.ceil(speculative.draft_layers))
    needed = cdiv(max_model_len, settings.block_size)
    if blocks - 1 < needed:
        raise ConfigError(
            "engine",
            f"KV cache of {blocks - 1} usable blocks ({(blocks - 1) * settings.block_size} "
            f"tokens) cannot hold one max_model_len {max_model_len} request "
            f"({needed} blocks); lower max_model_len, raise gpu_memory_utilization or "
            "tensor_parallel_size",
        )

    fields = {name: getattr(settings, name) for name in SETTINGS_FIELDS}
    fields["async_scheduling"] = async_scheduling(settings, model, dp, pp)
    scheduler = SchedulerConfig(
        max_num_batched_tokens=max_num_batched_tokens,
        max_num_seqs=max_num_seqs,
        max_model_len=max_model_len,
        speculative=speculative,
        **fields,
    )
    offload_blocks, offload_block_bytes = offload_size(settings, model, tp)
    return EngineSetup(scheduler=scheduler, num_gpu_blocks=blocks, model=model,
                       offload_blocks=offload_blocks, offload_block_bytes=offload_block_bytes)


def offload_size(settings: EngineSettings, model: ModelSpec, tp: int) -> tuple[int, int]:
    """(blocks, bytes per block) of the engine's CPU tier; (0, 0) without one. A block there
    holds its tokens' KV from every GPU of the engine, as vLLM sizes it
    (``CPUOffloadingSpec``: ``cpu_bytes_to_use // (page bytes x KV tensors x world size)``,
    ``cpu_bytes_to_use = kv_offloading_size x 2**30``): every layer's, on each of the
    ``tp`` ranks (a stage's layers on each stage under pipeline parallelism)."""
    size_gib = settings.kv_offloading_size
    if size_gib is None:
        return 0, 0
    if model.sliding_window:
        raise ConfigError(
            "engine.kv_offloading_size",
            f"a CPU KV tier is not modelled for {model.id}'s sliding-window layers (vLLM's "
            "offloading connector runs them with the hybrid KV-cache manager's groups)")
    block_bytes = model.kv_bytes_per_token(tp) * settings.block_size * tp
    blocks = int(size_gib * GIB) // block_bytes
    if blocks < 1:
        raise ConfigError(
            "engine.kv_offloading_size",
            f"{size_gib:g} GiB holds no KV block of {settings.block_size} tokens "
            f"({block_bytes / (1 << 20):,.1f} MiB across the engine's GPUs)")
    return blocks, block_bytes


def check_pipeline(settings: EngineSettings, model: ModelSpec, pp: int) -> None:
    """Refuse what clustersim does not model with pipeline parallelism."""
    if pp > model.num_layers:
        raise ConfigError("pipeline_parallel_size",
                          f"{pp} stages for the {model.num_layers} layers of {model.id}: "
                          "every stage needs at least one layer")
    if settings.async_scheduling:
        raise ConfigError("engine.async_scheduling",
                          "modelled with sync scheduling only under pipeline parallelism: "
                          "set async_scheduling false")
    if settings.speculative is not None:
        raise ConfigError("engine.speculative",
                          "not modelled with pipeline parallelism: use "
                          "pipeline_parallel_size 1")


def speculative_config(settings: EngineSettings, model: ModelSpec,
                       dp: int = 1) -> SpecDecodeConfig | None:
    """The engine's form of ``engine.speculative`` (None: off), refusing what clustersim does
    not model with it."""
    spec: SpeculativeSettings | None = settings.speculative
    if spec is None:
        return None
    if settings.async_scheduling:
        raise ConfigError(
            "engine.speculative",
            "modelled with sync scheduling only: set async_scheduling false (vLLM's async "
            "scheduling with drafts keeps placeholders for unverified tokens, not simulated)",
        )
    if dp > 1 and model.is_moe:
        raise ConfigError(
            "engine.speculative",
            "not modelled for lockstep data-parallel MoE ranks: use data_parallel_size 1",
        )
    return SpecDecodeConfig(
        method=spec.method,
        num_speculative_tokens=spec.num_speculative_tokens,
        acceptance_cdf=spec.acceptance_cdf(),
        draft_layers=spec.resolved_draft_layers,
    )
