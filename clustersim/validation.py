"""Shared pieces of input validation: the strict base model, unions chosen by ``kind:``, and
``path: message`` lines in plain words (an unknown field with the nearest valid name)."""

from __future__ import annotations

import difflib
import types
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Discriminator, Tag, ValidationError

from clustersim.errors import ClusterSimError

MAX_ERROR_LINES = 10
"""Most ``path: message`` lines printed for one input; the rest are counted."""


class Strict(BaseModel):
    """Base of every input model: unknown fields are errors, parsed values are immutable, and
    every number is finite (YAML's ``.inf`` and ``.nan`` are refused)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class ValidationFailed(ClusterSimError):
    """Input that failed validation; ``lines`` holds one ``path: message`` per problem."""

    def __init__(self, lines: list[str]) -> None:
        path, _, message = lines[0].partition(": ")
        super().__init__(path, message)
        self.lines = lines

    def names_a_field(self) -> bool:
        return True  # every line is a place in the data validated, whatever its keys


def shown_lines(error: ClusterSimError, file: str | None = None,
                limit: int = MAX_ERROR_LINES) -> list[str]:
    """The lines the CLI prints for ``error``: at most ``limit`` problems, then a count. Where
    the error names fields of the input ``file``, each line starts with the file's name."""
    lines = getattr(error, "lines", None) or [str(error)]
    if file is not None and error.names_a_field():
        lines = [f"{file}: {line}" for line in lines]
    if len(lines) <= limit:
        return lines
    return [*lines[:limit], f"... and {len(lines) - limit:,} more problems"]


# ---------------------------------------------------------------- kind unions
_KIND_ERROR = "kind_choice"


def _kind_of(value: Any) -> Any:
    if isinstance(value, dict):
        kind = value.get("kind")
        return kind if isinstance(kind, str) else None
    return getattr(value, "kind", None)


def kind_union(*members: type[BaseModel]) -> Any:
    """The union of ``members`` chosen by their ``kind:`` field (each a ``Literal``), whose
    errors name the kinds there are: ``Annotated[A | B, Field(discriminator="kind")]`` with
    plain-word errors instead of pydantic's tag messages."""
    kinds = [get_args(member.model_fields["kind"].annotation)[0] for member in members]
    tagged = tuple(Annotated[member, Tag(kind)] for member, kind in zip(members, kinds,
                                                                          strict=True))
    return Annotated[
        Union[tagged],  # noqa: UP007 - built from a tuple at run time
        # the message carries the kinds: a context dict would make the type unhashable
        Discriminator(_kind_of, custom_error_type=_KIND_ERROR,
                      custom_error_message=", ".join(kinds)),
    ]


# ------------------------------------------------------------------ messages
def format_loc(loc: tuple[int | str, ...], root: str = "") -> str:
    """('engine', 'max_num_seqs') -> 'engine.max_num_seqs'; list indexes as [i]."""
    text = root
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text or "scenario"


def _user_loc(loc: tuple[int | str, ...], data: Any) -> tuple[int | str, ...]:
    """Drop the parts pydantic adds that are not in the user's file.

    A discriminated union inserts the chosen tag (``('workload', 'poisson', 'rate_per_s')``) and
    validators insert names like ``function-before[...]``; walking the input tells them apart
    from real keys. A mapping's non-text key is shown as text (``a.1``, not ``a[1]``).
    """
    kept: list[int | str] = []
    node = data
    for i, part in enumerate(loc):
        # A key the input lacks can only end a location (a missing field): one before the end
        # is a tag, such as a union member chosen by a callable discriminator. A list has no
        # named items: a name in one is a tag too (``topology: [...]``, the fleet form).
        is_tag = (isinstance(node, dict) and part not in node and (
            node.get("kind") == part or (isinstance(part, str) and "[" in part)
            or i < len(loc) - 1
        )) or (isinstance(node, list) and isinstance(part, str))
        if is_tag:
            continue
        kept.append(str(part) if isinstance(node, dict) else part)
        if isinstance(node, dict):
            node = node.get(part)
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        else:
            node = None
    return tuple(kept)


