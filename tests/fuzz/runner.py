"""Run fuzz cases under limits and classify each outcome.

A case runs in a fresh folder through a fork server (``tests.fuzz.worker``): at most
:data:`TIMEOUT_S` of wall time and :data:`MEMORY_BYTES` of address space. Its outcome is one
of :data:`OUTCOMES`: exit 0 with outputs that hold the invariants (and a rerun, on a second
server with another hash seed, that writes the same bytes), exit 2 with a few ``path:
message`` lines, or one of the failures.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.fuzz import checks
from tests.fuzz.strategies import ROOT, Case
from tests.fuzz.worker import MEMORY_ERROR_CODE

TIMEOUT_S = 20.0
MEMORY_BYTES = 2 << 30

OK = "exit 0, outputs checked"
ERROR = "exit 2, path: message"
FAILURES = (
    "traceback", "other exit code", f"past {TIMEOUT_S:g} s", f"past {MEMORY_BYTES >> 30} GB",
    "non-finite result", "invariant broken", "rerun differs", "bad exit-2 message",
    "stderr on exit 0",
)
OUTCOMES = (OK, ERROR, *FAILURES)
TRACEBACK, OTHER_EXIT, TIMEOUT, MEMORY, NON_FINITE, INVARIANT, RERUN, BAD_MESSAGE, NOISE = (
    FAILURES)


@dataclass
class Result:
    case: Case
    outcome: str
    detail: str = ""
    wall_s: float = 0.0
    maxrss_bytes: int = 0


class Worker:
    """One fork server process (``python -m tests.fuzz.worker``) and its pipes."""

    def __init__(self, hash_seed: int) -> None:
        env = {**os.environ, "PYTHONHASHSEED": str(hash_seed), "OPENBLAS_NUM_THREADS": "1",
               "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "MPLBACKEND": "Agg",
               "COLUMNS": "100"}
        env.pop("CI", None)
        self._process = subprocess.Popen(
            [sys.executable, "-m", "tests.fuzz.worker"], cwd=ROOT, env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)

    def run(self, folder: Path, argv: Iterable[str], *, timeout_s: float = TIMEOUT_S,
            memory_bytes: int = MEMORY_BYTES) -> dict[str, Any]:
        """Run ``clustersim ARGV`` in ``folder`` under the limits; the worker's answer."""
        assert self._process.stdin is not None and self._process.stdout is not None
        request = {"dir": str(folder), "argv": list(argv), "timeout_s": timeout_s,
                   "memory_bytes": memory_bytes}
        self._process.stdin.write(json.dumps(request) + "\n")
        self._process.stdin.flush()
        line = self._process.stdout.readline()
        if not line:
            raise RuntimeError("the fuzz worker died")
        return json.loads(line)

    def close(self) -> None:
        if self._process.stdin is not None:
            self._process.stdin.close()
        self._process.wait(timeout=30)


