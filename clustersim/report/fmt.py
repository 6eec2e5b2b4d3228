"""How the report writes numbers: one precision per kind, so that a test can read them back.

    latency   milliseconds, one decimal, thousands separated     1,991.4
    rate      req/s, two decimals                                21.14
    per GPU   req/s per GPU, three decimals                      5.284
    share     percent, one decimal                               90.4%
    money     $/h two decimals, $/1M tokens three                $1.36  $0.077
"""

from __future__ import annotations

DASH = "-"


def ms(seconds: float | None) -> str:
    return DASH if seconds is None else f"{seconds * 1e3:,.1f}"


def triple(p50: float | None, p90: float | None, p99: float | None) -> str:
    return f"{ms(p50)} / {ms(p90)} / {ms(p99)}"


def rate(per_s: float | None) -> str:
    return DASH if per_s is None else f"{per_s:,.2f}"


def per_gpu(per_s: float | None) -> str:
    return DASH if per_s is None else f"{per_s:,.3f}"


def share(fraction: float | None) -> str:
    return DASH if fraction is None else f"{fraction * 100:.1f}%"


def interval(low: float, high: float) -> str:
    return f"{share(low)}-{share(high)}"


def dollars_per_hour(value: float | None) -> str:
    return DASH if value is None else f"${value:,.2f}"


def dollars_per_million(value: float | None) -> str:
    return DASH if value is None else f"${value:,.3f}"


def tokens_per_s(value: float | None) -> str:
    return DASH if value is None else f"{value:,.1f}"


def limit_ms(seconds: float) -> str:
    """An SLO limit: as written, in ms (2000 ms, 0.5 ms)."""
    return f"{seconds * 1e3:,.6g} ms"
