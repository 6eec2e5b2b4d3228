"""Command output shown in the docs, made by the command it shows.

A fenced block of README.md or docs/*.md that shows what a command prints follows a marker
that names the command, as the reader would type it from the checkout's root::

    <!-- example: clustersim simulate scenarios/quickstart.yaml --out runs/quickstart -->
    ```
    quickstart: qwen2.5-7b-instruct on rtx4090 TP1, ...
    ```

An excerpt names its first and last lines by regular expressions (searched in each line of
the output; the last is the first match at or after the first), each on a line of the marker,
and may keep only the lines between them that match a third::

    <!-- example: clustersim plan scenarios/qwen7b_a100_min_gpus.yaml
         from: ^recommendation:
         to: the whole deployment sits -->
    <!-- example: clustersim compare scenarios/pd_azure_conv_dgx.yaml
         from: ^GPUs:
         to: ^  - handoff p95
         keep: ^(GPUs|TTFT p95|verdict|  - ) -->

``clustersim docs --write`` runs each marked command in a scratch folder that sees the
checkout's files (so the ``runs/`` and ``reports/`` it writes land there, named in its output
as a user would see them) and puts what it printed on stdout into the block; ``--check`` fails
when a block differs from that. What differs from one run of the same command to the next, and
only that, is masked before the two are compared (``VOLATILE``); ``--write`` keeps this run's.
"""

from __future__ import annotations

import difflib
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from clustersim.errors import ClusterSimError

_MARKER = re.compile(r"^<!-- example:", re.M)
_MARKED = re.compile(r"<!-- example:(?P<body>(?:(?!-->).)*)-->\n```[\w-]*\n(?P<block>.*?)^```$",
                     re.S | re.M)

_KEYS = ("from", "to", "keep")
"""The selectors a marker may give below its command."""

VOLATILE: tuple[tuple[re.Pattern[str], str], ...] = (
    # a plan's wall time, and its worker count (one per core by default)
    (re.compile(r"simulations in [\d,.]+ s on \d+ workers?"),
     "simulations in <wall> s on <workers>"),
    # a report folder's default name ends in the time it was written
    (re.compile(r"-\d{8}-\d{6}/"), "-<YYYYmmdd-HHMMSS>/"),
)
"""(pattern, mask) for each part of a command's output that changes from run to run of the
same command on the same checkout."""


@dataclass(frozen=True, slots=True)
class Example:
    """One marked block of a page."""

    page: Path
    line: int
    """The marker's line number (1-based)."""
    command: str
    start: str | None
    end: str | None
    keep: str | None
    """Of the lines from ``start`` to ``end``, only those this matches (None: all)."""
    block: str
    """The block's text as the page holds it (every line ends in a newline)."""
    span: tuple[int, int]
    """Where the block's text lies in the page's text."""

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def example_pages(folder: Path) -> list[Path]:
    """The pages that may hold examples: the checkout's README.md (beside ``folder``) and
    every page of ``folder``."""
    if not folder.is_dir():
        return []
    readme = folder.parent / "README.md"
    return ([readme] if readme.is_file() else []) + sorted(folder.glob("*.md"))


def find_examples(page: Path, text: str | None = None) -> list[Example]:
    """Every marked block of ``page`` (its text read unless given), in order."""
    if text is None:
        text = page.read_text(encoding="utf-8")
    found = []
    for marker in _MARKER.finditer(text):
        line = text.count("\n", 0, marker.start()) + 1
        where = f"{page}:{line}"
        match = _MARKED.match(text, marker.start())
        if match is None:
            raise ClusterSimError(where, "an example's marker ends in `-->` and its fenced "
                                  "block (```) starts on the next line")
        command, *rest = match["body"].strip().splitlines() or [""]
        command = command.strip()
        if not command.startswith(("clustersim ", "python ")):
            raise ClusterSimError(where, "an example's command starts with `clustersim` or "
                                  f"`python`, got {command!r}")
        selectors: dict[str, str] = {}
        for item in rest:
            key, colon, value = item.strip().partition(":")
            if not colon or key not in _KEYS or key in selectors:
                raise ClusterSimError(where, f"{item.strip()!r}: a line below the command is "
                                      "`from: REGEX`, `to: REGEX` or `keep: REGEX`, each at "
                                      "most once")
            try:
                re.compile(value.strip())
            except re.error as error:
                raise ClusterSimError(where, f"{key}: not a regular expression: {error}"
                                      ) from None
            selectors[key] = value.strip()
        found.append(Example(page, line, command, selectors.get("from"), selectors.get("to"),
                             selectors.get("keep"), match["block"], match.span("block")))
    return found


def excerpt(example: Example, output: str) -> str:
    """The lines of ``output`` the example shows, each without trailing blanks, and no blank
    line at the end."""
    lines = [line.rstrip() for line in output.rstrip("\n").splitlines()]
    first = 0
    if example.start is not None:
        first = _first(lines, example.start, 0, example, "from")
    last = len(lines) - 1
    if example.end is not None:
        last = _first(lines, example.end, first, example, "to")
    shown = [line for line in lines[first:last + 1]
             if example.keep is None or re.search(example.keep, line)]
    while shown and not shown[-1]:  # `to: ^$` ends an excerpt with its paragraph
        shown.pop()
    return "\n".join(shown) + "\n" if shown else ""


