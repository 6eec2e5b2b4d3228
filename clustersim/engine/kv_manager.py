"""Paged KV blocks with prefix caching, following vLLM V1's ``KVCacheManager`` and ``BlockPool``.

Block 0 is the null block and is never handed out, so ``num_gpu_blocks - 1`` blocks are usable.
The free queue holds blocks with no reference; cached (hashed) blocks stay in it and can still be
hit by a prefix lookup until they are popped for reuse::

    head (reused first)                                            tail (evicted last)
    [ unhashed freed blocks ... | never-used blocks ... | hashed blocks in LRU order ]
      _plain (a stack)            _next_fresh.. (a range)  _cached_free (ordered)

A request's blocks are freed in reverse order so its tail blocks are evicted first.

A model with sliding-window layers (gpt-oss) runs vLLM's hybrid KV-cache manager: one block is
a page of one *group* of layers (``ModelSpec.kv_group_layers``), the full-attention group and
``window_groups`` sliding-window groups draw on the same pool, and each group holds a block per
``block_size`` tokens of a request. A sliding-window group needs only the blocks its window
still reaches: before each allocation the blocks wholly before token ``computed - window + 1``
are freed (``SlidingWindowManager.remove_skipped_blocks``; their slots hold vLLM's null
block), so a decoding request holds about ``window / block_size + 1`` blocks per such group.
Two simplifications: window blocks carry no prefix hash (a prefix hit covers the
full-attention group; the window group takes fresh blocks for the hit's last ``window``
tokens, where vLLM would reuse cached ones), and the blocks that leave the window are freed
when the request next allocates, where vLLM frees them at every schedule (at most one block
per request per group, for under ``block_size`` steps).

The three parts are kept apart so that nothing here grows with the pool: a fresh instance holds
no per-block state, and a request without prefix hashes (whose blocks nobody else can share)
takes and returns its blocks as whole lists, without reference counts. Only blocks of requests
with prefix hashes are reference-counted, since only they can be hit and shared.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Final, cast

from clustersim.engine.request import Request

TAKE_BY_POPS: Final = 16
"""Up to this many blocks are taken off the free stack one by one (a decode crossing into a
new block takes one); more as a slice."""


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class KVCacheManager:
    """Block accounting for one engine instance: a full-attention KV-cache group, and
    ``window_groups`` sliding-window groups of ``sliding_window`` tokens (module docstring)."""

    def __init__(
        self,
        num_gpu_blocks: int,
        block_size: int,
        max_model_len: int,
        enable_prefix_caching: bool = True,
        sliding_window: int = 0,
        window_groups: int = 0,
    ) -> None:
        if num_gpu_blocks < 2:
            raise ValueError(f"num_gpu_blocks must be >= 2 (block 0 is the null block), "
                             f"got {num_gpu_blocks}")
        if (sliding_window > 0) != (window_groups > 0):
            raise ValueError("sliding_window and window_groups go together")
        self.sliding_window = sliding_window
        """Tokens a sliding-window layer attends to (0: no such layers)."""
        self.window_groups = window_groups
        self.blocks_per_slot = 1 + window_groups
        """Blocks a request takes per ``block_size`` tokens it adds (one per group)."""
        self._window: dict[str, list[int]] = {}
        """Each request's sliding-window blocks (every window group's), oldest first."""
        self._window_start: dict[str, int] = {}
        """Each request's first slot its window groups still hold (the earlier ones are
        vLLM's null block)."""
        self.num_gpu_blocks = num_gpu_blocks
        self.block_size = block_size
        self.max_model_len = max_model_len
        self.enable_prefix_caching = enable_prefix_caching
        self.num_usable_blocks = num_gpu_blocks - 1
        self._num_free = num_gpu_blocks - 1
        self._plain: list[int] = []
        """Freed blocks without a hash; the last one is reused first."""
        self._next_fresh = 1
        """Blocks ``_next_fresh .. num_gpu_blocks - 1`` were never handed out."""
        self._cached_free: OrderedDict[int, None] = OrderedDict()
        """Free blocks that carry a prefix hash, least recently freed first."""
        self._ref_cnt: dict[int, int] = {}
        """References to the blocks of requests with prefix hashes (absent: free)."""
        self._block_hash: dict[int, int] = {}
        self._hash_to_block: dict[int, int] = {}
        self.req_to_blocks: dict[str, list[int]] = {}
        self._num_cached_blocks: dict[str, int] = {}

    # ----------------------------------------------------------------- queries
    @property
    def num_free_blocks(self) -> int:
        """Free blocks, including cached ones no request references (vLLM's ``free``)."""
        return self._num_free

    @property
    def num_used_blocks(self) -> int:
        """Blocks referenced by at least one request."""
        return self.num_usable_blocks - self._num_free

    def num_blocks_of(self, request_id: str) -> int:
        """The request's full-attention blocks (one per ``block_size`` tokens)."""
        return len(self.req_to_blocks.get(request_id, ()))

    def window_blocks_of(self, request_id: str) -> int:
        """The request's sliding-window blocks, every window group's."""
        return len(self._window.get(request_id, ()))

    def shares_blocks(self, request: Request) -> bool:
        """Whether the request's blocks can be hashed, hit and shared (reference-counted)."""
        return self.enable_prefix_caching and bool(request.block_hashes)

    def has_uncached_blocks(self, request: Request) -> bool:
        """Whether a later allocation could still register one of its prefix hashes."""
        return (self.shares_blocks(request)
                and self._num_cached_blocks.get(request.request_id, 0) < len(request.block_hashes))

    def get_computed_blocks(self, request: Request) -> tuple[list[int], int]:
        """Longest cached prefix of whole blocks, capped so at least one token is recomputed."""
        if not self.enable_prefix_caching or not request.block_hashes:
            return [], 0
        max_blocks = (request.num_tokens - 1) // self.block_size
        hits: list[int] = []
        for block_hash in request.block_hashes[:max_blocks]:
            block_id = self._hash_to_block.get(block_hash)
            if block_id is None:
                break
            hits.append(block_id)
        return hits, len(hits) * self.block_size

    # -------------------------------------------------------------- allocation
    def allocate_slots(
        self,
        request: Request,
        num_new_tokens: int,
        new_computed_blocks: list[int] | None = None,
        num_new_computed_tokens: int = 0,
        num_external_tokens: int = 0,
        full_sequence_must_fit: bool = False,
        watermark_blocks: int = 0,
        reserved_blocks: int = 0,
        delay_cache_blocks: bool = False,
        num_lookahead_tokens: int = 0,
    ) -> bool:
        """Give ``request`` the blocks for ``num_new_tokens`` more tokens; False if they don't fit.

        Mirrors vLLM's ``allocate_slots`` (v0.33): comparisons are strict, so an exact fit
        succeeds; evictable prefix-hit blocks count against the free pool because touching them
        takes them out of the free queue. ``num_lookahead_tokens`` more slots are reserved
        beyond them (speculative decoding's draft positions) and not cached.
        """
        bs = self.block_size
        hit_blocks = new_computed_blocks or []
        held = self.req_to_blocks.get(request.request_id)
        num_held = len(held) if held is not None else 0
        num_evictable_hits = 0
        if hit_blocks:
            cached_free = self._cached_free
            num_evictable_hits = sum(1 for b in hit_blocks if b in cached_free)
        num_free = self._num_free

        computed = request.num_computed_tokens + num_new_computed_tokens + num_external_tokens
        window_start = 0
        if self.window_groups:
            # the blocks the window has left are freed first, whether or not this fits
            window_start = self._slide(request.request_id, computed)
            num_free = self._num_free

        if full_sequence_must_fit:
            full = cdiv(min(request.num_tokens, self.max_model_len), bs)
            need_full = max(full - num_held - len(hit_blocks), 0) + num_evictable_hits
            if self.window_groups:
                need_full += self._window_need(request.request_id, window_start, full)
            if need_full + watermark_blocks > num_free:
                return False

        total = computed + num_new_tokens
        num_required = cdiv(min(total + num_lookahead_tokens, self.max_model_len), bs)
        num_new_blocks = max(num_required - num_held - len(hit_blocks), 0)
        num_window_blocks = 0
        if self.window_groups:
            num_window_blocks = self._window_need(request.request_id, window_start, num_required)
        if (num_new_blocks + num_window_blocks + num_evictable_hits + watermark_blocks
                > num_free - reserved_blocks):
            return False
        if num_window_blocks:
            self._window.setdefault(request.request_id, []).extend(
                self._take(num_window_blocks))

        taken: list[int] | None = None
        if held is None and not hit_blocks:  # a new request: the blocks taken are its list
            taken = self._take(num_new_blocks) if num_new_blocks else []
            self.req_to_blocks[request.request_id] = taken
        else:
            if held is None:
                held = self.req_to_blocks[request.request_id] = []
            if hit_blocks:
                self._touch(hit_blocks)
                held.extend(hit_blocks)
                self._num_cached_blocks[request.request_id] = len(held)
            if num_new_blocks:
                taken = self._take(num_new_blocks)
                held.extend(taken)
        if taken and self.shares_blocks(request):
            ref_cnt = self._ref_cnt
            for block_id in taken:
                ref_cnt[block_id] = 1
        if not delay_cache_blocks:
            self.cache_blocks(request, min(total, request.num_tokens))
        return True

    def append_blocks(self, requests: list[Request]) -> None:
        """One more block for each of ``requests``, popped in that order (decodes crossing a
        block boundary); the caller has checked that they fit."""
        taken = self._take(len(requests))
        # the block ids as the objects they are (read as ints, each would be unboxed and
        # boxed again into a new int object)
        ids = cast(list[object], taken)
        req_to_blocks = cast(dict[str, list[object]], self.req_to_blocks)
        ref_cnt = self._ref_cnt
        sharing = self.enable_prefix_caching
        for i in range(len(requests)):  # (an index: no zip object per call)
            request = requests[i]
            req_to_blocks[request.request_id].append(ids[i])
            if sharing and request.block_hashes:
                ref_cnt[taken[i]] = 1

    def _slide(self, request_id: str, num_computed_tokens: int) -> int:
        """Free the request's window blocks wholly before token ``num_computed_tokens -
        sliding_window + 1`` (vLLM's ``get_num_skipped_tokens``); its first slot still held."""
        skipped = num_computed_tokens - self.sliding_window + 1
        start = self._window_start.get(request_id, 0)
        first = skipped // self.block_size if skipped > 0 else 0
        if first <= start:
            return start
        self._window_start[request_id] = first
        blocks = self._window.get(request_id)
        if blocks:
            count = min(len(blocks), (first - start) * self.window_groups)
            gone = blocks[:count]
            del blocks[:count]
            gone.reverse()
            self._plain.extend(gone)
            self._num_free += count
        return first

    def _window_need(self, request_id: str, start: int, num_slots: int) -> int:
        """Window blocks to take for the request to hold slots ``start .. num_slots - 1``."""
        held = self.window_blocks_of(request_id) // self.window_groups
        return max(0, num_slots - max(start, 0) - held) * self.window_groups

    def free(self, request: Request) -> None:
        """Drop the request's references; blocks reaching zero return to the free queue."""
        rid = request.request_id
        if (request.num_output_tokens and request.block_hashes and self.enable_prefix_caching
                and rid in self.req_to_blocks):
            # keys past the prompt (a session's answer): the block its last decodes filled
            # took no allocation, which caches; vLLM caches it in the step that fills it
            self.cache_blocks(request, request.num_computed_tokens)
        if rid in self._num_cached_blocks:
            del self._num_cached_blocks[rid]
        if self.window_groups:
            if rid in self._window_start:
                del self._window_start[rid]
            window = self._window.get(rid)
            if window is not None:
                del self._window[rid]
                window.reverse()
                self._plain.extend(window)
                self._num_free += len(window)
        blocks = self.req_to_blocks.get(rid)
        if blocks is None:
            return
        del self.req_to_blocks[rid]
        if not blocks:
            return
        if not self.shares_blocks(request):
            # nobody else references them and none carries a hash: all go to the head
            blocks.reverse()  # (the list is no one's now: reversed in place, then copied)
            self._plain.extend(blocks)
            self._num_free += len(blocks)
            return
        ref_cnt = self._ref_cnt
        block_hash = self._block_hash
        plain = self._plain
        num_freed = 0
        for block_id in reversed(blocks):
            count = ref_cnt[block_id] - 1
            if count:
                ref_cnt[block_id] = count
                continue
            del ref_cnt[block_id]
            num_freed += 1
            if block_id in block_hash:
                self._cached_free[block_id] = None  # evicted last, oldest first
            else:
                plain.append(block_id)  # reused first
        self._num_free += num_freed

    # ----------------------------------------------------------------- helpers
    def _touch(self, blocks: list[int]) -> None:
        ref_cnt = self._ref_cnt
        cached_free = self._cached_free
        for block_id in blocks:
            if block_id in cached_free:
                del cached_free[block_id]
                self._num_free -= 1
                ref_cnt[block_id] = 1
            else:
                ref_cnt[block_id] += 1

    def _take(self, n: int) -> list[int]:
        """Pop ``n`` blocks from the head of the free queue, in order, evicting any cached
        prefix they carry (a new list: the caller may keep it)."""
        plain = self._plain
        self._num_free -= n
        if n <= len(plain):
            if n <= TAKE_BY_POPS:
                stack = cast(list[object], plain)  # (popped as objects: see append_blocks)
                popped = [stack.pop() for _i in range(n)]
                return cast(list[int], popped)
            taken = plain[-n:]
            del plain[-n:]
            taken.reverse()
            return taken
        taken = plain[::-1]
        plain.clear()
        fresh = min(n - len(taken), self.num_gpu_blocks - self._next_fresh)
        taken.extend(range(self._next_fresh, self._next_fresh + fresh))
        self._next_fresh += fresh
        for _ in range(n - len(taken)):
            block_id, _ = self._cached_free.popitem(last=False)
            old_hash = self._block_hash.pop(block_id)
            if self._hash_to_block.get(old_hash) == block_id:
                del self._hash_to_block[old_hash]
            taken.append(block_id)
        return taken

    def cache_blocks(self, request: Request, num_tokens: int) -> None:
        """Register the request's newly full prompt blocks under their prefix hashes."""
        if not request.block_hashes or not self.enable_prefix_caching:
            return
        rid = request.request_id
        num_full = min(num_tokens // self.block_size, len(request.block_hashes))
        start = self._num_cached_blocks.get(rid, 0)
        if num_full <= start:
            return
        blocks = self.req_to_blocks[rid]
        for i in range(start, num_full):
            block_hash = request.block_hashes[i]
            block_id = blocks[i]
            if block_hash not in self._hash_to_block:
                self._hash_to_block[block_hash] = block_id
                self._block_hash[block_id] = block_hash
        self._num_cached_blocks[rid] = num_full

    def check_invariants(self) -> None:
        """Free + referenced blocks = usable blocks; used for tests, not on the hot path."""
        referenced = {b for blocks in self.req_to_blocks.values() for b in blocks}
        windows = [b for blocks in self._window.values() for b in blocks]
        if len(set(windows)) != len(windows) or referenced & set(windows):
            raise AssertionError("KV accounting broken: a window block is held twice")
        referenced |= set(windows)
        queued = (len(self._plain) + (self.num_gpu_blocks - self._next_fresh)
                  + len(self._cached_free))
        if referenced & (set(self._plain) | set(self._cached_free)):
            raise AssertionError("KV accounting broken: a referenced block is in the free queue")
        if queued != self._num_free or len(referenced) + self._num_free != self.num_usable_blocks:
            raise AssertionError(
                f"KV accounting broken: {len(referenced)} referenced + {self._num_free} free "
                f"({queued} queued) != {self.num_usable_blocks} usable"
            )
