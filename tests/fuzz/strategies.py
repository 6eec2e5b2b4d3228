"""Hypothesis strategies that draw fuzz cases: a ``clustersim`` command line and the files it
reads, as a new user and a hostile one would write them.

Twelve sources, each a row of the campaign's table:

- **scenario fields**: a shipped scenario (its traffic cut to at most 40 requests so a run
  takes well under a second) with one to three of: a key deleted, a value replaced by an odd
  one (extreme or non-finite numbers, wrong types, odd strings and paths, containers), an
  unknown key, another or an unknown ``kind:``, deep nesting, thousands of unknown keys, a
  number just past its limit; run by ``simulate`` or ``compare``, now and then with a report;
- **plan sections**: a shipped ``plan:`` mutated the same way (its search kept to a few
  simulations), run by ``plan``;
- **scenario bytes**: the same files damaged as text: a line duplicated (a key given twice) or
  dropped, non-UTF-8 or control bytes, truncation, a byte-order mark, CRLF, tabs, a second
  document, an alias bomb, 1,000-deep nesting, an empty file, a folder in its place;
- **schema, any** and **schema, valid**: scenarios built from ``Scenario.model_json_schema()``,
  with constraints broken at random nodes, or within the schema's valid space (sizes kept
  small, catalog ids for the free-text ids) for the invariant checks;
- **traces**: files of every format in ``workload.traces.FORMATS``, malformed (odd cells,
  huge or non-finite counts, missing or extra columns, ragged rows, bad JSON, duplicate JSON
  keys, non-UTF-8, truncation; gzipped, truncated or corrupt ``.gz``), read by ``trace stats``
  or replayed by a scenario;
- **topologies**, **GPU profiles**, **HF configs**, **request records**: the other files a
  scenario or ``calibrate`` reads, mutated like scenarios;
- **command lines**: every command and option of the CLI (read from Click's command tree)
  with odd values, unknown options and commands, ``-h``, ``--version``;
- **files**: the file-level mutator (:mod:`tests.fuzz.files`): each file a command reads made
  a pipe, a socket, a device, a link (to a folder, dangling, a loop, to a file outside the
  case folder), empty, one byte past its size limit or a sparse giant, and each output folder
  seeded with links out of it, pipes, sockets and folders under the names the command writes.

Output paths are never drawn from the odd strings: a command writes only inside its case
folder or tries one of a few places it cannot write (/proc, /sys, a missing folder); the
runner checks that nothing beside the case folder changed.
"""

from __future__ import annotations

import copy
import gzip
import json
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "scenarios"
MAX_CASE_REQUESTS = 40


@dataclass(frozen=True)
class Case:
    """One command line and the files it reads, relative to the folder it runs in (a path
    ending in ``/`` is a folder; one under ``../outside/`` lies beside that folder, where the
    command must write nothing), and the special files made after them (``(path, kind,
    argument)``: a pipe, a socket, a device, a link, a padded or sparse file; see
    :func:`tests.fuzz.files.make_special`)."""

    source: str
    argv: tuple[str, ...]
    files: tuple[tuple[str, bytes], ...] = ()
    specials: tuple[tuple[str, str, str], ...] = ()


# ----------------------------------------------------------------- values
ODD_NUMBERS: list[Any] = [
    0, -1, 1, 2, 3, 0.5, -0.0, 1e-308, 5e-324, 1e308, -1e308, 2**31 - 1, 2**31, 2**53 + 1,
    2**63 - 1, 2**63, 2**64, 10**22, 10**30, -(2**63), math.inf, -math.inf, math.nan, 1e-9,
    1e9, 123456789, 7.25,
]
ODD_STRINGS: list[str] = [
    "", " ", "x" * 5000, "h100-sxm@", "h100-sxm@default", "h100-sxm@/nonexistent.yaml",
    "h100-sxm@/dev/null", "/dev/null", "/dev/zero", "/dev/stdin", "/", ".", "..", "~",
    "/proc/self/mem", "../../../../etc/passwd", "nul\x00byte", "\u202eevil", "\U0001f600",
    "a\nb", "NaN", ".inf", "1e999", "0x10", "kind", "%s%s", "{}", "[", "null", "-1",
    "llama-3.1-8b", "qwen3-30b-a3b", "opt-13b", "rtx4090", "a100-80gb-sxm", "dgx-h100",
    "dgx-h100-x2", "azure-conv-2023", "mooncake-conversation", "sharegpt-lengths",
    "colocated", "prefill", "decode", "disaggregated", "fixed", "poisson",
]
ODD_CONTAINERS: list[Any] = [
    [], {}, [1], [[]], {"kind": "fixed"}, {"a": 1}, list(range(1000)), [0.0, 1.0],
    {"kind": None}, {"kind": ["poisson"]}, [{"x": 1}] * 3, b"\xff\xfe",
]
ODD_VALUES = ODD_NUMBERS + ODD_STRINGS + ODD_CONTAINERS + [True, False, None]

PAST_LIMITS: list[Any] = [
    100_000_001, 10_000_001, 100_000_000.5, 1e8 * 1.0001, 73, 16_385, 1025, 2**31, 1e7 * 1.01,
    1e-9, 3601.0, 2**63, -1, 0,
]
"""Numbers just past clustersim's limits (and the edges 0, -1): past a limit a value must be
an error. Values at or inside a size limit are legitimate runs that may take minutes, so the
campaign does not draw them."""

_DEEP = "__fuzz_deep_{}__"
_DEEP_DEPTHS = (10, 63, 65, 300, 1000)
"""Depths of the nesting a ``_DEEP`` marker stands for (around the limit of 64, and far past)."""
UNSAFE_OUTPUTS = ["/proc/x", "/proc/self", "/sys/kernel/x", "/nonexistent/dir/x.md",
                  "/proc/self/x.yaml"]
"""Places a command cannot write (also as root), tried as output paths."""
BAD_BYTES = [b"\xff", b"\xc3\x28", b"\x80", b"\xfe\xff", b"\x00", b"\x1b[31m", b"\t", b"\r",
             b"\xe2\x80\xae", b"\xed\xa0\x80", b"\x0c"]


