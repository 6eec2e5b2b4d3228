"""The ``api_server:`` section: per-request CPU time of vLLM's API server in front of each
engine (``clustersim.cluster.api_server`` runs it)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, NonNegativeFloat

from clustersim.limits import MAX_OVERHEAD_S, Within
from clustersim.validation import Strict

ServerSeconds = Annotated[NonNegativeFloat, Within(
    high=MAX_OVERHEAD_S, unit="s", reason="a minute per request; measured ones are milliseconds")]
TokenSeconds = Annotated[NonNegativeFloat, Within(
    high=0.01, unit="s", reason="10 ms a token, 500 times the slowest tokenizer measured")]
JitterCv = Annotated[NonNegativeFloat, Within(
    high=10.0, reason="a lognormal factor of CV 10 puts nearly all of the time in a few "
    "requests already")]
ServerCount = Annotated[int, Field(ge=1), Within(
    high=1024, reason="vLLM runs one API server process per CPU core at most")]

class ApiServerSpec(Strict):
    """The ``api_server:`` section: per-request CPU time of vLLM's API server. Leaving the
    section out (or setting every time to 0) is an engine reached the instant a request is
    sent, as before; ``api_server: {}`` takes the measured defaults."""

    request_s: ServerSeconds = Field(
        0.012,
        description="Before the engine sees a request, interleaved with other requests' "
        "(a delay, not a queue): HTTP, request parsing, chat template, input processing. "
        "Default 12 ms: vLLM PR #21139 measured 12-15 ms of "
        "preprocessing per request (96 requests in flight).")
    prompt_s: ServerSeconds = Field(
        1.3e-3,
        description="Tokenization's fixed part, per prompt, on the server's one tokenizer "
        "thread (a queue, with prompt_token_s). Default 1.3 ms: the two measurements below, "
        "a + 131 b = 1.5 ms and a + 10,000 b = 13.4 ms, give a = 1.3 ms and b = 1.2 us.")
    prompt_token_s: TokenSeconds = Field(
        1.2e-6,
        description="Tokenization, per prompt token, on the same thread. Default 1.2 us: "
        "HF tokenizers encoding 131-token prompts took 1.3-1.7 ms warm "
        "(tenstorrent/tt-inference-server issue #2173), and vLLM PR #19334's 100 prompts of "
        "10,000 tokens, sent at once, reached the engine in 1.34 s through the one "
        "tokenizer thread, 13.4 ms each.")
    output_s: ServerSeconds = Field(
        3.0e-5,
        description="From the engine's token to the client's: detokenization and the "
        "streamed chunk, per token. Default 30 us: incremental detokenization of 8 x 128 "
        "tokens took 0.03 s (vLLM PR #121).")
    count: ServerCount = Field(
        1,
        description="vLLM --api-server-count: server processes, each with its own "
        "tokenizer thread, taking prompts from one first-come-first-served queue; default 1, "
        "vLLM's default.")
    jitter_cv: JitterCv = Field(
        0.1,
        description="Coefficient of variation of each request's times (lognormal "
        "factor of mean 1); 0: every request takes exactly the times above. Default 0.1: "
        "PR #21139's 12.4-14.3 ms per request (CV 0.08) and #2173's warm repeats of one "
        "prompt, 1.32-1.72 ms (CV 0.13).")

    @property
    def is_zero(self) -> bool:
        """No time at all: the stage changes nothing."""
        return (self.request_s == 0 and self.prompt_s == 0 and self.prompt_token_s == 0
                and self.output_s == 0)
