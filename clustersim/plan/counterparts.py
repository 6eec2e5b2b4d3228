"""The colocated and the disaggregated counterpart of a scenario, on the GPUs it has.

    the scenario                            colocated side              disaggregated side
    colocated layout, one pool of N         as written                  N // 2 prefill, the
                                                                        rest decode
    no layout, a topology                   every instance the          half prefill, half
                                            topology holds              decode
    one instance (no layout, no topology,   two instances: the least    1 prefill + 1 decode
    or a layout of one)                     that holds a split
    disaggregated layout                    each pool colocated on      as written
                                            its own GPUs

Every pool keeps its GPU type, tensor-, pipeline- and data-parallel shape (with expert
parallelism), its engine settings and its nodes; both sides are placed first-fit in the same
order, so they run on the same GPUs (checked with the topology's own placement). A scenario
without a topology gets its GPU's server (the planner's, ``plan.fleet``), as few as hold both
sides, since a split's KV handoff runs over links; so does one whose topology holds a single
instance and is copies of one server on a leaf switch (``dgx-h100-x2`` is two DGX H100: an
instance of 16 GPUs splits over four). A failure of an instance names an instance
of the scenario's own layout: it moves to the other side's instance on the same GPUs, or is
refused with what to write instead. Node and link failures name the topology, the same on
both sides.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain
from typing import Any

from clustersim.cluster.build import DEFAULT_POOL
from clustersim.cluster.topology import Topology, load_spec
from clustersim.cluster.topology_spec import replicate_node
from clustersim.errors import ClusterSimError, ConfigError
from clustersim.plan.fleet import SHIPPED_SERVERS
from clustersim.scenario import Scenario, parse_scenario
from clustersim.scenario.faults import InstanceFault
from clustersim.scenario.layout import LayoutSpec, PoolSpec, ReplicatedNode, topology_label

Placement = list[tuple[str, tuple[str, ...]]]
"""Every instance a failure can name, with its GPUs, in placement order."""


@dataclass(frozen=True, slots=True)
class Counterparts:
    """The scenario colocated and disaggregated, and what compare chose on the way."""

    colocated: Scenario
    disaggregated: Scenario
    notes: tuple[str, ...]
    """One line each: the GPUs both sides run on and why, the colocated router, the failures
    moved to the other side's instance."""


def counterparts(scenario: Scenario) -> Counterparts:
    """The scenario's colocated and disaggregated versions on the same GPUs and traffic (the
    table in this module's docstring); a layout compare cannot split or join is a
    ``ConfigError`` saying what to write instead."""
    layout = scenario.layout
    topology = (None if scenario.topology is None
                else Topology.load(scenario.topology, base_dir=scenario.base_dir))
    if layout is not None and layout.kind == "three_pool":
        raise ConfigError("layout.kind", "compare takes a colocated or a disaggregated layout, "
                          "not three_pool: give it the colocated or the disaggregated one")
    if layout is None or layout.kind == "colocated":
        return _split(scenario, topology)
    return _join(scenario, topology)


