"""``clustersim step-time``: price one engine step with the roofline cost model."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer

from clustersim.cli.checks import check_fits, check_parallel
from clustersim.cli.common import user_errors
from clustersim.errors import ClusterSimError

if TYPE_CHECKING:
    from clustersim.catalog.specs import GpuSpec, ModelSpec
    from clustersim.cost.collectives import AllToAll
    from clustersim.cost.roofline import BatchShape, CostModel


@user_errors
def step_time_cmd(
    model: Annotated[str, typer.Option(help="Catalog model id or path to a config.json.")],
    gpu: Annotated[str, typer.Option(help="Catalog GPU id.")],
    tp: Annotated[int, typer.Option("--tp", min=1, help="Tensor-parallel size.")] = 1,
    dp: Annotated[int, typer.Option(
        "--dp", min=1, help="MoE: data-parallel ranks sharing the experts, every rank running "
        "this batch.")] = 1,
    expert_parallel: Annotated[bool, typer.Option(
        "--expert-parallel", help="MoE: whole experts per GPU over the dp x tp GPUs.")] = False,
    prefill_tokens: Annotated[
        int | None, typer.Option(min=1, help="Prompt tokens of one prefill chunk.")
    ] = None,
    context: Annotated[
        int, typer.Option(min=0, help="Tokens already in KV (prefix for prefill, per decode).")
    ] = 0,
    decode_batch: Annotated[
        int | None, typer.Option(min=1, help="Number of decoding requests.")
    ] = None,
    quantization: Annotated[str | None, typer.Option(
        help="vLLM's --quantization (fp8, awq, awq_marlin, gptq, gptq_marlin, "
        "compressed-tensors, modelopt, modelopt_fp4); default: the model's own config.")] = None,
    kv_cache_dtype: Annotated[str, typer.Option(
        help="vLLM's --kv-cache-dtype: auto, fp8, fp8_e4m3 or fp8_e5m2.")] = "auto",
    num_speculative_tokens: Annotated[int, typer.Option(
        min=0, max=16, help="With --decode-batch: price the speculative verification step, "
        "each request verifying this many drafts (1 + k query rows; vLLM's "
        "--speculative-config num_speculative_tokens), and the draft passes.")] = 0,
    draft_layers: Annotated[float, typer.Option(
        min=0.0, help="With --num-speculative-tokens: target-shaped layers one draft pass "
        "costs (1: EAGLE or MTP; 0: n-gram).")] = 1.0,
    async_scheduling: Annotated[bool, typer.Option(
        "--async-scheduling", help="vLLM's --async-scheduling: the per-step and per-request "
        "host time overlaps the GPU's work and counts only where it outlasts it.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Price one engine step with the roofline cost model, operator by operator."""
    from clustersim.catalog import load_gpu, load_model
    from clustersim.catalog.quantization import QUANT_METHODS
    from clustersim.catalog.specs import KV_CACHE_DTYPE_BYTES
    from clustersim.cluster.build import EXPERT_IMBALANCE_NO_EPLB
    from clustersim.cost.roofline import BatchShape, CostModel
    from clustersim.engine.quantization import served_model

    if (prefill_tokens is None) == (decode_batch is None):
        raise ClusterSimError("step-time", "give exactly one of --prefill-tokens or --decode-batch")
    if num_speculative_tokens and decode_batch is None:
        raise ClusterSimError("--num-speculative-tokens", "prices decodes: give --decode-batch")
    if quantization is not None and quantization not in QUANT_METHODS:
        raise ClusterSimError("--quantization", f"unknown method {quantization!r}; known: "
                              f"{', '.join(QUANT_METHODS)}")
    if kv_cache_dtype != "auto" and kv_cache_dtype not in KV_CACHE_DTYPE_BYTES:
        raise ClusterSimError("--kv-cache-dtype", f"unknown {kv_cache_dtype!r}; known: auto, "
                              f"{', '.join(KV_CACHE_DTYPE_BYTES)}")
    spec_gpu = load_gpu(gpu)
    spec_model = served_model(load_model(model), spec_gpu, quantization, kv_cache_dtype,
                              where="--quantization")
    if (dp > 1 or expert_parallel) and not spec_model.is_moe:
        raise ClusterSimError("--dp", f"{spec_model.id} is dense: --dp/--expert-parallel "
                              "price MoE layers shared by data-parallel ranks")
    check_parallel(spec_model, spec_gpu, tp, dp, expert_parallel)
    if decode_batch is not None:
        if context < 1:
            raise ClusterSimError("--context", "decodes need a context of at least 1 token")
        check_fits(spec_model, spec_gpu, tp, decode_batch, context + 1, "--context",
                   "--decode-batch")
        batch = BatchShape.from_chunks([(1, context, True)] * decode_batch)
        shape = {"decode_batch": decode_batch, "context": context}
    else:
        assert prefill_tokens is not None
        check_fits(spec_model, spec_gpu, tp, 1, context + prefill_tokens, "--prefill-tokens",
                   "--prefill-tokens")
        batch = BatchShape.from_chunks([(prefill_tokens, context, True)])
        shape = {"prefill_tokens": prefill_tokens, "context": context}
    tokens = batch.num_prefill_tokens + batch.num_decode_tokens
    all_to_all = _domain_all_to_all(spec_model, spec_gpu, tp, dp, expert_parallel,
                                    "low_latency" if decode_batch is not None else "normal")
    cost_model = CostModel(
        spec_model, spec_gpu, tp, dp=dp, expert_parallel=expert_parallel, all_to_all=all_to_all,
        expert_imbalance=EXPERT_IMBALANCE_NO_EPLB if all_to_all is not None else 1.0)
    if async_scheduling and num_speculative_tokens:
        raise ClusterSimError("--async-scheduling", "is not priced with speculative decoding")
    cost_model.prices.host_hidden = async_scheduling
    cost = cost_model.step_time(batch, dp * tokens)
    operators = cost_model.operators(batch, dp * tokens)
    speculative: dict[str, float] = {}
    if num_speculative_tokens:
        from clustersim.engine.spec_decode import verification_step_s

        assert decode_batch is not None
        verify_s, draft_s = verification_step_s(
            cost_model.prices, decode_batch, context, num_speculative_tokens, draft_layers,
            spec_model.num_layers)
        speculative = {"num_speculative_tokens": num_speculative_tokens,
                       "draft_layers": draft_layers, "time_s": verify_s, "draft_s": draft_s,
                       "break_even_tokens_per_step": verify_s / cost.time_s}
    quant = spec_model.quantization
    moe = _experts(cost_model, batch, dp * tokens)
    result = {
        "model": spec_model.id,
        "gpu": spec_gpu.id,
        "tp": tp,
        "dp": dp,
        "expert_parallel": expert_parallel,
        **shape,
        "quantization": None if quant is None else quant.method,
        "kv_cache_dtype": spec_model.kv_cache_dtype,
        "gemm_kernel": cost_model.kernel.describe,
        **({"expert_kernel": cost_model.expert_kernel.describe}
           if cost_model.expert_kernel is not cost_model.kernel and spec_model.is_moe else {}),
        **({"experts": moe} if moe else {}),
        **({"all_to_all": {"mode": all_to_all.mode, "group_gpus": all_to_all.group_gpus,
                           "bytes_per_s": all_to_all.nvlink_bytes_per_s,
                           "expert_imbalance": EXPERT_IMBALANCE_NO_EPLB}}
           if all_to_all is not None else {}),
        "time_s": cost.time_s,
        "compute_s": cost.compute_s,
        "memory_s": cost.memory_s,
        "communication_s": cost.communication_s,
        "overhead_s": cost.overhead_s,
        "operators": [{"name": op.name, "time_s": op.time_s, "bound": op.bound,
                       "compute_s": op.compute_s, "memory_s": op.memory_s,
                       "communication_s": op.communication_s, "overhead_s": op.overhead_s}
                      for op in operators],
        **({"speculative": speculative} if speculative else {}),
        "host": {"per_step_s": spec_gpu.per_step_overhead_s,
                 "per_layer_s": spec_gpu.per_layer_overhead_s,
                 "num_layers": spec_model.num_layers,
                 "per_request_s": spec_gpu.per_request_overhead_s,
                 "num_requests": batch.num_seqs,
                 "hidden_by_async_scheduling": async_scheduling},
    }
    if as_json:
        typer.echo(json.dumps(result, indent=2))
        return
    group = f" x DP{dp}" if dp > 1 else ""
    group += " EP" if expert_parallel else ""
    typer.echo(
        f"{spec_model.id} on {spec_gpu.id} TP{tp}{group}, "
        + ", ".join(f"{k} {v}" for k, v in shape.items())
    )
    if quant is not None or spec_model.kv_cache_dtype != "auto":
        weights = "16-bit" if quant is None else quant.describe()
        experts = (f", experts {cost_model.expert_kernel.describe}"
                   if cost_model.expert_kernel is not cost_model.kernel and spec_model.is_moe
                   else "")
        typer.echo(f"weights {weights} ({spec_model.weight_bytes / 1e9:,.2f} GB), GEMMs "
                   f"{cost_model.kernel.describe}{experts}, KV cache {spec_model.kv_cache_dtype} "
                   f"({spec_model.kv_bytes_per_token(tp):,} B per token per GPU)")
    if moe:
        typer.echo(
            f"MoE experts: {moe['format']}, kernel {moe['kernel']}, table {moe['table']}; "
            "priced by "
            + (f"its measured curve at moe_tp {moe['moe_tp']}, moe_ep {moe['moe_ep']}"
               if moe["priced_by"] == "curve" else
               f"its fit (rms log error {moe['fit_rms_log_error']:.2f}): no curve at "
               f"moe_tp {moe['moe_tp']}, moe_ep {moe['moe_ep']} for this shape")
            + f": {moe['layer_s'] * 1e3:.4f} ms a layer at {moe['tokens']:g} tokens "
            f"x {moe['layers']} layers ({moe['calibration']})")
    if all_to_all is not None:
        typer.echo(
            f"expert all-to-all: the {dp * tp} GPUs span {dp * tp // spec_gpu.gpus_per_host}"
            f" hosts of one {spec_gpu.id} NVLink domain ({spec_gpu.gpus_per_host} a host): "
            f"DeepEP's {all_to_all.mode.replace('_', '-')} kernels over NVLink at "
            f"{all_to_all.nvlink_bytes_per_s / 1e9:,.0f} GB/s, the busiest rank "
            f"{EXPERT_IMBALANCE_NO_EPLB:g}x the mean rows (no EPLB)")
    if not moe and spec_model.is_moe:
        typer.echo(f"MoE experts: no measured fused-MoE table for this format on {spec_gpu.id}; "
                   f"priced as {cost_model.expert_kernel.describe}")
    typer.echo(
        f"step time {cost.time_s * 1e3:.3f} ms = compute-bound {cost.compute_s * 1e3:.3f} + "
        f"memory-bound {cost.memory_s * 1e3:.3f} + communication "
        f"{cost.communication_s * 1e3:.3f} + overhead {cost.overhead_s * 1e3:.3f} ms"
    )
    width = max(len(op.name) for op in operators)
    typer.echo("by operator, summed over the layers (a GEMM's kernel floor with its time):")
    for op in operators:
        typer.echo(f"  {op.name:<{width}}  {op.bound:<13} {op.time_s * 1e3:9.3f} ms "
                   f"{op.time_s / cost.time_s:6.1%}")
    typer.echo(
        f"overhead: the host's time and kernel launches, {cost.overhead_s / cost.time_s:.1%} "
        f"of the step = {spec_gpu.per_step_overhead_s * 1e6:.0f} us a step + "
        f"{spec_model.num_layers} layers x {spec_gpu.per_layer_overhead_s * 1e6:.1f} us + "
        f"{batch.num_seqs} requests x {spec_gpu.per_request_overhead_s * 1e6:.1f} us "
        f"({spec_gpu.calibration})"
        + (", the per-step and per-request parts hidden behind the GPU by async scheduling "
           "where they are shorter than its work" if async_scheduling else "")
    )
    if speculative:
        k = num_speculative_tokens
        typer.echo(
            f"speculative: {decode_batch} requests x (1 + {k}) rows verified in "
            f"{speculative['time_s'] * 1e3:.3f} ms, of which {k if draft_layers else 0} draft "
            f"passes {speculative['draft_s'] * 1e3:.3f} ms; it beats the plain decode step "
            f"above when more than {speculative['break_even_tokens_per_step']:.2f} tokens per "
            "request are accepted per step (the accepted drafts + 1)"
        )


