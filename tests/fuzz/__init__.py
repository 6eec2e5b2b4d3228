"""A fuzz campaign against the ``clustersim`` command line: generated inputs, run under limits,
each outcome classified (``python -m tests.fuzz --cases 10000``; a quick run is in
``tests/test_fuzz.py``).

Cases are drawn by the hypothesis strategies of :mod:`tests.fuzz.strategies` (mutated shipped
scenarios and files, scenarios built from the JSON schema the models export, malformed traces
in every format, command lines, and :mod:`tests.fuzz.files`' special files, links and size
extremes) and run by :mod:`tests.fuzz.runner` in fork servers (:mod:`tests.fuzz.worker`) with
30 s of CPU time and 2 GB each (and a wall-clock backstop against a hang). An input must end
in exit 0 with outputs that hold the run's invariants and rerun to the same bytes, or in exit
2 with a few ``path: message`` lines, and change nothing beside its folder; anything else is a
failure.
"""

from __future__ import annotations

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis.strategies import SearchStrategy

from tests.fuzz.strategies import SOURCES, Case


def generate(num_cases: int, seed: int = 0) -> list[Case]:
    """``num_cases`` cases, each source's share of them by its weight in
    :data:`~tests.fuzz.strategies.SOURCES`, interleaved; the same ones for the same seed
    (generation only: no shrinking, no example database)."""
    total_weight = sum(weight for _, weight, _ in SOURCES)
    shares = [num_cases * weight // total_weight for _, weight, _ in SOURCES]
    shares[0] += num_cases - sum(shares)
    drawn = [_draw(strategy, share, seed * 1_000_003 + i)
             for i, ((_, _, strategy), share) in enumerate(zip(SOURCES, shares, strict=True))]
    # interleaved, so that a campaign cut short has seen every source
    order = sorted(((k / len(group), i, k) for i, group in enumerate(drawn)
                    for k in range(len(group))))
    return [drawn[i][k] for _, i, k in order]


def _draw(strategy: SearchStrategy[Case], count: int, seed: int) -> list[Case]:
    found: list[Case] = []
    attempt = 0
    while len(found) < count:

        @settings(max_examples=count - len(found), database=None, deadline=None,
                  phases=[Phase.generate], suppress_health_check=list(HealthCheck))
        @hypothesis_seed(seed + 7919 * attempt)
        @given(strategy)
        def collect(case: Case) -> None:
            found.append(case)

        collect()
        attempt += 1
    return found[:count]
