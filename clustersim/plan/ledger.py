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
import pickle
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import fields
from operator import attrgetter, itemgetter
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any, Generic, TypeVar

from clustersim.plan.estimate import Screened
from clustersim.plan.space import Candidate, PoolChoice

SPILL_AT = 50_000
"""Screen verdicts held in memory; past this many they are sorted and written to a run on
disk (about 0.2 KB each there, 1 KB in memory)."""
BLOCK = 2_000
"""Verdicts per pickle in a run: a merge holds one block of each run."""

Key = tuple[Any, ...]
Flat = tuple[Any, ...]
"""A verdict as plain values (:func:`flat`): what a run holds, cheap to pickle and to read."""
_first = itemgetter(0)
Row = TypeVar("Row")
"""A ledger's row: the planner's ``CandidateResult``. The ledger orders rows and makes the
screen's ones, whatever they hold (``result.py`` defines them, and imports this module); a
row is never a tuple, which is what a verdict read from the screen is."""


class ScreenRows:
    """The screen's verdicts of a plan, each with its ledger key, in key order when read."""

    def __init__(self, key: Callable[[Screened], Key], spill_at: int | None = None) -> None:
        """``spill_at``: verdicts held in memory before a run goes to disk (``SPILL_AT``)."""
        self._key = key
        self._spill_at = SPILL_AT if spill_at is None else spill_at
        self._held: list[tuple[Key, Flat]] = []
        self._sorted = True
        self._runs: list[Path] = []
        self._dir: TemporaryDirectory[str] | None = None
        self._count = 0
        self.gpus: set[str] = set()
        """Every GPU type a verdict's candidate uses."""

    def add(self, verdict: Screened) -> None:
        self._held.append((self._key(verdict), flat(verdict)))
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

    def flats(self) -> Iterator[tuple[Key, Flat]]:
        """(key, flat verdict) in key order; every call reads afresh."""
        if not self._sorted:
            self._held.sort(key=_first)
            self._sorted = True
        if not self._runs:
            return iter(self._held)
        return heapq.merge(*(_read(path) for path in self._runs), self._held, key=_first)

    def __iter__(self) -> Iterator[tuple[Key, Screened]]:
        """(key, verdict) in key order; every call reads afresh."""
        verdict = Unflat()
        return ((key, verdict(item)) for key, item in self.flats())

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


def _read(path: Path) -> Iterator[tuple[Key, Flat]]:
    with path.open("rb") as f:
        while True:
            try:
                block = pickle.load(f)
            except EOFError:
                return
            yield from block


_POOL_FIELDS = tuple(f.name for f in fields(PoolChoice) if f.init)
_CANDIDATE_FIELDS = tuple(f.name for f in fields(Candidate) if f.init)
_POOLS = _CANDIDATE_FIELDS.index("pools")
_pool_values = attrgetter(*_POOL_FIELDS)
_candidate_values = attrgetter(*_CANDIDATE_FIELDS)


def flat(verdict: Screened) -> Flat:
    """The verdict as plain values: its candidate's fields in order (its pools' fields in
    order in place of the pools), the estimate, the binding limit and the reason."""
    values = list(_candidate_values(verdict.candidate))
    values[_POOLS] = tuple(_pool_values(p) for p in verdict.candidate.pools)
    return (tuple(values), verdict.estimate_per_s, verdict.binding, verdict.reason)


class Unflat:
    """:func:`flat`'s inverse; the pools, immutable, are shared between the verdicts it
    makes."""

    def __init__(self) -> None:
        self._pools: dict[tuple[Any, ...], PoolChoice] = {}

    def __call__(self, item: Flat) -> Screened:
        values, estimate, binding, reason = item
        pools = self._pools
        made = []
        for p in values[_POOLS]:
            choice = pools.get(p)
            if choice is None:
                choice = pools[p] = PoolChoice(*p)
            made.append(choice)
        args = list(values)
        args[_POOLS] = tuple(made)
        return Screened(Candidate(*args), estimate, binding, reason)


class Ledger(Generic[Row]):
    """Every candidate's row in the ledger's order: the measured rows (held) merged with the
    rows of the screen's other verdicts (made as read). A collection: ``len``, ``iter`` (each
    pass reads afresh), ``in`` by row."""

    def __init__(self, measured: list[tuple[Key, Row]], screened: ScreenRows,
                 row: Callable[[Screened], Row], skip: Iterable[Key] = ()) -> None:
        """``measured``: the simulated candidates' rows with their keys; ``screened``: the
        screen's verdicts; ``skip``: the keys of the verdicts the measured rows replace (the
        measured candidates' own); ``row``: a verdict's row."""
        self._measured = sorted(measured, key=_first)
        self._skip = frozenset(skip)
        self._screened = screened
        self._row = row
        self._len: int | None = None

    @property
    def measured(self) -> tuple[Row, ...]:
        """The rows of the candidates that were simulated (a simulation that failed is one
        pruned for its error), in the ledger's order."""
        return tuple(r for _, r in self._measured)

    def __iter__(self) -> Iterator[Row]:
        skip, row, verdict = self._skip, self._row, Unflat()
        others = ((key, item) for key, item in self._screened.flats() if key not in skip)
        for _, item in heapq.merge(self._measured, others, key=_first):
            yield row(verdict(item)) if isinstance(item, tuple) else item

    def __len__(self) -> int:
        if self._len is None:
            skip = self._skip
            skipped = sum(1 for key, _ in self._screened.flats() if key in skip) if skip else 0
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


class Ledgers(Generic[Row]):
    """Several plans' ledgers as one (the GPU generations of ``plan.gpus``): every plan's
    measured rows first, plan by plan in the order given, then every plan's other rows in
    the same order. A collection, as :class:`Ledger`."""

    def __init__(self, ledgers: Iterable[Collection[Row]]) -> None:
        self._ledgers = list(ledgers)

    @property
    def measured(self) -> tuple[Row, ...]:
        return tuple(r for ledger in self._ledgers for r in _measured(ledger))

    def __iter__(self) -> Iterator[Row]:
        yield from self.measured
        for ledger in self._ledgers:
            held = {id(r) for r in _measured(ledger)}
            yield from (r for r in ledger if id(r) not in held)

    def __len__(self) -> int:
        return sum(len(ledger) for ledger in self._ledgers)

    @property
    def spilled(self) -> int:
        return sum(getattr(ledger, "spilled", 0) for ledger in self._ledgers)

    def __bool__(self) -> bool:
        return any(bool(ledger) for ledger in self._ledgers)

    def __contains__(self, item: object) -> bool:
        return any(r == item for r in self)


def _measured(ledger: Collection[Row]) -> tuple[Row, ...]:
    """A ledger's measured rows (those it holds); a plain collection's rows with a
    goodput."""
    if isinstance(ledger, Ledger):
        return ledger.measured
    return tuple(r for r in ledger if getattr(r, "goodput", None) is not None)
