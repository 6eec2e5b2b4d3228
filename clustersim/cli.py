"""The ``clustersim`` command line: parse, call, print. User errors exit with code 2."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from typer.core import TyperGroup

from clustersim.errors import ClusterSimError, ConfigError

if TYPE_CHECKING:
    from clustersim.catalog.specs import GpuSpec, ModelSpec

# Click's UsageError, from whichever copy of Click this Typer uses (newer ones vendor it)
_UsageError: type[Exception] = typer.BadParameter.__base__


class _Commands(TyperGroup):
    """Click's own command-line errors (an option's value out of range or not a number, a
    missing or unknown option) as one ``path: message`` line with exit code 2, like ours."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except _UsageError as error:
            if type(error).__name__ == "NoArgsIsHelpError":
                raise  # a command group called bare: its help
            param = getattr(error, "param", None)
            if isinstance(error, typer.BadParameter) and param is not None and error.message:
                path, message = (param.opts or [param.name])[0], error.message
            else:
                where = getattr(error, "ctx", None)
                path = (where.command_path if where is not None
                        else " ".join(filter(None, (ctx.command_path, ctx.invoked_subcommand))))
                message = error.format_message()
            typer.echo(f"{path}: {' '.join(message.split())}", err=True)
            raise typer.Exit(2) from None


app = typer.Typer(
    cls=_Commands,
    help="Capacity planning for LLM serving on a vLLM-faithful simulator.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

F = TypeVar("F", bound=Callable[..., Any])


def user_errors(func: F) -> F:
    """Turn clustersim's errors into ``path: message`` lines on stderr and exit code 2."""

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except ClusterSimError as error:
            for line in getattr(error, "lines", None) or [str(error)]:
                typer.echo(line, err=True)
            raise typer.Exit(2) from None

    return wrapper  # type: ignore[return-value]


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1e3:,.1f}"


def print_summary(summary: dict[str, Any], header: str) -> None:
    typer.echo(header)
    typer.echo(
        f"requests: {summary['num_requests']} arrived, {summary['num_finished']} finished, "
        f"{summary['num_rejected']} rejected, {summary['num_preemptions']} preemptions"
    )
    typer.echo(f"{'latency (ms)':<14}{'mean':>12}{'p50':>12}{'p90':>12}{'p99':>12}")
    for key, label in (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("itl_s", "ITL"), ("e2e_s", "E2E")):
        d = summary[key]
        typer.echo(
            f"{label:<14}{_ms(d['mean']):>12}{_ms(d['p50']):>12}{_ms(d['p90']):>12}"
            f"{_ms(d['p99']):>12}"
        )
    t = summary["throughput"]
    if t["requests_per_s"] is not None:
        typer.echo(
            f"throughput: {t['requests_per_s']:.2f} req/s, "
            f"{t['prompt_tokens_per_s']:,.0f} prompt tok/s, "
            f"{t['output_tokens_per_s']:,.0f} output tok/s over {summary['window_s']:.2f} s"
        )
    for inst in summary["instances"]:
        util = inst["utilization"]
        kv_mean = inst["kv_usage_mean"]
        typer.echo(
            f"instance {inst['name']}: {inst['num_steps']} steps, busy "
            f"{'-' if util is None else f'{util:.0%}'}, KV mean "
            f"{'-' if kv_mean is None else f'{kv_mean:.0%}'} / peak {inst['kv_usage_peak']:.0%} "
            f"of {inst['usable_kv_blocks']} blocks"
        )
    if "handoff_s" in summary:
        h = summary["handoff_s"]
        typer.echo(
            f"KV handoff: {summary['handoff_bytes'] / 1e9:,.2f} GB moved, p50 {_ms(h['p50'])} ms, "
            f"p99 {_ms(h['p99'])} ms (prefill done -> KV resident on the decode instance)"
        )
    if "slo" in summary:
        slo = summary["slo"]
        terms = ", ".join(f"{k} <= {v}" for k, v in slo.items() if k != "attainment")
        typer.echo(f"SLO attainment ({terms}): {slo['attainment']:.1%}")


@app.command()
@user_errors
def simulate(
    scenario: Annotated[Path, typer.Argument(help="Scenario YAML file.")],
    out: Annotated[Path, typer.Option("--out", help="Directory for the run's files.")] = Path(
        "runs/latest"
    ),
) -> None:
    """Simulate a scenario; write requests.csv, steps.csv and summary.json to --out."""
    from clustersim.output import write_run
    from clustersim.scenario import load_scenario
    from clustersim.sim import run_scenario

    spec = load_scenario(scenario)
    result = run_scenario(spec)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        message = f"cannot create output directory: {error.strerror}"
        raise ClusterSimError(str(out), message) from None
    summary = write_run(result, out)
    print_summary(summary, describe_layout(spec.name, spec.model, result.instances))
    typer.echo(describe_calibration(result.instances))
    files = "requests.csv, steps.csv, " + ("transfers.csv, " if result.transfers else "")
    typer.echo(f"wrote {out}/{files}summary.json")


def describe_calibration(instances: list[Any]) -> str:
    """Which GPU profiles priced the steps, and where their validation errors are."""
    labels = sorted({f"{info.gpu}: {info.calibration}" for info in instances})
    return f"step times priced with {', '.join(labels)} (how far to trust them: docs/validation.md)"


