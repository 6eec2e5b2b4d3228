"""Where the GPUs are and how they are wired: a topology file validated into a networkx graph.

A topology is a list of servers (``nodes``), the network ``switches`` between them and the
``links`` table every wire refers to. It becomes a directed graph with one vertex per GPU, per
NIC, per in-server fabric hub and per network switch; every cable is two edges, one per
direction, each with its own capacity (links are full duplex)::

    node0/gpu0 ─┐                 ┌─ node0/gpu7      NVSwitch box: each GPU's NVLink port
                └─ node0/nvswitch ┘                  to the hub (450 GB/s per direction)
    node0/gpu3 ── node0/nic3 ── leaf0 ── node1/nic3 ── node1/gpu3
         GPU's PCIe link    NIC link   NIC link    PCIe link

Assumptions, on purpose:

- GPUDirect RDMA: a NIC reads and writes GPU memory over the GPU's own PCIe link, so an
  inter-node transfer is GPU -> NIC -> switch(es) -> NIC -> GPU and never bounces through host
  memory. GPU ``i`` of a node uses NIC ``i * num_nics // num_gpus`` (one per GPU, pairs
  sharing one, or all sharing one). For a TCP-class network the host bounce is folded into
  the link's latency; the NIC line rate stays the bottleneck either way.
- Switches are non-blocking: only their ports (the cables) have capacity. One leaf for all
  NICs is therefore the same as a rail-optimised fabric for bandwidth.
- GPUs do not forward traffic: a path may start or end at a GPU but never pass through one.
- Inside a PCIe box the GPU's P2P link and its link to the NIC are modelled as separate edges
  (they are one x16 link in reality), so concurrent P2P and network traffic of one GPU is a
  little optimistic there.

Paths are shortest by summed latency, then by hop count; ties go to the first edge in file
order, so the same file always gives the same paths. A path search between two servers only
looks at those two servers, the network switches and the servers that touch two or more
switches: a server on one switch can only be a dead end for anyone else's traffic (a path
that enters it must leave through the switch it came from), so skipping it changes no path,
tie-breaking included, and a search costs the same on a fleet of 2 servers as on 128.
Servers of the same make (the same vertices, cables and latencies, on the same switches) have
the same paths between them up to their names: a path that is the only shortest one is kept
by the shapes of its two servers and of the network, and every later pair of servers of those
shapes, in this topology or another built in the same process, reuses it renamed. A path that
ties with another is searched for each pair (the tie goes by file order, which shapes do not
record).
"""

from __future__ import annotations

import heapq
import itertools
import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import networkx as nx

from clustersim.cluster.topology_spec import (
    TopologySpec,
    combine_nodes,
    parse_topology,
    replicate_node,
)
from clustersim.errors import ConfigError, InputError
from clustersim.inputs import load_yaml, parse_shipped_yaml
from clustersim.scenario.layout import ReplicatedNode

GIGA = 1e9
_PS_PER_US = 1_000_000  # latencies are summed as integer picoseconds: exact ties, stable paths

# ---------------------------------------------------------------- loading
_SHIPPED = "topologies"


def shipped_topologies() -> list[str]:
    """Names of the topologies that ship with clustersim (``Topology.load(name)``)."""
    folder = resources.files(__package__).joinpath(_SHIPPED)
    return sorted(p.name[: -len(".yaml")] for p in folder.iterdir() if p.name.endswith(".yaml"))


