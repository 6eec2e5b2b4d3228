"""Latency limits a scenario may hold but almost never means: milliseconds typed where
clustersim takes seconds.

vLLM's own benchmark takes its SLO in milliseconds (``vllm bench serve --goodput ttft:2000
tpot:50``; "the value is in milliseconds", vllm/benchmarks/serve.py), and so do the tables
engineers copy limits from, while every time in a scenario is in seconds. ``ttft_s: 2000``
passes every hard limit, and a plan then bisects up to rates where a queue of half an hour
still meets it: minutes of simulation for an answer no one can deploy. So a limit past what
any deployment promises is refused, with its value in milliseconds as a hint, unless the
scenario says it means it (``slo.long_limits: true``)::

    slo.ttft_s             over 10 minutes
    slo.tpot_s, itl_s      over 5 s a token (12 tokens a minute, slower than anyone reads)
    plan.handoff_budget_s  longer than slo.ttft_s, the wait a KV handoff is part of (or over
                           10 minutes without one); checked only where the plan sets it

Rates and run lengths are left alone: a per-second rate cannot be told from a per-minute one
by its value (a fleet may well serve 3,600 requests a second), nor a week-long replay from a
typo; a target that no candidate reaches ends the plan with the closest one's figures.
"""

from __future__ import annotations

MAX_TTFT_S = 600.0
"""Longest plausible time-to-first-token limit: 10 minutes."""
MAX_TOKEN_GAP_S = 5.0
"""Longest plausible time-per-output-token or inter-token limit: 5 s a token."""
OPT_OUT = "slo.long_limits"
"""The field that says a scenario means its long limits."""


def implausible_limits(ttft_s: float | None, tpot_s: float | None, itl_s: float | None,
                       handoff_budget_s: float | None = None) -> list[str]:
    """One ``path: message`` line per limit past its plausible range; ``handoff_budget_s``
    only where the plan sets it (its default is milliseconds, whatever the TTFT limit)."""
    lines = []
    if ttft_s is not None and ttft_s > MAX_TTFT_S:
        lines.append(_line("slo.ttft_s", ttft_s, "is over 10 minutes", MAX_TTFT_S))
    for path, value, what in (("slo.tpot_s", tpot_s, "a token"),
                              ("slo.itl_s", itl_s, "between two tokens")):
        if value is not None and value > MAX_TOKEN_GAP_S:
            lines.append(_line(path, value, f"{what} is over {MAX_TOKEN_GAP_S:g} s",
                               MAX_TOKEN_GAP_S))
    if handoff_budget_s is not None:
        if ttft_s is not None and handoff_budget_s > ttft_s:
            lines.append(_line("plan.handoff_budget_s", handoff_budget_s, f"is longer than "
                               f"slo.ttft_s ({ttft_s:g} s), the wait for the first token that "
                               "a KV handoff is part of", ttft_s))
        elif handoff_budget_s > MAX_TTFT_S:
            lines.append(_line("plan.handoff_budget_s", handoff_budget_s, "is over 10 minutes",
                               MAX_TTFT_S))
    return lines


def _line(path: str, value: float, why: str, most: float) -> str:
    field = path.rpartition(".")[2]
    as_ms = value / 1000
    hint = (f"; did you mean milliseconds ({field}: {float(f'{as_ms:.6g}')!r})? If"
            if as_ms <= most else "; if")
    return f"{path}: {value:g} s {why}{hint} you mean it, set {OPT_OUT}: true"