def _domain_all_to_all(model: ModelSpec, gpu: GpuSpec, tp: int, dp: int,
                       expert_parallel: bool, mode: str) -> AllToAll | None:
    """DeepEP's all-to-all where an expert-parallel group spans the hosts of one NVLink domain
    (an NVL72 rack's compute trays), as the simulator prices it there
    (``clustersim.cluster.build``); None where the group sits in one host (its all-gather)."""
    from clustersim.cost.collectives import deepep_all_to_all

    n = dp * tp
    if not expert_parallel or dp == 1 or n <= gpu.gpus_per_host:
        return None
    nvlink = gpu.link.effective_bytes_per_s
    return deepep_all_to_all(model, n, n, nvlink, nvlink, mode)


def _experts(cost_model: CostModel, batch: BatchShape, moe_tokens: int) -> dict | None:
    """Where the routed experts' price comes from: the measured table's format, kernel, file,
    and its curve or fit, and what one layer costs at this step's tokens (None: no table)."""
    pricing = cost_model.experts
    if pricing is None:
        return None
    layers = cost_model.model.num_moe_layers
    seconds = cost_model.experts_s(batch, moe_tokens)
    return {"format": pricing.format, "kernel": pricing.kernel.kernel,
            "table": pricing.kernel.table,
            "priced_by": "curve" if pricing.curve is not None else "fit",
            "moe_tp": pricing.moe_tp, "moe_ep": pricing.moe_ep,
            "fit_rms_log_error": pricing.kernel.fit_rms_log_error,
            "calibration": pricing.kernel.fit.calibration,
            "tokens": moe_tokens, "layers": layers, "layer_s": seconds / layers}