# --------------------------------------------------------------- colocated -> split
def _split(scenario: Scenario, topology: Topology | None) -> Counterparts:
    """A colocated scenario and its split: the pool's instances, half prefill (rounded down)
    and the rest decode, each keeping the pool's shape, engine and nodes."""
    layout = scenario.layout
    explicit = layout is not None
    pools = layout.pools if layout is not None else [PoolSpec(name=DEFAULT_POOL)]
    if len(pools) != 1:
        raise ConfigError("layout.pools", f"compare splits one colocated pool into prefill and "
                          f"decode, this layout has {len(pools)}: compare each pool in a "
                          "scenario of its own, or give compare a disaggregated layout")
    pool = pools[0]
    shape = _shape_label(scenario, pool)
    if explicit:
        count = pool.instances
        why = f"GPUs: the layout's {count} instance{'s' * (count > 1)} of {shape}"
    elif topology is not None:
        count = _instances_held(topology, scenario, pool)
        why = (f"GPUs: every instance of {shape} that topology "
               f"{topology_label(scenario.topology)} holds, {count} (the scenario has no "
               "layout: simulate runs one)")
    else:
        count = 1
        why = f"GPUs: the scenario's one instance of {shape}"
    grown = count == 1
    if grown:
        count = 2
        why += (", and a split needs two (one prefill, one decode): both sides get two, the "
                "least that holds a split")
    notes = [why]
    fleet = None
    if topology is None:
        fleet, topology = _fleet(scenario, pool, count, shape)
        notes.append(f"topology: none in the scenario, and a split's KV handoff runs over "
                     f"links: both sides run on {topology_label(fleet)} (the GPU's server, as "
                     f"few as hold {count} instances)")
    elif grown and not _fits(topology, scenario, pool, 2):
        server = None if pool.nodes is not None else _copies_of(scenario, topology, pool)
        label = topology_label(scenario.topology)
        servers = len(topology.spec.nodes)
        if server is None:
            raise ConfigError("topology", f"{label} holds one instance of {shape}, and a "
                              "split needs two (one prefill, one decode): give compare a "
                              "topology with room for two, e.g. {node: NAME, count: N} "
                              "servers")
        fleet, topology = _fleet(scenario, pool, count, shape, server)
        notes.append(f"topology: {label} is {servers} x {server} and holds one instance, and "
                     f"a split needs two: both sides run on {topology_label(fleet)} (the same "
                     f"server, as few as hold {count} instances)")
    colocated_layout = LayoutSpec(kind="colocated", pools=[pool]) if layout is None else layout
    pool = pool.model_copy(update={"instances": count})
    colocated_layout = colocated_layout.model_copy(update={"pools": [pool]})
    num_prefill = count // 2
    # the split's routers: the layout's own where it sets them, else its colocated router
    routers = {key: getattr(colocated_layout, key)
               if key in colocated_layout.model_fields_set else colocated_layout.router
               for key in ("prefill_router", "decode_router")}
    split_layout = colocated_layout.model_copy(update={
        "kind": "disaggregated",
        "pools": [
            pool.model_copy(update={"name": "prefill", "role": "prefill",
                                    "instances": num_prefill}),
            pool.model_copy(update={"name": "decode", "role": "decode",
                                    "instances": count - num_prefill}),
        ],
        **routers,
    })
    colocated = (scenario if explicit and not grown and fleet is None
                 else _derived(scenario, colocated_layout, fleet))
    tier = pool.engine.kv_offloading_size if pool.engine is not None else None
    tier = tier or scenario.engine.kv_offloading_size
    split_from = scenario
    if tier:
        # the CPU KV tier is modelled on colocated engines only: the split runs without it
        split_from = scenario.model_copy(update={"engine": scenario.engine.model_copy(
            update={"kv_offloading_size": None})})
        split_layout = split_layout.model_copy(update={"pools": [
            p if p.engine is None else p.model_copy(update={"engine": p.engine.model_copy(
                update={"kv_offloading_size": None})}) for p in split_layout.pools]})
    split = _derived(split_from, split_layout, fleet)
    notes.append(f"layouts: colocated {count} instances; disaggregated {num_prefill} prefill + "
                 f"{count - num_prefill} decode, routed by {routers['prefill_router'].kind} "
                 f"(prefill) and {routers['decode_router'].kind} (decode); every instance "
                 "keeps the pool's parallelism and engine settings")
    if tier:
        notes.append(f"CPU KV tier: the colocated side keeps its {tier:g} GiB per engine; the "
                     "split runs without one (clustersim models the tier on colocated engines "
                     "only, where vLLM would run it beside the split's KV connector)")
    pp = _parallel(scenario, pool)[1]
    if pp > 1:
        notes.append(f"pipeline stages: the handoff moves each prefill stage's layers to the "
                     f"decode stage that holds them, {pp} moves at once, as vllm-rbln's NIXL "
                     "connector does; upstream vLLM serves staged prefill engines only with "
                     "NixlPushConnector, into decode engines without stages "
                     "(docs/scenarios.md)")
    return _with_faults(scenario, colocated, split, topology, notes, source="colocated")


def _instances_held(topology: Topology, scenario: Scenario, pool: PoolSpec) -> int:
    """How many instances of the pool the topology places (at least the scenario's one:
    where even that does not fit, the error the run would give)."""
    size = _gpus_per_instance(scenario, pool)
    gpu = pool.gpu or scenario.gpu
    count = sum(node.gpus.count for node in topology.spec.nodes if node.gpus.type == gpu
                and (pool.nodes is None or node.name in pool.nodes)) // size
    while count > 1:
        try:
            topology.place([_placement_group(scenario, pool.model_copy(
                update={"instances": count}))])
            return count
        except ClusterSimError:
            count -= 1
    topology.place([_placement_group(scenario, pool.model_copy(update={"instances": 1}))])
    return 1


