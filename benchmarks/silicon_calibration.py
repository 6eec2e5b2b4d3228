"""clustersim against NVIDIA's measured vLLM serving sweeps (the calibration set).

    python benchmarks/silicon_calibration.py [--rows 0,5,7] [--no-api-server] [--csv out.csv]

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


def scenario(row: dict[str, str], api_server: bool) -> dict:
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
    if api_server:
        data["api_server"] = {}
    return data


def replay(row: dict[str, str], api_server: bool) -> tuple[float, float]:
    """(mean TTFT ms, mean TPOT ms) of the row's benchmark, simulated."""
    summary = summarize_run(run_scenario(parse_scenario(scenario(row, api_server)),
                                         record_steps=False))
    return summary.ttft_s.mean * 1e3, summary.tpot_s.mean * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", help="comma-separated row numbers (default: all)")
    parser.add_argument("--no-api-server", action="store_true",
                        help="replay without the API server's own time")
    parser.add_argument("--csv", type=Path, help="also write the table here")
    args = parser.parse_args()
    table = rows()
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
        ttft, tpot = replay(row, not args.no_api_server)
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
