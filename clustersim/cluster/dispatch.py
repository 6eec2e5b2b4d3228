"""Where each request goes and what happens when it is done: the cluster's hot path.

Every request passes through here at least twice: when the client sends it (through the API
server's delay, if there is one, to a router and an instance, or down the disaggregated path
of the KV connector) and when an engine hands it back. :class:`Dispatch` holds what those two
moments read (the routers, the instances, the connector, the routes taken) and compiles with
the core (``clustersim.native``); :class:`~clustersim.cluster.system.Cluster` builds it and
keeps everything else (the build, failures, the results).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from clustersim.cluster.router import Router
from clustersim.engine.events import Env, Waitable, alarm, now_of
from clustersim.engine.request import Request, RequestStatus

if TYPE_CHECKING:
    from clustersim.cluster.api_server import ApiServer
    from clustersim.cluster.ports import ConnectorPort


class Dispatch:
    """Routes requests to instances and takes them back when they are done."""

    def __init__(
        self, env: Env, kind: str, instances: dict[str, list[Any]],
        routers: dict[str, Router], on_done: Callable[[Request], None],
        none_up: Callable[[Request, str], None], api_server: ApiServer | None,
        long_prompt_tokens: int = 0, long_output_tokens: int = 0,
    ) -> None:
        """``kind``: the layout's (colocated, disaggregated, three_pool); ``instances`` and
        ``routers``: per role, the cluster's own; ``none_up(request, role)``: every instance
        of ``role`` is down (a failure lost the request)."""
        self.env = env
        self.kind = kind
        self.instances = instances
        self.routers = routers
        self.on_done = on_done
        """Called with every request that finishes or is rejected (the client's answer)."""
        self.none_up = none_up
        self.api_server = api_server
        self.long_prompt_tokens = long_prompt_tokens
        self.long_output_tokens = long_output_tokens
        self.connector: ConnectorPort | None = None
        """The prefill -> decode handoff (layouts with a prefill pool; set by the cluster)."""
        self.route_of: dict[Request, tuple[str, int]] = {}
        """client -> (role, index) of the instance producing its tokens."""

    # ---------------------------------------------------------------- routing
    def submit(self, request: Request) -> None:
        """A client request reaches the cluster's entry point now; with an API server, its
        engine sees it once the server has processed it."""
        api = self.api_server
        if api is None:
            self._enter(request)
            return
        self._enter_after(api.before_engine_s(request, now_of(self.env)), request)

    def _enter_after(self, delay_s: float, request: Request) -> None:
        # (the closure in a method of its own: a function holding one builds its variables'
        # cell object on every call, on paths without the closure too)
        alarm(self.env, delay_s, lambda _event: self._enter(request))

    def _enter(self, request: Request) -> None:
        api = self.api_server
        if api is not None:
            api.served()
        kind = self.kind
        if kind == "colocated":
            self.send("colocated", request)
        elif kind == "disaggregated":
            self.connector.start(request)  # type: ignore[union-attr]
        else:
            self._three_pool(request)

    def _three_pool(self, request: Request) -> None:
        """Three pools: a long prompt with a short output takes the prefill -> decode path, a
        long output with a short prompt goes to the decode pool, everything else shares."""
        long_prompt = request.num_prompt_tokens > self.long_prompt_tokens
        long_output = request.max_tokens > self.long_output_tokens
        if long_prompt and not long_output:
            self.connector.start(request)  # type: ignore[union-attr]
        elif long_output and not long_prompt:
            self.send("decode", request)
        else:
            self.send("colocated", request)

    def choose(self, role: str, request: Request) -> int | None:
        """The instance of ``role`` its router picks for ``request``, counted as sent there
        (None: every one of them is down)."""
        router = self.routers[role]
        index = router.choose(request)
        if index is not None:
            router.sent(index, request)
        return index

    def place(self, role: str, request: Request) -> int | None:
        """:meth:`choose`, for an instance that will produce the request's tokens: its
        router gets it back when the request is done."""
        index = self.choose(role, request)
        if index is not None:
            self.route_of[request] = (role, index)
        return index

    def send(self, role: str, request: Request) -> None:
        """Route a request to an instance that will produce all its tokens."""
        index = self.place(role, request)
        if index is None:
            self.none_up(request, role)
            return
        instance = self.instances[role][index]
        request.prefill_instance = request.decode_instance = instance.name
        instance.submit(request)  # a data-parallel group names the rank it picks

    def returned(self, request: Request) -> None:
        """This attempt of the request is over (done, or lost): it no longer holds the instance
        it was routed to, nor streams through the API server."""
        api = self.api_server
        if api is not None:
            api.answered(request)
        route = self.route_of.get(request)
        if route is not None:
            del self.route_of[request]
            self.routers[route[0]].returned(route[1], request)

    def kv_load(self, index: int, request: Request, num_blocks: int) -> Waitable:
        """Decode instance ``index`` starts pulling ``request``'s KV (the connector's)."""
        return self.connector.load(index, request, num_blocks)  # type: ignore[union-attr]

    # ------------------------------------------------------------ completion
    def done(self, role: str, index: int, request: Request) -> None:
        """Instance ``index`` of ``role`` is done with ``request`` (it finished or was
        rejected there)."""
        connector = self.connector
        if request.kv_producer:
            connector.producer_done(index, request)  # type: ignore[union-attr]
            return
        self.returned(request)
        if connector is not None:
            connector.consumer_done(request)
        api = self.api_server
        if api is None or request.status is not RequestStatus.FINISHED:
            self.on_done(request)
            return
        # the client sees every token later by the same time, so its gaps are the engine's
        delay = api.to_client_s()
        assert request.first_token_s is not None and request.finish_s is not None
        request.first_token_s += delay
        request.finish_s += delay
        self._done_after(delay, request)

    def _done_after(self, delay_s: float, request: Request) -> None:
        alarm(self.env, delay_s, lambda _event: self.on_done(request))  # (as _enter_after)