def _fleet(scenario: Scenario, pool: PoolSpec, count: int, shape: str,
           server: str | None = None) -> tuple[ReplicatedNode, Topology]:
    """The fewest copies of ``server`` (default the pool GPU's: ``plan.nodes``' or the shipped
    one) that place ``count`` instances of the pool, on one leaf switch."""
    if server is None:
        server = _server_of(scenario, pool)
    if server is None:
        gpu = pool.gpu or scenario.gpu
        raise ConfigError("topology", f"a split's KV handoff runs over a topology's links and "
                          f"{gpu} has no shipped server: give the scenario a topology (e.g. "
                          "topology: {node: my-server.yaml, count: 2})")
    networked = load_spec(server, scenario.base_dir, where="topology").nodes[0].nics is not None
    size = _gpus_per_instance(scenario, pool) * count
    anywhere = pool.model_copy(update={"nodes": None})
    reason: str | None = None
    for num_servers in range(1, size + 1 if networked else 2):
        fleet = ReplicatedNode(node=server, count=num_servers)
        topology = Topology.load(fleet, base_dir=scenario.base_dir)
        reason = _misfit(topology, scenario, anywhere, count)
        if reason is None:
            return fleet, topology
    raise ConfigError("topology", f"{count} instances of {shape} do not fit "
                      f"{'' if networked else 'one '}{server} server{'s' * networked} "
                      f"({reason}): give the scenario a topology that holds them")


def _server_of(scenario: Scenario, pool: PoolSpec) -> str | None:
    """The pool GPU's server: ``plan.nodes``' or the shipped one (None: it has none)."""
    gpu = pool.gpu or scenario.gpu
    nodes = scenario.plan.nodes if scenario.plan is not None else {}
    return nodes.get(gpu) or SHIPPED_SERVERS.get(gpu)


def _copies_of(scenario: Scenario, topology: Topology, pool: PoolSpec) -> str | None:
    """The server the scenario's topology is copies of, on one leaf switch, as ``{node: S,
    count: N}`` builds them (its own ``{node, count}``, or a file such as dgx-h100-x2 that
    wires the pool GPU's server that way); None: it is something else."""
    ref = scenario.topology
    if isinstance(ref, ReplicatedNode):
        return ref.node
    server = _server_of(scenario, pool)
    if server is None or isinstance(ref, list):
        return None
    copies = replicate_node(load_spec(server, scenario.base_dir), len(topology.spec.nodes))
    fields = {"name", "description"}
    return server if copies.model_dump(exclude=fields) == topology.spec.model_dump(
        exclude=fields) else None


def _fits(topology: Topology, scenario: Scenario, pool: PoolSpec, count: int) -> bool:
    """Whether the topology places ``count`` instances of the pool."""
    return _misfit(topology, scenario, pool, count) is None


def _misfit(topology: Topology, scenario: Scenario, pool: PoolSpec, count: int) -> str | None:
    """Why the topology cannot place ``count`` instances of the pool (None: it can)."""
    try:
        topology.place([_placement_group(scenario, pool.model_copy(
            update={"instances": count}))])
    except ClusterSimError as error:
        return error.message
    return None


# --------------------------------------------------------------- split -> colocated
def _join(scenario: Scenario, topology: Topology | None) -> Counterparts:
    """A disaggregated scenario and its colocated counterpart: each pool serving both phases
    on its own GPUs, with its own shape and engine; one pool when they are all alike and
    one pool lands on the same GPUs."""
    layout = scenario.layout
    assert layout is not None
    if topology is None:  # (the run says the same)
        raise ConfigError("topology", f"layout {layout.kind} needs a topology: the KV handoff "
                          "runs over its links (e.g. topology: dgx-h100-x2)")
    apart = [pool.model_copy(update={"name": f"colocated_{pool.name}", "role": "colocated"})
             for pool in layout.pools]
    first = layout.pools[0]
    alike = all(_same_engine(scenario, p, first) for p in layout.pools[1:])
    pools = apart
    if alike:
        named = [p.nodes for p in layout.pools]
        nodes = (None if any(n is None for n in named)
                 else list(dict.fromkeys(chain.from_iterable(n for n in named if n))))
        one = first.model_copy(update={
            "name": "colocated", "role": "colocated", "nodes": nodes,
            "instances": sum(p.instances for p in layout.pools)})
        gpus = [g for _, g in _placement(scenario, [one], topology)]
        if gpus == [g for _, g in _placement(scenario, apart, topology)]:
            pools = [one]
    router = layout.router if "router" in layout.model_fields_set else layout.decode_router
    colocated = _derived(scenario, layout.model_copy(update={
        "kind": "colocated", "pools": pools, "router": router}))
    which = ("the layout's router" if "router" in layout.model_fields_set
             else "the split's decode_router")
    joined = " + ".join(f"{p.instances} {p.name} of {_shape_label(scenario, p)}"
                        for p in layout.pools)
    how = (f"one pool of the {pools[0].instances} instances" if len(pools) == 1
           else "each pool serving both phases on its own GPUs")
    notes = [f"GPUs: the layout's, {joined}",
             f"layouts: disaggregated as written; colocated {how}, with its parallelism and "
             f"engine settings, routed by {router.kind} ({which})"]
    return _with_faults(scenario, colocated, scenario, topology, notes,
                        source="disaggregated")


