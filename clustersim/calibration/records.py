"""Few-shot measurements from a real serving run's per-request records.

Two layouts are read:

- records as vLLM's request stats give them (LLMServingSim's ``vllm_requests.jsonl``), one JSON
  object per line: ``input_toks``, ``output_toks`` and the engine timestamps ``queued_ts``,
  ``first_token_ts``, ``last_token_ts`` (seconds, one clock);
- the result file of ``vllm bench serve --save-result --save-detailed`` (one JSON object with
  per-request lists ``input_lens``, ``output_lens``, ``ttfts``, ``itls``, ``start_times``,
  ``errors``): client-side times, so each request's TTFT includes the HTTP round trip. Failed
  requests are left out.

Three measurements come out:

- a prefill: the request whose TTFT window overlaps the fewest other requests (ties: the
  longest prompt), its TTFT taken as the time of its prompt's chunks;
- two decode step times: the requests whose decode ran beside the fewest and the most other
  decoding requests on average; their TPOT is the step time at that batch, at context
  ``prompt + output / 2``.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from clustersim.cost.roofline import BatchShape
from clustersim.errors import InputError
from clustersim.inputs import MAX_TRACE_BYTES, parse_json, read_text
from clustersim.limits import MAX_TIME_S

MAX_RECORDS = 4096
"""Most request records read: the measurements compare every pair of requests (n^2 values);
a ``vllm bench serve`` run has hundreds to a few thousand."""
_FIELDS = ("input_toks", "output_toks", "queued_ts", "first_token_ts", "last_token_ts")
Measurement = tuple[list[BatchShape], float]


def read_records(path: Path, max_tokens: int | None = None) -> list[dict]:
    """The records of a JSON-lines file or a ``vllm bench serve`` result, checked for the fields
    this module uses: finite numbers, whole token counts >= 1 (at most ``max_tokens`` a
    request), ``queued_ts < first_token_ts <= last_token_ts``."""
    text = read_text(path, "records", max_bytes=MAX_TRACE_BYTES)
    try:
        whole = parse_json(text, str(path))
    except InputError:
        whole = None  # JSON lines, read one by one below
    if isinstance(whole, dict) and "ttfts" in whole:
        records = _bench_serve_records(path, whole, max_tokens)
    else:
        records = _json_lines(path, text.split("\n"), max_tokens)
    if len(records) < 2:
        raise InputError(str(path), "need at least two request records")
    return records


_BENCH_LISTS = ("input_lens", "output_lens", "ttfts", "itls", "start_times")
_BENCH_NAMES = {
    "input_toks": "input_lens", "output_toks": "output_lens", "queued_ts": "start_times",
    "first_token_ts": "start_times + ttfts", "last_token_ts": "start_times + ttfts + sum(itls)",
}


def _bench_serve_records(path: Path, result: dict, max_tokens: int | None) -> list[dict]:
    """``vllm bench serve`` per-request lists -> records on the client's clock."""
    missing = [k for k in _BENCH_LISTS if not isinstance(result.get(k), list)]
    if missing:
        hint = (" (start_times: a vLLM recent enough to save them, with --save-detailed)"
                if "start_times" in missing else " (run it with --save-detailed)")
        raise InputError(str(path), f"vllm bench serve result without {missing}{hint}")
    count = len(result["ttfts"])
    if count > MAX_RECORDS:
        raise InputError(str(path), f"{count:,} requests; at most {MAX_RECORDS:,} (every pair "
                         "of requests is compared)")
    lengths = {k: len(result[k]) for k in _BENCH_LISTS}
    if any(n != count for n in lengths.values()):
        raise InputError(str(path), f"per-request lists differ in length: {lengths}")
    errors = result.get("errors")
    if errors is None:
        errors = [""] * count
    elif not isinstance(errors, list) or len(errors) != count:
        raise InputError(str(path), f"errors must be a list of {count} entries, one a request")
    records = []
    for i in range(count):
        ttft, itls, start = result["ttfts"][i], result["itls"][i], result["start_times"][i]
        if errors[i] or ttft == 0:
            continue  # a failed request (vLLM gives it no first token: ttft 0)
        where = f"{path}: request {i}"
        if not (_number(ttft) and _number(start) and isinstance(itls, list)
                and all(_number(t) for t in itls)):
            raise InputError(where, "ttfts and start_times must be finite numbers, itls lists "
                             "of them")
        first = start + ttft
        record = {
            "input_toks": result["input_lens"][i], "output_toks": result["output_lens"][i],
            "queued_ts": start, "first_token_ts": first, "last_token_ts": first + sum(itls),
        }
        records.append(_checked(where, record, max_tokens, _BENCH_NAMES))
    if len(records) < 2:
        raise InputError(str(path), f"need at least two request records, got {len(records)} "
                         f"successful requests of {count}")
    return records


