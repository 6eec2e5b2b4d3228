"""NVIDIA's 45 measured vLLM serving runs (the calibration rows of the time outside the kernels)
replayed with clustersim's own benchmark client.

The rows (``fit/aiconfigurator/silicon_vllm_llama31_70b_fp8_h100.csv``, credited in NOTICE):
Llama-3.1-70B with vLLM's ``--quantization fp8`` on H100 SXM, one colocated instance at TP 2, 4
or 8, a closed loop of 4 to 64 clients with fixed prompt and output lengths (1K/1K, 1K/8K,
8K/1K), mean TTFT and mean TPOT measured. Each row is replayed as its benchmark ran: about
2 x concurrency warm-ups, then 10 x concurrency measured requests, every prompt and output
exactly the row's lengths, requests sent as soon as a slot frees (request rate inf). The host
time of each engine step in fit-v2 is fitted on these rows; ``clustersim validate`` shows them
beside the held-out sets, marked as what they are.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass

from clustersim.calibration.sources import FIT_DIR
from clustersim.inputs import read_bytes

ROWS_FILE = FIT_DIR / "aiconfigurator" / "silicon_vllm_llama31_70b_fp8_h100.csv"
WARMUPS_PER_CLIENT = 2
MEASURED_PER_CLIENT = 10
"""NVIDIA's aiperf recipes: about 2 x concurrency warm-ups, 10 x concurrency measured."""


@dataclass(frozen=True)
class RowScore:
    """One row replayed: its shape, the measured and simulated means (ms)."""

    tp: int
    isl: int
    osl: int
    concurrency: int
    ttft_ms: float
    tpot_ms: float
    sim_ttft_ms: float
    sim_tpot_ms: float

    @property
    def ttft_error(self) -> float:
        return self.sim_ttft_ms / self.ttft_ms - 1

    @property
    def tpot_error(self) -> float:
        return self.sim_tpot_ms / self.tpot_ms - 1


def rows() -> list[dict[str, str]]:
    """The measured rows, every column as text."""
    text = read_bytes(ROWS_FILE, "calibration rows").decode("utf-8")
    return list(csv.DictReader(io.StringIO(text, newline="")))


def measured_cycle_s(row: dict[str, str]) -> float:
    """One client's measured round: its mean TTFT, then ``osl - 1`` mean TPOTs (s)."""
    osl = int(row["osl"])
    return (float(row["silicon_ttft_ms"]) + (osl - 1) * float(row["silicon_tpot_ms"])) / 1e3


