"""Trace files: read the formats users have into one :class:`Trace`, strictly.

A trace is a table of requests: when each arrived (absent for length-only tables such as
ShareGPT's), its prompt and output lengths, and for Mooncake the prefix-block ids of its prompt.
Every problem in a file is an :class:`InputError` at ``file:line``; nothing is skipped silently
(BurstGPT's failed requests, logged with 0 tokens, are dropped and counted in ``num_dropped``).

Formats are plain data in :data:`FORMATS`; ``auto`` picks the first whose columns the file has.

A file is read about a MiB of whole lines at a time (``inputs.read_chunks``): each chunk's rows
are checked and kept as numpy arrays before the next is read, and the request limit is checked
before a chunk's rows are parsed, so that memory follows the requests kept, not the file.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import re
import warnings
from collections.abc import Generator, Iterator, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from clustersim.errors import InputError
from clustersim.inputs import MAX_TRACE_BYTES, MIB, decode_text, parse_json, read_chunks
from clustersim.limits import MAX_NUM_REQUESTS, MAX_TIME_S, MAX_TOKENS, TIME_REASON, TOKENS_REASON

if TYPE_CHECKING:  # pandas is imported where a trace is read: 0.2 s a start without one
    import pandas as pd


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


def _trace_blocks(trace: str | os.PathLike, base_dir: str | os.PathLike | None,
                  name: str) -> Generator[bytes, None, None]:
    """The bytes of a shipped trace or of a user's file (decompressed if it ends in .gz), a
    MiB at a time."""
    if is_shipped(trace):
        shipped = SHIPPED_TRACES[str(trace)].file
        resource = resources.files("clustersim") / "data" / "traces" / shipped
        with resources.as_file(resource) as path:
            yield from read_chunks(path, "trace", max_bytes=MAX_TRACE_BYTES, where=name)
        return
    path = Path(resolve_trace_path(trace, base_dir))
    if path.is_dir() or not path.exists():  # a pipe (`<(zcat t.gz)`) is read like a file
        shipped = ", ".join(SHIPPED_TRACES)
        reason = "a folder, not a file" if path.exists() else "no such file"
        raise InputError(name, f"{reason}, and not a shipped trace ({shipped})")
    yield from read_chunks(path, "trace", max_bytes=MAX_TRACE_BYTES, where=name)


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
    with contextlib.closing(_Chunks(_trace_blocks(trace, base_dir, name), name)) as chunks:
        try:
            return _read(chunks, name, format, overrides, time_unit)
        except _PastLimit:
            raise
        except InputError:
            if not is_shipped(trace) and Path(name).suffix == ".gz":
                # a .gz's checksum is checked at its end: a corrupt file says so, rather than
                # what its damaged bytes decompressed to
                chunks.drain()
            raise


def _read(chunks: _Chunks, name: str, format: str, overrides: Mapping[str, str],
          time_unit: str | None) -> Trace:
    """The trace in ``chunks`` (see :func:`load_trace`)."""
    first = chunks.first_record()
    if first is None:
        raise InputError(f"{name}:1", "empty file")
    if format == "auto":
        format = _detect(*first, name, overrides)
    fmt = FORMATS[format]
    if overrides or time_unit:
        fields = {k: overrides.get(k, getattr(fmt, k))
                  for k in ("arrival", "prompt_tokens", "output_tokens")}
        fmt = TraceFormat(**{**_as_dict(fmt), **fields,
                             "time_unit": time_unit or fmt.time_unit})
    if fmt.prompt_tokens is None or fmt.output_tokens is None:
        raise InputError(name, f"format {format} needs columns for prompt_tokens and "
                         "output_tokens")
    requests = _Requests(name, format, fmt)
    if fmt.file_kind == "csv":
        _read_csv(chunks, first[1], requests)
    else:
        _read_jsonl(chunks, requests)
    return requests.trace()


def _as_dict(fmt: TraceFormat) -> dict[str, Any]:
    return {k: getattr(fmt, k) for k in TraceFormat.__slots__}


MAX_LINE_BYTES = 64 * MIB
"""Longest line of a trace (a Mooncake line of a 10M-token prompt is about 200 KB): a file
with a longer one is not a trace, and the reader would hold all of it at once."""
_UTF8_BOM = b"\xef\xbb\xbf"
_BLANK_LINES = re.compile(rb"(?:[ \t\r\f\v]*\n)+")
_ROW_START = re.compile(rb"^(?!\r?(?:\n|\Z))", re.MULTILINE)
"""The start of a line that is not empty: a CSV row (or a line of empty fields, which is
dropped as blank)."""


class _Chunks:
    """A trace's bytes as chunks of whole lines (about a MiB each), each with the number of its
    first line: the reader holds one chunk at a time, never the whole file. A byte-order mark
    at the start is dropped; a CSV chunk ends outside quotes, so that a quoted value over
    several lines (which no trace has) is parsed whole."""

    def __init__(self, blocks: Generator[bytes, None, None], name: str) -> None:
        self._blocks = blocks
        self._name = name
        self._pending = b""
        """Bytes read and not yet handed out; they start at a line's start."""
        self._line = 1
        """The number of the line that ``_pending`` starts with."""
        self._started = False
        self.csv = False

    def close(self) -> None:
        self._blocks.close()

    def drain(self) -> None:
        """Read the rest of the file for nothing (its errors are raised)."""
        for _ in self._blocks:
            pass

    def _next_block(self) -> bytes | None:
        block = next(self._blocks, None)
        if block is not None and not self._started:
            while len(block) < len(_UTF8_BOM) and (more := next(self._blocks, None)):
                block += more
            self._started = True
            block = block.removeprefix(_UTF8_BOM)
        return block

    def _check_last_line(self, parts: list[bytes], size: int) -> None:
        """Refuse a last line of ``parts`` (``size`` bytes in all, from the start of line
        ``_line`` on) longer than :data:`MAX_LINE_BYTES`: its end could be a gigabyte away."""
        if size <= MAX_LINE_BYTES:
            return
        data = b"".join(parts)
        start = data.rfind(b"\n") + 1
        if len(data) - start > MAX_LINE_BYTES:
            most = (f"{MAX_LINE_BYTES // MIB} MiB" if MAX_LINE_BYTES % MIB == 0
                    else f"{MAX_LINE_BYTES:,} bytes")
            line = self._line + data.count(b"\n", 0, start)
            raise InputError(f"{self._name}:{line}", f"a line longer than {most}: not a trace "
                             "(one request a line)")

    def first_record(self) -> tuple[str, int] | None:
        """The first line that is not blank and its number, or None if there is none. The
        blank lines before it are passed; it stays to be read."""
        pos = 0
        while True:
            blank = _BLANK_LINES.match(self._pending, pos)
            if blank:
                self._line += self._pending.count(b"\n", pos, blank.end())
                pos = blank.end()
            end = self._pending.find(b"\n", pos)
            if end < 0:
                self._pending = self._pending[pos:]
                pos = 0
                self._check_last_line([self._pending], len(self._pending))
                block = self._next_block()
                if block is not None:
                    self._pending += block
                    continue
                end = len(self._pending)
                if end == 0:
                    return None
            line = _text(self._pending[pos:end], self._name, self._line)
            if line.strip():
                self._pending = self._pending[pos:]
                return line, self._line
            self._line += 1  # a line of other white space
            pos = end + 1

    def take_line(self) -> bytes:
        """The next line (one that :meth:`first_record` found), without its end; a CSV
        header may end in a lone CR (an old Mac file, which pandas reads as lines too)."""
        end = self._pending.find(b"\n")
        end = len(self._pending) if end < 0 else end
        if self.csv and (cr := self._pending.find(b"\r", 0, end - 1)) >= 0:
            end = cr
        line, self._pending = self._pending[:end], self._pending[end + 1:]
        self._line += 1
        return line

    def __iter__(self) -> Iterator[tuple[int, bytes]]:
        """The rest of the file: (number of its first line, whole lines) chunks."""
        parts, size = [self._pending], len(self._pending)
        self._pending = b""
        while (block := self._next_block()) is not None:
            parts.append(block)
            size += len(block)
            if b"\n" not in block:
                self._check_last_line(parts, size)
                continue
            data = b"".join(parts)
            cut = data.rfind(b"\n") + 1
            if self.csv and data.count(b'"', 0, cut) % 2 and size <= MAX_LINE_BYTES:
                parts = [data]  # the cut is inside a quoted value: read on to its end
                continue
            parts, size = [data[cut:]], size - cut
            yield self._emit(data[:cut])
        data = b"".join(parts)
        if data:
            self._check_last_line([data], len(data))
            yield self._emit(data)

    def _emit(self, data: bytes) -> tuple[int, bytes]:
        first = self._line
        self._line += data.count(b"\n")
        return first, data


