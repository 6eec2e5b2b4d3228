"""NVIDIA's measured vLLM serving sweeps (aiconfigurator's silicon rows) and the deployment
each row describes.

Every file is a copy of rows of ``silicon_sample.csv`` (PyPI wheel ``aiconfigurator-core``,
credited in NOTICE), one model on one GPU with one vLLM release; each row is one closed-loop
benchmark run: ``silicon_concurrency`` clients sending fixed ``isl``-token prompts for fixed
``osl``-token answers, the run's mean TTFT and TPOT measured. :func:`deployment` reads a row's
columns into what clustersim replays::

    column                          deployment
    model_path                      catalog model (MODELS), the checkpoint's own quantization;
                                    Llama's BF16 checkpoint under vLLM's --quantization fp8
    system                          catalog GPU (GPUS)
    tp_size                         tensor_parallel_size (attention and dense layers)
    attention_dp_size               data_parallel_size (engine ranks sharing the experts)
    moe_tp_size x moe_ep_size       the MoE layers' GPUs, = tp_size x attention_dp_size;
                                    moe_ep_size > 1: enable_expert_parallel (whole experts)
    batch_size                      clients per attention-DP rank: silicon_concurrency, the
                                    benchmark's --max-concurrency, is batch_size x
                                    attention_dp_size (checked on every row)
    backend_version                 vLLM release (the image tag in silicon_data_source agrees)
    isl, osl                        prompt and answer tokens of every request
    silicon_ttft_ms, _tpot_ms       the measured means
    pp_size                         must be 1; prefill_* / decode_* columns (disaggregated
                                    runs) are empty in these colocated ('agg') rows

One contradiction is read against the columns. Fifteen MiniMax-M2.5 H100 rows (source file
2026-04-06.csv) say ``attention_dp_size`` 4 and ``moe_ep_size`` 16, 16 GPUs, while their
ids say ``tp4_ep4`` and their times repeat, within 4 %, those of the rows measured a day
earlier as TP4 with expert parallelism on 4 GPUs at the same ``silicon_concurrency``, down to
the 20-32 s TTFT of a KV cache too small for 64 clients (16 GPUs would hold four times the
KV). Where a row's id names ``tp<T>_ep<E>`` on fewer GPUs than its columns, the id is
replayed (``as_columns`` replays the columns instead, a what-if).

Another is read against vLLM. The MiniMax-M2.5 H200 rows of vLLM 0.18 say ``tp_size`` 8 with
``moe_tp_size`` 8, every expert sliced 1,536 / 8 = 192 wide; vLLM refuses to load 128-wide FP8
blocks so sliced (``ModelSpec.expert_slice_refusal``: fp8.py's "The output_size of gate's and
up's weight = 192 is not divisible by weight quantization block_n = 128"), and vLLM's
MiniMax-M2 recipe runs eight GPUs as "TP8+EP" ("pure TP8 is not supported"). Where the
columns slice experts so, the run is replayed with expert parallelism over the same GPUs, in
either reading (the columns' own layout could not have started).
"""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass

from clustersim.calibration.sources import FIT_DIR
from clustersim.inputs import read_bytes

SWEEP_DIR = FIT_DIR / "aiconfigurator"
SWEEP_FILES: tuple[str, ...] = (
    "silicon_vllm_llama31_70b_fp8_h100.csv",
    "silicon_vllm_minimax_m25_fp8_h100_v0180.csv",
    "silicon_vllm_minimax_m25_fp8_h200_v0160.csv",
    "silicon_vllm_minimax_m25_fp8_h200_v0180.csv",
    "silicon_vllm_kimi_k25_int4_h200_v0160.csv",
)
"""Every shipped sweep; the first is the Llama-3.1-70B one the host time was fitted on."""

MODELS: dict[str, tuple[str, str | None]] = {
    "meta-llama/Llama-3.1-70B": ("llama-3.1-70b", "fp8"),
    "MiniMaxAI/MiniMax-M2.5": ("minimax-m2.5", None),
    "moonshotai/Kimi-K2.5": ("kimi-k2.5", None),
}
"""model_path -> (catalog model, vLLM --quantization). Llama's rows say precision fp8 on the
BF16 checkpoint (``--quantization fp8``); the MoE checkpoints carry their own
quantization_config (MiniMax's FP8 blocks, Kimi's INT4 experts), which vLLM reads unasked."""

