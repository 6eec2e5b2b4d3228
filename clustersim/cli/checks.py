"""Command-line options checked as a scenario's fields are (shared by step-time and calibrate)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from clustersim.errors import ClusterSimError, ConfigError

if TYPE_CHECKING:
    from clustersim.catalog.specs import GpuSpec, ModelSpec


def check_parallel(
    model: ModelSpec, gpu: GpuSpec, tp: int, dp: int, expert_parallel: bool
) -> None:
    """--tp, --dp and --expert-parallel checked as a scenario's fields are, named by the
    options: the model shards ``tp`` ways, a MoE data-parallel group of ``dp x tp`` GPUs
    sits on one node, and with expert parallelism they hold whole experts each; without it,
    slices of FP8-block experts vLLM can load (``ModelSpec.expert_slice_refusal``)."""
    try:
        model.check_tp(tp)
        gpu.tp_link(tp)
    except ClusterSimError as error:
        raise type(error)("--tp", error.message) from None
    refusal = model.expert_slice_refusal(dp * tp, expert_parallel)
    if refusal is not None:
        raise ConfigError("--expert-parallel", refusal)
    from clustersim.engine.data_parallel import check_group

    check_group(model, gpu.id, tp, dp, expert_parallel, max(gpu.link.max_gpus, gpu.pcie.max_gpus),
                names=("--dp", "--tp"), fields=("--dp", "--expert-parallel"))


def check_fits(
    model: ModelSpec, gpu: GpuSpec, tp: int, num_seqs: int, tokens: int, length_path: str,
    memory_path: str,
) -> None:
    """``num_seqs`` requests holding ``tokens`` KV tokens each, in one step: each within the
    model's positions, their KV cache within the memory of one GPU of the ``tp`` group."""
    from clustersim.catalog.specs import GIGA

    if tokens > model.max_position_embeddings:
        raise ConfigError(
            length_path, f"{tokens:,} tokens in one request exceed the "
            f"{model.max_position_embeddings:,} positions of {model.id}",
        )
    kv_bytes = num_seqs * tokens * model.kv_bytes_per_token(tp)
    if kv_bytes > gpu.mem_capacity_bytes:
        raise ConfigError(
            memory_path, f"{num_seqs:,} requests of {tokens:,} tokens hold "
            f"{kv_bytes / GIGA:,.1f} GB of KV cache per GPU at --tp {tp}, more than one "
            f"{gpu.id}'s {gpu.mem_capacity_bytes / GIGA:,.1f} GB",
        )
