"""A CPU tier below HBM: vLLM's KV offloading connector (``--kv-offloading-size``).

The engine keeps a second prefix cache in host memory, keyed by the same block hashes as the
HBM one (``engine.kv_manager``), and a host link to copy blocks over::

    HBM prefix cache (kv_manager)            CPU tier (CpuKVTier)             host link (HostLink)
    a request's prefix hits HBM ..........> the blocks after it hit here? ..> H2D: load them
    every full block a step computes .....> stored unless held already ....> D2H: copy it out

What is stored when, what is evicted, and when a request loads follow vLLM's
``OffloadingConnector`` with its default CPU backend and LRU policy (docs.vllm.ai v0.32.0,
features/kv_offloading_usage and api/vllm/v1/kv_offload/cpu/manager; source read from the
indexed vllm-project/vllm files distributed/kv_transfer/kv_connector/v1/offloading/
scheduler.py @ 0072b0b7 and v1/kv_offload/cpu/manager.py @ 0358cbba):

- Stores: as each step is scheduled, every block of a scheduled request that the step makes
  full is stored, unless the tier holds it already (``OffloadingConnectorScheduler.
  _get_reqs_to_store``, ``CPUOffloadingManager.prepare_store``). The copy runs after the
  step computed the block, asynchronously, beside later steps; the block can be read only
  once its copy ended (``complete_store``). A request's blocks are stored in order, once
  each: a preempted request does not store again what it stored before.
- Room: a store takes free blocks, then evicts the least recently used blocks that are
  stored and that no load is reading, never one of its own; if those are too few, the store
  is skipped and tried again at the request's next step.
- Lookups: a waiting request's first schedule (nothing computed yet: new, or preempted)
  asks the tier after the HBM prefix cache. Every block of the request is touched (its
  first block the most recently used), then the consecutive blocks the tier can read from
  the first block HBM missed are its hit. A hit of at least one block is loaded: the request
  takes its HBM blocks, waits for the load without a seat or a token of the step budget
  (vLLM's ``WAITING_FOR_REMOTE_KVS``) while the other requests keep stepping, and is
  admitted at the first schedule after the load ended, with its last prompt token recomputed
  if the load covered the whole prompt. A hit on a block another request is still loading
  waits a step (vLLM delays it: that load will put the block in HBM).

The host link has one queue per direction (PCIe is full duplex): loads host-to-device,
stores device-to-host, each copy starting when the copies before it in its direction have
ended and taking bytes / rate. The rate is the engine's GPUs times one GPU's PCIe bandwidth:
each GPU copies its own share of every block (its KV heads, or its stage's layers) over its
own link.

Simplifications: blocks without a prefix hash (an answer's tokens, unless the workload gives
them keys, as sessions do) are neither cached in HBM here nor stored; vLLM stores those too,
which takes tier room and link time this model does not spend. A finished request's blocks
are freed at once, where vLLM keeps them until their stores end (microseconds to
milliseconds at PCIe rates). The copies take no GPU time (vLLM copies with DMA engines) and
no HBM bandwidth from the steps.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Final

PENDING_STORE: Final = -1
"""A block's state while its store is copying: held, not yet readable, not evictable."""


