"""The analytic screen: how many requests per second one instance sustains within the SLO,
from the cost model alone, in milliseconds. It ranks and prunes candidates; simulation decides.

At a steady per-instance rate ``lam`` (requests/s) an instance runs steps of ``tau`` seconds.
Little's law gives what each step holds, and the cost model prices that step::

    colocated   B = lam x O x tau decodes at context P + O/2, c = lam x P x tau prompt tokens
                tau = step_time(B decodes + a c-token chunk)          (a fixed point in tau)
    decode      B = lam x O x tau,  tau = step_time(B decodes)
    prefill     a token server: mu = budget / step_time(budget prompt tokens) tokens/s

Prompts queue FCFS for the budget left after the decodes (vLLM runs running requests first):
each instance a token server of rate ``mu`` with service P / mu. A load-aware router in front
of ``n`` such instances makes them one G/G/n queue, whose wait is Allen and Cunneen's: the
M/M/n wait (Erlang C) times ``(ca^2 + cs^2) / 2``; a request waits at all with the Erlang C
probability, and then exponentially long. A request of prompt P meets the TTFT limit when its
wait fits in what its own service (and, disaggregated, the KV handoff and the decode side's
first step) leaves; averaged over the traffic's prompt lengths that is the estimated TTFT
attainment, which must reach the target (short prompts behind a long one wait; the long one
itself may never fit). TPOT is the step time; an ITL limit meets the slowest step, one
carrying a full prompt chunk. KV: the decodes' context must fit the cache (with
``KV_HEADROOM`` spare), the seats ``max_num_seqs``.

``capacity`` bisects on ``lam`` for the largest rate meeting every limit and names the limit
that stops it (the binding one). The figures are steady-state means and a rough tail: good
enough to rank candidates and to start the goodput bisection near the answer, never reported
as goodput.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from clustersim.cost.roofline import BatchShape, CostModel
from clustersim.scenario import SLO

KV_HEADROOM = 0.9
"""Share of the KV cache the steady decodes may fill: the rest absorbs fluctuations."""
GRID_POINTS = 64
"""Quantiles of the prompt length the TTFT attainment is averaged over."""
_MAX_RATE_PER_S = 1e6


@dataclass(frozen=True, slots=True)
class TrafficStats:
    """What the screen knows of the traffic: length moments and quantiles, burstiness."""

    mean_prompt_tokens: float
    mean_output_tokens: float
    prompt_tokens_sq_mean: float
    """E[P^2], for the service-time variance of prompts."""
    prompt_grid: tuple[float, ...]
    """Prompt lengths at evenly spaced quantiles (midpoints): the traffic's prompts in small."""
    arrival_cv: float
    """Coefficient of variation of the inter-arrival gaps (1 for Poisson)."""
    max_total_tokens: int

    @classmethod
    def of(cls, prompts: np.ndarray, outputs: np.ndarray, arrival_cv: float) -> TrafficStats:
        prompts = np.asarray(prompts, dtype=float)
        outputs = np.asarray(outputs, dtype=float)
        levels = (np.arange(GRID_POINTS) + 0.5) / GRID_POINTS
        return cls(
            mean_prompt_tokens=float(prompts.mean()),
            mean_output_tokens=float(outputs.mean()),
            prompt_tokens_sq_mean=float((prompts**2).mean()),
            prompt_grid=tuple(float(v) for v in np.quantile(prompts, levels)),
            arrival_cv=arrival_cv,
            max_total_tokens=int((prompts + outputs).max()),
        )

    def prompt_at(self, q: float) -> float:
        """Prompt length at quantile ``q`` (the nearest grid point)."""
        grid = self.prompt_grid
        return grid[min(len(grid) - 1, max(0, int(q * len(grid))))]

    @property
    def pairs_per_prompt_token(self) -> float:
        """Causal query-key pairs per prompt token over the traffic: E[P(P+1)/2] / E[P]."""
        return (self.prompt_tokens_sq_mean / self.mean_prompt_tokens + 1) / 2

    @property
    def service_cv_sq(self) -> float:
        mean = self.mean_prompt_tokens
        return max(0.0, self.prompt_tokens_sq_mean / (mean * mean) - 1.0)