def odd_values() -> st.SearchStrategy[Any]:
    """An odd value, a fresh copy each time: a case that mutates it further must not change
    the shared constants (hypothesis then sees a different strategy on its next draw)."""
    return st.one_of(st.sampled_from(ODD_VALUES).map(copy.deepcopy),
                     st.sampled_from(PAST_LIMITS).map(copy.deepcopy),
                     st.integers(-(2**70), 2**70), st.floats(allow_nan=True),
                     st.text(max_size=30))


# ------------------------------------------------------------- documents
def _cut_traffic(doc: dict[str, Any]) -> dict[str, Any]:
    """A shipped scenario with at most MAX_CASE_REQUESTS requests (a run well under 1 s)."""
    workload = doc.get("workload", {})
    if workload.get("kind") == "replay":
        workload["max_num_requests"] = min(workload.get("max_num_requests", 10**9),
                                           MAX_CASE_REQUESTS)
    if "num_requests" in workload:
        workload["num_requests"] = min(workload["num_requests"], MAX_CASE_REQUESTS)
    return doc


@lru_cache(maxsize=1)
def shipped_scenarios() -> tuple[tuple[str, str], ...]:
    """(name, YAML text) of every shipped scenario, its traffic cut."""
    result = []
    for path in sorted(SCENARIOS.glob("*.yaml")):
        doc = _cut_traffic(yaml.safe_load(path.read_text(encoding="utf-8")))
        result.append((path.stem, yaml.safe_dump(doc, sort_keys=False)))
    return tuple(result)


def scenario_doc(name: str) -> dict[str, Any]:
    return yaml.safe_load(dict(shipped_scenarios())[name])


TINY: dict[str, Any] = {
    "name": "fuzz", "model": "qwen2.5-7b-instruct", "gpu": "h100-sxm",
    "workload": {"kind": "explicit", "requests": [
        {"id": "a", "arrival_s": 0.0, "prompt_tokens": 32, "output_tokens": 4},
        {"id": "b", "arrival_s": 0.01, "prompt_tokens": 300, "output_tokens": 8}]},
}


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every location in a document (its root excluded)."""
    found = []
    if isinstance(node, dict):
        for key, value in node.items():
            found.append((*prefix, key))
            found += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found.append((*prefix, i))
            found += _paths(value, (*prefix, i))
    return found


def _get(doc: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        doc = doc[part]
    return doc


def _mappings(doc: Any) -> list[tuple[Any, ...]]:
    return [()] + [p for p in _paths(doc) if isinstance(_get(doc, p), dict)]


@st.composite
def mutated_doc(draw: st.DrawFn, doc: dict[str, Any], kinds: list[str]) -> dict[str, Any]:
    """``doc`` with one to three mutations of its fields."""
    doc = copy.deepcopy(doc)
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(doc)
        action = draw(st.sampled_from(["replace", "replace", "replace", "delete", "unknown",
                                       "kind", "deep", "many", "limit"]))
        if action in ("replace", "delete", "deep", "limit") and paths:
            path = draw(st.sampled_from(paths))
            parent = _get(doc, path[:-1])
            if action == "delete":
                del parent[path[-1]]
            elif action == "replace":
                parent[path[-1]] = draw(odd_values())
            elif action == "deep":
                parent[path[-1]] = _DEEP.format(draw(st.sampled_from(_DEEP_DEPTHS)))
            else:
                parent[path[-1]] = copy.deepcopy(draw(st.sampled_from(PAST_LIMITS)))
        elif action == "unknown":
            target = _get(doc, draw(st.sampled_from(_mappings(doc))))
            # a copy: a later mutation must not change the shared constant
            target[draw(st.sampled_from(["extra", "kind", "nme", "seed", "x" * 300, "1"]))] = (
                copy.deepcopy(draw(st.sampled_from(ODD_VALUES))))
        elif action == "kind":
            holders = [p for p in _mappings(doc) if "kind" in _get(doc, p)]
            if holders:
                target = _get(doc, draw(st.sampled_from(holders)))
                target["kind"] = draw(st.sampled_from([*kinds, "zipf", "", "KIND", 5]))
        elif action == "many":
            target = _get(doc, draw(st.sampled_from(_mappings(doc))))
            for i in range(draw(st.sampled_from([11, 100, 1000, 20000]))):
                target[f"unknown_{i}"] = i
    return doc


def dump_yaml(doc: Any) -> bytes:
    """YAML text of ``doc``; a ``_DEEP`` marker becomes that many nested flow lists."""
    text = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=1000)
    return _expand_deep(text).encode("utf-8", "surrogatepass")


def _expand_deep(text: str, quote: str = "") -> str:
    """``text`` with each ``_DEEP`` marker (in ``quote``s) made that many nested lists."""
    for depth in _DEEP_DEPTHS:
        text = text.replace(f"{quote}{_DEEP.format(depth)}{quote}", "[" * depth + "]" * depth)
    return text


@st.composite
def damaged_text(draw: st.DrawFn, data: bytes) -> bytes:
    """``data`` (a YAML or JSON file) damaged as bytes."""
    lines = data.split(b"\n")
    action = draw(st.sampled_from(["dup", "dup", "drop", "bytes", "bytes", "truncate", "bom",
                                   "crlf", "tab", "empty", "comment", "scalar", "second",
                                   "bomb", "deep", "self"]))
    at = draw(st.integers(0, max(len(lines) - 1, 0)))
    if action == "dup":
        lines.insert(at, lines[at])
        return b"\n".join(lines)
    if action == "drop":
        del lines[at]
        return b"\n".join(lines)
    if action == "bytes":
        offset = draw(st.integers(0, len(data)))
        return data[:offset] + draw(st.sampled_from(BAD_BYTES)) + data[offset:]
    if action == "truncate":
        return data[: draw(st.integers(0, len(data)))]
    if action == "bom":
        return b"\xef\xbb\xbf" + data
    if action == "crlf":
        return data.replace(b"\n", b"\r\n")
    if action == "tab":
        return b"\n".join(line.replace(b"  ", b"\t", 1) for line in lines)
    if action == "empty":
        return draw(st.sampled_from([b"", b"\n", b"   \n\t\n"]))
    if action == "comment":
        return b"# nothing here\n"
    if action == "scalar":
        return draw(st.sampled_from([b"42\n", b"- 1\n- 2\n", b"null\n", b"'text'\n", b"[]"]))
    if action == "second":
        return data + b"\n---\nname: again\n"
    if action == "bomb":
        laughs = [b'l0: &l0 ["x","x","x","x","x","x","x","x","x","x"]']
        for i in range(1, 9):
            laughs.append(f"l{i}: &l{i} [".encode() + b",".join([f"*l{i - 1}".encode()] * 10)
                          + b"]")
        return data + b"\n" + b"\n".join(laughs) + b"\n"
    if action == "deep":
        return data + b"\ndeep: " + b"[" * 1000 + b"]" * 1000 + b"\n"
    return data + b"\nloop: &loop [*loop]\n"


def _scenario_case(source: str, scenario: bytes, argv: tuple[str, ...] | None = None,
                   extra: tuple[tuple[str, bytes], ...] = ()) -> Case:
    return Case(source, argv or ("simulate", "s.yaml", "--out", "out"),
                (("s.yaml", scenario), *extra))


@lru_cache(maxsize=1)
def all_kinds() -> tuple[str, ...]:
    """Every ``kind:`` value the scenario schema knows."""
    from clustersim.scenario import Scenario

    kinds: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            kind = node.get("properties", {}).get("kind", {})
            kinds.update(str(v) for v in kind.get("enum", []))
            if "const" in kind:
                kinds.add(str(kind["const"]))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(Scenario.model_json_schema())
    return tuple(sorted(kinds))


@st.composite
def scenario_fields(draw: st.DrawFn) -> Case:
    name = draw(st.sampled_from([n for n, _ in shipped_scenarios()]))
    doc = draw(mutated_doc(scenario_doc(name), list(all_kinds())))
    command = draw(st.sampled_from(["simulate"] * 16 + ["compare"] * 2 + ["report"]
                                   + ["compare-report"]))
    argv = (command.split("-")[0].replace("report", "simulate"), "s.yaml", "--out", "out")
    if command.endswith("report"):
        argv += ("--report", "rep")
    return _scenario_case("scenario fields", dump_yaml(doc), argv)


@st.composite
def scenario_bytes(draw: st.DrawFn) -> Case:
    name, text = draw(st.sampled_from(list(shipped_scenarios())))
    if draw(st.integers(0, 19)) == 0:  # a folder where the file should be
        return Case("scenario bytes", ("simulate", "s.yaml", "--out", "out"),
                    (("s.yaml/", b""),))
    return _scenario_case("scenario bytes", draw(damaged_text(text.encode())))


TINY_SEARCH = {"seeds": 1, "min_requests": 20, "min_duration_s": 0, "simulate_top": 1,
               "max_probes": 4, "neighbours": False, "contenders": 1}
"""A plan's search kept to a few simulations (a full search of a shipped scenario takes
minutes, as it should)."""


@st.composite
def plan_sections(draw: st.DrawFn) -> Case:
    """A shipped scenario's ``plan:`` mutated (its search kept tiny), planned serially."""
    names = [n for n, _ in shipped_scenarios() if "plan" in scenario_doc(n)]
    doc = scenario_doc(draw(st.sampled_from(names)))
    plan = {k: v for k, v in doc["plan"].items() if k != "search"}
    plan["gpu_budget"] = min(plan.get("gpu_budget") or 4, 8)
    doc["plan"] = {**draw(mutated_doc(plan, [])), "search": TINY_SEARCH}
    argv = ("plan", "s.yaml", "--executor", "serial", "--no-report", "--out", "out")
    return _scenario_case("plan sections", dump_yaml(doc), argv)


