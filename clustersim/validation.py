"""Shared pieces of input validation: the strict base model, unions chosen by ``kind:``, and
``path: message`` lines in plain words."""

from __future__ import annotations

from typing import Annotated, Any, Union, get_args

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


def shown_lines(error: ClusterSimError, limit: int = MAX_ERROR_LINES) -> list[str]:
    """The lines the CLI prints for ``error``: at most ``limit`` problems, then a count."""
    lines = getattr(error, "lines", None) or [str(error)]
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
        # is a tag, such as a union member chosen by a callable discriminator.
        is_tag = isinstance(node, dict) and part not in node and (
            node.get("kind") == part or (isinstance(part, str) and "[" in part)
            or i < len(loc) - 1
        )
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


def _plain(item: Any) -> tuple[tuple[int | str, ...], str]:
    """(extra location, message) of one pydantic error, in the user's words."""
    kind, value = item["type"], item.get("input")
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


def validation_lines(error: ValidationError, data: Any, root: str = "") -> list[str]:
    lines = []
    for item in error.errors(include_url=False):
        extra, message = _plain(item)
        loc = _user_loc(item["loc"], data) + extra
        lines.append(f"{format_loc(loc, root)}: {message}")
    return lines


def validate(model: type[BaseModel], data: Any, root: str = "") -> Any:
    """``model.model_validate(data)``, with failures as :class:`ValidationFailed`."""
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise ValidationFailed(validation_lines(error, data, root)) from None
