"""clustersim against NVIDIA's measured vLLM serving sweeps (the calibration set), on a fitted
and a held-out split.

    python benchmarks/silicon_calibration.py [--sweep NAME ...] [--rows 0,5,7]
                                             [--no-api-server] [--spread] [--as-columns]
                                             [--fixed-lengths] [--as-served]
                                             [--turnaround-ms 30] [--csv out.csv]
    python benchmarks/silicon_calibration.py --fit-host
    python benchmarks/silicon_calibration.py --rounds [--sweep NAME] [--rows 0,5,7]
    python benchmarks/silicon_calibration.py --decompose [--sweep NAME ...] [--rows 0,5,7]

Every sweep shipped in ``clustersim/data/calibration/fit/aiconfigurator/`` (credited in
NOTICE): Llama-3.1-70B with vLLM's ``--quantization fp8`` on H100 SXM at TP 2/4/8;
MiniMax-M2.5 (FP8 blocks) on H100 (TP4 with expert parallelism, vLLM 0.18) and on H200 (TP4,
vLLM 0.16; TP8, vLLM 0.18); Kimi-K2.5 (INT4 experts) on H200 at TP8 (vLLM 0.16). Each row is
a closed loop of clients named by its prompt and output lengths (1K/1K, 1K/8K, 8K/1K), mean
TTFT and mean TPOT measured, replayed with clustersim's own benchmark client as the row's
InferenceX recipe ran it (``clustersim.calibration.recipes``): every prompt and answer drawn
uniformly from 0.8 to 1 x the named length, the recipe client's warm-ups, then 10 x
concurrency measured requests sent as soon as a slot frees (request rate inf), on the vLLM
release the row names, with the recipe's memory fraction, sequence cap and prefix caching
(``clustersim.calibration.sweeps`` maps each column). The table gives the simulated means
beside the measured ones and the error of each, then the mean absolute and the mean signed
error per metric by model, GPU, sweep, TP/DP/EP, prompt/output length and concurrency, on the
fitted split, the held-out split and both (``clustersim.calibration.silicon_split`` says which
rows are which), and last each model's TPOT and long-prompt TTFT against the targets. A run
listed twice in a file counts once; a run its own sweep contradicts (a mean TPOT above that of
the same shape at more clients) is listed apart with its reason and scored on neither split.
``--fit-host`` and ``--rounds`` work on the Llama sweep unless ``--sweep`` names others
(``--fit-host``: always; the host time was chosen on it); ``--decompose`` on the chosen rows
with prompts of 4K or more.
"""

from __future__ import annotations

import argparse
import csv
import json
import time
from pathlib import Path

from clustersim.calibration.recipes import length_range
from clustersim.calibration.silicon import (
    RowScore,
    replay,
    round_ttfts_ms,
    row_score,
    rows,
    scenario,
    simulate,
)
from clustersim.calibration.silicon_split import (
    DIMENSIONS,
    LONG_PROMPT_TOKENS,
    by_dimension,
    criteria,
    measurements,
    set_aside,
)
from clustersim.calibration.sweeps import SWEEP_FILES, all_rows, deployment

SWEEPS = {name.removeprefix("silicon_vllm_").removesuffix(".csv"): name for name in SWEEP_FILES}
"""--sweep names: ``llama31_70b_fp8_h100``, ``minimax_m25_fp8_h200_v0180``, ..."""
PER_LAYER_US = (0, 3, 4.5, 6, 9, 12, 18)
PER_REQUEST_US = (20, 25)
NEAR_BEST = 0.001
"""Grid points whose TPOT MAPE is this close to the best's are listed with it: the rows'
own scatter (a few percent a row) cannot order them."""


