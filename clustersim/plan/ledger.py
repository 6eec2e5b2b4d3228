"""The ledger of a plan: every candidate's row in the plan's order, read as it is written.

A plan of a thousand GPUs weighs about a million candidates, nearly all of them screened or
pruned on paper and never simulated. Their rows are what the screen said of them, so the
ledger keeps the screen's verdicts (:class:`ScreenRows`) and makes each row as it is read;
past ``SPILL_AT`` verdicts they go to disk in sorted runs (a temporary directory, removed
with them) and are merged back in order, so that a plan's memory does not grow with its
search space. The candidates that were simulated, a handful, are held as rows
(:class:`Ledger`'s ``measured``) and take their place in the order as the runs are merged.

Order: every row has a key, and the ledger is the rows sorted by it; keys are unique (the
candidate's id is their last part), so a merge of sorted runs is the same order as one sort.
"""

from __future__ import annotations

import heapq
import itertools
import pickle
from collections.abc import Callable, Iterator
from operator import itemgetter
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import TYPE_CHECKING, Any

from clustersim.plan.estimate import Screened

if TYPE_CHECKING:
    from clustersim.plan.result import CandidateResult

SPILL_AT = 50_000
"""Screen verdicts held in memory; past this many they are sorted and written to a run on
disk (about 0.3 KB each there, 1 KB in memory)."""
BLOCK = 2_000
"""Verdicts per pickle in a run: a merge holds one block of each run."""

Key = tuple[Any, ...]
_first = itemgetter(0)


class ScreenRows:
    """The screen's verdicts of a plan, each with its ledger key, in key order when read."""

    def __init__(self, key: Callable[[Screened], Key], spill_at: int | None = None) -> None:
        """``spill_at``: verdicts held in memory before a run goes to disk (``SPILL_AT``)."""
        self._key = key
        self._spill_at = SPILL_AT if spill_at is None else spill_at
        self._held: list[tuple[Key, Screened]] = []
        self._sorted = True
        self._runs: list[Path] = []
        self._dir: TemporaryDirectory[str] | None = None
        self._count = 0
        self.gpus: set[str] = set()
        """Every GPU type a verdict's candidate uses."""

    def add(self, verdict: Screened) -> None:
        self._held.append((self._key(verdict), verdict))
        self._sorted = False
        self._count += 1
        for pool in verdict.candidate.pools:
            self.gpus.add(pool.gpu)
        if len(self._held) >= self._spill_at:
            self._spill()

    def __len__(self) -> int:
        return self._count

    @property
    def spilled(self) -> int:
        """Runs written to disk."""
        return len(self._runs)

    def __iter__(self) -> Iterator[tuple[Key, Screened]]:
        """(key, verdict) in key order; every call reads afresh."""
        if not self._sorted:
            self._held.sort(key=_first)
            self._sorted = True
        if not self._runs:
            return iter(self._held)
        return heapq.merge(*(_read(path) for path in self._runs), self._held, key=_first)

    def _spill(self) -> None:
        if self._dir is None:
            self._dir = TemporaryDirectory(prefix="clustersim-ledger-")
        self._held.sort(key=_first)
        path = Path(self._dir.name) / f"run{len(self._runs)}.pickle"
        with path.open("wb") as f:
            for start in range(0, len(self._held), BLOCK):
                pickle.dump(self._held[start:start + BLOCK], f, pickle.HIGHEST_PROTOCOL)
        self._runs.append(path)
        self._held = []
        self._sorted = True


def _read(path: Path) -> Iterator[tuple[Key, Screened]]:
    with path.open("rb") as f:
        while True:
            try:
                block = pickle.load(f)
            except EOFError:
                return
            yield from block


class Ledger:
    """Every candidate's row in the ledger's order: the measured rows (held) merged with the
    rows of the screen's other verdicts (made as read). A collection: ``len``, ``iter`` (each
    pass reads afresh), ``in`` by row."""

    def __init__(self, measured: list[tuple[Key, CandidateResult]], screened: ScreenRows,
                 row: Callable[[Screened], CandidateResult]) -> None:
        """``measured``: the simulated candidates' rows with their keys; ``screened``: the
        screen's verdicts (those of the measured candidates are skipped); ``row``: a verdict's
        row."""
        self._measured = sorted(measured, key=_first)
        self._ids = {r.id for _, r in measured}
        self._screened = screened
        self._row = row
        self._len: int | None = None

    @property
    def measured(self) -> tuple[CandidateResult, ...]:
        """The rows of the candidates that were simulated (a simulation that failed is one
        pruned for its error), in the ledger's order."""
        return tuple(r for _, r in self._measured)

    def __iter__(self) -> Iterator[CandidateResult]:
        ids, row = self._ids, self._row
        others = ((key, verdict) for key, verdict in self._screened
                  if verdict.candidate.id not in ids)
        for _, item in heapq.merge(self._measured, others, key=_first):
            yield row(item) if isinstance(item, Screened) else item

    def __len__(self) -> int:
        if self._len is None:
            ids = self._ids
            skipped = sum(1 for _, v in self._screened if v.candidate.id in ids) if ids else 0
            self._len = len(self._measured) + len(self._screened) - skipped
        return self._len

    @property
    def spilled(self) -> int:
        """Runs of the screen's verdicts on disk (0: all held in memory)."""
        return self._screened.spilled

    def __bool__(self) -> bool:
        return bool(self._measured) or len(self._screened) > 0

    def __contains__(self, item: object) -> bool:
        return any(r == item for r in self)

    def head(self, n: int) -> list[CandidateResult]:
        """The first ``n`` rows."""
        return list(itertools.islice(self, n))
