"""Speculative decoding: the acceptance draws, the CUDA-graph sizes and the draft head's price.

vLLM V1 (``--speculative-config '{"method": "eagle", "num_speculative_tokens": 3, ...}'``,
vllm/config/speculative.py) drafts ``k`` tokens per decoding request after each step; the
next step schedules the request's ``1 + k`` tokens (``num_tokens_with_spec``, spec §1 and
§3.5), the target model verifies them in one forward pass, and the rejection sampler keeps the
``n`` drafts up to the first rejected one plus one token of its own (a bonus token when all
are accepted): ``n + 1`` new tokens, streamed together at the end of that step.

clustersim does not see tokens, so ``n`` is drawn: per request and step, from the scenario's
acceptance model, on a stream of its own (:data:`SPEC_DECODE_RNG_STREAM`). The scheduler
(``clustersim.engine.scheduler``) does the rest: the drafts in the budget, the KV lookahead,
``num_computed_tokens`` stepping back over the rejected drafts. The cost model prices the
verification rows and the draft passes (``StepPrices.spec_step_time_s``).
"""

from __future__ import annotations

import zlib
from bisect import bisect_right
from dataclasses import replace
from typing import Final

import numpy as np

from clustersim.cost.memory import cudagraph_capture_sizes
from clustersim.cost.prices import StepPrices
from clustersim.engine.config import SchedulerConfig, SpecDecodeConfig

SPEC_DECODE_RNG_STREAM: Final = 4
"""Acceptance draws come from ``default_rng([seed, 4, crc32(engine name)])``: one stream per
engine (routers use stream 1, faults 2, the API server 3), so the traffic, the routing and
every other engine's draws are the same whatever one engine accepts."""
DRAWS_PER_REFILL: Final = 1024
"""Uniforms drawn from the stream at a time (the same sequence whatever the chunk)."""


def seeded(config: SchedulerConfig, seed: int, engine: str) -> SchedulerConfig:
    """``config`` with its acceptance stream set for the engine named ``engine`` (unchanged
    without speculative decoding)."""
    spec = config.speculative
    if spec is None:
        return config
    entropy = (seed, SPEC_DECODE_RNG_STREAM, zlib.crc32(engine.encode()))
    return replace(config, speculative=replace(spec, seed=entropy))


class AcceptanceSampler:
    """How many of a request's drafts the target accepts, drawn from the acceptance model."""

    def __init__(self, config: SpecDecodeConfig) -> None:
        self._rng = np.random.default_rng(list(config.seed or (0, SPEC_DECODE_RNG_STREAM)))
        self._cdf: list[float] = list(config.acceptance_cdf)
        self._uniforms: list[float] = []
        self._next = 0

    def draw(self, num_drafts: int) -> int:
        """Accepted drafts of ``num_drafts`` (at most ``k``): the model's draw over ``0 .. k``,
        capped at ``num_drafts`` (a step that verified fewer drafts, its budget short)."""
        if self._next >= len(self._uniforms):
            self._uniforms = self._rng.random(DRAWS_PER_REFILL).tolist()
            self._next = 0
        u = self._uniforms[self._next]
        self._next += 1
        accepted = bisect_right(self._cdf, u)  # the first j with P(n <= j) > u
        return accepted if accepted < num_drafts else num_drafts


def capture_sizes(max_num_seqs: int, max_num_batched_tokens: int,
                  uniform_decode_query_len: int) -> list[int]:
    """vLLM's CUDA-graph capture sizes with drafts: the largest grows to
    ``min(2 x max_num_seqs x (1 + k), 512, max_num_batched_tokens)`` (vllm/config/vllm.py,
    ``VllmConfig._set_cudagraph_sizes``) and every size is rounded up to a multiple of
    ``1 + k``, so that a batch of verifying requests fills a graph
    (vllm/config/compilation.py, ``adjust_cudagraph_sizes_for_spec_decode``)."""
    query = uniform_decode_query_len
    sizes = cudagraph_capture_sizes(max_num_seqs * query, max_num_batched_tokens)
    if query <= 1 or not sizes:
        return sizes
    largest = sizes[-1] // query * query
    rounded = sorted({-(-size // query) * query for size in sizes})
    kept = [size for size in rounded if size <= largest]
    return kept or ([query] if query <= sizes[-1] else [])


def configure_prices(prices: StepPrices, config: SchedulerConfig, num_layers: int) -> None:
    """Price a speculative engine's steps (``StepPrices.spec_step_time_s``): its graph sizes,
    its draft passes. Leaves ``prices`` as they are without speculative decoding."""
    spec = config.speculative
    if spec is None:
        return
    prices.graph_sizes = capture_sizes(config.max_num_seqs, config.max_num_batched_tokens,
                                       spec.uniform_decode_query_len)
    prices.speculative = True
    prices.num_draft_passes = spec.num_speculative_tokens if spec.draft_layers else 0
    prices.draft_layer_share = spec.draft_layers / num_layers


def verification_step_s(prices: StepPrices, num_requests: int, context: int, k: int,
                        draft_layers: float, num_layers: int) -> tuple[float, float]:
    """(seconds, of which the draft passes) of a pure verification step: ``num_requests``
    decodes after ``context`` tokens each, every one verifying ``k`` drafts (``clustersim
    step-time --num-speculative-tokens``). ``prices`` gets the draft head's constants."""
    rows = 1 + k
    pairs = num_requests * (k * context + rows * k / 2)

    def priced() -> float:
        return prices.spec_step_time_s(0, 0.0, 0, num_requests * rows,
                                       num_requests * (context + rows), num_requests,
                                       num_requests, num_requests * k, pairs)

    prices.num_draft_passes = 0
    target = priced()
    prices.num_draft_passes = k if draft_layers else 0
    prices.draft_layer_share = draft_layers / num_layers
    total = priced()
    return total, total - target
