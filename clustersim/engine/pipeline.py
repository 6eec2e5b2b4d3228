"""Pipeline parallelism (``vllm serve --pipeline-parallel-size P``): a batch's stages, pure.

vLLM splits the decoder layers over ``P`` stages, each a tensor-parallel group of its own GPUs;
the first stage also embeds the tokens, the last runs the final norm, the LM head and the
sampler. Each stage keeps the KV of its own layers, so a KV block costs a stage ``1/P`` of the
whole model's bytes and the number of blocks is what one stage's memory allows (vLLM takes the
smallest over the workers). A batch's hidden states (and the residual stream, both in the
model's dtype: vLLM's ``IntermediateTensors``) go from one stage to the next point to point.

vLLM V1's engine core keeps up to ``max_concurrent_batches = P`` batches in flight
(``EngineCore.step_with_batch_queue``): it schedules a batch and hands it to the executor
without waiting, schedules again while the queue has room, and blocks on the oldest batch
when the queue is full or the scheduler found nothing new to run (a request already in
flight has no token to schedule until its output returns). The engine loop
(``engine.instance``) does exactly that on the clock; this module holds what is not waiting:

* :class:`PipelinePricer`: a batch's seconds on the first, a middle and the last stage, and
  between two stages; priced by the roofline of one stage's layers (``stage_model``): the
  layer-proportional parts (GEMMs, attention, MoE, TP all-reduces, per-layer launches) at
  ``ceil(L / P)`` layers, the LM head and logits on the last stage only, the per-step and
  per-request host time once per batch, on the first stage (as without PP).
* :class:`Pipeline`: when each stage is next free. A batch enters stage ``k`` when it has left
  stage ``k - 1`` (and its activations arrived) and the batch before it has left stage ``k``:
  a flow shop, so a batch leaves at ``entry + sum of its stages`` when the pipeline is empty
  and one stage-time after the batch before it when the pipeline is full.
"""

from __future__ import annotations

from typing import Protocol

from clustersim.catalog.specs import ModelSpec
from clustersim.cost.prices import StepPrices

__all__ = ["Pipeline", "PipelinePricer", "StagePlan", "stage_bounds", "stage_layers", "stage_model"]

ACTIVATION_TENSORS = 2
"""Tensors a stage sends the next per token: the hidden states and the residual stream
(vLLM's Llama-style ``IntermediateTensors``), each ``hidden_size`` wide in the model's dtype."""


def stage_layers(num_layers: int, pp: int) -> int:
    """Layers of the largest stage: vLLM's ``get_pp_indices`` splits them as evenly as it can."""
    return -(-num_layers // pp)


def stage_bounds(num_layers: int, pp: int) -> list[tuple[int, int]]:
    """Each stage's layers, ``[start, end)``, as vLLM's ``get_pp_indices``
    (vllm/distributed/utils.py) splits them without ``VLLM_PP_LAYER_PARTITION``: ``L // P``
    each, and the ``L % P`` left over one each to the stages before the last, from the
    second-to-last backwards (the last one runs the final norm and the LM head). 61 layers in
    2 stages: 0-30 and 31-60."""
    sizes = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        sizes[-i] += 1
    bounds = []
    start = 0
    for size in sizes:
        bounds.append((start, start + size))
        start += size
    return bounds


def stage_model(model: ModelSpec, pp: int) -> ModelSpec:
    """The model as one stage holds it, for its memory and its step price: the largest stage's
    layers (a MoE model's leading dense layers kept, as on the first stage), the embedding and
    the LM head (counted on the one stage; they sit on the first and the last)."""
    if pp == 1:
        return model
    layers = stage_layers(model.num_layers, pp)
    update: dict[str, int] = {"num_layers": layers}
    if model.is_moe:
        update["first_k_dense_replace"] = min(model.first_k_dense_replace, layers - 1)
    return model.model_copy(update=update)


class StagePlan(Protocol):
    """What a stage price reads off a plan (``engine.step_plan.StepPlan``)."""

    num_prefill_tokens: int
    prefill_attn_pairs: float
    prefill_kv_tokens: int
    num_decode_tokens: int
    decode_kv_tokens: int

    @property
    def num_sampled(self) -> int: ...

    @property
    def num_seqs(self) -> int: ...


class PipelinePricer:
    """A batch's seconds on each stage: the roofline of one stage's layers (``prices``, from
    :func:`stage_model`), or a fixed step time split evenly over the stages."""

    def __init__(self, depth: int, prices: StepPrices | None = None,
                 fixed_step_s: float | None = None, send_s_per_token: float = 0.0,
                 send_latency_s: float = 0.0) -> None:
        if depth < 2:
            raise ValueError(f"a pipeline needs 2 or more stages, got {depth}")
        if (prices is None) == (fixed_step_s is None):
            raise ValueError("give the stage's prices or a fixed step time, not both")
        self.depth = depth
        self.prices = prices
        self.fixed_step_s = fixed_step_s
        self.send_s_per_token = send_s_per_token
        """Seconds per token of the batch to send its activations to the next stage."""
        self.send_latency_s = send_latency_s

    def __call__(self, plan: StagePlan) -> float:
        """The batch's seconds from entering the first stage to leaving the last, alone."""
        first, middle, last, send = self.stages(plan)
        return first + (self.depth - 2) * middle + last + (self.depth - 1) * send

    def stages(self, plan: StagePlan) -> tuple[float, float, float, float]:
        """(first stage, a middle stage, last stage, one send between two stages) seconds."""
        tokens = plan.num_prefill_tokens + plan.num_decode_tokens
        if not tokens:
            return 0.0, 0.0, 0.0, 0.0
        send = self.send_latency_s + tokens * self.send_s_per_token
        prices = self.prices
        if prices is None:
            assert self.fixed_step_s is not None
            stage = self.fixed_step_s / self.depth
            return stage, stage, stage, send
        sampled, seqs = plan.num_sampled, plan.num_seqs
        whole = prices.step_time_s(
            plan.num_prefill_tokens, plan.prefill_attn_pairs, plan.prefill_kv_tokens,
            plan.num_decode_tokens, plan.decode_kv_tokens, sampled, seqs)
        lm_head = prices._lm_head_s(sampled) if sampled else 0.0
        host = prices.step_host_s + seqs * prices.request_overhead_s
        layers = whole - lm_head - host
        return layers + host, layers, layers + lm_head, send


class Pipeline:
    """When each stage of one engine's pipeline is next free (the flow shop's state)."""

    def __init__(self, pricer: PipelinePricer) -> None:
        self.pricer = pricer
        self.depth = pricer.depth
        """Stages, and the most batches in flight (vLLM's ``max_concurrent_batches``)."""
        self.free_s = [0.0] * pricer.depth
        """When each stage finishes the last batch it took."""

    def reset(self) -> None:
        """The engine restarted: every stage idle."""
        self.free_s = [0.0] * self.depth

    def enter(self, now_s: float, plan: StagePlan) -> tuple[float, float]:
        """A batch handed to the pipeline at ``now_s``: (when it enters the first stage, when
        it leaves the last, its sampled tokens then known)."""
        first, middle, last, send = self.pricer.stages(plan)
        free = self.free_s
        depth = self.depth
        end = now_s
        entry = now_s
        for stage in range(depth):
            start = end if end >= free[stage] else free[stage]
            if stage == 0:
                entry = start
                end = start + first
            elif stage == depth - 1:
                end = start + last
            else:
                end = start + middle
            free[stage] = end
            if stage < depth - 1:
                end += send
        return entry, end
