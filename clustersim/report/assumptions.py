"""What a result rests on, read from the inputs that produced it: the engine settings and
version switches, the calibration profile that priced the steps and how far it is trusted,
the topology's links, the workload and where it comes from. Nothing is estimated here: every
value is a scenario field, a catalog entry or a topology file's."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import yaml

from clustersim.catalog import load_profiles
from clustersim.cluster.topology import Topology
from clustersim.report.document import Block, Bullets, Pre, Span, Table, Text
from clustersim.scenario.layout import topology_label
from clustersim.workload.spec import PoissonWorkload, SyntheticWorkload
from clustersim.workload.spec_reuse import PromptPoolWorkload
from clustersim.workload.traces import SHIPPED_TRACES

if TYPE_CHECKING:
    from clustersim.scenario import Scenario
    from clustersim.sim import RunResult

VALIDATION_DOC = "docs/validation.md"
"""Cited by name, never linked: a report is one file to mail, with no path into a checkout."""


def engine_settings(scenario: Scenario, varied: tuple[str, ...] = ()) -> Table:
    """Every engine field as the scenario sets it (or the default it takes) and what it
    means; the fields a plan varies per candidate say so."""
    engine = scenario.engine
    rows = []
    for name, info in type(engine).model_fields.items():
        value = getattr(engine, name)
        if name in varied:
            shown = "per candidate (candidates table)"
        elif value is None and name == "quantization":
            shown = "the checkpoint's quantization_config (16-bit without one)"
        elif value is None:
            shown = "vLLM's default for the GPU (engines table)"
        else:
            shown = str(value).lower() if isinstance(value, bool) else str(value)
        source = "scenario" if name in engine.model_fields_set else "default"
        rows.append((name, shown, source if name not in varied else "plan",
                     info.description or ""))
    return Table(("engine setting", "value", "from", "meaning"), tuple(rows), "llll")


def kv_transfer(run: RunResult) -> Table | None:
    layout = run.scenario.layout
    if layout is None or layout.kind == "colocated":
        return None
    spec = layout.kv_transfer
    rows = tuple(
        (name, str(getattr(spec, name)), "scenario" if name in spec.model_fields_set
         else "default", info.description or "")
        for name, info in type(spec).model_fields.items())
    return Table(("kv_transfer", "value", "from", "meaning"), rows, "llll")


def calibration(runs: list[RunResult]) -> list[Block]:
    """Per GPU type: the profile that priced its steps, the kernel fit's errors where the
    shipped catalog records them, and where the end-to-end validation is."""
    profiles = load_profiles()
    seen: dict[str, str] = {}
    precision: dict[str, dict[str, None]] = {}  # GPU -> how its engines ran, in order seen
    for run in runs:
        for info in run.instances:
            seen.setdefault(info.gpu, info.calibration)
            weights = info.quantization or "16-bit"
            precision.setdefault(info.gpu, {})[
                f"weights {weights}, KV cache {info.kv_cache_dtype}, linear layers priced "
                f"as {info.gemm_kernel}"] = None
    items = []
    for gpu, profile in sorted(seen.items()):
        entry = profiles.get(gpu, {})
        parts: list[str | Span] = [Span(gpu, "code"), ": ", Span(profile, "code")]
        provenance = entry.get("provenance", {}) if entry.get("calibration") == profile else {}
        gemm, attention = provenance.get("gemm"), provenance.get("attention")
        if gemm:
            parts.append(f"; GEMM fit rms log error {gemm['rms_log_error']:.3f} over "
                         f"{gemm['num_rows']:,} kernel measurements")
        if attention:
            parts.append(f", attention {attention['rms_log_error']:.3f} over "
                         f"{attention['num_rows']:,} (measured on {attention['measured_on']})")
        if provenance.get("overheads"):
            parts.append(f"; CPU overheads: {provenance['overheads']}")
        if profile == "default":
            parts.append("; uncalibrated catalog values")
        fp8 = provenance.get("fp8", {}).get("fp8_gemm")
        if fp8:
            parts.append(f"; FP8 GEMM fit rms log error {fp8['rms_log_error']:.3f} over "
                         f"{fp8['num_rows']:,} aiconfigurator measurements")
        for line in precision.get(gpu, {}):
            parts.append(f"; {line}")
        items.append(tuple(parts))
    return [
        Bullets.of(*items),
        Text.of("How far to trust these step times, scored on measurements the fit never saw "
                "(Splitwise's step times, real vLLM serving runs; zero-shot and with three "
                "measurements of the target): ", Span(VALIDATION_DOC, "code"), " in "
                "clustersim's source repository. Its headline numbers are tables of prose "
                "there, not data this report can read."),
    ]


def topology(run: RunResult) -> list[Block]:
    """The links of the topology the run was placed on (bandwidth per direction, efficiency,
    latency, source)."""
    scenario = run.scenario
    name = topology_label(scenario.topology)
    if scenario.topology is None:
        return [Text.of("No topology: the instances share nothing; no link is modelled.")]
    links = Topology.load(scenario.topology, base_dir=scenario.base_dir).spec.links
    rows = tuple(
        (key, f"{link.bw_gb_per_s_per_dir:,g}", f"{link.efficiency:g}", f"{link.latency_us:g}",
         link.source or "")
        for key, link in links.items())
    return [Text.of("Topology ", Span(str(name), "code"), ":"),
            Table(("link", "GB/s per direction", "efficiency", "latency (µs)", "source"),
                  rows, "lrrrl")]


def workload(scenario: Scenario, note: str = "") -> list[Block]:
    """The workload as the scenario file gives it, and where its requests come from."""
    data = scenario.workload.model_dump(mode="json", exclude_unset=True)
    blocks: list[Block] = [Pre(yaml.safe_dump({"workload": data}, sort_keys=False).rstrip())]
    traces = sorted(set(_traces(data)))
    sources: list[str | Span] = []
    for trace in traces:
        shipped = SHIPPED_TRACES.get(trace)
        text = (f"{trace}: {shipped.description} (shipped with clustersim; attribution in "
                "NOTICE)" if shipped is not None else f"{trace}: the user's file")
        sources.append(text)
    if sources:
        blocks.append(Text.of("Source: " + "; ".join(str(s) for s in sources) + "."))
    else:
        blocks.append(Text.of("Source: generated from the scenario file's distributions "
                              f"with seed {scenario.seed}."))
    if note:
        blocks.append(Text.of(note))
    return blocks


def _traces(data: Any) -> list[str]:
    if isinstance(data, dict):
        found = [str(v) for k, v in data.items() if k == "trace" and v]
        for value in data.values():
            found += _traces(value)
        return found
    if isinstance(data, list):
        return [t for item in data for t in _traces(item)]
    return []


def configured_rate(scenario: Scenario) -> float | None:
    """The request rate the workload is configured with (``vllm bench serve
    --request-rate``); None for replays, explicit requests and closed loops."""
    workload = scenario.workload
    if isinstance(workload, PoissonWorkload):
        return workload.rate_per_s
    if isinstance(workload, SyntheticWorkload | PromptPoolWorkload):
        return getattr(workload.arrivals, "rate_per_s", None)
    return None