def _json_lines(path: Path, lines: list[str], max_tokens: int | None) -> list[dict]:
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if len(records) == MAX_RECORDS:
            raise InputError(f"{path}:{number}", f"more than {MAX_RECORDS:,} records (every "
                             "pair of requests is compared)")
        record = parse_json(line, str(path), line=number)
        if not isinstance(record, dict):
            raise InputError(f"{path}:{number}", "expected a JSON object, one request a line")
        missing = [f for f in _FIELDS if f not in record]
        if missing:
            raise InputError(f"{path}:{number}", f"missing numeric fields {missing}")
        records.append(_checked(f"{path}:{number}", record, max_tokens))
    return records


def _number(value: object) -> bool:
    """A finite JSON number (``true`` is not one)."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))


def _checked(
    where: str, record: dict, max_tokens: int | None, names: dict[str, str] | None = None
) -> dict:
    """``record`` with whole token counts, or an error naming the fields as the file does."""
    name = names or {f: f for f in _FIELDS}
    bad = [name[f] for f in _FIELDS if not _number(record[f])]
    if bad:
        raise InputError(where, f"{bad} must be finite numbers")
    for field in ("input_toks", "output_toks"):
        if record[field] < 1 or record[field] != int(record[field]):
            raise InputError(where, f"{name[field]} must be a whole number >= 1, "
                             f"got {record[field]}")
    queued, first, last = (record[f] for f in _FIELDS[2:])
    if not queued < first:
        raise InputError(where, f"{name['first_token_ts']} {first} is not after "
                         f"{name['queued_ts']} {queued}")
    if last < first:
        raise InputError(where, f"{name['last_token_ts']} {last} is before "
                         f"{name['first_token_ts']} {first}")
    if not last - queued <= MAX_TIME_S:
        raise InputError(where, f"{name['last_token_ts']} is more than {MAX_TIME_S:g} s after "
                         f"{name['queued_ts']}: one request cannot take that long")
    tokens = int(record["input_toks"]) + int(record["output_toks"])
    if max_tokens is not None and tokens > max_tokens:
        raise InputError(where, f"{tokens:,} tokens ({name['input_toks']} + "
                         f"{name['output_toks']}) exceed the model's {max_tokens:,} positions")
    return {**record, "input_toks": int(record["input_toks"]),
            "output_toks": int(record["output_toks"])}


def measurements_from_records(
    records: list[dict], max_num_batched_tokens: int | None = None, dp: int = 1,
    where: str = "records",
) -> list[Measurement]:
    """One prefill and two decode measurements (see the module docstring); ``dp``
    data-parallel ranks share the records' requests, so a decode batch is split over them.
    ``where`` names the records in errors."""
    queued = np.array([r["queued_ts"] for r in records], dtype=float)
    first = np.array([r["first_token_ts"] for r in records], dtype=float)
    last = np.array([r["last_token_ts"] for r in records], dtype=float)
    prompt = np.array([r["input_toks"] for r in records])
    output = np.array([r["output_toks"] for r in records])

    # requests in the system during each TTFT window (itself excluded)
    busy = (queued[None, :] < first[:, None]) & (last[None, :] > queued[:, None])
    np.fill_diagonal(busy, False)
    crowd = busy.sum(axis=1)
    k = min(range(len(records)), key=lambda i: (crowd[i], -prompt[i]))
    budget = max_num_batched_tokens or int(prompt[k])
    steps, done = [], 0
    while done < prompt[k]:
        chunk = min(budget, int(prompt[k]) - done)
        steps.append(BatchShape.from_chunks([(chunk, done, done + chunk == prompt[k])]))
        done += chunk
    points: list[Measurement] = [(steps, float(first[k] - queued[k]))]

    decoding = np.flatnonzero((output > 1) & (last > first))
    if decoding.size < 2:
        raise InputError(where, "need two requests with more than one output token")
    start, end = first[decoding], last[decoding]
    overlap = np.clip(np.minimum(end[:, None], end[None, :])
                      - np.maximum(start[:, None], start[None, :]), 0, None)
    batch = overlap.sum(axis=1) / (end - start)  # includes itself: overlap with self = 1
    order = np.argsort(batch, kind="stable")
    for j in (order[0], order[-1]):
        i = decoding[j]
        size = max(1, round(float(batch[j]) / dp))
        context = int(prompt[i] + output[i] // 2)
        tpot = float((last[i] - first[i]) / (output[i] - 1))
        points.append(([BatchShape.from_chunks([(1, context, True)] * size)], tpot))
    return points
