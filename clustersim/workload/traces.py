"""Trace files: read the formats users have into one :class:`Trace`, strictly.

A trace is a table of requests: when each arrived (absent for length-only tables such as
ShareGPT's), its prompt and output lengths, and for Mooncake the prefix-block ids of its prompt.
Every problem in a file is an :class:`InputError` at ``file:line``; nothing is skipped silently
(BurstGPT's failed requests, logged with 0 tokens, are dropped and counted in ``num_dropped``).

Formats are plain data in :data:`FORMATS`; ``auto`` picks the first whose columns the file has.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from clustersim.errors import InputError
from clustersim.inputs import MAX_TRACE_BYTES, parse_json, read_text
from clustersim.limits import MAX_NUM_REQUESTS, MAX_TIME_S, MAX_TOKENS, TIME_REASON, TOKENS_REASON


@dataclass(frozen=True, slots=True)
class TraceFormat:
    """How one trace format stores a request; column names are CSV headers or JSON keys."""

    file_kind: str
    """``csv`` (with a header line) or ``jsonl`` (one JSON object per line)."""
    arrival: str | None
    prompt_tokens: str | None
    output_tokens: str | None
    time_unit: str = "s"
    hash_ids: str | None = None
    """Key of the prompt's prefix-block ids (Mooncake)."""
    hash_block_tokens: int = 0
    """Tokens per prefix-block id."""
    request_id: str | None = None
    drop_zero_lengths: bool = False
    """Drop rows with a 0-token prompt or output (BurstGPT logs failed requests that way)."""
    description: str = ""


FORMATS: dict[str, TraceFormat] = {
    "azure": TraceFormat(
        "csv", "TIMESTAMP", "ContextTokens", "GeneratedTokens", "datetime",
        description="Azure LLM inference trace 2023/2024 (TIMESTAMP, ContextTokens, "
        "GeneratedTokens)",
    ),
    "mooncake": TraceFormat(
        "jsonl", "timestamp", "input_length", "output_length", "ms",
        hash_ids="hash_ids", hash_block_tokens=512,
        description="Mooncake FAST'25 JSONL (timestamp ms, input_length, output_length, "
        "hash_ids of 512-token blocks)",
    ),
    "vidur": TraceFormat(
        "csv", "arrived_at", "num_prefill_tokens", "num_decode_tokens", "s",
        description="Vidur processed trace CSV (arrived_at s, num_prefill_tokens, "
        "num_decode_tokens)",
    ),
    "vllm": TraceFormat(
        "jsonl", "arrival_time", "input_toks", "output_toks", "s", request_id="request_id",
        description="vLLM per-request benchmark records JSONL (request_id, input_toks, "
        "output_toks, arrival_time s)",
    ),
    "llmservingsim": TraceFormat(
        "jsonl", "arrival_time_ns", "input_toks", "output_toks", "ns",
        description="LLMServingSim workload JSONL (input_toks, output_toks, arrival_time_ns)",
    ),
    "burstgpt": TraceFormat(
        "csv", "Timestamp", "Request tokens", "Response tokens", "s", drop_zero_lengths=True,
        description="BurstGPT CSV (Timestamp s, Request tokens, Response tokens); failed "
        "requests (0 tokens) are dropped",
    ),
    "lengths": TraceFormat(
        "csv", None, "num_prefill_tokens", "num_decode_tokens",
        description="length-only table (ShareGPT/arXiv/BWB stats: num_prefill_tokens, "
        "num_decode_tokens)",
    ),
    "csv": TraceFormat("csv", None, None, None, description="any CSV, with columns: given"),
    "jsonl": TraceFormat("jsonl", None, None, None, description="any JSONL, with columns: given"),
}

TIME_UNITS_S = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}


@dataclass(frozen=True, slots=True)
class ShippedTrace:
    file: str
    format: str
    description: str


SHIPPED_TRACES: dict[str, ShippedTrace] = {
    "azure-conv-2023": ShippedTrace(
        "azure_conv_2023.csv", "azure",
        "Azure LLM inference 2023, conversation: 19,366 requests in 58 min (CC-BY-4.0)",
    ),
    "azure-code-2023": ShippedTrace(
        "azure_code_2023.csv", "azure",
        "Azure LLM inference 2023, code: 8,819 requests in 57 min, very bursty (CC-BY-4.0)",
    ),
    "mooncake-conversation": ShippedTrace(
        "mooncake_conversation.jsonl", "mooncake",
        "Mooncake FAST'25 conversation: 12,031 long-context requests in 59 min, prefix-block "
        "ids (Apache-2.0)",
    ),
    "sharegpt-lengths": ShippedTrace(
        "sharegpt_lengths.csv", "lengths",
        "ShareGPT conversations, Llama-2 token counts: 30,731 (prompt, output) pairs, no "
        "arrival times, totals <= 8K (Apache-2.0)",
    ),
}
"""Traces packaged with clustersim (``clustersim/data/traces``; attribution in NOTICE)."""