def _mapping(data: Any, where: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise InputError(where, "a topology must be a YAML mapping of fields")
    return data


def load_spec(
    name_or_path: str, base_dir: Path | None = None, *, where: str = "topology"
) -> TopologySpec:
    """The validated file of a shipped topology or of a YAML path (relative to ``base_dir``);
    ``where`` is the scenario field that named it."""
    shipped = shipped_topologies()
    if name_or_path in shipped:
        resource = resources.files(__package__).joinpath(_SHIPPED, f"{name_or_path}.yaml")
        where = f"{name_or_path}.yaml"
        text = resource.read_text(encoding="utf-8")
        return parse_topology(_mapping(parse_shipped_yaml(text), where))
    path = Path(name_or_path).expanduser()
    if not path.is_absolute() and base_dir is not None:
        path = Path(base_dir) / path
    if not path.exists():  # a folder, a pipe or a device: the reader says which
        raise ConfigError(
            where,
            f"{name_or_path!r} is neither a shipped topology ({', '.join(shipped)}) "
            "nor a topology file",
        )
    return parse_topology(_mapping(load_yaml(path, "topology"), str(path)))


_BUILT: dict[str, Topology] = {}
"""Topologies built in this process, by their spec's JSON (see :meth:`Topology.built`)."""
_BUILT_SIZE = 32

_SHAPE_IDS: dict[tuple[Any, ...], int] = {}
"""A small number per shape of a server or of a network (see :meth:`Topology._index_shapes`)."""
_SHARED: dict[tuple[int, int, int, str, str], tuple[tuple[int, str], ...]] = {}
"""Paths that are the only shortest ones between their ends, by (network shape, source server
shape, destination server shape or -1 for the same server, source and destination names inside
their servers): each vertex as (0 source server, 1 destination server, 2 network; its name
inside the server, or its own name in the network)."""
_SHARED_SIZE = 1_000_000
_SHAPE_IDS_SIZE = 10_000
_SHAPE_COUNT = itertools.count()


def _shape_id(shape: tuple[Any, ...]) -> int:
    """The number of ``shape``: a new one for a shape not seen (numbers are never reused, so
    forgetting old shapes never lets two shapes share one)."""
    number = _SHAPE_IDS.get(shape)
    if number is None:
        if len(_SHAPE_IDS) >= _SHAPE_IDS_SIZE:
            _SHAPE_IDS.clear()
        number = _SHAPE_IDS[shape] = next(_SHAPE_COUNT)
    return number


# ------------------------------------------------------------------- views
@dataclass(frozen=True)
class LinkView:
    """A path or a TP group as one link: bottleneck bandwidth and latency."""

    bytes_per_s: float
    """Effective bytes/s (raw x efficiency) of the slowest edge; inf for a GPU to itself."""
    latency_s: float
    """Summed one-way latency of the path's edges (a group: of its slowest pair's path)."""
    kinds: tuple[str, ...]
    """Link kinds crossed, each once, in path order (e.g. ``("pcie_gen5_x16", "cx7_...")``)."""


_LOCAL = LinkView(math.inf, 0.0, ())

Route = tuple[tuple[int, ...], float, str]
"""A path as the KV flows use it: its edges' numbers, its latency in seconds, its label."""


class Topology:
    """A validated topology file as a directed graph, with placement and path queries.

    Vertex attributes: ``role`` (gpu, nvswitch, pcie_switch, nic, switch), ``node`` (the
    server, None for network switches), ``gpu_type`` (GPUs). Edge attributes: ``link_id``
    (``"u>v"``, one per direction), ``kind`` (the link key), ``bytes_per_s`` (effective, per
    direction), ``raw_bytes_per_s``, ``efficiency``, ``latency_s``.
    """

    def __init__(self, spec: TopologySpec) -> None:
        self.spec = spec
        self.name = spec.name
        self.description = spec.description
        self.graph = nx.DiGraph()
        self._latency_ps: dict[tuple[str, str], int] = {}
        self._gpu_ids: list[str] = []
        self._paths: dict[tuple[str, str], list[tuple[str, str]]] = {}
        self.routes: dict[tuple[str, str], Route] = {}
        """Every :meth:`route` found so far (the KV flows of each run read it directly)."""
        self._build()
        self._check_reachable()
        self.edge_numbers: dict[tuple[str, str], int] = {
            edge: number for number, edge in enumerate(self.graph.edges)}
        """Every directed edge's number, in graph order (how the KV flows name the edges)."""
        self._gpu_set = frozenset(self._gpu_ids)
        self._gpus_on: dict[str, list[str]] = {}
        """Node -> its GPUs, in GPU order."""
        for gpu in self._gpu_ids:
            self._gpus_on.setdefault(self.graph.nodes[gpu]["node"], []).append(gpu)
        self._scope: dict[str, str | None] = {}
        self._out: dict[str, dict[str | None, list[tuple[int, str, int]]]] = {}
        self._index_out_edges()
        self._inside: dict[str, str] = {}
        self._shape: dict[str, int] = {}
        self._network_shape = -1
        self._index_shapes()

    # ----------------------------------------------------------- loading
    @classmethod
    def load(cls, source: str | ReplicatedNode | list[ReplicatedNode],
             base_dir: Path | None = None) -> Topology:
        """A shipped topology by name (``dgx-h100``), a YAML file (relative to ``base_dir``),
        ``{node, count}``: that many copies of a one-node topology on one leaf switch, or a
        list of those (several node types on the one leaf)."""
        if isinstance(source, ReplicatedNode):
            template = load_spec(source.node, base_dir, where="topology.node")
            return cls.built(replicate_node(template, source.count))
        if isinstance(source, list):
            parts = [(load_spec(part.node, base_dir, where=f"topology[{i}].node"), part.count)
                     for i, part in enumerate(source)]
            return cls.built(combine_nodes(parts))
        return cls.built(load_spec(source, base_dir))

    @classmethod
    def built(cls, spec: TopologySpec) -> Topology:
        """The topology of ``spec``, shared by every run in this process that has the same
        spec: a planner's simulations rebuild one cluster's graph and paths hundreds of times,
        and nothing a run does changes them (placement and paths are pure)."""
        key = spec.model_dump_json()
        topology = _BUILT.get(key)
        if topology is None:
            if len(_BUILT) >= _BUILT_SIZE:
                _BUILT.pop(next(iter(_BUILT)))
            topology = _BUILT[key] = cls(spec)
        return topology

    @classmethod
    def from_data(cls, data: Any) -> Topology:
        """Validate a parsed topology mapping; problems are ``topology.<field>: message``."""
        return cls(parse_topology(data))

    # ------------------------------------------------------------- build
    def _build(self) -> None:
        for node in self.spec.nodes:
            n = node.name
            gpus = [f"{n}/gpu{i}" for i in range(node.gpus.count)]
            for gpu in gpus:
                self.graph.add_node(gpu, role="gpu", node=n, gpu_type=node.gpus.type)
            self._gpu_ids.extend(gpus)
            fabric = node.gpu_fabric
            if fabric.kind == "nvswitch":
                hub = f"{n}/nvswitch"
                self.graph.add_node(hub, role="nvswitch", node=n)
                for gpu in gpus:
                    self._cable(gpu, hub, fabric.link)
            else:
                hub = f"{n}/pcie"
                self.graph.add_node(hub, role="pcie_switch", node=n)
                if fabric.kind == "nvlink_bridge_pairs":
                    for a, b in zip(gpus[::2], gpus[1::2], strict=True):
                        self._cable(a, b, fabric.link)
                for gpu in gpus:
                    self._cable(gpu, hub, node.pcie_link)
            if node.nics is not None:
                nics = [f"{n}/nic{j}" for j in range(node.nics.count)]
                for nic in nics:
                    self.graph.add_node(nic, role="nic", node=n)
                for i, gpu in enumerate(gpus):
                    self._cable(gpu, nics[i * len(nics) // len(gpus)], node.pcie_link)
        nodes = {node.name: node for node in self.spec.nodes}
        for switch in self.spec.switches:
            self.graph.add_node(switch.name, role="switch", node=None)
        for switch in self.spec.switches:
            for other in switch.connects:
                if other in nodes:
                    nics = nodes[other].nics
                    assert nics is not None  # checked in _check_references
                    for j in range(nics.count):
                        self._cable(f"{other}/nic{j}", switch.name, nics.link)
                else:
                    assert switch.link is not None
                    self._cable(switch.name, other, switch.link)

    def _cable(self, a: str, b: str, key: str) -> None:
        """A full-duplex cable: one edge per direction, independent capacities."""
        link = self.spec.links[key]
        raw = link.bw_gb_per_s_per_dir * GIGA
        for u, v in ((a, b), (b, a)):
            if self.graph.has_edge(u, v):
                raise ConfigError("topology.switches", f"{u} and {v} are connected twice")
            self.graph.add_edge(
                u,
                v,
                link_id=f"{u}>{v}",
                kind=key,
                bytes_per_s=raw * link.efficiency,
                raw_bytes_per_s=raw,
                efficiency=link.efficiency,
                latency_s=link.latency_us * 1e-6,
            )
            self._latency_ps[u, v] = round(link.latency_us * _PS_PER_US)

    def _check_reachable(self) -> None:
        first = self._gpu_ids[0]
        reachable = nx.descendants(self.graph, first) | {first}
        for node in self.spec.nodes:
            if f"{node.name}/gpu0" not in reachable:
                raise ConfigError(
                    "topology.switches",
                    f"node {node.name!r} cannot reach node {self.node_of(first)!r}: give both "
                    "nics and connect them through switches",
                )

    def _index_out_edges(self) -> None:
        """What a path search reads of each vertex: its out-edges as (position among the
        vertex's successors, next vertex, latency ps), grouped by the server the next vertex
        sits in when that server touches at most one network switch (it is a dead end for
        paths between two other servers), under None for every other next vertex (switches,
        servers on two or more switches)."""
        graph = self.graph
        switches_of: dict[str, set[str]] = {node.name: set() for node in self.spec.nodes}
        for u, v in graph.edges:
            server = graph.nodes[u]["node"]
            if server is not None and graph.nodes[v]["node"] is None:
                switches_of[server].add(v)
        for vertex, server in graph.nodes(data="node"):
            self._scope[vertex] = server if server is not None and len(
                switches_of[server]) <= 1 else None
        for vertex in graph:
            groups: dict[str | None, list[tuple[int, str, int]]] = {}
            for position, nxt in enumerate(graph.successors(vertex)):
                groups.setdefault(self._scope[nxt], []).append(
                    (position, nxt, self._latency_ps[vertex, nxt]))
            self._out[vertex] = groups

    def _index_shapes(self) -> None:
        """The shape of every server a search can skip (its vertices by their names inside
        it, whether each is a GPU, and its cables with their latencies, the other end named
        in the server or by its own name in the network) and of the network (every vertex the
        searches never skip, and the cables between them), each as a small number."""
        graph = self.graph
        gpus = self._gpu_set
        scope = self._scope
        members: dict[str, list[tuple[str, bool]]] = {}
        for vertex, server in scope.items():
            if server is not None:
                inside = self._inside[vertex] = vertex[len(server) + 1:]
                members.setdefault(server, []).append((inside, vertex in gpus))
        cables: dict[str | None, list[tuple[Any, ...]]] = {server: [] for server in members}
        cables[None] = []
        for (u, v), ps in self._latency_ps.items():
            ends = (scope[u], scope[v])
            for server in dict.fromkeys(ends):
                if server is None and ends != (None, None):
                    continue  # a server's cable to the network is part of the server's shape
                named = [(0, self._inside[x]) if scope[x] == server and server is not None
                         else (1, x) for x in (u, v)]
                cables[server].append((*named, ps))
        for server, vertices in members.items():
            self._shape[server] = _shape_id(
                ("server", tuple(sorted(vertices)), tuple(sorted(cables[server]))))
        network = sorted(v for v, server in scope.items() if server is None)
        self._network_shape = _shape_id((
            "network", tuple((v, v in gpus, graph.nodes[v]["role"]) for v in network),
            tuple(sorted(cables[None]))))

    # ------------------------------------------------------------ queries
    def gpu_ids(self) -> list[str]:
        """Every GPU, node by node in file order, then by index."""
        return list(self._gpu_ids)

    def node_names(self) -> list[str]:
        """The servers, in file order."""
        return [node.name for node in self.spec.nodes]

    def gpu_type(self, gpu_id: str) -> str:
        """The catalog GPU id of ``gpu_id``."""
        return self._gpu(gpu_id)["gpu_type"]

    def node_of(self, gpu_id: str) -> str:
        """The server ``gpu_id`` sits in."""
        return self._gpu(gpu_id)["node"]

    def pcie_bytes_per_s(self, gpu_id: str) -> float:
        """Effective bytes/s of ``gpu_id``'s PCIe link, each direction: its server's
        ``pcie_link`` (the GPU's link to its host, its NIC and its PCIe peers)."""
        node = self.node_of(gpu_id)
        spec = next(n for n in self.spec.nodes if n.name == node)
        link = self.spec.links[spec.pcie_link]
        return link.bw_gb_per_s_per_dir * GIGA * link.efficiency

    def _gpu(self, gpu_id: str) -> dict[str, Any]:
        attrs = self.graph.nodes.get(gpu_id)
        if attrs is None or attrs["role"] != "gpu":
            raise KeyError(f"no GPU {gpu_id!r} in topology {self.name}")
        return attrs

    # ---------------------------------------------------------- placement
    def place(
        self, groups: list[tuple[str, str, int, int, list[str] | None]]
        | list[tuple[str, str, int, int, list[str] | None, int]],
    ) -> dict[str, list[list[str]]]:
        """Assign GPUs to instances: ``(pool, gpu_type, tp, num_instances, allowed_nodes)``,
        or ``(..., rank_gpus)`` for data-parallel instances of ``tp`` GPUs in ranks of
        ``rank_gpus`` (each rank's TP group).

        Pools are placed in order, instances first-fit on the first node (in file order, among
        ``allowed_nodes`` if given) with ``tp`` free GPUs of the type; an instance takes the
        first free block of ``tp`` GPUs aligned to ``tp`` (GPUs 0-1, 2-3, ... for TP2) if
        there is one, else the lowest free ones. A TP group never spans nodes. A data-parallel
        instance larger than every node spans nodes rank by rank, each rank first-fit as an
        instance of ``rank_gpus`` would be (filling one node before the next), so every rank's
        TP group stays inside one node. Every call starts from an empty cluster. Returns
        pool -> instances -> GPU ids.
        """
        free = {node.name: [f"{node.name}/gpu{i}" for i in range(node.gpus.count)]
                for node in self.spec.nodes}
        types = {node.name: node.gpus.type for node in self.spec.nodes}
        placed: dict[str, list[list[str]]] = {}
        for pool, gpu_type, tp, num_instances, allowed, *rank in groups:
            where = f"pools.{pool}"
            if pool in placed:
                raise ConfigError(where, "duplicate pool name")
            if tp < 1 or num_instances < 1:
                raise ConfigError(where, f"needs tp >= 1 and instances >= 1, got {tp}, "
                                  f"{num_instances}")
            rank_gpus = rank[0] if rank else tp
            if rank_gpus < 1 or tp % rank_gpus:
                raise ConfigError(where, f"ranks of {rank_gpus} GPUs do not split {tp}")
            if rank_gpus < tp and tp > max(
                    (len(self._node_gpus(n)) for n in self.node_names()
                     if types[n] == gpu_type and (allowed is None or n in allowed)),
                    default=tp):
                placed[pool] = self._place_ranks(where, gpu_type, tp, rank_gpus,
                                                 num_instances, allowed, types, free)
                continue
            candidates = self._candidate_nodes(where, gpu_type, tp, allowed, types)
            instances = []
            for k in range(num_instances):
                node = next((n for n in candidates if len(free[n]) >= tp), None)
                if node is None:
                    left = ", ".join(f"{n} {len(free[n])}" for n in candidates)
                    raise ConfigError(
                        where,
                        f"not enough free {gpu_type} GPUs: instance {k + 1} of {num_instances} "
                        f"needs {tp} on one node; free: {left}",
                    )
                group = _take(free[node], tp)
                instances.append(group)
            placed[pool] = instances
        return placed

    def _place_ranks(
        self, where: str, gpu_type: str, gpus: int, rank_gpus: int, num_instances: int,
        allowed: list[str] | None, types: dict[str, str], free: dict[str, list[str]],
    ) -> list[list[str]]:
        """Instances of ``gpus`` GPUs over several nodes, ``rank_gpus`` at a time."""
        candidates = self._candidate_nodes(where, gpu_type, rank_gpus, allowed, types)
        instances = []
        for k in range(num_instances):
            group: list[str] = []
            for r in range(gpus // rank_gpus):
                node = next((n for n in candidates if len(free[n]) >= rank_gpus), None)
                if node is None:
                    left = ", ".join(f"{n} {len(free[n])}" for n in candidates)
                    raise ConfigError(
                        where,
                        f"not enough free {gpu_type} GPUs: instance {k + 1} of {num_instances} "
                        f"needs {gpus // rank_gpus} ranks of {rank_gpus} GPUs, rank {r + 1} "
                        f"finds no node with {rank_gpus} free; free: {left}",
                    )
                group += _take(free[node], rank_gpus)
            instances.append(group)
        return instances

    def _candidate_nodes(
        self, where: str, gpu_type: str, tp: int, allowed: list[str] | None,
        types: dict[str, str],
    ) -> list[str]:
        names = self.node_names()
        if allowed is not None:
            if not allowed:
                raise ConfigError(where, "an empty list of nodes leaves no GPUs to place on")
            unknown = [n for n in allowed if n not in types]
            if unknown:
                raise ConfigError(
                    where, f"unknown node {unknown[0]!r}; nodes: {', '.join(names)}"
                )
            names = [n for n in names if n in set(allowed)]
        of_type = [n for n in names if types[n] == gpu_type]
        if not of_type:
            present = sorted({types[n] for n in names})
            raise ConfigError(
                where, f"no {gpu_type} GPUs on nodes {', '.join(names)} (they have "
                f"{', '.join(present)})",
            )
        sizes = {n: len(self._node_gpus(n)) for n in of_type}
        if tp > max(sizes.values()):
            raise ConfigError(
                where,
                f"a TP group of {tp} GPUs would span nodes: the largest {gpu_type} node here "
                f"has {max(sizes.values())} (tensor parallelism across nodes is not modelled)",
            )
        return of_type

    def _node_gpus(self, node: str) -> list[str]:
        return list(self._gpus_on.get(node, ()))

    # --------------------------------------------------------------- paths
    def path(self, src_gpu: str, dst_gpu: str) -> list[tuple[str, str]]:
        """The directed edges from ``src_gpu`` to ``dst_gpu`` ([] for a GPU to itself)."""
        key = (src_gpu, dst_gpu)
        path = self._paths.get(key)
        if path is None:
            self._gpu(src_gpu)
            self._gpu(dst_gpu)
            found = self._find(src_gpu, dst_gpu)
            if found is None:
                raise ConfigError("topology", f"no path from {src_gpu} to {dst_gpu}")
            path = self._paths[key] = found
        return list(path)

    def _find(self, src: str, dst: str) -> list[tuple[str, str]] | None:
        """The usual path from ``src`` to ``dst``: renamed from a pair of servers of the same
        shapes when that pair's path is the only shortest one, else searched (and kept for
        such pairs when it is the only shortest one)."""
        if src == dst:
            return []
        home = self._scope[src]
        away = self._scope[dst]
        if home is None or away is None:
            return self._search(src, dst)[0]
        key = (self._network_shape, self._shape[home],
               -1 if home == away else self._shape[away], self._inside[src], self._inside[dst])
        shared = _SHARED.get(key)
        if shared is not None:
            prefixes = (f"{home}/", f"{away}/", "")
            vertices = [prefixes[side] + name for side, name in shared]
            return list(itertools.pairwise(vertices))
        path, only = self._search(src, dst)
        if path is not None and only:
            if len(_SHARED) >= _SHARED_SIZE:
                _SHARED.clear()
            inside = self._inside
            _SHARED[key] = tuple(
                (2, v) if v not in inside else (0 if self._scope[v] == home else 1, inside[v])
                for v in [src, *(v for _, v in path)])
        return path

    def path_avoiding(self, src_gpu: str, dst_gpu: str,
                      down: frozenset[tuple[str, str]]) -> list[tuple[str, str]] | None:
        """:meth:`path` over the edges not in ``down`` (failed links); None when none is
        left. Not cached here: a topology is shared by runs, its failures are a run's."""
        usual = self.path(src_gpu, dst_gpu)
        if down.isdisjoint(usual):
            return usual  # the usual path is up: traffic stays on it
        return self._shortest(src_gpu, dst_gpu, down)

    def edges_of(self, vertex: str) -> list[tuple[str, str]]:
        """Every directed edge into or out of ``vertex``."""
        graph = self.graph
        return [*graph.out_edges(vertex), *graph.in_edges(vertex)]

    def node_vertices(self, node: str) -> list[str]:
        """The GPUs, NICs and fabric hubs of server ``node``."""
        return [v for v, attrs in self.graph.nodes(data=True) if attrs["node"] == node]

    def _shortest(self, src: str, dst: str, down: frozenset[tuple[str, str]] = frozenset()
                  ) -> list[tuple[str, str]] | None:
        """The path from ``src`` to ``dst`` over the edges not in ``down`` (see
        :meth:`_search`); None: ``dst`` cannot be reached."""
        return self._search(src, dst, down)[0]

    def _search(self, src: str, dst: str, down: frozenset[tuple[str, str]] = frozenset()
                ) -> tuple[list[tuple[str, str]] | None, bool]:
        """Dijkstra on (latency ps, hops) over the edges not in ``down``; GPUs other than
        ``src`` do not forward; vertices of servers other than the two ends' that touch at
        most one switch are skipped (dead ends, see the module's notes). Equal costs pop in
        the order they were pushed, successors in graph order. Returns the path (None:
        ``dst`` cannot be reached) and whether it is the only shortest one (no vertex on it
        has a second predecessor at its cost)."""
        if src == dst:
            return [], True
        scopes = tuple(dict.fromkeys((None, self._scope[src], self._scope[dst])))
        out = self._out
        gpus = self._gpu_set
        best: dict[str, tuple[int, int]] = {src: (0, 0)}
        parent: dict[str, str] = {}
        tied: set[str] = set()
        order = itertools.count()
        heap = [(0, 0, next(order), src)]
        done: set[str] = set()
        while heap:
            latency, hops, _, vertex = heapq.heappop(heap)
            if vertex in done:
                continue
            done.add(vertex)
            if vertex == dst:
                break
            if vertex != src and vertex in gpus:
                continue
            groups = out[vertex]
            parts = [part for scope in scopes if (part := groups.get(scope))]
            successors = parts[0] if len(parts) == 1 else sorted(itertools.chain(*parts))
            for _, nxt, edge_ps in successors:
                if nxt in done or (down and (vertex, nxt) in down):
                    continue
                cost = (latency + edge_ps, hops + 1)
                known = best.get(nxt)
                if known is None or cost < known:
                    best[nxt] = cost
                    parent[nxt] = vertex
                    tied.discard(nxt)
                    heapq.heappush(heap, (*cost, next(order), nxt))
                elif cost == known:
                    tied.add(nxt)
        if dst not in done:
            return None, False
        vertices = [dst]
        while vertices[-1] != src:
            vertices.append(parent[vertices[-1]])
        vertices.reverse()
        return list(itertools.pairwise(vertices)), tied.isdisjoint(vertices)

    def route(self, src_gpu: str, dst_gpu: str) -> Route:
        """:meth:`path` as the KV flows use it (:meth:`route_of`), kept for every run in this
        process that shares the topology."""
        key = (src_gpu, dst_gpu)
        route = self.routes.get(key)
        if route is None:
            route = self.routes[key] = self.route_of(src_gpu, self.path(src_gpu, dst_gpu))
        return route

    def route_of(self, src_gpu: str, edges: list[tuple[str, str]]) -> Route:
        """A path from ``src_gpu`` as the numbers of its edges (:attr:`edge_numbers`), its
        latency (:meth:`view`'s) and its label (:meth:`path_label`'s)."""
        numbers = self.edge_numbers
        return (tuple(numbers[edge] for edge in edges), self._latency_s(edges),
                ">".join([src_gpu, *(v for _, v in edges)]))

    def _latency_s(self, edges: list[tuple[str, str]]) -> float:
        return sum(self._latency_ps[e] for e in edges) / (_PS_PER_US * 1e6)

    def path_view(self, src_gpu: str, dst_gpu: str) -> LinkView:
        """The path from ``src_gpu`` to ``dst_gpu`` as one link."""
        return self._view(self.path(src_gpu, dst_gpu))

    def view(self, edges: list[tuple[str, str]]) -> LinkView:
        """A list of directed edges (a path) as one link."""
        return self._view(edges)

    def _view(self, edges: list[tuple[str, str]]) -> LinkView:
        if not edges:
            return _LOCAL
        attrs = [self.graph.edges[e] for e in edges]
        return LinkView(
            bytes_per_s=min(a["bytes_per_s"] for a in attrs),
            latency_s=self._latency_s(edges),
            kinds=tuple(dict.fromkeys(a["kind"] for a in attrs)),
        )

    def tp_group_link(self, gpu_ids: list[str]) -> LinkView:
        """What a TP group's ring all-reduce runs over, as one link.

        Every GPU of a ring sends over its own link at once, so the group is as fast as its
        slowest pairwise path (NVLink in a DGX, PCIe in a PCIe box, PCIe for a 4-GPU group of
        bridged pairs); ``latency_s`` is the longest pairwise path's. A single GPU has no
        all-reduce: ``LinkView(inf, 0.0, ())``. Meant for groups inside one node.
        """
        if not gpu_ids:
            raise ValueError("tp_group_link needs at least one GPU")
        views = [self.path_view(a, b) for a, b in itertools.permutations(gpu_ids, 2)]
        if not views:
            self._gpu(gpu_ids[0])
            return _LOCAL
        return LinkView(
            bytes_per_s=min(v.bytes_per_s for v in views),
            latency_s=max(v.latency_s for v in views),
            kinds=tuple(dict.fromkeys(k for v in views for k in v.kinds)),
        )

    def path_label(self, src_gpu: str, dst_gpu: str) -> str:
        """``node0/gpu0>node0/nvswitch>node0/gpu4``: the vertices of the path."""
        edges = self.path(src_gpu, dst_gpu)
        return ">".join([src_gpu, *(v for _, v in edges)])

    def capacities(self) -> dict[tuple[str, str], float]:
        """Effective bytes/s of every directed edge, in graph order."""
        return {(u, v): a["bytes_per_s"] for u, v, a in self.graph.edges(data=True)}

    def __repr__(self) -> str:
        return f"Topology({self.name!r}, {len(self._gpu_ids)} GPUs)"


def whole_graph_path(topology: Topology, src: str, dst: str,
                     down: frozenset[tuple[str, str]] = frozenset()
                     ) -> list[tuple[str, str]] | None:
    """The path from ``src`` to ``dst`` by one Dijkstra over every vertex of the graph, with
    the rules of :meth:`Topology.path` (cost (latency ps, hops), GPUs other than ``src`` do
    not forward, equal costs pop in push order, successors in graph order), skipping the
    edges in ``down``; None: ``dst`` cannot be reached. The reference the scoped and shared
    searches are checked against, and the baseline ``benchmarks/split_scale.py`` compares
    them with; it costs time in proportion to the whole fleet."""
    if src == dst:
        return []
    graph = topology.graph
    latency_ps = topology._latency_ps
    best: dict[str, tuple[int, int]] = {src: (0, 0)}
    parent: dict[str, str] = {}
    order = itertools.count()
    heap = [(0, 0, next(order), src)]
    done: set[str] = set()
    while heap:
        latency, hops, _, vertex = heapq.heappop(heap)
        if vertex in done:
            continue
        done.add(vertex)
        if vertex == dst:
            break
        if vertex != src and graph.nodes[vertex]["role"] == "gpu":
            continue
        for nxt in graph.successors(vertex):
            if down and (vertex, nxt) in down:
                continue
            cost = (latency + latency_ps[vertex, nxt], hops + 1)
            if nxt not in done and (nxt not in best or cost < best[nxt]):
                best[nxt] = cost
                parent[nxt] = vertex
                heapq.heappush(heap, (*cost, next(order), nxt))
    if dst not in done:
        return None
    vertices = [dst]
    while vertices[-1] != src:
        vertices.append(parent[vertices[-1]])
    vertices.reverse()
    return list(itertools.pairwise(vertices))


def _take(free: list[str], tp: int) -> list[str]:
    """Remove and return the first ``tp``-aligned block of ``tp`` free GPUs, else the lowest."""
    index = {gpu: int(gpu.rsplit("gpu", 1)[1]) for gpu in free}
    have = set(index.values())
    for start in sorted(have):
        if start % tp == 0 and all(start + r in have for r in range(tp)):
            group = [g for g in free if start <= index[g] < start + tp]
            break
    else:
        group = free[:tp]
    for gpu in group:
        free.remove(gpu)
    return group
