"""What a deployment can lose: its instances and the servers they sit on.

A capacity review asks what survives the loss of one part. The parts are the failure domains
of a placed deployment: each instance (a data-parallel group counts as one, with the GPUs of
all its ranks) and, when the layout has a topology, each server with the GPUs on it. The
layout is built and placed as a run would place it, and never run.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from clustersim.catalog.specs import ModelSpec
from clustersim.scenario import Scenario

ROLES = ("colocated", "prefill", "decode")


@dataclass(frozen=True, slots=True)
class PlacedInstance:
    """One instance as placed: its role, its name and the GPUs of all its ranks."""

    role: str
    name: str
    gpus: tuple[str, ...]
    gpu_counts: dict[str, int]
    """GPUs by catalog type, over every rank of the instance."""


@dataclass(frozen=True, slots=True)
class FailureDomains:
    """Every instance of a deployment in role order, and the server of each GPU (empty
    without a topology: then there is no server to lose)."""

    instances: tuple[PlacedInstance, ...]
    servers: tuple[str, ...]
    """The topology's servers in its own order."""
    server_of: dict[str, str]
    """GPU id -> the server it sits in."""
    gpu_type: dict[str, str]
    """GPU id -> its catalog type."""

    @property
    def has_servers(self) -> bool:
        return bool(self.servers)

    def first_of(self, role: str) -> PlacedInstance | None:
        """The role's first instance, None when the layout has none."""
        return next((i for i in self.instances if i.role == role), None)

    def held_by(self, server: str) -> list[str]:
        """The instances with a GPU on ``server``, in role order."""
        return [i.name for i in self.instances
                if any(self.server_of[g] == server for g in i.gpus)]

    def gpus_on(self, server: str) -> list[str]:
        """The deployment's GPUs on ``server``, instance by instance."""
        return [g for i in self.instances for g in i.gpus if self.server_of[g] == server]


def failure_domains(scenario: Scenario, model: ModelSpec) -> FailureDomains:
    """The instances and servers of ``scenario``'s deployment, placed as a run places them."""
    from clustersim.cluster.system import Cluster
    from clustersim.engine.clock import Clock

    cluster = Cluster(Clock(), scenario, model, np.random.default_rng(0), lambda _r: None,
                      record_steps=False)
    gpu_of = {info.name: info.gpu for info in cluster.infos}
    placed = []
    for domain in cluster.domains():
        counts: Counter[str] = Counter()
        for member in domain.members:
            for rank in getattr(member, "ranks", [member]):
                counts[gpu_of[rank.name]] += len(rank.gpus)
        placed.append(PlacedInstance(domain.role, domain.name, domain.gpus, dict(counts)))
    topology = cluster.topology
    if topology is None:
        return FailureDomains(tuple(placed), (), {}, {})
    gpus = [g for i in placed for g in i.gpus]
    return FailureDomains(tuple(placed), tuple(topology.node_names()),
                          {g: topology.node_of(g) for g in gpus},
                          {g: topology.gpu_type(g) for g in gpus})