def fit_host(table: list[dict[str, str]]) -> None:
    """Grid of the host time per layer and per running request on every row's mean TPOT
    (TTFT is left out: it is set by how far the clients drift apart, not by the host): the
    shipped H100 SXM profile with those two values, each row replayed with the API server."""
    import tempfile

    import yaml

    from clustersim.catalog import load_profiles

    base = {k: v for k, v in load_profiles("calibrated")["h100-sxm"].items()
            if k not in ("provenance", "calibration")}
    print(f"{'us/layer':>9}{'us/request':>11}{'TPOT MAPE':>11}{'bias':>8}")
    scores: dict[tuple[float, float], float] = {}
    with tempfile.TemporaryDirectory() as folder:
        for layer in PER_LAYER_US:
            for request in PER_REQUEST_US:
                entry = {**base, "per_layer_overhead_s": layer * 1e-6,
                         "per_request_overhead_s": request * 1e-6}
                path = Path(folder) / f"host-{layer}-{request}.yaml"
                path.write_text(yaml.safe_dump({"profiles": {"h100-sxm": entry}}))
                errors = [replay(row, profile=str(path)).tpot_error for row in table]
                mape = sum(abs(e) for e in errors) / len(errors)
                bias = sum(errors) / len(errors)
                print(f"{layer:>9}{request:>11}{mape:>11.2%}{bias:>+8.2%}", flush=True)
                scores[layer, request] = mape
    ranked = sorted(scores.items(), key=lambda item: item[1])
    (layer, request), best = ranked[0]
    print(f"\nbest: {layer} us/layer, {request} us/request (TPOT MAPE {best:.2%})")
    near = [f"{layer} us/layer, {request} us/request ({mape:.2%})"
            for (layer, request), mape in ranked[1:] if mape - best < NEAR_BEST]
    if near:
        print(f"within {NEAR_BEST * 100:.1f} point of it: {'; '.join(near)}")


def rounds(table: list[dict[str, str]], chosen: list[int]) -> None:
    """Where a closed loop's TTFT goes, round by round: each row's simulated mean TTFT of the
    cold first round (every client sending at once) and of the later rounds, with the lengths
    the recipe drew and with every prompt and answer exactly the named length
    (``--fixed-lengths``), beside the measured mean. With one length, requests that start in
    one step finish in one and are sent again together: the later rounds stay as bunched as
    the first."""
    print(f"{'row':>3} {'TP':>2} {'isl':>5} {'osl':>5} {'C':>3}{'TTFT meas':>11}{'drawn r0':>11}"
          f"{'later':>11}{'mean':>11}{'fixed r0':>11}{'later':>11}{'mean':>11}")
    errors: dict[str, list[tuple[float, ...]]] = {}
    for i in chosen:
        row = table[i]
        dep = deployment(row)
        drawn = round_ttfts_ms(row)
        fixed = round_ttfts_ms(row, fixed_lengths=True)
        measured = float(row["silicon_ttft_ms"])
        means = [sum(r) / len(r) for r in (drawn, fixed)]
        for name in ("all", f"C={dep.concurrency}", f"{row['isl']}/{row['osl']}"):
            errors.setdefault(name, []).append(tuple(m / measured - 1 for m in means))
        print(f"{i:>3} {dep.tp:>2} {row['isl']:>5} {row['osl']:>5} {dep.concurrency:>3}"
              f"{measured:>11,.1f}" + "".join(
                  f"{r[0]:>11,.1f}{sum(r[1:]) / len(r[1:]):>11,.1f}{m:>11,.1f}"
                  for r, m in zip((drawn, fixed), means, strict=True)), flush=True)
    print(f"\n{'rows':<10}{'n':>4}{'drawn MAPE':>12}{'bias':>9}{'fixed MAPE':>12}{'bias':>9}")
    for name in sorted(errors, key=lambda k: (k != "all", "/" in k, len(k), k)):
        group = errors[name]
        cols = "".join(f"{sum(abs(e[k]) for e in group) / len(group):>12.1%}"
                       f"{sum(e[k] for e in group) / len(group):>+9.1%}" for k in (0, 1))
        print(f"{name:<10}{len(group):>4}{cols}")


LONE_PROMPTS = 8
"""Requests of the one-client replay that prices a row's lone prompt (:func:`decompose`)."""


def _lone_ttft_ms(row: dict[str, str]) -> float:
    """The row's mean TTFT with one client: prompts of the recipe's drawn lengths that meet
    no other, their prefill and the API server's time (ms)."""
    data = scenario(row)
    data["workload"].update(max_concurrency=1, num_prompts=LONE_PROMPTS, num_warmups=1)
    return simulate(data)[0]


