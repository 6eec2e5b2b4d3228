"""The one base error of clustersim and its kinds.

Every error a user can cause (a bad scenario field, an impossible configuration, a malformed
trace line) is a :class:`ClusterSimError` carrying the place it came from. The CLI prints it as
one ``path: message`` line and exits with code 2; any other exception is a bug. A field path is
a place in the file the command was given, and the CLI puts that file's name in front of it:
``quickstart.yaml: engine.max_modle_len: unknown field; did you mean max_model_len?``.
"""

from __future__ import annotations

import re

_FIELD_PATH = re.compile(r"[A-Za-z_]\w*(?:\.[\w-]+|\[\d+\])*")
"""``engine.max_model_len``, ``layout.pools[0].instances``, ``plan.nodes.h100-sxm``: what
``validation.format_loc`` writes for a field; a file (``t.csv:4``, ``/tmp/p.yaml``) or an
option (``--out``) is not one."""


class ClusterSimError(Exception):
    """A problem with the user's input, located by ``path`` (a field path or ``file:line``)."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message

    def __reduce__(self) -> tuple:
        # rebuilt from (path, message), so that an error raised in a worker process reaches
        # the user as the same one line
        return (type(self), (self.path, self.message))

    def names_a_field(self) -> bool:
        """Whether ``path`` is a field of the command's input file, whose name it lacks."""
        return _FIELD_PATH.fullmatch(self.path) is not None


class ConfigError(ClusterSimError):
    """A configuration that vLLM would refuse to start with, or that cannot be simulated."""


class CatalogError(ClusterSimError):
    """An unknown catalog id or a malformed catalog/model file."""


class InputError(ClusterSimError):
    """A malformed input file (scenario, trace, model config), located by its own path."""

    def names_a_field(self) -> bool:
        return False


class OutputError(ClusterSimError):
    """A folder or file a command cannot create or write, located by its path."""

    def names_a_field(self) -> bool:
        return False
