"""The one base error of clustersim and its kinds.

Every error a user can cause (a bad scenario field, an impossible configuration, a malformed
trace line) is a :class:`ClusterSimError` carrying the place it came from. The CLI prints it as
one ``path: message`` line and exits with code 2; any other exception is a bug.
"""

from __future__ import annotations


class ClusterSimError(Exception):
    """A problem with the user's input, located by ``path`` (a field path or ``file:line``)."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


class ConfigError(ClusterSimError):
    """A configuration that vLLM would refuse to start with, or that cannot be simulated."""


class CatalogError(ClusterSimError):
    """An unknown catalog id or a malformed catalog/model file."""


class InputError(ClusterSimError):
    """A malformed input file (scenario, trace, model config)."""