class CpuKVTier:
    """The blocks one engine holds in host memory, least recently used first (pure state).

    Each block hash maps to its state: ``PENDING_STORE``, 0 (readable, evictable) or the
    number of loads reading it (readable, not evictable)."""

    def __init__(self, num_blocks: int) -> None:
        if num_blocks < 1:
            raise ValueError(f"a CPU tier holds at least one block, got {num_blocks}")
        self.num_blocks = num_blocks
        self._blocks: OrderedDict[int, int] = OrderedDict()
        self._num_evictable = 0
        """Blocks in state 0."""
        self.num_evicted = 0

    def __len__(self) -> int:
        return len(self._blocks)

    def __contains__(self, block_hash: int) -> bool:
        return block_hash in self._blocks

    def is_readable(self, block_hash: int) -> bool:
        state = self._blocks.get(block_hash)
        return state is not None and state >= 0

    def touch(self, hashes: tuple[int, ...], end: int) -> None:
        """``hashes[:end]`` were used now: each held one becomes the most recently used, the
        first of them most of all (vLLM's ``LRUCachePolicy.touch``)."""
        blocks = self._blocks
        for i in range(end - 1, -1, -1):
            block_hash = hashes[i]
            if block_hash in blocks:
                blocks.move_to_end(block_hash)

    def lookup(self, hashes: tuple[int, ...], start: int, end: int) -> tuple[int, bool]:
        """How many of ``hashes[start:end]``, from the first, the tier can read; and whether
        one of those is being loaded by another request."""
        blocks = self._blocks
        hits = 0
        busy = False
        for i in range(start, end):
            state = blocks.get(hashes[i])
            if state is None or state < 0:
                break
            if state > 0:
                busy = True
            hits += 1
        return hits, busy

    def prepare_store(self, hashes: tuple[int, ...], start: int, end: int) -> list[int] | None:
        """Make room for ``hashes[start:end]`` and hold the ones not held yet as pending;
        those are returned, to copy (None: too few blocks can be evicted; nothing changed)."""
        blocks = self._blocks
        new: list[int] = []
        for i in range(start, end):
            block_hash = hashes[i]
            if block_hash not in blocks:
                new.append(block_hash)
        if not new:
            return new
        shortfall = len(new) - (self.num_blocks - len(blocks))
        if shortfall > 0:
            if shortfall > self._num_evictable:
                return None
            protected = set(hashes[start:end])
            victims: list[int] = []
            for block_hash, state in blocks.items():
                if state == 0 and block_hash not in protected:
                    victims.append(block_hash)
                    if len(victims) == shortfall:
                        break
            if len(victims) < shortfall:
                return None
            for block_hash in victims:
                del blocks[block_hash]
            self._num_evictable -= shortfall
            self.num_evicted += shortfall
        for block_hash in new:
            blocks[block_hash] = PENDING_STORE
        return new

    def complete_store(self, hashes: list[int]) -> None:
        """Their copies ended: the blocks can be read (and evicted)."""
        blocks = self._blocks
        for block_hash in hashes:
            if blocks.get(block_hash) == PENDING_STORE:
                blocks[block_hash] = 0
                self._num_evictable += 1

    def prepare_load(self, hashes: tuple[int, ...]) -> None:
        """A load reads these blocks: they stay until it ends."""
        blocks = self._blocks
        for block_hash in hashes:
            state = blocks[block_hash]
            if state == 0:
                self._num_evictable -= 1
            blocks[block_hash] = state + 1

    def complete_load(self, hashes: tuple[int, ...]) -> None:
        """The load of these blocks ended (or was dropped)."""
        blocks = self._blocks
        for block_hash in hashes:
            state = blocks[block_hash] - 1
            blocks[block_hash] = state
            if state == 0:
                self._num_evictable += 1

    def check_invariants(self) -> None:
        """Held blocks within the size, the evictable count right; for tests."""
        states = list(self._blocks.values())
        if len(states) > self.num_blocks:
            raise AssertionError(f"CPU tier holds {len(states)} of {self.num_blocks} blocks")
        if sum(1 for s in states if s == 0) != self._num_evictable:
            raise AssertionError("CPU tier's evictable count is off")


class HostLink:
    """One engine's copies between its GPUs and host memory: a queue per direction, each
    copy ``bytes / bytes_per_s`` long, started when the copies before it ended (pure: times
    are passed in)."""

    def __init__(self, bytes_per_s: float, bytes_per_block: int) -> None:
        if not bytes_per_s > 0.0 or bytes_per_block < 1:
            raise ValueError("a host link needs a positive rate and block size")
        self.bytes_per_s = bytes_per_s
        self.bytes_per_block = bytes_per_block
        self._loads_free_s = 0.0
        self._stores_free_s = 0.0
        self.loaded_bytes = 0
        self.stored_bytes = 0
        self.num_loads = 0
        self.num_stores = 0
        self.load_busy_s = 0.0
        self.store_busy_s = 0.0
        self.load_wait_s = 0.0
        """Summed time loads waited behind earlier loads."""

    def copy_s(self, num_blocks: int) -> float:
        """Seconds one copy of ``num_blocks`` blocks takes on an idle link."""
        return num_blocks * self.bytes_per_block / self.bytes_per_s

    def load(self, now_s: float, num_blocks: int) -> float:
        """A load of ``num_blocks`` blocks is issued now; when it ends."""
        start = self._loads_free_s if self._loads_free_s > now_s else now_s
        duration = self.copy_s(num_blocks)
        end = start + duration
        self._loads_free_s = end
        self.loaded_bytes += num_blocks * self.bytes_per_block
        self.num_loads += 1
        self.load_busy_s += duration
        self.load_wait_s += start - now_s
        return end

    def store(self, now_s: float, num_blocks: int) -> float:
        """A store of ``num_blocks`` blocks is issued now; when it ends."""
        start = self._stores_free_s if self._stores_free_s > now_s else now_s
        duration = self.copy_s(num_blocks)
        end = start + duration
        self._stores_free_s = end
        self.stored_bytes += num_blocks * self.bytes_per_block
        self.num_stores += 1
        self.store_busy_s += duration
        return end
