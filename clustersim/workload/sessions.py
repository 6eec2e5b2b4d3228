"""Sessions' requests (``workload.kind: sessions``), drawn in advance from one generator (pure).

Everything random is drawn before the run: when each session starts, its system prompt, how
many turns it has and model calls each turn makes, every message, answer and wait. Only the
send times depend on the run (each request goes ``wait_s`` after the one before it is done:
``sources.Sessions``). A session is a list of requests; request ``j``'s new message is the
user's (the first call of a turn) or a tool's output (a later call), and its prompt holds
the system prompt, then the messages and answers of the requests ``first_kept[j] .. j-1``,
then its own message::

    request j's prompt   | system | msg a | ans a | ... | msg j-1 | ans j-1 | msg j |
                                   a = first_kept[j]: older exchanges dropped at the cap

Its prefix-cache keys cover the prompt and the answer (the answer's blocks are cached as it
is generated, as vLLM caches every full block it computed), so request j+1 finds the
conversation so far in the cache.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from clustersim.engine.request import Request
from clustersim.errors import ConfigError
from clustersim.limits import MAX_NUM_REQUESTS
from clustersim.workload.arrivals import arrival_times
from clustersim.workload.blocks import BlockChain
from clustersim.workload.lengths import draw_lengths, draw_output_lengths
from clustersim.workload.spec import StopOrLengthOutput
from clustersim.workload.spec_reuse import (
    ExponentialWait,
    FixedWait,
    LognormalWait,
    SessionsWorkload,
    UniformWait,
)


def draw_waits(dist: FixedWait | ExponentialWait | LognormalWait | UniformWait, n: int,
               rng: np.random.Generator) -> np.ndarray:
    """``n`` waits, seconds."""
    if isinstance(dist, FixedWait):
        return np.full(n, dist.value_s)
    if isinstance(dist, ExponentialWait):
        return rng.exponential(dist.mean_s, size=n) if dist.mean_s > 0 else np.zeros(n)
    if isinstance(dist, UniformWait):
        return rng.uniform(dist.low_s, dist.high_s, size=n)
    # Lognormal with mean m and CV c: sigma² = ln(1 + c²), mu = ln(m) - sigma²/2.
    sigma2 = float(np.log1p(dist.cv * dist.cv))
    mu = float(np.log(dist.mean_s)) - sigma2 / 2
    return np.minimum(rng.lognormal(mu, np.sqrt(sigma2), size=n), dist.high_s)


@dataclass(frozen=True)
class SessionPlan:
    """Every session's requests, in arrays: session ``s`` is requests ``first[s] ..
    first[s + 1] - 1``, sent in that order. Per request: the wait before it is sent (after the
    answer before it; a session's first request is sent at its ``start_s``), its new
    message's tokens, its answer's, its prompt's, and the first request (counted within the
    session) whose message and answer its prompt still holds."""

    start_s: np.ndarray
    system_ids: np.ndarray
    """Per session, its system prompt's segment (-1: none)."""
    system_tokens: np.ndarray
    first: np.ndarray
    wait_s: np.ndarray
    message_tokens: np.ndarray
    answer_tokens: np.ndarray
    prompt_tokens: np.ndarray
    first_kept: np.ndarray
    shared_system: bool = False
    """Sessions draw their system prompts from a few shared ones."""
    num_cut: int = 0
    """Requests not sent because their session ended at the context cap."""

    @property
    def num_sessions(self) -> int:
        return len(self.start_s)

    @property
    def num_requests(self) -> int:
        return len(self.wait_s)