@dataclass(frozen=True, slots=True)
class Trace:
    """The requests of a trace file, in file order (which is arrival order)."""

    source: str
    """The file path or shipped name, as given; used in messages."""
    format: str
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    lines: np.ndarray
    """The file line of each request."""
    arrival_s: np.ndarray | None = None
    """Seconds after the first request's arrival; None for a length-only table."""
    hash_ids: tuple[tuple[int, ...], ...] | None = None
    hash_block_tokens: int = 0
    request_ids: tuple[str, ...] | None = None
    num_dropped: int = 0
    """Rows left out by the format's rule (BurstGPT's failed requests)."""

    def __len__(self) -> int:
        return len(self.prompt_tokens)


# ------------------------------------------------------------------ locating
def is_shipped(trace: str | os.PathLike) -> bool:
    return isinstance(trace, str) and trace in SHIPPED_TRACES


def resolve_trace_path(trace: str | os.PathLike, base_dir: str | os.PathLike | None) -> str:
    """A user's trace path made absolute against ``base_dir``; shipped names stay as they are."""
    if is_shipped(trace):
        return str(trace)
    path = Path(trace).expanduser()
    if base_dir is not None and not path.is_absolute():
        path = Path(base_dir) / path
    return str(path)


def _trace_text(trace: str | os.PathLike, base_dir: str | os.PathLike | None, name: str) -> str:
    """The text of a shipped trace or of a user's file (decompressed if it ends in .gz)."""
    if is_shipped(trace):
        resource = resources.files("clustersim") / "data" / "traces" / SHIPPED_TRACES[trace].file
        with resources.as_file(resource) as path:
            return read_text(path, "trace", max_bytes=MAX_TRACE_BYTES, where=name)
    path = Path(resolve_trace_path(trace, base_dir))
    if path.is_dir() or not path.exists():  # a pipe (`<(zcat t.gz)`) is read like a file
        shipped = ", ".join(SHIPPED_TRACES)
        reason = "a folder, not a file" if path.exists() else "no such file"
        raise InputError(name, f"{reason}, and not a shipped trace ({shipped})")
    return read_text(path, "trace", max_bytes=MAX_TRACE_BYTES, where=name)


# ------------------------------------------------------------------- reading
def load_trace(
    trace: str | os.PathLike,
    format: str = "auto",
    columns: Mapping[str, str | None] | Any | None = None,
    time_unit: str | None = None,
    *,
    base_dir: str | os.PathLike | None = None,
) -> Trace:
    """Read a trace file (or a shipped trace by name) into a :class:`Trace`.

    ``columns`` (``arrival``, ``prompt_tokens``, ``output_tokens``; a mapping or a
    ``TraceColumns``) replaces the format's column names; ``time_unit`` its time unit. A
    relative path is taken relative to ``base_dir`` (default: the working directory).
    """
    if columns is not None and not isinstance(columns, Mapping):
        columns = columns.model_dump()
    overrides = {k: v for k, v in (columns or {}).items() if v is not None}
    if is_shipped(trace) and format == "auto":
        format = SHIPPED_TRACES[str(trace)].format
    name = str(trace)
    if not name:
        raise InputError("trace", "empty trace name: give a file path or a shipped trace's "
                         f"name ({', '.join(SHIPPED_TRACES)})")
    text = _trace_text(trace, base_dir, name)
    if format == "auto":
        format = _detect(text, name, overrides)
    fmt = FORMATS[format]
    if overrides or time_unit:
        fields = {k: overrides.get(k, getattr(fmt, k))
                  for k in ("arrival", "prompt_tokens", "output_tokens")}
        fmt = TraceFormat(**{**_as_dict(fmt), **fields, "time_unit": time_unit or fmt.time_unit})
    if fmt.prompt_tokens is None or fmt.output_tokens is None:
        raise InputError(name, f"format {format} needs columns for prompt_tokens and "
                         "output_tokens")
    rows = _read_csv(text, name, fmt) if fmt.file_kind == "csv" else _read_jsonl(text, name, fmt)
    return _build(name, format, fmt, rows)


