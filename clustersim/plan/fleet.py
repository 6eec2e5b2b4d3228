"""The servers a plan builds its candidates from, and each candidate's fleet of them.

Every GPU type of the search has a one-node template (a server: its GPUs, their fabric, its
NICs). A candidate gets as many servers of each type as its pools need, placed as the
simulator places them (pools in order, each instance first-fit on a node with ``tp`` free
GPUs), all on one non-blocking leaf switch: ``[{node: dgx-h100, count: 3}]``. So a 64-GPU
budget needs no hand-written topology per size, and a prefill/decode split lands on one node
when it fits there (KV over NVLink) and across the network when it does not.

Templates come from ``plan.nodes``, else the scenario's own ``{node, count}`` topology, else
the shipped server of the GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from clustersim.catalog import load_gpu
from clustersim.cluster.topology import Topology, load_spec, shipped_topologies
from clustersim.cluster.topology_spec import replicate_node
from clustersim.errors import ConfigError
from clustersim.plan.space import Candidate
from clustersim.scenario import Scenario
from clustersim.scenario.layout import ReplicatedNode
from clustersim.scenario.plan import PlanSpec

SHIPPED_SERVERS = {"h100-sxm": "dgx-h100", "a100-80gb-sxm": "a100-8x",
                   "rtx4090": "rtx4090-pcie-box", "h200": "hgx-h200", "b200": "hgx-b200",
                   "b300": "hgx-b300", "gb200": "gb200-nvl72", "gb300": "gb300-nvl72"}
"""The shipped one-node topology of each GPU that has one (a Grace-Blackwell GPU's is its
NVL72 rack: one NVLink domain of 72)."""


@dataclass(frozen=True, slots=True)
class NodeTemplate:
    """One server type as the planner needs it."""

    source: str
    """A shipped topology name or an absolute path (jobs may run in other processes)."""
    name: str
    gpu: str
    gpus_per_node: int
    networked: bool
    """It has NICs: several of it can share the leaf switch."""
    intra_bytes_per_s: float
    """GPU to GPU inside the server (its fabric, as a flow alone sees it)."""
    inter_bytes_per_s: float | None
    """GPU to GPU across two servers (NIC, switch, NIC); None without NICs."""


def node_templates(scenario: Scenario, plan: PlanSpec) -> dict[str, NodeTemplate]:
    """GPU id -> its server, for every GPU the plan can use that has one."""
    sources: dict[str, tuple[str, str]] = {}  # gpu -> (source, field path)
    for gpu, source in SHIPPED_SERVERS.items():
        sources[gpu] = (source, "plan.nodes")
    own = scenario.topology
    parts = own if isinstance(own, list) else [own] if isinstance(own, ReplicatedNode) else []
    for i, part in enumerate(parts):
        where = "topology.node" if isinstance(own, ReplicatedNode) else f"topology[{i}].node"
        spec = load_spec(part.node, scenario.base_dir, where=where)
        sources[spec.nodes[0].gpus.type] = (_absolute(part.node, scenario.base_dir), where)
    for gpu, source in plan.nodes.items():
        load_gpu(gpu, path=f"plan.nodes.{gpu}")
        sources[gpu] = (_absolute(source, scenario.base_dir), f"plan.nodes.{gpu}")
    return {gpu: _template(gpu, source, where) for gpu, (source, where) in sources.items()}


def _absolute(source: str, base_dir: Path | None) -> str:
    if source in shipped_topologies():
        return source
    path = Path(source).expanduser()
    if not path.is_absolute() and base_dir is not None:
        path = Path(base_dir) / path
    return str(path.resolve())


def _template(gpu: str, source: str, where: str) -> NodeTemplate:
    spec = load_spec(source, None, where=where)
    if len(spec.nodes) != 1 or spec.switches:
        raise ConfigError(where, f"{spec.name!r} is not a one-node topology (a server type)")
    node = spec.nodes[0]
    if node.gpus.type != gpu:
        raise ConfigError(where, f"{spec.name!r} holds {node.gpus.type} GPUs, not {gpu}")
    one = Topology(spec)
    intra = (one.path_view(f"{node.name}/gpu0", f"{node.name}/gpu1").bytes_per_s
             if node.gpus.count > 1 else 0.0)
    inter = None
    if node.nics is not None:
        two = Topology(replicate_node(spec, 2))
        inter = two.path_view("node0/gpu0", "node1/gpu0").bytes_per_s
    return NodeTemplate(source, spec.name, gpu, node.gpus.count, node.nics is not None,
                        intra, inter)


def nodes_needed(candidate: Candidate, templates: dict[str, NodeTemplate]) -> dict[str, int]:
    """Servers of each GPU type the candidate's pools fill, placed first-fit in pool order.

    First-fit keeps placing a pool's instances on the first node with room until it is full,
    so nodes are kept as runs ``[free GPUs, count]`` in node order and a pool is placed run by
    run: the cost grows with the pools, not with the instances."""
    runs_of: dict[str, list[list[int]]] = {}
    used: dict[str, int] = {}
    for pool in candidate.pools:
        size = templates[pool.gpu].gpus_per_node
        runs = runs_of.setdefault(pool.gpu, [])
        need, left = pool.gpus_per_instance, pool.instances
        if need > size:  # pipeline stages across servers: whole ones, the rest in one more
            whole, rest = divmod(need, size)
            used[pool.gpu] = used.get(pool.gpu, 0) + whole * left
            if rest:
                runs.append([size - rest, left])
            continue
        placed: list[list[int]] = []
        for free, count in runs:
            per = free // need
            if left == 0 or per == 0:
                placed.append([free, count])
                continue
            full = min(count, left // per)  # nodes that take ``per`` instances each
            left -= full * per
            if full:
                placed.append([free - per * need, full])
            if full < count and left:  # the next node takes the rest
                placed.append([free - left * need, 1])
                left = 0
                full += 1
            if full < count:
                placed.append([free, count - full])
        per = size // need
        full, rest = divmod(left, per)
        if full:
            placed.append([size - per * need, full])
        if rest:
            placed.append([size - rest * need, 1])
        runs_of[pool.gpu] = placed
    return {gpu: used.get(gpu, 0) + sum(count for _, count in runs)
            for gpu, runs in runs_of.items()}


def fleet_for(candidate: Candidate, templates: dict[str, NodeTemplate]
              ) -> list[ReplicatedNode] | None:
    """The candidate's topology: its servers on one leaf (None: a colocated candidate of a
    GPU without a server template runs on the catalog's TP link, with no topology)."""
    missing = sorted({p.gpu for p in candidate.pools if p.gpu not in templates})
    if missing:
        if candidate.layout == "colocated":
            return None
        raise ConfigError("plan.nodes", f"no server type for {', '.join(missing)}: a split "
                          "layout needs a topology for its KV handoff; map the GPU to a "
                          "one-node topology, e.g. plan.nodes: {GPU: my-server.yaml}")
    counts = nodes_needed(candidate, templates)
    for gpu, count in counts.items():
        template = templates[gpu]
        if count > 1 and not template.networked:
            raise ConfigError(
                "plan.nodes", f"{candidate.label()} needs {count} {template.name} servers, "
                f"which have no NICs to network them: at most {template.gpus_per_node} "
                f"{gpu} GPUs fit such a deployment")
    if len(counts) == 1 and next(iter(counts.values())) == 1:
        gpu = next(iter(counts))
        return [ReplicatedNode(node=templates[gpu].source, count=1)]
    return [ReplicatedNode(node=templates[gpu].source, count=n) for gpu, n in counts.items()]
