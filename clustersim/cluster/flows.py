"""KV handoffs as fluid flows that share link bandwidth max-min fairly.

A transfer from a TP group to a TP group is split into parallel sub-flows, one per rank of the
larger group (heterogeneous TP pairs rank ``i`` of the larger with ``i * small // large`` of
the smaller)::

    prefill TP2 ─ gpu0 ──┐
                 gpu1 ──┴─> decode TP1 gpu0      2 sub-flows of num_bytes / 2

A handoff between pipelined engines (``transfer_stages``) is one such split per pair of
stages that hold the same layers, their bytes each, all in one transfer (``cluster.handoff``).

Each sub-flow waits its path latency (plus any extra), then drains at its max-min fair share
of every directed edge it crosses. Shares are recomputed whenever a sub-flow starts or ends;
between those instants every rate is constant, so the only wake-up needed is the earliest
completion.

A failed link (``cluster.faults``) takes its edges out: every sub-flow crossing one moves,
with the bytes it has left, to the best path that avoids every failed edge (no new latency),
and a transfer with a sub-flow that has no such path fails. Transfers requested later route
around the failed edges; a repaired link takes new transfers again (moved ones stay put).

The core is pure (:func:`max_min_rates`, :class:`FluidState`, :func:`drain_alone`) and is
tested without SimPy; :class:`FlowNetwork` is the SimPy shell that the cluster calls.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from heapq import heapify as _heapify
from heapq import heappop as _heappop
from heapq import heappush as _heappush
from typing import Final, cast

from clustersim.cluster.topology import Topology
from clustersim.engine.events import Env, Outcome, alarm, now_of

heapify: Final = _heapify
heappop: Final = _heappop
heappush: Final = _heappush

Edge = Hashable
"""An edge as the pure core sees it: anything hashable (FlowNetwork uses small ints)."""

RATE_CACHE_SIZE: Final = 4096
"""Configurations of active paths whose max-min rates a FluidState remembers."""
DONE_BYTES: Final = 1e-6
"""A sub-flow with at most this many bytes left is finished (float round-off, not data)."""


# -------------------------------------------------------------- pure core
def narrowest(edges: Sequence[Edge], capacity: Mapping[Edge, float]) -> float:
    """One flow's max-min rate: the least capacity along its edges (``inf`` for none)."""
    rate = math.inf
    for edge in edges:
        edge_capacity = float(capacity[edge])
        if edge_capacity < rate:
            rate = edge_capacity
    return rate


def max_min_rates(
    paths: Sequence[Sequence[Hashable]], capacity: Mapping[Hashable, float]
) -> list[float]:
    """Max-min fair rates of flows over shared edges (progressive filling).

    Repeatedly take the most constrained edge (capacity left / flows still growing on it;
    the edge seen first in flow order on a tie), give its growing flows that share, and take
    it off every edge they cross. A flow crossing no edge gets ``inf``. Flows with the same
    path get the same rate, so they are filled as one class of ``count`` flows.
    """
    if len(paths) == 1:  # one flow: the narrowest edge (the common case, done directly)
        return [narrowest(paths[0], capacity)]
    class_of: list[int] = []
    classes: dict[tuple[Hashable, ...], int] = {}
    for edges in paths:
        class_of.append(classes.setdefault(tuple(edges), len(classes)))
    members = list(classes)
    count = [0] * len(members)
    for c in class_of:
        count[c] += 1
    users: dict[Hashable, list[int]] = {}
    growing: dict[Hashable, int] = {}
    for c, edges in enumerate(members):
        for edge in edges:
            users.setdefault(edge, []).append(c)
            growing[edge] = growing.get(edge, 0) + count[c]
    order = {edge: i for i, edge in enumerate(users)}
    left = {edge: float(capacity[edge]) for edge in users}
    heap = [(left[e] / growing[e], order[e], e) for e in users]
    heapify(heap)
    rates = [math.inf] * len(members)
    frozen = [not edges for edges in members]
    while heap:
        share, _, edge = heappop(heap)
        if edge not in growing or share != left[edge] / growing[edge]:
            continue  # stale: the edge changed since this entry was pushed
        for c in users[edge]:
            if frozen[c]:
                continue
            frozen[c] = True
            rates[c] = share
            for crossed in members[c]:
                rest = left[crossed] - share * count[c]
                left[crossed] = rest if rest > 0.0 else 0.0
                growing[crossed] -= count[c]
                if growing[crossed]:
                    heappush(
                        heap, (left[crossed] / growing[crossed], order[crossed], crossed)
                    )
                else:
                    del growing[crossed]
    return [rates[c] for c in class_of]


