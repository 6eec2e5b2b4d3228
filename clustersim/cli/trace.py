"""``clustersim trace ...``: look at a trace before simulating it."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from clustersim.cli.common import HELP_OPTIONS, user_errors
from clustersim.errors import ClusterSimError
from clustersim.workload.stats import trace_stats
from clustersim.workload.traces import FORMATS, SHIPPED_TRACES, TIME_UNITS_S, load_trace

trace_app = typer.Typer(
    help="Request traces: statistics of a trace file or a shipped trace.",
    no_args_is_help=True,
    context_settings=HELP_OPTIONS,
)

COLUMN_KEYS = ("arrival", "prompt_tokens", "output_tokens")


def _parse_columns(text: str | None) -> dict[str, str] | None:
    """``arrival=ts,prompt_tokens=in,output_tokens=out`` -> a columns mapping."""
    if not text:
        return None
    columns = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or key not in COLUMN_KEYS or not value.strip():
            raise ClusterSimError("--columns", f"expected KEY=COLUMN pairs with KEY in "
                                  f"{', '.join(COLUMN_KEYS)}, got {item!r}")
        columns[key] = value.strip()
    return columns


def _tokens_row(label: str, d: dict[str, float]) -> str:
    return f"{label:<10}{d['mean']:>10.1f}{d['p50']:>10.1f}{d['p99']:>10.1f}{d['max']:>10.0f}"


def format_stats(stats: dict[str, Any]) -> str:
    """The table ``trace stats`` prints."""
    n = stats["num_requests"]
    head = f"{stats['source']} ({stats['format']}): {n:,} requests"
    if stats["num_dropped"]:
        head += f" ({stats['num_dropped']:,} rows with 0 tokens dropped)"
    lines = []
    if stats["span_s"] is None:
        lines += [head, "arrivals: none (a length-only table)"]
    else:
        rate = stats["mean_rate_per_s"]
        cv = stats["interarrival_cv"]
        lines += [
            f"{head} over {stats['span_s']:,.1f} s ({stats['span_s'] / 60:,.1f} min)",
            f"arrivals: mean {'-' if rate is None else f'{rate:.2f}'} req/s, peak minute "
            f"{stats['peak_minute_requests']:,} req ({stats['peak_minute_rate_per_s']:.2f} req/s),"
            f" burstiness (CV of gaps) {'-' if cv is None else f'{cv:.2f}'}",
        ]
    lines += [
        f"{'tokens':<10}{'mean':>10}{'p50':>10}{'p99':>10}{'max':>10}",
        _tokens_row("prompt", stats["prompt_tokens"]),
        _tokens_row("output", stats["output_tokens"]),
    ]
    mix = stats["mix"]
    t = mix["long_prompt_threshold"]
    parts = [f"{label} {mix[key]:,} ({mix[key] / n:.1%})" for key, label in (
        ("prefill_heavy", "prefill-heavy"), ("decode_heavy", "decode-heavy"), ("mixed", "mixed"))]
    lines.append(f"mix (prompt > {t} / output > {t / 8:g} tokens): " + ", ".join(parts))
    reuse = stats.get("prefix_reuse")
    if reuse is not None:
        lines += _reuse_lines(reuse)
    return "\n".join(lines)


def _reuse_lines(reuse: dict[str, Any]) -> list[str]:
    """What ``trace stats`` prints of ``stats.prefix_reuse``."""
    within_n = reuse["within_requests"]
    within_s = reuse["within_s"]
    return [
        f"prefix reuse: {reuse['reused_share']:.1%} of prompt tokens are in blocks that open "
        f"an earlier prompt too ({reuse['block_tokens']}-token blocks)",
        "  last seen within n requests: "
        + "  ".join(f"{int(n):,}: {v:.1%}" for n, v in within_n.items()),
        "  last seen within t seconds:  "
        + "  ".join(f"{float(t):g}: {v:.1%}" for t, v in within_s.items()),
    ]


@trace_app.command("stats")
@user_errors
def stats_cmd(
    file: Annotated[str, typer.Argument(help="Trace file, or a shipped trace's name.")],
    format: Annotated[str, typer.Option(
        "--format", help=f"One of auto, {', '.join(FORMATS)}.")] = "auto",
    columns: Annotated[str | None, typer.Option(
        help="Column names for csv/jsonl or to replace the format's: "
        "arrival=COL,prompt_tokens=COL,output_tokens=COL.")] = None,
    time_unit: Annotated[str | None, typer.Option(
        help=f"Unit of the arrival column: {', '.join(TIME_UNITS_S)}, datetime.")] = None,
    long_prompt_threshold: Annotated[int, typer.Option(
        min=1, help="T of the request mix: prefill-heavy is prompt > T and output <= T/8.")
    ] = 2048,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Rows, span, arrival rate and burstiness, lengths and request mix of a trace; with
    prefix-block ids (Mooncake), how much of the prompts repeats earlier ones, and how far
    back."""
    if format != "auto" and format not in FORMATS:
        raise ClusterSimError("--format", f"unknown format {format!r} (auto, "
                              f"{', '.join(FORMATS)})")
    if time_unit is not None and time_unit not in (*TIME_UNITS_S, "datetime"):
        raise ClusterSimError("--time-unit", f"unknown unit {time_unit!r} "
                              f"({', '.join(TIME_UNITS_S)}, datetime)")
    trace = load_trace(file, format, _parse_columns(columns), time_unit)
    stats = trace_stats(trace, long_prompt_threshold)
    typer.echo(json.dumps(stats, indent=2) if as_json else format_stats(stats))


@trace_app.command("list")
def list_cmd() -> None:
    """The traces shipped with clustersim (use the name as a scenario's trace:)."""
    for name, shipped in SHIPPED_TRACES.items():
        typer.echo(f"{name:<24}{shipped.format:<10}{shipped.description}")
