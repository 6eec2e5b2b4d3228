"""The serving sweeps' fitted and held-out splits, and their errors by model, GPU, parallelism,
prompt length and concurrency.

The split, by position in each sweep (no row's error chose it):

- fitted: every Llama-3.1-70B row (the host time of each engine step was chosen on them:
  ``benchmarks/silicon_calibration.py --fit-host``), and two of every three configurations of
  each MoE sweep;
- held-out: the other configurations of each MoE sweep: in the sweep's configurations sorted
  by (parallelism, prompt, output, concurrency), every third from the second on (positions 1,
  4, 7, ...), so that each sweep holds out every shape and most concurrencies. A
  configuration is a (sweep, parallelism, prompt, output, concurrency): its repeated
  measurements fall on one side together.

No constant may be chosen on a held-out row; the fitted rows are where one may be.

A run listed twice (the same configuration and means within
``sweeps.SAME_MEASUREMENT_MS``) counts once: :func:`measurements`.

A run its own sweep contradicts is set aside, scored on neither split and listed with its
reason (:func:`set_aside`): in a closed loop of fixed-length requests more clients never make
a token faster (each step carries at least as many decodes), so a run whose mean TPOT exceeds
that of a run of the same sweep, parallelism and shape at more clients, by more than
``CONTRADICTION_TOLERANCE``, measured something other than what its columns say (one of the
runs of Kimi-K2.5's 1K/8K at 16 clients reads 63.98 ms a token, the other 16.00 ms, and 32 and
64 clients 22.4 and 31.9 ms). The rule reads measurements only, never a simulated value.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from clustersim.calibration.silicon import RowScore
from clustersim.calibration.sweeps import SWEEP_FILES, deployment, same_measurement

FITTED = "fitted"
HELD_OUT = "held-out"
SPLITS = (FITTED, HELD_OUT)
HOLD_OUT_EVERY = 3
HOLD_OUT_AT = 1
"""Held out: the configurations at positions ``HOLD_OUT_AT`` mod ``HOLD_OUT_EVERY``."""
LONG_PROMPT_TOKENS = 4096
"""Prompts from this long are the long-prompt TTFT rows."""
CONTRADICTION_TOLERANCE = 0.05
"""How far a run's mean TPOT may exceed that of a run at more clients before the sweep
contradicts it: above the scatter of the files' repeated runs (of the 48 configurations
measured twice, 43 agree within 1.5 % and two within 2.2 and 4.3 %; the other three differ by
24, 61 and 300 %)."""

Config = tuple[str, int, int, bool, int, int, int]
"""(sweep, tp, dp, expert parallel, isl, osl, concurrency)."""


def config(row: dict[str, str]) -> Config:
    """The configuration a row measured (its sweep fixes model, GPU and vLLM release)."""
    dep = deployment(row)
    return (row["sweep"], dep.tp, dep.dp, dep.expert_parallel, int(row["isl"]),
            int(row["osl"]), dep.concurrency)


def held_out_configs(table: Sequence[dict[str, str]]) -> set[Config]:
    """The held-out configurations of ``table`` (rows with their ``sweep``)."""
    held: set[Config] = set()
    for sweep in {row["sweep"] for row in table}:
        if sweep == SWEEP_FILES[0]:
            continue  # the host time's fit set
        configs = sorted({config(row) for row in table if row["sweep"] == sweep})
        held.update(c for i, c in enumerate(configs) if i % HOLD_OUT_EVERY == HOLD_OUT_AT)
    return held


def _distinct(table: Sequence[dict[str, str]]) -> list[tuple[dict[str, str], str]]:
    """Every distinct measured run of ``table`` with its split, in table order (a run listed
    twice: its first row)."""
    held = held_out_configs(table)
    kept: list[tuple[dict[str, str], str]] = []
    seen: dict[Config, list[dict[str, str]]] = {}
    for row in table:
        key = config(row)
        if any(same_measurement(row, other) for other in seen.get(key, [])):
            continue
        seen.setdefault(key, []).append(row)
        kept.append((row, HELD_OUT if key in held else FITTED))
    return kept


def contradiction(row: dict[str, str], table: Sequence[dict[str, str]]) -> str | None:
    """Why ``row``'s own sweep in ``table`` contradicts it (module docstring), or None."""
    key = config(row)
    tpot = float(row["silicon_tpot_ms"])
    faster = [(config(other)[-1], float(other["silicon_tpot_ms"])) for other in table
              if config(other)[:-1] == key[:-1] and config(other)[-1] > key[-1]]
    below = [(clients, ms) for clients, ms in faster
             if tpot > (1 + CONTRADICTION_TOLERANCE) * ms]
    if not below:
        return None
    clients, ms = min(below, key=lambda item: (item[0], item[1]))
    return (f"TPOT {tpot:.2f} ms at {key[-1]} clients, {tpot / ms - 1:.0%} above the "
            f"{ms:.2f} ms the same sweep and shape measured at {clients}: more clients never "
            "make a token faster")


