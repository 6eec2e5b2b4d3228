"""``clustersim calibrate`` and ``clustersim validate``."""

from __future__ import annotations

import errno
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from clustersim.cli.checks import check_fits, check_parallel
from clustersim.cli.common import user_errors
from clustersim.errors import InputError
from clustersim.safe_write import atomic_write_text

_PREFILL_HELP = "A measured prefill: TOKENS=SECONDS (one prompt of TOKENS, no cached prefix)."
_DECODE_HELP = "A measured decode step: BATCH@CONTEXT=SECONDS (BATCH decodes at CONTEXT tokens)."


@user_errors
def calibrate_cmd(
    out: Annotated[
        Path | None,
        typer.Option(help="Profile file to write (required; its folder must exist). The "
                     "shipped fit is clustersim/catalog/calibrated.yaml: name it to refresh "
                     "it in a checkout (the fit sets beside it: calibrated_vidur.yaml with "
                     "--fit-set vidur, calibrated_aiconfigurator.yaml with --fit-set "
                     "aiconfigurator)."),
    ] = None,
    fit_set: Annotated[
        str,
        typer.Option(help="Without measurements: the profile to write, 'shipped' (each GPU "
                     "from its shipped fit set), 'vidur' (fit-v1 on every GPU) or "
                     "'aiconfigurator' (fit-v2 on every GPU)."),
    ] = "shipped",
    gpu: Annotated[str | None, typer.Option(help="GPU of the measurements (few-shot).")] = None,
    model: Annotated[str | None, typer.Option(help="Model of the measurements.")] = None,
    tp: Annotated[int, typer.Option(min=1, help="Tensor-parallel size of the measurements.")] = 1,
    dp: Annotated[int, typer.Option(
        min=1, help="Data-parallel ranks of a MoE deployment (a --decode BATCH is one rank's, "
        "every rank taken as busy alike).")] = 1,
    expert_parallel: Annotated[bool, typer.Option(
        "--expert-parallel", help="The MoE deployment runs with --enable-expert-parallel.")
    ] = False,
    prefill: Annotated[list[str] | None, typer.Option(help=_PREFILL_HELP)] = None,
    decode: Annotated[list[str] | None, typer.Option(help=_DECODE_HELP)] = None,
    from_requests: Annotated[
        Path | None,
        typer.Option(help="Per-request records of a real run (JSON lines with input_toks, "
                     "output_toks, queued_ts, first_token_ts, last_token_ts, or the result "
                     "file of `vllm bench serve --save-result --save-detailed`): three "
                     "measurements are taken from them."),
    ] = None,
    max_num_batched_tokens: Annotated[
        int | None, typer.Option(min=1, help="The run's token budget (chunks its prompts).")
    ] = None,
) -> None:
    """Fit the cost model per GPU on the shipped kernel profiles (no measurements given), or
    adjust one GPU's profile to at most three measured step times of your own stack."""
    prefill, decode = prefill or [], decode or []
    if prefill or decode or from_requests:
        if fit_set != "shipped":
            raise InputError("--fit-set", "goes without measurements: a few-shot fit starts "
                             "from the GPU's profile (name a set with --gpu ID@vidur)")
        _few_shot(out, gpu, model, tp, prefill, decode, from_requests, max_num_batched_tokens,
                  dp, expert_parallel)
        return
    if gpu or model:
        raise InputError("--gpu", "--gpu/--model go with --prefill/--decode measurements")
    given = [flag for flag, value in (("--tp", tp != 1), ("--dp", dp != 1),
                                      ("--expert-parallel", expert_parallel),
                                      ("--max-num-batched-tokens", max_num_batched_tokens))
             if value]
    if given:
        raise InputError(given[0], "describes measurements: goes with --prefill/--decode or "
                         "--from-requests")
    from clustersim.calibration.fit import distserve_check
    from clustersim.calibration.fitsets import (
        SETS,
        SHIPPED_FIT_ID,
        calibrate_sets,
        shipped_profiles,
    )
    from clustersim.calibration.profile import write_profiles

    if out is None:
        raise InputError("--out", "give the profile file to write; calibrate writes nowhere "
                         "else (the shipped fit: --out clustersim/catalog/calibrated.yaml in a "
                         "checkout)")
    if fit_set not in ("shipped", *SETS):
        raise InputError("--fit-set", f"unknown fit set {fit_set!r}; give shipped, "
                         f"{', '.join(SETS)}")
    _write(out)  # an unwritable --out fails before the fit
    sets = calibrate_sets()
    shipped = shipped_profiles(sets)
    profiles = shipped if fit_set == "shipped" else sets[fit_set]
    fit_id = SHIPPED_FIT_ID if fit_set == "shipped" else SETS[fit_set]
    _write(out, lambda: write_profiles(profiles, out, fit_id))
    typer.echo(f"{'gpu':<21}{'eff_c':>6}{'t_half':>7}{'eff_m':>6}{'floor_us':>9}{'eff_att':>8}"
               f"{'K_half':>7}{'ar_alpha_us':>12}{'car_alpha_us':>13}  calibration")
    for gpu_id, p in profiles.items():
        alpha, custom = p.get("allreduce_latency_s"), p.get("custom_allreduce_latency_s")
        typer.echo(
            f"{gpu_id:<21}{p['compute_efficiency']:>6.2f}{p['compute_half_tokens']:>7.0f}"
            f"{p['memory_efficiency']:>6.2f}{p.get('gemm_floor_s', 0.0) * 1e6:>9.2f}"
            f"{p['attention_efficiency']:>8.2f}{p.get('attention_half_keys', 0.0):>7.0f}"
            f"{'-' if alpha is None else f'{alpha * 1e6:.1f}':>12}"
            f"{'-' if custom is None else f'{custom * 1e6:.1f}':>13}  {p['calibration']}"
        )
    typer.echo("cross-check, DistServe's 2023-vLLM A100 decode step (batch 1, context 512) vs "
               "ours: the gap is that stack's per-step overhead")
    for row in distserve_check(profiles):
        typer.echo(f"  {row['model']} TP{row['tp']}: DistServe {row['distserve_ms']:.1f} ms, "
                   f"calibrated model {row['ours_ms']:.1f} ms")
    typer.echo(f"wrote {out}")