@dataclass(frozen=True, slots=True)
class Engine:
    """One instance of a pool as the screen sees it: its cost model and its limits."""

    cost: CostModel
    max_num_batched_tokens: int
    max_num_seqs: int
    kv_capacity_tokens: int
    enable_chunked_prefill: bool = True
    window_tokens_per_seq: float = 0.0
    """Tokens' worth of blocks each running request holds beside its context in the
    sliding-window groups (about ``window + block_size`` per group; 0 without a window)."""


@dataclass(frozen=True, slots=True)
class Estimate:
    """The most one instance sustains, and why not more."""

    rate_per_s: float
    binding: str
    """ttft | tpot | itl | kv | seats | budget (the step budget or the GPU saturates)."""
    step_s: float
    """Step time at that rate."""
    ttft_share: float
    """Estimated share of requests within the TTFT limit at that rate."""
    batch: float
    """Mean decodes per step at that rate."""

    @property
    def feasible(self) -> bool:
        return self.rate_per_s > 0


@dataclass(frozen=True, slots=True)
class InstanceState:
    """An instance at one offered rate: what fails, and its figures."""

    failed: str | None
    step_s: float
    ttft_share: float
    batch: float


def _decode_shape(batch: float, context: float) -> BatchShape:
    return BatchShape(num_decode_tokens=batch, decode_kv_tokens=batch * (context + 1),
                      num_sampled=batch, num_seqs=batch)


def _mixed_shape(batch: float, context: float, chunk: float, prompt: float,
                 pairs_per_token: float | None = None) -> BatchShape:
    """``batch`` decodes at ``context`` plus ``chunk`` prompt tokens of prompts ``prompt`` long
    (a step completes chunk / prompt of them). A prompt's tokens attend to (P + 1) / 2 keys on
    average, so over the traffic a prompt token carries (E[P^2] / E[P] + 1) / 2 causal pairs:
    long prompts dominate attention (``pairs_per_token``; default one prompt's)."""
    prompts_done = chunk / prompt if prompt else 0.0
    if pairs_per_token is None:
        pairs_per_token = (prompt + 1) / 2
    return BatchShape(
        num_prefill_tokens=chunk,
        prefill_attn_pairs=chunk * pairs_per_token,
        prefill_kv_tokens=chunk,
        num_decode_tokens=batch,
        decode_kv_tokens=batch * (context + 1),
        num_sampled=batch + prompts_done,
        num_seqs=batch + max(1.0, prompts_done) if chunk else batch,
    )


def _wait(servers: int, rho: float, mean_service_s: float, ca2: float,
          cs2: float) -> tuple[float, float]:
    """(probability of waiting, mean wait) of a G/G/n queue at per-server load ``rho``: the
    M/M/n figures (Erlang C from the Erlang B recursion, stable for any n), the mean scaled by
    ``(ca^2 + cs^2) / 2`` (Allen-Cunneen)."""
    offered = servers * rho
    blocking = 1.0
    for k in range(1, servers + 1):
        blocking = offered * blocking / (k + offered * blocking)
    waits = blocking / (1 - rho * (1 - blocking))
    mean_wait = waits * mean_service_s / (servers * (1 - rho))
    return waits, (ca2 + cs2) / 2 * mean_wait


def _step(engine: Engine, shape: BatchShape) -> float:
    return engine.cost.step_time(shape).time_s


def _fixed_point(price: Callable[[float], float], start_s: float) -> float | None:
    """tau = price(tau), from below; None when it runs away (the instance saturates)."""
    tau = start_s
    for _ in range(200):
        new = price(tau)
        if new > 1e3:
            return None
        if abs(new - tau) <= 1e-9 + 1e-6 * tau:
            return new
        tau = new
    return None


@dataclass(frozen=True, slots=True)
class ColocatedSteps:
    """A colocated instance's steps at one rate, what no queue in front of it changes: the
    step time, the decodes a step holds, a step with a full prompt chunk, and the prompt
    tokens a second those steps serve."""

    tau: float
    batch: float
    full_step_s: float
    mu: float