def _same_engine(scenario: Scenario, a: PoolSpec, b: PoolSpec) -> bool:
    """Whether two pools run the same engines: GPU, parallel shape, engine settings."""
    def key(pool: PoolSpec) -> tuple[Any, ...]:
        engine = {} if pool.engine is None else pool.engine.model_dump(exclude_unset=True)
        ep = (pool.enable_expert_parallel if pool.enable_expert_parallel is not None
              else scenario.enable_expert_parallel)
        return (pool.gpu or scenario.gpu, *_parallel(scenario, pool), ep, engine)
    return key(a) == key(b)


# ------------------------------------------------------------------- failures
def _with_faults(scenario: Scenario, colocated: Scenario, split: Scenario,
                 topology: Topology, notes: list[str], source: str) -> Counterparts:
    """Both sides with the scenario's instance failures moved to the side that does not have
    the instance they name (``source``: the side whose layout is the scenario's own); the
    GPUs both sides run on."""
    sides = {"colocated": colocated, "disaggregated": split}
    placed = {}
    for label, side in sides.items():
        assert side.layout is not None  # (both sides have one by now)
        placed[label] = _placement(scenario, side.layout.pools, topology)
    order = {gpu: i for i, gpu in enumerate(topology.gpu_ids())}
    gpus = {label: sorted((g for _, group in p for g in group), key=order.__getitem__)
            for label, p in placed.items()}
    if gpus["colocated"] == gpus["disaggregated"]:
        notes.append(f"both sides run on the same {_describe_gpus(gpus['colocated'], topology)}")
    else:  # (not reached: both sides are placed alike)
        notes += [f"{label} runs on {_describe_gpus(g, topology)}" for label, g in gpus.items()]
    faults = scenario.faults
    if faults is not None and any(isinstance(e, InstanceFault) for e in faults.events):
        target = "disaggregated" if source == "colocated" else "colocated"
        moved = _move_faults(faults, placed[source], placed[target], target, notes)
        sides[target] = sides[target].model_copy(update={"faults": moved})
    return Counterparts(sides["colocated"], sides["disaggregated"], tuple(notes))


def _move_faults(faults: Any, source: Placement, target: Placement, label: str,
                 notes: list[str]) -> Any:
    """The failures with each instance failure renamed to ``target``'s instance on the same
    GPUs; one that has none is a ``ConfigError`` saying what to fail instead."""
    own = dict(source)
    by_gpus = {gpus: name for name, gpus in target}
    events = []
    for i, event in enumerate(faults.events):
        if not isinstance(event, InstanceFault):
            events.append(event)
            continue
        where = f"faults.events[{i}].name"
        group, dot, rank = event.name.rpartition(".dp")
        if event.name not in own and dot and rank.isdigit() and group in own:
            notes.append(f"failure of {event.name} at {event.at_s:g} s: a rank of {group}, "
                         "which fails whole")
            event = event.model_copy(update={"name": group})
        if event.name not in own:
            raise ConfigError(where, f"no instance {event.name!r}; instances: "
                              f"{', '.join(own)}")
        gpus = own[event.name]
        name = by_gpus.get(gpus)
        if name is None:
            holders = [n for n, g in target if set(g) & set(gpus)]
            shown = ", ".join(holders[:3]) + (f" and {len(holders) - 3} more"
                                              if len(holders) > 3 else "")
            raise ConfigError(where, f"{event.name} runs on {_describe_gpus(list(gpus))}, "
                              f"which the {label} side runs as part of {shown}, not as one "
                              "instance, so compare cannot fail the same GPUs on both sides: "
                              "fail their node instead (kind: node), or compare without it")
        if name != event.name:
            notes.append(f"failure of {event.name} at {event.at_s:g} s: on the {label} side "
                         f"{name}, the instance on the same GPUs ({_describe_gpus(list(gpus))})")
        events.append(event.model_copy(update={"name": name}))
    return faults.model_copy(update={"events": events})


