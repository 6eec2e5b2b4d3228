"""Cross-check: a Qwen3-32B TP2 decode step on the RTX PRO 6000, summed from its own kernel
profile, against clustersim's price of the same step.

Calibration data only (``fit/rtx-pro-6000/qwen3-32b_tp2/``: LLMServingSim's one-layer vLLM
profile of one TP2 rank, plus the 2-rank NCCL samples). Nothing here is fitted: it answers
whether the cost model's price of a TP2 step agrees with the measured kernels and collectives
the step is made of. vLLM's serving log (validation data) shows the same steps taking longer;
the gap is then outside what any kernel profile here measures.

Scope: the profile is vLLM 0.28 with ``enforce_eager`` (CUDA events around each op of one
decoder layer whose widths are one TP2 rank's), so it holds GPU time only; it is compared with
clustersim's GPU time (the step's price without its CPU overhead). clustersim's all-reduce cost
is fitted on the same NCCL samples, so that column agrees by construction. At the upstream
commit shipped, the ``qk_norm`` rows are the TP1 profile's (upstream later notes the TP2 rank's
is about 0.5-0.6 x that): they overstate this column by at most ~0.3 ms per step.

A decode step of ``n`` requests at context ``c`` is, per decoder layer, the four GEMM shards,
the activation, two RMSNorms (input and post-attention), the per-head q/k norm, rotary and
attention over ``n x c`` keys; per step the embedding, the final norm, the LM-head shard and the
sampler; and ``2 x layers + 1`` all-reduces of the hidden states (one for the vocab-parallel
embedding) plus the all-gather of the vocab-sharded logits, at the NCCL samples' times.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from clustersim.calibration.sources import FIT_DIR
from clustersim.catalog import load_gpu, load_model
from clustersim.cost.roofline import BatchShape, CostModel

PROFILE_DIR = FIT_DIR / "rtx-pro-6000" / "qwen3-32b_tp2"
NCCL_FILE = FIT_DIR / "rtx-pro-6000" / "allreduce_2rank.csv"
MODEL, GPU, TP = "qwen3-32b", "rtx-pro-6000-server", 2
_GEMMS = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")
_PER_LAYER = {"act_fn": 1, "layernorm": 2, "qk_norm": 1, "rotary_emb": 1}
_PER_STEP = ("embedding", "final_layernorm")
_BF16 = 2


@dataclass(frozen=True)
class StepCheck:
    batch: int
    context: int
    gemm_ms: float
    attention_ms: float
    elementwise_ms: float
    lm_head_ms: float
    collectives_ms: float
    clustersim_ms: float
    """clustersim's GPU time: its price of the step less the CPU overhead."""
    clustersim_total_ms: float

    @property
    def profile_ms(self) -> float:
        return (self.gemm_ms + self.attention_ms + self.elementwise_ms + self.lm_head_ms
                + self.collectives_ms)


def decode_step_checks(batches=(1, 32, 128), context: int = 1024,
                       profile: str = "calibrated") -> list[StepCheck]:
    dense = pd.read_csv(PROFILE_DIR / "dense.csv")
    per_seq = pd.read_csv(PROFILE_DIR / "per_sequence.csv")
    attn = pd.read_csv(PROFILE_DIR / "attention_decode.csv")
    nccl = pd.read_csv(NCCL_FILE)
    model = load_model(MODEL)
    layers, h = model.num_layers, model.hidden_size
    cost = CostModel(model, load_gpu(GPU, profile=profile), TP)

    def op(frame: pd.DataFrame, key: str, name: str, n: int) -> float:
        rows = frame[(frame.layer == name) & (frame[key] == n)]
        if rows.empty:
            raise ValueError(f"{PROFILE_DIR.name}: no {name} row at {key} {n}")
        return float(rows.time_us.iloc[0]) * 1e-6

    def interp(x: float, xs: pd.Series, ys: pd.Series, what: str) -> float:
        if xs.empty or not xs.min() <= x <= xs.max():
            raise ValueError(f"{what}: {x:g} outside the measured range")
        return float(np.interp(x, xs, ys))

    def collective(name: str, nbytes: float) -> float:
        rows = nccl[nccl.collective == name].sort_values("bytes")
        return interp(nbytes, rows["bytes"], rows.us, f"{name} bytes") * 1e-6

    checks = []
    for n in batches:
        rows = attn[attn.n_decode == n].sort_values("kv_decode")
        attention = interp(context, rows.kv_decode, rows.time_us,
                           f"attention context at batch {n}") * 1e-6
        gemm = layers * sum(op(dense, "tokens", g, n) for g in _GEMMS)
        elementwise = (layers * sum(k * op(dense, "tokens", name, n)
                                    for name, k in _PER_LAYER.items())
                       + sum(op(dense, "tokens", name, n) for name in _PER_STEP))
        lm_head = op(per_seq, "sequences", "lm_head", n) + op(per_seq, "sequences", "sampler", n)
        collectives = ((2 * layers + 1) * collective("all_reduce", n * h * _BF16)
                       + collective("all_gather", n * model.vocab_size / TP * _BF16))
        price = cost.step_time(BatchShape.from_chunks([(1, context, True)] * n))
        checks.append(StepCheck(n, context, gemm * 1e3, layers * attention * 1e3,
                                elementwise * 1e3, lm_head * 1e3, collectives * 1e3,
                                (price.time_s - price.overhead_s) * 1e3, price.time_s * 1e3))
    return checks


CHECK_HEADER = ["decode batch", "context", "GEMMs", "attention", "norms, rotary, act",
                "LM head + sampler", "NCCL collectives", "profile sum", "clustersim GPU time",
                "clustersim with CPU overhead"]


def check_rows(checks: list[StepCheck]) -> list[list[str]]:
    return [[str(c.batch), f"{c.context:,}", *(f"{v:.1f}" for v in (
        c.gemm_ms, c.attention_ms, c.elementwise_ms, c.lm_head_ms, c.collectives_ms,
        c.profile_ms, c.clustersim_ms, c.clustersim_total_ms))] for c in checks]
