"""What one KV handoff moves, and between which GPUs, when engines have pipeline stages.

Each stage of a pipelined engine keeps the KV of its own layers (``engine.pipeline``), so the
KV of a layer moves from the producer stage that computed it to the consumer stage that holds
that layer: one move per pair of producer and consumer stages whose layers overlap. With the
same stages on both sides that is stage to stage; into a consumer without stages, every
producer stage sends its layers to the one consumer group. That is how the engines that hand
KV over from pipeline stages do it: vLLM's push-mode NIXL connector (``NixlPushConnector``,
vllm-project/vllm#45880, merged) has each stage of a staged prefill engine write its own
layers into the decode engine's (a decode engine without stages); vllm-rbln's NIXL connector
(RBLN-SW/vllm-rbln#901, merged) has each consumer stage read from the producer stages whose
layers overlap its own, stage to stage when both engines have the same stages; SGLang's
staged prefill servers (sgl-project/sglang#8846) write each stage's layers into the matching
layers on the decode side (#33807). vLLM's default (pull) ``NixlConnector`` refuses a
staged peer at its handshake (``KVConnectorBase_V1.set_xfer_handshake_metadata_pp_aware``,
vllm/distributed/kv_transfer/kv_connector/v1/base.py); a staged decode engine behind a
connector is what vllm-rbln runs, not upstream vLLM (#45880 does not plan it) nor SGLang
(sgl-project/sglang#8424, #11857)::

    prefill TP8 x PP2                              decode TP8 x PP2
    stage 0, layers 0-30   node0/gpu0-7  ──────>  node2/gpu0-7   stage 0, layers 0-30
    stage 1, layers 31-60  node1/gpu0-7  ──────>  node3/gpu0-7   stage 1, layers 31-60

Bytes are counted on the consumer's side, as without stages: every rank of the consumer
stage receives the overlap's layers for its own KV heads (the whole latent under MLA, which
each TP rank holds), so a move carries ``layers x per-layer bytes of one rank x its TP``.
"""

from __future__ import annotations

from collections.abc import Sequence

from clustersim.catalog.specs import ModelSpec
from clustersim.engine.pipeline import stage_bounds

StageMove = tuple[list[str], list[str], int, int]
"""(producer stage's GPUs, consumer stage's GPUs, KV bytes per token of the full-attention
layers they share, of the sliding-window ones)."""


def stage_moves(model: ModelSpec, src_gpus: Sequence[str], src_stages: int,
                dst_gpus: Sequence[str], dst_stages: int) -> list[StageMove]:
    """The moves of a handoff of ``model``'s KV from an engine of ``src_stages`` pipeline
    stages on ``src_gpus`` (stage after stage, each its tensor-parallel group) to one of
    ``dst_stages`` on ``dst_gpus``, in producer-stage order. Without stages on either side,
    one move of every layer between the two groups."""
    dst_tp = len(dst_gpus) // dst_stages
    full, window = model.kv_bytes_by_attention(dst_tp)
    if src_stages == 1 and dst_stages == 1:
        return [(list(src_gpus), list(dst_gpus), full * dst_tp, window * dst_tp)]
    if window:
        raise ValueError(f"{model.id}: which layers of a stage attend through the sliding "
                         "window is not known, so a staged handoff cannot be counted")
    src_tp = len(src_gpus) // src_stages
    per_layer = model.kv_bytes_per_token(dst_tp) // model.num_layers * dst_tp
    dst_bounds = stage_bounds(model.num_layers, dst_stages)
    moves: list[StageMove] = []
    for i, (src_start, src_end) in enumerate(stage_bounds(model.num_layers, src_stages)):
        for j, (dst_start, dst_end) in enumerate(dst_bounds):
            layers = min(src_end, dst_end) - max(src_start, dst_start)
            if layers > 0:
                moves.append((list(src_gpus[i * src_tp:(i + 1) * src_tp]),
                              list(dst_gpus[j * dst_tp:(j + 1) * dst_tp]),
                              layers * per_layer, 0))
    return moves