# ------------------------------------------------------------ JSON schema
_NAME_HINTS: dict[str, Any] = {}


def _hints() -> dict[str, st.SearchStrategy[Any]]:
    """Valid, small values for the fields whose schema is free text or an unbounded size."""
    if _NAME_HINTS:
        return _NAME_HINTS
    from clustersim.catalog import gpu_ids, model_ids
    from clustersim.workload.traces import SHIPPED_TRACES

    small_models = [m for m in model_ids() if not any(
        big in m for big in ("70b", "72b", "66b", "176b", "32b", "8x7b", "deepseek"))]
    times = st.floats(0.0, 60.0)
    tokens = st.integers(1, 4096)
    _NAME_HINTS.update({
        "model": st.sampled_from(small_models),
        "gpu": st.sampled_from(gpu_ids()),
        "gpus": st.lists(st.sampled_from(gpu_ids()), min_size=1, max_size=2),
        "trace": st.sampled_from(list(SHIPPED_TRACES)),
        "node": st.sampled_from(["dgx-h100", "a100-8x", "rtx4090-pcie-box"]),
        "topology": st.sampled_from(["dgx-h100", "dgx-h100-x2", "a100-8x",
                                     "rtx4090-pcie-box", "a100-4node-25g"]),
        "name": st.sampled_from(["fuzz", "p0", "p1", "main"]),
        "nodes": st.lists(st.sampled_from(["node0", "node1"]), min_size=1, max_size=2),
        "id": st.sampled_from(["a", "b", "c", "d"]),
        "seed": st.integers(0, 2**63 - 1),
        "num_requests": st.integers(1, 30), "max_num_requests": st.integers(1, 30),
        "num_users": st.integers(1, 8), "instances": st.integers(1, 3),
        "count": st.integers(1, 3), "tensor_parallel_size": st.sampled_from([1, 1, 2, 4]),
        "data_parallel_size": st.sampled_from([1, 2]),
        "prompt_tokens": tokens, "output_tokens": st.integers(1, 256), "value": tokens,
        "low": st.integers(1, 64), "high": st.integers(64, 4096),
        "mean": st.floats(1.0, 4096.0), "cv": st.floats(0.1, 4.0),
        "weight": st.floats(0.01, 10.0),
        "max_model_len": st.integers(64, 32768),
        "max_num_batched_tokens": st.integers(16, 16384),
        "max_num_scheduled_tokens": st.integers(16, 16384),
        "max_num_seqs": st.integers(1, 512), "long_prefill_token_threshold": st.integers(0, 4096),
        "decode_reserve_tokens": st.integers(0, 64),
        "num_gpu_blocks_override": st.integers(2, 5000),
        "max_total_tokens": st.integers(2, 8192),
        "long_prompt_tokens": tokens, "long_output_tokens": tokens,
        "rate_per_s": st.floats(0.1, 50.0), "on_rate_per_s": st.floats(0.1, 50.0),
        "off_rate_per_s": st.floats(0.0, 10.0), "rate_multiplier": st.floats(0.1, 10.0),
        "target_rate_per_s": st.floats(0.1, 50.0),
        "arrival_s": times, "start_s": times, "duration_s": st.floats(1.0, 60.0),
        "on_s": st.floats(0.1, 30.0), "off_s": st.floats(0.1, 30.0),
        "window_start_s": st.floats(0.0, 600.0), "window_end_s": st.floats(600.0, 3000.0),
        "think_time_s": st.floats(0.0, 5.0), "period_s": st.floats(1.0, 100.0),
        "handshake_s": st.floats(0.0, 0.01), "proxy_latency_s": st.floats(0.0, 0.01),
        "poll_interval_s": st.floats(1e-4, 1e-2), "step_time_s": st.floats(1e-3, 0.1),
        "ttft_s": st.floats(0.05, 10.0), "tpot_s": st.floats(0.01, 1.0),
        "itl_s": st.floats(0.01, 1.0), "gpu_budget": st.integers(1, 16),
        "points": _rate_points(),
        "block_hashes": st.lists(st.integers(0, 2**62), max_size=4),
        "priority": st.integers(-5, 5),
    })
    return _NAME_HINTS


