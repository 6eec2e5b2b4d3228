"""The reference pages of ``docs/`` that are generated from the code, never edited by hand:
``scenario-reference.md`` from the scenario schema's models and field descriptions, and
``commands.md`` from the command line's help.

``clustersim docs --write`` writes them; ``tests/test_reference_docs.py`` fails when a committed
page differs from what the code generates now. Both come out the same on every machine: the
help is rendered by Click's plain formatter at a fixed width, without Rich's boxes or colour,
and the schema is read from the models alone.
"""

from __future__ import annotations

import inspect
import re
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

REGENERATE = "clustersim docs --write"
"""The command that rewrites every generated page (from a checkout's root)."""

HELP_WIDTH = 100
"""Columns of the rendered help: fixed, so the page does not depend on the terminal."""


# ------------------------------------------------------------------ the schema
@dataclass
class _Section:
    """One model of the schema: a mapping the file may hold, and where it is used."""

    model: type[BaseModel]
    depth: int
    users: dict[type[BaseModel], list[str]] = field(default_factory=dict)
    """The models whose fields hold this one: ``{parent: [field names]}``."""


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The models a field's value may be (inside unions, lists and mappings), in order."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    found: list[type[BaseModel]] = []
    for arg in get_args(annotation):
        found += [m for m in _models_in(arg) if m not in found]
    return found


def _sections(root: type[BaseModel]) -> list[_Section]:
    """Every model reachable from ``root``, depth first in field order (a model's sections
    follow it), each with the fields that hold it."""
    sections: dict[type[BaseModel], _Section] = {}

    def visit(model: type[BaseModel], depth: int) -> None:
        sections[model] = _Section(model, depth)
        for name, info in model.model_fields.items():
            for child in _models_in(info.annotation):
                if child not in sections:
                    visit(child, depth + 1)
                sections[child].users.setdefault(model, []).append(name)

    visit(root, 0)
    return list(sections.values())


def _anchor(title: str) -> str:
    """The anchor GitHub gives a heading."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def _link(model: type[BaseModel]) -> str:
    return f"[{model.__name__}](#{_anchor(model.__name__)})"


def _kind(model: type[BaseModel]) -> str | None:
    """The value of a model's ``kind:`` field when it is one fixed value (a union member)."""
    info = model.model_fields.get("kind")
    if info is None or get_origin(info.annotation) is not Literal:
        return None
    values = get_args(info.annotation)
    return str(values[0]) if len(values) == 1 else None


_PLAIN_TYPES = {int: "integer", float: "number", str: "text", bool: "true/false",
                type(None): "null"}


def _type(annotation: Any) -> str:
    """A type in the words of a YAML file: ``integer``, ``list of text``, a link to a model."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return _type(args[0])
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return _link(annotation)
    if annotation in _PLAIN_TYPES:
        return _PLAIN_TYPES[annotation]
    if origin is Literal:
        values = [f"`{_yaml(value)}`" for value in args]
        return values[0] if len(values) == 1 else "one of " + ", ".join(values)
    if origin is Union or origin is types.UnionType:
        members = _models_in(annotation)
        kinds = [_kind(m) for m in members]
        if members and len(members) == len(args) and all(kinds):
            return "by `kind:` " + ", ".join(f"[`{kind}`](#{_anchor(m.__name__)})"
                                             for kind, m in zip(kinds, members, strict=True))
        shown: list[str] = []
        for arg in args:
            if (text := _type(arg)) not in shown:
                shown.append(text)
        return " or ".join(shown)
    if origin in (list, set, frozenset) or (origin is tuple and args[-1:] == (Ellipsis,)):
        return f"list of {_type(args[0])}"
    if origin is tuple:
        return "[" + ", ".join(_type(arg) for arg in args) + "]"
    if origin is dict:
        return f"mapping of {_type(args[0])} to {_type(args[1])}"
    return getattr(annotation, "__name__", str(annotation))


def _without_none(annotation: Any) -> Any:
    """``X | None`` -> ``X``: for a field whose default is null, the table says so there."""
    if get_origin(annotation) is Union or get_origin(annotation) is types.UnionType:
        rest = [arg for arg in get_args(annotation) if arg is not type(None)]
        if len(rest) == 1:
            return rest[0]
    return annotation


def _yaml(value: Any) -> str:
    """A value as a YAML file writes it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, BaseModel):
        return _yaml(value.model_dump(exclude_defaults=True) | (
            {"kind": value.kind} if _kind(type(value)) else {}))  # type: ignore[attr-defined]
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_yaml(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_yaml(v)}" for k, v in value.items()) + "}"
    return str(value)


