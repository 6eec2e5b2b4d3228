"""clustersim against NVIDIA's measured vLLM serving sweeps (the calibration set).

    python benchmarks/silicon_calibration.py [--rows 0,5,7] [--no-api-server] [--spread]
                                             [--csv out.csv]
    python benchmarks/silicon_calibration.py --fit-host


The 45 measured rows of NVIDIA's aiconfigurator (shipped in
``clustersim/data/calibration/fit/aiconfigurator/``, credited in NOTICE): Llama-3.1-70B with
vLLM's ``--quantization fp8`` on H100 SXM, one colocated instance at TP 2, 4 or 8, a closed
loop of ``batch_size`` clients with fixed prompt and output lengths (1K/1K, 1K/8K, 8K/1K), mean
TTFT and mean TPOT measured. Each row is replayed
with clustersim's own ``vllm bench serve`` client as the benchmark ran it: about 2 x concurrency
warm-up requests, then 10 x concurrency measured ones, every prompt and output exactly the
row's lengths, requests sent as soon as a slot frees (request rate inf). The table gives the
simulated means beside the measured ones and the error of each, then the mean absolute and the
mean signed error per metric, overall and by concurrency. These rows are for calibration:
whatever is fitted on them says so where it is used; held-out sweeps judge the result.
"""

from __future__ import annotations

import argparse
import csv
import math
import time
from pathlib import Path

from clustersim.metrics import summarize_run
from clustersim.scenario import parse_scenario
from clustersim.sim import run_scenario

ROOT = Path(__file__).resolve().parents[1]
DATA = (ROOT / "clustersim" / "data" / "calibration" / "fit" / "aiconfigurator"
        / "silicon_vllm_llama31_70b_fp8_h100.csv")
WARMUPS_PER_CLIENT = 2
MEASURED_PER_CLIENT = 10
"""NVIDIA's aiperf recipes: about 2 x concurrency warm-ups, 10 x concurrency measured."""


def rows() -> list[dict[str, str]]:
    with DATA.open(newline="") as f:
        return list(csv.DictReader(f))


def scenario(row: dict[str, str], api_server: bool, spread: bool = False) -> dict:
    """The row as a scenario; ``spread``: the measured run's clients opened one by one over
    one measured cycle (TTFT + (osl - 1) x TPOT), so that they start evenly spread, a what-if
    (the rows do not say how their clients started)."""
    isl, osl = int(row["isl"]), int(row["osl"])
    clients = int(row["batch_size"])
    data = {
        "name": f"silicon-tp{row['tp_size']}-{isl}x{osl}-c{clients}",
        "seed": 0,
        "model": "llama-3.1-70b",
        "gpu": "h100-sxm",
        "tensor_parallel_size": int(row["tp_size"]),
        "engine": {"quantization": "fp8", "max_model_len": isl + osl + 256},
        "workload": {
            "kind": "benchmark",
            "num_prompts": MEASURED_PER_CLIENT * clients,
            "num_warmups": WARMUPS_PER_CLIENT * clients,
            "max_concurrency": clients,
            "request_rate": math.inf,
            "lengths": {"kind": "independent", "prompt_tokens": isl, "output_tokens": osl},
        },
    }
    if spread:
        cycle_s = (float(row["silicon_ttft_ms"]) + (osl - 1) * float(row["silicon_tpot_ms"])) / 1e3
        data["workload"]["ramp_up_s"] = cycle_s * (clients - 1) / clients
    if api_server:
        data["api_server"] = {}
    return data


def replay(row: dict[str, str], api_server: bool, gpu: str | None = None,
           spread: bool = False) -> tuple[float, float]:
    """(mean TTFT ms, mean TPOT ms) of the row's benchmark, simulated (``gpu``: another
    profile of the row's GPU, ``h100-sxm@file.yaml``)."""
    data = scenario(row, api_server, spread)
    if gpu is not None:
        data["gpu"] = gpu
    summary = summarize_run(run_scenario(parse_scenario(data), record_steps=False))
    return summary.ttft_s.mean * 1e3, summary.tpot_s.mean * 1e3


