"""Request classes by prompt and output length, for trace statistics and three-pool routing.

With a long-prompt threshold T::

    prefill_heavy   prompt > T   and  output <= T/8
    decode_heavy    output > T/8 and  prompt <= T
    mixed           everything else (both long, or both short)
"""

from __future__ import annotations

from typing import Literal

import numpy as np

RequestClass = Literal["prefill_heavy", "decode_heavy", "mixed"]
REQUEST_CLASSES: tuple[RequestClass, ...] = ("prefill_heavy", "decode_heavy", "mixed")


def classify_request(
    prompt_tokens: int, output_tokens: int, long_prompt_threshold: int = 2048
) -> RequestClass:
    """At the default threshold: (4000, 64) -> prefill_heavy, (256, 512) -> decode_heavy,
    (1500, 128) -> mixed."""
    long_output = output_tokens * 8 > long_prompt_threshold  # output > T/8, in integers
    long_prompt = prompt_tokens > long_prompt_threshold
    if long_prompt and not long_output:
        return "prefill_heavy"
    if long_output and not long_prompt:
        return "decode_heavy"
    return "mixed"


def count_classes(
    prompt_tokens: np.ndarray, output_tokens: np.ndarray, long_prompt_threshold: int = 2048
) -> dict[RequestClass, int]:
    """How many requests fall in each class: :func:`classify_request` over arrays."""
    prompts = np.asarray(prompt_tokens, dtype=np.int64)
    outputs = np.asarray(output_tokens, dtype=np.int64)
    long_output = outputs * 8 > long_prompt_threshold
    long_prompt = prompts > long_prompt_threshold
    prefill = int(np.count_nonzero(long_prompt & ~long_output))
    decode = int(np.count_nonzero(long_output & ~long_prompt))
    return {"prefill_heavy": prefill, "decode_heavy": decode,
            "mixed": len(prompts) - prefill - decode}