def _default(info: FieldInfo) -> str:
    if info.default is PydanticUndefined and info.default_factory is None:
        return "required"
    value = info.get_default(call_default_factory=True)
    if isinstance(value, BaseModel) and not _yaml(value).strip("{}"):
        return "its fields' defaults"
    return f"`{_yaml(value)}`"


def _number(value: float) -> str:
    if isinstance(value, int) or (float(value).is_integer() and abs(value) < 1e15):
        return f"{int(value):,}"
    return f"{value:g}"


def _limits(schema: dict[str, Any], what: str = "") -> list[str]:
    """The bounds a field's JSON schema carries, in words: ``> 0``, ``<= 72``, ``1 to 64
    items``, ``each item >= 1``. Where a lower bound is given twice (a positive number that
    must also reach a minimum), the tighter one is shown."""
    out: list[str] = []
    low, low_open = schema.get("minimum"), schema.get("exclusiveMinimum")
    if low_open is not None and (low is None or low <= low_open):
        out.append(f"{what}> {_number(low_open)}")
    elif low is not None:
        out.append(f"{what}>= {_number(low)}")
    high, high_open = schema.get("maximum"), schema.get("exclusiveMaximum")
    if high_open is not None and (high is None or high >= high_open):
        out.append(f"{what}< {_number(high_open)}")
    elif high is not None:
        out.append(f"{what}<= {_number(high)}")
    if "prefixItems" not in schema:  # a fixed tuple's length is in its type
        out += [what + words for words in _counts(schema, "minItems", "maxItems", "item")]
    out += [what + words for words in _counts(schema, "minLength", "maxLength", "character")]
    if "pattern" in schema:
        out.append(f"{what}matches `{schema['pattern']}`")
    if isinstance(schema.get("items"), dict):
        out += _limits(schema["items"], "each item ")
    if isinstance(schema.get("additionalProperties"), dict):
        out += _limits(schema["additionalProperties"], "each value ")
    for branch in schema.get("anyOf", []):
        out += [limit for limit in _limits(branch, what) if limit not in out]
    return out


def _counts(schema: dict[str, Any], low_key: str, high_key: str, unit: str) -> list[str]:
    """A length's bounds in words: ``1 to 64 items``, ``not empty``, ``at most 100
    characters``."""
    low, high = schema.get(low_key), schema.get(high_key)
    if low is not None and high is not None:
        return [f"{_number(low)} to {_number(high)} {unit}s"]
    if low == 1:
        return ["not empty"]
    if low is not None:
        return [f"at least {_number(low)} {unit}s"]
    if high is not None:
        return [f"at most {_number(high)} {unit}s"]
    return []


