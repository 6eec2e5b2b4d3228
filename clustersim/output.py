"""Write a run's records: requests.csv, summary.json, transfers.csv when KV moved and, when
asked for, steps.csv (deterministic bytes, each file replaced whole: ``safe_write``); or the
tables as Parquet (``output_format="parquet"``, with pyarrow installed).

:func:`simulate_run` writes the requests' table as the run goes, each row once its request
and every one before it are done, and keeps of the requests only what the summary reads
(``metrics.records``): a million requests cost their table's columns, not their objects::

    run ──> request done ──> RequestRecords (the summary's columns)
                         └─> reorder by index ──> requests.csv, row after row
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from clustersim.engine.request import Request
from clustersim.engine.steplog import StepRecord
from clustersim.errors import OutputError
from clustersim.metrics import RequestMetrics, RunSummary, request_metrics, summarize_run
from clustersim.metrics.records import RequestRecords
from clustersim.safe_write import atomic_write_text, staged_file

if TYPE_CHECKING:
    from clustersim.scenario import Scenario
    from clustersim.sim import RunResult

FORMATS = ("csv", "parquet")
"""How the tables (requests, steps, transfers) are written; summary.json is JSON."""
PARQUET_ROWS = 1 << 16
"""Rows of a Parquet row group (what a table writer holds before writing them)."""

REQUEST_COLUMNS = (
    "id", "arrival_s", "first_token_s", "finish_s", "ttft_s", "tpot_s", "e2e_s",
    "prompt_tokens", "output_tokens", "preemptions", "outcome", "prefill_instance",
    "decode_instance", "handoff_bytes", "handoff_start_s", "handoff_end_s",
)
STEP_COLUMNS = (
    "instance", "step", "start_s", "end_s", "num_decode_tokens", "prefill_chunks",
    "num_scheduled_tokens", "num_running", "num_waiting", "kv_blocks_used", "num_preempted",
)


def _time(value: float | None) -> str:
    return "" if value is None else f"{value:.9f}"


def request_columns(retries: bool = False, client_queue: bool = False) -> tuple[str, ...]:
    """``retries``: a column with the times each request was sent again after a failure
    lost it (runs with ``faults:``); ``client_queue``: a last column with each request's wait
    for a concurrency slot between its dispatch and its send (``benchmark`` workloads)."""
    return (REQUEST_COLUMNS + (("retries",) if retries else ())
            + (("client_queue_s",) if client_queue else ()))


def request_row(r: Request, retries: bool = False, client_queue: bool = False,
                metrics: RequestMetrics | None = None) -> tuple:
    """The request's row of :func:`request_columns`: times in seconds (None: undefined),
    ``""`` for no instance (``metrics``: its ``request_metrics``, when already read)."""
    queued = (() if not client_queue else
              (None if r.dispatch_s is None else r.arrival_s - r.dispatch_s,))
    m = metrics if metrics is not None else request_metrics(r, with_itl=False)
    return (
        r.request_id, r.arrival_s, r.first_token_s, r.finish_s, m.ttft_s, m.tpot_s, m.e2e_s,
        r.num_prompt_tokens, r.num_output_tokens, r.num_preemptions, r.outcome,
        r.prefill_instance or "", r.decode_instance or "", r.handoff_bytes,
        r.handoff_start_s, r.handoff_end_s, *((r.num_retries,) if retries else ()), *queued,
    )


def _request_csv_row(retries: bool, client_queue: bool) -> Callable[[tuple], tuple]:
    """:func:`request_row` as requests.csv writes it: times with 9 decimals, None and no
    handoff as ``""``."""
    times = [REQUEST_COLUMNS.index(name) for name in (
        "arrival_s", "first_token_s", "finish_s", "ttft_s", "tpot_s", "e2e_s",
        "handoff_start_s", "handoff_end_s")]
    if client_queue:
        times.append(len(request_columns(retries, client_queue)) - 1)
    handoff = REQUEST_COLUMNS.index("handoff_bytes")

    def row(values: tuple) -> tuple:
        out = list(values)
        for k in times:
            out[k] = _time(out[k])
        out[handoff] = out[handoff] or ""
        return tuple(out)

    return row


def _request_table(path: Path, output_format: str, retries: bool, client_queue: bool
                   ) -> AbstractContextManager[tuple[_CsvTable | _ParquetTable,
                                                     Callable[[], None]]]:
    """The requests' table of :func:`request_row` rows."""
    return staged_table(path, output_format, request_columns(retries, client_queue),
                        _request_csv_row(retries, client_queue))


