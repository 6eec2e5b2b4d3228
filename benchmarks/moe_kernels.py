"""The routed experts' price of one MoE layer beside the measured table it comes from.

    python benchmarks/moe_kernels.py [--tokens 1,8,64,512,4096]

For each catalog MoE model, in each format its experts are stored in or served with, on each
8-GPU node with its own fused-MoE table (H100 SXM, H200, B200, B300; the GB200's and GB300's
4-GPU trays hold too few GPUs for the TP8 cases): the format and kernel vLLM runs
(clustersim.cost.moe), then per token count entering the layer the table's time (the shipped
cut of aiconfigurator's ``moe_perf``), clustersim's price (its curve), the table's fit alone
(what prices a shape the table lacks) and the price without any fused-MoE table (the format's
dense GEMM kernel, as quantized experts were priced before; 16-bit experts on the 16-bit
fused-MoE fit), in microseconds a layer.
A model's split is its TP size across the GPU's NVLink, or expert parallelism where vLLM
needs it (block FP8 whose expert slices would break the 128-wide blocks). Nothing here is
fitted: the fits and curves are those ``clustersim calibrate`` wrote into the profile.
"""

from __future__ import annotations

import argparse
import csv

from clustersim.calibration.aiconfigurator import AIC_DIR, MOE_DISTRIBUTION
from clustersim.catalog import load_gpu, load_model
from clustersim.catalog.quantization import QuantizationSpec
from clustersim.catalog.specs import GpuSpec, ModelSpec
from clustersim.cost.roofline import BatchShape, CostModel
from clustersim.engine.quantization import served_model

MODELOPT_FP8 = QuantizationSpec(method="modelopt", weight_bits=8, weight_type="float",
                                group_size=0, scale_bytes=4, activation_bits=8)
CASES: tuple[tuple[str, QuantizationSpec | None, int, bool], ...] = (
    # (model, quantization it is served with (None: its checkpoint's), TP, expert parallel)
    ("qwen3-30b-a3b", None, 1, False),
    ("qwen3-235b-a22b", MODELOPT_FP8, 8, False),
    ("mixtral-8x7b", None, 2, False),
    ("deepseek-v3", None, 8, False),
    ("deepseek-v3", None, 8, True),
    ("kimi-k2.5", None, 8, False),
    ("minimax-m2.5", None, 4, False),
    ("minimax-m2.5", None, 8, True),  # TP8 slices break the 128-wide FP8 blocks: vLLM needs EP
    ("gpt-oss-120b", None, 1, False),
    ("gpt-oss-20b", None, 1, False),
)
GPUS = {"h100-sxm": "h100_sxm", "h200": "h200_sxm", "b200": "b200_sxm", "b300": "b300_sxm"}


def experts_us(cost: CostModel, tokens: int) -> float:
    """One layer's experts, in microseconds, at ``tokens`` tokens entering it."""
    batch = BatchShape(num_prefill_tokens=tokens, prefill_attn_pairs=float(tokens),
                       prefill_kv_tokens=tokens, num_sampled=1, num_seqs=1)
    return cost.experts_s(batch) / cost.model.num_moe_layers * 1e6


def table_us(stem: str, fmt: str, kernel: str, model: ModelSpec, tp: int, ep: int,
             tokens: int) -> float | None:
    with (AIC_DIR / f"moe_{stem}.csv").open() as f:
        for r in csv.DictReader(f):
            if (r["moe_dtype"], r["kernel"], r["distribution"]) != (fmt, kernel,
                                                                    MOE_DISTRIBUTION):
                continue
            if (int(r["hidden_size"]), int(r["inter_size"]), int(r["topk"]),
                    int(r["num_experts"]), int(r["moe_tp_size"]), int(r["moe_ep_size"]),
                    int(r["num_tokens"])) == (model.hidden_size, model.moe_intermediate_size,
                                              model.num_experts_per_tok, model.num_experts,
                                              tp, ep, tokens):
                return float(r["latency"]) * 1e3
    return None


def strip(gpu: GpuSpec, curves: bool) -> GpuSpec:
    """``gpu`` without its fused-MoE curves (``curves``) or without its tables at all."""
    kernels = tuple(k.model_copy(update={"curves": ()}) for k in gpu.moe_kernels)
    return gpu.model_copy(update={"moe_kernels": kernels if curves else ()})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", default="1,8,64,512,4096")
    args = parser.parse_args()
    counts = [int(t) for t in args.tokens.split(",")]
    print(f"{'gpu':<9}{'model':<22}{'format / kernel':<39}{'split':<11}{'tokens':>7}"
          f"{'table us':>10}{'priced us':>10}{'fit us':>9}{'no table us':>12}"
          f"{'no table/table':>15}")
    for gpu_id, stem in GPUS.items():
        gpu = load_gpu(gpu_id)
        fit_only, no_table = strip(gpu, True), strip(gpu, False)
        for model_id, quant, tp, ep in CASES:
            base = load_model(model_id)
            if quant is not None:
                base = base.model_copy(update={"quantization": quant})
            model = served_model(base, gpu)
            priced = CostModel(model, gpu, tp, expert_parallel=ep)
            pricing = priced.experts
            assert pricing is not None, (gpu_id, model_id)
            fit = CostModel(model, fit_only, tp, expert_parallel=ep)
            old = CostModel(model, no_table, tp, expert_parallel=ep)
            split = f"tp{pricing.moe_tp} ep{pricing.moe_ep}"
            label = f"{pricing.format} / {pricing.kernel.kernel}"
            for tokens in counts:
                measured = table_us(stem, pricing.format, pricing.kernel.kernel, model,
                                    pricing.moe_tp, pricing.moe_ep, tokens)
                was = experts_us(old, tokens)
                print(f"{gpu_id:<9}{model_id:<22}{label:<39}{split:<11}{tokens:>7}"
                      f"{'-' if measured is None else f'{measured:.1f}':>10}"
                      f"{experts_us(priced, tokens):>10.1f}{experts_us(fit, tokens):>9.1f}"
                      f"{was:>12.1f}"
                      f"{'-' if measured is None else f'{was / measured:.2f}':>15}")
    print("us a layer of one GPU; priced: the measured curve (the table's row, or the lower "
          "envelope where a larger count ran faster); fit: the format's fit alone; no table: "
          "the profile without fused-MoE tables (the format's dense GEMM kernel; 16-bit "
          "experts on the 16-bit fused-MoE fit)")


if __name__ == "__main__":
    main()
