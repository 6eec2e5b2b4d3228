"""Routers: which instance of a pool gets a request. Pure choices over small load views."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

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

    def choose(self, request: Request) -> int:
        """Index of the chosen instance; the caller then calls :meth:`sent`."""
        return _CHOOSERS[self.kind](self, request)

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
    def _round_robin(self, request: Request) -> int:
        index = self._next % len(self.loads)
        self._next += 1
        return index

    def _least_requests(self, request: Request) -> int:
        counts = [load.outstanding_requests for load in self.loads]
        return counts.index(min(counts))  # the first of the least loaded

    def _least_tokens(self, request: Request) -> int:
        tokens = [load.outstanding_tokens for load in self.loads]
        return tokens.index(min(tokens))

    def _power_of_two(self, request: Request) -> int:
        if len(self.loads) == 1:
            return 0
        a, b = (int(i) for i in self.rng.choice(len(self.loads), size=2, replace=False))
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
            range(len(self.loads)),
            key=lambda i: (-matched(i), self.loads[i].outstanding_requests),
        )


_CHOOSERS = {
    "round_robin": Router._round_robin,
    "least_outstanding_requests": Router._least_requests,
    "least_outstanding_tokens": Router._least_tokens,
    "power_of_two": Router._power_of_two,
    "prefix_aware": Router._prefix_aware,
}
