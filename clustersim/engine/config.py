"""Resolved engine settings of one instance (the scenario's ``engine:`` block after defaults)."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Literal

StepPolicy = Literal["decode_first", "prefill_first", "balanced"]
QueuePolicy = Literal["fcfs", "priority"]


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