def _as_dict(fmt: TraceFormat) -> dict[str, Any]:
    return {k: getattr(fmt, k) for k in TraceFormat.__slots__}


def _lines(text: str) -> Iterator[str]:
    """The lines of ``text``, as ``text.split("\\n")`` gives them, one at a time: 64M rows
    split at once take gigabytes before the request limit is checked."""
    start = 0
    while (end := text.find("\n", start)) >= 0:
        yield text[start:end]
        start = end + 1
    yield text[start:]


def _first_record(text: str) -> tuple[str, str]:
    """(file kind, first non-blank line) of a trace's text."""
    for line in _lines(text):
        if line.strip():
            return ("jsonl" if line.lstrip().startswith("{") else "csv"), line
    return "csv", ""


def _detect(text: str, name: str, overrides: Mapping[str, str]) -> str:
    kind, first = _first_record(text)
    if not first:
        raise InputError(f"{name}:1", "empty file")
    if kind == "jsonl":
        try:
            keys = set(json.loads(first))
        except (ValueError, TypeError, RecursionError):
            keys = set()
    else:
        try:
            keys = {key.strip() for key in next(csv.reader([first]))}
        except csv.Error:
            keys = set()
    # A format whose columns are all there; else the one with most of them, so that the
    # reader can name the missing column; else the generic reader if columns were given.
    best, best_found = None, 0
    for format, fmt in FORMATS.items():
        needed = {c for c in (fmt.arrival, fmt.prompt_tokens, fmt.output_tokens) if c}
        if fmt.file_kind != kind or not needed:
            continue
        if needed <= keys:
            return format
        if len(needed & keys) > best_found:
            best, best_found = format, len(needed & keys)
    if overrides.get("prompt_tokens") and overrides.get("output_tokens"):
        return kind
    if best is not None:
        return best
    shown = sorted(map(str, keys))[:10]
    raise InputError(f"{name}:1", f"cannot tell the trace format from {shown}; give "
                     f"the format ({', '.join(FORMATS)}; csv and jsonl with columns)")


@dataclass(slots=True)
class _Rows:
    """Raw column values of a file's requests and the line each came from."""

    lines: np.ndarray
    values: dict[str, list[Any] | np.ndarray]
    all_text: bool = False
    """Every value is a string (a CSV file, read as text): no JSON type to check."""


def _too_many(name: str, line: int) -> InputError:
    return InputError(f"{name}:{line}", f"more than {MAX_NUM_REQUESTS:,} requests: a run holds "
                      "every request in memory; cut the trace (its first rows: head -n)")


def _read_csv(text: str, name: str, fmt: TraceFormat) -> _Rows:
    # pandas reads every line after the header as a row, a blank one too: a file of more
    # lines is refused before pandas holds ten million rows of it as strings (a quoted value
    # over several lines, which no trace has, would count once a line here)
    if text.count("\n") - 1 + (not text.endswith("\n")) > MAX_NUM_REQUESTS:
        raise _too_many(name, MAX_NUM_REQUESTS + 2)
    try:
        # bytes: a StringIO holds text as 4 bytes a character
        frame = pd.read_csv(io.BytesIO(text.encode()), dtype=str, keep_default_na=False,
                            skip_blank_lines=False, nrows=MAX_NUM_REQUESTS + 1)
    except pd.errors.EmptyDataError:
        raise InputError(f"{name}:1", "empty file") from None
    except (pd.errors.ParserError, csv.Error, ValueError) as error:
        match = re.search(r"line (\d+)", str(error))
        where = f"{name}:{match.group(1)}" if match else name
        message = " ".join(str(error).split(". ")[-1].split())
        raise InputError(where, f"malformed CSV: {message}") from None
    if len(frame) > MAX_NUM_REQUESTS:
        raise _too_many(name, MAX_NUM_REQUESTS + 2)
    wanted = [c for c in (fmt.arrival, fmt.prompt_tokens, fmt.output_tokens) if c]
    missing = [c for c in wanted if c not in frame.columns]
    if missing:
        shown = ", ".join(map(str, frame.columns[:20]))
        more = f" and {len(frame.columns) - 20:,} more" if len(frame.columns) > 20 else ""
        raise InputError(f"{name}:1", f"missing column {missing[0]!r} (columns: {shown}{more})")
    lines = np.arange(len(frame), dtype=np.int64) + 2
    blank = (frame.fillna("") == "").all(axis=1).to_numpy()  # blank lines are layout, not rows
    frame, lines = frame[~blank], lines[~blank]
    return _Rows(lines, {c: _column(frame, c) for c in wanted}, all_text=True)


