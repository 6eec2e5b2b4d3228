"""Run fuzz cases under limits and classify each outcome.

A case runs in a fresh folder through a fork server (``tests.fuzz.worker``): at most
:data:`CPU_LIMIT_S` of CPU time and :data:`MEMORY_BYTES` of address space, with a wall-clock
backstop of :data:`HANG_S` against a run that waits for ever without spending CPU (limits in
CPU time, so that a loaded machine slows a campaign without failing it). Beside the case
folder lies ``outside/`` (what the file-level cases' links point into), which no command may
change. Its outcome is one of :data:`OUTCOMES`: exit 0 with outputs that hold the invariants
(and a rerun, on a second server with another hash seed, that writes the same bytes), exit 2
with a few ``path: message`` lines (one, for a file-level case), a plan's exit 3 or 4 (no
candidate can run, none meets the SLO) with its plan written and its reasons on stderr, or one
of the failures.
"""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import stat
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
from tests.fuzz.files import OUTSIDE, OUTSIDE_FILES, make_special
from tests.fuzz.files import SOURCE as FILES
from tests.fuzz.strategies import ROOT, Case
from tests.fuzz.worker import MEMORY_ERROR_CODE

CPU_LIMIT_S = 60.0
"""The slowest legitimate case (``clustersim validate``, which replays the calibration sets and
refits each GPU's tables on their held-out split) takes about 42 s of CPU."""
HANG_S = 120.0
"""The wall-clock backstop: a run that has neither ended nor spent its CPU time by then is
waiting for something that never comes."""
MEMORY_BYTES = 2 << 30

OK = "exit 0, outputs checked"
ERROR = "exit 2, path: message"
STALE = "exit 1, docs --check"
"""``clustersim docs --check``'s documented answer when a page is stale or missing (a case
runs where there is no checkout's docs/ folder): its pages' states, then one hint."""
NO_ANSWER = "exit 3/4, plan without one"
"""``clustersim plan``'s documented ends without a recommendation: plan.json written, with no
recommendation, and the reasons on stderr (``clustersim.cli.plan.EXIT_CODES``)."""
FAILURES = (
    "traceback", "other exit code", f"past {CPU_LIMIT_S:g} s CPU", f"hung {HANG_S:g} s",
    f"past {MEMORY_BYTES >> 30} GB", "non-finite result", "invariant broken", "rerun differs",
    "bad exit-2 message", "stderr on exit 0", "changed outside its folder",
    "bad exit-3/4 answer",
)
OUTCOMES = (OK, ERROR, STALE, NO_ANSWER, *FAILURES)
PROGRESS = re.compile(r"plan: .+: (\d+ simulations? in [\d.,]+ s \([\d,]+ in [\d,]+ s so far\)"
                      r"|\d+/\d+ simulations, about [\d,]+ s left in this round)$")
"""The plan's progress lines on a stderr that is not a terminal: expected, not noise."""
ONE_LINE = 1
"""Lines a file-level case's exit 2 may have: the one file it names."""
(TRACEBACK, OTHER_EXIT, TIMEOUT, HANG, MEMORY, NON_FINITE, INVARIANT, RERUN, BAD_MESSAGE, NOISE,
 OUTSIDE_CHANGED, BAD_NO_ANSWER) = FAILURES