WEIGHT_FORMATS: dict[str, tuple[int, int]] = {"fp8": (8, 8), "int4_wo": (4, 16)}
"""gemm_quant_mode / moe_quant_mode -> (weight bits, activation bits) the catalog model's
quantization must have: the row's precision and the replayed checkpoint agree."""

GPUS: dict[str, str] = {"h100_sxm": "h100-sxm", "h200_sxm": "h200"}
"""aiconfigurator's system -> catalog GPU."""

NODES: dict[str, tuple[str, int]] = {"h100-sxm": ("dgx-h100", 8), "h200": ("hgx-h200", 8)}
"""The shipped one-node topology of each GPU and its GPUs, copied for groups beyond one node."""

_ID_PARALLEL = re.compile(r"_tp(\d+)(?:_0)?_ep(\d+)(?:_0)?_\d+$")
"""The ``..._tp4_ep4_1322`` / ``..._tp4_0_ep4_0_215`` tail of a row id."""
_CONCURRENCY = re.compile(r"silicon_concurrency=(\d+)")
_IMAGE = re.compile(r"vllm-openai:v([\d.]+)")
SAME_MEASUREMENT_MS = 0.006
"""Two rows of one configuration whose TTFT and TPOT agree within this are one measurement
listed twice (the files repeat some runs, one copy rounded to 0.01 ms)."""


@dataclass(frozen=True)
class Deployment:
    """What a row ran: clustersim's names for it."""

    model: str
    gpu: str
    quantization: str | None
    """vLLM's --quantization; None: the checkpoint's own quantization_config."""
    tp: int
    dp: int
    expert_parallel: bool
    concurrency: int
    """Clients of the closed loop (vLLM bench's --max-concurrency), over all ranks."""
    vllm_version: str | None
    """The release the row names (``0.18.0``); None where the row names none."""
    note: str = ""
    """Why the replay differs from the columns, where it does."""

    @property
    def num_gpus(self) -> int:
        return self.tp * self.dp

    @property
    def parallel(self) -> str:
        """``TP8``, ``TP4 EP4``, ``DP4 x TP4 EP16``."""
        ranks = f"DP{self.dp} x " if self.dp > 1 else ""
        experts = f" EP{self.num_gpus}" if self.expert_parallel else ""
        return f"{ranks}TP{self.tp}{experts}"


def sweep_rows(name: str) -> list[dict[str, str]]:
    """One shipped sweep's rows, every column as text."""
    text = read_bytes(SWEEP_DIR / name, "calibration rows").decode("utf-8")
    return list(csv.DictReader(io.StringIO(text, newline="")))


def all_rows() -> list[dict[str, str]]:
    """Every shipped sweep's rows in :data:`SWEEP_FILES` order, each with its file's name
    under ``sweep``."""
    return [{**row, "sweep": name} for name in SWEEP_FILES for row in sweep_rows(name)]


def _int(row: dict[str, str], column: str) -> int:
    value = float(row[column])
    if value != int(value) or value < 1:
        raise ValueError(f"{row['id']}: {column} {row[column]!r} is not a positive count")
    return int(value)