# ------------------------------------------------------------------ placement
def _parallel(scenario: Scenario, pool: PoolSpec) -> tuple[int, int, int]:
    """The pool's (tensor, pipeline, data)-parallel sizes, its own or the scenario's."""
    return (pool.tensor_parallel_size or scenario.tensor_parallel_size,
            pool.pipeline_parallel_size or scenario.pipeline_parallel_size,
            pool.data_parallel_size or scenario.data_parallel_size)


def _gpus_per_instance(scenario: Scenario, pool: PoolSpec) -> int:
    tp, pp, dp = _parallel(scenario, pool)
    return tp * pp * dp


def _shape_label(scenario: Scenario, pool: PoolSpec) -> str:
    """``8 x h100-sxm (TP1 x DP8, expert-parallel)``: one instance's GPUs and shape."""
    tp, pp, dp = _parallel(scenario, pool)
    ep = (pool.enable_expert_parallel if pool.enable_expert_parallel is not None
          else scenario.enable_expert_parallel)
    parts = [f"TP{tp}"] + [f"PP{pp}"] * (pp > 1) + [f"DP{dp}"] * (dp > 1)
    return (f"{tp * pp * dp} x {pool.gpu or scenario.gpu} ({' x '.join(parts)}"
            f"{', expert-parallel' if ep else ''})")


def _placement_group(scenario: Scenario, pool: PoolSpec) -> tuple[Any, ...]:
    """The pool as ``Topology.place`` takes it, as the cluster builder hands it over."""
    tp = _parallel(scenario, pool)[0]
    return (pool.name, pool.gpu or scenario.gpu, _gpus_per_instance(scenario, pool),
            pool.instances, pool.nodes, tp)


def _placement(scenario: Scenario, pools: list[PoolSpec], topology: Topology) -> Placement:
    """Every instance a failure can name, with its GPUs: each pool's instances, a
    data-parallel one whole in every pool kind (one rank's failure takes the group, so a
    failure naming a rank, ``pool-j.dpR``, names its group)."""
    try:
        placed = topology.place([_placement_group(scenario, p) for p in pools])
    except ClusterSimError as error:
        raise type(error)(f"layout.{error.path}", error.message) from None
    return [(f"{pool.name}-{j}", tuple(group)) for pool in pools
            for j, group in enumerate(placed[pool.name])]


def _describe_gpus(gpus: list[str], topology: Topology | None = None) -> str:
    """``node0/gpu0-1, node1/gpu0-1`` (GPU ranges per node), led by ``4 x h100-sxm: `` with
    the topology that says their types."""
    by_node: dict[str, list[int]] = {}
    for gpu in gpus:
        node, index = gpu.rsplit("/gpu", 1)
        by_node.setdefault(node, []).append(int(index))
    spans = [f"{node}/gpu{_ranges(sorted(indices))}" for node, indices in by_node.items()]
    if len(spans) > 4:  # a wide fleet: the first and the last
        spans = [*spans[:2], f"... {len(spans) - 4} more nodes ...", *spans[-2:]]
    if topology is None:
        return ", ".join(spans)
    types: dict[str, int] = {}
    for gpu in gpus:
        kind = topology.gpu_type(gpu)
        types[kind] = types.get(kind, 0) + 1
    kinds = " + ".join(f"{n} x {kind}" for kind, n in types.items())
    return f"{kinds}: {', '.join(spans)}"


def _ranges(indices: list[int]) -> str:
    """``0-3,6``: consecutive runs of sorted GPU indices."""
    runs: list[list[int]] = []
    for i in indices:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def _derived(scenario: Scenario, layout: LayoutSpec,
             topology: ReplicatedNode | None = None) -> Scenario:
    """The scenario with another layout (and topology), validated again as a file would be
    (GPU limits), its folder kept for the paths inside it."""
    update: dict[str, Any] = {"layout": layout}
    if topology is not None:
        update["topology"] = topology
    copy = scenario.model_copy(update=update)
    derived = parse_scenario(copy.model_dump(exclude_unset=True, by_alias=True))
    derived._base_dir = scenario.base_dir
    return derived
