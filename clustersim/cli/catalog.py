"""``clustersim catalog``: what a scenario can name, with the figures behind each id."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from clustersim.cli.common import user_errors

GIB = 1 << 30


def catalog_data() -> dict[str, list[dict[str, Any]]]:
    """The shipped models, GPUs (with their default prices) and topologies, each with its
    source: what ``catalog --json`` prints."""
    from clustersim.catalog import default_prices, gpu_ids, load_gpu, load_model, model_ids
    from clustersim.cluster.topology import load_spec, shipped_topologies

    models = []
    for model_id in model_ids():
        m = load_model(model_id)
        models.append({
            "id": m.id, "hf_repo": m.hf_repo, "num_params": m.num_params,
            "active_params": m.active_params, "num_layers": m.num_layers,
            "hidden_size": m.hidden_size, "num_attention_heads": m.num_attention_heads,
            "num_key_value_heads": m.num_key_value_heads, "num_experts": m.num_experts,
            "num_experts_per_tok": m.num_experts_per_tok,
            "max_position_embeddings": m.max_position_embeddings, "dtype": m.dtype,
            "quantization": None if m.quantization is None else m.quantization.method,
            "kv_bytes_per_token": m.kv_bytes_per_token(), "source": m.source,
        })
    prices = default_prices()
    gpus = []
    for gpu_id in gpu_ids():
        g = load_gpu(gpu_id)
        usd, price_source = prices.get(gpu_id, (None, None))
        gpus.append({
            "id": g.id, "name": g.name, "mem_capacity_bytes": g.mem_capacity_bytes,
            "mem_bw_gb_per_s": g.mem_bw_gb_per_s, "bf16_dense_tflops": g.bf16_dense_tflops,
            "fp8_dense_tflops": g.fp8_dense_tflops, "fp4_dense_tflops": g.fp4_dense_tflops,
            "int8_dense_tops": g.int8_dense_tops, "compute_capability": g.compute_capability,
            "sm_count": g.sm_count,
            "link": {"kind": g.link.kind, "bw_gb_per_s_per_dir": g.link.bw_gb_per_s_per_dir,
                     "max_gpus": g.link.max_gpus, "host_gpus": g.link.host_gpus,
                     "source": g.link.source},
            "calibration": g.calibration, "usd_per_gpu_hour": usd,
            "price_source": price_source, "source": g.source,
        })
    topologies = []
    for name in shipped_topologies():
        spec = load_spec(name)
        counts: dict[str, int] = {}
        for node in spec.nodes:
            counts[node.gpus.type] = counts.get(node.gpus.type, 0) + node.gpus.count
        topologies.append({"name": name, "num_nodes": len(spec.nodes), "gpus": counts,
                           "description": spec.description})
    return {"models": models, "gpus": gpus, "topologies": topologies}


def _billions(count: int) -> str:
    return f"{count / 1e9:,.1f}B"


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]], right: str) -> list[str]:
    """Rows under a header, each column as wide as its widest cell; the columns marked ``r``
    in ``right`` are right-aligned."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]

    def line(row: tuple[str, ...]) -> str:
        cells = [cell.rjust(w) if align == "r" else cell.ljust(w)
                 for cell, w, align in zip(row, widths, right, strict=True)]
        return "  ".join(cells).rstrip()

    return [line(header), *map(line, rows)]


def format_catalog(data: dict[str, list[dict[str, Any]]]) -> str:
    """The tables ``catalog`` prints: one row per id, the figures that tell them apart."""
    models = [(
        m["id"], _billions(m["num_params"]),
        _billions(m["active_params"]) if m["num_experts"] else "",
        str(m["num_layers"]), str(m["hidden_size"]),
        f"{m['num_attention_heads']}/{m['num_key_value_heads']}",
        f"{m['num_experts_per_tok']} of {m['num_experts']}" if m["num_experts"] else "",
        f"{m['max_position_embeddings']:,}", m["quantization"] or m["dtype"],
    ) for m in data["models"]]
    gpus = [(
        g["id"], f"{g['mem_capacity_bytes'] / GIB:,.1f}", f"{g['mem_bw_gb_per_s']:,.0f}",
        f"{g['bf16_dense_tflops']:,.0f}",
        "" if g["fp8_dense_tflops"] is None else f"{g['fp8_dense_tflops']:,.0f}",
        "" if g["fp4_dense_tflops"] is None else f"{g['fp4_dense_tflops']:,.0f}",
        f"{g['link']['kind']} {g['link']['bw_gb_per_s_per_dir']:g}",
        "" if g["usd_per_gpu_hour"] is None else f"{g['usd_per_gpu_hour']:.2f}",
        g["calibration"],
    ) for g in data["gpus"]]
    topologies = [(
        t["name"], str(t["num_nodes"]),
        ", ".join(f"{n} x {gpu}" for gpu, n in t["gpus"].items()),
    ) for t in data["topologies"]]
    lines = [f"models ({len(models)}): a scenario's model: (or a path to a HuggingFace "
             "config.json)"]
    lines += _table(("id", "params", "active", "layers", "hidden", "heads/kv", "experts",
                     "context", "weights"), models, "lrrrrrrrl")
    lines += ["", f"GPUs ({len(gpus)}): a scenario's gpu: (dense TFLOPS, the TP link's GB/s "
              "per direction)"]
    lines += _table(("id", "memory GiB", "HBM GB/s", "BF16", "FP8", "FP4", "TP link",
                     "$/GPU-h", "profile"), gpus, "lrrrrrlrl")
    lines += ["", f"topologies ({len(topologies)}): a scenario's topology:"]
    lines += _table(("name", "nodes", "GPUs"), topologies, "lrl")
    lines += ["", "profile: the fit that prices a GPU's steps (docs/validation.md scores it)",
              "$/GPU-h: dated snapshots of rental prices; a plan's prices_usd_per_gpu_hour "
              "replaces them", "--json adds each entry's source"]
    return "\n".join(lines)


@user_errors
def catalog_cmd(
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print JSON, with each entry's source.")] = False,
) -> None:
    """List the shipped models, GPUs (with default prices) and topologies.

    These are the ids a scenario's model:, gpu: and topology: can name, each with the figures
    that tell it apart; --json adds each entry's source."""
    data = catalog_data()
    typer.echo(json.dumps(data, indent=2) if as_json else format_catalog(data))