def _text(data: bytes, name: str, first_line: int) -> str:
    """UTF-8 ``data`` (whole lines from ``first_line`` on) as text; a bad byte is located."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        decode_text(data, name, first_line=first_line)  # raises, with the line and column
        raise


def _detect(first: str, line: int, name: str, overrides: Mapping[str, str]) -> str:
    """The format of a file whose first record is ``first``, on line ``line``."""
    kind = "jsonl" if first.lstrip().startswith("{") else "csv"
    if kind == "jsonl":
        try:
            keys = set(json.loads(first))
        except (ValueError, TypeError, RecursionError):
            keys = set()
    else:
        try:
            keys = {key.strip() for key in next(csv.reader([first]))}
        except (csv.Error, StopIteration):
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
    raise InputError(f"{name}:{line}", f"cannot tell the trace format from {shown}; give "
                     f"the format ({', '.join(FORMATS)}; csv and jsonl with columns)")


@dataclass(slots=True)
class _Rows:
    """Raw column values of a chunk's requests and the line each came from."""

    lines: np.ndarray
    values: dict[str, list[Any] | np.ndarray]
    all_text: bool = False
    """Every value is a string (a CSV file, read as text): no JSON type to check."""


class _PastLimit(InputError):
    """A trace of more requests than a run holds: refused without reading the rest."""


