"""Trace replay: a window of a trace, sped up or slowed down, as requests (pure functions).

Mooncake-style prefix-block ids name 512-token blocks; the engine's prefix cache keys
``block_size``-token blocks (16 by default). Each id is expanded into 512 / block_size
sub-block keys derived from (id, sub-index), and the keys are then chained as vLLM chains
block hashes, so two prompts share a cached engine block exactly when they share every id up
to and including the one that covers it::

    hash_ids   |        17         |        42         | 99 (partial) |
    sub-keys   | (17,0) ... (17,31)| (42,0) ... (42,31)| (99,0) ...   |  one per 16 tokens
    keys kept  only the prompt's full 16-token blocks (prompt_tokens // block_size)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from clustersim.engine.request import Request
from clustersim.errors import ConfigError
from clustersim.workload.spec import ReplayWorkload
from clustersim.workload.traces import Trace


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


def expand_block_ids(
    ids: Sequence[int], num_prompt_tokens: int, id_block_tokens: int, block_size: int,
    cache: dict[int, tuple[int, ...]] | None = None,
) -> tuple[int, ...]:
    """Chained engine-block keys of a prompt whose ``id_block_tokens``-token blocks have ``ids``."""
    per_id = id_block_tokens // block_size
    cache = {} if cache is None else cache
    keys: list[int] = []
    for block_id in ids:
        sub = cache.get(block_id)
        if sub is None:
            sub = cache[block_id] = tuple(hash((block_id, j)) for j in range(per_id))
        keys.extend(sub)
    return chain_block_hashes(keys[: num_prompt_tokens // block_size])


def spread_ties(times: np.ndarray) -> np.ndarray:
    """Requests sharing a timestamp, spread evenly over the gap to the next timestamp.

    The last group spreads over the gap before it (it has no next one).
    """
    distinct, first, counts = np.unique(times, return_index=True, return_counts=True)
    if len(distinct) < 2:
        return times.copy()
    gaps = np.diff(distinct)
    gaps = np.append(gaps, gaps[-1])
    position = np.arange(len(times)) - np.repeat(first, counts)
    return times + position / np.repeat(counts, counts) * np.repeat(gaps, counts)


class ReplayRows:
    """The requests of a replay window, built one at a time: request ``k`` is the window's
    ``k``-th row (arrival times from 0, not decreasing), its prefix keys expanded when it is
    built, sharing the expansions of the block ids seen before."""

    def __init__(self, spec: ReplayWorkload, trace: Trace, block_size: int = 16) -> None:
        if trace.arrival_s is None:
            raise ConfigError("workload.trace", f"{trace.source} has no arrival times (a "
                              "length table): use it as lengths: {kind: empirical} with an "
                              "arrival process")
        times = spread_ties(trace.arrival_s) if spec.spread_ties else trace.arrival_s
        end = np.inf if spec.window_end_s is None else spec.window_end_s
        rows = np.flatnonzero((times >= spec.window_start_s) & (times < end))
        rows = rows[: spec.max_num_requests]
        if rows.size == 0:
            raise ConfigError("workload.window_start_s", f"no request of {trace.source} arrives "
                              f"in [{spec.window_start_s}, {end}) s; it spans 0 to "
                              f"{times[-1]:.1f} s")
        if trace.hash_ids is not None and trace.hash_block_tokens % block_size:
            raise ConfigError("engine.block_size", f"{block_size} does not divide the trace's "
                              f"{trace.hash_block_tokens}-token prefix blocks")
        self._trace, self._block_size = trace, block_size
        # plain Python numbers: indexing numpy arrays one element at a time costs more than
        # building the requests
        self._rows: list[int] = rows.tolist()
        self._arrivals: list[float] = (
            (times[rows] - spec.window_start_s) / spec.rate_multiplier).tolist()
        self._prompts: list[int] = trace.prompt_tokens[rows].tolist()
        self._outputs: list[int] = trace.output_tokens[rows].tolist()
        self._cache: dict[int, tuple[int, ...]] = {}

    def __len__(self) -> int:
        return len(self._rows)

    @property
    def last_arrival_s(self) -> float:
        return self._arrivals[-1]

    def __call__(self, k: int) -> Request:
        trace, row = self._trace, self._rows[k]
        hashes: tuple[int, ...] = ()
        if trace.hash_ids is not None:
            hashes = expand_block_ids(trace.hash_ids[row], self._prompts[k],
                                      trace.hash_block_tokens, self._block_size, self._cache)
        request_id = trace.request_ids[row] if trace.request_ids is not None else str(row)
        # (positional: a compiled class parses keyword arguments by name)
        return Request(request_id, self._arrivals[k], self._prompts[k], self._outputs[k], 0,
                       hashes)


def replay_requests(spec: ReplayWorkload, trace: Trace, block_size: int = 16) -> list[Request]:
    """The requests of ``spec``'s window of ``trace``, arrival times from 0."""
    rows = ReplayRows(spec, trace, block_size)
    return [rows(k) for k in range(len(rows))]
