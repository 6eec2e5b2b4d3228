"""vLLM V1's ``Scheduler.schedule()`` and ``update_from_output()`` over plain state.

No SimPy and no clock in here: the instance process calls :meth:`Scheduler.schedule` to get a
:class:`StepPlan`, prices and waits for the step, then hands the plan back to
:meth:`Scheduler.update_from_output` with the time the step ended. The rules and their vLLM
sources are in ``vllm_scheduler_spec.md`` §2-§6; section numbers below refer to it.

Like vLLM, ``schedule()`` applies the schedule-time transitions itself (blocks allocated,
``num_computed_tokens`` advanced, victims preempted); only sampled tokens wait for the step.
"""

from __future__ import annotations

from array import array
from typing import Final

from clustersim.engine.config import SchedulerConfig
from clustersim.engine.fastforward.decode_set import DecodeSet, StepClock, bulk_decodes_allowed
from clustersim.engine.kv_manager import KVCacheManager, cdiv
from clustersim.engine.offload import CpuKVTier
from clustersim.engine.queues import FCFSQueue, PriorityQueue, WaitingQueue
from clustersim.engine.request import Request, RequestStatus
from clustersim.engine.spec_decode import AcceptanceSampler
from clustersim.engine.step_plan import NOTHING, StepPlan, listed

__all__ = ["FCFSQueue", "PriorityQueue", "Scheduler", "StepPlan"]

NO_LOAD: Final = 0
LOADING: Final = 1
NO_ROOM: Final = 2
DEFERRED: Final = 3
"""What asking the CPU tier did for a waiting request (``Scheduler._start_cpu_load``)."""


