"""The API server in front of each engine: a queue of CPU work before the engine sees a
request, and its time after the engine produces each token.

vLLM's OpenAI-compatible server (``vllm serve``) does per-request work on the CPU that no
engine step contains::

    client --HTTP--> [ parse, chat template, tokenize, input processing ] --> engine core
                     vllm/entrypoints/openai/serving_*.py, the renderer's tokenizer
                     (AsyncMicrobatchTokenizer, vllm/utils/async_utils.py),
                     vllm/v1/engine/input_processor.py
    client <--SSE--- [ detokenize, build the chunk, stream it ] <-- engine core outputs
                     vllm/v1/engine/output_processor.py, the serving layer's generators

The server's own work on a request (``request_s``: HTTP, parsing, the chat template, input
processing) interleaves with every other request's in its event loop, so it is a delay of
each request. Tokenization is not: the server runs it on a single worker thread (vLLM issue
#25301: ``ThreadPoolExecutor(max_workers=1)`` in serving_engine.py, "requests are forced to wait
in a serialized queue for preprocessing"), so ``prompt_s + prompt_token_s x prompt tokens`` of
each request queues first come first served, one tokenizer per server process, over ``count``
processes (``--api-server-count``). A burst of N requests therefore reaches the engine spread
over N tokenizations, not at one instant. The same processes detokenize and stream every token
of every request in flight (``output_s`` each); that work takes its share of the CPU, so a
tokenization stretches by ``1 / (1 - u)``, ``u`` the streaming load: requests in flight x
``output_s`` / (their mean time between tokens x ``count``), the mean taken over the requests
finished so far (none finished: no load yet). Each token also reaches the client ``output_s``
after the engine made it, the same for every token of the request (its gaps are unchanged).
Every time is multiplied by an independent lognormal factor of mean 1 and CV ``jitter_cv``
drawn from the server's own stream of the run's seed (traffic and routers draw from others).
The client's TTFT and E2E therefore include the delay, the queue, the tokenization and the
way back.
"""

from __future__ import annotations

import heapq
import math

import numpy as np

from clustersim.engine.request import Request
from clustersim.scenario.api_server import ApiServerSpec

API_SERVER_RNG_STREAM = 3
"""Jitter draws from ``default_rng([seed, 3])`` (routers use stream 1, faults 2)."""


MAX_STREAMING_LOAD = 0.95
"""The streaming side's share of the servers is capped here: at 1 no request would ever be
served, where the real server slows every stream down instead."""
TPOT_AVERAGE_WEIGHT = 0.1
"""Weight of each finished request's mean time between tokens in the running mean."""


class ApiServer:
    """The servers' queue and each request's draws (:class:`ApiServerSpec`)."""

    def __init__(self, spec: ApiServerSpec, seed: int) -> None:
        self.spec = spec
        self._rng = np.random.default_rng([seed, API_SERVER_RNG_STREAM])
        cv = spec.jitter_cv
        self._sigma = math.sqrt(math.log1p(cv * cv))
        self._free_s = [0.0] * spec.count
        """When each server finishes its queued work (a heap)."""
        self.num_in_flight = 0
        """Requests past the servers and not yet answered: their tokens stream through them."""
        self._tpot_s = 0.0
        """Running mean of finished requests' time between tokens (0: none finished yet)."""

    def _factor(self) -> float:
        """A lognormal factor of mean 1 and CV ``jitter_cv`` (1 exactly when it is 0)."""
        if self._sigma == 0:
            return 1.0
        sigma = self._sigma
        return float(self._rng.lognormal(-sigma * sigma / 2, sigma))

    def streaming_load(self) -> float:
        """The share of the servers' time the requests in flight take to stream their
        tokens, now."""
        if self._tpot_s <= 0 or self.spec.output_s == 0:
            return 0.0
        load = self.num_in_flight * self.spec.output_s / (self._tpot_s * self.spec.count)
        return min(load, MAX_STREAMING_LOAD)

    def before_engine_s(self, request: Request, now_s: float) -> float:
        """Seconds from the client's send at ``now_s`` to the engine's queue: the request's
        own processing, the wait for the first free tokenizer, then its tokenization,
        stretched by the streaming."""
        spec = self.spec
        factor = self._factor()
        queued = now_s + spec.request_s * factor
        tokenize = (spec.prompt_s + spec.prompt_token_s * request.num_prompt_tokens) * factor
        if tokenize == 0:
            return queued - now_s
        start = max(queued, self._free_s[0])
        end = start + tokenize / (1.0 - self.streaming_load())
        heapq.heapreplace(self._free_s, end)
        return end - now_s

    def served(self) -> None:
        """A request left the servers for the engine: its tokens will stream through them."""
        self.num_in_flight += 1

    def answered(self, request: Request) -> None:
        """This attempt of ``request`` stopped streaming (finished, rejected or lost to a
        failure); a finished one's time between tokens joins the running mean."""
        self.num_in_flight = max(self.num_in_flight - 1, 0)
        first, finish = request.first_token_s, request.finish_s
        tokens = request.num_output_tokens
        if first is None or finish is None or tokens < 2:
            return
        tpot = (finish - first) / (tokens - 1)
        self._tpot_s = tpot if self._tpot_s == 0 else (
            self._tpot_s + TPOT_AVERAGE_WEIGHT * (tpot - self._tpot_s))

    def to_client_s(self) -> float:
        """Seconds from the engine's token to the client's, for each token of one request."""
        return self.spec.output_s * self._factor()
