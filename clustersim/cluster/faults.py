"""Failures during a run, as the real systems fail: what goes down when, and what it does.

The scenario's ``faults:`` section (``cluster.faults_spec``) names instances, nodes and links
that fail at a time and maybe come back, and a chance that any KV transfer fails. This module
checks the names against the built cluster, schedules the failures, and counts what each one
did. What happens, following vLLM, its proxy and the OpenAI client::

    instance fails   vLLM's EngineDeadError: every request it runs or queues is lost with its
                     KV (streams break, queued calls get a 5xx); the router stops choosing it
                     until it is repaired, when it comes back empty. The unit is what fails
                     as one: a TP group, a data-parallel group with all its ranks (a prefill
                     or decode pool routes to its ranks one by one, but one rank's death
                     stops the group's collectives), a pipeline
    node fails       every instance with a GPU on it fails, and every cable of the node
    link fails       transfers on it move to another path where the topology has one and fail
                     where it has not (``cluster.flows``); an instance whose TP all-reduce
                     (or data-parallel group) crosses it fails too, as NCCL errors out
    KV load fails    a pull whose source died, whose path is cut, or that draws a failure:
                     the decode side follows kv_load_failure_policy (``cluster.connectors``)
    a request lost   its client sends it again after a delay (a new arrival, from scratch,
                     counted on the request) up to max_retries, else it ends rejected with a
                     reason naming the failure

What a failure did to the measured requests is tallied by failure; what it did to a benchmark's
warm-ups, which are not rows of the run, in one tally of their own, so that each tally adds up
to the rows it describes.

Failures are scheduled when the run starts, each an event at its exact time, so a coalesced
run of decode steps (``engine.instance``) is cut at the step in progress exactly as the
step-by-step loop would see it. Transfer failures draw from their own random stream of the
scenario's seed (``[seed, 2]``), so turning them on changes no arrival and no router choice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import permutations
from typing import TYPE_CHECKING

import numpy as np

from clustersim.engine.data_parallel import DataParallelGroup
from clustersim.errors import ConfigError
from clustersim.scenario.faults import FaultsSpec, InstanceFault, LinkFault, NodeFault
from clustersim.workload.benchmark import WARMUP_PREFIX

if TYPE_CHECKING:
    from clustersim.cluster.ports import ClusterPort, FailureDomain
    from clustersim.engine.request import Request

FAULT_RNG_STREAM = 2
"""Transfer failures draw from ``default_rng([seed, 2])`` (routers use stream 1)."""

Key = tuple[str, int]
"""An instance as the cluster indexes it: (role, position in that role)."""


@dataclass(slots=True)
class FaultTally:
    """What one failure did to the requests."""

    label: str
    """How reasons and summaries name it, e.g. ``instance decode-1 failed at 30 s``."""
    at_s: float
    repair_s: float | None = None
    """When it came back (its engines serving again, ``faults.restart_s`` after its repair;
    None: it did not, in this run)."""
    num_lost: int = 0
    """Attempts of requests it lost (a request lost twice counts twice)."""
    num_retried: int = 0
    """Of those, the ones its client sent again."""
    num_failed: int = 0
    """Requests that ended rejected because of it (lost with no retry left, or whose KV
    load failed under the fail policy with no retry left)."""
    num_kv_load_failures: int = 0
    """KV loads it made fail (the prompt's source died, its path was cut, or it drew a
    random failure)."""
    num_recomputed: int = 0
    """Of those, the ones the decode side recomputed (kv_load_failure_policy: recompute)."""


@dataclass(slots=True)
class FaultLog:
    """Every failure of a run, in the order they happened, with what each did."""

    tallies: dict[str, FaultTally] = field(default_factory=dict)
    """What each failure did to the measured requests."""
    warmups: FaultTally = field(default_factory=lambda: FaultTally("warm-ups", 0.0))
    """What the failures did to a benchmark's warm-ups, all failures together."""
    num_rerouted: int = 0
    """KV sub-flows a failed link moved to another path."""

    def tally(self, label: str, at_s: float) -> FaultTally:
        tally = self.tallies.get(label)
        if tally is None:
            tally = self.tallies[label] = FaultTally(label, at_s)
        return tally


@dataclass(frozen=True, slots=True)
class _Target:
    """A scheduled failure resolved against the cluster."""

    label: str
    instances: tuple[Key, ...]
    edges: tuple[tuple[str, str], ...]
    """Directed edges it takes down (both directions of each cable)."""