def write_requests_csv(path: Path, requests: list[Request], retries: bool = False,
                       client_queue: bool = False, output_format: str = "csv") -> None:
    """requests.csv of ``requests``, in their order (:func:`request_columns`)."""
    with _request_table(path, output_format, retries, client_queue) as (table, commit):
        for r in requests:
            table.write(request_row(r, retries, client_queue))
        commit()


def format_chunks(chunks: tuple[tuple[str, int], ...]) -> str:
    return ";".join(f"{rid}:{n}" for rid, n in chunks)


def _times_at(*positions: int) -> Callable[[tuple], tuple]:
    """A CSV row of a table whose times are at ``positions``: 9 decimals, None empty."""
    at = frozenset(positions)
    return lambda row: tuple(_time(v) if k in at else v for k, v in enumerate(row))


def write_steps_csv(path: Path, steps: list[StepRecord], output_format: str = "csv") -> None:
    with open_table(path, output_format, STEP_COLUMNS, _times_at(2, 3)) as table:
        for s in steps:
            table.write((
                s.instance, s.step, s.start_s, s.end_s, s.num_decode_tokens,
                format_chunks(s.prefill_chunks), s.num_scheduled_tokens, s.num_running,
                s.num_waiting, s.kv_blocks_used, s.num_preempted,
            ))


TRANSFER_COLUMNS = (
    "request", "source", "destination", "path", "bytes", "requested_s", "start_s", "end_s",
    "ideal_s", "queue_s",
)


def transfer_row(t: Any) -> tuple:
    """A ``TransferRecord``'s row of ``TRANSFER_COLUMNS``."""
    return (t.tag, "+".join(t.src), "+".join(t.dst), t.path, t.bytes, t.requested_s,
            t.start_s, t.end_s, t.ideal_s, t.queue_s)


_TRANSFER_CSV_ROW = _times_at(5, 6, 7, 8, 9)


def write_transfers_csv(path: Path, transfers: list[Any], output_format: str = "csv") -> None:
    with open_table(path, output_format, TRANSFER_COLUMNS, _TRANSFER_CSV_ROW) as table:
        for t in transfers:
            table.write(transfer_row(t))


# ---------------------------------------------------------------- table writers
class _CsvTable:
    """Rows into a CSV file, each as ``csv_row`` writes it."""

    def __init__(self, file: IO[Any], columns: tuple[str, ...],
                 csv_row: Callable[[tuple], tuple]) -> None:
        self._writer = csv.writer(file, lineterminator="\n")
        self._writer.writerow(columns)
        self._csv_row = csv_row

    def write(self, row: tuple) -> None:
        self._writer.writerow(self._csv_row(row))

    def close(self) -> None:
        pass


class _ParquetTable:
    """Rows into a Parquet file, a row group every ``PARQUET_ROWS`` rows; each column's type
    read from its first non-empty value (None: null)."""

    def __init__(self, file: IO[Any], columns: tuple[str, ...]) -> None:
        self._file = file
        self._columns = columns
        self._rows: list[tuple] = []
        self._writer: Any = None
        self._schema: Any = None

    def write(self, row: tuple) -> None:
        self._rows.append(row)
        if len(self._rows) >= PARQUET_ROWS:
            self._flush()

    def _flush(self) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        columns = list(zip(*self._rows, strict=True)) if self._rows else [
            () for _ in self._columns]
        if self._schema is None:
            self._schema = pa.schema([(name, _arrow_type(pa, values))
                                      for name, values in zip(self._columns, columns,
                                                              strict=True)])
            self._writer = pq.ParquetWriter(self._file, self._schema)
        arrays = [pa.array(values, type=field.type)
                  for values, field in zip(columns, self._schema, strict=True)]
        self._writer.write_table(pa.Table.from_arrays(arrays, schema=self._schema))
        self._rows = []

    def close(self) -> None:
        if self._rows or self._writer is None:
            self._flush()
        self._writer.close()