def decompose(table: list[dict[str, str]], chosen: list[int]) -> None:
    """What each long-prompt row's mean TTFT is made of: a lone prompt's TTFT (one client, the
    drawn lengths: its prefill and the API server's time, as simulated) and the rest, the wait
    for other clients' prefills and steps, as measured, as replayed and as replayed with fixed
    lengths, each with its share of that TTFT."""
    print(f"{'row':>3} {'model':<14}{'parallel':<9}{'isl':>5} {'osl':>5} {'C':>4}"
          f"{'lone ms':>9}{'TTFT meas':>11}{'wait':>7}{'drawn':>9}{'wait':>7}"
          f"{'fixed':>10}{'wait':>7}")
    for i in chosen:
        row = table[i]
        if int(row["isl"]) < LONG_PROMPT_TOKENS:
            continue
        dep = deployment(row)
        lone = _lone_ttft_ms(row)
        measured = float(row["silicon_ttft_ms"])
        drawn = simulate(scenario(row))[0]
        fixed = simulate(scenario(row, fixed_lengths=True))[0]
        print(f"{i:>3} {dep.model:<14}{dep.parallel:<9}{row['isl']:>5} {row['osl']:>5} "
              f"{dep.concurrency:>4}{lone:>9,.1f}" + "".join(
                  f"{t:>{w},.1f}{1 - lone / t:>7.0%}"
                  for t, w in ((measured, 11), (drawn, 9), (fixed, 10))), flush=True)
    low, high = length_range(8192)
    print(f"\n(an 8192-token row's prompts are drawn from {low:,} to {high:,} tokens; 'wait' "
          "is the share of the TTFT beyond a lone prompt's)")


def _line(i: int, split: str, score: RowScore) -> str:
    """One row of the table: the deployment, the measured and simulated means, the errors."""
    return (f"{i:>3} {score.model:<14}{score.gpu:<9}{score.vllm_version or '-':<7}"
            f"{score.parallel:<9}{score.isl:>5} {score.osl:>5} {score.concurrency:>3} "
            f"{split:<9}{score.ttft_ms:>10,.1f}{score.sim_ttft_ms:>10,.1f}"
            f"{score.ttft_error:>+10.1%}{score.tpot_ms:>10,.2f}{score.sim_tpot_ms:>10,.2f}"
            f"{score.tpot_error:>+10.1%}")


def _table(table: list[dict[str, str]], chosen: list[int], api_server: bool, spread: bool,
           turnaround_ms: float, as_columns: bool, fixed_lengths: bool, as_served: bool
           ) -> tuple[list[tuple[dict[str, str], str, RowScore]],
                      list[tuple[dict[str, str], str, RowScore]]]:
    """Every distinct measurement of ``chosen`` replayed (each scenario simulated once),
    printed row by row: (row, split, score) of the scored runs, then of those set aside
    (split ``set aside``), each with its reason."""
    print(f"{'row':>3} {'model':<14}{'GPU':<9}{'vLLM':<7}{'parallel':<9}{'isl':>5} {'osl':>5} "
          f"{'C':>3} {'split':<9}" + "".join(f"{h:>10}" for h in (
              "TTFT meas", "TTFT sim", "err", "TPOT meas", "TPOT sim", "err")))
    index = {id(table[i]): i for i in chosen}
    simulated: dict[str, tuple[float, float]] = {}

    def score(row: dict[str, str]) -> RowScore:
        data = scenario(row, api_server, spread, turnaround_s=turnaround_ms / 1e3,
                        as_columns=as_columns, fixed_lengths=fixed_lengths,
                        as_served=as_served)
        key = json.dumps(data, sort_keys=True)
        if key not in simulated:
            simulated[key] = simulate(data)
        return row_score(row, *simulated[key], as_columns=as_columns)

    out = []
    for row, split in measurements([table[i] for i in chosen]):
        out.append((row, split, score(row)))
        print(_line(index[id(row)], split, out[-1][2]), flush=True)
    notes = sorted({deployment(row, as_columns).note for row, _, _ in out} - {""})
    for note in notes:
        print(f"note: {note}")
    aside = set_aside([table[i] for i in chosen])
    if aside:
        print("\nset aside, scored on neither split (its own sweep contradicts the run):")
    apart = []
    for row, _, reason in aside:
        apart.append((row, "set aside", score(row)))
        print(f"{_line(index[id(row)], 'set aside', apart[-1][2])}\n    {reason}", flush=True)
    return out, apart