def _first(lines: list[str], pattern: str, begin: int, example: Example, key: str) -> int:
    for index in range(begin, len(lines)):
        if re.search(pattern, lines[index]):
            return index
    raise ClusterSimError(example.where, f"{key}: no line of `{example.command}`'s output "
                          f"matches {pattern!r}" + (" at or after the first" if key == "to"
                                                     else ""))


def run_command(example: Example, checkout: Path) -> str:
    """What ``example``'s command prints on stdout, run from a scratch folder that holds a
    link to each of ``checkout``'s files and folders (its outputs are written there), with
    ``checkout``'s code."""
    argv = shlex.split(example.command)
    if argv[0] == "clustersim":
        argv = [sys.executable, "-m", "clustersim", *argv[1:]]
    else:
        argv = [sys.executable, *argv[1:]]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(checkout), *filter(None, [os.environ.get("PYTHONPATH")])]),
        "COLUMNS": "100", "NO_COLOR": "1", "TERM": "dumb"}
    with tempfile.TemporaryDirectory(prefix="clustersim-docs-") as scratch:
        for entry in checkout.iterdir():
            if not entry.name.startswith(".") and entry.name not in ("runs", "reports"):
                (Path(scratch) / entry.name).symlink_to(entry.resolve())
        done = subprocess.run(argv, cwd=scratch, env=env, capture_output=True, text=True,
                              check=False)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(nothing on stderr)"])[-1]
        raise ClusterSimError(example.where, f"`{example.command}` exited with "
                              f"{done.returncode}: {last}")
    return done.stdout


def masked(text: str) -> str:
    """``text`` with its run-to-run parts (``VOLATILE``) masked."""
    for pattern, mask in VOLATILE:
        text = pattern.sub(mask, text)
    return text


def difference(committed: str, made: str, context: int = 1, most: int = 24) -> str:
    """The lines where two blocks differ, masked, as a short unified diff."""
    lines = list(difflib.unified_diff(masked(committed).splitlines(), masked(made).splitlines(),
                                      "committed", "made now", n=context, lineterm=""))
    more = len(lines) - most
    return "\n".join(lines[:most] + ([f"... and {more} more lines"] if more > 0 else []))


@dataclass(frozen=True, slots=True)
class Outcome:
    example: Example
    made: str
    """The block as the command makes it now."""
    wall_s: float

    @property
    def current(self) -> bool:
        return masked(self.made) == masked(self.example.block)


def regenerate(example: Example, checkout: Path,
               ran: dict[str, str] | None = None) -> Outcome:
    """What ``example``'s block holds when made now; ``ran``: the output of each command run
    before, by command, which examples of the same command share (filled as it goes)."""
    began = time.perf_counter()
    ran = {} if ran is None else ran
    if example.command not in ran:
        ran[example.command] = run_command(example, checkout)
    made = excerpt(example, ran[example.command])
    return Outcome(example, made, time.perf_counter() - began)


def _keys(examples: list[Example]) -> list[tuple]:
    """Each example by its command, its selectors and how many alike come before it: what
    finds it again in the page once its prose has moved."""
    seen: dict[tuple, int] = {}
    out = []
    for example in examples:
        key = (example.command, example.start, example.end, example.keep)
        seen[key] = seen.get(key, -1) + 1
        out.append((*key, seen[key]))
    return out


def rewritten(page: Path, text: str, made: dict[tuple, tuple[Example, str]]) -> str:
    """``text``, the page as it is now (its prose may have been edited while the commands
    ran), with the blocks of ``made`` (by ``_keys``: the example as it was read, and its new
    text) replaced."""
    examples = find_examples(page, text)
    now = dict(zip(_keys(examples), examples, strict=True))
    places = []
    for key, (example, block) in made.items():
        if key not in now:
            raise ClusterSimError(example.where, "the page's examples changed while their "
                                  "commands ran: run it again")
        places.append((now[key].span, block))
    for (begin, end), block in sorted(places, reverse=True):
        text = text[:begin] + block + text[end:]
    return text


def run_examples(folder: Path, only: str | None, write: Callable[[Path, str], None] | None,
                 say: Callable[[str], None]) -> int:
    """Regenerate every example of the pages beside and in ``folder`` whose page, line or
    command contains ``only`` (all when None), say each one's state, and with ``write`` write
    the stale ones; the number of examples stale (before writing). An example that cannot be
    made (its command fails, a selector matches nothing) is said and skipped, and the first
    such error raised once every other example is done."""
    checkout = folder.parent.resolve()
    stale = 0
    ran: dict[str, str] = {}
    failed: list[ClusterSimError] = []
    for page in example_pages(folder):
        examples = find_examples(page)
        made: dict[tuple, tuple[Example, str]] = {}
        for key, example in zip(_keys(examples), examples, strict=True):
            if only is not None and only not in f"{example.where} {example.command}":
                continue
            try:
                outcome = regenerate(example, checkout, ran)
            except ClusterSimError as error:  # said now, raised once the others are done
                say(f"{example.where}: `{example.command}`: failed: {error.message}")
                failed.append(error)
                continue
            state = "current" if outcome.current else "written" if write else "stale"
            say(f"{example.where}: `{example.command}`: {state} ({outcome.wall_s:,.1f} s)")
            if not outcome.current:
                stale += 1
                made[key] = (example, outcome.made)
                if write is None:
                    say(difference(example.block, outcome.made))
        if write is not None and made:
            write(page, rewritten(page, page.read_text(encoding="utf-8"), made))
    if failed:
        raise failed[0]
    return stale