def _arrow_type(pa: Any, values: tuple) -> Any:
    for v in values:
        if isinstance(v, bool):
            return pa.bool_()
        if isinstance(v, int):
            return pa.int64()
        if isinstance(v, float):
            return pa.float64()
        if v is not None:
            return pa.string()
    return pa.float64()  # every value empty: an undefined time


def check_format(output_format: str) -> None:
    """Raise (``--format: ...``) unless the tables can be written as ``output_format``."""
    if output_format not in FORMATS:
        raise OutputError("--format", f"{output_format!r} is not one of {', '.join(FORMATS)}")
    if output_format == "parquet":
        try:
            import pyarrow.parquet  # noqa: F401
        except ImportError:
            raise OutputError("--format", "parquet needs pyarrow, which is not installed "
                              "(pip install 'clustersim[parquet]'), or write csv") from None


@contextmanager
def open_table(path: Path, output_format: str, columns: tuple[str, ...],
               csv_row: Callable[[tuple], tuple]) -> Iterator[_CsvTable | _ParquetTable]:
    """A table writer of ``columns`` into ``path`` (replaced whole when the block ends):
    rows of plain values (times in seconds, None where undefined), written to CSV as
    ``csv_row`` makes them strings, to Parquet as they are."""
    with staged_table(path, output_format, columns, csv_row) as (table, commit):
        yield table
        commit()


@contextmanager
def staged_table(path: Path, output_format: str, columns: tuple[str, ...],
                 csv_row: Callable[[tuple], tuple]
                 ) -> Iterator[tuple[_CsvTable | _ParquetTable, Callable[[], None]]]:
    """:func:`open_table`, put in place only by the ``commit`` it yields
    (``safe_write.staged_file``)."""
    with staged_file(path, binary=output_format == "parquet") as (f, commit_file):
        table = (_ParquetTable(f, columns) if output_format == "parquet"
                 else _CsvTable(f, columns, csv_row))

        def commit() -> None:
            table.close()
            commit_file()

        yield table, commit


def write_summary_json(path: Path, summary: RunSummary) -> None:
    atomic_write_text(path, json.dumps(summary.to_json(), indent=2, sort_keys=False) + "\n")


def run_files(result: RunResult, *, steps: bool | None = None,
              output_format: str = "csv") -> list[str]:
    """The names of the files :func:`write_run` writes for ``result``, in the order it
    writes them."""
    return [
        f"requests.{output_format}",
        *((f"steps.{output_format}",) if _with_steps(result, steps) else ()),
        *((f"transfers.{output_format}",) if result.num_transfers else ()),
        "summary.json",
    ]


TABLES = ("requests", "steps", "transfers")


def _with_steps(result: RunResult, steps: bool | None) -> bool:
    if steps is None:
        return result.record_steps
    if steps and not result.record_steps:
        raise ValueError("steps.csv asked for, but the run recorded no steps "
                         "(run_scenario(record_steps=False))")
    return steps


