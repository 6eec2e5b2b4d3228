"""Resolved engine settings of one instance (the scenario's ``engine:`` block after defaults)."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Literal

StepPolicy = Literal["decode_first", "prefill_first", "balanced"]
QueuePolicy = Literal["fcfs", "priority"]
SpecMethod = Literal["eagle", "mtp", "ngram"]


@dataclass(frozen=True, slots=True)
class SpecDecodeConfig:
    """Speculative decoding as the engine runs it (vLLM's ``--speculative-config``, resolved
    from the scenario's ``engine.speculative``; ``clustersim.engine.spec_decode``).

    A decoding request carries ``num_speculative_tokens`` drafts: it schedules ``1 + k``
    tokens (``num_tokens_with_spec``), all counted against the step's budget; after the step
    ``n`` of its ``k`` drafts are accepted (drawn from ``acceptance_cdf``) and it gains
    ``n + 1`` output tokens.
    """

    method: str
    """``eagle``, ``mtp`` (draft heads run on the GPU, KV lookahead) or ``ngram`` (host)."""
    num_speculative_tokens: int
    acceptance_cdf: tuple[float, ...]
    """``P(accepted <= j)`` for ``j = 0 .. k - 1`` (``P(accepted <= k)`` is 1)."""
    draft_layers: float
    """Target-shaped transformer layers one draft pass costs (0: no GPU time, n-gram)."""
    seed: tuple[int, ...] = ()
    """Entropy of the engine's acceptance stream (``spec_decode.SPEC_DECODE_RNG_STREAM``);
    set by the cluster for each engine."""

    def __reduce__(self) -> tuple[type[SpecDecodeConfig], tuple[object, ...]]:
        # compiled, a frozen dataclass is rebuilt from its fields (see SchedulerConfig)
        return (SpecDecodeConfig, tuple(getattr(self, f.name) for f in fields(self)))

    @property
    def num_lookahead_tokens(self) -> int:
        """KV slots ``allocate_slots`` reserves beyond the scheduled tokens: ``k`` for the
        EAGLE proposer (EAGLE and MTP, whose draft head writes its own next positions), 0 for
        n-gram (vllm/v1/core/sched/scheduler.py, ``Scheduler.__init__``:
        ``num_lookahead_tokens``)."""
        return 0 if self.method == "ngram" else self.num_speculative_tokens

    @property
    def uniform_decode_query_len(self) -> int:
        """Query rows of one decoding request in a verification step: ``1 + k``."""
        return 1 + self.num_speculative_tokens


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """vLLM V1 scheduler knobs (same names), plus clustersim's step-budget policies.

    ``step_policy`` decides who gets the step's token budget first:

    * ``decode_first`` -- vLLM: running requests in admission order, then waiting ones.
    * ``prefill_first`` -- prompt chunks (running, then waiting) before any decode.
    * ``balanced`` -- up to ``decode_reserve_tokens`` decodes, then prompt chunks, then the
      remaining decodes.

    ``prefill_reserve_fraction`` keeps that share of every step's budget away from decodes
    until prompt chunks have had their turn (anti-starvation); 0 means vLLM's behaviour.
    """

    max_num_batched_tokens: int
    max_num_seqs: int
    max_model_len: int
    block_size: int = 16
    max_num_scheduled_tokens: int | None = None
    enable_chunked_prefill: bool = True
    long_prefill_token_threshold: int = 0
    long_prefill_token_threshold_adaptive: bool = False
    long_prefill_threshold_single_request: bool = False
    """Older vLLM applied the long-prefill cap even with one eligible request (spec §10)."""
    policy: QueuePolicy = "fcfs"
    scheduler_reserve_full_isl: bool = True
    watermark: float = 0.0
    enable_prefix_caching: bool = True
    async_scheduling: bool = False
    step_policy: StepPolicy = "decode_first"
    prefill_reserve_fraction: float = 0.0
    decode_reserve_tokens: int = 1
    kv_full_blocks_only: bool = False
    """Decode side of P/D as in vLLM <= 0.10: pull only the prompt's full blocks (spec §7.4)."""
    speculative: SpecDecodeConfig | None = None
    """Speculative decoding (None: off); resolved from ``engine.speculative``."""

    def __reduce__(self) -> tuple[type[SchedulerConfig], tuple[object, ...]]:
        # compiled (``clustersim.native``), a frozen dataclass cannot be unpickled by setting
        # its fields one by one: it is rebuilt from them
        return (SchedulerConfig, tuple(getattr(self, f.name) for f in fields(self)))

    @property
    def token_budget(self) -> int:
        if self.max_num_scheduled_tokens is not None:
            return self.max_num_scheduled_tokens
        return self.max_num_batched_tokens

    @property
    def decode_cap(self) -> int:
        """Tokens decodes may take before prompt chunks are served (see ``step_policy``)."""
        budget = self.token_budget
        if self.step_policy == "prefill_first":
            return 0
        # ceil, so any positive share reserves at least one token; the epsilon absorbs float noise
        reserve = math.ceil(self.prefill_reserve_fraction * budget - 1e-9)
        cap = budget - reserve
        if self.step_policy == "balanced":
            cap = min(cap, self.decode_reserve_tokens)
        return cap
