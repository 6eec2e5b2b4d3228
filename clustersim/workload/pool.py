"""A prompt pool's requests (``workload.kind: prompt_pool``), drawn from one generator (pure).

The pool is ``num_groups`` x ``num_prompts_per_group`` prompts; prompt ``k`` of group
``g = k // num_prompts_per_group`` is the group's system prompt (segment ``g``), then its own
question (segment ``num_groups + k``). Its prefix-cache keys (``blocks.BlockChain``) are the
same every time it is drawn, and its first ``system // block_size`` keys are the group's::

    group 0   | system 0 ........ | question 0 |       prompts 0, 1: the same first blocks
              | system 0 ........ | question 1 ..... |
    group 1   | system 1 ..... | question 2 |
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from clustersim.engine.request import Request
from clustersim.workload.blocks import BlockChain
from clustersim.workload.lengths import draw_lengths, draw_output_lengths
from clustersim.workload.spec_reuse import PromptPoolWorkload


@dataclass(frozen=True)
class PoolDraw:
    """What a prompt pool's requests are: per group its system prompt's length, per prompt its
    question's, per request its prompt (an index into the pool) and its answer's length."""

    num_prompts_per_group: int
    system_tokens: np.ndarray
    question_tokens: np.ndarray
    prompt_ids: np.ndarray
    output_tokens: np.ndarray

    def prompt_tokens(self) -> np.ndarray:
        """Each request's prompt length."""
        groups = self.prompt_ids // self.num_prompts_per_group
        return self.system_tokens[groups] + self.question_tokens[self.prompt_ids]


def draw_pool(spec: PromptPoolWorkload, num_requests: int, rng: np.random.Generator) -> PoolDraw:
    """The pool, then which prompt each of ``num_requests`` requests sends, then their answer
    lengths (in that order from ``rng``). ``cycle`` shuffles the pool once and goes through it
    again and again; ``random`` draws each request's prompt uniformly."""
    num_prompts = spec.num_groups * spec.num_prompts_per_group
    system = draw_lengths(spec.system_prompt_tokens, spec.num_groups, rng)
    question = draw_lengths(spec.question_tokens, num_prompts, rng)
    if spec.order == "cycle":
        order = rng.permutation(num_prompts)
        prompt_ids = order[np.arange(num_requests) % num_prompts]
    else:
        prompt_ids = rng.integers(0, num_prompts, size=num_requests)
    outputs = draw_output_lengths(spec.output_tokens, num_requests, rng)
    return PoolDraw(spec.num_prompts_per_group, system, question,
                    prompt_ids.astype(np.int64), outputs)


class PoolRequests:
    """The requests of a pool draw, built one at a time: request ``i`` arrives at
    ``arrivals_s[i]`` with prompt ``prompt_ids[i]``. Each group's system-prompt keys are
    worked out once and shared."""

    def __init__(self, draw: PoolDraw, arrivals_s: np.ndarray, block_size: int) -> None:
        self.draw = draw
        self.block_size = block_size
        self._arrivals: list[float] = np.asarray(arrivals_s, dtype=float).tolist()
        self._prompts: list[int] = draw.prompt_ids.tolist()
        self._outputs: list[int] = draw.output_tokens.tolist()
        self._system: list[int] = draw.system_tokens.tolist()
        self._question: list[int] = draw.question_tokens.tolist()
        self._num_groups = len(self._system)
        self._groups: dict[int, BlockChain] = {}

    def __len__(self) -> int:
        return len(self._prompts)

    def keys(self, prompt: int) -> tuple[int, ...]:
        """The prefix-cache keys of pool prompt ``prompt``'s full blocks."""
        group = prompt // self.draw.num_prompts_per_group
        chain = self._groups.get(group)
        if chain is None:
            chain = self._groups[group] = BlockChain(self.block_size).extend(
                group, self._system[group])
        chain = chain.copy().extend(self._num_groups + prompt, self._question[prompt])
        return tuple(chain.keys)

    def __call__(self, i: int) -> Request:
        prompt = self._prompts[i]
        group = prompt // self.draw.num_prompts_per_group
        num_tokens = self._system[group] + self._question[prompt]
        # (positional: a compiled class parses keyword arguments by name)
        return Request(str(i), self._arrivals[i], num_tokens, self._outputs[i], 0,
                       self.keys(prompt))
