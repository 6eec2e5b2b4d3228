"""A simulated request: one progress counter, as in vLLM V1.

There is no prefill/decode flag. ``num_computed_tokens`` catches up with ``num_tokens``
(prompt + outputs so far); a request with exactly one uncomputed token after its first output
is a decode, anything else is (re)computing a prompt::

    | <------------- num_prompt_tokens -------------> | <-- num_output_tokens --> |
    | <----- num_computed_tokens -----> | <-- still to compute this or later steps -->
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from enum import Enum


class RequestStatus(Enum):
    WAITING = "waiting"
    WAITING_FOR_REMOTE_KVS = "waiting_for_remote_kvs"
    RUNNING = "running"
    PREEMPTED = "preempted"
    FINISHED = "finished"
    REJECTED = "rejected"


@dataclass(slots=True, eq=False, init=False)
class Request:
    """One request as an engine instance sees it.

    ``max_tokens`` is the number of output tokens the request generates (the trace's output
    length); the request stops after sampling that many, as vLLM does on EOS or on
    ``max_tokens``. (Its ``__init__`` is written out, not the dataclass's, so that it
    compiles with the engine: a run builds hundreds of thousands of requests.)
    """

    request_id: str
    arrival_s: float
    num_prompt_tokens: int
    max_tokens: int
    priority: int = 0
    block_hashes: tuple[int, ...] = ()
    """Chained hashes of the prompt's full blocks (prefix-cache keys), oldest block first."""

    status: RequestStatus = RequestStatus.WAITING
    num_computed_tokens: int = 0
    num_output_tokens: int = 0
    num_output_placeholders: int = 0
    """Async scheduling only: tokens scheduled whose sampled value is not back yet."""
    num_preemptions: int = 0
    stalled_preemptions: int = 0
    """Preemptions in a row that found it no further along than an earlier one (thrashing)."""
    best_progress: int = 0
    """The most tokens it had computed when preempted."""
    first_token_s: float | None = None
    finish_s: float | None = None
    reject_reason: str | None = None
    _token_times: array | None = field(default=None, repr=False)
    token_clock: array | None = field(default=None, repr=False)
    """Lean run (no kept token times): the end time of every step its engine applied; its
    tokens are positions in it, the latest run of consecutive ones ``token_run_first ..
    token_run_last``, earlier runs in ``token_runs_before`` (flat first, last pairs)."""
    token_run_first: int = -1
    token_run_last: int = -1
    token_runs_before: list[int] | None = field(default=None, repr=False)

    # Prefill/decode disaggregation (vLLM's NIXL connector, spec §7).
    kv_producer: bool = False
    """Prefill side: after its one token the request keeps its blocks until they are read."""
    do_remote_prefill: bool = False
    """Decode side: the prompt's KV comes from a producer instead of a local prefill."""
    kv_transfer_done: bool = False
    """Decode side: the pull finished; the next schedule() admits the request."""
    prefill_instance: str | None = None
    decode_instance: str | None = None
    handoff_bytes: int = 0
    handoff_start_s: float | None = None
    handoff_end_s: float | None = None

    # Faults (``cluster.faults``): the client sends a request a failure lost again.
    num_retries: int = 0
    """Times the client sent it again after a failure lost an attempt."""
    attempt_arrival_s: float | None = None
    """When the current attempt reached the cluster (None: the first attempt, at
    ``arrival_s``); ``arrival_s`` stays the client's first arrival, which latencies start
    from."""

    # Benchmark clients (``workload.sources.Benchmark``): ``arrival_s`` is the send.
    dispatch_s: float | None = None
    """When the client's rate process handed the request over, before it waited for a
    concurrency slot (None: the client sends on arrival); the wait is its client queue time."""
    num_cached_tokens: int = -1
    """Prompt tokens its first prefill found in the prefix cache (vLLM's
    ``Request.num_cached_tokens``, the usage's ``cached_tokens``; a disaggregated request's
    are its prefill instance's); -1: never admitted."""
    num_cpu_hit_tokens: int = 0
    """Prompt tokens its first prefill loaded from the engine's CPU tier, past those the
    prefix cache in HBM held (vLLM's ``num_external_computed_tokens`` from the offloading
    connector; ``engine.offload``)."""

    def __init__(self, request_id: str, arrival_s: float, num_prompt_tokens: int,
                 max_tokens: int, priority: int = 0, block_hashes: tuple[int, ...] = (),
                 kv_producer: bool = False) -> None:
        self.request_id = request_id
        self.arrival_s = arrival_s
        self.num_prompt_tokens = num_prompt_tokens
        self.max_tokens = max_tokens
        self.priority = priority
        self.block_hashes = block_hashes
        self.status = RequestStatus.WAITING
        self.num_computed_tokens = 0
        self.num_output_tokens = 0
        self.num_output_placeholders = 0
        self.num_preemptions = 0
        self.stalled_preemptions = 0
        self.best_progress = 0
        self.first_token_s = None
        self.finish_s = None
        self.reject_reason = None
        self._token_times = None
        self.token_clock = None
        self.token_run_first = -1
        self.token_run_last = -1
        self.token_runs_before = None
        self.kv_producer = kv_producer
        self.do_remote_prefill = False
        self.kv_transfer_done = False
        self.prefill_instance = None
        self.decode_instance = None
        self.handoff_bytes = 0
        self.handoff_start_s = None
        self.handoff_end_s = None
        self.num_retries = 0
        self.attempt_arrival_s = None
        self.dispatch_s = None
        self.num_cached_tokens = -1
        self.num_cpu_hit_tokens = 0

    @property
    def engine_arrival_s(self) -> float:
        """When this attempt arrived: what an engine orders requests of equal priority by."""
        return self.arrival_s if self.attempt_arrival_s is None else self.attempt_arrival_s

    def retry(self, now_s: float) -> None:
        """The client sends it again now, from scratch: nothing of the lost attempt is kept
        but its preemptions (every token it had streamed is discarded)."""
        self.num_retries += 1
        self.attempt_arrival_s = now_s
        self.status = RequestStatus.WAITING
        self.num_computed_tokens = self.num_output_tokens = self.num_output_placeholders = 0
        self.stalled_preemptions = self.best_progress = 0
        self.first_token_s = self.finish_s = self.reject_reason = None
        self._token_times = self.token_clock = self.token_runs_before = None
        self.token_run_first = self.token_run_last = -1
        self.do_remote_prefill = self.kv_transfer_done = False
        self.prefill_instance = self.decode_instance = None
        self.handoff_bytes = 0
        self.handoff_start_s = self.handoff_end_s = None
        self.num_cached_tokens = -1
        self.num_cpu_hit_tokens = 0

    @property
    def token_times_s(self) -> array:
        """End time of every step that produced an output token for this request (stays
        empty in a lean run, which notes its tokens against ``token_clock`` instead)."""
        if self._token_times is None:
            self._token_times = array("d")
        return self._token_times

    def kept_token_times(self) -> array | None:
        """``token_times_s`` if it was ever used, without creating it."""
        return self._token_times

    @property
    def token_streaks(self) -> list[int] | None:
        """Lean run: every run of consecutive clock positions with a token, flat
        ``[first, last, first, last, ...]``, oldest first (None before the first token)."""
        if self.token_run_last < 0:
            return None
        return [*(self.token_runs_before or ()), self.token_run_first, self.token_run_last]

    def note_tokens(self, clock: array, first: int, last: int) -> None:
        """Tokens at positions ``first .. last`` of ``clock`` (a lean run's record)."""
        if self.token_run_last < 0:
            self.token_clock = clock
            self.token_run_first = first
        elif self.token_run_last == first - 1:
            self.token_run_last = last
            return
        else:
            if self.token_runs_before is None:
                self.token_runs_before = []
            self.token_runs_before += (self.token_run_first, self.token_run_last)
            self.token_run_first = first
        self.token_run_last = last

    @property
    def num_tokens(self) -> int:
        return self.num_prompt_tokens + self.num_output_tokens

    @property
    def is_done(self) -> bool:
        return self.status is RequestStatus.FINISHED or self.status is RequestStatus.REJECTED

    @property
    def outcome(self) -> str:
        if self.status is RequestStatus.FINISHED:
            return "finished"
        if self.status is RequestStatus.REJECTED:
            return f"rejected: {self.reject_reason}"
        return f"unfinished: {self.status.value}"