_FIT_WARN = 0.10
"""A fitted profile further than this from a measurement it was fitted on is reported."""


def _few_shot(out, gpu_id, model_id, tp, prefill, decode, from_requests, budget, dp=1,
              expert_parallel=False) -> None:
    import yaml

    from clustersim.calibration.fewshot import MAX_POINTS, fit_errors, fit_few_shot
    from clustersim.catalog import load_gpu, load_model, profile_entry
    from clustersim.cost.roofline import BatchShape

    if out is None or gpu_id is None or model_id is None:
        raise InputError("--out", "few-shot calibration needs --out, --gpu and --model")
    if from_requests is not None and (prefill or decode):
        raise InputError("--from-requests", "give either records or --prefill/--decode")
    if budget is not None and from_requests is None:
        raise InputError("--max-num-batched-tokens", "goes with --from-requests (a --prefill "
                         "measurement is one step)")
    if len(prefill) + len(decode) > MAX_POINTS:
        raise InputError("--prefill/--decode", f"at most {MAX_POINTS} measurements")
    from clustersim.engine.quantization import served_model

    gpu = load_gpu(gpu_id, path="--gpu")
    # a quantized checkpoint measured as vLLM serves it by default on this GPU (awq_marlin, ...)
    spec = served_model(load_model(model_id, path="--model"), gpu, where="--model")
    if (dp > 1 or expert_parallel) and not spec.is_moe:
        raise InputError("--dp", f"{spec.id} is dense: --dp/--expert-parallel describe MoE "
                         "deployments (dense data-parallel ranks are independent engines)")
    check_parallel(spec, gpu, tp, dp, expert_parallel)
    points, lines = [], []
    for text in prefill:
        (tokens,), seconds = _split(text, "--prefill", "TOKENS=SECONDS")
        check_fits(spec, gpu, tp, 1, tokens, "--prefill", "--prefill")
        points.append((BatchShape.from_chunks([(tokens, 0, True)]), seconds))
    for text in decode:
        (batch, context), seconds = _split(text, "--decode", "BATCH@CONTEXT=SECONDS")
        check_fits(spec, gpu, tp, batch, context + 1, "--decode", "--decode")
        points.append((BatchShape.from_chunks([(1, context, True)] * batch), seconds))
    if from_requests is not None:
        from clustersim.calibration.records import measurements_from_records, read_records

        where = str(from_requests)
        records = read_records(from_requests, max_tokens=spec.max_position_embeddings)
        points = measurements_from_records(records, budget, dp, where=where)
        for steps, seconds in points:
            if steps[0].num_decode_tokens:
                size = steps[0].num_decode_tokens
                check_fits(spec, gpu, tp, size, steps[0].decode_kv_tokens // size, where, where)
                what = f"decode step, batch {size}"
            else:
                what = f"prefill of {sum(b.num_prefill_tokens for b in steps)} tokens"
            lines.append(f"measurement from records: {what}, {seconds * 1e3:.2f} ms")
    tuned = fit_few_shot(spec, gpu, tp, points, dp=dp, expert_parallel=expert_parallel)
    errors = fit_errors(spec, tuned, tp, points, dp=dp, expert_parallel=expert_parallel)
    lines.append("the fitted profile prices your measurements at "
                 + ", ".join(f"{round(e * 100, 1) + 0.0:+.1f} %" for e in errors))
    if any(abs(e) > _FIT_WARN for e in errors):
        lines.append(f"warning: the model cannot match every measurement within "
                     f"{_FIT_WARN * 100:.0f} % (one faster than the GPU's datasheet allows, or "
                     "measurements that contradict each other, e.g. taken under load)")
    entry = profile_entry(tuned)
    entry["provenance"] = {
        "base": gpu.calibration,
        "measurements": {"model": model_id, "tp": tp, "dp": dp,
                         "expert_parallel": expert_parallel, "prefill": prefill, "decode": decode,
                         "from_requests": None if from_requests is None else str(from_requests)},
    }
    # keyed by the catalog id: `--gpu h100-sxm@base.yaml` tunes h100-sxm
    doc = {"schema_version": 1, "generated_by": "clustersim calibrate (few-shot)",
           "profiles": {gpu.id: entry}}
    _write(out, lambda: atomic_write_text(out, yaml.safe_dump(doc, sort_keys=False)))
    for line in lines:
        typer.echo(line)
    typer.echo(
        f"{gpu.id}: per-step overhead {tuned.per_step_overhead_s * 1e3:.3f} ms, per-request "
        f"{tuned.per_request_overhead_s * 1e6:.1f} us, compute efficiency "
        f"{tuned.compute_efficiency:.2f}, attention efficiency {tuned.attention_efficiency:.2f}, "
        f"memory efficiency {tuned.memory_efficiency:.2f} (was {gpu.memory_efficiency:.2f})"
    )
    typer.echo(f"wrote {out} (in a scenario: gpu: {gpu.id}@{out})")


def _split(text: str, flag: str, form: str) -> tuple[list[int], float]:
    """``'64@1024=0.014'`` -> ``([64, 1024], 0.014)``: whole numbers >= 1, seconds finite > 0."""
    left, sep, right = text.partition("=")
    try:
        seconds = float(right)
        if not sep or not 0 < seconds < math.inf:
            raise ValueError
        numbers = [int(n) for n in left.split("@")]
        if len(numbers) != form.count("@") + 1 or min(numbers) < 1:
            raise ValueError
    except ValueError:
        raise InputError(flag, f"expected {form} with positive numbers, got {text!r}") from None
    return numbers, seconds


def _write(path: Path, write: Callable[[], object] | None = None) -> None:
    """Run ``write``, which writes ``path`` (None: only check that ``path`` could be written);
    a failure is one ``path: message`` line. No folder is made: a file goes only where the
    user said, into a folder that exists."""
    try:
        parent = path.parent
        if parent.exists() and not parent.is_dir():
            raise FileExistsError(errno.EEXIST, f"{parent} is a file, not a folder")
        if not parent.is_dir():
            raise FileNotFoundError(errno.ENOENT, f"no folder {parent}")
        if path.is_dir():
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
        if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))
        if write is not None:
            write()
    except OSError as error:
        where = f" ({error.filename})" if error.filename not in (None, str(path)) else ""
        raise InputError(str(path), f"cannot write: {error.strerror}{where}") from None


@user_errors
def validate_cmd(
    write_docs: Annotated[
        Path | None, typer.Option(help="Also write the Markdown page (docs/validation.md).")
    ] = None,
) -> None:
    """Score both fit sets (fit-v1 on Vidur's tables, fit-v2 on aiconfigurator's) on the
    validation data only and print the error tables."""
    from clustersim.calibration.comparison import validate_fits
    from clustersim.calibration.report import render_markdown, render_text

    if write_docs is not None:
        _write(write_docs)  # an unwritable path fails before the scoring
    validation = validate_fits()
    if write_docs is not None:
        page = render_markdown(validation)
        _write(write_docs, lambda: atomic_write_text(write_docs, page))
    typer.echo(render_text(validation))
    if write_docs is not None:
        typer.echo(f"\nwrote {write_docs}")