def _too_many(name: str, line: int) -> InputError:
    return _PastLimit(f"{name}:{line}", f"more than {MAX_NUM_REQUESTS:,} requests: a run holds "
                      "every request in memory; cut the trace (its first rows: head -n)")


def _read_csv(chunks: _Chunks, header_line: int, requests: _Requests) -> None:
    """The rows of a CSV file, whose header is the next line of ``chunks``, read by pandas a
    chunk at a time (with the header in front) into ``requests``. The request limit is checked
    on each chunk's lines before pandas reads it."""
    name, fmt = requests.name, requests.fmt
    chunks.csv = True
    header = chunks.take_line() + b"\n"
    wanted = [c for c in (fmt.arrival, fmt.prompt_tokens, fmt.output_tokens) if c]
    checked = False
    for first, data in chunks:
        if not data.isascii():
            _text(data, name, first)
        # pandas reads every line after the header as a row, a blank one too (dropped below):
        # a chunk that would pass the limit is refused at the line of the first request past
        # it before pandas holds its rows as strings (a line of empty fields, dropped as
        # blank, and each line of a quoted value count as rows here: never fewer than pandas)
        room = MAX_NUM_REQUESTS - requests.count
        num_lines = data.count(b"\n") + (not data.endswith(b"\n"))
        if num_lines > room:
            line = _nth_row_line(data, first, room + 1)
            if line is not None:
                raise _too_many(name, line)
        frame = _csv_frame(header + data, name, header_line, first)
        if not checked:
            _check_columns(frame, wanted, name, header_line)
            checked = True
        if len(frame) == num_lines:
            lines = np.arange(len(frame), dtype=np.int64) + first
        else:  # a quoted value over several lines
            lines = _row_lines(data, name, first, len(frame))
        blank = (frame.fillna("") == "").all(axis=1).to_numpy()  # blank lines are layout
        if blank.any():
            frame, lines = frame[~blank], lines[~blank]
        if len(lines) > room:  # rows that end in a lone CR, which the count above missed
            raise _too_many(name, int(lines[room]))
        requests.add(_Rows(lines, {c: _column(frame, c) for c in wanted}, all_text=True))
    if not checked:  # a header and nothing else
        _check_columns(_csv_frame(header, name, header_line, header_line + 1), wanted, name,
                       header_line)


def _nth_row_line(data: bytes, first_line: int, n: int) -> int | None:
    """The line of the ``n``-th line of ``data`` that is not empty, or None if it has fewer."""
    for count, match in enumerate(_ROW_START.finditer(data), start=1):
        if count == n:
            return first_line + data.count(b"\n", 0, match.start())
    return None