def draw_sessions(spec: SessionsWorkload, rng: np.random.Generator) -> SessionPlan:
    """The sessions of ``spec``: their starts, then (in this order) system prompts, turns,
    calls per turn, messages, answers and waits, each field drawn for all at once; then the
    context cap applied."""
    starts = arrival_times(spec.arrivals, rng, num_requests=spec.num_sessions,
                           duration_s=spec.duration_s, start_s=spec.start_s)
    n = len(starts)
    if n == 0:
        raise ConfigError("workload.duration_s", f"no session starts within {spec.duration_s}"
                          " s: lengthen it or raise the rate")
    system_ids = np.full(n, -1, dtype=np.int64)
    system_tokens = np.zeros(n, dtype=np.int64)
    if spec.system_prompt_tokens is not None:
        if spec.num_system_prompts is not None:
            lengths = draw_lengths(spec.system_prompt_tokens, spec.num_system_prompts, rng)
            system_ids = rng.integers(0, spec.num_system_prompts, size=n)
            system_tokens = lengths[system_ids]
        else:
            system_ids = np.arange(n, dtype=np.int64)
            system_tokens = draw_lengths(spec.system_prompt_tokens, n, rng)
    turns = draw_lengths(spec.turns, n, rng)
    tools = spec.tool_calls
    calls = (draw_lengths(tools.calls_per_turn, int(turns.sum()), rng) if tools is not None
             else np.ones(int(turns.sum()), dtype=np.int64))
    num_requests = int(calls.sum())
    if num_requests > MAX_NUM_REQUESTS:
        raise ConfigError("workload.num_sessions", f"{n:,} sessions make {num_requests:,} "
                          f"requests, more than {MAX_NUM_REQUESTS:,} (a run holds every "
                          "request in memory): fewer sessions, turns or calls")
    # a request opens a turn (the user's message) or follows a tool call (its output)
    turn_of = np.repeat(np.arange(len(calls)), calls)
    opens_turn = np.ones(num_requests, dtype=bool)
    opens_turn[1:] = turn_of[1:] != turn_of[:-1]
    num_tool = num_requests - len(calls)
    messages = np.empty(num_requests, dtype=np.int64)
    messages[opens_turn] = draw_lengths(spec.user_tokens, len(calls), rng)
    if tools is not None:
        messages[~opens_turn] = draw_lengths(tools.output_tokens, num_tool, rng)
    answers = draw_output_lengths(spec.output_tokens, num_requests, rng)
    first_turn = np.concatenate(([0], np.cumsum(turns)))
    first = np.concatenate(([0], np.cumsum(calls)))[first_turn]
    opens_session = np.zeros(num_requests, dtype=bool)
    opens_session[first[:-1]] = True
    waits = np.zeros(num_requests)
    thinks = opens_turn & ~opens_session
    waits[thinks] = draw_waits(spec.think_time_s, int(thinks.sum()), rng)
    if tools is not None:
        waits[~opens_turn] = draw_waits(tools.latency_s, num_tool, rng)
    reserve = (np.full(num_requests, spec.output_tokens.max_tokens, dtype=np.int64)
               if isinstance(spec.output_tokens, StopOrLengthOutput) else answers)
    return _capped(spec, np.asarray(starts, dtype=float), system_ids, system_tokens, first,
                   waits, messages, answers, reserve)


