"""Shared pieces of input validation: the strict base model and ``path: message`` lines."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from clustersim.errors import ClusterSimError


class Strict(BaseModel):
    """Base of every input model: unknown fields are errors, parsed values are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class ValidationFailed(ClusterSimError):
    """Input that failed validation; ``lines`` holds one ``path: message`` per problem."""

    def __init__(self, lines: list[str]) -> None:
        path, _, message = lines[0].partition(": ")
        super().__init__(path, message)
        self.lines = lines


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
    from real keys.
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
        kept.append(part)
        if isinstance(node, dict) and isinstance(part, str):
            node = node.get(part)
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        else:
            node = None
    return tuple(kept)


def validation_lines(error: ValidationError, data: Any, root: str = "") -> list[str]:
    lines = []
    for item in error.errors(include_url=False):
        message = item["msg"].removeprefix("Value error, ")
        lines.append(f"{format_loc(_user_loc(item['loc'], data), root)}: {message}")
    return lines


def validate(model: type[BaseModel], data: Any, root: str = "") -> Any:
    """``model.model_validate(data)``, with failures as :class:`ValidationFailed`."""
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise ValidationFailed(validation_lines(error, data, root)) from None