def _summary(scored: list[tuple[RowScore, str]]) -> None:
    print(f"\n{'group':<30}{'split':<10}{'n':>4}{'TTFT MAPE':>11}{'bias':>9}{'TPOT MAPE':>11}"
          f"{'bias':>9}   {'TTFT, prompts >= 4K':<20}")
    for dimension in DIMENSIONS:
        if dimension != "all":
            print(f"by {dimension}")
        for name, split, e in by_dimension(scored, dimension):
            long = (f"{e.long_n:>4}{e.long_ttft_mape:>9.1%}{e.long_ttft_bias:>+9.1%}"
                    if e.long_n else "")
            print(f"{name:<30}{split:<10}{e.n:>4}{e.ttft_mape:>11.1%}{e.ttft_bias:>+9.1%}"
                  f"{e.tpot_mape:>11.1%}{e.tpot_bias:>+9.1%}   {long}")
    print("\ntargets: TPOT MAPE <= 10 %, TPOT bias within +-5 %, TTFT MAPE of prompts >= 4K "
          "<= 25 %, each model on each split")
    for c in criteria(scored):
        value = f"{c.value:+.1%}" if "bias" in c.what else f"{c.value:.1%}"
        print(f"{c.model:<15}{c.split:<10}{c.what:<26}{value:>9}  limit {c.limit:.0%}"
              f"  {'met' if c.met else 'MISSED'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", action="append", choices=sorted(SWEEPS),
                        help="replay this sweep (repeatable; default: every sweep, and the "
                        "Llama sweep for --rounds)")
    parser.add_argument("--rows", help="comma-separated row numbers within the chosen sweeps "
                        "(default: all)")
    parser.add_argument("--no-api-server", action="store_true",
                        help="replay without the API server's own time")
    parser.add_argument("--csv", type=Path, help="also write the table here")
    parser.add_argument("--spread", action="store_true",
                        help="what-if: clients opened evenly over one measured cycle")
    parser.add_argument("--as-columns", action="store_true",
                        help="what-if: the parallelism as the columns say where a row's id "
                        "contradicts them (15 MiniMax H100 rows)")
    parser.add_argument("--fixed-lengths", action="store_true",
                        help="what-if: every prompt and answer exactly the row's named "
                        "lengths, not drawn from 0.8 to 1 x them as the recipe's client did")
    parser.add_argument("--as-served", action="store_true",
                        help="what-if: the Llama rows' server with the recipe's async "
                        "scheduling and FP8 KV cache (the host time was fitted without them)")
    parser.add_argument("--turnaround-ms", type=float, default=0.0,
                        help="what-if: the client's mean time between an answer and its "
                        "slot's next send (exponential draws; workload.turnaround_s)")
    parser.add_argument("--rounds", action="store_true",
                        help="TTFT by round: the cold first round and the later ones, with "
                        "the drawn lengths and with fixed ones")
    parser.add_argument("--decompose", action="store_true",
                        help="each long-prompt row's TTFT split into a lone prompt's and the "
                        "wait for the others, measured and simulated")
    parser.add_argument("--fit-host", action="store_true",
                        help="grid-search the host time per layer and per request on the "
                        "Llama sweep instead")
    args = parser.parse_args()
    if args.fit_host:
        fit_host(rows())
        return
    default = [SWEEP_FILES[0]] if args.rounds else list(SWEEP_FILES)
    names = default if args.sweep is None else [SWEEPS[n] for n in args.sweep]
    table = [row for row in all_rows() if row["sweep"] in names]
    chosen = (range(len(table)) if args.rows is None
              else [int(i) for i in args.rows.split(",")])
    if args.rounds:
        rounds(table, list(chosen))
        return
    if args.decompose:
        decompose(table, list(chosen))
        return
    started = time.perf_counter()
    out, apart = _table(table, list(chosen), not args.no_api_server, args.spread,
                        args.turnaround_ms, args.as_columns, args.fixed_lengths,
                        args.as_served)
    scored = [(score, split) for _, split, score in out]
    _summary(scored)
    print(f"\n{len(out)} distinct measurements of {len(chosen)} rows in "
          f"{time.perf_counter() - started:,.1f} s")
    if args.csv is not None:
        with args.csv.open("w", newline="") as f:
            writer = csv.writer(f, lineterminator="\n")
            writer.writerow(("id", "sweep", "model", "gpu", "vllm", "parallel", "isl", "osl",
                             "concurrency", "split", "ttft_ms_measured", "ttft_ms_sim",
                             "ttft_error", "tpot_ms_measured", "tpot_ms_sim", "tpot_error"))
            writer.writerows((row["id"], r.sweep, r.model, r.gpu, r.vllm_version, r.parallel,
                              r.isl, r.osl, r.concurrency, split, r.ttft_ms, r.sim_ttft_ms,
                              r.ttft_error, r.tpot_ms, r.sim_tpot_ms, r.tpot_error)
                             for row, split, r in out + apart)


if __name__ == "__main__":
    main()