@dataclass
class Result:
    case: Case
    outcome: str
    detail: str = ""
    wall_s: float = 0.0
    cpu_s: float = 0.0
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

    def run(self, folder: Path, argv: Iterable[str], *, cpu_s: float = CPU_LIMIT_S,
            wall_s: float = HANG_S, memory_bytes: int = MEMORY_BYTES) -> dict[str, Any]:
        """Run ``clustersim ARGV`` in ``folder`` under the limits; the worker's answer."""
        assert self._process.stdin is not None and self._process.stdout is not None
        request = {"dir": str(folder), "argv": list(argv), "cpu_s": cpu_s, "wall_s": wall_s,
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
    """The case's files in ``folder`` (where it runs), ``outside/`` beside it, then its
    special files."""
    folder.mkdir(parents=True)
    for name, data in (*OUTSIDE_FILES, *case.files):
        path = folder / name
        if name.endswith("/"):
            path.mkdir(parents=True, exist_ok=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
    for name, kind, argument in case.specials:
        make_special(folder, folder.parent / OUTSIDE, name, kind, argument)


def _beside(folder: Path) -> dict[str, tuple[Any, ...]]:
    """Everything beside the case folder ``folder`` (its parent's other entries, ``outside/``
    among them), as a command must leave it: each entry's kind, and a file's bytes, inode and
    time of change or a link's target."""
    found: dict[str, tuple[Any, ...]] = {}
    top = folder.parent
    for where, folders, names in os.walk(top):  # links to folders are listed, not followed
        if Path(where) == top and folder.name in folders:
            folders.remove(folder.name)
        for name in sorted(folders + [n for n in names if not (Path(where) == top
                                                                and n == folder.name)]):
            path = Path(where, name)
            info = path.lstat()
            key = str(path.relative_to(top))
            if stat.S_ISLNK(info.st_mode):
                found[key] = ("link", os.readlink(path))
            elif stat.S_ISREG(info.st_mode):
                found[key] = ("file", path.read_bytes(), info.st_ino, info.st_mtime_ns)
            else:
                found[key] = (stat.S_IFMT(info.st_mode),)
    return found


def _changed_beside(before: dict[str, tuple[Any, ...]], after: dict[str, tuple[Any, ...]]
                    ) -> str:
    """What a command changed beside its folder ("" if nothing)."""
    changes = [f"{name} {'removed' if name not in after else 'changed'}"
               for name in before if before[name] != after.get(name)]
    changes += [f"{name} created" for name in after if name not in before]
    return "; ".join(changes[:5])


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _compared(folder: Path, case: Case) -> dict[str, bytes]:
    """What a rerun must reproduce byte for byte: every file the command wrote (plan: its
    plan.json and ledger.csv only; its report names the time) and stdout."""
    inputs = {name for name, _ in case.files} | {name for name, _, _ in case.specials}
    files = checks.tree_bytes(folder, skip=inputs | {"stderr.txt"})
    if case.argv and case.argv[0] == "plan":
        files = {k: v for k, v in files.items() if k.endswith(("plan.json", "ledger.csv"))}
    return files


def classify(case: Case, folder: Path, answer: dict[str, Any]) -> tuple[str, str]:
    """(outcome, detail) of one run of ``case`` in ``folder``."""
    stderr = _read(folder / "stderr.txt")
    stdout = _read(folder / "stdout.txt")
    code = answer["code"]
    if answer["hung"]:
        return HANG, (f"killed after {answer['wall_s']:.1f} s of wall time, "
                      f"{answer['cpu_s']:.1f} s of CPU")
    if answer["past_cpu"]:
        return TIMEOUT, f"stopped after {answer['cpu_s']:.1f} s of CPU: {stderr[-300:]}"
    if code == MEMORY_ERROR_CODE or answer["maxrss_bytes"] > MEMORY_BYTES:
        return MEMORY, f"peak {answer['maxrss_bytes'] / 2**30:.2f} GB: {stderr[-300:]}"
    if "Traceback (most recent call last)" in stderr:
        return TRACEBACK, stderr[-1500:]
    if code == 2:
        problems = checks.error_lines(stderr, ONE_LINE if case.source == FILES else None)
        return (BAD_MESSAGE, "; ".join(problems)) if problems else (ERROR, "")
    if code == 1 and case.argv[:1] == ("docs",) and "--check" in case.argv and (
            stderr.startswith("run `clustersim docs --write`") and stderr.count("\n") == 1):
        return STALE, ""
    if code in (3, 4) and case.argv[:1] == ("plan",):
        told = [line for line in stderr.splitlines() if not PROGRESS.match(line)]
        problems = checks.no_answer(list(case.argv), folder, told)
        return (BAD_NO_ANSWER, "; ".join(problems[:5])) if problems else (NO_ANSWER, "")
    if code != 0:
        return OTHER_EXIT, f"exit {code}, signal {answer['signal']}: {stderr[-500:]}"
    noise = [line for line in stderr.splitlines() if line.strip() and not PROGRESS.match(line)]
    if noise:
        return NOISE, "\n".join(noise)[-500:]
    problems = checks.outputs_of(list(case.argv), folder, stdout)
    if any("non-finite" in p or "not JSON" in p for p in problems):
        return NON_FINITE, "; ".join(problems[:5])
    if problems:
        return INVARIANT, "; ".join(problems[:5])
    return OK, ""


def _not_copied(folder: str, names: list[str]) -> list[str]:
    """What ``--keep`` does not copy: anything but a folder, a link or a file under 64 MiB."""
    left_out = []
    for name in names:
        info = os.lstat(os.path.join(folder, name))
        if not (stat.S_ISDIR(info.st_mode) or stat.S_ISLNK(info.st_mode)
                or (stat.S_ISREG(info.st_mode) and info.st_size < 64 << 20)):
            left_out.append(name)
    return left_out


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
        a, b = folder / "a" / "case", folder / "b" / "case"
        try:
            _write_files(a, case)
            before = _beside(a)
            answer = first.run(a, case.argv)
            outcome, detail = classify(case, a, answer)
            changed = _changed_beside(before, _beside(a))
            if changed:
                outcome, detail = OUTSIDE_CHANGED, f"{changed} ({outcome})"
            if outcome in (OK, NO_ANSWER):
                _write_files(b, case)
                again = second.run(b, case.argv)
                if again["code"] != answer["code"] or _compared(a, case) != _compared(b, case):
                    outcome, detail = RERUN, f"rerun exit {again['code']}, other bytes"
        finally:
            self._pairs.put((first, second))
        result = Result(case, outcome, detail, answer["wall_s"], answer["cpu_s"],
                        answer["maxrss_bytes"])
        if outcome in FAILURES and self.keep is not None:
            target = self.keep / f"case{number:06d}"
            # links copied as links, pipes, sockets, devices and large files left out
            shutil.copytree(folder, target, symlinks=True, dirs_exist_ok=True,
                            ignore=_not_copied)
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
        """The most CPU time a case took."""
        return 0.0 if self.slowest is None else self.slowest.cpu_s

    @property
    def peak_bytes(self) -> int:
        return 0 if self.largest is None else self.largest.maxrss_bytes

    def add(self, result: Result) -> None:
        self.counts.setdefault(result.case.source, Counter())[result.outcome] += 1
        if result.cpu_s > self.slowest_s:
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
        lines = [f"{'source':<22}{'cases':>8}{'exit 0':>9}{'exit 2':>9}{'exit 1':>8}"
                 f"{'exit 3/4':>10}{'failures':>10}"]
        rows = [(source, counter) for source, counter in self.counts.items()]
        for source, counter in [*rows, ("total", self.total)]:
            failed = sum(counter[o] for o in FAILURES)
            lines.append(f"{source:<22}{sum(counter.values()):>8,}{counter[OK]:>9,}"
                         f"{counter[ERROR]:>9,}{counter[STALE]:>8,}{counter[NO_ANSWER]:>10,}"
                         f"{failed:>10,}")
        lines += ["", f"{'outcome':<26}{'cases':>8}"]
        total = self.total
        lines += [f"{outcome:<26}{total[outcome]:>8,}" for outcome in OUTCOMES]
        return "\n".join(lines)