@dataclass(slots=True, init=False)
class Drain:
    """One sub-flow while it moves bytes. (The ``__init__``s of this module's dataclasses
    are written out so that they compile: a run builds them for every transfer.)"""

    edges: tuple[Edge, ...]
    num_bytes: float
    remaining: float
    rate: float = 0.0
    due_s: float = math.inf
    """When it finishes at the current rates (set by :meth:`FluidState.replan`)."""

    def __init__(self, edges: tuple[Edge, ...], num_bytes: float, remaining: float) -> None:
        self.edges = edges
        self.num_bytes = num_bytes
        self.remaining = remaining
        self.rate = 0.0
        self.due_s = math.inf


class FluidState:
    """Active sub-flows draining at max-min fair rates. Time is passed in: no SimPy here.

    Call :meth:`advance` to now before every change, then :meth:`replan` after it. A change
    re-rates only the sub-flows that share links with it, directly or through others (their
    connected component), one component at a time: max-min fair rates of flows that share no
    link are independent, and progressive filling over one component takes the same steps, in
    the same order, as over all of them, so the rates are the same to the bit.
    """

    def __init__(self, capacity: Mapping[Edge, float], now_s: float = 0.0) -> None:
        self.capacity = capacity
        self.now_s = now_s
        self.active: dict[int, Drain] = {}
        """Key -> drain, in insertion (creation) order: the order every tie is broken in."""
        self._seq: dict[int, int] = {}
        """Key -> its place in the creation order (a reroute keeps it)."""
        self._next_seq = 0
        self._on_edge: dict[Edge, dict[int, None]] = {}
        """Edge -> the active sub-flows crossing it (keys, in the order they came)."""
        self._dirty_edges: dict[Edge, None] = {}
        """Edges whose set of sub-flows changed since the last re-plan."""
        self._dirty_keys: dict[int, None] = {}
        """Sub-flows added or rerouted since the last re-plan (their edges are dirty too; one
        that crosses no link is found only here)."""
        self._rates: dict[tuple[tuple[tuple[int, ...], ...], tuple[float, ...]],
                          list[float]] = {}
        """max_min_rates by the shape of the re-rated paths: each path's edges numbered in the
        order they first appear, and those edges' capacities. Progressive filling reads
        nothing else (it orders edges by first appearance too), so paths of the same shape get
        the same rates to the bit; a fleet's handoffs meet the same few shapes again and again,
        between whichever servers."""

    def advance(self, now_s: float) -> None:
        """Move every active sub-flow's bytes on by ``rate x elapsed``."""
        elapsed = now_s - self.now_s
        if elapsed < 0:
            raise ValueError(f"time runs backwards: {now_s} < {self.now_s}")
        if elapsed > 0:
            for drain in self.active.values():
                drain.remaining -= drain.rate * elapsed
        self.now_s = now_s

    def add(self, key: int, edges: Sequence[Edge], num_bytes: float) -> None:
        drain = Drain(tuple(edges), num_bytes, float(num_bytes))
        self.active[key] = drain
        self._seq[key] = self._next_seq
        self._next_seq += 1
        self._index(key, drain.edges)

    def _index(self, key: int, edges: tuple[Edge, ...]) -> None:
        on_edge = self._on_edge
        for edge in edges:
            users = on_edge.get(edge)
            if users is None:
                users = on_edge[edge] = {}
            users[key] = None
            self._dirty_edges[edge] = None
        self._dirty_keys[key] = None

    def _unindex(self, key: int, edges: tuple[Edge, ...]) -> None:
        on_edge = self._on_edge
        for edge in edges:
            users = on_edge[edge]
            del users[key]
            if not users:
                del on_edge[edge]
            self._dirty_edges[edge] = None

    def _affected(self) -> list[list[int]]:
        """The active sub-flows whose rates a change since the last re-plan may move: every
        one connected through shared links to a changed one, by connected component, each
        in creation order."""
        active, on_edge = self.active, self._on_edge
        seen: dict[int, None] = {}
        seeds: list[int] = []
        for key in self._dirty_keys:
            if key in active:
                seeds.append(key)
        for edge in self._dirty_edges:
            users = on_edge.get(edge)
            if users is not None:
                for key in users:
                    seeds.append(key)
        self._dirty_keys = {}
        self._dirty_edges = {}
        seq = self._seq
        components: list[list[int]] = []
        for seed in seeds:
            if seed in seen:
                continue
            seen[seed] = None
            component = [seed]
            stack = [seed]
            while stack:
                key = stack.pop()
                for edge in active[key].edges:
                    for other in on_edge[edge]:
                        if other not in seen:
                            seen[other] = None
                            component.append(other)
                            stack.append(other)
            if len(component) > 1:
                component.sort(key=seq.__getitem__)
            components.append(component)
        return components

    def replan(self) -> float | None:
        """Recompute the changed rates and every due time; the delay to the earliest
        completion (None: idle)."""
        active = self.active
        for keys in self._affected():
            self._rerate([active[key] for key in keys])
        earliest = None
        now = self.now_s
        for drain in active.values():
            delay = max(drain.remaining, 0.0) / drain.rate
            drain.due_s = now + delay
            if earliest is None or delay < earliest:
                earliest = delay
        return earliest

    def _rerate(self, drains: list[Drain]) -> None:
        """Set the max-min fair rates of ``drains``: one connected component of sub-flows
        (through shared links), in creation order. (The copies of one handoff on different
        ranks' links are components of the same shape: one filling serves them all.)"""
        capacity = self.capacity
        if len(drains) == 1:  # alone on its links: no shape to build
            drains[0].rate = narrowest(drains[0].edges, capacity)
            return
        numbers: dict[Edge, int] = {}
        shape: list[tuple[int, ...]] = []
        for drain in drains:
            shape.append(tuple([numbers.setdefault(edge, len(numbers)) for edge in drain.edges]))
        capacities: dict[Edge, float] = {}
        for edge, number in numbers.items():
            capacities[number] = float(capacity[edge])
        key = (tuple(shape), tuple(capacities.values()))
        rates = self._rates.get(key)
        if rates is None:
            if len(self._rates) >= RATE_CACHE_SIZE:
                self._rates.clear()
            rates = self._rates[key] = max_min_rates(shape, capacities)
        for i in range(len(drains)):
            drains[i].rate = rates[i]

    def reroute(self, key: int, edges: Sequence[Edge]) -> float:
        """The sub-flow goes on over ``edges`` with the bytes it has left; returns the bytes
        it moved over its old ones. Call :meth:`replan` after."""
        drain = self.active[key]
        left = max(drain.remaining, 0.0)
        self._unindex(key, drain.edges)
        moved = Drain(tuple(edges), left, left)
        self.active[key] = moved  # keeps its place in the order
        self._index(key, moved.edges)
        return drain.num_bytes - left

    def remove(self, key: int) -> tuple[tuple[Edge, ...], float]:
        """Drop an unfinished sub-flow; its edges and the bytes it moved over them."""
        drain = self.active.pop(key)
        del self._seq[key]
        self._unindex(key, drain.edges)
        return drain.edges, drain.num_bytes - max(drain.remaining, 0.0)

    def pop_done(self) -> list[int]:
        """Remove and return, in creation order, the sub-flows that are finished by now."""
        done = [
            key for key, d in self.active.items()
            if d.due_s <= self.now_s or d.remaining <= DONE_BYTES
        ]
        for key in done:
            drain = self.active[key]
            del self.active[key]
            del self._seq[key]
            self._unindex(key, drain.edges)
        return done

    def carried(self) -> dict[Edge, float]:
        """Bytes the active sub-flows have moved so far, per edge."""
        moved: dict[Edge, float] = {}
        for drain in self.active.values():
            done = drain.num_bytes - max(drain.remaining, 0.0)
            for edge in drain.edges:
                moved[edge] = moved.get(edge, 0.0) + done
        return moved


