"""What the engines and the cluster run on: SimPy's environment interface, as a type.

A :class:`clustersim.engine.clock.Clock` in every simulation; a plain ``simpy.Environment``
in a test that steps the engines without coalesced runs. (A module of its own, not compiled
with the core: a protocol is a type for the checker, never a class the core builds.)
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, Protocol


class Environment(Protocol):
    """SimPy's ``Environment`` interface, as far as the engines and the cluster use it."""

    @property
    def now(self) -> float: ...

    def schedule(self, event: Any, priority: int = ..., delay: float = ...) -> None: ...

    def process(self, generator: Generator[Any, Any, Any]) -> Any: ...

    def timeout(self, delay: float = ..., value: Any = ...) -> Any: ...

    def event(self) -> Any: ...

    def run(self, until: Any = ...) -> Any: ...