def colocated_steps(engine: Engine, traffic: TrafficStats,
                    lam: float) -> ColocatedSteps | InstanceState:
    """A colocated instance's steps at ``lam`` requests/s (a fixed point in the step time),
    or the saturated state when its steps cannot carry the rate."""
    p, o = traffic.mean_prompt_tokens, traffic.mean_output_tokens
    context = p + o / 2
    budget = engine.max_num_batched_tokens

    pairs = traffic.pairs_per_prompt_token

    def price(tau: float) -> float:
        batch, chunk = lam * o * tau, lam * p * tau
        return _step(engine, _mixed_shape(batch, context, min(chunk, budget), p, pairs))

    idle = _step(engine, _decode_shape(1, context))
    tau = _fixed_point(price, idle)
    if tau is None:
        return InstanceState("budget", math.inf, 0.0, math.inf)
    batch = lam * o * tau
    if batch + lam * p * tau > budget:
        return InstanceState("budget", tau, 0.0, batch)
    left = budget - batch
    full = _step(engine, _mixed_shape(batch, context, left, p, pairs))
    return ColocatedSteps(tau, batch, full, left / full)  # prompt tokens/s when prompts queue


def colocated_state(engine: Engine, traffic: TrafficStats, slo: SLO, q: float,
                    lam: float, servers: int = 1,
                    steps: ColocatedSteps | InstanceState | None = None) -> InstanceState:
    """A colocated instance at ``lam`` requests/s, one of ``servers`` behind one router:
    decodes and prompt chunks share its steps (``steps``: :func:`colocated_steps` at
    ``lam``, when the caller kept them)."""
    if steps is None:
        steps = colocated_steps(engine, traffic, lam)
    if isinstance(steps, InstanceState):
        return steps
    context = traffic.mean_prompt_tokens + traffic.mean_output_tokens / 2
    return _judge(engine, traffic, slo, q, lam, steps.tau, steps.full_step_s, steps.batch,
                  steps.mu, context, extra_s=0.0, servers=servers)


def _judge(engine: Engine, traffic: TrafficStats, slo: SLO, q: float, lam: float, tau: float,
           full_step_s: float, batch: float, mu: float, context: float,
           extra_s: float, servers: int = 1) -> InstanceState:
    """Which limit the instance breaks at this rate (None: none). ``q`` is the share of
    requests that must meet the TTFT limit (0.5 with the mean criterion: the mean must)."""
    p = traffic.mean_prompt_tokens
    rho = lam * p / mu
    if rho >= 1:
        return InstanceState("budget", tau, 0.0, batch)
    waits, mean_wait = _wait(servers, rho, p / mu, traffic.arrival_cv**2,
                             traffic.service_cv_sq)
    grid = np.asarray(traffic.prompt_grid)
    service = np.maximum(grid / mu, _lone_prefill_s(engine, traffic.prompt_grid)) + extra_s
    if q == 0.5:  # mean criterion: the mean TTFT within the limit
        share = 1.0 if slo.ttft_s is None or mean_wait + service.mean() <= slo.ttft_s else 0.0
    else:
        share = 1.0 if slo.ttft_s is None else _ttft_share(service, waits, mean_wait,
                                                           slo.ttft_s)
    failed = None
    if share < q:
        failed = "ttft"
    elif slo.tpot_s is not None and tau > slo.tpot_s:
        failed = "tpot"
    elif slo.itl_s is not None and full_step_s > slo.itl_s:
        failed = "itl"
    else:
        failed = _holding_failure(engine, batch, context)
    return InstanceState(failed, tau, share, batch)


def _ttft_share(service_s: np.ndarray, waits: float, mean_wait_s: float,
                limit_s: float) -> float:
    """Share of requests whose wait fits in what their service leaves of the limit: the wait
    is 0 with probability 1 - waits, else exponential with mean mean_wait / waits."""
    slack = limit_s - service_s
    if waits <= 0 or mean_wait_s <= 0:
        return float((slack >= 0).mean())
    theta = mean_wait_s / waits
    fits = np.where(slack >= 0, 1 - waits * np.exp(-np.maximum(slack, 0) / theta), 0.0)
    return float(fits.mean())