def _column(frame: pd.DataFrame, column: str) -> np.ndarray:
    values = frame[column]
    if isinstance(values, pd.DataFrame):  # a header that names the column twice: the first
        values = values.iloc[:, 0]
    return values.to_numpy(dtype=object)


def _read_jsonl(text: str, name: str, fmt: TraceFormat) -> _Rows:
    keys = [k for k in (fmt.arrival, fmt.prompt_tokens, fmt.output_tokens, fmt.hash_ids,
                        fmt.request_id) if k]
    values: dict[str, list[Any]] = {k: [] for k in keys}
    lines: list[int] = []
    for number, line in enumerate(_lines(text), start=1):
        if not line.strip():
            continue
        if len(lines) == MAX_NUM_REQUESTS:
            raise _too_many(name, number)
        record = parse_json(line, name, line=number)
        if not isinstance(record, dict):
            raise InputError(f"{name}:{number}", "expected a JSON object per line")
        for key in keys:
            if key not in record:
                raise InputError(f"{name}:{number}", f"missing field {key!r}")
            values[key].append(record[key])
        lines.append(number)
    return _Rows(np.array(lines, dtype=np.int64), values)


# ---------------------------------------------------------------- checking
def _bad(name: str, rows: _Rows, index: int, message: str) -> InputError:
    return InputError(f"{name}:{rows.lines[index]}", message)


def _check_present(name: str, rows: _Rows, column: str) -> None:
    """A short CSV row leaves NaN in its last columns; an empty field is ''; JSON may say null."""
    values = pd.Series(rows.values[column], dtype=object)
    missing = np.flatnonzero((values.isna() | values.eq("")).to_numpy(bool))
    if missing.size:
        raise _bad(name, rows, int(missing[0]), f"{column} is missing")


def _numbers(name: str, rows: _Rows, column: str) -> np.ndarray:
    """A column as floats; a JSON value that is not a number or text is refused (``true``
    would otherwise count as 1, a list as missing)."""
    _check_present(name, rows, column)
    raw = rows.values[column]
    for i, value in enumerate(() if rows.all_text else raw):
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise _bad(name, rows, i, f"{column} must be a number, got {_short(value)}")
    return pd.to_numeric(pd.Series(raw, dtype=object), errors="coerce").to_numpy(float)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _tokens(name: str, rows: _Rows, column: str) -> np.ndarray:
    raw = rows.values[column]
    plain = _plain_counts(name, rows, column)
    if plain is not None:
        return plain
    numbers = _numbers(name, rows, column)
    with np.errstate(invalid="ignore"):
        bad = np.flatnonzero(np.isnan(numbers) | (np.isfinite(numbers)
                                                  & (numbers != np.round(numbers))))
    if bad.size:
        i = int(bad[0])
        raise _bad(name, rows, i, f"{column} {_short(raw[i])} is not a whole number of tokens")
    negative = np.flatnonzero(numbers < 0)
    if negative.size:
        i = int(negative[0])
        raise _bad(name, rows, i, f"{column} is negative ({str(raw[i])[:40]})")
    # checked before the cast: a float above 2^63 would wrap to a negative int64
    huge = np.flatnonzero(numbers > MAX_TOKENS)
    if huge.size:
        i = int(huge[0])
        raise _bad(name, rows, i, f"{column} {_short(raw[i])} is more than {MAX_TOKENS:,} "
                   f"tokens ({TOKENS_REASON})")
    return numbers.astype(np.int64)


def _plain_counts(name: str, rows: _Rows, column: str) -> np.ndarray | None:
    """A CSV column of nothing but ASCII digits (what a trace's token columns are) read as
    integers at once; None for anything else, which :func:`_tokens` reads (and refuses)
    value by value. Digits only, so every value means what the careful reading makes of it."""
    if not rows.all_text:
        return None
    raw = rows.values[column]
    try:  # (a short row's NaN fails the join, an empty field the cast: read carefully then)
        text = "".join(raw)
        if not (text.isascii() and text.isdigit()):
            return None
        numbers = raw.astype(np.int64)
    except (TypeError, ValueError, OverflowError):
        return None
    return None if (numbers > MAX_TOKENS).any() else numbers


