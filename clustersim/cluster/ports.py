"""What the KV connectors and the fault schedule ask of the cluster that built them, and what
dispatch asks of the connector.

``Cluster`` (``cluster/system.py``) builds dispatch, the connector and the fault schedule and
hands itself to the last two; they reach it, and dispatch reaches the connector, only through
these protocols, so the imports run one way: system -> connectors -> dispatch, and every one
of them -> ports.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from clustersim.catalog.specs import ModelSpec
    from clustersim.cluster.flows import FlowNetwork
    from clustersim.cluster.router import Router
    from clustersim.cluster.topology import Topology
    from clustersim.engine.events import Signal
    from clustersim.engine.request import Request
    from clustersim.scenario.layout import KVTransferSpec

Key = tuple[str, int]
"""An instance by (role, index); a colocated data-parallel group counts as one."""


@dataclass(frozen=True, slots=True)
class FailureDomain:
    """What fails as one: an instance, or the ranks of a data-parallel group."""

    role: str
    name: str
    keys: tuple[Key, ...]
    """(role, index) of each of its instances as the cluster indexes them."""
    members: tuple[Any, ...]
    """Those instances (an :class:`Instance` or a colocated :class:`DataParallelGroup`)."""
    lockstep: bool = False
    """A rank group whose ranks step together (their collectives span all their GPUs)."""

    @property
    def gpus(self) -> tuple[str, ...]:
        return tuple(g for member in self.members for g in member.gpus)

    @property
    def instance_names(self) -> tuple[str, ...]:
        """Its own name and its members' (a rank of a group names the group)."""
        names = [member.name for member in self.members]
        return tuple(names) if self.name in names else (self.name, *names)


class ConnectorPort(Protocol):
    """What dispatch asks of the KV connector (``cluster/connectors.py``)."""

    def start(self, client: Request) -> None:
        """The request enters the disaggregated path."""
        ...

    def load(self, decode_index: int, client: Request, num_tokens: int) -> Signal:
        """A decode instance starts reading a prompt's KV; the event fires when it is there."""
        ...

    def producer_done(self, index: int, producer: Request) -> None:
        """The prefill copy finished or was rejected."""
        ...

    def consumer_done(self, client: Request) -> None:
        """The decode half finished or was rejected."""
        ...


class LoadFailureTally(Protocol):
    """Where a failed KV read, and a prompt prefilled again after one, are counted."""

    num_kv_load_failures: int
    num_recomputed: int


class FaultsPort(Protocol):
    """What a connector asks of the run's failures."""

    def down_cause(self, role: str) -> str:
        """Why no instance of ``role`` can take a request now."""
        ...

    def transfer_fails(self) -> str | None:
        """Whether the next KV transfer fails at random, and the failure's label."""
        ...

    def tally(self, cause: str, request: Request) -> LoadFailureTally:
        """Where what ``cause`` did to ``request`` is counted."""
        ...


class ClusterPort(Protocol):
    """The cluster as its connector and its fault schedule see it."""

    env: Any
    dispatch: Any
    """The cluster's ``Dispatch`` (``cluster/dispatch.py``, which imports this module)."""
    instances: dict[str, list[Any]]
    routers: dict[str, Router]
    flows: FlowNetwork | None
    kv_transfer: KVTransferSpec
    topology: Topology | None

    @property
    def faults(self) -> FaultsPort | None:
        """The run's failures (None: a run without ``faults:``)."""
        ...

    def lose(self, request: Request, cause: str) -> None:
        """The attempt is lost to ``cause``: its client retries it or it fails."""
        ...

    def served(self, instance_name: str) -> ModelSpec:
        """The model as the instance serves it (its quantization and KV dtype)."""
        ...

    def keyed_instances(self) -> list[tuple[Key, Any]]:
        """Every instance with its (role, index)."""
        ...

    def domains(self) -> list[FailureDomain]:
        """What fails as one: each instance, and each pool's data-parallel group."""
        ...

    def fail_instance(self, key: Key, cause: str) -> None:
        """The instance dies now (a rank of a pool's data-parallel group, the group)."""
        ...

    def restore_instance(self, key: Key) -> None:
        """The instance is back."""
        ...