@lru_cache(maxsize=1024)
def _lone_prefill_s(engine: Engine, prompt_tokens: tuple[float, ...]) -> np.ndarray:
    """Each prompt alone on the instance: its chunks one after another."""
    budget = engine.max_num_batched_tokens
    out = np.empty(len(prompt_tokens))
    for i, tokens in enumerate(prompt_tokens):
        if not engine.enable_chunked_prefill or tokens <= budget:
            out[i] = _step(engine, _mixed_shape(0, 0, tokens, tokens))
        else:
            out[i] = math.ceil(tokens / budget) * _step(engine, _mixed_shape(0, 0, budget, tokens))
    out.flags.writeable = False
    return out


def decode_state(engine: Engine, traffic: TrafficStats, slo: SLO, lam: float) -> InstanceState:
    """One decode instance of a disaggregated layout at ``lam`` requests/s."""
    p, o = traffic.mean_prompt_tokens, traffic.mean_output_tokens
    context = p + o / 2

    def price(tau: float) -> float:
        return _step(engine, _decode_shape(lam * o * tau, context))

    tau = _fixed_point(price, _step(engine, _decode_shape(1, context)))
    if tau is None:
        return InstanceState("budget", math.inf, 1.0, math.inf)
    batch = lam * o * tau
    failed = None
    if batch > engine.max_num_batched_tokens:
        failed = "budget"
    elif slo.tpot_s is not None and tau > slo.tpot_s:
        failed = "tpot"
    elif slo.itl_s is not None and tau > slo.itl_s:
        failed = "itl"
    else:
        failed = _holding_failure(engine, batch, context)
    return InstanceState(failed, tau, 1.0, batch)


def _holding_failure(engine: Engine, batch: float, context: float) -> str | None:
    """What an instance cannot hold of ``batch`` running requests of ``context`` tokens each:
    their KV (within its headroom), or their seats; None when it holds them."""
    if batch * (context + engine.window_tokens_per_seq) > (
            KV_HEADROOM * engine.kv_capacity_tokens):
        return "kv"
    if batch > engine.max_num_seqs:
        return "seats"
    return None


def prefill_state(engine: Engine, traffic: TrafficStats, slo: SLO, q: float, lam: float,
                  handoff_s: float, first_decode_s: float, servers: int = 1) -> InstanceState:
    """A prefill instance of a disaggregated layout at ``lam`` requests/s, one of ``servers``:
    whole steps of prompt tokens; TTFT adds the KV handoff and the decode side's first step."""
    p = traffic.mean_prompt_tokens
    budget = engine.max_num_batched_tokens
    full = _step(engine, _mixed_shape(0, 0, budget, p, traffic.pairs_per_prompt_token))
    mu = budget / full
    # only the TTFT and budget limits apply here; TPOT is the decode pool's
    prefill_slo = SLO(ttft_s=slo.ttft_s) if slo.ttft_s is not None else None
    if prefill_slo is None:
        rho = lam * p / mu
        return InstanceState("budget" if rho >= 1 else None, full, 1.0, 0.0)
    return _judge(engine, traffic, prefill_slo, q, lam, full, full, 0.0, mu, 0.0,
                  extra_s=handoff_s + first_decode_s, servers=servers)


def capacity(state: Callable[[float], InstanceState], start_per_s: float = 1.0) -> Estimate:
    """The largest rate whose state fails nothing (bisection in log space), and the limit
    that fails just above it. Rate 0 with the failing limit when even a trickle fails."""
    trickle = state(1e-9)
    if trickle.failed is not None:
        return Estimate(0.0, trickle.failed, trickle.step_s, trickle.ttft_share, trickle.batch)
    lo, hi = 1e-9, start_per_s
    while state(hi).failed is None:
        lo, hi = hi, hi * 4
        if hi > _MAX_RATE_PER_S:
            at = state(lo)
            return Estimate(lo, "budget", at.step_s, at.ttft_share, at.batch)
    for _ in range(60):
        mid = math.sqrt(lo * hi)
        if state(mid).failed is None:
            lo = mid
        else:
            hi = mid
        if hi / lo < 1.001:
            break
    at, above = state(lo), state(hi)
    return Estimate(lo, above.failed or "budget", at.step_s, at.ttft_share, at.batch)