def _times_s(name: str, rows: _Rows, column: str, unit: str) -> np.ndarray:
    _check_present(name, rows, column)
    raw = rows.values[column]
    if unit == "datetime":
        series = pd.Series(raw, dtype=object)
        stamps = pd.to_datetime(series.astype(str), format="ISO8601", errors="coerce", utc=True)
        ok = stamps.notna().to_numpy()
        ns = stamps.to_numpy(dtype="datetime64[ns]").astype(np.int64)
        # checked in float nanoseconds: the int64 difference of dates 300 years apart would wrap
        numbers = ns.astype(float)
        scale = 1e-9
    else:
        numbers = _numbers(name, rows, column)
        ok = np.isfinite(numbers)
        scale = TIME_UNITS_S[unit]
    bad = np.flatnonzero(~ok)
    if bad.size:
        i = int(bad[0])
        kind = "an ISO 8601 time" if unit == "datetime" else f"a number ({unit})"
        raise _bad(name, rows, i, f"{column} {_short(raw[i])} is not {kind}")
    with np.errstate(over="ignore", invalid="ignore"):
        times = (numbers - numbers[0]) * scale
        steps = np.diff(times)
    backwards = np.flatnonzero(steps < 0)
    if backwards.size:
        i = int(backwards[0]) + 1
        raise _bad(name, rows, i, f"{column} {_short(raw[i])} is earlier than the previous "
                   f"row's {_short(raw[i - 1])}: rows must be in arrival order")
    late = np.flatnonzero(~(times <= MAX_TIME_S))
    if late.size:
        i = int(late[0])
        raise _bad(name, rows, i, f"{column} {_short(raw[i])} is more than {MAX_TIME_S:g} s "
                   f"after the first request ({TIME_REASON})")
    if unit == "datetime":
        # exact: the span is under MAX_TIME_S now, so the int64 difference cannot wrap
        return (ns - ns[0]) / 1e9
    return times


def _hash_ids(name: str, rows: _Rows, fmt: TraceFormat, prompts: np.ndarray):
    assert fmt.hash_ids is not None
    result = []
    for i, ids in enumerate(rows.values[fmt.hash_ids]):
        if not isinstance(ids, list) or not all(
            isinstance(x, int) and not isinstance(x, bool) for x in ids
        ):
            raise _bad(name, rows, i, f"{fmt.hash_ids} must be a list of integers")
        expected = -(-int(prompts[i]) // fmt.hash_block_tokens)
        if len(ids) != expected:
            raise _bad(name, rows, i, f"{fmt.hash_ids} has {len(ids)} ids for {prompts[i]} "
                       f"prompt tokens; expected {expected} ({fmt.hash_block_tokens} tokens each)")
        result.append(tuple(ids))
    return tuple(result)


def _build(name: str, format: str, fmt: TraceFormat, rows: _Rows) -> Trace:
    if len(rows.lines) == 0:
        raise InputError(f"{name}:1", "no requests in the file")
    assert fmt.prompt_tokens is not None and fmt.output_tokens is not None
    prompts = _tokens(name, rows, fmt.prompt_tokens)
    outputs = _tokens(name, rows, fmt.output_tokens)
    arrival = _times_s(name, rows, fmt.arrival, fmt.time_unit) if fmt.arrival else None
    hash_ids = _hash_ids(name, rows, fmt, prompts) if fmt.hash_ids else None
    request_ids = None
    if fmt.request_id:
        request_ids = tuple(str(x) for x in rows.values[fmt.request_id])
        seen: dict[str, int] = {}
        for i, rid in enumerate(request_ids):
            if rid in seen:
                raise _bad(name, rows, i, f"duplicate {fmt.request_id} {rid!r} (also line "
                           f"{rows.lines[seen[rid]]})")
            seen[rid] = i
    keep = np.ones(len(prompts), dtype=bool)
    if fmt.drop_zero_lengths:
        keep = (prompts > 0) & (outputs > 0)
    else:
        for column, values in ((fmt.prompt_tokens, prompts), (fmt.output_tokens, outputs)):
            zero = np.flatnonzero(values == 0)
            if zero.size:
                raise _bad(name, rows, int(zero[0]), f"{column} is 0; a request has at least "
                           "1 prompt and 1 output token")
    if not keep.any():
        raise InputError(f"{name}:1", "no requests with non-zero lengths in the file")
    index = np.flatnonzero(keep)
    if arrival is not None:
        arrival = arrival[index] - arrival[index[0]]
    return Trace(
        source=name,
        format=format,
        prompt_tokens=prompts[index],
        output_tokens=outputs[index],
        lines=rows.lines[index],
        arrival_s=arrival,
        hash_ids=None if hash_ids is None else tuple(hash_ids[i] for i in index),
        hash_block_tokens=fmt.hash_block_tokens,
        request_ids=None if request_ids is None else tuple(request_ids[i] for i in index),
        num_dropped=int(len(keep) - len(index)),
    )