@st.composite
def _rate_points(draw: st.DrawFn) -> list[list[float]]:
    times = [0.0]
    for _ in range(draw(st.integers(0, 4))):
        times.append(times[-1] + draw(st.floats(0.5, 20.0)))
    return [[t, draw(st.floats(0.0, 20.0))] for t in times[:-1]] + [[times[-1], 5.0]]


@lru_cache(maxsize=1)
def scenario_schema() -> dict[str, Any]:
    from clustersim.scenario import Scenario

    return Scenario.model_json_schema()


def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = {**defs[node["$ref"].rsplit("/", 1)[-1]],
                **{k: v for k, v in node.items() if k != "$ref"}}
    return node


def from_schema(draw: st.DrawFn, node: dict[str, Any], defs: dict[str, Any], name: str,
                broken: float, depth: int = 0) -> Any:
    """A value for one JSON-schema node; with probability ``broken`` at each node, one that
    breaks it (an odd value, a missing required or an unknown field)."""
    node = _resolve(node, defs)
    if broken and draw(st.floats(0, 1)) < broken:
        return draw(odd_values())
    hints = _hints()
    if name in hints and not broken and "properties" not in node:
        return draw(hints[name])
    if name in hints and broken and draw(st.booleans()) and "properties" not in node:
        return draw(hints[name])
    for key in ("anyOf", "oneOf"):
        if key in node:
            options = node[key]
            non_null = [o for o in options if _resolve(o, defs).get("type") != "null"]
            if non_null and (len(non_null) == len(options) or draw(st.integers(0, 3))):
                options = non_null
            return from_schema(draw, draw(st.sampled_from(options)), defs, name, broken,
                               depth + 1)
    if "allOf" in node:
        return from_schema(draw, node["allOf"][0], defs, name, broken, depth + 1)
    if "const" in node:
        return node["const"]
    if "enum" in node:
        return draw(st.sampled_from(node["enum"]))
    kind = node.get("type")
    if kind == "object" or "properties" in node:
        return _object(draw, node, defs, broken, depth)
    if kind == "array":
        return _array(draw, node, defs, name, broken, depth)
    if kind == "integer":
        low = node.get("minimum", node.get("exclusiveMinimum", -1) + 1)
        high = min(node.get("maximum", low + 16), low + 16)
        return draw(st.integers(int(low), int(max(low, high))))
    if kind == "number":
        low = float(node.get("minimum", node.get("exclusiveMinimum", 0.0)))
        top = node.get("maximum", node.get("exclusiveMaximum", low + 10.0))
        high = float(min(top, low + 10.0))
        return draw(st.floats(low, max(low, high), exclude_min="exclusiveMinimum" in node,
                              exclude_max="exclusiveMaximum" in node and high == top))
    if kind == "boolean":
        return draw(st.booleans())
    if kind == "null":
        return None
    if kind == "string":
        return draw(st.sampled_from(["x", "p0", "fuzz"]))
    return node.get("default")


def _object(draw: st.DrawFn, node: dict[str, Any], defs: dict[str, Any], broken: float,
            depth: int) -> dict[str, Any]:
    props = node.get("properties", {})
    required = set(node.get("required", []))
    result: dict[str, Any] = {}
    for key, sub in props.items():
        wanted = key in required or key == "kind" or (depth < 4 and draw(st.integers(0, 2)) == 0)
        if key in required and broken and draw(st.floats(0, 1)) < broken:
            wanted = False
        if wanted:
            result[key] = from_schema(draw, sub, defs, key, broken, depth + 1)
    extra = node.get("additionalProperties")
    if isinstance(extra, dict) and not props:  # a mapping such as plan.nodes
        for i in range(draw(st.integers(0, 2))):
            key = draw(_hints()["gpu"]) if i == 0 else f"k{i}"
            result[key] = from_schema(draw, extra, defs, "value", broken, depth + 1)
    if broken and draw(st.floats(0, 1)) < broken:
        result[draw(st.sampled_from(["extra", "unknown_field"]))] = 1
    return result