def describe_layout(name: str, model: str, instances: list[Any]) -> str:
    """One line per pool: what runs where."""
    pools: dict[str, list[Any]] = {}
    for info in instances:
        pools.setdefault(info.pool, []).append(info)
    def engine(info: Any) -> str:
        return (f"{info.gpu} TP{info.tensor_parallel_size}, max_num_batched_tokens "
                f"{info.max_num_batched_tokens}, max_num_seqs {info.max_num_seqs}, "
                f"{info.num_gpu_blocks} KV blocks")

    if len(instances) == 1:
        return f"{name}: {model} on {engine(instances[0])}"
    lines = [f"{name}: {model}"]
    for pool, members in pools.items():
        role = "" if members[0].role == "colocated" else f" ({members[0].role})"
        dp = members[0].data_parallel_size
        if dp > 1:
            lines.append(f"  {pool}{role}: {len(members) // dp} x data-parallel {dp} ranks of "
                         f"{engine(members[0])} each")
        else:
            lines.append(f"  {pool}{role}: {len(members)} x {engine(members[0])} each")
    return "\n".join(lines)


@app.command()
@user_errors
def compare(
    scenario: Annotated[Path, typer.Argument(help="Scenario YAML file.")],
    out: Annotated[Path, typer.Option("--out", help="Directory for both runs' files.")] = Path(
        "runs/compare"
    ),
    handoff_budget_ms: Annotated[
        float, typer.Option(min=0.0, help="Largest acceptable p95 KV handoff.")
    ] = 10.0,
) -> None:
    """Run the scenario colocated and disaggregated on the same traffic and GPUs; compare."""
    from clustersim.cluster.compare import (
        comparison_rows,
        counterparts,
        split_verdict,
        throughput,
    )
    from clustersim.output import write_run
    from clustersim.scenario import load_scenario
    from clustersim.sim import run_scenario

    spec = load_scenario(scenario)
    colocated_spec, split_spec = counterparts(spec)
    summaries, instances = {}, []
    for label, variant in (("colocated", colocated_spec), ("disaggregated", split_spec)):
        result = run_scenario(variant)
        instances += result.instances
        folder = out / label
        folder.mkdir(parents=True, exist_ok=True)
        summaries[label] = write_run(result, folder)
        typer.echo(describe_layout(f"{label}", spec.model, result.instances))
    colocated, split = summaries["colocated"], summaries["disaggregated"]
    typer.echo(f"{'':<22}{'colocated':>16}{'disaggregated':>30}")
    for metric, left, right in comparison_rows(colocated, split):
        typer.echo(f"{metric:<22}{left:>16}{right:>30}")
    handoff = split.get("handoff_s", {}).get("p95") or 0.0
    verdict = split_verdict(
        throughput(colocated),
        throughput(split),
        {m: colocated[m]["p95"] or 0.0 for m in ("ttft_s", "tpot_s")},
        {m: split[m]["p95"] or 0.0 for m in ("ttft_s", "tpot_s")},
        handoff,
        handoff_budget_ms / 1e3,
    )
    decision = "keep the disaggregated layout" if verdict.keep_split else "stay colocated"
    typer.echo(f"verdict: {decision}")
    for reason in verdict.reasons:
        typer.echo(f"  - {reason}")
    typer.echo(describe_calibration(instances))
    typer.echo(f"wrote {out}/colocated and {out}/disaggregated")


@app.command("step-time")
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


def check_parallel(
    model: ModelSpec, gpu: GpuSpec, tp: int, dp: int, expert_parallel: bool
) -> None:
    """--tp, --dp and --expert-parallel checked as a scenario's fields are, named by the
    options: the model shards ``tp`` ways, a MoE data-parallel group of ``dp x tp`` GPUs
    sits on one node, and with expert parallelism they hold whole experts each."""
    try:
        model.check_tp(tp)
        gpu.tp_link(tp)
    except ClusterSimError as error:
        raise type(error)("--tp", error.message) from None
    from clustersim.engine.data_parallel import check_group

    check_group(model, gpu.id, tp, dp, expert_parallel, max(gpu.link.max_gpus, gpu.pcie.max_gpus),
                names=("--dp", "--tp"), fields=("--dp", "--expert-parallel"))


def check_fits(
    model: ModelSpec, gpu: GpuSpec, tp: int, num_seqs: int, tokens: int, length_path: str,
    memory_path: str,
) -> None:
    """``num_seqs`` requests holding ``tokens`` KV tokens each, in one step: each within the
    model's positions, their KV cache within the memory of one GPU of the ``tp`` group."""
    from clustersim.catalog.specs import GIGA

    if tokens > model.max_position_embeddings:
        raise ConfigError(
            length_path, f"{tokens:,} tokens in one request exceed the "
            f"{model.max_position_embeddings:,} positions of {model.id}",
        )
    kv_bytes = num_seqs * tokens * model.kv_bytes_per_token(tp)
    if kv_bytes > gpu.mem_capacity_bytes:
        raise ConfigError(
            memory_path, f"{num_seqs:,} requests of {tokens:,} tokens hold "
            f"{kv_bytes / GIGA:,.1f} GB of KV cache per GPU at --tp {tp}, more than one "
            f"{gpu.id}'s {gpu.mem_capacity_bytes / GIGA:,.1f} GB",
        )


# Imported here, not at the top: the trace commands use user_errors from this module.
from clustersim.workload.commands import trace_app  # noqa: E402

app.add_typer(trace_app, name="trace")

from clustersim.calibration.commands import calibrate_cmd, validate_cmd  # noqa: E402

app.command("calibrate")(calibrate_cmd)
app.command("validate")(validate_cmd)


def main() -> None:  # pragma: no cover - console entry point
    sys.exit(app())
