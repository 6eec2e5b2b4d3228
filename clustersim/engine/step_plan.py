"""What one engine step runs: the scheduler's output, the cost model's and the engine's input."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from clustersim.cost.prices import StepPrices
from clustersim.cost.roofline import BatchShape
from clustersim.engine.request import Request

NOTHING: Final[list[Any]] = []
"""What a new plan's ``preempted``, ``prefill_chunks``, ``kv_loads``, ``cpu_loads`` and
``cpu_stores`` are, and the finished requests of a step in which none finished: one shared
empty list, never appended to (most steps have none of them: a list each cost an allocation
and a free per step). Use :func:`listed` to add to one; ``tests/test_coalesce.py`` checks
that it stays empty."""


def listed(entries: list[Any], entry: Any) -> list[Any]:
    """``entries`` with ``entry`` appended: a list of its own if ``entries`` is
    :data:`NOTHING`; assign the result back (``plan.preempted = listed(plan.preempted, r)``)."""
    if entries is NOTHING:
        return [entry]
    entries.append(entry)
    return entries


@dataclass(slots=True, init=False)
class StepPlan:
    """What one engine step runs: vLLM's ``SchedulerOutput``, reduced to what we simulate.

    (Its ``__init__`` is written out, not the dataclass's: it is then compiled with the
    engine, which builds one plan per step.)"""

    scheduled: list[tuple[Request, int]] = field(default_factory=list)
    """(request, tokens) in scheduling order, after the ``num_bulk`` members of the decode
    set, which are not listed."""
    sampled: list[Request] = field(default_factory=list)
    """Requests whose step ends with a sampled token (last prompt chunk or a decode), after
    the ``num_bulk`` decode-set members."""
    preempted: list[Request] = field(default_factory=list)
    num_scheduled_tokens: int = 0
    num_decode_tokens: int = 0
    # Aggregates the cost model prices (see batch_shape()).
    num_prefill_tokens: int = 0
    prefill_attn_pairs: float = 0.0
    prefill_kv_tokens: int = 0
    decode_kv_tokens: int = 0
    num_spec_tokens: int = 0
    """Draft tokens verified this step (speculative decoding), among ``num_decode_tokens``."""
    spec_attn_pairs: float = 0.0
    """Query-key pairs the drafts' positions add to the decodes' attention."""

    # Queue state right after scheduling, for the engine trace.
    num_running: int = 0
    num_waiting: int = 0
    kv_blocks_used: int = 0
    prefill_chunks: list[tuple[Request, int]] = field(default_factory=list)
    """The scheduled entries that are prompt (or recompute) chunks, not decodes."""
    kv_loads: list[tuple[Request, int]] = field(default_factory=list)
    """(request, tokens to read): KV pulls this step's execute starts (decode side of P/D);
    zero tokens only releases the producer's blocks."""
    cpu_loads: list[tuple[Request, int]] = field(default_factory=list)
    """(request, blocks): loads from the engine's CPU tier this step's execute starts
    (``engine.offload``)."""
    cpu_stores: list[int] = field(default_factory=list)
    """Block hashes this step's blocks store to the CPU tier, copied once the step ends."""
    waiting_stopped_by: str | None = None
    """Why admitting waiting requests stopped: None (nothing left to admit), "seats",
    "budget", "whole_prompt" (chunked prefill off), "remote_kv" (a pull's blocks do not fit),
    "kv" (the head's blocks do not fit; ``waiting_head``), "no_tokens", or "preempted" (no
    admission in a step that preempted)."""
    waiting_head: Request | None = None
    """The request admission stopped at, for "kv"."""
    num_bulk: int = 0
    """Decode-set members (the first running requests) each decoding one token; they come
    first in scheduling order and sample."""
    seq: int = 0
    """The scheduler's count of plans before this one (orders it against removals)."""

    def __init__(self, seq: int = 0) -> None:
        self.scheduled = []
        self.sampled = []
        self.preempted = NOTHING
        self.num_scheduled_tokens = 0
        self.num_decode_tokens = 0
        self.num_prefill_tokens = 0
        self.prefill_attn_pairs = 0.0
        self.prefill_kv_tokens = 0
        self.decode_kv_tokens = 0
        self.num_spec_tokens = 0
        self.spec_attn_pairs = 0.0
        self.num_running = 0
        self.num_waiting = 0
        self.kv_blocks_used = 0
        self.prefill_chunks = NOTHING
        self.kv_loads = NOTHING
        self.cpu_loads = NOTHING
        self.cpu_stores = NOTHING
        self.waiting_stopped_by = None
        self.waiting_head = None
        self.num_bulk = 0
        self.seq = seq

    @property
    def is_empty(self) -> bool:
        return not self.scheduled and not self.num_bulk

    @property
    def num_seqs(self) -> int:
        return len(self.scheduled) + self.num_bulk

    @property
    def num_sampled(self) -> int:
        return len(self.sampled) + self.num_bulk

    def batch_shape(self) -> BatchShape:
        """What the cost model prices for this step."""
        return BatchShape(
            num_prefill_tokens=self.num_prefill_tokens,
            prefill_attn_pairs=self.prefill_attn_pairs,
            prefill_kv_tokens=self.prefill_kv_tokens,
            num_decode_tokens=self.num_decode_tokens,
            decode_kv_tokens=self.decode_kv_tokens,
            num_sampled=self.num_sampled,
            num_seqs=self.num_seqs,
        )


class RooflinePricer:
    """A step's seconds from the roofline cost model (its ``StepPrices``), read straight off
    the plan; compiled with the engine, which calls it for every step it prices."""

    def __init__(self, prices: StepPrices) -> None:
        self.prices = prices

    def __call__(self, plan: StepPlan) -> float:
        return self.step_s(plan)

    def step_s(self, plan: StepPlan) -> float:
        """The step's seconds (what a call gives; the engine calls this natively)."""
        prices = self.prices
        if prices.speculative:
            return prices.spec_step_time_s(
                plan.num_prefill_tokens, plan.prefill_attn_pairs, plan.prefill_kv_tokens,
                plan.num_decode_tokens, plan.decode_kv_tokens, plan.num_sampled, plan.num_seqs,
                plan.num_spec_tokens, plan.spec_attn_pairs,
            )
        return prices.step_time_s(
            plan.num_prefill_tokens, plan.prefill_attn_pairs, plan.prefill_kv_tokens,
            plan.num_decode_tokens, plan.decode_kv_tokens, plan.num_sampled, plan.num_seqs,
        )

    def decode_run(self, num_decodes: int, decode_kv_tokens: int, num_steps: int) -> list[float]:
        """Seconds of each of ``num_steps`` pure-decode steps (``CostModel.decode_run_s``)."""
        return self.prices.decode_run_s(num_decodes, decode_kv_tokens, num_steps)

    def decode_run_ends(self, ends_s: list[float], start_s: float, num_decodes: int,
                        decode_kv_tokens: int, num_steps: int) -> None:
        """The same steps appended to ``ends_s`` as end times from ``start_s``."""
        self.prices.decode_run_ends(ends_s, start_s, num_decodes, decode_kv_tokens, num_steps)