def _array(draw: st.DrawFn, node: dict[str, Any], defs: dict[str, Any], name: str,
           broken: float, depth: int) -> list[Any]:
    if "prefixItems" in node:
        return [from_schema(draw, sub, defs, name, broken, depth + 1)
                for sub in node["prefixItems"]]
    low = node.get("minItems", 0)
    high = min(node.get("maxItems", low + 3), low + 3)
    items = node.get("items", {})
    return [from_schema(draw, items, defs, name, broken, depth + 1)
            for _ in range(draw(st.integers(low, max(low, high))))]


TOPOLOGY_GPUS = {"dgx-h100": "h100-sxm", "dgx-h100-x2": "h100-sxm", "a100-8x": "a100-80gb-sxm",
                 "a100-4node-25g": "a100-80gb-sxm", "rtx4090-pcie-box": "rtx4090"}
_ROLES = {"colocated": ["colocated"], "disaggregated": ["prefill", "decode"],
          "three_pool": ["prefill", "decode", "colocated"]}


def _valid_repairs(draw: st.DrawFn, doc: dict[str, Any]) -> dict[str, Any]:
    """The cross-field rules a JSON schema cannot say, applied to a drawn scenario so that
    most valid-space draws run: one length source, unique names, roles that fit the layout,
    the GPU of the topology, a count or a duration."""
    doc.pop("plan", None)  # simulate ignores it; it only adds cross-field errors
    workload = doc.get("workload", {})
    kind = workload.get("kind")
    if workload.get("classes", 0) is None:
        del workload["classes"]
    if doc.get("model") != "qwen3-30b-a3b":
        doc.pop("enable_expert_parallel", None)
        doc.pop("data_parallel_size", None)
    if isinstance(doc.get("slo"), dict):
        doc["slo"].setdefault("ttft_s", 5.0)
    if kind == "replay":
        if workload.get("trace") == "sharegpt-lengths":
            workload["trace"] = "azure-conv-2023"
        workload["max_num_requests"] = min(workload.get("max_num_requests", 30), 30)
    if kind == "poisson" and "classes" not in workload:
        workload.setdefault("prompt_tokens", draw(st.integers(1, 2048)))
        workload.setdefault("output_tokens", draw(st.integers(1, 128)))
    if kind == "poisson" and "classes" in workload:
        workload.pop("prompt_tokens", None)
        workload.pop("output_tokens", None)
    if kind == "explicit":
        for i, request in enumerate(workload.get("requests", [])):
            request["id"] = f"r{i}"
    if kind == "synthetic":
        if workload.get("arrivals", {}).get("kind") == "closed_loop":
            workload.pop("duration_s", None)
            workload.setdefault("num_requests", draw(st.integers(1, 30)))
        elif "num_requests" not in workload:
            workload["num_requests"] = draw(st.integers(1, 30))
    for holder in (workload, workload.get("lengths", {})):
        if holder.get("format") in ("csv", "jsonl"):
            holder["format"] = "auto"
    layout = doc.get("layout")
    engines = [doc.get("engine")] + [p.get("engine") for p in (layout or {}).get("pools", [])]
    for engine in engines:
        if isinstance(engine, dict):
            budget = engine.get("max_num_batched_tokens")
            if budget is not None and engine.get("max_num_scheduled_tokens", 0) > budget:
                engine["max_num_scheduled_tokens"] = budget
            if budget is not None and engine.get("max_num_seqs", 0) > budget:
                engine["max_num_seqs"] = budget
    if isinstance(layout, dict):
        roles = _ROLES[layout.get("kind", "colocated")]
        pools = layout.setdefault("pools", [{}])
        while len(pools) < len(roles):
            pools.append({})
        if layout.get("kind") == "three_pool":
            del pools[3:]
        for i, pool in enumerate(pools):
            pool["name"] = f"p{i}"
            pool["role"] = roles[i % len(roles)]
            pool.pop("gpu", None)
            pool.pop("nodes", None)
            if pool["role"] != "colocated" or doc.get("model") != "qwen3-30b-a3b":
                pool.pop("data_parallel_size", None)
                pool.pop("enable_expert_parallel", None)
        if layout.get("kind", "colocated") != "colocated" and "topology" not in doc:
            doc["topology"] = "dgx-h100-x2"
    topology = doc.get("topology")
    if isinstance(topology, str):
        doc["gpu"] = TOPOLOGY_GPUS.get(topology, doc.get("gpu"))
    elif isinstance(topology, dict):
        doc["gpu"] = TOPOLOGY_GPUS.get(topology.get("node"), doc.get("gpu"))
    elif isinstance(topology, list):
        doc["topology"] = topology[:1]
        doc["gpu"] = TOPOLOGY_GPUS.get(topology[0].get("node"), doc.get("gpu"))
    return doc


@st.composite
def schema_scenario(draw: st.DrawFn, broken: float) -> Case:
    schema = scenario_schema()
    doc = from_schema(draw, schema, schema.get("$defs", {}), "scenario", broken)
    if not broken and isinstance(doc, dict):
        doc = _valid_repairs(draw, doc)
    source = "schema, valid space" if not broken else "schema, broken"
    return _scenario_case(source, dump_yaml(doc))