def _row_lines(data: bytes, name: str, first_line: int, num_rows: int) -> np.ndarray:
    """The line each CSV row of ``data`` starts on, where some row is more than one line;
    counted by Python's CSV reader (one line a row if it sees another number of rows)."""
    reader = csv.reader(io.StringIO(_text(data, name, first_line), newline=""))
    starts: list[int] = []
    done = 0  # lines the reader has passed
    try:
        for _ in reader:
            starts.append(first_line + done)
            done = reader.line_num
    except csv.Error:
        starts = []
    if len(starts) != num_rows:
        return np.arange(num_rows, dtype=np.int64) + first_line
    return np.array(starts, dtype=np.int64)


def _csv_frame(data: bytes, name: str, header_line: int, first_line: int) -> pd.DataFrame:
    """pandas' reading of a header line and the lines after it (the first is ``first_line``
    of the file), every value a string; its errors located at the file's lines."""
    import pandas as pd

    def file_line(number: int) -> int:  # pandas' line number in ``data``, from 1
        return header_line if number <= 1 else first_line + number - 2

    try:
        # a first row of more fields than the header would make pandas take the first ones
        # for an index and shift the columns (index_col=None), or drop the last ones with a
        # warning (index_col=False): an error, as on any other row
        with warnings.catch_warnings():
            warnings.simplefilter("error", pd.errors.ParserWarning)
            return pd.read_csv(io.BytesIO(data), dtype=str, keep_default_na=False,
                               skip_blank_lines=False, index_col=False)
    except pd.errors.ParserWarning:
        raise _too_many_fields(data, name, header_line, first_line) from None
    except pd.errors.EmptyDataError:
        raise InputError(f"{name}:{header_line}", "empty file") from None
    except (pd.errors.ParserError, csv.Error, ValueError) as error:
        message = " ".join(str(error).split(". ")[-1].split())
        found: list[int] = []

        def relocate(match: re.Match[str]) -> str:  # "line 3" in data; "row 2" from 0
            number = int(match.group(2)) + (match.group(1) == "row")
            found.append(file_line(number))
            return f"line {found[-1]}"

        message = re.sub(r"\b(line|row) (\d+)", relocate, message)
        where = f"{name}:{found[0]}" if found else name
        raise InputError(where, f"malformed CSV: {message}") from None


def _too_many_fields(data: bytes, name: str, header_line: int, first_line: int) -> InputError:
    """The error for the first row of ``data`` (a header line, then rows from ``first_line``)
    with more fields than the header, in pandas' words for it."""
    reader = csv.reader(io.StringIO(_text(data, name, first_line), newline=""))
    with contextlib.suppress(csv.Error, StopIteration):
        num_columns = len(next(reader))
        done = 1  # lines the reader has passed
        for row in reader:
            if len(row) > num_columns:
                line = first_line + done - 1
                return InputError(f"{name}:{line}", f"malformed CSV: C error: Expected "
                                  f"{num_columns} fields in line {line}, saw {len(row)}")
            done = reader.line_num
    return InputError(name, "malformed CSV: a row has more fields than the header (line "
                      f"{header_line})")


def _check_columns(frame: pd.DataFrame, wanted: list[str], name: str, header_line: int) -> None:
    missing = [c for c in wanted if c not in frame.columns]
    if missing:
        shown = ", ".join(map(str, frame.columns[:20]))
        more = f" and {len(frame.columns) - 20:,} more" if len(frame.columns) > 20 else ""
        raise InputError(f"{name}:{header_line}", f"missing column {missing[0]!r} (columns: "
                         f"{shown}{more})")


def _column(frame: pd.DataFrame, column: str) -> np.ndarray:
    import pandas as pd
    values = frame[column]
    if isinstance(values, pd.DataFrame):  # a header that names the column twice: the first
        values = values.iloc[:, 0]
    return values.to_numpy(dtype=object)


def _read_jsonl(chunks: _Chunks, requests: _Requests) -> None:
    """The records of a JSON-lines file into ``requests``, a chunk at a time; the request
    limit is checked on each record before it is parsed."""
    name, fmt = requests.name, requests.fmt
    keys = [k for k in (fmt.arrival, fmt.prompt_tokens, fmt.output_tokens, fmt.hash_ids,
                        fmt.request_id) if k]
    for first, data in chunks:
        values: dict[str, list[Any]] = {k: [] for k in keys}
        lines: list[int] = []
        room = MAX_NUM_REQUESTS - requests.count
        for number, line in enumerate(_text(data, name, first).split("\n"), start=first):
            if not line.strip():
                continue
            if len(lines) == room:
                raise _too_many(name, number)
            record = parse_json(line, name, line=number)
            if not isinstance(record, dict):
                raise InputError(f"{name}:{number}", "expected a JSON object per line")
            for key in keys:
                if key not in record:
                    raise InputError(f"{name}:{number}", f"missing field {key!r}")
                values[key].append(record[key])
            lines.append(number)
        requests.add(_Rows(np.array(lines, dtype=np.int64), dict(values)))


