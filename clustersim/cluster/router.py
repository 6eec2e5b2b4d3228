"""Routers: which instance of a pool gets a request. Pure choices over small load views."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Final

import numpy as np

from clustersim.engine.request import Request


@dataclass(slots=True)
class InstanceLoad:
    """What a router knows about one instance: the requests it sent there and not yet back."""

    name: str
    outstanding_requests: int = 0
    outstanding_tokens: int = 0
    """Prompt + output tokens of the outstanding requests (work the instance still has)."""
    cached_prefixes: OrderedDict[int, None] = field(default_factory=OrderedDict)
    """Block-hash keys of prompts routed here, most recent last (prefix_aware only)."""


_DOWN: Final = 1 << 62
"""The key of an instance that is down: above any count of outstanding requests or tokens."""


class LeastTree:
    """The instance with the least key, ties to the lowest index, kept in a tournament tree:
    a change re-plays its leaf's matches up to the root (log n), a choice reads the root.
    (A scan of every instance per request grows with the pool: 8 % of a 1,024-GPU split
    probe.)"""

    def __init__(self, keys: list[int]) -> None:
        size = 1
        while size < len(keys):
            size *= 2
        self.size = size
        self.keys = keys
        """Per instance: its outstanding tokens or requests, ``_DOWN`` while it is down."""
        self.winner = [-1] * (2 * size)
        """Per node: the instance that wins its subtree (-1: no instance under it); the
        leaves are at ``size + index``, the root at 1."""
        for i in range(len(keys)):
            self.winner[size + i] = i
        for node in range(size - 1, 0, -1):
            self.winner[node] = self._match(node)

    def _match(self, node: int) -> int:
        """The winner of the node's two children: the left one (lower indexes) on a tie."""
        left = self.winner[2 * node]
        right = self.winner[2 * node + 1]
        if right < 0:
            return left
        if left < 0:
            return right
        return right if self.keys[right] < self.keys[left] else left

    def set(self, index: int, key: int) -> None:
        self.keys[index] = key
        node = (self.size + index) >> 1
        while node:
            winner = self._match(node)
            if winner == self.winner[node] and winner != index:
                return  # the same winner at the same key: no match above changes
            self.winner[node] = winner
            node >>= 1

    def least(self) -> int:
        return self.winner[1]


class Router:
    """Picks an instance for each request; ``kind`` is one of ``RouterKind``."""

    def __init__(
        self,
        kind: str,
        loads: list[InstanceLoad],
        rng: np.random.Generator,
        max_cached_prefixes: int = 100_000,
    ) -> None:
        if kind not in _CHOOSERS:
            raise ValueError(f"unknown router {kind!r}; known: {', '.join(_CHOOSERS)}")
        self.kind = kind
        self.loads = loads
        self.rng = rng
        self.max_cached_prefixes = max_cached_prefixes
        self._next = 0
        self.down: set[int] = set()
        """Instances that failed: not chosen until they are back (``cluster.faults``)."""
        self._up = list(range(len(loads)))
        self._by_tokens = kind == "least_outstanding_tokens"
        self._tree: LeastTree | None = None
        """The least loaded instance up, for the policies that choose it (tokens for
        ``least_outstanding_tokens``, requests for the others)."""
        if kind in ("least_outstanding_requests", "least_outstanding_tokens", "prefix_aware"):
            self._tree = LeastTree([self._key(i) for i in range(len(loads))])

    def _key(self, index: int) -> int:
        if index in self.down:
            return _DOWN
        load = self.loads[index]
        return load.outstanding_tokens if self._by_tokens else load.outstanding_requests

    def choose(self, request: Request) -> int | None:
        """Index of the chosen instance among those up (None: every one is down); the
        caller then calls :meth:`sent`."""
        if not self._up:
            return None
        return _CHOOSERS[self.kind](self, request)

    def set_down(self, index: int, down: bool) -> None:
        """Take an instance out of the choice (it failed) or put it back (repaired, empty:
        what the router knew of its cache is gone)."""
        if down:
            self.down.add(index)
        else:
            self.down.discard(index)
            self.loads[index].cached_prefixes.clear()
        self._up = [i for i in range(len(self.loads)) if i not in self.down]
        if self._tree is not None:
            self._tree.set(index, self._key(index))

    def sent(self, index: int, request: Request) -> None:
        load = self.loads[index]
        load.outstanding_requests += 1
        load.outstanding_tokens += request.num_prompt_tokens + request.max_tokens
        if self._tree is not None:
            self._tree.set(index, self._key(index))
        if self.kind == "prefix_aware" and request.block_hashes:
            cache = load.cached_prefixes
            for key in request.block_hashes:
                cache[key] = None
                cache.move_to_end(key)
            while len(cache) > self.max_cached_prefixes:
                cache.popitem(last=False)

    def returned(self, index: int, request: Request) -> None:
        load = self.loads[index]
        load.outstanding_requests -= 1
        load.outstanding_tokens -= request.num_prompt_tokens + request.max_tokens
        if self._tree is not None:
            self._tree.set(index, self._key(index))

    # ----------------------------------------------------------------- policies
    # Each picks among ``self._up`` (every instance, unless some failed).
    def _round_robin(self, request: Request) -> int:
        up = self._up
        index = up[self._next % len(up)]
        self._next += 1
        return index

    def _least_loaded(self, request: Request) -> int:
        """The first instance up with the fewest outstanding requests (tokens, for
        ``least_outstanding_tokens``)."""
        assert self._tree is not None
        return self._tree.least()

    def _power_of_two(self, request: Request) -> int:
        up = self._up
        if len(up) == 1:
            return up[0]
        a, b = (up[int(i)] for i in self.rng.choice(len(up), size=2, replace=False))
        return b if self.loads[b].outstanding_requests < self.loads[a].outstanding_requests else a

    def _prefix_aware(self, request: Request) -> int:
        def matched(i: int) -> int:
            cache = self.loads[i].cached_prefixes
            n = 0
            for key in request.block_hashes:
                if key not in cache:
                    break
                n += 1
            return n

        if not request.block_hashes:
            return self._least_loaded(request)
        return min(
            self._up,
            key=lambda i: (-matched(i), self.loads[i].outstanding_requests),
        )


_CHOOSERS: Final = {
    "round_robin": Router._round_robin,
    "least_outstanding_requests": Router._least_loaded,
    "least_outstanding_tokens": Router._least_loaded,
    "power_of_two": Router._power_of_two,
    "prefix_aware": Router._prefix_aware,
}