def measurements(table: Sequence[dict[str, str]]) -> list[tuple[dict[str, str], str]]:
    """Every distinct measured run of ``table`` with its split, in table order (a run listed
    twice: its first row), but those :func:`set_aside`."""
    aside = {id(row) for row, _, _ in set_aside(table)}
    return [(row, split) for row, split in _distinct(table) if id(row) not in aside]


def set_aside(table: Sequence[dict[str, str]]) -> list[tuple[dict[str, str], str, str]]:
    """The distinct runs of ``table`` its sweeps contradict: (row, split, reason), in table
    order (:func:`contradiction`; scored on neither split)."""
    return [(row, split, reason) for row, split in _distinct(table)
            if (reason := contradiction(row, table)) is not None]


@dataclass(frozen=True)
class Errors:
    """Mean absolute and mean signed errors (fractions) of a group of rows."""

    n: int
    ttft_mape: float
    ttft_bias: float
    tpot_mape: float
    tpot_bias: float
    long_n: int
    """Rows with prompts of ``LONG_PROMPT_TOKENS`` or more."""
    long_ttft_mape: float
    long_ttft_bias: float


def errors(group: Sequence[RowScore]) -> Errors:
    """The errors of ``group`` (not empty); the long-prompt ones NaN without such rows."""
    n = len(group)
    long = [s for s in group if s.isl >= LONG_PROMPT_TOKENS]
    nan = float("nan")
    return Errors(
        n, sum(abs(s.ttft_error) for s in group) / n, sum(s.ttft_error for s in group) / n,
        sum(abs(s.tpot_error) for s in group) / n, sum(s.tpot_error for s in group) / n,
        len(long),
        sum(abs(s.ttft_error) for s in long) / len(long) if long else nan,
        sum(s.ttft_error for s in long) / len(long) if long else nan)


DIMENSIONS: dict[str, Callable[[RowScore], tuple]] = {
    "all": lambda s: ("all",),
    "model": lambda s: (s.model,),
    "GPU": lambda s: (s.gpu,),
    "sweep": lambda s: (s.model, s.gpu, s.vllm_version or "-"),
    "TP/DP/EP": lambda s: (s.model, s.parallel),
    "prompt/output": lambda s: (s.isl, s.osl),
    "concurrency": lambda s: (s.concurrency,),
}
"""How the errors are grouped: each dimension's key of a row (sorted as keys)."""


def label(dimension: str, key: tuple) -> str:
    """A group's name in a table: ``minimax-m2.5 h200 v0.18.0``, ``8192/1024``, ``C=16``."""
    if dimension == "prompt/output":
        return f"{key[0]}/{key[1]}"
    if dimension == "concurrency":
        return f"C={key[0]}"
    if dimension == "sweep":
        return f"{key[0]} {key[1]} v{key[2]}" if key[2] != "-" else f"{key[0]} {key[1]}"
    return " ".join(map(str, key))


def by_dimension(scored: Sequence[tuple[RowScore, str]], dimension: str
                 ) -> list[tuple[str, str, Errors]]:
    """(group, split, errors) of every group of ``dimension`` on each split that has rows of
    it, then on both splits together ('all') where it has rows on both."""
    key = DIMENSIONS[dimension]
    out = []
    for group in sorted({key(s) for s, _ in scored}):
        sides = {split: [s for s, side in scored if key(s) == group and side == split]
                 for split in SPLITS}
        for split, rows in sides.items():
            if rows:
                out.append((label(dimension, group), split, errors(rows)))
        if all(sides.values()):
            out.append((label(dimension, group), "all", errors(sum(sides.values(), []))))
    return out


@dataclass(frozen=True)
class Criterion:
    """One acceptance criterion on one model's split."""

    model: str
    split: str
    what: str
    value: float
    limit: float

    @property
    def met(self) -> bool:
        return abs(self.value) <= self.limit


TPOT_MAPE_LIMIT = 0.10
TPOT_BIAS_LIMIT = 0.05
LONG_TTFT_MAPE_LIMIT = 0.25
"""The targets: TPOT within 10 % and its bias within +-5 % on both splits for every model;
long-prompt TTFT within 25 %."""


def criteria(scored: Sequence[tuple[RowScore, str]]) -> list[Criterion]:
    """Each model's TPOT MAPE, TPOT bias and long-prompt TTFT MAPE on each split it has rows
    on, against the targets."""
    out = []
    for model in sorted({s.model for s, _ in scored}):
        for split in SPLITS:
            group = [s for s, side in scored if s.model == model and side == split]
            if not group:
                continue
            e = errors(group)
            out += [Criterion(model, split, "TPOT MAPE", e.tpot_mape, TPOT_MAPE_LIMIT),
                    Criterion(model, split, "TPOT bias", e.tpot_bias, TPOT_BIAS_LIMIT)]
            if e.long_n:
                out.append(Criterion(model, split, f"TTFT MAPE, prompts >= "
                                     f"{LONG_PROMPT_TOKENS}", e.long_ttft_mape,
                                     LONG_TTFT_MAPE_LIMIT))
    return out
