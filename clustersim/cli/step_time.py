"""``clustersim step-time``: price one engine step with the roofline cost model."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from clustersim.cli.checks import check_fits, check_parallel
from clustersim.cli.common import user_errors
from clustersim.errors import ClusterSimError


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
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Price one engine step with the roofline cost model."""
    from clustersim.catalog import load_gpu, load_model
    from clustersim.cost.roofline import BatchShape, CostModel

    if (prefill_tokens is None) == (decode_batch is None):
        raise ClusterSimError("step-time", "give exactly one of --prefill-tokens or --decode-batch")
    spec_model = load_model(model)
    spec_gpu = load_gpu(gpu)
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
    cost = CostModel(spec_model, spec_gpu, tp, dp=dp, expert_parallel=expert_parallel).step_time(
        batch, dp * tokens
    )
    result = {
        "model": spec_model.id,
        "gpu": spec_gpu.id,
        "tp": tp,
        "dp": dp,
        "expert_parallel": expert_parallel,
        **shape,
        "time_s": cost.time_s,
        "compute_s": cost.compute_s,
        "memory_s": cost.memory_s,
        "communication_s": cost.communication_s,
        "overhead_s": cost.overhead_s,
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
    typer.echo(
        f"step time {cost.time_s * 1e3:.3f} ms = compute-bound {cost.compute_s * 1e3:.3f} + "
        f"memory-bound {cost.memory_s * 1e3:.3f} + communication "
        f"{cost.communication_s * 1e3:.3f} + overhead {cost.overhead_s * 1e3:.3f} ms"
    )