def scenario(row: dict[str, str], api_server: bool = True, spread: bool = False,
             gpu: str = "h100-sxm", turnaround_s: float = 0.0,
             early_fraction: float = 0.0, short_answers: float = 0.0) -> dict:
    """The row as a scenario. ``spread``: the measured run's clients opened one by one over
    one measured cycle (TTFT + (osl - 1) x TPOT), so that they start evenly spread, a what-if
    (the rows do not say how their clients started). ``gpu``: the GPU with a profile
    (``h100-sxm@vidur``). ``turnaround_s``: the client's mean time between an answer and its
    slot's next send (``workload.turnaround_s``), a what-if (the rows do not record it).
    ``early_fraction``: that share of the answers ends early, at a length drawn uniformly from
    2 to ``osl`` tokens, the rest at ``osl``, a what-if (answers that stop at the model's
    end-of-text token when the server drops the request's ``ignore_eos``).
    ``short_answers``: every answer drawn uniformly from ``(1 - short_answers) x osl`` to
    ``osl`` tokens, a what-if (answers a few tokens apart, which no fixed-length run has)."""
    if early_fraction > 0 and short_answers > 0:
        raise ValueError("early_fraction and short_answers are two answer-length what-ifs; "
                         "give one")
    isl, osl = int(row["isl"]), int(row["osl"])
    clients = int(row["batch_size"])
    data: dict = {
        "name": f"silicon-tp{row['tp_size']}-{isl}x{osl}-c{clients}",
        "seed": 0,
        "model": "llama-3.1-70b",
        "gpu": gpu,
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
    if turnaround_s > 0:
        data["workload"]["turnaround_s"] = turnaround_s
    if early_fraction > 0:
        data["workload"]["lengths"] = {"kind": "mixture", "classes": [
            {"name": "full", "weight": 1.0 - early_fraction, "prompt_tokens": isl,
             "output_tokens": osl},
            {"name": "early", "weight": early_fraction, "prompt_tokens": isl,
             "output_tokens": {"kind": "uniform", "low": 2, "high": osl}},
        ]}
    if short_answers > 0:
        low = max(2, math.ceil((1.0 - short_answers) * osl))
        data["workload"]["lengths"]["output_tokens"] = {"kind": "uniform", "low": low,
                                                        "high": osl}
    if spread:
        data["workload"]["ramp_up_s"] = measured_cycle_s(row) * (clients - 1) / clients
    if api_server:
        data["api_server"] = {}
    return data


def replay(row: dict[str, str], api_server: bool = True, spread: bool = False,
           gpu: str = "h100-sxm", turnaround_s: float = 0.0,
           early_fraction: float = 0.0, short_answers: float = 0.0) -> RowScore:
    """The row's benchmark, simulated."""
    from clustersim.metrics import summarize_run
    from clustersim.scenario import parse_scenario
    from clustersim.sim import run_scenario

    data = scenario(row, api_server, spread, gpu, turnaround_s, early_fraction, short_answers)
    summary = summarize_run(run_scenario(parse_scenario(data), record_steps=False))
    return RowScore(int(row["tp_size"]), int(row["isl"]), int(row["osl"]),
                    int(row["batch_size"]), float(row["silicon_ttft_ms"]),
                    float(row["silicon_tpot_ms"]), summary.ttft_s.mean * 1e3,
                    summary.tpot_s.mean * 1e3)


def round_ttfts_ms(row: dict[str, str], spread: bool = False) -> list[float]:
    """Mean TTFT (ms) of each round of the row's measured requests, replayed with the API
    server's defaults: the requests in send order, ``concurrency`` at a time (the first
    round is the cold burst that opens the measured run)."""
    from clustersim.metrics.requests import request_metrics
    from clustersim.scenario import parse_scenario
    from clustersim.sim import run_scenario
    from clustersim.workload.benchmark import WARMUP_PREFIX

    clients = int(row["batch_size"])
    result = run_scenario(parse_scenario(scenario(row, spread=spread)), record_steps=False)
    measured = sorted((r for r in result.requests
                       if not str(r.request_id).startswith(WARMUP_PREFIX)),
                      key=lambda r: r.arrival_s)
    ttfts = [request_metrics(r, with_itl=False).ttft_s for r in measured]
    rounds = [[t for t in ttfts[i:i + clients] if t is not None]
              for i in range(0, len(ttfts), clients)]
    return [1e3 * sum(group) / len(group) for group in rounds if group]


def score(profile: str | None = None) -> list[RowScore]:
    """Every row replayed with the API server's defaults, on the shipped profile or another
    (``vidur``, ``aiconfigurator`` or a profile file)."""
    gpu = "h100-sxm" if profile is None else f"h100-sxm@{profile}"
    return [replay(row, gpu=gpu) for row in rows()]


def by_concurrency(scores: Sequence[RowScore]) -> list[tuple[str, int, float, float, float, float]]:
    """(group, rows, TTFT MAPE, TTFT bias, TPOT MAPE, TPOT bias) over all rows, then per
    concurrency; errors as fractions."""
    groups: list[tuple[str, list[RowScore]]] = [("all", list(scores))]
    for c in sorted({s.concurrency for s in scores}):
        groups.append((f"C={c}", [s for s in scores if s.concurrency == c]))
    return [_errors(name, group) for name, group in groups]


def by_shape(scores: Sequence[RowScore]) -> list[tuple[str, int, float, float, float, float]]:
    """The same per prompt/output shape (``1024/8192``)."""
    shapes = sorted({(s.isl, s.osl) for s in scores})
    return [_errors(f"{isl}/{osl}", [s for s in scores if (s.isl, s.osl) == (isl, osl)])
            for isl, osl in shapes]


def _errors(name: str, group: Sequence[RowScore]) -> tuple[str, int, float, float, float, float]:
    n = len(group)
    return (name, n, sum(abs(s.ttft_error) for s in group) / n,
            sum(s.ttft_error for s in group) / n,
            sum(abs(s.tpot_error) for s in group) / n,
            sum(s.tpot_error for s in group) / n)
