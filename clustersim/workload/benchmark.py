"""The client of ``vllm bench serve`` as data: its dispatch times and its warm-up requests.

What the tool does (vllm/benchmarks/serve.py, ``get_request`` and ``benchmark``; the SimPy
side is ``sources.Benchmark``)::

    warm-up   num_warmups copies of the first request, at most max_concurrency in flight,
              all awaited before the measured run; none of them is measured
    dispatch  request i is handed to its task at delay_i: 0 for every request at an infinite
              --request-rate, else cumulative gamma(shape=burstiness, scale=1/(rate x
              burstiness)) gaps, rescaled so that the last one lands on num_prompts / rate
    send      the task waits for one of max_concurrency semaphore slots (FIFO), then sends:
              TTFT and E2E run from the send, client_queue_time = send - dispatch

The ready check (``--ready-check-timeout-sec``) defaults to 0 in that version, so no test
request precedes the warm-ups here either.
"""

from __future__ import annotations

import math

import numpy as np

from clustersim.engine.request import Request
from clustersim.workload.replay import chain_block_hashes

WARMUP_PREFIX = "warmup-"


def dispatch_offsets(
    num_prompts: int, request_rate: float, burstiness: float, rng: np.random.Generator
) -> np.ndarray:
    """Seconds from the start of the measured run at which each request is dispatched
    (``get_request`` without a ramp-up): all 0 at an infinite rate; constant 1/rate gaps
    at an infinite burstiness; else gamma gaps rescaled so their sum is num_prompts / rate."""
    if math.isinf(request_rate):
        return np.zeros(num_prompts)
    if math.isinf(burstiness):
        gaps = np.full(num_prompts, 1.0 / request_rate)
    else:
        gaps = rng.gamma(burstiness, 1.0 / (request_rate * burstiness), size=num_prompts)
    delays = np.cumsum(gaps)
    if delays[-1] != 0:
        delays *= (num_prompts / request_rate) / delays[-1]
    return delays


def warmup_requests(first: Request, num_warmups: int, block_size: int) -> list[Request]:
    """``num_warmups`` copies of ``first``, and ``first`` given the same prompt: vLLM's warm-up
    sends the first request's prompt (``test_input``) again and again, so with prefix caching
    the copies, and then the measured first request, hit each other's cached blocks."""
    if num_warmups == 0:
        return []
    keys = chain_block_hashes([-(i + 1) for i in range(first.num_prompt_tokens // block_size)])
    first.block_hashes = keys
    return [
        Request(
            request_id=f"{WARMUP_PREFIX}{i}",
            arrival_s=0.0,
            num_prompt_tokens=first.num_prompt_tokens,
            max_tokens=first.max_tokens,
            block_hashes=keys,
        )
        for i in range(num_warmups)
    ]
