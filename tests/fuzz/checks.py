"""What a fuzzed command must have produced: for exit 2, a few ``path: message`` lines; for
exit 0, outputs that hold the run's invariants; for a plan's exit 3 or 4, its plan without a
recommendation and the reasons. Each check returns the problems it found (an
empty list: none), so a campaign can count them instead of stopping at the first."""

from __future__ import annotations

import csv
import json
import math
import re
from pathlib import Path
from typing import Any

MAX_LINES = 11
"""Ten problems and the "... and N more problems" line."""
_MORE = re.compile(r"^\.\.\. and [\d,]+ more problems$")
_INTERNALS = ("instance of", "Unable to extract tag", "Input tag", "function-after",
              "function-before", "function-wrap", "discriminator", "Traceback", "pydantic",
              "[type=", "model_attributes_type", "For further information", "Warning:",
              "warnings.warn")
"""Words of pydantic and Python internals that a user's error message must not show."""
_EPS_S = 1e-9
"""Times in requests.csv are printed to the nanosecond."""


# ------------------------------------------------------------------- exit 2
def error_lines(stderr: str, max_lines: int | None = None) -> list[str]:
    """Problems with an exit-2 answer: one to a few ``path: message`` lines (at most
    ``max_lines``, default :data:`MAX_LINES`), each with a non-empty path, no internals."""
    max_lines = max_lines or MAX_LINES
    lines = stderr.rstrip("\n").split("\n") if stderr.strip() else []
    if not lines:
        return ["exit 2 without a message"]
    problems = []
    if len(lines) > max_lines:
        problems.append(f"{len(lines)} lines (at most {max_lines})")
    for line in lines:
        if _MORE.match(line):
            continue
        path, sep, message = line.partition(": ")
        if not sep or not path.strip() or not message.strip():
            problems.append(f"not a path: message line: {line[:120]!r}")
        leaked = [word for word in _INTERNALS if word in line]
        if leaked:
            problems.append(f"internals {leaked} in {line[:120]!r}")
    return problems