class Scheduler:
    """One instance's queues and the V1 scheduling loop (spec §3)."""

    def __init__(
        self, config: SchedulerConfig, kv: KVCacheManager, keep_token_times: bool = True,
        bulk_decodes: bool = False, offload: CpuKVTier | None = None,
    ) -> None:
        """``keep_token_times=False`` (a lean run): requests keep no ``token_times_s``; their
        tokens are noted as positions in :attr:`token_clock` instead. ``bulk_decodes``:
        requests that decode every step join a :class:`DecodeSet` and are scheduled and
        updated together where ``bulk_decodes_allowed`` (``engine.fastforward``; the same
        steps either way).

        With speculative decoding (``config.speculative``) a decode schedules its drafts too
        and gains ``1 + accepted`` tokens per step: requests then keep their token times (a
        step's tokens share one time, which a lean run's clock positions cannot say), and
        there is no decode set, so the engine steps one step at a time (no coalesced runs).

        ``offload``: the engine's CPU tier below HBM (``engine.offload``; None: none)."""
        self.config = config
        self.kv = kv
        self.offload = offload
        self._next_store: dict[str, int] = {}
        """CPU tier: each unfinished request's blocks before this one are stored (or were
        loaded from the tier); vLLM's ``_next_stored_block_idx``."""
        self._cpu_loading: dict[str, tuple[Request, tuple[int, ...]]] = {}
        """CPU tier: the requests whose load is under way, with the block hashes it reads."""
        spec = config.speculative
        keep_token_times = keep_token_times or spec is not None
        self.keep_token_times = keep_token_times
        # (a sliding window frees blocks as its requests decode: no decode set to advance)
        bulk = bulk_decodes and bulk_decodes_allowed(config) and not kv.window_groups
        self._num_drafts = 0 if spec is None else spec.num_speculative_tokens
        """Draft tokens a decode carries each step (0: no speculative decoding)."""
        self._lookahead = 0 if spec is None else spec.num_lookahead_tokens
        """KV slots reserved beyond a running request's scheduled tokens."""
        self._acceptance: AcceptanceSampler | None = (
            None if spec is None else AcceptanceSampler(spec))
        """Draws how many of a decode's drafts the target accepts."""
        step_clock = StepClock() if bulk or not keep_token_times else None
        self.step_clock: StepClock | None = step_clock
        """The end time of every step applied, in order (decode-set members' tokens and a
        lean run's token records index it)."""
        self.token_clock: array | None = (
            None if keep_token_times or step_clock is None else step_clock.times)
        """Lean run: the clock ``Request.token_streaks`` index."""
        self.decoding: DecodeSet | None = (
            DecodeSet(kv, config.max_model_len, step_clock, keep_token_times,
                      config.async_scheduling)
            if bulk and step_clock is not None else None
        )
        """Running requests that decode every step, advanced together (``bulk_decodes``)."""
        self._detached: list[Request] = NOTHING
        """Async scheduling: the members of a decode set dissolved while its step was in
        flight, whose token from that step the next update applies as to requests scheduled
        alone (in running order, before the step's other samples)."""
        self.running: list[Request] = []
        self.waiting: WaitingQueue = (
            PriorityQueue() if config.policy == "priority" else FCFSQueue()
        )
        self.kv_holding = FCFSQueue()
        """Waiting requests that already hold blocks (pulling remote KV); served first (v0.33).
        (A compiled queue, not a deque: the scheduler reads it every step.)"""
        self.kv_held: dict[str, Request] = {}
        """Finished producer requests whose blocks wait to be read by a decode instance."""
        self._watermark_blocks = int(config.watermark * kv.num_gpu_blocks)
        self._token_budget = config.token_budget
        self._decode_cap = config.decode_cap
        self._num_plans = 0
        self._removed: dict[int, int] = {}
        """id(request) -> plans scheduled before it was removed (:meth:`remove`): those may
        still be in flight, and their output for it is dropped."""

    # ------------------------------------------------------------------ queues
    def add_request(self, request: Request) -> None:
        request.status = RequestStatus.WAITING
        self.waiting.add(request)

    @property
    def num_unfinished(self) -> int:
        return len(self.running) + len(self.waiting) + len(self.kv_holding)

    def release_kv(self, request: Request) -> None:
        """A consumer has read a finished producer request's blocks (or its hold expired)."""
        if self.kv_held.get(request.request_id) is request:  # (not a later attempt's copy)
            del self.kv_held[request.request_id]
            self.kv.free(request)

    def remove(self, request: Request) -> None:
        """Take an unfinished request out of whichever queue holds it and free its blocks
        (it was aborted, or its other half failed). A step already planned with it (the one
        under way, and async scheduling's next) gives it nothing when its output is
        applied, as vLLM skips a request that was aborted while the model ran it."""
        self._removed[id(request)] = self._num_plans
        members = self.decoding
        if members is not None and request in members:
            members.leave(request)
        if request in self.kv_holding:
            self.kv_holding.remove(request)
        elif request in self.running:
            self.running.remove(request)
        elif request.status in (RequestStatus.WAITING, RequestStatus.PREEMPTED):
            self.waiting.remove(request)
        if self.offload is not None:
            self._forget_offload(request)
        self.kv.free(request)

    def _forget_offload(self, request: Request) -> None:
        """The request leaves this engine unfinished: a load it has under way no longer
        holds the tier's blocks (its copy's end finds nothing to do)."""
        rid = request.request_id
        if rid in self._next_store:
            del self._next_store[rid]
        loading = self._cpu_loading.get(rid)
        if loading is not None and loading[0] is request:
            del self._cpu_loading[rid]
            assert self.offload is not None
            self.offload.complete_load(loading[1])

    def recompute_remote_load(self, request: Request) -> None:
        """Reading a request's prompt KV failed and the policy is to recompute it (vLLM's
        ``kv_load_failure_policy: recompute``): its blocks are freed and it waits, first in
        line, to prefill its prompt here (a local prefix hit may still cover part of it)."""
        self.kv_holding.remove(request)
        self.kv.free(request)
        request.num_computed_tokens = 0
        request.do_remote_prefill = request.kv_transfer_done = False
        request.status = RequestStatus.WAITING
        self.waiting.prepend(request)

    def drain(self) -> list[Request]:
        """Every request this scheduler holds (the engine died): running, pulling, waiting,
        then finished producers whose blocks await a reader, with up-to-date counters. The
        queues are left as they are; the scheduler is not used again."""
        self.sync_members()
        return [*self.running, *self.kv_holding, *self.waiting, *self.kv_held.values()]

    # ---------------------------------------------------------------- schedule
    def schedule(self) -> StepPlan:
        """Decide this step's tokens per request (spec §3.1-§3.5)."""
        cfg = self.config
        plan = StepPlan(seq=self._num_plans)
        self._num_plans += 1
        scheduled = plan.scheduled
        kv_blocks = self.kv.req_to_blocks
        block_size = self.kv.block_size
        budget = self._token_budget
        decode_budget = self._decode_cap
        async_mode = cfg.async_scheduling
        max_model_len = cfg.max_model_len
        num_drafts = self._num_drafts
        lookahead = self._lookahead

        num_eligible = self.num_unfinished
        threshold = cfg.long_prefill_token_threshold
        if num_eligible <= 1 and not cfg.long_prefill_threshold_single_request:
            threshold = 0  # v0.33: the cap is off when only one request is eligible
        elif threshold > 0 and cfg.long_prefill_token_threshold_adaptive:
            threshold = max(threshold, cfg.max_num_batched_tokens // num_eligible)

        running = self.running
        deferred_decodes: list[Request] = NOTHING

        # Phase 1: RUNNING requests in admission order (§3.2), the decode set's members (the
        # first ones) in bulk when every one of them gets its token and fits its block.
        index = 0
        members = self.decoding
        if members is not None and len(members):
            if async_mode:  # members certain to finish on their placeholder are skipped
                members.retire_finishing()
            num_members = members.num_active
            if (num_members <= budget and num_members <= decode_budget
                    and members.phase_sizes[members.num_scheduled % block_size]
                    <= self.kv.num_free_blocks):  # (the takers of this step)
                if num_members:
                    members.schedule()
                plan.num_bulk = num_members
                index = len(members)  # (the retired ones skipped, as the loop would)
                plan.num_scheduled_tokens = num_members
                budget -= num_members
                decode_budget -= num_members
            else:  # the loop below gives each member its own turn
                self._detached = members.dissolve()
        while index < len(running) and budget > 0:
            request = running[index]
            placeholders = request.num_output_placeholders
            if async_mode and placeholders > 0 and (
                request.num_computed_tokens + 2 - placeholders
                >= request.num_prompt_tokens + request.max_tokens
            ):
                index += 1  # certain to finish on the in-flight token; don't waste a slot
                continue
            num_outputs = request.num_output_tokens
            num_computed = request.num_computed_tokens
            num_new = request.num_prompt_tokens + num_outputs + placeholders - num_computed
            is_decode = num_new == 1 and num_outputs + placeholders > 0
            if is_decode and decode_budget <= 0:
                deferred_decodes = listed(deferred_decodes, request)
                index += 1
                continue
            if is_decode and num_drafts:
                num_new += num_drafts  # num_tokens_with_spec: the drafts are verified too
            if 0 < threshold < num_new:
                num_new = threshold
            if num_new > budget:
                num_new = budget
            if num_new > max_model_len - 1 - num_computed:
                num_new = max_model_len - 1 - num_computed
            if num_new <= 0:
                index += 1
                continue
            # A decode that still has room in its last block needs no allocation (the common
            # case); anything else goes through allocate_slots and, if needed, preemption.
            held = kv_blocks.get(request.request_id) if is_decode else None
            if held is None or len(held) * block_size < num_computed + num_new + lookahead:
                allocated, removed_before = self._allocate_running(request, num_new, plan)
                index -= removed_before
                budget = self._token_budget - plan.num_scheduled_tokens  # victims refunded
                if not allocated:
                    if cfg.policy == "priority":
                        continue  # v0.33: self-preempted; try the next running request
                    break
            scheduled.append((request, num_new))
            plan.num_scheduled_tokens += num_new
            budget -= num_new
            if is_decode:
                decode_budget -= num_new
            index += 1
        budget = self._token_budget - plan.num_scheduled_tokens

        # Phase 2: WAITING requests, only if nobody was preempted (§3.4).
        num_running_before = len(running)
        if not plan.preempted:
            budget = self._schedule_waiting(plan, budget, threshold)
        else:
            plan.waiting_stopped_by = "preempted"

        # Decodes held back by the step policy get what is left; they never preempt a request
        # admitted in this very step (that would undo the policy's choice).
        if deferred_decodes:
            admitted = frozenset(id(r) for r in running[num_running_before:])
            for request in deferred_decodes:
                if budget <= 0:
                    break
                if request.status is not RequestStatus.RUNNING:
                    continue  # preempted meanwhile
                num_new = 1
                if num_drafts:  # with its drafts, as far as the budget and the model allow
                    num_new = max(1, min(1 + num_drafts, budget,
                                         max_model_len - 1 - request.num_computed_tokens))
                allocated, _ = self._allocate_running(request, num_new, plan, admitted)
                budget = self._token_budget - plan.num_scheduled_tokens
                if not allocated:
                    if cfg.policy == "priority":
                        continue
                    break
                self._record(plan, request, num_new)
                budget -= num_new

        self._update_after_schedule(plan)
        if self.offload is not None:
            self._plan_stores(plan)
        plan.num_running = len(self.running)
        plan.num_waiting = len(self.waiting) + len(self.kv_holding)  # pulling KV counts as waiting
        plan.kv_blocks_used = self.kv.num_used_blocks
        return plan

    def _schedule_waiting(
        self,
        plan: StepPlan,
        budget: int,
        threshold: int,
    ) -> int:
        """Admit waiting requests: KV-holding ones first, then the waiting queue (§3.4, §7.4)."""
        cfg = self.config
        kv = self.kv
        waiting = self.waiting
        holding = self.kv_holding
        running = self.running
        blocked: list[Request] = NOTHING  # holding requests whose pull is still in flight
        deferred: list[Request] = NOTHING  # waiting ones whose CPU hit another request loads
        offload = self.offload
        stopped_by: str | None = "budget"
        while budget > 0:
            from_holding = len(holding) > 0
            if not from_holding and not len(waiting):
                stopped_by = None
                break
            if len(running) >= cfg.max_num_seqs:
                stopped_by = "seats"
                break  # seat cap counts every running request (§3.4 step 2)
            if from_holding:
                request = holding.peek()
                if not request.kv_transfer_done:
                    blocked = listed(blocked, holding.pop())
                    continue
                self._finish_remote_load(request)
            else:
                request = waiting.peek()
                if request.do_remote_prefill and request.num_computed_tokens == 0:
                    parked = self._start_remote_load(request, plan)
                    if parked is None:
                        request.do_remote_prefill = False  # nothing to pull: prefill locally
                    elif parked:
                        continue
                    else:
                        stopped_by = "remote_kv"
                        break
            hit_blocks: list[int] = []
            num_computed = request.num_computed_tokens
            if num_computed == 0:
                hit_blocks, num_computed = kv.get_computed_blocks(request)
                if offload is not None and request.block_hashes and not from_holding:
                    loading = self._start_cpu_load(request, plan, hit_blocks, num_computed)
                    if loading == LOADING:
                        continue
                    if loading == DEFERRED:
                        deferred = listed(deferred, waiting.pop())
                        continue
                    if loading == NO_ROOM:
                        stopped_by = "kv"
                        plan.waiting_head = request
                        break
            num_new = request.num_tokens - num_computed
            if 0 < threshold < num_new:
                num_new = threshold
            if not cfg.enable_chunked_prefill and num_new > budget:
                stopped_by = "whole_prompt"
                break  # the whole prompt must fit this step; it waits, blocking the queue
            num_new = min(num_new, budget)
            if num_new <= 0:
                stopped_by = "no_tokens"
                break
            watermark = self._watermark_blocks if running else 0
            if not kv.allocate_slots(
                request,
                num_new,
                new_computed_blocks=hit_blocks,
                num_new_computed_tokens=num_computed - request.num_computed_tokens,
                full_sequence_must_fit=cfg.scheduler_reserve_full_isl,
                watermark_blocks=watermark,
                # vLLM reserves the lookahead only for a request with computed tokens
                # (a finished KV pull): ``effective_lookahead_tokens``
                num_lookahead_tokens=self._lookahead if request.num_computed_tokens else 0,
            ):
                stopped_by = "kv"
                plan.waiting_head = request
                break  # head-of-line blocking: no later request is tried
            if from_holding:
                holding.pop()
            else:
                waiting.pop()
            running.append(request)
            request.status = RequestStatus.RUNNING
            if request.num_cached_tokens < 0 and not from_holding:  # its first local prefill
                request.num_cached_tokens = len(hit_blocks) * kv.block_size
            request.num_computed_tokens = num_computed
            self._record(plan, request, num_new)
            budget -= num_new
        plan.waiting_stopped_by = stopped_by
        if blocked:
            for request in reversed(blocked):  # back at the front, in their order
                holding.prepend(request)
        if deferred:
            for request in reversed(deferred):
                waiting.prepend(request)
        return budget

    def _start_cpu_load(self, request: Request, plan: StepPlan, hit_blocks: list[int],
                        hit: int) -> int:
        """Ask the CPU tier for the blocks after the request's HBM hit of ``hit`` tokens
        (``engine.offload``; vLLM's ``get_num_new_matched_tokens`` and the scheduler's
        remote-KV path). ``LOADING``: a load of at least one block is planned and the
        request waits in ``kv_holding``, its blocks taken; ``NO_ROOM``: its blocks do not fit
        (admission stops: head of line); ``DEFERRED``: another request is loading one of its
        hit blocks (it waits a step); ``NO_LOAD``: nothing to load, prefill as usual."""
        tier = self.offload
        assert tier is not None
        kv = self.kv
        block_size = kv.block_size
        hashes = request.block_hashes
        num_full = request.num_tokens // block_size
        if num_full > len(hashes):
            num_full = len(hashes)
        tier.touch(hashes, num_full)
        start = hit // block_size
        if num_full <= start:
            return NO_LOAD
        hits, busy = tier.lookup(hashes, start, num_full)
        if not hits:
            return NO_LOAD
        if busy:
            return DEFERRED
        external = hits * block_size
        if not self._park_for_external_kv(request, hit_blocks, hit, external):
            return NO_ROOM
        loaded = hashes[start:start + hits]
        tier.prepare_load(loaded)
        rid = request.request_id
        self._cpu_loading[rid] = (request, loaded)
        self._next_store[rid] = start + hits  # (what it loads is not stored again)
        if request.num_cached_tokens < 0:  # its first prefill
            request.num_cached_tokens = hit
            request.num_cpu_hit_tokens = external
        request.kv_transfer_done = False
        plan.cpu_loads = listed(plan.cpu_loads, (request, hits))
        return LOADING

    def finish_cpu_load(self, request: Request) -> bool:
        """The request's load from the CPU tier ended: its blocks there are free to evict
        again, and the next ``schedule()`` admits it. False: it is no longer loading here
        (removed meanwhile)."""
        rid = request.request_id
        loading = self._cpu_loading.get(rid)
        if loading is None or loading[0] is not request:
            return False
        del self._cpu_loading[rid]
        assert self.offload is not None
        self.offload.complete_load(loading[1])
        request.kv_transfer_done = True
        return True

    def _park_for_external_kv(self, request: Request, hit_blocks: list[int], hit: int,
                              external: int) -> bool:
        """Take blocks for ``external`` tokens whose KV is read from outside HBM (a producer's
        or the CPU tier's) after a local hit of ``hit`` tokens, and park the head request in
        ``kv_holding`` as ``WAITING_FOR_REMOTE_KVS``: one path for every KV connector, as in
        vLLM. False: the blocks do not fit (admission stops: head of line)."""
        cfg = self.config
        if not self.kv.allocate_slots(
            request,
            0,
            new_computed_blocks=hit_blocks,
            num_new_computed_tokens=hit,
            num_external_tokens=external,
            full_sequence_must_fit=cfg.scheduler_reserve_full_isl,
            watermark_blocks=self._watermark_blocks if self.running else 0,
            reserved_blocks=(
                0 if cfg.kv_full_blocks_only else self._blocks_still_needed_by_prefills()
            ),  # v0.33 reserves room for in-flight prefills; older versions did not
            delay_cache_blocks=True,
        ):
            return False
        self.waiting.pop()
        request.status = RequestStatus.WAITING_FOR_REMOTE_KVS
        request.num_computed_tokens = hit + external
        self.kv_holding.add(request)
        return True

    def _start_remote_load(self, request: Request, plan: StepPlan) -> bool | None:
        """Allocate blocks for a prompt whose KV a producer computed, and park the request.

        Returns True when parked in ``kv_holding`` (no budget, no seat), False when the blocks
        do not fit (admission stops: head of line), None when there is nothing to pull (a local
        prefix hit covers it, or vLLM <= 0.10 and no full block): the request then prefills
        locally and a zero-token load tells the producer to free its blocks.
        """
        cfg = self.config
        kv = self.kv
        block_size = kv.block_size
        hit_blocks, hit = kv.get_computed_blocks(request)
        prompt = request.num_prompt_tokens
        pulled = (prompt // block_size) * block_size if cfg.kv_full_blocks_only else prompt
        external = pulled - hit
        if external <= 0:
            # nothing to read: only tell the producer
            plan.kv_loads = listed(plan.kv_loads, (request, 0))
            return None
        if not self._park_for_external_kv(request, hit_blocks, hit, external):
            return False
        # tokens found in the local prefix cache are not read again
        plan.kv_loads = listed(plan.kv_loads, (request, external))
        return True

    def _finish_remote_load(self, request: Request) -> None:
        """The pull is done: cache the blocks and leave the last prompt token to recompute."""
        self.kv.cache_blocks(request, request.num_computed_tokens)
        if request.num_computed_tokens >= request.num_tokens:
            request.num_computed_tokens = request.num_tokens - 1  # its logits give token 1
        request.status = RequestStatus.WAITING
        request.do_remote_prefill = False  # a later preemption recomputes locally

    def offers_blocks(self, request: Request) -> bool:
        """vLLM <= 0.10 offers only full blocks: a prompt shorter than one is not transferred."""
        return not (
            self.config.kv_full_blocks_only and request.num_prompt_tokens < self.kv.block_size
        )

    def _blocks_still_needed_by_prefills(self) -> int:
        """Blocks running chunked prefills will still take: a pull must fit beside them."""
        kv = self.kv
        block_size = kv.block_size
        max_model_len = self.config.max_model_len
        needed = 0
        members = self.decoding
        skip = len(members) if members is not None else 0  # decodes: their block is taken
        for request in self.running[skip:] if skip else self.running:
            if request.num_computed_tokens < request.num_tokens:
                full = cdiv(min(request.num_tokens, max_model_len), block_size)
                # (every group's block per slot: a chunk takes window blocks too)
                needed += max(0, full - kv.num_blocks_of(request.request_id)) * (
                    kv.blocks_per_slot)
        return needed

    def _allocate_running(
        self,
        request: Request,
        num_new: int,
        plan: StepPlan,
        protected: frozenset[int] = frozenset(),
    ) -> tuple[bool, int]:
        """Allocate for a running request, preempting victims until it fits (§3.3).

        Returns whether it fits and how many victims this step had already scheduled (all
        before the request in ``running``): vLLM steps its ``req_index`` back once for each
        of those, and only for those (not for the request itself, nor for a skipped one
        before it). A victim whose id is in ``protected`` is not preempted: the allocation
        fails instead.
        """
        running = self.running
        removed_before = 0
        while not self.kv.allocate_slots(request, num_new,
                                         num_lookahead_tokens=self._lookahead):
            if self.config.policy == "priority":
                victim = max(running, key=lambda r: (r.priority, r.engine_arrival_s))
            else:
                victim = running[-1]
            if id(victim) in protected:
                return False, removed_before
            victim_index = len(running) - 1 if victim is running[-1] else running.index(victim)
            bulk = victim_index < plan.num_bulk  # (a decode-set member, scheduled in bulk)
            del running[victim_index]
            if self._unrecord(plan, victim) or bulk:
                removed_before += 1
            self._preempt(victim)
            plan.preempted = listed(plan.preempted, victim)
            if victim is request:
                return False, removed_before
        return True, removed_before

    def _preempt(self, request: Request) -> None:
        if request.num_computed_tokens > request.best_progress:
            request.best_progress = request.num_computed_tokens
            request.stalled_preemptions = 0
        else:
            request.stalled_preemptions += 1
        self.kv.free(request)
        request.status = RequestStatus.PREEMPTED
        request.num_computed_tokens = 0
        request.num_preemptions += 1
        self.waiting.prepend(request)

    @staticmethod
    def _record(plan: StepPlan, request: Request, num_new: int) -> None:
        plan.scheduled.append((request, num_new))
        plan.num_scheduled_tokens += num_new

    @staticmethod
    def _unrecord(plan: StepPlan, request: Request) -> bool:
        """Refund a victim that was already scheduled this step (priority / step policies);
        whether it was."""
        for position, (scheduled, num_new) in enumerate(plan.scheduled):
            if scheduled is request:
                del plan.scheduled[position]
                plan.num_scheduled_tokens -= num_new
                return True
        return False

    def _update_after_schedule(self, plan: StepPlan) -> None:
        """Advance ``num_computed_tokens`` and collect what the cost model needs (§3.5)."""
        async_mode = self.config.async_scheduling
        sampled = plan.sampled
        num_decodes = decode_kv = prefill_tokens = prefill_kv = spec_tokens = 0
        attn_pairs = spec_pairs = 0.0
        for request, num_new in plan.scheduled:
            context = request.num_computed_tokens
            placeholders = request.num_output_placeholders
            num_outputs = request.num_output_tokens + placeholders
            target = request.num_prompt_tokens + num_outputs
            request.num_computed_tokens = context + num_new
            if context + num_new >= target:
                sampled.append(request)
                if async_mode:
                    request.num_output_placeholders = placeholders + 1
            if target - context == 1 and num_outputs > 0:  # a decode (1 token, or 1 + drafts)
                num_decodes += num_new
                decode_kv += context + num_new
                if num_new > 1:  # draft position i attends to i more keys than the first
                    drafts = num_new - 1
                    spec_tokens += drafts
                    spec_pairs += drafts * context + (drafts + 1) * drafts / 2
            else:
                plan.prefill_chunks = listed(plan.prefill_chunks, (request, num_new))
                prefill_tokens += num_new
                attn_pairs += num_new * context + num_new * (num_new + 1) / 2
                prefill_kv += context + num_new
        members = self.decoding
        if plan.num_bulk and members is not None:  # each attended to its context and token
            num_decodes += plan.num_bulk
            decode_kv += members.sum_computed
        plan.num_decode_tokens = num_decodes
        plan.decode_kv_tokens = decode_kv
        plan.num_prefill_tokens = prefill_tokens
        plan.prefill_attn_pairs = attn_pairs
        plan.prefill_kv_tokens = prefill_kv
        plan.num_spec_tokens = spec_tokens
        plan.spec_attn_pairs = spec_pairs

    def _plan_stores(self, plan: StepPlan) -> None:
        """The blocks this step makes full that the CPU tier does not hold yet: room is made
        for them now and they are copied once the step ends (vLLM's ``build_connector_meta``
        with the offloading connector, before the step runs). A request whose blocks find no
        room tries again at its next step.

        vLLM then touches all the request's stored blocks, at every store. Here a prompt's
        stores touch them, and the blocks an answer fills are touched once, when the request
        ends (``update_from_output``): touching a long context at each block of its answer
        costs the simulation O(context) per block, and only orders the tier's blocks
        differently while the answer runs (its prompt's blocks, held in HBM, look older to
        an eviction than vLLM would see them)."""
        tier = self.offload
        assert tier is not None
        block_size = self.kv.block_size
        next_store = self._next_store
        stores: list[int] = NOTHING
        for request, _num_new in plan.scheduled:
            hashes = request.block_hashes
            if not hashes:
                continue
            computed = request.num_computed_tokens  # (advanced: what the step computes)
            if computed > request.num_tokens:
                computed = request.num_tokens  # (async: a placeholder's token is not known)
            num_full = computed // block_size
            if num_full > len(hashes):
                num_full = len(hashes)
            rid = request.request_id
            start = next_store.get(rid, 0)
            if num_full <= start:
                continue
            new = tier.prepare_store(hashes, start, num_full)
            if new is None:
                continue
            next_store[rid] = num_full
            if not request.num_output_tokens:  # (a decode's: once, when it ends)
                tier.touch(hashes, num_full)
            if new:
                if stores is NOTHING:
                    stores = new
                else:
                    stores.extend(new)
        plan.cpu_stores = stores

    def stores_pending(self, request: Request) -> bool:
        """CPU tier: whether some of the request's keyed blocks are not stored yet (not yet
        full, or a store that found no room, which retries at the request's next step)."""
        return self._next_store.get(request.request_id, 0) < len(request.block_hashes)

    # ----------------------------------------------------------------- update
    def update_from_output(self, plan: StepPlan, now_s: float) -> list[Request]:
        """Apply a finished step: sampled tokens, stops, freed blocks. Returns finished ones
        (to read only: :data:`~clustersim.engine.step_plan.NOTHING` when none)."""
        async_mode = self.config.async_scheduling
        max_model_len = self.config.max_model_len
        finished: list[Request] = NOTHING
        clock = self.step_clock
        position = 0
        if clock is not None:
            position = len(clock)
            clock.append(now_s)
        members = self.decoding
        sampled = plan.sampled
        if plan.num_bulk:
            assert members is not None
            members.num_updated += 1
            for request in members.finishing():
                members.leave(request)
                request.status = RequestStatus.FINISHED
                request.finish_s = now_s
                self.kv.free(request)  # in running order, before the others (§2)
                finished = listed(finished, request)
            if self._detached:  # (async: the set was dissolved while this step ran)
                sampled = [*self._detached, *sampled]
                self._detached = NOTHING
        keep_times = self.keep_token_times
        removed = self._removed
        acceptance = self._acceptance
        for request in sampled:
            if request.status is RequestStatus.FINISHED:
                continue
            if removed and removed.get(id(request), -1) > plan.seq:
                continue  # removed while this step ran: its output is dropped
            if async_mode:
                request.num_output_placeholders -= 1
            num_outputs = request.num_output_tokens + 1
            if acceptance is not None:
                num_outputs = self._verify(request, acceptance)
            request.num_output_tokens = num_outputs
            if keep_times:
                times = request.token_times_s
                times.append(now_s)
                if acceptance is not None:
                    for _extra in range(len(times), num_outputs):  # accepted drafts
                        times.append(now_s)
            elif request.token_run_last == position - 1 >= 0:
                request.token_run_last = position  # the common case: the step before too
            else:
                request.note_tokens(clock.times, position, position)  # type: ignore[union-attr]
            if request.first_token_s is None:
                request.first_token_s = now_s
            if (
                num_outputs >= request.max_tokens
                or request.num_prompt_tokens + num_outputs >= max_model_len
            ):
                was_waiting = request.status is not RequestStatus.RUNNING
                request.status = RequestStatus.FINISHED
                request.finish_s = now_s
                if request.kv_producer and not was_waiting and self.offers_blocks(request):
                    self.kv_held[request.request_id] = request  # freed once the consumer reads
                else:
                    self.kv.free(request)
                finished = listed(finished, request)
                if was_waiting:  # async: preempted while its last token was in flight
                    self.waiting.remove(request)
        if finished:
            remove_all(self.running, finished)
            if self.offload is not None:
                next_store = self._next_store
                tier = self.offload
                for request in finished:
                    stored = next_store.get(request.request_id)
                    if stored is not None:
                        del next_store[request.request_id]
                        if request.num_output_tokens > 1:  # its answer's stores: now
                            tier.touch(request.block_hashes, stored)
        if members is not None:
            self._join_decodes(members, plan)
        return finished

    def _verify(self, request: Request, acceptance: AcceptanceSampler) -> int:
        """The step verified the request's drafts: ``n`` of them are accepted (drawn), the
        rest rejected (``num_computed_tokens`` steps back over them, vLLM's
        ``update_from_output``; their KV slots stay allocated, to be overwritten), and it
        gains ``n + 1`` tokens, no more than ``max_tokens`` and ``max_model_len`` allow.
        Returns its output count."""
        gained = 1
        drafts = request.num_computed_tokens - request.num_tokens  # sync: none in flight
        if drafts > 0:
            accepted = acceptance.draw(drafts)
            request.num_computed_tokens -= drafts - accepted
            gained += accepted
        cap = min(request.max_tokens, self.config.max_model_len - request.num_prompt_tokens)
        return min(request.num_output_tokens + gained, cap)

    def _join_decodes(self, members: DecodeSet, plan: StepPlan) -> None:
        """Requests right after the decode set that sampled in this step and decode from the
        next one join it. With async scheduling the next step is scheduled already: those
        that sampled in it (one placeholder) and decode one token from the step after it
        join (that token not their last)."""
        running = self.running
        index = len(members)
        if index >= len(running):
            return
        kv = self.kv
        if self.config.async_scheduling:
            max_model_len = self.config.max_model_len
            while index < len(running):
                request = running[index]
                if (request.num_output_placeholders != 1
                        or request.num_computed_tokens != request.num_tokens
                        or min(request.max_tokens, max_model_len - request.num_prompt_tokens)
                        - request.num_output_tokens < 2
                        or kv.has_uncached_blocks(request)):
                    return  # it waits behind the one before it
                members.join(request)
                index += 1
            return
        sampled = {id(r) for r in plan.sampled}
        while index < len(running):
            request = running[index]
            if (id(request) not in sampled or request.num_output_tokens == 0
                    or request.num_computed_tokens != request.num_tokens - 1
                    or kv.has_uncached_blocks(request)
                    or (self.offload is not None and self.stores_pending(request))):
                return  # still prefilling (or caching): the ones after it wait behind it
            members.join(request)
            index += 1

    def sync_members(self) -> None:
        """Bring every decode-set member's counters up to date (the set empties), and the
        step clock's array."""
        if self.decoding is not None:
            self.decoding.dissolve()
        if self.step_clock is not None:
            self.step_clock.flush()


def remove_all(requests: list[Request], gone: list[Request]) -> None:
    """Removes from ``requests`` each of ``gone`` it holds, the rest kept in order, as vLLM's
    scheduler drops its stopped requests from ``running`` (``remove_all``): one
    ``list.remove`` each, a scan in C by identity (requests have no ``__eq__``)."""
    for request in gone:
        try:  # noqa: SIM105 (no context manager object per request: step loop)
            requests.remove(request)
        except ValueError:
            pass  # it was waiting (preempted while its last token was in flight)