def _shown(value: Any, width: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


_TYPE_WORDS = {
    dict: "a mapping", list: "a list", str: "text", bool: "true/false", int: "an integer",
    float: "a number", type(None): "nothing (null)",
}


def _members(annotation: Any) -> list[tuple[Any, str | None]]:
    """The types ``annotation`` allows, each with the name pydantic puts in an error's location
    when it tries that one: a union member's ``Tag``, else its class name."""
    origin = get_origin(annotation)
    if origin is Annotated:
        inner, *metadata = get_args(annotation)
        tag = next((m.tag for m in metadata if isinstance(m, Tag)), None)
        return [(member, tag or name) for member, name in _members(inner)]
    if origin is Union or origin is types.UnionType:
        return [m for arg in get_args(annotation) for m in _members(arg)]
    return [(annotation, getattr(annotation, "__name__", None))]


def _inside(annotation: Any, part: int | str) -> list[tuple[Any, str | None]]:
    """The types of ``annotation``'s field, item or value ``part``; none when it has none."""
    origin = get_origin(annotation) or annotation
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        field = next((f for name, f in annotation.model_fields.items()
                      if part in (name, f.alias)), None)
        return [] if field is None else _members(field.annotation)
    args = get_args(annotation)
    if origin is dict and len(args) == 2:
        return _members(args[1])
    if origin in (list, tuple, set, frozenset) and args and isinstance(part, int):
        fixed = origin is tuple and args[-1] is not Ellipsis
        return _members(args[part] if fixed and part < len(args) else args[0])
    return []


def _models_at(model: type[BaseModel], loc: tuple[int | str, ...]) -> list[type[BaseModel]]:
    """The models a pydantic error location leads into: ``('workload', 'poisson', 'classes',
    0)`` -> [LengthClass]. A part that names a union member picks it; one that is neither a
    member nor a field (a validator's name) is passed over; an untagged union keeps all."""
    current = _members(model)
    for part in loc:
        chosen = [(member, None) for member, name in current if name == part]
        if not chosen:
            chosen = [m for member, _ in current for m in _inside(member, part)]
        current = chosen or current
    return [m for m, _ in current if isinstance(m, type) and issubclass(m, BaseModel)]


def _unknown_field(model: type[BaseModel], loc: tuple[int | str, ...]) -> str:
    """'unknown field', with the nearest field name of its model where one is close."""
    names = {f.alias or name for m in _models_at(model, loc[:-1])
             for name, f in m.model_fields.items()}
    near = difflib.get_close_matches(str(loc[-1]), sorted(names), n=1)
    return f"unknown field; did you mean {near[0]}?" if near else "unknown field"


def _plain(item: Any, model: type[BaseModel]) -> tuple[tuple[int | str, ...], str]:
    """(extra location, message) of one pydantic error of ``model``, in the user's words."""
    kind, value = item["type"], item.get("input")
    if kind == "extra_forbidden":
        return (), _unknown_field(model, item["loc"])
    if kind == _KIND_ERROR:
        kinds = item["msg"]
        if not isinstance(value, dict):
            return (), f"expected a mapping with a kind: ({kinds}), got {_shown(value)}"
        if "kind" not in value:
            return ("kind",), f"missing: choose one of {kinds}"
        return ("kind",), f"unknown kind {_shown(value['kind'])}; choose one of {kinds}"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        got = _TYPE_WORDS.get(type(value), type(value).__name__)
        return (), f"expected a mapping of fields, got {got} {_shown(value)}"
    if kind == "recursion_loop":
        return (), "a value that contains itself"
    message = item["msg"].removeprefix("Value error, ").removeprefix("Assertion failed, ")
    return (), message


def validation_lines(model: type[BaseModel], error: ValidationError, data: Any,
                     root: str = "") -> list[str]:
    """One ``path: message`` line per problem of ``data``, validated as ``model``."""
    lines = []
    for item in error.errors(include_url=False):
        extra, message = _plain(item, model)
        loc = _user_loc(item["loc"], data) + extra
        lines.append(f"{format_loc(loc, root)}: {message}")
    return lines


def validate(model: type[BaseModel], data: Any, root: str = "") -> Any:
    """``model.model_validate(data)``, with failures as :class:`ValidationFailed`."""
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise ValidationFailed(validation_lines(model, error, data, root)) from None