class Faults:
    """The failures of one run, scheduled on the cluster's clock."""

    def __init__(self, cluster: ClusterPort, spec: FaultsSpec, seed: int) -> None:
        self.cluster = cluster
        self.spec = spec
        self.env = cluster.env
        self.log = FaultLog()
        self._rng = np.random.default_rng([seed, FAULT_RNG_STREAM])
        self._random_label = (f"KV transfer failure (probability "
                              f"{spec.kv_transfer_failure_probability:g})")
        self._down: dict[Key, list[str]] = {}
        """Instances that are down, with the failures that hold each down (oldest first)."""
        for i, event in enumerate(spec.events):
            target = self._resolve(event, f"faults.events[{i}]")
            timer = self.env.timeout(event.at_s)
            timer.callbacks.append(lambda _e, t=target, ev=event: self._fail(t, ev))

    # ------------------------------------------------------------- names
    def _resolve(self, event, where: str) -> _Target:
        cluster = self.cluster
        when = f"at {event.at_s:g} s"
        domains = cluster.domains()
        if isinstance(event, InstanceFault):
            named = {name: d for d in domains for name in d.instance_names}
            domain = named.get(event.name)
            if domain is None:
                raise ConfigError(f"{where}.name", f"no instance {event.name!r}; "
                                  f"instances: {', '.join(d.name for d in domains)}")
            label = f"instance {event.name} failed {when}"
            if domain.name != event.name:
                label += f" (and with it every rank of {domain.name})"
            return _Target(label, domain.keys, ())
        topology = cluster.topology
        if topology is None:
            raise ConfigError(f"{where}.kind", f"a {event.kind} failure needs a topology: "
                              "nodes and links are the topology's (e.g. topology: dgx-h100)")
        if isinstance(event, NodeFault):
            nodes = topology.node_names()
            if event.name not in nodes:
                raise ConfigError(f"{where}.name", f"no node {event.name!r}; nodes: "
                                  f"{', '.join(nodes)}")
            hit = tuple(key for d in domains
                        if any(topology.node_of(g) == event.name for g in d.gpus)
                        for key in d.keys)
            edges = {e for v in topology.node_vertices(event.name) for e in topology.edges_of(v)}
            return _Target(f"node {event.name} failed {when}", hit,
                           tuple(e for e in topology.graph.edges if e in edges))
        assert isinstance(event, LinkFault)
        a, b = self._cable(event, where)
        cable = ((a, b), (b, a))
        return _Target(f"link {a}<->{b} failed {when}", self._crossing(cable, domains), cable)

    def _cable(self, event: LinkFault, where: str) -> tuple[str, str]:
        graph = self.cluster.topology.graph
        if event.id is not None:
            u, sep, v = event.id.partition(">")
            if not sep or not graph.has_edge(u, v):
                raise ConfigError(f"{where}.id", f"no link {event.id!r} in the topology "
                                  "(ids are 'u>v', as in summary.json's link_utilization)")
            return u, v
        u, v = event.between
        if not graph.has_edge(u, v):
            raise ConfigError(f"{where}.between", f"no cable between {u!r} and {v!r} in the "
                              "topology")
        return u, v

    def _crossing(self, cable: tuple[tuple[str, str], ...],
                  domains: list[FailureDomain]) -> tuple[Key, ...]:
        """Instances whose collectives cross the cable: a TP group's all-reduce (or a lockstep
        data-parallel group's all-gather) runs over the paths between its GPUs; a rank of a
        pool's data-parallel group takes the group down with it."""
        topology = self.cluster.topology
        hit = []
        for domain in domains:
            if domain.lockstep:
                groups = [domain.gpus]
            else:
                groups = [g for member in domain.members
                          for g in ([member.gpus] if not isinstance(member, DataParallelGroup)
                                    or member.price_steps is not None
                                    else [rank.gpus for rank in member.ranks])]
            if any(edge in cable for gpus in groups for a, b in permutations(gpus, 2)
                   for edge in topology.path(a, b)):
                hit.extend(domain.keys)
        return tuple(hit)

    # ------------------------------------------------------------ events
    def _fail(self, target: _Target, event) -> None:
        now = self.env.now
        self.log.tally(target.label, now)
        flows = self.cluster.flows
        if target.edges and flows is not None:
            flows.fail_edges(target.edges, target.label)
        for key in target.instances:
            causes = self._down.setdefault(key, [])
            causes.append(target.label)
            if len(causes) == 1:
                self.cluster.fail_instance(key, target.label)
        if event.repair_after_s is not None:
            timer = self.env.timeout(event.repair_after_s)
            timer.callbacks.append(lambda _e: self._repair(target))

    def _repair(self, target: _Target) -> None:
        """What failed is repaired: its links carry again now, its engines serve again once
        they have started (``faults.restart_s`` later)."""
        flows = self.cluster.flows
        if target.edges and flows is not None:
            flows.restore_edges(target.edges, target.label)
        restart_s = self.spec.restart_s
        if restart_s > 0 and target.instances:
            timer = self.env.timeout(restart_s)
            timer.callbacks.append(lambda _e: self._restart(target))
            return
        self._restart(target)

    def _restart(self, target: _Target) -> None:
        self.log.tallies[target.label].repair_s = self.env.now
        for key in target.instances:
            causes = self._down[key]
            causes.remove(target.label)
            if not causes:
                del self._down[key]
                self.cluster.restore_instance(key)

    # ----------------------------------------------------------- queries
    def down_cause(self, role: str) -> str:
        """Why no instance of ``role`` is up: the oldest failure holding one down."""
        return next(causes[0] for (r, _), causes in self._down.items() if r == role)

    def transfer_fails(self) -> str | None:
        """Whether the KV transfer starting now fails (a draw of the fault stream), and why."""
        p = self.spec.kv_transfer_failure_probability
        if p <= 0.0 or self._rng.random() >= p:
            return None
        self.log.tally(self._random_label, self.env.now)
        return self._random_label

    def tally(self, cause: str, request: Request) -> FaultTally:
        """Where what ``cause`` did to ``request`` is counted: its failure's tally, or the
        warm-ups' one."""
        if request.request_id.startswith(WARMUP_PREFIX):
            return self.log.warmups
        return self.log.tallies[cause]