# ------------------------------------------------------------------ traces
def _trace_rows(draw: st.DrawFn, fmt_name: str, n: int) -> tuple[list[str], list[list[Any]]]:
    """Header and ``n`` valid rows of one format (generic csv/jsonl: columns a, p, o)."""
    from clustersim.workload.traces import FORMATS

    fmt = FORMATS[fmt_name]
    arrival = fmt.arrival or ("a" if fmt_name in ("csv", "jsonl") else None)
    columns = [c for c in (arrival, fmt.prompt_tokens or "p", fmt.output_tokens or "o") if c]
    if fmt.hash_ids:
        columns.append(fmt.hash_ids)
    if fmt.request_id:
        columns.append(fmt.request_id)
    rows = []
    clock = 0.0
    for i in range(n):
        clock += draw(st.floats(0.0, 5.0))
        prompt, output = draw(st.integers(1, 3000)), draw(st.integers(1, 300))
        row: list[Any] = []
        for column in columns:
            if column == arrival:
                unit = fmt.time_unit
                if unit == "datetime":
                    row.append(f"2023-11-16 18:{int(clock) // 60 % 60:02d}:"
                               f"{clock % 60:09.6f}")
                else:
                    scale = {"s": 1, "ms": 1e3, "us": 1e6, "ns": 1e9}[unit]
                    row.append(round(clock * scale, 3))
            elif column == (fmt.prompt_tokens or "p"):
                row.append(prompt)
            elif column == (fmt.output_tokens or "o"):
                row.append(output)
            elif column == fmt.hash_ids:
                row.append(list(range(i * 10, i * 10 + -(-prompt // fmt.hash_block_tokens))))
            else:
                row.append(f"req-{i}")
        rows.append(row)
    return columns, rows


ODD_CELLS = ["1e30", "-1", "0", "nan", "inf", "-inf", "", " ", "1.5", "0x10", "\uff11\uff12",
             "9" * 30, "1e308", "-0", "+5", "5 ", "null", "true", "[1]", '"5"',
             "9223372036854775808", "18446744073709551616", "1e-9", "2023-13-45", "yesterday",
             "1e+400", "100000001"]
ODD_JSON = [10**30, 1e30, -1, 0, 1.5, True, None, [1], {"a": 1}, "12", "", 2**64, 1e308,
            "x" * 100, -(10**20)]


def _csv_text(columns: list[str], rows: list[list[Any]]) -> bytes:
    def cell(value: Any) -> str:
        text = json.dumps(value) if isinstance(value, list) else str(value)
        return f'"{text}"' if "," in text else text

    lines = [",".join(columns)] + [",".join(cell(v) for v in row) for row in rows]
    return ("\n".join(lines) + "\n").encode("utf-8", "surrogatepass")


def _jsonl_text(columns: list[str], rows: list[list[Any]]) -> bytes:
    return ("\n".join(json.dumps(dict(zip(columns, row, strict=False)), allow_nan=True)
                      for row in rows) + "\n").encode()


@st.composite
def trace_file(draw: st.DrawFn) -> tuple[str, str, bytes, list[str]]:
    """(format, file name, bytes, columns) of a trace file, maybe malformed and gzipped."""
    from clustersim.workload.traces import FORMATS

    fmt_name = draw(st.sampled_from(list(FORMATS)))
    kind = FORMATS[fmt_name].file_kind
    columns, rows = _trace_rows(draw, fmt_name, draw(st.integers(1, 25)))
    action = draw(st.sampled_from(["none", "cell", "cell", "cell", "drop", "extra", "ragged",
                                   "header", "bytes", "truncate", "blank", "crlf", "bom",
                                   "line", "dupkey", "deep", "many"]))
    if action == "cell":
        row, col = draw(st.integers(0, len(rows) - 1)), draw(st.integers(0, len(columns) - 1))
        rows[row][col] = draw(st.sampled_from(ODD_CELLS if kind == "csv" else ODD_JSON
                                              + ODD_CELLS))
    elif action == "drop":
        col = draw(st.integers(0, len(columns) - 1))
        columns = columns[:col] + columns[col + 1:]
        rows = [r[:col] + r[col + 1:] for r in rows]
    elif action == "extra":
        columns = [*columns, columns[0]]
        rows = [[*r, r[0]] for r in rows]
    elif action == "ragged":
        rows[draw(st.integers(0, len(rows) - 1))].append(7)
    elif action == "header":
        columns = [c.upper() for c in columns]
    elif action == "many":
        rows = rows * draw(st.sampled_from([10, 400]))
    data = _csv_text(columns, rows) if kind == "csv" else _jsonl_text(columns, rows)
    if action == "ragged" and kind == "jsonl":
        data += b"[1, 2]\n"
    if action == "bytes":
        offset = draw(st.integers(0, len(data)))
        data = data[:offset] + draw(st.sampled_from(BAD_BYTES)) + data[offset:]
    elif action == "truncate":
        data = data[: draw(st.integers(0, len(data)))]
    elif action == "blank":
        data = b"\n\n" + data.replace(b"\n", b"\n\n")
    elif action == "crlf":
        data = data.replace(b"\n", b"\r\n")
    elif action == "bom":
        data = b"\xef\xbb\xbf" + data
    elif action == "line":
        data += draw(st.sampled_from([b"{oops\n", b"not json\n", b"42\n", b"NaN\n",
                                      b'{"x": Infinity}\n', b",,,\n", b'"\n']))
    elif action == "dupkey" and kind == "jsonl":
        data = data.replace(b"{", b'{"dup": 1, "dup": 2, ', 1)
    elif action == "deep":
        data += b"[" * 5000 + b"]" * 5000 + b"\n"
    name = f"t.{kind}"
    if draw(st.integers(0, 4)) == 0:
        data = gzip.compress(data, mtime=0)
        name += ".gz"
        damage = draw(st.sampled_from(["none", "none", "truncate", "flip"]))
        if damage == "truncate":
            data = data[: draw(st.integers(0, len(data) - 1))]
        elif damage == "flip":
            at = draw(st.integers(0, len(data) - 1))
            data = data[:at] + bytes([data[at] ^ 0x5A]) + data[at + 1:]
    return fmt_name, name, data, columns


@st.composite
def trace_cases(draw: st.DrawFn) -> Case:
    fmt_name, name, data, columns = draw(trace_file())
    generic = fmt_name in ("csv", "jsonl")
    mapping = {"arrival": "a", "prompt_tokens": "p", "output_tokens": "o"}
    how = draw(st.sampled_from(["stats", "stats", "replay", "empirical"]))
    if how == "stats":
        argv = ["trace", "stats", name, "--json"]
        fmt = draw(st.sampled_from(["auto", fmt_name, fmt_name, "azure", "bogus"]))
        if fmt != "auto" or generic:
            argv += ["--format", fmt_name if generic else fmt]
        if generic or draw(st.integers(0, 5)) == 0:
            argv += ["--columns", ",".join(f"{k}={v}" for k, v in mapping.items())]
        return Case("traces", tuple(argv), ((name, data),))
    source: dict[str, Any] = {"trace": name}
    if generic or draw(st.booleans()):
        source["format"] = fmt_name
    if generic:
        source["columns"] = mapping
    doc = copy.deepcopy(TINY)
    if how == "replay":
        doc["workload"] = {"kind": "replay", **source, "max_num_requests": 30}
    else:
        doc["workload"] = {"kind": "synthetic", "arrivals": {"kind": "poisson",
                                                             "rate_per_s": 5.0},
                           "lengths": {"kind": "empirical", **source}, "num_requests": 20}
    return _scenario_case("traces", dump_yaml(doc), extra=((name, data),))


# ------------------------------------------------------------- other files
@lru_cache(maxsize=1)
def shipped_topologies() -> tuple[tuple[str, str], ...]:
    folder = ROOT / "clustersim" / "cluster" / "topologies"
    return tuple((p.stem, p.read_text(encoding="utf-8")) for p in sorted(folder.glob("*.yaml")))


@st.composite
def topology_cases(draw: st.DrawFn) -> Case:
    name, text = draw(st.sampled_from(list(shipped_topologies())))
    doc = yaml.safe_load(text)
    if draw(st.integers(0, 2)):
        data = dump_yaml(draw(mutated_doc(doc, ["nvswitch", "pcie", "nvlink_bridge_pairs"])))
    else:
        data = draw(damaged_text(text.encode()))
    gpu = doc["nodes"][0]["gpus"]["type"]
    scenario = copy.deepcopy(TINY)
    scenario["gpu"] = gpu
    if len(doc["nodes"]) == 1 and draw(st.booleans()):
        scenario["topology"] = {"node": "topo.yaml", "count": draw(st.integers(1, 3))}
    else:
        scenario["topology"] = "topo.yaml"
    return _scenario_case("topologies", dump_yaml(scenario), extra=(("topo.yaml", data),))


@lru_cache(maxsize=1)
def base_profile() -> str:
    from clustersim.catalog import load_gpu, profile_entry

    entry = profile_entry(load_gpu("h100-sxm"))
    return yaml.safe_dump({"schema_version": 1, "profiles": {"h100-sxm": entry}},
                          sort_keys=False)


@st.composite
def profile_cases(draw: st.DrawFn) -> Case:
    text = base_profile()
    if draw(st.integers(0, 2)):
        data = dump_yaml(draw(mutated_doc(yaml.safe_load(text), [])))
    else:
        data = draw(damaged_text(text.encode()))
    scenario = copy.deepcopy(TINY)
    scenario["gpu"] = draw(st.sampled_from(["h100-sxm@prof.yaml", "h100-sxm@./prof.yaml"]))
    return _scenario_case("GPU profiles", dump_yaml(scenario), extra=(("prof.yaml", data),))


HF_CONFIG: dict[str, Any] = {
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 3584,
    "intermediate_size": 18944, "max_position_embeddings": 32768, "num_attention_heads": 28,
    "num_hidden_layers": 28, "num_key_value_heads": 4, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "vocab_size": 152064,
}


@st.composite
def hf_config_cases(draw: st.DrawFn) -> Case:
    config = copy.deepcopy(HF_CONFIG)
    if draw(st.booleans()):
        config.update({"num_experts": 8, "num_experts_per_tok": 2,
                       "moe_intermediate_size": 1408})
    if draw(st.integers(0, 2)):
        doc = draw(mutated_doc(config, []))
        text = _expand_deep(json.dumps(doc, allow_nan=True, default=repr), quote='"')
        data = text.encode("utf-8", "surrogatepass")
    else:
        data = draw(damaged_text(json.dumps(config, indent=1).encode()))
    scenario = copy.deepcopy(TINY)
    scenario["model"] = draw(st.sampled_from(["cfg/config.json", "cfg"]))
    return _scenario_case("HF configs", dump_yaml(scenario),
                          extra=(("cfg/", b""), ("cfg/config.json", data)))


@st.composite
def records_cases(draw: st.DrawFn) -> Case:
    records = []
    clock = 0.0
    for _ in range(draw(st.integers(2, 12))):
        clock += draw(st.floats(0.0, 2.0))
        first = clock + draw(st.floats(0.001, 0.5))
        records.append({"input_toks": draw(st.integers(1, 4000)),
                        "output_toks": draw(st.integers(1, 200)), "queued_ts": clock,
                        "first_token_ts": first,
                        "last_token_ts": first + draw(st.floats(0.0, 5.0))})
    if draw(st.integers(0, 2)):
        doc = draw(mutated_doc({"records": records}, [])).get("records", [])
        lines = doc if isinstance(doc, list) else [doc]
        data = "\n".join(json.dumps(r, allow_nan=True, default=repr) for r in lines).encode(
            "utf-8", "surrogatepass")
    else:
        data = draw(damaged_text("\n".join(json.dumps(r) for r in records).encode()))
    argv = ("calibrate", "--gpu", "h100-sxm", "--model", "qwen2.5-7b-instruct",
            "--from-requests", "r.jsonl", "--out", "p.yaml")
    return Case("request records", argv, (("r.jsonl", data),))


# -------------------------------------------------------------- command lines
@lru_cache(maxsize=1)
def command_options() -> tuple[tuple[tuple[str, ...], tuple[tuple[str, str, bool], ...]], ...]:
    """(command path, ((option, kind, is_flag), ...)) for every command of the CLI."""
    import typer.main

    from clustersim.cli import app

    root = typer.main.get_command(app)
    found = []

    def walk(command: Any, path: tuple[str, ...]) -> None:
        # duck-typed: Typer may bring its own copy of Click's classes
        if hasattr(command, "commands"):
            for name, sub in command.commands.items():
                walk(sub, (*path, name))
            return
        options = []
        for param in command.params:
            if param.param_type_name == "option":
                described = getattr(param, "type_descriptor", None)
                annotation = getattr(described, "annotation", None)
                kind = (getattr(annotation, "__name__", None)
                        or type(getattr(param, "type", None)).__name__)
                options += [(opt, f"{kind}:{param.name}", param.is_flag) for opt in param.opts]
        found.append((path, tuple(options)))

    walk(root, ())
    return tuple(found)


def _option_value(draw: st.DrawFn, kind: str) -> str:
    type_name, _, name = kind.partition(":")
    if name in ("out", "report", "write_docs"):
        return draw(st.sampled_from(["out", "out/p.yaml", "rep", "p.yaml", ".", "", "s.yaml",
                                     *UNSAFE_OUTPUTS]))
    if name in ("gpu",):
        return draw(st.sampled_from(["h100-sxm", "rtx4090", "h100-sxm@default", "nope", ""]))
    if name in ("model",):
        return draw(st.sampled_from(["qwen2.5-7b-instruct", "qwen3-30b-a3b", "llama-3.1-8b",
                                     "nope", "/dev/zero", "."]))
    if name in ("prefill",):
        return draw(st.sampled_from(["2048=0.12", "128=0.01", "x=1", "0=1", "1=inf", "1=nan",
                                     "99999999999=1", "=", ""]))
    if name in ("decode",):
        return draw(st.sampled_from(["1@1024=0.008", "64@1024=0.014", "3=1", "1@1=1e308",
                                     "0@0=0", "1@99999999999=1", "@=", ""]))
    if name == "from_requests":
        return draw(st.sampled_from(["r.jsonl", "nope.jsonl", "/dev/null", "."]))
    if name == "executor":
        return draw(st.sampled_from(["serial", "process", "ray", "nope", ""]))
    if name == "columns":
        return draw(st.sampled_from(["arrival=a,prompt_tokens=p,output_tokens=o", "x", "a=",
                                     "prompt_tokens=ContextTokens", ""]))
    if name in ("format", "time_unit"):
        return draw(st.sampled_from(["auto", "azure", "s", "ms", "datetime", "bogus", ""]))
    if type_name in ("int", "IntRange", "INT", "IntParamType"):
        return str(draw(st.sampled_from([0, 1, 2, 8, -1, 2**31, 10**22, 1024, 131071])))
    if type_name in ("float", "FloatRange", "FLOAT", "FloatParamType"):
        return draw(st.sampled_from(["0", "1.5", "-1", "inf", "nan", "1e308", "abc", "10"]))
    return draw(st.sampled_from(["x", "", "1", "h100-sxm", "s.yaml", "--", "-h"]))


@st.composite
def cli_cases(draw: st.DrawFn) -> Case:
    commands = [c for c in command_options() if c[0][0] != "plan" or draw(st.booleans())]
    path, options = draw(st.sampled_from(commands))
    argv: list[str] = list(path)
    if draw(st.integers(0, 9)) == 0:
        argv = [draw(st.sampled_from(["nope", "simulat", "", "-", "--", "help"])), *argv[1:]]
    if path[0] in ("simulate", "compare", "plan"):
        argv.append(draw(st.sampled_from(["s.yaml", "s.yaml", "nope.yaml", "/dev/null", ".",
                                          "t.csv"])))
    elif path == ("trace", "stats"):
        argv.append(draw(st.sampled_from(["t.csv", "azure-conv-2023", "sharegpt-lengths",
                                          "nope.csv", "/dev/null", "", "."])))
    for _ in range(draw(st.integers(0, 4))):
        if options and draw(st.integers(0, 5)):
            opt, kind, is_flag = draw(st.sampled_from(list(options)))
            argv.append(opt)
            if not is_flag:
                argv.append(_option_value(draw, kind))
        else:
            argv.append(draw(st.sampled_from(["--bogus", "-x", "--", "-h", "--help",
                                              "--version", "extra", "-", "--out"])))
    if path[0] == "plan":
        argv += ["--executor", "serial", "--no-report"]
    scenario = draw(st.sampled_from(["quickstart", "pd_azure_conv_dgx", "three_class_mix"]))
    doc = scenario_doc(scenario)
    if path[0] == "plan":
        doc = copy.deepcopy(TINY)
        doc["slo"] = {"ttft_s": 1.0}
        doc["plan"] = {"gpu_budget": 1, "layouts": ["colocated"],
                       "search": {"seeds": 1, "min_requests": 5, "min_duration_s": 0,
                                  "simulate_top": 1, "max_probes": 4, "neighbours": False}}
    files = (("s.yaml", dump_yaml(doc)), ("t.csv", b"arrived_at,num_prefill_tokens,"
                                          b"num_decode_tokens\n0,5,3\n1.5,50,30\n"),
             ("r.jsonl", b'{"input_toks": 100, "output_toks": 11, "queued_ts": 0.0, '
                         b'"first_token_ts": 0.05, "last_token_ts": 1.05}\n'
                         b'{"input_toks": 100, "output_toks": 11, "queued_ts": 2.0, '
                         b'"first_token_ts": 2.02, "last_token_ts": 3.02}\n'))
    return Case("command lines", tuple(argv), files)


# ------------------------------------------------------------------- mix
def _file_cases() -> st.SearchStrategy[Case]:
    from tests.fuzz.files import file_cases  # (that module builds on this one)

    return file_cases()


SOURCES: list[tuple[str, int, st.SearchStrategy[Case]]] = [
    ("scenario fields", 16, scenario_fields()),
    ("plan sections", 4, plan_sections()),
    ("scenario bytes", 10, scenario_bytes()),
    ("schema, broken", 10, schema_scenario(0.04)),
    ("schema, valid space", 10, schema_scenario(0.0)),
    ("traces", 16, trace_cases()),
    ("topologies", 5, topology_cases()),
    ("GPU profiles", 4, profile_cases()),
    ("HF configs", 4, hf_config_cases()),
    ("request records", 3, records_cases()),
    ("command lines", 10, cli_cases()),
    ("files", 8, st.deferred(_file_cases)),
]
"""(source, weight in 100, strategy): how the campaign's cases are drawn."""


@st.composite
def cases(draw: st.DrawFn) -> Case:
    # sampled_from draws its elements evenly (integers() favours small values)
    strategy = draw(st.sampled_from([s for _, weight, s in SOURCES for _ in range(weight)]))
    return draw(strategy)
