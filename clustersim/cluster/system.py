"""A cluster at run time: the engines :mod:`clustersim.cluster.build` made, the routers in
front of them, the KV network between them, and what a failure does to them.

The request paths (spec §7.2, §8)::

    colocated      client -> router -> instance (prefill + decode)
    disaggregated  client -> the KV connector's path (``cluster.connectors``: vLLM's NIXL
                   pull through a proxy, or SGLang's push with early allocation)
    three_pool     prefill-heavy -> the disaggregated path; decode-heavy -> a decode instance;
                   mixed -> the colocated pool

The cluster routes; the handoff between a prefill and a decode instance is its connector's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from clustersim.catalog.specs import ModelSpec
from clustersim.cluster.api_server import ApiServer
from clustersim.cluster.build import EngineBuilder, InstanceInfo, RankGroup, default_layout
from clustersim.cluster.connectors import CONNECTORS, KVConnector
from clustersim.cluster.dispatch import Dispatch
from clustersim.cluster.faults import Faults
from clustersim.cluster.ports import FailureDomain
from clustersim.cluster.router import InstanceLoad, Router
from clustersim.engine.data_parallel import DataParallelGroup
from clustersim.engine.events import Env, alarm
from clustersim.engine.instance import Instance
from clustersim.engine.request import Request, RequestStatus
from clustersim.errors import ConfigError
from clustersim.scenario import Scenario


class Cluster:
    """A scenario's engines (made by :class:`~clustersim.cluster.build.EngineBuilder`), the
    routers in front of them and the network between them, moving requests through."""

    def __init__(
        self,
        env: Env,
        scenario: Scenario,
        model: ModelSpec,
        rng: np.random.Generator,
        on_done: Callable[[Request], None],
        *,
        record_steps: bool = True,
        coalesce: bool = False,
        ideal_times: bool | None = None,
    ) -> None:
        """``record_steps=False``: engines keep step totals, not every step, and requests
        keep no per-token times (a lean run). ``coalesce``: engines advance runs of pure-decode
        steps in one event where that is provably the same (see ``engine.instance``).
        ``ideal_times``: KV transfers record their time alone on idle links; None: when
        ``record_steps``."""
        self.env = env
        self.record_steps = record_steps
        self.ideal_times = record_steps if ideal_times is None else ideal_times
        self.coalesce = coalesce
        self.scenario = scenario
        self.model = model
        self.layout = scenario.layout or default_layout()
        self.on_done = on_done
        self.kv_transfer = self.layout.kv_transfer
        self.topology = self._load_topology()
        self.flows = self._flow_network()
        self.instances: dict[str, list[Any]] = {"colocated": [], "prefill": [], "decode": []}
        """Per role: an :class:`Instance`, or a :class:`DataParallelGroup` of them."""
        api = scenario.api_server
        self.api_server: ApiServer | None = (
            ApiServer(api, scenario.seed) if api is not None and not api.is_zero else None
        )
        """vLLM's API server in front of the engines (``cluster.api_server``); None: a
        request reaches its engine when it is sent, and its tokens the client when made."""
        self.routers: dict[str, Router] = {}
        self.dispatch = Dispatch(
            env, self.layout.kind, self.instances, self.routers, on_done, self._none_up,
            self.api_server, self.layout.long_prompt_tokens, self.layout.long_output_tokens,
        )
        """Routes each request and takes it back when it is done (the cluster's hot path)."""
        engines = EngineBuilder(env, scenario, model, self.layout, self.topology, self.dispatch,
                                self.instances, record_steps=record_steps, coalesce=coalesce)
        engines.build()
        self.infos: list[InstanceInfo] = engines.infos
        self._served = engines.served
        """Instance name -> the model as its engine serves it (quantization, KV dtype)."""
        self._fresh_scheduler = engines.fresh_scheduler
        """Instance name -> a new empty scheduler of its engine (a repair restarts it)."""
        self.rank_groups: list[RankGroup] = engines.rank_groups
        """The data-parallel groups of prefill and decode pools (their ranks are routed to
        one by one and fail together)."""
        self._group_of: dict[tuple[str, int], RankGroup] = {
            (group.role, position): group for group in self.rank_groups
            for position in group.positions}
        self._groups_down: set[str] = set()
        """The rank groups that are down (failed, not yet restored)."""
        self.routers.update({
            role: Router(spec.kind, [InstanceLoad(i.name) for i in self.instances[role]], rng)
            for role, spec in (
                ("colocated", self.layout.router),
                ("prefill", self.layout.prefill_router),
                ("decode", self.layout.decode_router),
            )
            if self.instances[role]
        })
        self.connector: KVConnector | None = (
            CONNECTORS[self.kv_transfer.connector](self) if self.instances["prefill"] else None
        )
        """The prefill -> decode handoff (layouts with a prefill pool)."""
        self.dispatch.connector = self.connector
        self.faults: Faults | None = (
            Faults(self, scenario.faults, scenario.seed) if scenario.faults is not None
            else None
        )
        """The failures of this run (``cluster.faults``), and what they did."""

    # ------------------------------------------------------------------ build
    def _load_topology(self):
        source = self.scenario.topology
        if source is None:
            if self.layout.kind != "colocated":
                raise ConfigError(
                    "topology",
                    f"layout {self.layout.kind} needs a topology: the KV handoff runs over its "
                    "links (e.g. topology: dgx-h100-x2)",
                )
            return None
        from clustersim.cluster.topology import Topology

        return Topology.load(source, base_dir=self.scenario.base_dir)

    def _flow_network(self):
        if self.topology is None:
            return None
        from clustersim.cluster.flows import FlowNetwork

        # a lean run reports no transfer's time alone on idle links (transfers.csv does)
        return FlowNetwork(self.env, self.topology, ideal_times=self.ideal_times,
                           bandwidth_scale=self.kv_transfer.link_bandwidth_scale)

    # ---------------------------------------------------------------- routing
    def submit(self, request: Request) -> None:
        """A client request reaches the cluster's entry point now (``Dispatch.submit``)."""
        self.dispatch.submit(request)

    def choose(self, role: str, request: Request) -> int | None:
        """The instance of ``role`` its router picks for ``request`` (``Dispatch.choose``)."""
        return self.dispatch.choose(role, request)

    def _none_up(self, request: Request, role: str) -> None:
        self.lose(request, self.faults.down_cause(role))  # type: ignore[union-attr]

    # ----------------------------------------------------------------- faults
    def keyed_instances(self) -> list[tuple[tuple[str, int], Any]]:
        """Every instance (a data-parallel group as one) with its (role, index)."""
        return [((role, i), instance) for role in ("colocated", "prefill", "decode")
                for i, instance in enumerate(self.instances[role])]

    def domains(self) -> list[FailureDomain]:
        """What fails as one, in role order: each instance (a colocated data-parallel group
        as one), and each data-parallel group of a prefill or decode pool with all its ranks
        (the pool routes to them one by one, but they step and fail together)."""
        out = []
        seen: set[str] = set()
        for key, instance in self.keyed_instances():
            group = self._group_of.get(key)
            if group is None:
                out.append(FailureDomain(key[0], instance.name, (key,), (instance,)))
            elif group.name not in seen:
                seen.add(group.name)
                members = tuple(self.instances[group.role][i] for i in group.positions)
                out.append(FailureDomain(group.role, group.name,
                                         tuple((group.role, i) for i in group.positions),
                                         members, lockstep=group.lockstep is not None))
        return out

    def fail_instance(self, key: tuple[str, int], cause: str) -> None:
        """The instance dies now: routers stop choosing it and everything it held is lost
        (the prompts a prefill instance was computing or keeping take their clients' attempts
        with them, or make their pulls fail: ``cluster.connectors``). A rank of a prefill or
        decode pool's data-parallel group takes every rank of the group with it (the first of
        them to fail does; the others are down already)."""
        role, index = key
        group = self._group_of.get(key)
        if group is None:
            self.routers[role].set_down(index, True)
            self._lost(key, self.instances[role][index].fail(), cause)
            return
        if group.name in self._groups_down:
            return
        self._groups_down.add(group.name)
        for position in group.positions:
            self.routers[role].set_down(position, True)
        lost = [self.instances[role][i].fail() for i in group.positions]
        if group.lockstep is not None:
            group.lockstep.stop()
        for position, requests in zip(group.positions, lost, strict=True):
            self._lost((role, position), requests, cause)

    def _lost(self, key: tuple[str, int], lost: list[Request], cause: str) -> None:
        """What a failed instance held: a prefill instance's prompts (its connector's), or
        requests whose clients learn they were lost."""
        role, index = key
        if role == "prefill":
            self.connector.prefill_failed(index, cause)  # type: ignore[union-attr]
            return
        for request in lost:
            if self.connector is not None:
                self.connector.client_lost(request)
            self.lose(request, cause)

    def restore_instance(self, key: tuple[str, int]) -> None:
        """The instance is repaired: it restarts empty and its router chooses it again (a
        rank group restarts whole, its common step loop with it)."""
        role, index = key
        group = self._group_of.get(key)
        if group is not None:
            if group.name not in self._groups_down:
                return
            self._groups_down.discard(group.name)
            for position in group.positions:
                rank = self.instances[role][position]
                rank.restart(self._fresh_scheduler[rank.name]())
            if group.lockstep is not None:
                group.lockstep.start()
            for position in group.positions:
                self.routers[role].set_down(position, False)
            return
        instance = self.instances[role][index]
        if isinstance(instance, DataParallelGroup):
            instance.restart([self._fresh_scheduler[r.name]() for r in instance.ranks])
        else:
            instance.restart(self._fresh_scheduler[instance.name]())
        self.routers[role].set_down(index, False)

    def lose(self, request: Request, cause: str) -> None:
        """A failure lost this attempt of ``request`` (every trace of it is gone from the
        instances): its client sends it again after a delay, or it ends rejected."""
        faults = self.faults
        assert faults is not None, "requests are lost only to faults"
        self.dispatch.returned(request)
        tally = faults.tally(cause, request)
        tally.num_lost += 1
        client = faults.spec.client
        now = self.env.now
        if request.num_retries < client.max_retries:
            tally.num_retried += 1
            delay = client.delay_s(request.num_retries + 1)
            request.retry(now + delay)
            alarm(self.env, delay, lambda _event: self.submit(request))
            return
        tally.num_failed += 1
        tries = f" (sent {request.num_retries + 1} times)" if request.num_retries else ""
        request.status = RequestStatus.REJECTED
        request.reject_reason = f"lost: {cause}{tries}"
        request.finish_s = now
        self.on_done(request)

    # ------------------------------------------------------------ completion
    def served(self, instance_name: str) -> ModelSpec:
        """The model as the named engine serves it (its quantization and KV dtype)."""
        return self._served[instance_name]

    # ---------------------------------------------------------------- results
    def all_instances(self) -> list[Instance]:
        """Every engine, the ranks of data-parallel groups included."""
        return [
            rank
            for role in ("colocated", "prefill", "decode")
            for i in self.instances[role]
            for rank in (i.ranks if isinstance(i, DataParallelGroup) else (i,))
        ]
