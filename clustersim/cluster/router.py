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

    def sent(self, index: int, request: Request) -> None:
        load = self.loads[index]
        load.outstanding_requests += 1
        load.outstanding_tokens += request.num_prompt_tokens + request.max_tokens
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

    # ----------------------------------------------------------------- policies
    # Each picks among ``self._up`` (every instance, unless some failed).
    def _round_robin(self, request: Request) -> int:
        up = self._up
        index = up[self._next % len(up)]
        self._next += 1
        return index

    def _least_requests(self, request: Request) -> int:
        return self._least(by_tokens=False)

    def _least_tokens(self, request: Request) -> int:
        return self._least(by_tokens=True)

    def _least(self, by_tokens: bool) -> int:
        """The first instance up with the fewest outstanding tokens (or requests): a compiled
        loop, not ``min`` calling a key function per instance."""
        loads = self.loads
        best, least = -1, 0
        for i in self._up:
            load = loads[i]
            n = load.outstanding_tokens if by_tokens else load.outstanding_requests
            if best < 0 or n < least:
                best, least = i, n
        return best

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
            return self._least_requests(request)
        return min(
            self._up,
            key=lambda i: (-matched(i), self.loads[i].outstanding_requests),
        )


_CHOOSERS: Final = {
    "round_robin": Router._round_robin,
    "least_outstanding_requests": Router._least_requests,
    "least_outstanding_tokens": Router._least_tokens,
    "power_of_two": Router._power_of_two,
    "prefix_aware": Router._prefix_aware,
}
