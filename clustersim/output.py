"""Write a run's records: requests.csv, steps.csv and summary.json (deterministic bytes)."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from clustersim.engine.instance import StepRecord
from clustersim.engine.request import Request
from clustersim.metrics import request_metrics

REQUEST_COLUMNS = (
    "id", "arrival_s", "first_token_s", "finish_s", "ttft_s", "tpot_s", "e2e_s",
    "prompt_tokens", "output_tokens", "preemptions", "outcome",
)
STEP_COLUMNS = (
    "instance", "step", "start_s", "end_s", "num_decode_tokens", "prefill_chunks",
    "num_scheduled_tokens", "num_running", "num_waiting", "kv_blocks_used", "num_preempted",
)


def _time(value: float | None) -> str:
    return "" if value is None else f"{value:.9f}"


def write_requests_csv(path: Path, requests: list[Request]) -> None:
    with path.open("w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(REQUEST_COLUMNS)
        for r in requests:
            m = request_metrics(r)
            writer.writerow((
                r.request_id, _time(r.arrival_s), _time(r.first_token_s), _time(r.finish_s),
                _time(m.ttft_s), _time(m.tpot_s), _time(m.e2e_s), r.num_prompt_tokens,
                r.num_output_tokens, r.num_preemptions, r.outcome,
            ))


def format_chunks(chunks: tuple[tuple[str, int], ...]) -> str:
    return ";".join(f"{rid}:{n}" for rid, n in chunks)


def write_steps_csv(path: Path, steps: list[StepRecord]) -> None:
    with path.open("w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(STEP_COLUMNS)
        for s in steps:
            writer.writerow((
                s.instance, s.step, _time(s.start_s), _time(s.end_s), s.num_decode_tokens,
                format_chunks(s.prefill_chunks), s.num_scheduled_tokens, s.num_running,
                s.num_waiting, s.kv_blocks_used, s.num_preempted,
            ))


def write_summary_json(path: Path, summary: dict[str, Any]) -> None:
    path.write_text(json.dumps(summary, indent=2, sort_keys=False) + "\n")