def deployment(row: dict[str, str], as_columns: bool = False) -> Deployment:
    """The deployment a row ran (module docstring). ``as_columns``: read the parallelism
    from the columns even where the row's id contradicts them. ``ValueError`` for a row
    clustersim cannot replay as written."""
    where = row["id"]
    if row["model_path"] not in MODELS:
        raise ValueError(f"{where}: no catalog model for {row['model_path']!r}")
    if row["system"] not in GPUS:
        raise ValueError(f"{where}: no catalog GPU for system {row['system']!r}")
    if row["mode"] != "agg" or _int(row, "pp_size") != 1:
        raise ValueError(f"{where}: only colocated runs without pipeline parallelism replay")
    model, quantization = MODELS[row["model_path"]]
    tp, dp = _int(row, "tp_size"), _int(row, "attention_dp_size")
    moe_tp, moe_ep = _int(row, "moe_tp_size"), _int(row, "moe_ep_size")
    if moe_tp * moe_ep != tp * dp:
        raise ValueError(f"{where}: moe_tp_size {moe_tp} x moe_ep_size {moe_ep} is not "
                         f"tp_size {tp} x attention_dp_size {dp}")
    if moe_tp > 1 and moe_ep > 1:
        raise ValueError(f"{where}: experts split both ways (moe_tp_size {moe_tp}, "
                         f"moe_ep_size {moe_ep}) are not a vLLM layout")
    clients = _int(row, "batch_size") * dp
    stated = _CONCURRENCY.search(row["silicon_data_source"])
    if stated is not None and int(stated.group(1)) != clients:
        raise ValueError(f"{where}: silicon_concurrency {stated.group(1)} is not batch_size x "
                         f"attention_dp_size = {clients}")
    version = row["backend_version"] or None
    image = _IMAGE.search(row["silicon_data_source"])
    if image is not None and version is not None and image.group(1) != version:
        raise ValueError(f"{where}: backend_version {version} but image v{image.group(1)}")
    note = ""
    tag = _ID_PARALLEL.search(row["id"])
    if tag is not None and not as_columns:
        id_tp, id_ep = int(tag.group(1)), int(tag.group(2))
        if id_tp < tp * dp:
            if id_ep not in (1, id_tp):
                raise ValueError(f"{where}: the id's tp{id_tp}_ep{id_ep} is not a layout "
                                 "clustersim replays")
            note = (f"columns say attention DP{dp} x TP{tp}, EP{moe_ep} ({tp * dp} GPUs); "
                    f"replayed as the id's tp{id_tp}_ep{id_ep}")
            tp, dp, moe_ep = id_tp, 1, id_ep
    if moe_ep == 1:
        from clustersim.catalog import load_model

        if load_model(model).expert_slice_refusal(tp * dp, False) is not None:
            width = load_model(model).moe_intermediate_size / (tp * dp)
            note = (f"columns say moe_tp_size {tp * dp}: {width:g}-wide slices of the FP8-block "
                    "experts, which vLLM refuses to load; replayed with expert parallelism, "
                    "as vLLM runs the model on that many GPUs")
            moe_ep = tp * dp
    return Deployment(model=model, gpu=GPUS[row["system"]], quantization=quantization, tp=tp,
                      dp=dp, expert_parallel=moe_ep > 1, concurrency=clients,
                      vllm_version=version, note=note)


def check_weights(row: dict[str, str], weight_bits: int, activation_bits: int) -> None:
    """``ValueError`` unless the row's precision is the replayed model's."""
    for column in ("gemm_quant_mode", "moe_quant_mode"):
        mode = row[column]
        if mode not in WEIGHT_FORMATS:
            raise ValueError(f"{row['id']}: {column} {mode!r} is not a precision clustersim "
                             f"replays ({', '.join(WEIGHT_FORMATS)})")
    expert = WEIGHT_FORMATS[row["moe_quant_mode"]]
    if expert != (weight_bits, activation_bits):
        raise ValueError(f"{row['id']}: moe_quant_mode {row['moe_quant_mode']} is not the "
                         f"model's W{weight_bits}A{activation_bits} experts")


def topology(dep: Deployment) -> dict | None:
    """``{node: ..., count: N}`` for a group beyond one node; None inside one."""
    node, per_node = NODES[dep.gpu]
    if dep.num_gpus <= per_node:
        return None
    return {"node": node, "count": math.ceil(dep.num_gpus / per_node)}


def same_measurement(a: dict[str, str], b: dict[str, str]) -> bool:
    """Whether two rows of one configuration are one run listed twice."""
    return all(abs(float(a[c]) - float(b[c])) <= SAME_MEASUREMENT_MS
               for c in ("silicon_ttft_ms", "silicon_tpot_ms"))