def _cell(text: str) -> str:
    """Text for one Markdown table cell: one line, its pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def _prose(docstring: str | None) -> str:
    """A model's docstring as Markdown: reStructuredText's ``literals`` and roles as code."""
    if not docstring:
        return ""
    text = inspect.cleandoc(docstring)
    text = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", text)
    return text.replace("``", "`")


def _describe(info: FieldInfo, name: str, model: type[BaseModel]) -> str:
    if info.description:
        return _prose(info.description)
    if name == "kind" and _kind(model):
        return "Chooses this mapping where a field takes one of several kinds."
    return ""


def _section_lines(section: _Section) -> list[str]:
    model = section.model
    lines = [f"## {model.__name__}", ""]
    used = "; ".join(f"{_link(parent)} ({', '.join(f'`{n}`' for n in names)})"
                     for parent, names in section.users.items())
    kind = _kind(model)
    if kind is not None:
        lines += [f"`kind: {kind}`, in {used}.", ""]
    elif used:
        lines += [f"In {used}.", ""]
    if prose := _prose(model.__doc__):
        lines += [prose, ""]
    schema = model.model_json_schema()["properties"]
    lines += ["| field | type | default | limits | description |",
              "|---|---|---|---|---|"]
    for name, info in model.model_fields.items():
        key = info.alias or name
        annotation = info.annotation
        if info.default is None:
            annotation = _without_none(annotation)
        cells = (f"`{key}`", _type(annotation), _default(info),
                 ", ".join(_limits(schema.get(key, {}))), _describe(info, name, model))
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return [*lines, ""]


def _contents(sections: list[_Section]) -> list[str]:
    return [f"{'  ' * s.depth}- {_link(s.model)}"
            + (f" (`kind: {kind}`)" if (kind := _kind(s.model)) else "") for s in sections]


def scenario_page() -> str:
    """``docs/scenario-reference.md``: every mapping of a scenario file and of a topology
    file, each field with its type, default, limits and description."""
    from clustersim.catalog import gpu_ids, model_ids
    from clustersim.cluster.topology import shipped_topologies
    from clustersim.cluster.topology_spec import TopologySpec
    from clustersim.scenario import Scenario
    from clustersim.workload.traces import SHIPPED_TRACES

    scenario, topology = _sections(Scenario), _sections(TopologySpec)
    lines = [
        "# Scenario reference",
        "",
        f"<!-- Generated by `{REGENERATE}` from the schema (clustersim/scenario/ and the "
        "models it nests): edit the field descriptions there, not this page. -->",
        "",
        "Every field of a scenario file, and of a topology file (a scenario's `topology:` may "
        "name one), generated from the models that validate them. The guide, with worked "
        "examples, is [scenarios.md](scenarios.md); the `plan:` section is explained in "
        "[planning.md](planning.md).",
        "",
        "Every mapping is strict: a field it does not list is an error, and so is a value "
        "outside its type or limits (see [bad-input.md](bad-input.md)). A field whose default "
        "is `null` may be left out; its description says what that means. A field whose type "
        "reads \"by `kind:`\" takes one of several mappings, chosen by their `kind:` field. "
        "Limits are inclusive (`>=`, `<=`) or strict (`>`, `<`).",
        "",
        "## Contents",
        "",
        "A scenario file:",
        "",
        *_contents(scenario),
        "",
        "A topology file:",
        "",
        *_contents(topology),
        "- [Catalog ids and shipped names](#catalog-ids-and-shipped-names)",
        "",
    ]
    for section in scenario + topology:
        lines += _section_lines(section)
    lines += [
        "## Catalog ids and shipped names",
        "",
        "The values the catalog offers (`clustersim catalog` lists them with their figures):",
        "",
        "- `model`: " + ", ".join(f"`{m}`" for m in model_ids())
        + ", or a path to a HuggingFace config.json",
        "- `gpu`: " + ", ".join(f"`{g}`" for g in gpu_ids())
        + " (`ID@PROFILE` prices it with another GPU profile)",
        "- `topology`: " + ", ".join(f"`{t}`" for t in shipped_topologies())
        + ", or a topology file",
        "- `trace`: " + ", ".join(f"`{t}`" for t in SHIPPED_TRACES) + ", or a trace file",
        "",
    ]
    return "\n".join(lines)


# ------------------------------------------------------------------ the commands
def _help(command: Any, name: str, parent: Any) -> tuple[str, Any]:
    """(``--help`` of ``command``, its context), rendered plainly at ``HELP_WIDTH``."""
    ctx = command.context_class(command, info_name=name, parent=parent,
                                terminal_width=HELP_WIDTH, max_content_width=HELP_WIDTH,
                                **command.context_settings)
    # Typer renders help with Rich where it can (boxes, colour, the terminal's width); without
    # a markup mode it uses Click's plain formatter, which the context's width fixes
    markup = getattr(command, "rich_markup_mode", None)
    try:
        command.rich_markup_mode = None
        return command.get_help(ctx), ctx
    finally:
        command.rich_markup_mode = markup


def _commands(command: Any, name: str, parent: Any = None) -> list[tuple[str, str]]:
    """``(command path, help)`` of ``command`` and every command under it, in the order its
    group lists them."""
    text, ctx = _help(command, name, parent)
    found = [(ctx.command_path, text)]
    for sub in getattr(command, "commands", {}):
        child = command.get_command(ctx, sub)
        if child is not None and not child.hidden:
            found += _commands(child, sub, ctx)
    return found


def commands_page(root: Any) -> str:
    """``docs/commands.md``: the help of the Click command ``root`` (the ``clustersim`` group)
    and of every command under it."""
    helps = _commands(root, "clustersim")
    lines = [
        "# Commands",
        "",
        f"<!-- Generated by `{REGENERATE}` from the command-line help: edit the help texts in "
        "clustersim/cli/, not this page. -->",
        "",
        "Every command's `--help` (`-h`), as the command line defines it. The README's "
        "[Commands](../README.md#commands) table says what each is for; "
        "[bad-input.md](bad-input.md) what each refuses.",
        "",
        *[f"- [{path}](#{_anchor(path)})" for path, _ in helps],
        "",
    ]
    for path, text in helps:
        lines += [f"## {path}", "", "```text", text.rstrip(), "```", ""]
    return "\n".join(lines)


PAGES: dict[str, Callable[[Any], str]] = {
    "scenario-reference.md": lambda root: scenario_page(),
    "commands.md": commands_page,
}
"""Each generated page of ``docs/`` by file name, made from the root command."""


def pages(root: Any) -> dict[str, str]:
    """Every generated page's text, by file name."""
    return {name: make(root) for name, make in PAGES.items()}