# ------------------------------------------------------------------- exit 0
def _finite(value: Any, where: str, problems: list[str]) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        problems.append(f"non-finite number {value} at {where}")
    elif isinstance(value, dict):
        for key, item in value.items():
            _finite(item, f"{where}.{key}", problems)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _finite(item, f"{where}[{i}]", problems)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def finite_json(path: Path) -> tuple[Any, list[str]]:
    """The JSON document at ``path`` and its problems: not strict JSON (``NaN``,
    ``Infinity``), or a non-finite number."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"), parse_constant=_reject_constant)
    except (OSError, ValueError) as error:
        return None, [f"{path.name}: {error}"]
    problems: list[str] = []
    _finite(data, path.name, problems)
    return data, problems


def _number(text: str) -> float | None:
    return None if text == "" else float(text)


def run_outputs(folder: Path, steps: bool = True) -> list[str]:
    """Problems with a simulated run's requests.csv, summary.json and, with ``steps`` (the
    run was given --steps), steps.csv; without ``steps``, a steps.csv in the folder is one."""
    problems: list[str] = []
    for name in ("requests.csv", *(("steps.csv",) if steps else ()), "summary.json"):
        if not (folder / name).is_file():
            problems.append(f"{folder.name}/{name} missing")
    if not steps and (folder / "steps.csv").is_file():
        problems.append(f"{folder.name}/steps.csv written without --steps")
    if problems:
        return problems
    summary, found = finite_json(folder / "summary.json")
    problems += found
    if summary is None:
        return problems
    with (folder / "requests.csv").open(newline="") as f:
        requests = list(csv.DictReader(f))
    problems += _request_problems(requests, summary)
    if not steps:
        return problems
    engines = {engine["name"]: engine for engine in summary.get("engine", [])}
    with (folder / "steps.csv").open(newline="") as f:
        for row in csv.DictReader(f):
            problems += _step_problems(row, engines)
            if len(problems) > 20:
                break
    return problems


def _request_problems(requests: list[dict[str, str]], summary: dict[str, Any]) -> list[str]:
    problems = []
    finished = rejected = 0
    for row in requests:
        rid, outcome = row["id"], row["outcome"]
        times = {k: _number(row[k]) for k in ("arrival_s", "first_token_s", "finish_s",
                                              "ttft_s", "e2e_s")}
        if any(v is not None and not math.isfinite(v) for v in times.values()):
            problems.append(f"request {rid}: a non-finite time {times}")
            continue
        if outcome == "finished":
            finished += 1
            ttft, e2e = times["ttft_s"], times["e2e_s"]
            if ttft is None or e2e is None or ttft > e2e + _EPS_S:
                problems.append(f"request {rid}: TTFT {ttft} > E2E {e2e}")
            if times["arrival_s"] is None or times["finish_s"] is None or (
                    times["finish_s"] + _EPS_S < times["arrival_s"]):
                problems.append(f"request {rid}: finished before it arrived")
            if int(row["output_tokens"]) < 1:
                problems.append(f"request {rid}: finished with no output token")
        elif outcome.startswith("rejected: ") and outcome[len("rejected: "):].strip():
            rejected += 1
        else:
            problems.append(f"request {rid}: neither finished nor rejected with a reason "
                            f"({outcome!r})")
    expected = (summary.get("num_requests"), summary.get("num_finished"),
                summary.get("num_rejected"))
    if expected != (len(requests), finished, rejected):
        problems.append(f"summary counts {expected} != requests.csv's "
                        f"{(len(requests), finished, rejected)}")
    return problems


def _step_problems(row: dict[str, str], engines: dict[str, dict[str, Any]]) -> list[str]:
    engine = engines.get(row["instance"])
    where = f"step {row['instance']}#{row['step']}"
    if engine is None:
        return [f"{where}: an engine summary.json does not list"]
    problems = []
    start, end = float(row["start_s"]), float(row["end_s"])
    if not (math.isfinite(start) and math.isfinite(end)) or end < start:
        problems.append(f"{where}: runs from {start} to {end}")
    tokens = int(row["num_scheduled_tokens"])
    if tokens > engine["max_num_batched_tokens"]:
        problems.append(f"{where}: {tokens} tokens over the budget "
                        f"{engine['max_num_batched_tokens']}")
    if int(row["num_running"]) > engine["max_num_seqs"]:
        problems.append(f"{where}: {row['num_running']} running over max_num_seqs "
                        f"{engine['max_num_seqs']}")
    if int(row["kv_blocks_used"]) > engine["num_gpu_blocks"] - 1:
        problems.append(f"{where}: {row['kv_blocks_used']} KV blocks used of "
                        f"{engine['num_gpu_blocks'] - 1}")
    return problems


def outputs_of(argv: list[str], folder: Path, stdout: str) -> list[str]:
    """Problems with the outputs of a command that exited 0, by command."""
    command = argv[0] if argv else ""
    before = argv[: argv.index("--")] if "--" in argv else argv
    if {"-h", "--help", "--version"} & set(before):
        return []  # help or the version, printed instead of running
    steps = "--steps" in before
    if command == "simulate":
        return run_outputs(folder / _option(argv, "--out", "runs/latest"), steps)
    if command == "plan":
        out = _option(argv, "--out", "")
        if not out:  # the default folder is runs/plan/<the scenario's name>
            found = sorted((folder / "runs" / "plan").glob("*/plan.json"))
            return finite_json(found[0])[1] if found else ["no runs/plan/*/plan.json written"]
        return finite_json(folder / out / "plan.json")[1]
    if command == "compare":
        out = folder / _option(argv, "--out", "runs/compare")
        return run_outputs(out / "colocated", steps) + run_outputs(out / "disaggregated", steps)
    if "--json" in argv and command in ("step-time", "trace"):
        try:
            data = json.loads(stdout, parse_constant=_reject_constant)
        except ValueError as error:
            return [f"--json output is not JSON: {error}"]
        problems: list[str] = []
        _finite(data, "stdout", problems)
        problems += _negative(data, "stdout")
        return problems
    return []


def no_answer(argv: list[str], folder: Path, stderr_lines: list[str]) -> list[str]:
    """Problems with a plan's exit 3 or 4: its plan.json must be written (strict JSON, finite,
    no recommendation), and stderr must say why: a ``path: message`` line, then the reasons
    (at most nine lines of them), none with Python's or pydantic's words. The report's
    line (on stderr with --json) is not one of them."""
    stderr_lines = [line for line in stderr_lines if not line.startswith("wrote report ")]
    problems = outputs_of(argv, folder, "")
    if not problems:
        out = _option(argv, "--out", "")
        found = ([folder / out / "plan.json"] if out
                 else sorted((folder / "runs" / "plan").glob("*/plan.json")))
        plan, _ = finite_json(found[0])
        if not isinstance(plan, dict) or plan.get("recommended") is not None:
            problems.append("a plan that exits 3 or 4 has a recommendation")
    if not stderr_lines:
        return [*problems, "exit 3 or 4 without a reason"]
    path, sep, message = stderr_lines[0].partition(": ")
    if not sep or not path.strip() or not message.strip():
        problems.append(f"not a path: message line: {stderr_lines[0][:120]!r}")
    if len(stderr_lines) > 10:
        problems.append(f"{len(stderr_lines)} lines (at most 10)")
    problems += [f"internals {word!r} in {line[:120]!r}" for line in stderr_lines
                 for word in _INTERNALS if word in line]
    return problems


def _negative(value: Any, where: str) -> list[str]:
    if isinstance(value, int | float) and not isinstance(value, bool) and value < 0:
        return [f"negative {value} at {where}"]
    if isinstance(value, dict):
        return [p for key, item in value.items() for p in _negative(item, f"{where}.{key}")]
    return []


def _option(argv: list[str], name: str, default: str) -> str:
    """The value the command took for ``name`` (the last one given wins, as with Click)."""
    value = default
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith(name + "="):
            value = arg[len(name) + 1:]
    return value


def tree_bytes(folder: Path, skip: set[str] | frozenset[str] = frozenset()
               ) -> dict[str, bytes]:
    """Every file under ``folder`` by its relative path (a rerun must give the same), but
    those named in ``skip`` (a case's inputs: a link to a file is read as the file; a pipe,
    a device or a link to one is not a file)."""
    if not folder.is_dir():
        return {}
    found = {}
    for path in sorted(folder.rglob("*")):
        name = str(path.relative_to(folder))
        if name not in skip and name + "/" not in skip and path.is_file():
            found[name] = path.read_bytes()
    return found
