"""The block pool: null block, incremental allocation, prefix hits, eviction order."""

from __future__ import annotations

from clustersim.engine.kv_manager import KVCacheManager
from clustersim.engine.request import Request
from clustersim.workload import chain_block_hashes


def make_request(rid: str = "r", prompt: int = 32, hashes: tuple[int, ...] = (), **kw) -> Request:
    return Request(rid, 0.0, prompt, kw.pop("max_tokens", 4),
                   block_hashes=chain_block_hashes(hashes), **kw)


def test_block_zero_is_never_handed_out_and_blocks_grow_incrementally():
    kv = KVCacheManager(num_gpu_blocks=4, block_size=16, max_model_len=64)
    r = make_request(prompt=40)
    assert kv.num_free_blocks == 3
    assert kv.allocate_slots(r, 16)          # first chunk: one block
    assert kv.req_to_blocks["r"] == [1]
    r.num_computed_tokens = 16
    assert kv.allocate_slots(r, 24)          # 40 tokens -> 3 blocks
    assert kv.req_to_blocks["r"] == [1, 2, 3] and kv.num_free_blocks == 0
    r.num_computed_tokens = 40
    assert kv.allocate_slots(r, 8)           # still inside block 3: no new block
    assert not kv.allocate_slots(r, 9)       # would need a 4th block
    kv.check_invariants()


def test_slots_are_capped_at_max_model_len():
    kv = KVCacheManager(num_gpu_blocks=4, block_size=16, max_model_len=48)
    r = make_request(prompt=40)
    r.num_computed_tokens = 0
    assert kv.allocate_slots(r, 60)  # only min(60, 48) tokens need slots: 3 blocks


def test_exact_fit_succeeds_and_full_isl_gate_counts_the_whole_prompt():
    kv = KVCacheManager(num_gpu_blocks=4, block_size=16, max_model_len=64)
    big = make_request("big", prompt=48)
    assert kv.allocate_slots(big, 16, full_sequence_must_fit=True)  # needs 3 of 3 free: exact
    assert kv.num_free_blocks == 2  # but only the first chunk's block is taken
    late = make_request("late", prompt=40)
    # its first 4-token chunk needs 1 block, yet the whole 40-token prompt needs 3 > 2 free
    assert not kv.allocate_slots(late, 4, full_sequence_must_fit=True)
    assert kv.allocate_slots(late, 4)
    kv.check_invariants()


def test_watermark_blocks_are_kept_free():
    kv = KVCacheManager(num_gpu_blocks=5, block_size=16, max_model_len=64)
    r = make_request(prompt=48)
    assert not kv.allocate_slots(r, 48, watermark_blocks=2)  # 3 + 2 > 4 free
    assert kv.allocate_slots(r, 48, watermark_blocks=1)      # 3 + 1 = 4 fits exactly


def test_g8_prefix_hits_are_whole_blocks_and_leave_one_token_to_compute():
    kv = KVCacheManager(num_gpu_blocks=10, block_size=16, max_model_len=64)
    first = make_request("first", prompt=40, hashes=(7, 8))
    assert kv.allocate_slots(first, 40)
    first.num_computed_tokens = 40
    kv.free(first)
    # (a) prompt 40 whose first 32 tokens are cached: hit 32, one new block for 8 tokens
    a = make_request("a", prompt=40, hashes=(7, 8))
    hits, hit_tokens = kv.get_computed_blocks(a)
    assert hit_tokens == 32 and len(hits) == 2
    # (b) prompt 32 fully cached: at most floor(31/16) = 1 block is a hit
    b = make_request("b", prompt=32, hashes=(7, 8))
    assert kv.get_computed_blocks(b)[1] == 16
    # a different first block breaks the chain even if the second hash matches
    c = make_request("c", prompt=40, hashes=(9, 8))
    assert kv.get_computed_blocks(c)[1] == 0


def test_g8c_evictable_hit_blocks_count_against_free():
    kv = KVCacheManager(num_gpu_blocks=4, block_size=16, max_model_len=64)
    first = make_request("first", prompt=32, hashes=(1, 2))
    assert kv.allocate_slots(first, 32)
    kv.free(first)                       # 2 cached blocks with no reference, all 3 free
    assert kv.num_free_blocks == 3
    again = make_request("again", prompt=48, hashes=(1, 2))
    hits, hit_tokens = kv.get_computed_blocks(again)
    assert hit_tokens == 32
    # needs 1 new block + 2 evictable hits = 3 <= 3 free: fits exactly; one more block would not
    assert kv.allocate_slots(again, 16, new_computed_blocks=hits, num_new_computed_tokens=32)
    assert kv.num_free_blocks == 0 and kv.num_used_blocks == 3
    kv.check_invariants()


def test_freed_plain_blocks_are_reused_first_and_cached_ones_evicted_last():
    kv = KVCacheManager(num_gpu_blocks=6, block_size=16, max_model_len=64)
    cached = make_request("cached", prompt=32, hashes=(1, 2))
    plain = make_request("plain", prompt=32)
    assert kv.allocate_slots(cached, 32) and kv.allocate_slots(plain, 32)
    kv.free(cached)
    kv.free(plain)
    newcomer = make_request("new", prompt=48)
    assert kv.allocate_slots(newcomer, 48)
    # plain blocks (3, 4) come back first, then the never-used block 5; cached blocks survive
    assert kv.req_to_blocks["new"] == [3, 4, 5]
    assert kv.get_computed_blocks(make_request("probe", 40, hashes=(1, 2)))[1] == 32
    kv.check_invariants()