def _capped(spec: SessionsWorkload, starts: np.ndarray, system_ids: np.ndarray,
            system_tokens: np.ndarray, first: np.ndarray, waits: np.ndarray,
            messages: np.ndarray, answers: np.ndarray, reserve: np.ndarray) -> SessionPlan:
    """Each request's prompt and the exchanges it keeps under ``max_context_tokens``; the
    requests of a session after it ended at the cap are left out."""
    cap = spec.max_context_tokens
    truncate = spec.at_context_cap == "truncate"
    msg, ans, res = messages.tolist(), answers.tolist(), reserve.tolist()
    bounds = first.tolist()
    prompts = [0] * len(msg)
    kept = [0] * len(msg)
    sent = np.ones(len(msg), dtype=bool)
    for s, system in enumerate(system_tokens.tolist()):
        start, end = bounds[s], bounds[s + 1]
        oldest, held = start, 0  # held: tokens of the exchanges oldest .. r-1
        for r in range(start, end):
            if cap is not None and system + held + msg[r] + res[r] > cap:
                while truncate and oldest < r and system + held + msg[r] + res[r] > cap:
                    held -= msg[oldest] + ans[oldest]
                    oldest += 1
                if system + held + msg[r] + res[r] > cap:
                    sent[r:end] = False  # the session ends here
                    break
            prompts[r] = system + held + msg[r]
            kept[r] = oldest - start
            held += msg[r] + ans[r]
    counts = np.add.reduceat(sent.astype(np.int64), first[:-1])
    keep_session = counts > 0
    if not keep_session.any():
        raise ConfigError("workload.max_context_tokens", f"{cap:,} tokens hold no session's "
                          "first request (its system prompt, message and answer): raise it")
    new_first = np.concatenate(([0], np.cumsum(counts[keep_session])))
    return SessionPlan(
        start_s=starts[keep_session],
        system_ids=system_ids[keep_session],
        system_tokens=system_tokens[keep_session],
        first=new_first.astype(np.int64),
        wait_s=waits[sent],
        message_tokens=messages[sent],
        answer_tokens=answers[sent],
        prompt_tokens=np.asarray(prompts, dtype=np.int64)[sent],
        first_kept=np.asarray(kept, dtype=np.int64)[sent],
        shared_system=spec.num_system_prompts is not None,
        num_cut=int((~sent).sum()),
    )


class SessionRequests:
    """Builds each session's requests in order, when each is sent: request ``r`` of session
    ``s`` gets its prompt's and answer's keys from the session's chain of blocks, which grows
    by each message and answer (and starts again from the system prompt when the cap drops
    old exchanges). A session's chain is dropped when its last request is built."""

    def __init__(self, plan: SessionPlan, block_size: int) -> None:
        self.plan = plan
        self.block_size = block_size
        self._first: list[int] = plan.first.tolist()
        self._messages: list[int] = plan.message_tokens.tolist()
        self._answers: list[int] = plan.answer_tokens.tolist()
        self._prompts: list[int] = plan.prompt_tokens.tolist()
        self._kept: list[int] = plan.first_kept.tolist()
        self._system_ids: list[int] = plan.system_ids.tolist()
        self._system_tokens: list[int] = plan.system_tokens.tolist()
        # segments: system prompts 0 .. num_system - 1, then a message and an answer per
        # request (ids base + 2r and base + 2r + 1)
        self._base = max(self._system_ids, default=-1) + 1
        self._systems: dict[int, BlockChain] = {}
        self._chains: dict[int, BlockChain] = {}

    def _system_chain(self, session: int) -> BlockChain:
        system = self._system_ids[session]
        chain = self._systems.get(system)
        if chain is None:
            chain = BlockChain(self.block_size)
            if system >= 0:
                chain.extend(system, self._system_tokens[session])
            if self.plan.shared_system:
                self._systems[system] = chain
        return chain.copy()

    def __call__(self, session: int, r: int) -> Request:
        """Request ``r`` (an index over all requests) of ``session``; requests of one session
        are built in order."""
        start = self._first[session]
        j = r - start
        chain = self._chains.get(session)
        if chain is None or (j > 0 and self._kept[r] != self._kept[r - 1]):
            chain = self._system_chain(session)
            for k in range(start + self._kept[r], r):
                chain.extend(self._base + 2 * k, self._messages[k])
                chain.extend(self._base + 2 * k + 1, self._answers[k])
        chain.extend(self._base + 2 * r, self._messages[r])
        prompt = chain.num_tokens
        if prompt != self._prompts[r]:
            raise AssertionError(f"session {session} request {j}: {prompt} prompt tokens "
                                 f"built, {self._prompts[r]} planned")
        answer = self._answers[r]
        chain.extend(self._base + 2 * r + 1, answer)
        if r + 1 < self._first[session + 1]:
            self._chains[session] = chain
        else:
            self._chains.pop(session, None)
        # the blocks it computes: the prompt and every answer token but the last (whose KV
        # is never computed)
        return Request(f"{session}-{j}", 0.0, prompt, answer, 0,
                       chain.prefix_keys(prompt + answer - 1))
