"""Turn a scenario's ``workload:`` into requests, reproducibly from one random generator."""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from typing import Any

import numpy as np
import simpy

from clustersim.engine.request import Request
from clustersim.workload.spec import (
    ExplicitWorkload,
    FixedLength,
    LengthClass,
    PoissonWorkload,
    UniformLength,
    Workload,
)


def chain_block_hashes(hashes: Sequence[int]) -> tuple[int, ...]:
    """Make block i's key depend on blocks 0..i, as vLLM's chained block hashes do.

    Python's hash of a tuple of ints is stable across runs (no hash randomisation for ints).
    """
    keys = []
    key = 0
    for block_hash in hashes:
        key = hash((key, block_hash))
        keys.append(key)
    return tuple(keys)


def draw_lengths(dist: FixedLength | UniformLength, n: int, rng: np.random.Generator) -> np.ndarray:
    if isinstance(dist, FixedLength):
        return np.full(n, dist.value, dtype=np.int64)
    return rng.integers(dist.low, dist.high, size=n, endpoint=True)


def _explicit(workload: ExplicitWorkload) -> list[Request]:
    requests = [
        Request(
            request_id=item.id,
            arrival_s=item.arrival_s,
            num_prompt_tokens=item.prompt_tokens,
            max_tokens=item.output_tokens,
            priority=item.priority,
            block_hashes=chain_block_hashes(item.block_hashes or ()),
        )
        for item in workload.requests
    ]
    # Stable sort: equal arrival times keep the file's order.
    requests.sort(key=lambda r: r.arrival_s)
    return requests


def _mixture_lengths(
    classes: list[LengthClass], n: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    weights = np.array([c.weight for c in classes], dtype=float)
    picks = rng.choice(len(classes), size=n, p=weights / weights.sum())
    prompts = np.empty(n, dtype=np.int64)
    outputs = np.empty(n, dtype=np.int64)
    for index, cls in enumerate(classes):
        mask = picks == index
        count = int(mask.sum())
        prompts[mask] = draw_lengths(cls.prompt_tokens, count, rng)
        outputs[mask] = draw_lengths(cls.output_tokens, count, rng)
    return prompts, outputs


def _poisson(workload: PoissonWorkload, rng: np.random.Generator) -> list[Request]:
    n = workload.num_requests
    gaps = rng.exponential(1.0 / workload.rate_per_s, size=n)
    arrivals = workload.start_s + np.cumsum(gaps)
    if workload.classes is not None:
        prompts, outputs = _mixture_lengths(workload.classes, n, rng)
    else:
        assert workload.prompt_tokens is not None and workload.output_tokens is not None
        prompts = draw_lengths(workload.prompt_tokens, n, rng)
        outputs = draw_lengths(workload.output_tokens, n, rng)
    return [
        Request(
            request_id=str(i),
            arrival_s=float(arrivals[i]),
            num_prompt_tokens=int(prompts[i]),
            max_tokens=int(outputs[i]),
        )
        for i in range(n)
    ]


Submit = Callable[[Request], None]


class OpenLoop:
    """Requests with fixed arrival times, submitted when their time comes.

    Every workload source offers the same three things to the simulator: ``requests`` (all the
    requests it will ever submit, for accounting), ``run(env, submit)`` (a SimPy process that
    submits them) and ``on_done(request)`` (called when a request finishes or is rejected,
    which a closed-loop client uses to send its next one).
    """

    def __init__(self, requests: list[Request]) -> None:
        self.requests = requests

    def run(self, env: simpy.Environment, submit: Submit) -> Generator[Any, Any, None]:
        for request in self.requests:
            delay = request.arrival_s - env.now
            if delay > 0:
                yield env.timeout(delay)
            submit(request)

    def on_done(self, request: Request) -> None:
        """Open-loop clients do not wait for answers."""


def build_requests(workload: Workload, rng: np.random.Generator) -> list[Request]:
    """The scenario's requests, sorted by arrival time (open-loop workloads)."""
    if isinstance(workload, ExplicitWorkload):
        return _explicit(workload)
    return _poisson(workload, rng)


def build_workload(workload: Workload, rng: np.random.Generator) -> OpenLoop:
    """The request source the simulator drives for this ``workload:`` section."""
    return OpenLoop(build_requests(workload, rng))
