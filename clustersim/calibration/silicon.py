"""NVIDIA's measured vLLM serving sweeps replayed with clustersim's own benchmark client.

The sweeps (``fit/aiconfigurator/silicon_vllm_*.csv``, credited in NOTICE; what each row ran:
``clustersim.calibration.sweeps``): Llama-3.1-70B with vLLM's ``--quantization fp8`` on H100
SXM at TP 2, 4 or 8 (the 45 rows the host time of each engine step was fitted on), and two MoE
models, MiniMax-M2.5 (FP8 blocks) on H100 and H200 with TP and expert parallelism, and
Kimi-K2.5 (INT4 experts, MLA) on H200 at TP8. Each row is a closed loop of clients named by
its prompt and output lengths (1K/1K, 1K/8K, 8K/1K), mean TTFT and mean TPOT measured. They
are InferenceX's runs, and each is replayed as its recipe ran it
(``clustersim.calibration.recipes``): every prompt and answer drawn uniformly from 0.8 to 1 x
the named length, 10 x concurrency measured requests sent as soon as a slot frees (request rate
inf), after the recipe's client's warm-ups, on the vLLM release the row names where it names
one, with the recipe's memory fraction, sequence cap and prefix caching.
``clustersim validate`` shows the Llama rows beside the held-out sets, marked as what they
are.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from clustersim.calibration.recipes import RECIPES, Recipe, length_range
from clustersim.calibration.sweeps import (
    SWEEP_DIR,
    SWEEP_FILES,
    Deployment,
    check_weights,
    deployment,
    sweep_rows,
    topology,
)
from clustersim.engine.defaults import ASYNC_SCHEDULING_SINCE

ROWS_FILE = SWEEP_DIR / SWEEP_FILES[0]
MEASURED_PER_CLIENT = 10
"""InferenceX's recipes: ``--num-prompts`` 10 x concurrency."""


@dataclass(frozen=True)
class RowScore:
    """One row replayed: its deployment and shape, the measured and simulated means (ms)."""

    tp: int
    isl: int
    osl: int
    concurrency: int
    ttft_ms: float
    tpot_ms: float
    sim_ttft_ms: float
    sim_tpot_ms: float
    model: str = "llama-3.1-70b"
    gpu: str = "h100-sxm"
    parallel: str = ""
    """``TP8``, ``TP4 EP4``, ``DP4 x TP4 EP16``."""
    vllm_version: str = ""
    """The release the row names; empty where it names none."""
    sweep: str = ""
    """The shipped file the row comes from."""

    @property
    def ttft_error(self) -> float:
        return self.sim_ttft_ms / self.ttft_ms - 1

    @property
    def tpot_error(self) -> float:
        return self.sim_tpot_ms / self.tpot_ms - 1


def rows() -> list[dict[str, str]]:
    """The Llama-3.1-70B rows the host time was fitted on, every column as text."""
    return sweep_rows(SWEEP_FILES[0])


def measured_cycle_s(row: dict[str, str]) -> float:
    """One client's measured round: its mean TTFT, then ``osl - 1`` mean TPOTs (s)."""
    osl = int(row["osl"])
    return (float(row["silicon_ttft_ms"]) + (osl - 1) * float(row["silicon_tpot_ms"])) / 1e3


def _version(text: str) -> tuple[int, int]:
    major, minor = text.split(".")[:2]
    return int(major), int(minor)


def recipe(row: dict[str, str]) -> Recipe:
    """The InferenceX recipe that ran the row's sweep."""
    return RECIPES[row.get("sweep") or SWEEP_FILES[0]]


