"""Small factories for tests: run a scenario through the CLI and read back what it wrote."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import yaml
from typer.testing import CliRunner

from clustersim.cli import app


def scenario(**overrides: Any) -> dict[str, Any]:
    """A minimal valid scenario; keyword arguments replace top-level fields."""
    base: dict[str, Any] = {
        "name": "test",
        "seed": 0,
        "model": "qwen2.5-7b-instruct",
        "gpu": "h100-sxm",
        "tensor_parallel_size": 1,
        "engine": {},
        "workload": {"kind": "explicit", "requests": [
            {"id": "r0", "arrival_s": 0.0, "prompt_tokens": 32, "output_tokens": 4},
        ]},
    }
    base.update(overrides)
    return base


def explicit(*requests: tuple[str, float, int, int], **extra: dict[str, Any]) -> dict[str, Any]:
    """``explicit(("A", 0.0, 18, 3), ...)`` -> an explicit workload; extra fields by request id."""
    return {"kind": "explicit", "requests": [
        {"id": rid, "arrival_s": t, "prompt_tokens": p, "output_tokens": o, **extra.get(rid, {})}
        for rid, t, p, o in requests
    ]}


def write_scenario(tmp_path: Path, data: dict[str, Any], name: str = "scenario.yaml") -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def run_cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.output


def simulate(tmp_path: Path, data: dict[str, Any]) -> dict[str, Any]:
    """Run ``clustersim simulate --steps`` on ``data``; return the files it wrote, parsed."""
    path = write_scenario(tmp_path, data)
    out = tmp_path / "out"
    code, output = run_cli("simulate", str(path), "--out", str(out), "--steps")
    assert code == 0, output
    with (out / "steps.csv").open() as f:
        steps = list(csv.DictReader(f))
    with (out / "requests.csv").open() as f:
        requests = {row["id"]: row for row in csv.DictReader(f)}
    summary = json.loads((out / "summary.json").read_text())
    return {"steps": steps, "requests": requests, "summary": summary, "out": out}


def schedule(step: dict[str, str]) -> dict[str, int]:
    """What a steps.csv row ran: prefill chunks by id, decodes folded into 'decodes'."""
    chunks = {}
    if step["prefill_chunks"]:
        for item in step["prefill_chunks"].split(";"):
            rid, n = item.rsplit(":", 1)
            chunks[rid] = int(n)
    decodes = int(step["num_decode_tokens"])
    if decodes:
        chunks["decodes"] = decodes
    return chunks
