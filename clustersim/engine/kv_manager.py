"""Paged KV blocks with prefix caching, following vLLM V1's ``KVCacheManager`` and ``BlockPool``.

Block 0 is the null block and is never handed out, so ``num_gpu_blocks - 1`` blocks are usable.
The free queue holds blocks with no reference; cached (hashed) blocks stay in it and can still be
hit by a prefix lookup until they are popped for reuse::

    head (reused first)                                            tail (evicted last)
    [ unhashed freed blocks ... | never-used blocks ... | hashed blocks in LRU order ]

A request's blocks are freed in reverse order so its tail blocks are evicted first.
"""

from __future__ import annotations

from collections import OrderedDict

from clustersim.engine.request import Request


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class KVCacheManager:
    """Block accounting for one engine instance (one KV-cache group, full attention)."""

    def __init__(
        self,
        num_gpu_blocks: int,
        block_size: int,
        max_model_len: int,
        enable_prefix_caching: bool = True,
    ) -> None:
        if num_gpu_blocks < 2:
            raise ValueError(f"num_gpu_blocks must be >= 2 (block 0 is the null block), "
                             f"got {num_gpu_blocks}")
        self.num_gpu_blocks = num_gpu_blocks
        self.block_size = block_size
        self.max_model_len = max_model_len
        self.enable_prefix_caching = enable_prefix_caching
        self.num_usable_blocks = num_gpu_blocks - 1
        self._ref_cnt = [0] * num_gpu_blocks
        self._block_hash: list[int | None] = [None] * num_gpu_blocks
        # Insertion-ordered set of free block ids; OrderedDict gives O(1) pop/append at both ends
        # and O(1) removal when a cached free block is hit.
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(range(1, num_gpu_blocks))
        self._hash_to_block: dict[int, int] = {}
        self.req_to_blocks: dict[str, list[int]] = {}
        self._num_cached_blocks: dict[str, int] = {}

    # ----------------------------------------------------------------- queries
    @property
    def num_free_blocks(self) -> int:
        """Free blocks, including cached ones no request references (vLLM's ``free``)."""
        return len(self._free)

    @property
    def num_used_blocks(self) -> int:
        """Blocks referenced by at least one request."""
        return self.num_usable_blocks - len(self._free)

    def num_blocks_of(self, request_id: str) -> int:
        return len(self.req_to_blocks.get(request_id, ()))

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
    ) -> bool:
        """Give ``request`` the blocks for ``num_new_tokens`` more tokens; False if they don't fit.

        Mirrors vLLM's ``allocate_slots`` (v0.33): comparisons are strict, so an exact fit
        succeeds; evictable prefix-hit blocks count against the free pool because touching them
        takes them out of the free queue.
        """
        bs = self.block_size
        hit_blocks = new_computed_blocks or []
        held = self.req_to_blocks.get(request.request_id)
        num_held = len(held) if held is not None else 0
        num_evictable_hits = 0
        if hit_blocks:
            ref_cnt = self._ref_cnt
            num_evictable_hits = sum(1 for b in hit_blocks if ref_cnt[b] == 0)
        num_free = len(self._free)

        if full_sequence_must_fit:
            full = cdiv(min(request.num_tokens, self.max_model_len), bs)
            need_full = max(full - num_held - len(hit_blocks), 0) + num_evictable_hits
            if need_full + watermark_blocks > num_free:
                return False

        total = (
            request.num_computed_tokens
            + num_new_computed_tokens
            + num_external_tokens
            + num_new_tokens
        )
        num_required = cdiv(min(total, self.max_model_len), bs)
        num_new_blocks = max(num_required - num_held - len(hit_blocks), 0)
        if num_new_blocks + num_evictable_hits + watermark_blocks > num_free - reserved_blocks:
            return False

        if held is None:
            held = self.req_to_blocks[request.request_id] = []
        if hit_blocks:
            self._touch(hit_blocks)
            held.extend(hit_blocks)
            self._num_cached_blocks[request.request_id] = len(held)
        for _ in range(num_new_blocks):
            held.append(self._pop_free())
        if not delay_cache_blocks:
            self.cache_blocks(request, min(total, request.num_tokens))
        return True

    def free(self, request: Request) -> None:
        """Drop the request's references; blocks reaching zero return to the free queue."""
        blocks = self.req_to_blocks.pop(request.request_id, None)
        self._num_cached_blocks.pop(request.request_id, None)
        if not blocks:
            return
        ref_cnt = self._ref_cnt
        free = self._free
        for block_id in reversed(blocks):
            ref_cnt[block_id] -= 1
            if ref_cnt[block_id] == 0:
                free[block_id] = None
                if self._block_hash[block_id] is None:
                    free.move_to_end(block_id, last=False)  # reuse plain blocks first

    # ----------------------------------------------------------------- helpers
    def _touch(self, blocks: list[int]) -> None:
        ref_cnt = self._ref_cnt
        for block_id in blocks:
            if ref_cnt[block_id] == 0:
                del self._free[block_id]
            ref_cnt[block_id] += 1

    def _pop_free(self) -> int:
        block_id, _ = self._free.popitem(last=False)
        old_hash = self._block_hash[block_id]
        if old_hash is not None:  # evict the cached prefix this block carried
            if self._hash_to_block.get(old_hash) == block_id:
                del self._hash_to_block[old_hash]
            self._block_hash[block_id] = None
        self._ref_cnt[block_id] = 1
        return block_id

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
        referenced = sum(1 for b in range(1, self.num_gpu_blocks) if self._ref_cnt[b] > 0)
        if referenced + len(self._free) != self.num_usable_blocks:
            raise AssertionError(
                f"KV accounting broken: {referenced} referenced + {len(self._free)} free "
                f"!= {self.num_usable_blocks} usable"
            )