def drain_alone(
    flows: Sequence[tuple[float, Sequence[Edge], int]], capacity: Mapping[Edge, float]
) -> list[float]:
    """Finish times of ``(start_s, edges, num_bytes)`` sub-flows sharing otherwise idle links.

    A sub-flow with no bytes or no edges finishes at its start.
    """
    if len(flows) == 1:  # alone on its path: start + bytes / the narrowest edge
        ((start, edges, size),) = flows
        if not edges or not size:
            return [start]
        return [start + float(size) / narrowest(edges, capacity)]
    ends = [start if not edges or not size else math.nan for start, edges, size in flows]
    pending = sorted(
        (start, i) for i, (start, edges, size) in enumerate(flows) if edges and size
    )
    state = FluidState(capacity, pending[0][0] if pending else 0.0)
    while pending or state.active:
        delay = state.replan()
        next_start = pending[0][0] if pending else math.inf
        due = state.now_s + delay if delay is not None else math.inf
        state.advance(min(next_start, due))
        for key in state.pop_done():
            ends[key] = state.now_s
        while pending and pending[0][0] <= state.now_s:
            _, i = pending.pop(0)
            state.add(i, flows[i][1], flows[i][2])
    return ends


def pair_ranks(src_gpus: Sequence[str], dst_gpus: Sequence[str]) -> list[tuple[str, str]]:
    """Sub-flow endpoints: rank i of the larger group with rank ``i * small // large``."""
    if len(src_gpus) >= len(dst_gpus):
        return [(s, dst_gpus[i * len(dst_gpus) // len(src_gpus)]) for i, s in enumerate(src_gpus)]
    return [(src_gpus[i * len(src_gpus) // len(dst_gpus)], d) for i, d in enumerate(dst_gpus)]


def split_bytes(num_bytes: int, parts: int) -> list[int]:
    """``num_bytes`` in ``parts`` near-equal integers (the first ones one byte larger)."""
    base, extra = divmod(num_bytes, parts)
    return [base + (i < extra) for i in range(parts)]


# ------------------------------------------------------------ SimPy shell
@dataclass(slots=True, init=False)
class TransferRecord:
    """One finished KV handoff (read only)."""

    tag: str
    src: tuple[str, ...]
    dst: tuple[str, ...]
    path: str
    """The first sub-flow's path, vertices joined by ``>`` (``node0/gpu0>node0/nvswitch>...``)."""
    bytes: int
    requested_s: float
    start_s: float
    """When the first byte moved (request + the shortest sub-flow latency)."""
    end_s: float
    ideal_s: float | None
    """Duration alone on idle links (its own sub-flows still share what they both cross);
    None when the network was asked not to work it out (a lean run)."""

    def __init__(self, tag: str, src: tuple[str, ...], dst: tuple[str, ...], path: str,
                 bytes: int, requested_s: float, start_s: float, end_s: float,
                 ideal_s: float | None) -> None:
        self.tag = tag
        self.src = src
        self.dst = dst
        self.path = path
        self.bytes = bytes
        self.requested_s = requested_s
        self.start_s = start_s
        self.end_s = end_s
        self.ideal_s = ideal_s

    @property
    def queue_s(self) -> float | None:
        """Time lost to other traffic."""
        if self.ideal_s is None:
            return None
        return self.end_s - self.requested_s - self.ideal_s


class TransferFailed(Exception):
    """A KV transfer that cannot complete: a link it needs is down, with no way around."""

    def __init__(self, message: str, cause: str) -> None:
        super().__init__(message, cause)  # (SimPy copies a failure from its args)
        self.cause = cause
        """The failure that cut it (a fault's label)."""

    def __str__(self) -> str:
        return f"{self.args[0]}: {self.cause}"


@dataclass(slots=True, init=False)
class _Transfer:
    tag: str
    src: tuple[str, ...]
    dst: tuple[str, ...]
    path: str
    num_bytes: int
    requested_s: float
    start_s: float
    ideal_s: float | None
    event: Outcome
    num_pending: int
    sub_flows: dict[int, tuple[tuple[int, ...], float]] = field(default_factory=dict)
    """Key -> (edges, bytes still to count on them when it finishes)."""
    ends: dict[int, tuple[str, str]] = field(default_factory=dict)
    """Key -> the sub-flow's (source GPU, destination GPU)."""

    def __init__(self, tag: str, src: tuple[str, ...], dst: tuple[str, ...], path: str,
                 num_bytes: int, requested_s: float, start_s: float, ideal_s: float | None,
                 event: Outcome, num_pending: int) -> None:
        self.tag = tag
        self.src = src
        self.dst = dst
        self.path = path
        self.num_bytes = num_bytes
        self.requested_s = requested_s
        self.start_s = start_s
        self.ideal_s = ideal_s
        self.event = event
        self.num_pending = num_pending
        self.sub_flows = {}
        self.ends = {}


class FlowNetwork:
    """KV transfers over a topology's links, as SimPy events.

    One wake-up is live at a time, at the earliest sub-flow completion; every start or end
    re-plans and bumps a generation counter, so wake-ups planned before it are ignored.
    """

    def __init__(self, env: Env, topology: Topology,
                 ideal_times: bool = True, bandwidth_scale: float = 1.0) -> None:
        """``ideal_times=False``: records carry no time alone on idle links (``ideal_s`` None),
        which costs a fluid replay of every transfer's own sub-flows. ``bandwidth_scale``: each
        link carries this times its bandwidth in the topology (a what-if)."""
        self.env = env
        self.topology = topology
        self.ideal_times = ideal_times
        self.records: list[TransferRecord] = []
        """Finished transfers, in completion order (none kept with ``on_record``)."""
        self.on_record: Callable[[TransferRecord], None] | None = None
        """Where each finished transfer goes instead of ``records``, in completion order (a
        run that streams them)."""
        self.num_records = 0
        """Finished transfers, kept or handed on."""
        # edges are numbered in graph order: ints hash fast in the max-min inner loop
        edges = list(topology.graph.edges(data=True))
        self._link_ids = [attrs["link_id"] for _, _, attrs in edges]
        self._edge_index = topology.edge_numbers
        self._capacity: dict[Edge, float] = {
            i: attrs["bytes_per_s"] * bandwidth_scale for i, (_, _, attrs) in enumerate(edges)
        }
        self._edge_bytes = [0.0] * len(edges)
        self._routes = topology.routes
        """The topology's routes, shared by every run in this process that uses it."""
        self._fluid = FluidState(self._capacity, env.now)
        self._owner: dict[int, _Transfer] = {}  # sub-flow key -> its transfer
        self._next_key = 0
        """The next sub-flow's key."""
        self._narrowest_of: dict[tuple[int, ...], float] = {}
        self._generation = 0
        self._down: dict[tuple[str, str], list[str]] = {}
        """Failed directed edges, with the failures that hold each down (oldest first)."""
        self._detours: dict[tuple[str, str], tuple[tuple[int, ...], float, str] | None] = {}
        """Routes around the failed edges (None: no way), cleared when they change."""
        self._live: dict[int, _Transfer] = {}
        """id(event) -> transfers under way."""
        self.num_rerouted = 0
        """Sub-flows moved to another path by a failed link."""

    def transfer(
        self,
        tag: str,
        src_gpus: list[str],
        dst_gpus: list[str],
        num_bytes: int,
        extra_latency_s: float = 0.0,
    ) -> Outcome:
        """Move ``num_bytes`` of KV from one TP group to another; the event's value is the
        :class:`TransferRecord`. Same GPUs on both sides, or no bytes: latency only."""
        if not src_gpus or not dst_gpus:
            raise ValueError(f"transfer {tag}: empty GPU group")
        if num_bytes < 0 or extra_latency_s < 0:
            raise ValueError(f"transfer {tag}: negative bytes or latency")
        now = now_of(self.env)
        if len(src_gpus) == 1 and len(dst_gpus) == 1 and not self._down:
            return self._transfer_one(tag, src_gpus[0], dst_gpus[0], num_bytes,
                                      extra_latency_s, now)
        pairs = pair_ranks(src_gpus, dst_gpus)
        sizes = split_bytes(num_bytes, len(pairs))
        return self._transfer_pairs(tag, src_gpus, dst_gpus, pairs, sizes, num_bytes,
                                    extra_latency_s, now)

    def transfer_stages(
        self,
        tag: str,
        src_gpus: list[str],
        dst_gpus: list[str],
        moves: list[tuple[list[str], list[str], int]],
        extra_latency_s: float = 0.0,
    ) -> Outcome:
        """Move KV between pipeline stages: each move (a producer stage's TP group, a consumer
        stage's TP group, its bytes) runs as :meth:`transfer` would run it alone, every move
        at once; the event's value is one :class:`TransferRecord` of them all, from
        ``src_gpus`` to ``dst_gpus`` (the two engines' GPUs) with every move's bytes."""
        if not moves:
            raise ValueError(f"transfer {tag}: no stage moves")
        if extra_latency_s < 0:
            raise ValueError(f"transfer {tag}: negative bytes or latency")
        pairs: list[tuple[str, str]] = []
        sizes: list[int] = []
        num_bytes = 0
        for move in moves:
            src, dst, size = move
            if not src or not dst:
                raise ValueError(f"transfer {tag}: empty GPU group")
            if size < 0:
                raise ValueError(f"transfer {tag}: negative bytes or latency")
            stage_pairs = pair_ranks(src, dst)
            stage_sizes = split_bytes(size, len(stage_pairs))
            for i in range(len(stage_pairs)):
                pairs.append(stage_pairs[i])
                sizes.append(stage_sizes[i])
            num_bytes += size
        return self._transfer_pairs(tag, src_gpus, dst_gpus, pairs, sizes, num_bytes,
                                    extra_latency_s, now_of(self.env))

    def _transfer_pairs(
        self,
        tag: str,
        src_gpus: list[str],
        dst_gpus: list[str],
        pairs: list[tuple[str, str]],
        sizes: list[int],
        num_bytes: int,
        extra_latency_s: float,
        now: float,
    ) -> Outcome:
        """The transfer of ``num_bytes`` as sub-flows ``sizes[i]`` bytes over ``pairs[i]``
        (source GPU, destination GPU), one record from ``src_gpus`` to ``dst_gpus``."""
        if self._down:
            cut = next((p for p in pairs if self._route(*p) is None), None)
            if cut is not None:
                event = Outcome(self.env)
                event.fail(TransferFailed(f"no path from {cut[0]} to {cut[1]}",
                                          self._cause_on(*cut)))
                return event
        latencies: list[float] = []
        subs: list[tuple[float, tuple[int, ...], int]] = []  # (start_s, edges, bytes)
        first_label = ""
        start_s = math.inf
        for i in range(len(pairs)):  # (indexes, not zip objects: this runs per transfer)
            src, dst = pairs[i]
            size = sizes[i]
            route = self._route(src, dst)
            assert route is not None  # (a pair without a path failed the transfer above)
            edges, path_latency_s, label = route
            latency = path_latency_s + extra_latency_s
            latencies.append(latency)
            if not i:
                first_label = label
            sub_start = now + latency
            if sub_start < start_s:
                start_s = sub_start
            subs.append((sub_start, edges, size if edges else 0))
        ideal_s = (max(drain_alone(subs, self._capacity)) - now) if self.ideal_times else None
        transfer = _Transfer(
            tag=tag,
            src=tuple(src_gpus),
            dst=tuple(dst_gpus),
            path=first_label,
            num_bytes=num_bytes,
            requested_s=now,
            start_s=start_s,
            ideal_s=ideal_s,
            event=Outcome(self.env),
            num_pending=len(subs),
        )
        by_latency: dict[float, list[int]] = {}  # one timeout per distinct latency
        for i in range(len(pairs)):
            pair = pairs[i]
            latency = latencies[i]
            _, edges, size = subs[i]
            key = self._next_key
            self._next_key = key + 1
            transfer.sub_flows[key] = (edges, size)
            transfer.ends[key] = pair
            self._owner[key] = transfer
            by_latency.setdefault(latency, []).append(key)
        self._live[id(transfer.event)] = transfer
        for latency, keys in by_latency.items():
            self._start_after(latency, keys)
        return transfer.event

    def _transfer_one(self, tag: str, src: str, dst: str, num_bytes: int,
                      extra_latency_s: float, now: float) -> Outcome:
        """:meth:`transfer` between two single GPUs with every link up (most handoffs):
        one sub-flow, so no pairing, splitting or grouping by latency, and its time alone
        on idle links in closed form (as :func:`drain_alone` computes one flow's)."""
        route = self._route(src, dst)
        assert route is not None  # (no link is down)
        edges, path_latency_s, label = route
        latency = path_latency_s + extra_latency_s
        start_s = now + latency
        size = num_bytes if edges else 0
        ideal_s: float | None = None
        if self.ideal_times:
            end_s = start_s
            if size:
                end_s = start_s + float(size) / self._narrowest(edges)
            ideal_s = end_s - now
        transfer = _Transfer(tag, (src,), (dst,), label, num_bytes, now, start_s, ideal_s,
                             Outcome(self.env), 1)
        key = self._next_key
        self._next_key = key + 1
        transfer.sub_flows[key] = (edges, size)
        transfer.ends[key] = (src, dst)
        self._owner[key] = transfer
        self._live[id(transfer.event)] = transfer
        self._start_after(latency, [key])
        return transfer.event

    def _narrowest(self, edges: tuple[int, ...]) -> float:
        """The least capacity along ``edges`` (one flow's max-min rate), cached per path."""
        rate = self._narrowest_of.get(edges)
        if rate is None:
            rate = self._narrowest_of[edges] = narrowest(edges, self._capacity)
        return rate

    def link_utilization(self, span_s: float) -> dict[str, float]:
        """Per link id: bytes carried so far / (effective bytes_per_s x ``span_s``).

        A link that carried nothing is 0.0, even over an empty span."""
        if span_s < 0:
            raise ValueError(f"span_s must be >= 0, got {span_s}")
        self._fluid.advance(now_of(self.env))
        carried = list(self._edge_bytes)
        for edge, moved in self._fluid.carried().items():
            carried[cast(int, edge)] += moved
        return {
            link_id: (
                moved / (self._capacity[edge] * span_s) if span_s else math.inf
            ) if moved else 0.0
            for edge, (link_id, moved) in enumerate(zip(self._link_ids, carried, strict=True))
        }

    def _route(self, src: str, dst: str) -> tuple[tuple[int, ...], float, str] | None:
        """Edge numbers, latency and label of the path from ``src`` to ``dst`` (cached);
        around failed edges while some are down (None: no path is left)."""
        if self._down:
            return self._detour(src, dst)
        route = self._routes.get((src, dst))
        if route is None:
            route = self.topology.route(src, dst)
        return route

    def _detour(self, src: str, dst: str) -> tuple[tuple[int, ...], float, str] | None:
        key = (src, dst)
        if key not in self._detours:
            topology = self.topology
            path = topology.path_avoiding(src, dst, frozenset(self._down))
            self._detours[key] = None if path is None else topology.route_of(src, path)
        return self._detours[key]

    # --------------------------------------------------------------- faults
    def fail_edges(self, edges: Sequence[tuple[str, str]], cause: str) -> list[Outcome]:
        """These directed edges go down now (``cause`` says why): sub-flows on them move to a
        path around every failed edge, and the transfers that have none fail (their events
        fail with :class:`TransferFailed`). Returns the events of those that failed."""
        self._settle()
        for edge in edges:
            self._down.setdefault(edge, []).append(cause)
        self._detours.clear()
        down = {self._edge_index[e] for e in self._down}
        failed: list[_Transfer] = []
        for transfer in list(self._live.values()):
            hit = [k for k, (e, _) in transfer.sub_flows.items() if not down.isdisjoint(e)]
            if not hit:
                continue
            routes = {k: self._route(*transfer.ends[k]) for k in hit}
            if any(route is None for route in routes.values()):
                failed.append(transfer)
                continue
            for key, route in routes.items():
                self._move(transfer, key, route)  # type: ignore[arg-type]
        for transfer in failed:
            self._drop(transfer)
            transfer.event.fail(TransferFailed(
                f"no path from {transfer.src[0]} to {transfer.dst[0]}", cause))
        self._replan()
        return [t.event for t in failed]

    def restore_edges(self, edges: Sequence[tuple[str, str]], cause: str) -> None:
        """The failure ``cause`` is over: its edges take transfers requested from now on
        again (unless another failure holds them down)."""
        for edge in edges:
            causes = self._down[edge]
            causes.remove(cause)
            if not causes:
                del self._down[edge]
        self._detours.clear()

    def _cause_on(self, src: str, dst: str) -> str:
        """The failure that cut ``src`` from ``dst``: the first on their usual path."""
        for edge in self.topology.path(src, dst):
            if edge in self._down:
                return self._down[edge][0]
        return next(iter(self._down.values()))[0]

    def cancel(self, event: Outcome) -> None:
        """Stop a transfer under way (its reader is gone); its event never fires."""
        transfer = self._live.get(id(event))
        if transfer is None:
            return
        self._settle()
        self._drop(transfer)
        self._replan()

    def _move(self, transfer: _Transfer, key: int,
              route: tuple[tuple[int, ...], float, str]) -> None:
        edges, _, label = route
        old_edges, size = transfer.sub_flows[key]
        if key in self._fluid.active:
            moved = self._fluid.reroute(key, edges)
            for edge in old_edges:
                self._edge_bytes[edge] += moved
            size -= moved
        transfer.sub_flows[key] = (edges, size)
        if key == next(iter(transfer.sub_flows)):
            transfer.path = label
        self.num_rerouted += 1

    def _drop(self, transfer: _Transfer) -> None:
        """Take every unfinished sub-flow of ``transfer`` out (counting what they moved)."""
        del self._live[id(transfer.event)]
        for key in list(transfer.sub_flows):
            if self._owner.pop(key, None) is None:
                continue  # finished already
            if key in self._fluid.active:
                edges, moved = self._fluid.remove(key)
                for edge in edges:
                    self._edge_bytes[cast(int, edge)] += moved
        transfer.num_pending = -1  # its pending starts and wake-ups find nothing


    # --------------------------------------------------------------- events
    def _start_after(self, latency_s: float, keys: list[int]) -> None:
        """Sub-flows ``keys`` begin to move bytes after ``latency_s``. (A closure of its own
        per call: a lambda in the caller's loop would see the loop's last keys. Cheaper than
        a ``partial`` of a bound method: one compiled object, called natively.)"""
        alarm(self.env, latency_s, lambda _event: self._start(keys))

    def _start(self, keys: list[int]) -> None:
        """Sub-flows whose latency is over begin to move bytes."""
        self._settle()
        for key in keys:
            owner = self._owner.get(key)
            if owner is None:
                continue  # its transfer failed or was cancelled while it waited
            edges, size = owner.sub_flows[key]
            if size:
                self._fluid.add(key, edges, size)
            else:
                self._finish(key)
        self._replan()

    def _wake(self, generation: int) -> None:
        """The earliest completion planned by the latest re-plan is due."""
        if generation != self._generation:
            return  # planned before a later start or end changed the rates
        self._settle()
        self._replan()

    def _settle(self) -> None:
        """Bring the bytes up to now and finish the sub-flows that are done."""
        self._fluid.advance(now_of(self.env))
        for key in self._fluid.pop_done():
            self._finish(key)

    def _replan(self) -> None:
        self._generation += 1
        delay = self._fluid.replan()
        if delay is not None:
            generation = self._generation
            alarm(self.env, delay, lambda _event: self._wake(generation))

    def _finish(self, key: int) -> None:
        transfer = self._owner[key]
        del self._owner[key]
        edges, size = transfer.sub_flows[key]
        edge_bytes = self._edge_bytes
        for edge in edges:  # (not +=: compiled, a list item's += is a generic add)
            edge_bytes[edge] = edge_bytes[edge] + size
        transfer.num_pending -= 1
        if transfer.num_pending:
            return
        del self._live[id(transfer.event)]
        record = TransferRecord(
            tag=transfer.tag,
            src=transfer.src,
            dst=transfer.dst,
            path=transfer.path,
            bytes=transfer.num_bytes,
            requested_s=transfer.requested_s,
            start_s=transfer.start_s,
            end_s=now_of(self.env),
            ideal_s=transfer.ideal_s,
        )
        self.num_records += 1
        if self.on_record is None:
            self.records.append(record)
        else:
            self.on_record(record)
        transfer.event.succeed(record)