def _engine(dep: Deployment, isl: int, osl: int, served: Recipe,
            as_served: bool = False) -> dict:
    """The engine arguments of a row's server: its quantization, room for its requests, the
    recipe's memory fraction, sequence cap and prefix caching, and the defaults of the vLLM
    release the row names. The Llama rows name none: they ran v0.10.2 with
    ``--async-scheduling`` and an FP8 KV cache, and are replayed synchronously with a 16-bit
    KV cache, the pairing the host time per layer and per request was chosen with
    (``as_served``: as the recipe served them, a what-if)."""
    engine: dict = {} if dep.quantization is None else {"quantization": dep.quantization}
    engine["max_model_len"] = isl + osl + 256
    engine["gpu_memory_utilization"] = served.gpu_memory_utilization
    max_num_seqs = served.max_seqs(dep.concurrency)
    if max_num_seqs is not None:
        engine["max_num_seqs"] = max_num_seqs
    if not served.enable_prefix_caching:
        engine["enable_prefix_caching"] = False
    if dep.vllm_version is None:
        engine["async_scheduling"] = bool(as_served and served.async_scheduling)
        if as_served and served.kv_cache_dtype is not None:
            engine["kv_cache_dtype"] = served.kv_cache_dtype
    else:
        release = _version(dep.vllm_version)
        engine["vllm_version"] = ".".join(map(str, release))
        # the release's async scheduling default, stated (data-parallel MoE ranks step
        # together, modelled with sync scheduling only)
        engine["async_scheduling"] = release >= ASYNC_SCHEDULING_SINCE and dep.dp == 1
    return engine


def _check_precision(row: dict[str, str], dep: Deployment) -> None:
    from clustersim.catalog import load_model
    from clustersim.catalog.quantization import online_fp8

    quant = online_fp8() if dep.quantization == "fp8" else load_model(dep.model).quantization
    if quant is None:
        raise ValueError(f"{row['id']}: {dep.model} is not quantized, the row is")
    check_weights(row, quant.weight_bits, quant.activation_bits)


def _drawn(named: int) -> dict:
    """The recipe client's draw for a named length: uniform on ``int(0.8 x named)`` ..
    ``named``."""
    low, high = length_range(named)
    return {"kind": "uniform", "low": low, "high": high}


def scenario(row: dict[str, str], api_server: bool = True, spread: bool = False,
             profile: str | None = None, turnaround_s: float = 0.0,
             as_columns: bool = False, fixed_lengths: bool = False,
             as_served: bool = False) -> dict:
    """The row as a scenario: its recipe's server and client (module docstring).
    ``spread``: the measured run's clients opened one by one over one measured cycle (TTFT +
    (osl - 1) x TPOT), so that they start evenly spread, a what-if. ``profile``: the GPU's
    calibration profile (``vidur``, ``aiconfigurator`` or a profile file; default the shipped
    one). ``turnaround_s``: the client's mean time between an answer and its slot's next send
    (``workload.turnaround_s``), a what-if. ``as_columns``: the parallelism as the columns say
    where the row's id contradicts them (``clustersim.calibration.sweeps``), a what-if.
    ``fixed_lengths``: every prompt and answer exactly the named length, a what-if (the
    clients then keep the first round's cohorts). ``as_served``: the Llama rows' server with
    the recipe's async scheduling and FP8 KV cache, a what-if (:func:`_engine`)."""
    dep = deployment(row, as_columns)
    _check_precision(row, dep)
    served = recipe(row)
    isl, osl = int(row["isl"]), int(row["osl"])
    clients = dep.concurrency
    name = (f"silicon-tp{dep.tp}-{isl}x{osl}-c{clients}" if dep.model == "llama-3.1-70b" else
            f"silicon-{dep.model}-{dep.gpu}-{dep.parallel.replace(' ', '')}-{isl}x{osl}"
            f"-c{clients}")
    data: dict = {
        "name": name,
        "seed": 0,
        "model": dep.model,
        "gpu": dep.gpu if profile is None else f"{dep.gpu}@{profile}",
        "tensor_parallel_size": dep.tp,
    }
    if dep.dp > 1:
        data["data_parallel_size"] = dep.dp
    if dep.expert_parallel:
        data["enable_expert_parallel"] = True
    nodes = topology(dep)
    if nodes is not None:
        data["topology"] = nodes
    data["engine"] = _engine(dep, isl, osl, served, as_served)
    if fixed_lengths:
        lengths: dict = {"kind": "independent", "prompt_tokens": isl, "output_tokens": osl}
    else:
        lengths = {"kind": "independent", "prompt_tokens": _drawn(isl),
                   "output_tokens": _drawn(osl)}
    data["workload"] = {
        "kind": "benchmark",
        "num_prompts": MEASURED_PER_CLIENT * clients,
        "num_warmups": served.num_warmups(clients),
        "max_concurrency": clients,
        "request_rate": math.inf,
        "lengths": lengths,
    }
    if turnaround_s > 0:
        data["workload"]["turnaround_s"] = turnaround_s
    if spread:
        data["workload"]["ramp_up_s"] = measured_cycle_s(row) * (clients - 1) / clients
    if api_server:
        data["api_server"] = {}
    return data