def _write_files(folder: Path, case: Case) -> None:
    folder.mkdir(parents=True)
    for name, data in case.files:
        path = folder / name
        if name.endswith("/"):
            path.mkdir(parents=True, exist_ok=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _compared(folder: Path, case: Case) -> dict[str, bytes]:
    """What a rerun must reproduce byte for byte: every file the command wrote (plan: its
    plan.json and ledger.csv only; its report names the time) and stdout."""
    inputs = {name for name, _ in case.files}
    files = {k: v for k, v in checks.tree_bytes(folder).items()
             if k not in inputs and k != "stderr.txt"}
    if case.argv and case.argv[0] == "plan":
        files = {k: v for k, v in files.items() if k.endswith(("plan.json", "ledger.csv"))}
    return files


def classify(case: Case, folder: Path, answer: dict[str, Any]) -> tuple[str, str]:
    """(outcome, detail) of one run of ``case`` in ``folder``."""
    stderr = _read(folder / "stderr.txt")
    stdout = _read(folder / "stdout.txt")
    code = answer["code"]
    if answer["timed_out"]:
        return TIMEOUT, f"killed after {answer['wall_s']:.1f} s"
    if code == MEMORY_ERROR_CODE or answer["maxrss_bytes"] > MEMORY_BYTES:
        return MEMORY, f"peak {answer['maxrss_bytes'] / 2**30:.2f} GB: {stderr[-300:]}"
    if "Traceback (most recent call last)" in stderr:
        return TRACEBACK, stderr[-1500:]
    if code == 2:
        problems = checks.error_lines(stderr)
        return (BAD_MESSAGE, "; ".join(problems)) if problems else (ERROR, "")
    if code != 0:
        return OTHER_EXIT, f"exit {code}, signal {answer['signal']}: {stderr[-500:]}"
    if stderr.strip():
        return NOISE, stderr[-500:]
    problems = checks.outputs_of(list(case.argv), folder, stdout)
    if any("non-finite" in p or "not JSON" in p for p in problems):
        return NON_FINITE, "; ".join(problems[:5])
    if problems:
        return INVARIANT, "; ".join(problems[:5])
    return OK, ""


class Campaign:
    """Runs cases on ``jobs`` pairs of fork servers and counts their outcomes by source."""

    def __init__(self, jobs: int = 2, keep: Path | None = None) -> None:
        self.jobs = max(1, jobs)
        self.keep = keep
        self._root = Path(tempfile.mkdtemp(prefix="clustersim-fuzz-"))
        self._pairs: queue.Queue[tuple[Worker, Worker]] = queue.Queue()
        for j in range(self.jobs):
            self._pairs.put((Worker(2 * j + 1), Worker(2 * j + 2)))
        self._count = 0
        self._lock = threading.Lock()

    def run_one(self, case: Case) -> Result:
        with self._lock:
            self._count += 1
            number = self._count
        folder = self._root / f"case{number:06d}"
        first, second = self._pairs.get()
        try:
            _write_files(folder / "a", case)
            answer = first.run(folder / "a", case.argv)
            outcome, detail = classify(case, folder / "a", answer)
            if outcome == OK:
                _write_files(folder / "b", case)
                again = second.run(folder / "b", case.argv)
                if again["code"] != 0 or _compared(folder / "a", case) != _compared(
                        folder / "b", case):
                    outcome, detail = RERUN, f"rerun exit {again['code']}, other bytes"
        finally:
            self._pairs.put((first, second))
        result = Result(case, outcome, detail, answer["wall_s"], answer["maxrss_bytes"])
        if outcome in FAILURES and self.keep is not None:
            target = self.keep / f"case{number:06d}"
            shutil.copytree(folder, target, dirs_exist_ok=True)
            (target / "case.json").write_text(json.dumps(
                {"source": case.source, "argv": list(case.argv), "outcome": outcome,
                 "detail": detail}, indent=1))
        shutil.rmtree(folder, ignore_errors=True)
        return result

    def run(self, cases: list[Case],
            progress: Callable[[int, int], None] | None = None) -> Report:
        report = Report()
        started = time.perf_counter()
        with ThreadPoolExecutor(self.jobs) as pool:
            for done, result in enumerate(pool.map(self.run_one, cases), start=1):
                report.add(result)
                if progress is not None:
                    progress(done, len(cases))
        report.wall_s = time.perf_counter() - started
        return report

    def close(self) -> None:
        while not self._pairs.empty():
            for worker in self._pairs.get():
                worker.close()
        shutil.rmtree(self._root, ignore_errors=True)

    def __enter__(self) -> Campaign:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class Report:
    """Outcome counts by source, the failures, and the slowest and largest runs."""

    counts: dict[str, Counter[str]] = field(default_factory=dict)
    failures: list[Result] = field(default_factory=list)
    wall_s: float = 0.0
    slowest: Result | None = None
    largest: Result | None = None

    @property
    def slowest_s(self) -> float:
        return 0.0 if self.slowest is None else self.slowest.wall_s

    @property
    def peak_bytes(self) -> int:
        return 0 if self.largest is None else self.largest.maxrss_bytes

    def add(self, result: Result) -> None:
        self.counts.setdefault(result.case.source, Counter())[result.outcome] += 1
        if result.wall_s > self.slowest_s:
            self.slowest = result
        if result.maxrss_bytes > self.peak_bytes:
            self.largest = result
        if result.outcome in FAILURES:
            self.failures.append(result)

    @property
    def total(self) -> Counter[str]:
        total: Counter[str] = Counter()
        for counter in self.counts.values():
            total.update(counter)
        return total

    @property
    def num_cases(self) -> int:
        return sum(self.total.values())

    def table(self) -> str:
        """Cases by source and by outcome, as ``python -m tests.fuzz`` prints them."""
        lines = [f"{'source':<22}{'cases':>8}{'exit 0':>9}{'exit 2':>9}{'failures':>10}"]
        rows = [(source, counter) for source, counter in self.counts.items()]
        for source, counter in [*rows, ("total", self.total)]:
            failed = sum(counter[o] for o in FAILURES)
            lines.append(f"{source:<22}{sum(counter.values()):>8,}{counter[OK]:>9,}"
                         f"{counter[ERROR]:>9,}{failed:>10,}")
        lines += ["", f"{'outcome':<26}{'cases':>8}"]
        total = self.total
        lines += [f"{outcome:<26}{total[outcome]:>8,}" for outcome in OUTCOMES]
        return "\n".join(lines)
