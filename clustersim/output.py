"""Write a run's records: requests.csv, summary.json, transfers.csv when KV moved and, when
asked for, steps.csv (deterministic bytes, each file replaced whole: ``safe_write``)."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clustersim.engine.request import Request
from clustersim.engine.steplog import StepRecord
from clustersim.metrics import RunSummary, request_metrics, summarize_run
from clustersim.safe_write import atomic_file, atomic_write_text

if TYPE_CHECKING:
    from clustersim.sim import RunResult

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


def write_requests_csv(path: Path, requests: list[Request], retries: bool = False,
                       client_queue: bool = False) -> None:
    """``retries``: a column with the times each request was sent again after a failure
    lost it (runs with ``faults:``); ``client_queue``: a last column with each request's wait
    for a concurrency slot between its dispatch and its send (``benchmark`` workloads)."""
    with atomic_file(path) as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(REQUEST_COLUMNS + (("retries",) if retries else ())
                        + (("client_queue_s",) if client_queue else ()))
        for r in requests:
            queued = (() if not client_queue else
                      (_time(None if r.dispatch_s is None else r.arrival_s - r.dispatch_s),))
            m = request_metrics(r, with_itl=False)  # not a column
            writer.writerow((
                r.request_id, _time(r.arrival_s), _time(r.first_token_s), _time(r.finish_s),
                _time(m.ttft_s), _time(m.tpot_s), _time(m.e2e_s), r.num_prompt_tokens,
                r.num_output_tokens, r.num_preemptions, r.outcome, r.prefill_instance or "",
                r.decode_instance or "", r.handoff_bytes or "", _time(r.handoff_start_s),
                _time(r.handoff_end_s), *((r.num_retries,) if retries else ()), *queued,
            ))


def format_chunks(chunks: tuple[tuple[str, int], ...]) -> str:
    return ";".join(f"{rid}:{n}" for rid, n in chunks)


def write_steps_csv(path: Path, steps: list[StepRecord]) -> None:
    with atomic_file(path) as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(STEP_COLUMNS)
        for s in steps:
            writer.writerow((
                s.instance, s.step, _time(s.start_s), _time(s.end_s), s.num_decode_tokens,
                format_chunks(s.prefill_chunks), s.num_scheduled_tokens, s.num_running,
                s.num_waiting, s.kv_blocks_used, s.num_preempted,
            ))


TRANSFER_COLUMNS = (
    "request", "source", "destination", "path", "bytes", "requested_s", "start_s", "end_s",
    "ideal_s", "queue_s",
)


def write_transfers_csv(path: Path, transfers: list[Any]) -> None:
    with atomic_file(path) as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(TRANSFER_COLUMNS)
        for t in transfers:
            writer.writerow((
                t.tag, "+".join(t.src), "+".join(t.dst), t.path, t.bytes, _time(t.requested_s),
                _time(t.start_s), _time(t.end_s), _time(t.ideal_s), _time(t.queue_s),
            ))


def write_summary_json(path: Path, summary: RunSummary) -> None:
    atomic_write_text(path, json.dumps(summary.to_json(), indent=2, sort_keys=False) + "\n")


def run_files(result: RunResult, *, steps: bool | None = None) -> list[str]:
    """The names of the files :func:`write_run` writes for ``result``, in the order it
    writes them."""
    return [
        "requests.csv",
        *(("steps.csv",) if _with_steps(result, steps) else ()),
        *(("transfers.csv",) if result.transfers else ()),
        "summary.json",
    ]


def _with_steps(result: RunResult, steps: bool | None) -> bool:
    if steps is None:
        return result.record_steps
    if steps and not result.record_steps:
        raise ValueError("steps.csv asked for, but the run recorded no steps "
                         "(run_scenario(record_steps=False))")
    return steps


def write_run(result: RunResult, out: Path, *, steps: bool | None = None) -> RunSummary:
    """Write :func:`run_files`: requests.csv, summary.json, transfers.csv when KV moved, and
    steps.csv when ``steps`` (None: when the run recorded its steps). An earlier run's
    transfers.csv or steps.csv that this run does not write is removed, so the folder holds
    one run. The summary is the same with steps recorded or not."""
    names = run_files(result, steps=steps)
    summary = summarize_run(result)
    write_requests_csv(out / "requests.csv", result.requests,
                       retries=result.scenario.faults is not None,
                       client_queue=summary.benchmark is not None)
    if "steps.csv" in names:
        write_steps_csv(out / "steps.csv", result.steps)
    if result.transfers:
        write_transfers_csv(out / "transfers.csv", result.transfers)
    for name in ("steps.csv", "transfers.csv"):
        if name not in names and (out / name).is_file():
            (out / name).unlink()  # an earlier run's
    write_summary_json(out / "summary.json", summary)
    return summary