PER_LAYER_US = (12, 15, 18, 21, 24, 32.1)
PER_REQUEST_US = (4.4, 15, 20, 25, 30, 35)


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
    best = None
    with tempfile.TemporaryDirectory() as folder:
        for layer in PER_LAYER_US:
            for request in PER_REQUEST_US:
                entry = {**base, "per_layer_overhead_s": layer * 1e-6,
                         "per_request_overhead_s": request * 1e-6}
                path = Path(folder) / f"host-{layer}-{request}.yaml"
                path.write_text(yaml.safe_dump({"profiles": {"h100-sxm": entry}}))
                errors = [replay(row, True, f"h100-sxm@{path}")[1]
                          / float(row["silicon_tpot_ms"]) - 1 for row in table]
                mape = sum(abs(e) for e in errors) / len(errors)
                bias = sum(errors) / len(errors)
                print(f"{layer:>9}{request:>11}{mape:>11.1%}{bias:>+8.1%}", flush=True)
                if best is None or mape < best[0]:
                    best = (mape, layer, request)
    assert best is not None
    print(f"\nbest: {best[1]} us/layer, {best[2]} us/request (TPOT MAPE {best[0]:.1%})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", help="comma-separated row numbers (default: all)")
    parser.add_argument("--no-api-server", action="store_true",
                        help="replay without the API server's own time")
    parser.add_argument("--csv", type=Path, help="also write the table here")
    parser.add_argument("--spread", action="store_true",
                        help="what-if: clients opened evenly over one measured cycle")
    parser.add_argument("--fit-host", action="store_true",
                        help="grid-search the host time per layer and per request instead")
    args = parser.parse_args()
    table = rows()
    if args.fit_host:
        fit_host(table)
        return
    chosen = (range(len(table)) if args.rows is None
              else [int(i) for i in args.rows.split(",")])
    header = ("row", "TP", "isl", "osl", "C", "TTFT meas", "TTFT sim", "err", "TPOT meas",
              "TPOT sim", "err")
    print(f"{header[0]:>3} {header[1]:>2} {header[2]:>5} {header[3]:>5} {header[4]:>3}"
          + "".join(f"{h:>11}" for h in header[5:]))
    out = []
    started = time.perf_counter()
    for i in chosen:
        row = table[i]
        ttft, tpot = replay(row, not args.no_api_server, spread=args.spread)
        m_ttft, m_tpot = float(row["silicon_ttft_ms"]), float(row["silicon_tpot_ms"])
        e_ttft, e_tpot = ttft / m_ttft - 1, tpot / m_tpot - 1
        out.append((i, int(row["tp_size"]), int(row["isl"]), int(row["osl"]),
                    int(row["batch_size"]), m_ttft, ttft, e_ttft, m_tpot, tpot, e_tpot))
        print(f"{i:>3} {row['tp_size']:>2} {row['isl']:>5} {row['osl']:>5} "
              f"{row['batch_size']:>3}{m_ttft:>11,.1f}{ttft:>11,.1f}{e_ttft:>+11.1%}"
              f"{m_tpot:>11,.2f}{tpot:>11,.2f}{e_tpot:>+11.1%}", flush=True)
    print()
    groups = {"all": out}
    for c in sorted({r[4] for r in out}):
        groups[f"C={c}"] = [r for r in out if r[4] == c]
    print(f"{'rows':<8}{'n':>4}{'TTFT MAPE':>12}{'TTFT bias':>12}{'TPOT MAPE':>12}"
          f"{'TPOT bias':>12}")
    for name, group in groups.items():
        n = len(group)
        print(f"{name:<8}{n:>4}"
              f"{sum(abs(r[7]) for r in group) / n:>12.1%}{sum(r[7] for r in group) / n:>+12.1%}"
              f"{sum(abs(r[10]) for r in group) / n:>12.1%}"
              f"{sum(r[10] for r in group) / n:>+12.1%}")
    print(f"\n{len(out)} rows in {time.perf_counter() - started:,.1f} s")
    if args.csv is not None:
        with args.csv.open("w", newline="") as f:
            writer = csv.writer(f, lineterminator="\n")
            writer.writerow(("row", "tp", "isl", "osl", "concurrency", "ttft_ms_measured",
                             "ttft_ms_sim", "ttft_error", "tpot_ms_measured", "tpot_ms_sim",
                             "tpot_error"))
            writer.writerows(out)


if __name__ == "__main__":
    main()
