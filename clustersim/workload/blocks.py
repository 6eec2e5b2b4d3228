"""Prefix-cache keys of token sequences built from named segments (pure).

A generated prompt has no tokens, only segments: a system prompt, a question, a message, an
answer, each a run of tokens that is the same wherever it appears. A block's content is the
pieces of segments it covers, and its key chains the key before it, as vLLM's block hashes
do (``hash_block_tokens(parent_hash, block_tokens)``), so two sequences share a key exactly
when they share every token up to the end of that block::

    segments   | system 7 (40 tokens)         | question 12 (20) |
    blocks     | 7:0-16 | 7:16-32 | 7:32-40 12:0-8 | 12:8-20 ...      (block_size 16)
    keys       k0 = h(0, b0), k1 = h(k0, b1), k2 = h(k1, b2); the last 12 tokens fill no block

Only full blocks get keys, as only full blocks are cached.
"""

from __future__ import annotations


class BlockChain:
    """The chained keys of a growing token sequence's full blocks."""

    __slots__ = ("block_size", "keys", "num_tokens", "_pieces", "_fill")

    def __init__(self, block_size: int) -> None:
        if block_size <= 0:
            raise ValueError(f"block_size must be positive, got {block_size}")
        self.block_size = block_size
        self.keys: list[int] = []
        """Key of each full block, first block first."""
        self.num_tokens = 0
        self._pieces: list[tuple[int, int, int]] = []
        """(segment, first token, tokens) of the block being filled."""
        self._fill = 0
        """Tokens in the block being filled."""

    def extend(self, segment: int, num_tokens: int) -> BlockChain:
        """Append ``num_tokens`` tokens of ``segment`` (from its first token on); returns self."""
        if num_tokens < 0:
            raise ValueError(f"a segment has at least 0 tokens, got {num_tokens}")
        size = self.block_size
        keys, pieces = self.keys, self._pieces
        offset = 0
        while offset < num_tokens:
            take = min(size - self._fill, num_tokens - offset)
            pieces.append((segment, offset, take))
            offset += take
            self._fill += take
            if self._fill == size:
                keys.append(hash((keys[-1] if keys else 0, tuple(pieces))))
                pieces.clear()
                self._fill = 0
        self.num_tokens += num_tokens
        return self

    def copy(self) -> BlockChain:
        """An independent chain at the same point (the keys list copied, not shared)."""
        chain = BlockChain(self.block_size)
        chain.keys = list(self.keys)
        chain.num_tokens = self.num_tokens
        chain._pieces = list(self._pieces)
        chain._fill = self._fill
        return chain

    def prefix_keys(self, num_tokens: int) -> tuple[int, ...]:
        """The keys of the full blocks within the first ``num_tokens`` tokens."""
        if num_tokens > self.num_tokens:
            raise ValueError(f"{num_tokens} tokens asked of a chain of {self.num_tokens}")
        return tuple(self.keys[: num_tokens // self.block_size])
