"""The topology file's schema: strict pydantic models and the cross-field checks; and
:func:`replicate_node`, a one-node topology copied into a cluster of them.

``clustersim.cluster.topology`` turns a validated :class:`TopologySpec` into the graph.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, NonNegativeFloat, PositiveFloat, PositiveInt, field_validator

from clustersim.catalog import load_gpu
from clustersim.errors import CatalogError, ConfigError
from clustersim.limits import MAX_GPUS_PER_NODE, MAX_NUM_NODES, Within
from clustersim.validation import Strict, ValidationFailed, kind_union, validate

NODE_REASON = "the GPUs of the largest NVLink domain sold (GB200 NVL72)"
Name = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]+$")]
"""Node and switch names become parts of vertex ids (``node0/gpu3``) and paths (``a>b``)."""


class LinkKind(Strict):
    """One kind of wire (NVLink port, PCIe x16, a NIC's port), referenced by its key."""

    bw_gb_per_s_per_dir: Annotated[PositiveFloat, Within(
        low=1e-3, high=1e5, unit="GB/s", reason="from 1 MB/s, slower than any bus or network "
        "card, to 100 TB/s, 50 times NVLink 5")] = Field(
        description="Theoretical bandwidth in each direction (GB/s = 1e9 B/s); the two "
        "directions are independent."
    )
    efficiency: Annotated[float, Within(
        low=1e-3, reason="a link measured at under 0.1% of its datasheet rate is a broken "
        "measurement")] = Field(
        gt=0.0,
        le=1.0,
        description="Achieved / theoretical for large transfers; a flow alone on the link "
        "moves bw_gb_per_s_per_dir x efficiency.",
    )
    latency_us: Annotated[NonNegativeFloat, Within(
        high=1e6, unit="us", reason="a second per hop; real links take microseconds")] = Field(
        description="One-way latency one hop over this link adds to a path (microseconds)."
    )
    source: str = Field(description="Where the numbers come from.")


class GpuGroup(Strict):
    """The GPUs of one server, all of one catalog type."""

    type: str = Field(description="Catalog GPU id, e.g. h100-sxm.")
    count: Annotated[PositiveInt, Within(high=MAX_GPUS_PER_NODE, reason=NODE_REASON)] = Field(
        description="GPUs in the server: node0/gpu0 .. gpu{count-1}.")

    @field_validator("type")
    @classmethod
    def _known_gpu(cls, value: str) -> str:
        try:
            load_gpu(value)
        except CatalogError as error:
            raise ValueError(error.message) from None
        return value


class NvSwitchFabric(Strict):
    """Every GPU has its own NVLink port to one switch hub; any pair talks at full port rate."""

    kind: Literal["nvswitch"]
    link: str = Field(description="Each GPU's port to the hub (a key of links), e.g. nvlink4.")


class PcieFabric(Strict):
    """GPUs talk peer-to-peer through the server's PCIe switch over their ``pcie_link``."""

    kind: Literal["pcie"]


class NvlinkBridgePairs(Strict):
    """GPUs 2k and 2k+1 share an NVLink bridge; other pairs go through the PCIe switch."""

    kind: Literal["nvlink_bridge_pairs"]
    link: str = Field(description="The bridge (a key of links), e.g. nvlink4_bridge.")


GpuFabric = kind_union(NvSwitchFabric, PcieFabric, NvlinkBridgePairs)


class Nics(Strict):
    """The server's network cards for GPU-to-GPU traffic (GPUDirect RDMA)."""

    count: Annotated[PositiveInt, Within(high=MAX_GPUS_PER_NODE, reason=NODE_REASON)] = Field(
        description="NICs in the server, at most one per GPU: GPU i uses NIC "
        "i * count // num_gpus (count = GPUs: one each; 1: all GPUs share one)."
    )
    link: str = Field(description="Each NIC's port to its switch (a key of links).")


class NodeSpec(Strict):
    """One server."""

    name: Name = Field(description="Unique among nodes and switches; GPU ids are name/gpuN.")
    gpus: GpuGroup = Field(description="The server's GPUs: one catalog type and a count.")
    pcie_link: str = Field(
        description="Each GPU's PCIe link (a key of links): GPUDirect RDMA reaches the NIC "
        "over it, and a pcie fabric's peer-to-peer traffic runs over it."
    )
    gpu_fabric: GpuFabric = Field(description="How the server's GPUs reach each other.")
    nics: Nics | None = Field(None, description="None: the server has no network for GPUs.")


class SwitchSpec(Strict):
    """A network switch (non-blocking): cables to node NICs or to other switches."""

    name: Name = Field(description="Unique among nodes and switches.")
    connects: list[str] = Field(
        min_length=1, max_length=2 * MAX_NUM_NODES,
        description="Node names (each of their NICs gets a cable of the NIC's link to this "
        "switch) or switch names (one cable of ``link``, e.g. leaf to spine).",
    )
    link: str | None = Field(
        None, description="Switch-to-switch cable (a key of links); needed when connects "
        "names a switch."
    )


class TopologySpec(Strict):
    """A topology file."""

    name: str = Field(description="Shown in reports; shipped files use their file name.")
    description: str | None = Field(None, description="One paragraph for reports.")
    links: dict[str, LinkKind] = Field(
        min_length=1, description="Link kinds by key: the wires nodes and switches refer to."
    )
    nodes: list[NodeSpec] = Field(min_length=1, max_length=MAX_NUM_NODES,
                                  description="The servers, in placement order.")
    switches: list[SwitchSpec] = Field(
        default_factory=list, max_length=MAX_NUM_NODES,
        description="The network; needed when there is more than one node."
    )


def _check_references(spec: TopologySpec) -> None:
    """Cross-field rules pydantic cannot see: unique names, link keys, switch wiring."""
    problems: list[str] = []
    links = ", ".join(spec.links)

    def need_link(key: str | None, where: str) -> None:
        if key is not None and key not in spec.links:
            problems.append(f"topology.{where}: unknown link {key!r}; defined: {links}")

    seen: set[str] = set()
    for i, node in enumerate(spec.nodes):
        where = f"nodes[{i}]"
        if node.name in seen:
            problems.append(f"topology.{where}.name: duplicate name {node.name!r}")
        seen.add(node.name)
        need_link(node.pcie_link, f"{where}.pcie_link")
        need_link(getattr(node.gpu_fabric, "link", None), f"{where}.gpu_fabric.link")
        if node.gpu_fabric.kind == "nvlink_bridge_pairs" and node.gpus.count % 2:
            problems.append(
                f"topology.{where}.gpus.count: nvlink_bridge_pairs needs an even GPU count, "
                f"got {node.gpus.count}"
            )
        if node.nics is not None:
            need_link(node.nics.link, f"{where}.nics.link")
            if node.nics.count > node.gpus.count:
                problems.append(
                    f"topology.{where}.nics.count: {node.nics.count} NICs for "
                    f"{node.gpus.count} GPUs; at most one NIC per GPU"
                )
    nodes = {node.name: node for node in spec.nodes}
    switch_names = {s.name for s in spec.switches}
    uplink: dict[str, str] = {}
    for i, switch in enumerate(spec.switches):
        where = f"switches[{i}]"
        if switch.name in seen:
            problems.append(f"topology.{where}.name: duplicate name {switch.name!r}")
        seen.add(switch.name)
        need_link(switch.link, f"{where}.link")
        for j, other in enumerate(switch.connects):
            at = f"topology.{where}.connects[{j}]"
            if other == switch.name:
                problems.append(f"{at}: a switch cannot connect to itself")
            elif other in switch_names:
                if switch.link is None:
                    problems.append(
                        f"topology.{where}.link: needed to connect switch {other!r}"
                    )
            elif other not in nodes:
                problems.append(f"{at}: unknown node or switch {other!r}")
            elif nodes[other].nics is None:
                problems.append(f"{at}: node {other!r} has no nics to connect")
            elif other in uplink:
                problems.append(f"{at}: node {other!r} is already connected to {uplink[other]!r}")
            else:
                uplink[other] = switch.name
    if problems:
        raise ValidationFailed(problems)


def _parse(data: Any) -> TopologySpec:
    spec = validate(TopologySpec, data, root="topology")
    _check_references(spec)
    return spec


def parse_topology(data: Any) -> TopologySpec:
    """Validate a topology mapping: field rules first, then the cross-field ones."""
    spec = validate(TopologySpec, data, root="topology")
    _check_references(spec)
    return spec


def replicate_node(spec: TopologySpec, count: int, *, name: str | None = None) -> TopologySpec:
    """``count`` copies of the one server of ``spec``, node0 .. node{count-1}, with every NIC
    cabled to one non-blocking leaf switch ``leaf0``, named ``name`` (default "8 x dgx-h100").

    Switches are non-blocking, so one leaf for all NICs moves what a rail-optimised fabric
    (NIC i of every node on leaf i) moves. Count 1 is ``spec`` unchanged but for its name.
    Errors are located on the scenario's ``topology: {node, count}``.
    """
    return combine_nodes([(spec, count)], name=name)


def combine_nodes(parts: list[tuple[TopologySpec, int]], *, name: str | None = None,
                  where: str = "topology") -> TopologySpec:
    """Servers of one or more one-node types, ``count`` of each in order (node0, node1, ...),
    every NIC on one non-blocking leaf switch ``leaf0``: a heterogeneous fleet such as DGX H100
    prefill nodes beside A100 decode nodes. One part of count 1 is its template renamed.

    Link kinds keep their keys; a key two templates define differently is renamed after its
    template (``a100-8x.pcie_gen4_x16``) in that template's nodes. ``where`` locates errors:
    the scenario field, and ``[i]`` per part when there are several.
    """
    if not parts:
        raise ConfigError(where, "a fleet needs at least one node type")
    total = sum(count for _, count in parts)
    if not 1 <= total <= MAX_NUM_NODES:
        at = f"{where}.count" if len(parts) == 1 else where
        raise ConfigError(at, f"{total} nodes: give 1 to {MAX_NUM_NODES}")
    for i, (spec, _) in enumerate(parts):
        at = f"{where}.node" if len(parts) == 1 else f"{where}[{i}].node"
        if len(spec.nodes) != 1:
            names = ", ".join(node.name for node in spec.nodes)
            raise ConfigError(at, f"{spec.name!r} has {len(spec.nodes)} nodes ({names}): a node "
                              "type is a topology with one node")
        if spec.switches:
            names = ", ".join(switch.name for switch in spec.switches)
            raise ConfigError(at, f"{spec.name!r} has switches ({names}): a node type has none "
                              "(its copies get one leaf switch)")
    if name is None:
        name = " + ".join(f"{count} x {spec.name}" for spec, count in parts)
    if len(parts) == 1 and total == 1:
        return parts[0][0].model_copy(update={"name": name})
    links: dict[str, dict[str, Any]] = {}
    nodes: list[dict[str, Any]] = []
    described = []
    for i, (spec, count) in enumerate(parts):
        template = spec.nodes[0]
        if template.nics is None:
            at = f"{where}.count" if len(parts) == 1 else f"{where}[{i}].count"
            nodes_text = f"{count} node{'s' if count > 1 else ''}"
            raise ConfigError(at, f"{nodes_text} of {spec.name!r}, whose node has no nics, "
                              "cannot be networked: use count 1 (alone) or a node with nics")
        renamed = {}
        for key, link in spec.model_dump()["links"].items():
            new = key if links.get(key, link) == link else f"{spec.name}.{key}"
            links[new] = link
            renamed[key] = new
        node = template.model_dump()
        node["pcie_link"] = renamed[node["pcie_link"]]
        if "link" in node["gpu_fabric"]:
            node["gpu_fabric"]["link"] = renamed[node["gpu_fabric"]["link"]]
        node["nics"]["link"] = renamed[node["nics"]["link"]]
        for _ in range(count):
            nodes.append({**node, "name": f"node{len(nodes)}"})
        described.append(f"{count} x {spec.name} ({template.gpus.count} x {template.gpus.type}, "
                         f"{template.nics.count} {template.nics.link} NICs each)")
    data = {
        "name": name,
        "description": ", ".join(described) + ", every NIC on one non-blocking leaf switch.",
        "links": links,
        "nodes": nodes,
        "switches": [{"name": "leaf0", "connects": [n["name"] for n in nodes]}],
    }
    return parse_topology(data)
