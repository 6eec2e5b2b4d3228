"""The roofline's per-step arithmetic over a cost model's precomputed constants: the hot half
of :class:`clustersim.cost.roofline.CostModel`, on its own so that it compiles with the core
(``clustersim.native``). ``CostModel`` derives the constants (from the model, the GPU, the
kernels and the links) and sets them on its :class:`StepPrices`.

Token counts are typed ``float``: the planner's screen prices fractional mean batches. The
sums are the same floating-point operations in the same order as before the split, so a
compiled and a pure run price every step to the same bits.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from typing import Any

Gemm = tuple[float, float, float, float, float]
"""Per GEMM, summed over layers: (compute s per row, weight-read s, activation s per row,
half-saturation rows, floor s)."""


Operator = tuple[str, float, float, float, float]
"""One named operator's share of a step: (name, compute s, memory s, communication s, host s),
booked as the step's totals book it (a GEMM's time on its bound side, its kernel floor with
the memory-bound time)."""


def experts_touched(num_experts: float, top_k: float, num_tokens: float) -> float:
    """Expected distinct experts ``num_tokens`` tokens route to, each picking ``top_k`` of
    ``num_experts`` uniformly: an expert escapes one token with probability ``1 - k/E``."""
    return num_experts * (1.0 - (1.0 - top_k / num_experts) ** num_tokens)


def graph_rows(sizes: list[int], num_decodes: int) -> int:
    """Rows a pure-decode batch of ``num_decodes`` runs: the smallest CUDA-graph capture size
    that holds it, or the batch itself above the largest (vLLM runs it eagerly)."""
    index = bisect_left(sizes, num_decodes)
    return sizes[index] if index < len(sizes) else num_decodes


def decode_step_s(
    compute: float, memory: float, communication: float, overhead: float,
    attn_s_per_pair: float, kv_s_per_token: float, rows: float, kv: float,
) -> float:
    """One pure-decode step that attends to ``kv`` tokens: its attention is compute-bound
    (``kv x attn_s_per_pair``) or memory-bound (``(kv + rows) x kv_s_per_token``), whichever
    is larger, added where ``step_time`` adds it (the same floating-point sums, so it is
    ``step_time_s`` bit for bit)."""
    if kv * attn_s_per_pair >= (kv + rows) * kv_s_per_token:
        return compute + kv * attn_s_per_pair + memory + communication + overhead
    return compute + (memory + (kv + rows) * kv_s_per_token) + communication + overhead


def decode_step_times(
    compute: float, memory: float, communication: float, overhead: float,
    attn_s_per_pair: float, kv_s_per_token: float, rows: float,
    first_kv_tokens: int, num_decodes: int, num_steps: int,
) -> list[float]:
    """``num_steps`` step times: step ``m`` attends to ``first_kv_tokens + m * num_decodes``
    tokens (:func:`decode_step_s`). (The token counts as floats: exact below 2^53, and the
    products are what an int times a float gives.)"""
    times: list[float] = []
    kv = float(first_kv_tokens)
    step = float(num_decodes)
    for _step in range(num_steps):
        times.append(decode_step_s(compute, memory, communication, overhead, attn_s_per_pair,
                                   kv_s_per_token, rows, kv))
        kv += step
    return times


def decode_step_ends(
    ends_s: list[float], start_s: float, compute: float, memory: float, communication: float,
    overhead: float, attn_s_per_pair: float, kv_s_per_token: float, rows: float,
    first_kv_tokens: int, num_decodes: int, num_steps: int,
) -> None:
    """:func:`decode_step_times` appended to ``ends_s`` as end times: each step ends at the
    previous end (the first at ``start_s``) plus its time, as a timeout adds it; no list of
    durations in between."""
    end = start_s
    kv = float(first_kv_tokens)
    step = float(num_decodes)
    for _step in range(num_steps):
        end += decode_step_s(compute, memory, communication, overhead, attn_s_per_pair,
                             kv_s_per_token, rows, kv)
        ends_s.append(end)
        kv += step


class StepPrices:
    """A cost model's constants and what one step, or a run of decode steps, costs."""

    def __init__(self) -> None:
        """Zero constants (an idle model); ``CostModel.__init__`` sets them."""
        self.gemms: tuple[Gemm, ...] = ()
        self.gemms_large: tuple[Gemm, ...] = ()
        self.gemm_names: tuple[str, ...] = ()
        """The name of each of :attr:`gemms` (and of :attr:`gemms_large`, in the same order)."""
        self.dequant_rows: float = 0.0
        self.dequant_s: float = 0.0
        self.attn_floor_s: float = 0.0
        self.allreduce_upto: list[float] = [math.inf]
        """The step's all-reduces by batch tokens: segment ``i`` prices batches of fewer than
        ``allreduce_upto[i]`` tokens (and at least the previous bound) at
        ``allreduce_fixed_s[i] + tokens x allreduce_s_per_token[i]``
        (:meth:`set_allreduce`)."""
        self.allreduce_fixed_s: list[float] = [0.0]
        self.allreduce_s_per_token: list[float] = [0.0]
        self.allreduce_names: list[str] = [""]
        self.expert_gemms: tuple[Gemm, ...] = ()
        self.expert_gemm_names: tuple[str, ...] = ()
        self.expert_curve_upto: list[float] = []
        """The experts' measured fused-MoE curve (empty: priced by :attr:`expert_gemms`) by
        the tokens it is read at: segment ``i`` prices fewer than ``expert_curve_upto[i]``
        (and at least the previous bound) at ``expert_curve_fixed[i] + tokens x
        expert_curve_slope[i]``, every MoE layer (clustersim.cost.moe.curve_segments)."""
        self.expert_curve_fixed: list[float] = []
        self.expert_curve_slope: list[float] = []
        self.expert_curve_name: str = ""
        self.expert_share: float = 0.0
        self.num_experts: float = 0.0
        self.top_k: float = 0.0
        self.dp: int = 1
        self.gather_fixed_s: float = 0.0
        self.gather_s_per_token: float = 0.0
        self.a2a_fixed_s: float = 0.0
        """An expert-parallel group across nodes: the all-to-all's fixed seconds per step
        (every MoE layer's dispatch and combine calls); replaces the all-gather."""
        self.a2a_s_per_token: float = 0.0
        """Its seconds per token of the rank's own batch (0: the all-gather prices the group)."""
        self.overlap_layers: int = 0
        """Two-batch overlap (0: off): the MoE layers whose all-to-all one micro-batch runs
        under the other's work."""
        self.overlap_compute_share: float = 1.0
        """Of the GPU, what the work under an all-to-all runs on (DeepEP's normal kernels hold
        some SMs; its low-latency ones none)."""
        self.moe_token_scale: float = 1.0
        """A rank priced alone for a group (a prefill or decode pool's data-parallel ranks):
        its MoE layers see this many times its own tokens, as if every rank ran its batch."""
        self.expert_imbalance: float = 1.0
        """The busiest expert-parallel rank's routed rows over the mean (1: balanced)."""
        self.logits_fixed_s: float = 0.0
        self.logits_s_per_row: float = 0.0
        self.lm_head_half: float = 0.0
        self.lm_head_s_per_row: float = 0.0
        self.lm_head_weight_s: float = 0.0
        self.lm_head_act_s_per_row: float = 0.0
        self.lm_head_floor_s: float = 0.0
        self.sampler_s_per_row: float = 0.0
        """The sampler's passes over one sampled row's logits (GPU time)."""
        self.small_fixed_s: float = 0.0
        """The small kernels' floors, every call of a step (``clustersim.cost.small_kernels``:
        norms, rotary embedding, activations, the embedding gather)."""
        self.small_row_bytes: float = 0.0
        """Bytes one token reads and writes over the step's small kernels."""
        self.small_cta_s_per_byte: float = 0.0
        """Seconds per byte of one token's row through one thread block."""
        self.small_s_per_byte: float = 0.0
        """Seconds per byte of the small kernels at their share of the bandwidth."""
        self.attn_half_keys: float = 0.0
        self.attn_s_per_pair: float = 0.0
        self.decode_attn_s_per_pair: float = 0.0
        """Decode attention's seconds per query-key pair: ``attn_s_per_pair`` but under
        multi-head latent attention, whose decodes attend over the latent (absorbed path)."""
        self.prefill_ctx_s_per_token: float = 0.0
        """Per cached context token a prefill chunk attends to: the compute of re-expanding its
        latent to per-head keys and values (MLA's kv_b_proj); 0 for standard attention."""
        self.window_share: float = 0.0
        """Sliding-window layers over all layers (0: every layer attends to the whole
        context)."""
        self.window_tokens: float = 0.0
        """Keys a sliding-window layer's query attends to at most."""
        self.kv_s_per_token: float = 0.0
        self.decode_kv_s_per_token: float = 0.0
        self.decode_rows_per_seq: float = 0.0
        self.fixed_overhead_s: float = 0.0
        self.request_overhead_s: float = 0.0
        self.step_host_s: float = 0.0
        """The per-step part of ``fixed_overhead_s`` (the scheduler, input preparation and
        sampling on the CPU; the rest is per layer)."""
        self.host_hidden: bool = False
        """Async scheduling: the CPU prepares step N+1 while the GPU runs step N (vLLM's
        --async-scheduling with overlapped model execution, PR #23569), so the per-step and
        per-request host time counts only where it outlasts the step's GPU time."""
        self.graph_sizes: list[int] = []
        """The engine's CUDA-graph capture sizes, ascending (empty: no graphs, as priced
        outside an engine): a pure-decode batch runs the graph of the next size up."""
        self.dense_decode_parts: dict[int, tuple[float, float, float, float]] = {}
        """(compute, memory, communication, overhead) of a pure-decode batch by its size, all
        but its attention: what a run of decode steps shares."""
        self.decode_parts: dict[tuple[int, Any], tuple[float, float, float, float]] = {}
        """The same by (size, MoE tokens), for batches whose MoE layers see more tokens than
        their own (a lockstep group's)."""
        self.speculative: bool = False
        """The engine decodes speculatively: its steps are priced by :meth:`spec_step_time_s`
        (``clustersim.engine.spec_decode.configure_prices`` sets this and the two below)."""
        self.num_draft_passes: int = 0
        """Draft-head passes per step (k for EAGLE and MTP, 0 for n-gram drafts)."""
        self.draft_layer_share: float = 0.0
        """One draft pass's layers over the target's: the share of the target's layer GEMMs,
        attention and all-reduces a pass over the same rows costs."""

    def set_allreduce(self, segments: tuple[tuple[float, float, float, str], ...]) -> None:
        """Price the step's all-reduces by ``segments``, ``(up to tokens, fixed s, s per token,
        name)`` rising in tokens, the last open-ended
        (:func:`clustersim.cost.collectives.allreduce_segments`)."""
        if not segments or segments[-1][0] != math.inf:
            raise ValueError("the last all-reduce segment must hold every batch size")
        self.allreduce_upto = [segment[0] for segment in segments]
        self.allreduce_fixed_s = [segment[1] for segment in segments]
        self.allreduce_s_per_token = [segment[2] for segment in segments]
        self.allreduce_names = [segment[3] for segment in segments]

    def step_time_s(
        self, num_prefill_tokens: int, prefill_attn_pairs: float, prefill_kv_tokens: int,
        num_decode_tokens: int, decode_kv_tokens: int, num_sampled: int, num_seqs: int,
        moe_tokens: int | None = None,
    ) -> float:
        """``CostModel.step_time(BatchShape(...)).time_s`` without building either object
        (the hot path: one call per engine step)."""
        if not num_prefill_tokens:
            if not num_decode_tokens:
                return 0.0
            if num_sampled == num_seqs == num_decode_tokens:  # a pure-decode step
                return self.decode_run_s(num_decode_tokens, decode_kv_tokens, 1, moe_tokens)[0]
        compute, memory, communication, overhead = self.parts(
            num_prefill_tokens, prefill_attn_pairs, prefill_kv_tokens, num_decode_tokens,
            decode_kv_tokens, num_sampled, num_seqs, moe_tokens,
        )
        return compute + memory + communication + overhead

    def spec_step_time_s(
        self, num_prefill_tokens: int, prefill_attn_pairs: float, prefill_kv_tokens: int,
        num_decode_tokens: int, decode_kv_tokens: int, num_sampled: int, num_seqs: int,
        num_spec_tokens: int, spec_attn_pairs: float,
    ) -> float:
        """A step of a speculative engine: the target's verification forward pass plus the
        draft head's passes.

        ``num_decode_tokens`` counts every decode query row, drafts included (a request with
        k drafts runs 1 + k rows: ``num_spec_tokens`` of them are drafts); every row is a GEMM
        row and an LM-head row (the rejection sampler reads the logits of each draft position
        and the bonus one: vllm/v1/sample/rejection_sampler.py). Decode attention computes
        ``decode_kv_tokens + spec_attn_pairs`` query-key pairs (query position i of 1 + k
        attends to the context and the i + 1 new tokens) but reads each request's KV once.
        A pure-decode step pads its rows to the next CUDA-graph size (multiples of 1 + k:
        ``spec_decode.capture_sizes``). The draft head (:attr:`num_draft_passes` > 0) runs
        its first pass over all the step's rows, then ``passes - 1`` over one row per
        sampling request (vllm/v1/spec_decode/eagle.py, ``EagleProposer.propose``), each
        pass :attr:`draft_layer_share` of the target's layers plus the LM head on the
        sampling requests' rows."""
        if not num_prefill_tokens and not num_decode_tokens:
            return 0.0
        tokens = num_prefill_tokens + num_decode_tokens
        rows = float(tokens)
        if not num_prefill_tokens and num_sampled == num_seqs:  # a pure-decode step
            rows = float(graph_rows(self.graph_sizes, tokens))
        compute, memory, communication = self.dense_parts(
            rows, num_sampled + num_spec_tokens, None)
        attn_compute, attn_memory = self._attention(
            num_prefill_tokens, prefill_attn_pairs, prefill_kv_tokens, num_decode_tokens,
            decode_kv_tokens, num_spec_tokens, spec_attn_pairs)
        total = (compute + attn_compute) + (memory + attn_memory) + communication + (
            self.fixed_overhead_s + num_seqs * self.request_overhead_s)
        passes = self.num_draft_passes
        if passes and num_sampled:
            share = self.draft_layer_share
            lm_head = self._lm_head_s(num_sampled)
            compute, memory, communication = self.dense_parts(rows, 0, None)
            total += share * (compute + memory + communication + attn_compute
                              + attn_memory) + lm_head
            if passes > 1:
                # later passes: one row per drafting request, over the same contexts
                draft_rows = float(graph_rows(self.graph_sizes, num_sampled))
                compute, memory, communication = self.dense_parts(draft_rows, 0, None)
                attn_compute, attn_memory = self._attention(
                    0, 0.0, 0, num_sampled, decode_kv_tokens, 0, 0.0)
                total += (passes - 1) * (share * (compute + memory + communication
                                                  + attn_compute + attn_memory) + lm_head)
        return total

    def _attention(
        self, num_prefill_tokens: float, prefill_attn_pairs: float, prefill_kv_tokens: float,
        num_decode_tokens: float, decode_kv_tokens: float, num_spec_tokens: float,
        spec_attn_pairs: float,
    ) -> tuple[float, float]:
        """(compute, memory) seconds of a step's attention, as :meth:`parts` books them; the
        decodes' drafts add query-key pairs and a KV write each, not another read."""
        compute = memory = 0.0
        if num_prefill_tokens:
            t_compute, t_memory = self._prefill_attention(
                num_prefill_tokens, prefill_attn_pairs, prefill_kv_tokens)
            if t_compute >= t_memory:
                compute += t_compute
            else:
                memory += t_memory
        if num_decode_tokens:
            num_requests = num_decode_tokens - num_spec_tokens
            if self.window_share:
                decode_kv_tokens = self.windowed(decode_kv_tokens, num_requests)
            t_compute = (decode_kv_tokens + spec_attn_pairs) * self.decode_attn_s_per_pair
            t_memory = ((decode_kv_tokens + num_requests * self.decode_rows_per_seq
                         + num_spec_tokens) * self.decode_kv_s_per_token)
            if t_compute >= t_memory:
                compute += t_compute
            else:
                memory += t_memory
        return compute, memory

    def _prefill_attention(self, num_prefill_tokens: float, prefill_attn_pairs: float,
                           prefill_kv_tokens: float) -> tuple[float, float]:
        """(compute, memory) seconds of the prompt chunks' attention, the larger one counts:
        it reads the KV the chunks attend to and writes their own; under MLA the cached
        context's latent is expanded to keys and values first."""
        if self.window_share:
            prefill_attn_pairs = self.windowed(prefill_attn_pairs, num_prefill_tokens)
        t_compute = ((prefill_attn_pairs + self.attn_half_keys * num_prefill_tokens)
                     * self.attn_s_per_pair)
        if self.prefill_ctx_s_per_token:
            t_compute += ((prefill_kv_tokens - num_prefill_tokens)
                          * self.prefill_ctx_s_per_token)
        return t_compute, (prefill_kv_tokens + num_prefill_tokens) * self.kv_s_per_token

    def windowed(self, keys: float, num_queries: float) -> float:
        """``keys`` query-key pairs (or KV tokens read) of ``num_queries`` queries, averaged
        over the layers: the full-attention layers' all of them, the sliding-window layers'
        at most ``window_tokens`` per query. An upper bound of the exact sum (each query's
        ``min(keys, window)``), equal to it once every query sees a full window."""
        share = self.window_share
        return keys * (1.0 - share) + min(keys, num_queries * self.window_tokens) * share

    def _lm_head_s(self, rows: float) -> float:
        """The LM head (its logits all-gather, the sampler) on ``rows`` rows."""
        t_compute = (rows + self.lm_head_half) * self.lm_head_s_per_row
        t_memory = self.lm_head_weight_s + rows * self.lm_head_act_s_per_row
        return (self.logits_fixed_s + rows * self.logits_s_per_row + max(t_compute, t_memory)
                + self.lm_head_floor_s + rows * self.sampler_s_per_row)

    def decode_run_s(
        self, num_decodes: int, decode_kv_tokens: int, num_steps: int,
        moe_tokens: int | None = None,
    ) -> list[float]:
        """``CostModel.decode_run_s``."""
        compute, memory, communication, overhead = self.decode_batch_parts(
            num_decodes, moe_tokens)
        if self.window_share:
            return [decode_step_s(compute, memory, communication, overhead,
                                  self.decode_attn_s_per_pair, self.decode_kv_s_per_token,
                                  num_decodes * self.decode_rows_per_seq,
                                  self.windowed(float(decode_kv_tokens + m * num_decodes),
                                                num_decodes))
                    for m in range(num_steps)]
        return decode_step_times(
            compute, memory, communication, overhead, self.decode_attn_s_per_pair,
            self.decode_kv_s_per_token, num_decodes * self.decode_rows_per_seq,
            decode_kv_tokens, num_decodes, num_steps,
        )

    def decode_run_ends(
        self, ends_s: list[float], start_s: float, num_decodes: int, decode_kv_tokens: int,
        num_steps: int,
    ) -> None:
        """:meth:`decode_run_s`'s steps appended to ``ends_s`` as end times from ``start_s``
        (:func:`decode_step_ends`)."""
        if self.window_share:
            end = start_s
            for seconds in self.decode_run_s(num_decodes, decode_kv_tokens, num_steps):
                end += seconds
                ends_s.append(end)
            return
        compute, memory, communication, overhead = self.decode_batch_parts(num_decodes, None)
        decode_step_ends(
            ends_s, start_s, compute, memory, communication, overhead, self.decode_attn_s_per_pair,
            self.decode_kv_s_per_token, num_decodes * self.decode_rows_per_seq,
            decode_kv_tokens, num_decodes, num_steps,
        )

    def decode_batch_parts(self, num_decodes: int,
                           moe_tokens: int | None) -> tuple[float, float, float, float]:
        """(compute, memory, communication, overhead) of a pure-decode batch, all but its
        attention (:attr:`dense_decode_parts` or :attr:`decode_parts`, filled on first use)."""
        if moe_tokens is None:
            parts = self.dense_decode_parts.get(num_decodes)
        else:
            parts = self.decode_parts.get((num_decodes, moe_tokens))
        if parts is None:
            if num_decodes <= 0:
                raise ValueError(f"a decode run needs decodes, got {num_decodes}")
            # the captured graph's rows, padding included, go through every layer; only the
            # real rows are sampled (the LM head runs outside the graph)
            compute, memory, communication = self.dense_parts(
                graph_rows(self.graph_sizes, num_decodes), num_decodes, moe_tokens)
            parts = (compute, memory, communication,
                     self.overhead_s(compute + memory + communication, num_decodes))
            if moe_tokens is None:
                self.dense_decode_parts[num_decodes] = parts
            else:
                self.decode_parts[num_decodes, moe_tokens] = parts
        return parts

    def dense_parts(self, tokens: float, rows: float, moe_tokens: float | None,
                    ops: list[Operator] | None = None) -> tuple[float, float, float]:
        """(compute, memory, communication) seconds of every op but attention, in the order
        ``step_time`` adds them: the layer GEMMs, the experts, the LM head. ``ops``: where to
        list each op's part by name (:data:`Operator`).

        With two-batch overlap, a step of two or more tokens runs as two micro-batches of
        half of them, each with its work ``W`` (everything here but the all-to-all) and its
        all-to-all ``A``. Layer by layer, one micro-batch's dispatch and combine run while
        the other works, on ``s`` of the GPU (:attr:`overlap_compute_share`): a pair of them
        takes ``max(A, W + (1 - s) A)`` (the work gets ``s A`` done under the all-to-all,
        the rest after it), twice per step, plus the pipeline's fill and drain, one layer's
        ``min(W, A)``. Attention stays outside the overlap (added after, unhidden)."""
        if not self.overlap_layers or tokens < 2.0:
            compute, memory, communication, a2a = self._dense_parts(
                tokens, rows, moe_tokens, ops)
            return compute, memory, communication
        half_ops: list[Operator] | None = None if ops is None else []
        compute, memory, communication, a2a = self._dense_parts(
            tokens * 0.5, rows * 0.5, None if moe_tokens is None else moe_tokens * 0.5,
            half_ops)
        work = compute + memory + (communication - a2a)
        share = self.overlap_compute_share
        pair = max(a2a, work + (1.0 - share) * a2a)
        step = 2.0 * pair + min(work, a2a) / self.overlap_layers
        if ops is not None and half_ops is not None:
            for name, t_compute, t_memory, t_comm, t_host in half_ops:
                ops.append((name + " (2 micro-batches)", 2.0 * t_compute, 2.0 * t_memory,
                            2.0 * t_comm, 2.0 * t_host))
            ops.append(("two-batch overlap: all-to-all under the other micro-batch", 0.0, 0.0,
                        step - 2.0 * (work + a2a), 0.0))
        return 2.0 * compute, 2.0 * memory, step - 2.0 * (compute + memory)

    def _dense_parts(self, tokens: float, rows: float, moe_tokens: float | None,
                     ops: list[Operator] | None) -> tuple[float, float, float, float]:
        """:meth:`dense_parts` of one batch, and the part of its communication that is the
        experts' all-to-all: (compute, memory, communication, all-to-all)."""
        compute = 0.0
        a2a = 0.0
        if tokens >= self.dequant_rows:
            gemms, memory = self.gemms_large, self.dequant_s
            if ops is not None:
                ops.append(("dequantize weights", 0.0, memory, 0.0, 0.0))
        else:
            gemms, memory = self.gemms, 0.0
        # the attention kernel's floor, once per layer whatever the batch; kernel floors are
        # booked with the memory-bound time (neither FLOPs nor bytes explain them)
        memory += self.attn_floor_s
        if ops is not None:
            ops.append(("attention kernel floor", 0.0, self.attn_floor_s, 0.0, 0.0))
        if self.small_row_bytes:
            # norms, rotary, activations: a floor per call, then one token's row through one
            # block or the batch's bytes at the bandwidth, whichever is longer
            per_byte = tokens * self.small_s_per_byte
            small = self.small_fixed_s + self.small_row_bytes * (
                per_byte if per_byte > self.small_cta_s_per_byte else self.small_cta_s_per_byte)
            memory += small
            if ops is not None:
                ops.append(("norms, rotary, activation (small kernels)", 0.0, small, 0.0, 0.0))
        for index, (flop_s, weight_s, act_s, half, floor) in enumerate(gemms):
            # GEMM efficiency saturates with M: eff x M / (M + half), so compute time is
            # (M + half) x FLOPs per row / (eff x peak) -- a fixed M-independent part per GEMM
            t_compute = (tokens + half) * flop_s
            t_memory = weight_s + tokens * act_s
            if t_compute >= t_memory:
                compute += t_compute
                if ops is not None:
                    ops.append((self.gemm_names[index], t_compute, floor, 0.0, 0.0))
            else:
                memory += t_memory
                if ops is not None:
                    ops.append((self.gemm_names[index], 0.0, t_memory + floor, 0.0, 0.0))
            memory += floor
        segment = bisect_right(self.allreduce_upto, tokens)
        communication = (self.allreduce_fixed_s[segment]
                         + tokens * self.allreduce_s_per_token[segment])
        if ops is not None and communication:
            ops.append((self.allreduce_names[segment], 0.0, 0.0, communication, 0.0))
        if self.expert_gemms:
            moe = tokens * self.moe_token_scale if moe_tokens is None else moe_tokens
            share = self.expert_share
            # the busiest rank's rows: expert_imbalance x the mean (x 1.0: the same bits)
            routed = moe * self.top_k * share * self.expert_imbalance
            touched = experts_touched(self.num_experts, self.top_k, moe) * share
            if self.a2a_s_per_token:
                # DeepEP's dispatch and combine of the rank's own tokens (moe / dp of them)
                a2a = self.a2a_fixed_s + moe / self.dp * self.a2a_s_per_token
                communication += a2a
                if ops is not None:
                    ops.append(("experts' all-to-all (dispatch, combine)", 0.0, 0.0, a2a, 0.0))
            elif self.dp > 1:
                gather_s = self.gather_fixed_s + moe * self.gather_s_per_token
                communication += gather_s
                if ops is not None and gather_s:
                    ops.append(("experts' all-gather, reduce-scatter", 0.0, 0.0, gather_s,
                                0.0))
            if self.expert_curve_upto:
                # the layer as measured at the group's tokens (the table's skewed routing
                # holds the busiest rank's share), on the side its fit says bounds it
                t_compute = t_memory = 0.0
                for flop_s, weight_s, act_s, half, _floor in self.expert_gemms:
                    t_compute += (routed + touched * half) * flop_s
                    t_memory += touched * weight_s + routed * act_s
                segment = bisect_right(self.expert_curve_upto, moe)
                measured = (self.expert_curve_fixed[segment]
                            + moe * self.expert_curve_slope[segment])
                if t_compute >= t_memory:
                    compute += measured
                    if ops is not None:
                        ops.append((self.expert_curve_name, measured, 0.0, 0.0, 0.0))
                else:
                    memory += measured
                    if ops is not None:
                        ops.append((self.expert_curve_name, 0.0, measured, 0.0, 0.0))
            else:
                for index, (flop_s, weight_s, act_s, half, floor) in enumerate(
                        self.expert_gemms):
                    # touched experts of routed / touched rows each: (rows + half) x FLOPs per
                    # row; one fused call per layer serves them all: one floor
                    t_compute = (routed + touched * half) * flop_s
                    t_memory = touched * weight_s + routed * act_s
                    if t_compute >= t_memory:
                        compute += t_compute
                        if ops is not None:
                            ops.append((self.expert_gemm_names[index], t_compute, floor, 0.0,
                                        0.0))
                    else:
                        memory += t_memory
                        if ops is not None:
                            ops.append((self.expert_gemm_names[index], 0.0, t_memory + floor,
                                        0.0, 0.0))
                    memory += floor
        if rows:
            gather_s = self.logits_fixed_s + rows * self.logits_s_per_row
            communication += gather_s
            t_compute = (rows + self.lm_head_half) * self.lm_head_s_per_row
            t_memory = self.lm_head_weight_s + rows * self.lm_head_act_s_per_row
            if t_compute >= t_memory:
                compute += t_compute
                if ops is not None:
                    ops.append(("lm_head", t_compute, self.lm_head_floor_s, 0.0, 0.0))
            else:
                memory += t_memory
                if ops is not None:
                    ops.append(("lm_head", 0.0, t_memory + self.lm_head_floor_s, 0.0, 0.0))
            memory += self.lm_head_floor_s
            if ops is not None and gather_s:
                ops.append(("logits all-gather", 0.0, 0.0, gather_s, 0.0))
            if self.sampler_s_per_row:
                sampler = rows * self.sampler_s_per_row
                memory += sampler
                if ops is not None:
                    ops.append(("sampler", 0.0, sampler, 0.0, 0.0))
        return compute, memory, communication, a2a

    def parts(
        self, num_prefill_tokens: float, prefill_attn_pairs: float, prefill_kv_tokens: float,
        num_decode_tokens: float, decode_kv_tokens: float, num_sampled: float,
        num_seqs: float, moe_tokens: float | None, ops: list[Operator] | None = None,
    ) -> tuple[float, float, float, float]:
        """(compute, memory, communication, overhead) seconds of a non-empty step; a
        pure-decode one runs its CUDA graph's rows (:meth:`decode_batch_parts`). ``ops``:
        where to list each op's part by name (:data:`Operator`)."""
        tokens = num_prefill_tokens + num_decode_tokens
        if not num_prefill_tokens and num_sampled == num_seqs == num_decode_tokens:
            tokens = float(graph_rows(self.graph_sizes, int(num_decode_tokens)))
        compute, memory, communication = self.dense_parts(tokens, num_sampled, moe_tokens, ops)
        if num_prefill_tokens:
            t_compute, t_memory = self._prefill_attention(
                num_prefill_tokens, prefill_attn_pairs, prefill_kv_tokens)
            if t_compute >= t_memory:
                compute += t_compute
                t_memory = 0.0
            else:
                memory += t_memory
                t_compute = 0.0
            if ops is not None:
                ops.append(("attention (prompt chunks)", t_compute, t_memory, 0.0, 0.0))
        if num_decode_tokens:
            if self.window_share:
                decode_kv_tokens = self.windowed(decode_kv_tokens, num_decode_tokens)
            t_compute = decode_kv_tokens * self.decode_attn_s_per_pair
            t_memory = ((decode_kv_tokens + num_decode_tokens * self.decode_rows_per_seq)
                        * self.decode_kv_s_per_token)
            if t_compute >= t_memory:
                compute += t_compute
                t_memory = 0.0
            else:
                memory += t_memory
                t_compute = 0.0
            if ops is not None:
                ops.append(("attention (decodes)", t_compute, t_memory, 0.0, 0.0))
        overhead = self.overhead_s(compute + memory + communication, num_seqs)
        if ops is not None:
            ops.append(("host: scheduler, launches, per request", 0.0, 0.0, 0.0, overhead))
        return compute, memory, communication, overhead

    def overhead_s(self, gpu_s: float, num_seqs: float) -> float:
        """The host time a step of ``num_seqs`` requests adds to its ``gpu_s`` of GPU work:
        all of it, or with async scheduling the per-layer part and whatever of the per-step
        and per-request part outlasts the GPU work."""
        overhead = self.fixed_overhead_s + num_seqs * self.request_overhead_s
        if not self.host_hidden:
            return overhead
        host = self.step_host_s + num_seqs * self.request_overhead_s
        shown = overhead - host
        return shown + max(0.0, host - (gpu_s + shown))