def simulate(data: dict) -> tuple[float, float]:
    """A row's scenario run: the simulated mean TTFT and TPOT (ms)."""
    from clustersim.metrics import summarize_run
    from clustersim.scenario import parse_scenario
    from clustersim.sim import run_scenario

    summary = summarize_run(run_scenario(parse_scenario(data), record_steps=False))
    return summary.ttft_s.mean * 1e3, summary.tpot_s.mean * 1e3


def row_score(row: dict[str, str], sim_ttft_ms: float, sim_tpot_ms: float,
              as_columns: bool = False) -> RowScore:
    """A row beside its simulated means."""
    dep = deployment(row, as_columns)
    return RowScore(dep.tp, int(row["isl"]), int(row["osl"]), dep.concurrency,
                    float(row["silicon_ttft_ms"]), float(row["silicon_tpot_ms"]),
                    sim_ttft_ms, sim_tpot_ms, model=dep.model, gpu=dep.gpu,
                    parallel=dep.parallel, vllm_version=dep.vllm_version or "",
                    sweep=row.get("sweep", ""))


def replay(row: dict[str, str], api_server: bool = True, spread: bool = False,
           profile: str | None = None, turnaround_s: float = 0.0,
           as_columns: bool = False, fixed_lengths: bool = False,
           as_served: bool = False) -> RowScore:
    """The row's benchmark, simulated."""
    data = scenario(row, api_server, spread, profile, turnaround_s, as_columns,
                    fixed_lengths, as_served)
    return row_score(row, *simulate(data), as_columns=as_columns)


def round_ttfts_ms(row: dict[str, str], spread: bool = False,
                   fixed_lengths: bool = False) -> list[float]:
    """Mean TTFT (ms) of each round of the row's measured requests, replayed with the API
    server's defaults: the requests in send order, ``concurrency`` at a time (the first
    round is the cold burst that opens the measured run)."""
    from clustersim.metrics.requests import request_metrics
    from clustersim.scenario import parse_scenario
    from clustersim.sim import run_scenario
    from clustersim.workload.benchmark import WARMUP_PREFIX

    clients = deployment(row).concurrency
    data = scenario(row, spread=spread, fixed_lengths=fixed_lengths)
    result = run_scenario(parse_scenario(data), record_steps=False)
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
    return [replay(row, profile=profile) for row in rows()]


def by_concurrency(scores: Sequence[RowScore]) -> list[tuple[str, int, float, float, float, float]]:
    """(group, rows, TTFT MAPE, TTFT bias, TPOT MAPE, TPOT bias) over all rows, then per
    concurrency; errors as fractions."""
    groups: list[tuple[str, list[RowScore]]] = [("all", list(scores))]
    for c in sorted({s.concurrency for s in scores}):
        groups.append((f"C={c}", [s for s in scores if s.concurrency == c]))
    return [_errors(name, group) for name, group in groups]


def _errors(name: str, group: Sequence[RowScore]) -> tuple[str, int, float, float, float, float]:
    n = len(group)
    return (name, n, sum(abs(s.ttft_error) for s in group) / n,
            sum(s.ttft_error for s in group) / n,
            sum(abs(s.tpot_error) for s in group) / n,
            sum(s.tpot_error for s in group) / n)