def write_run(result: RunResult, out: Path, *, steps: bool | None = None,
              output_format: str = "csv", records: RequestRecords | None = None) -> RunSummary:
    """Write :func:`run_files`: requests.csv, summary.json, transfers.csv when KV moved, and
    steps.csv when ``steps`` (None: when the run recorded its steps); the tables as Parquet
    with ``output_format="parquet"``. An earlier run's tables that this run does not write
    are removed, so the folder holds one run. The summary is the same with steps recorded or
    not. ``records``: the requests were handed over during the run (:func:`simulate_run`),
    which wrote their table already; so are the transfers the run streamed."""
    check_format(output_format)
    names = run_files(result, steps=steps, output_format=output_format)
    summary = summarize_run(result, records)
    if records is None:
        write_requests_csv(out / names[0], result.requests, *_request_options(result.scenario),
                           output_format=output_format)
    if f"steps.{output_format}" in names:
        write_steps_csv(out / f"steps.{output_format}", result.steps, output_format)
    if result.transfers:  # (none kept when they were streamed)
        write_transfers_csv(out / f"transfers.{output_format}", result.transfers, output_format)
    for name in (f"{table}.{kind}" for table in TABLES for kind in FORMATS):
        if name not in names and (out / name).is_file():
            (out / name).unlink()  # an earlier run's
    write_summary_json(out / "summary.json", summary)
    return summary


def _request_options(scenario: Scenario) -> tuple[bool, bool]:
    """requests.csv's optional columns: retries (a run with ``faults:``), the client queue
    (a ``benchmark`` workload)."""
    from clustersim.workload.spec import BenchmarkWorkload

    return scenario.faults is not None, isinstance(scenario.workload, BenchmarkWorkload)


class _RequestStream:
    """The run's sink (``sim.RequestSink``): each request done goes into the summary's
    records and, once every request before it is done too, into the requests' table."""

    def __init__(self, table: _CsvTable | _ParquetTable, scenario: Scenario) -> None:
        self.table = table
        self.retries, self.client_queue = _request_options(scenario)
        self.with_itl = scenario.slo is not None and scenario.slo.itl_s is not None
        self.records = RequestRecords(0)
        self._next = 0
        """The next row to write."""
        self._waiting: dict[int, tuple] = {}
        """Rows of requests done before an earlier one, by index."""

    def open(self, num_requests: int) -> None:
        self.records = RequestRecords(num_requests, self.with_itl)

    def add(self, index: int, request: Request) -> None:
        metrics = request_metrics(request, with_itl=False)
        self.records.add(index, request, metrics)
        row = request_row(request, self.retries, self.client_queue, metrics)
        if index != self._next:
            self._waiting[index] = row
            return
        self.table.write(row)
        self._next += 1
        waiting = self._waiting
        while waiting and self._next in waiting:
            self.table.write(waiting.pop(self._next))
            self._next += 1

    def close(self) -> None:
        if self._waiting or self._next != self.records.num_requests:
            raise AssertionError(f"{self.records.num_requests - self._next} requests' rows "
                                 "never written")


def simulate_run(scenario: Scenario, out: Path, *, steps: bool = False,
                 output_format: str = "csv",
                 lock: Callable[[], AbstractContextManager[Any]] = nullcontext
                 ) -> tuple[RunResult, RunSummary]:
    """Run ``scenario`` and write :func:`run_files` into ``out`` (a folder that exists): the
    same files as ``write_run(run_scenario(scenario, record_steps=steps, ideal_times=True),
    out)``, but the requests' and the KV transfers' tables are written as the run goes and
    the run keeps no request once it is written and recorded, and no transfer. The files
    are put in place with ``lock()`` held (the folder's: ``safe_write.folder_lock``), the run
    itself outside it."""
    from clustersim.sim import run_scenario

    check_format(output_format)
    with _request_table(out / f"requests.{output_format}", output_format,
                        *_request_options(scenario)) as (table, commit), \
            staged_table(out / f"transfers.{output_format}", output_format, TRANSFER_COLUMNS,
                         _TRANSFER_CSV_ROW) as (transfers, commit_transfers):
        stream = _RequestStream(table, scenario)
        result = run_scenario(scenario, record_steps=steps, ideal_times=True, sink=stream,
                              transfer_sink=lambda t: transfers.write(transfer_row(t)))
        stream.close()
        with lock():
            commit()
            if result.transfers_streamed:
                commit_transfers()
            summary = write_run(result, out, steps=steps, output_format=output_format,
                                records=stream.records)
    return result, summary
