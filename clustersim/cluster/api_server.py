"""The API server in front of each engine: its time before the engine sees a request and
after the engine produces each token.

vLLM's OpenAI-compatible server (``vllm serve``) does per-request work on the CPU that no
engine step contains::

    client --HTTP--> [ parse, chat template, tokenize, input processing ] --> engine core
                     vllm/entrypoints/openai/serving_*.py, the renderer's tokenizer
                     (AsyncMicrobatchTokenizer, vllm/utils/async_utils.py),
                     vllm/v1/engine/input_processor.py
    client <--SSE--- [ detokenize, build the chunk, stream it ] <-- engine core outputs
                     vllm/v1/engine/output_processor.py, the serving layer's generators

Modelled as delays of each request, not as a queue: ``request_s + prompt_token_s x prompt
tokens`` before its router picks an instance, and ``output_s`` between the engine's token
and the client's, the same for every token of the request (its gaps are unchanged), each
times an independent lognormal factor of mean 1 and CV ``jitter_cv`` drawn from its own
stream of the run's seed (traffic and routers draw from others). The client's TTFT and E2E
therefore include both. What is left out: the tokenizer's single thread and micro-batches
(they serialize simultaneous prompts only while a batch is being tokenized), and the server
slowing down when its event loop streams many requests.
"""

from __future__ import annotations

import math
from typing import Annotated

import numpy as np
from pydantic import Field, NonNegativeFloat

from clustersim.engine.request import Request
from clustersim.limits import MAX_OVERHEAD_S, Within
from clustersim.validation import Strict

API_SERVER_RNG_STREAM = 3
"""Jitter draws from ``default_rng([seed, 3])`` (routers use stream 1, faults 2)."""


ServerSeconds = Annotated[NonNegativeFloat, Within(
    high=MAX_OVERHEAD_S, unit="s", reason="a minute per request; measured ones are milliseconds")]
TokenSeconds = Annotated[NonNegativeFloat, Within(
    high=0.01, unit="s", reason="10 ms a token, 500 times the slowest tokenizer measured")]
JitterCv = Annotated[NonNegativeFloat, Within(
    high=10.0, reason="a lognormal factor of CV 10 puts nearly all of the time in a few "
    "requests already")]


class ApiServerSpec(Strict):
    """The ``api_server:`` section: per-request CPU time of vLLM's API server. Leaving the
    section out (or setting every time to 0) is an engine reached the instant a request is
    sent, as before; ``api_server: {}`` takes the measured defaults."""

    request_s: ServerSeconds = Field(
        0.012,
        description="Before the engine sees a request: HTTP, request parsing, chat "
        "template, input processing. Default 12 ms: vLLM PR #21139 measured 12-15 ms of "
        "preprocessing per request (96 requests in flight).")
    prompt_token_s: TokenSeconds = Field(
        1.0e-5,
        description="Tokenization, per prompt token. Default 10 us: HF tokenizers "
        "encoding 131-token prompts took 1.3-2.8 ms, 10-21 us a token "
        "(tenstorrent/tt-inference-server issue #2173).")
    output_s: ServerSeconds = Field(
        3.0e-5,
        description="From the engine's token to the client's: detokenization and the "
        "streamed chunk, per token. Default 30 us: incremental detokenization of 8 x 128 "
        "tokens took 0.03 s (vLLM PR #121).")
    jitter_cv: JitterCv = Field(
        0.1,
        description="Coefficient of variation of each request's times (lognormal "
        "factor of mean 1); 0: every request takes exactly the times above. Default 0.1: "
        "PR #21139's 12.4-14.3 ms per request (CV 0.08) and #2173's warm repeats of one "
        "prompt, 1.32-1.72 ms (CV 0.13).")

    @property
    def is_zero(self) -> bool:
        """No time at all: the stage changes nothing."""
        return self.request_s == 0 and self.prompt_token_s == 0 and self.output_s == 0


class ApiServer:
    """Draws each request's API-server times (:class:`ApiServerSpec`)."""

    def __init__(self, spec: ApiServerSpec, seed: int) -> None:
        self.spec = spec
        self._rng = np.random.default_rng([seed, API_SERVER_RNG_STREAM])
        cv = spec.jitter_cv
        self._sigma = math.sqrt(math.log1p(cv * cv))

    def _factor(self) -> float:
        """A lognormal factor of mean 1 and CV ``jitter_cv`` (1 exactly when it is 0)."""
        if self._sigma == 0:
            return 1.0
        sigma = self._sigma
        return float(self._rng.lognormal(-sigma * sigma / 2, sigma))

    def before_engine_s(self, request: Request) -> float:
        """Seconds from the client's send to the engine's queue."""
        spec = self.spec
        return (spec.request_s + spec.prompt_token_s * request.num_prompt_tokens) * self._factor()

    def to_client_s(self) -> float:
        """Seconds from the engine's token to the client's, for each token of one request."""
        return self.spec.output_s * self._factor()