# ---------------------------------------------------------------- checking
def _bad(name: str, rows: _Rows, index: int, message: str) -> InputError:
    return InputError(f"{name}:{rows.lines[index]}", message)


def _check_present(name: str, rows: _Rows, column: str) -> None:
    """A short CSV row leaves NaN in its last columns; an empty field is ''; JSON may say null."""
    import pandas as pd
    values = pd.Series(rows.values[column], dtype=object)
    missing = np.flatnonzero((values.isna() | values.eq("")).to_numpy(bool))
    if missing.size:
        raise _bad(name, rows, int(missing[0]), f"{column} is missing")


def _numbers(name: str, rows: _Rows, column: str) -> np.ndarray:
    """A column as floats; a JSON value that is not a number or text is refused (``true``
    would otherwise count as 1, a list as missing)."""
    import pandas as pd
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
    assert isinstance(raw, np.ndarray)
    try:  # (a short row's NaN fails the join, an empty field the cast: read carefully then)
        text = "".join(raw)
        if not (text.isascii() and text.isdigit()):
            return None
        numbers = raw.astype(np.int64)
    except (TypeError, ValueError, OverflowError):
        return None
    return None if (numbers > MAX_TOKENS).any() else numbers


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


class _Requests:
    """A trace's requests as they are read: each chunk's raw values are checked and turned
    into numpy arrays (tokens, arrival times, lines) before the next chunk is read, so that
    one chunk's raw values are held at a time. Checks that span chunks (arrival order, times
    after the first request, duplicate request ids) carry what they need from chunk to chunk."""

    def __init__(self, name: str, format: str, fmt: TraceFormat) -> None:
        self.name, self.format, self.fmt = name, format, fmt
        self.count = 0
        """Rows read so far (BurstGPT's dropped ones too)."""
        self._prompts: list[np.ndarray] = []
        self._outputs: list[np.ndarray] = []
        self._lines: list[np.ndarray] = []
        self._keep: list[np.ndarray] = []
        self._times: list[np.ndarray] = []
        """Seconds after the first request; for datetimes int64 nanoseconds since 1970."""
        self._first = 0.0
        """The first request's arrival, as the column says it (datetimes: float ns)."""
        self._last: tuple[float, Any] | None = None
        """The previous row's time after the first and its value as written."""
        self._hash_ids: list[tuple[int, ...]] = []
        self._request_ids: list[str] = []
        self._seen_ids: set[str] = set()

    def add(self, rows: _Rows) -> None:
        """Check and keep a chunk's rows (in the order of the checks of a whole file: prompt
        and output tokens, arrivals, prefix blocks, request ids, zero lengths)."""
        if len(rows.lines) == 0:
            return
        name, fmt = self.name, self.fmt
        assert fmt.prompt_tokens is not None and fmt.output_tokens is not None
        prompts = _tokens(name, rows, fmt.prompt_tokens)
        outputs = _tokens(name, rows, fmt.output_tokens)
        if fmt.arrival:
            self._times.append(self._arrivals(rows, fmt.arrival, fmt.time_unit))
        if fmt.hash_ids:
            self._hash_ids.extend(_hash_ids(name, rows, fmt, prompts))
        if fmt.request_id:
            self._add_request_ids(rows, fmt.request_id)
        if fmt.drop_zero_lengths:
            self._keep.append((prompts > 0) & (outputs > 0))
        else:
            for column, values in ((fmt.prompt_tokens, prompts), (fmt.output_tokens, outputs)):
                zero = np.flatnonzero(values == 0)
                if zero.size:
                    raise _bad(name, rows, int(zero[0]), f"{column} is 0; a request has at "
                               "least 1 prompt and 1 output token")
        self._prompts.append(prompts)
        self._outputs.append(outputs)
        self._lines.append(rows.lines)
        self.count += len(rows.lines)

    def _arrivals(self, rows: _Rows, column: str, unit: str) -> np.ndarray:
        import pandas as pd
        name = self.name
        _check_present(name, rows, column)
        raw = rows.values[column]
        if unit == "datetime":
            series = pd.Series(raw, dtype=object)
            stamps = pd.to_datetime(series.astype(str), format="ISO8601", errors="coerce",
                                    utc=True)
            ok = stamps.notna().to_numpy()
            ns = stamps.to_numpy(dtype="datetime64[ns]").astype(np.int64)
            # checked in float nanoseconds: the int64 difference of dates 300 years apart
            # would wrap
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
        if self._last is None:
            self._first = float(numbers[0])
        with np.errstate(over="ignore", invalid="ignore"):
            times = (numbers - self._first) * scale
            before = times[:1] if self._last is None else np.array([self._last[0]])
            steps = np.diff(times, prepend=before)
        backwards = np.flatnonzero(steps < 0)
        if backwards.size:
            i = int(backwards[0])
            previous = raw[i - 1] if i > 0 else self._last[1]  # type: ignore[index]
            raise _bad(name, rows, i, f"{column} {_short(raw[i])} is earlier than the "
                       f"previous row's {_short(previous)}: rows must be in arrival order")
        late = np.flatnonzero(~(times <= MAX_TIME_S))
        if late.size:
            i = int(late[0])
            raise _bad(name, rows, i, f"{column} {_short(raw[i])} is more than {MAX_TIME_S:g} "
                       f"s after the first request ({TIME_REASON})")
        self._last = (float(times[-1]), raw[-1])
        return ns if unit == "datetime" else times

    def _add_request_ids(self, rows: _Rows, column: str) -> None:
        for i, value in enumerate(rows.values[column]):
            rid = str(value)
            if rid in self._seen_ids:
                lines = np.concatenate([*self._lines, rows.lines])
                earlier = lines[self._request_ids.index(rid)]
                raise _bad(self.name, rows, i, f"duplicate {column} {rid!r} (also line "
                           f"{earlier})")
            self._seen_ids.add(rid)
            self._request_ids.append(rid)

    def trace(self) -> Trace:
        """The :class:`Trace` of every row read (the chunks' arrays joined, one at a time)."""
        name, fmt = self.name, self.fmt
        if self.count == 0:
            raise InputError(f"{name}:1", "no requests in the file")
        keep = _joined(self._keep) if fmt.drop_zero_lengths else None
        if keep is not None and not keep.any():
            raise InputError(f"{name}:1", "no requests with non-zero lengths in the file")
        prompts, outputs = _joined(self._prompts), _joined(self._outputs)
        lines = _joined(self._lines)
        arrival = _joined(self._times) if fmt.arrival else None
        if arrival is not None and fmt.time_unit == "datetime":
            # exact: the span is under MAX_TIME_S now, so the int64 difference cannot wrap
            arrival = (arrival - arrival[0]) / 1e9
        hash_ids = tuple(self._hash_ids) if fmt.hash_ids else None
        request_ids = tuple(self._request_ids) if fmt.request_id else None
        self._hash_ids, self._request_ids, self._seen_ids = [], [], set()
        num_dropped = 0
        if keep is not None and not keep.all():
            index = np.flatnonzero(keep)
            num_dropped = len(keep) - len(index)
            prompts, outputs, lines = prompts[index], outputs[index], lines[index]
            if arrival is not None:
                arrival = arrival[index] - arrival[index[0]]
            if hash_ids is not None:
                hash_ids = tuple(hash_ids[i] for i in index)
            if request_ids is not None:
                request_ids = tuple(request_ids[i] for i in index)
        return Trace(
            source=name,
            format=self.format,
            prompt_tokens=prompts,
            output_tokens=outputs,
            lines=lines,
            arrival_s=arrival,
            hash_ids=hash_ids,
            hash_block_tokens=fmt.hash_block_tokens,
            request_ids=request_ids,
            num_dropped=num_dropped,
        )


def _joined(arrays: list[np.ndarray]) -> np.ndarray:
    """The chunks' arrays as one; the list is emptied, so that each chunk's array is freed."""
    joined = arrays[0] if len(arrays) == 1 else np.concatenate(arrays)
    arrays.clear()
    return joined
