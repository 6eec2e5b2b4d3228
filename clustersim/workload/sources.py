"""Workload sources: what hands requests to the engine on the SimPy clock.

Every source offers the simulator the same three things: ``requests`` (all the requests it will
ever submit, for accounting), ``start(env, submit)`` (starts submitting them: a SimPy process,
or for fixed arrival times a chain of timers) and ``on_done(request)`` (called when a request
finishes or is rejected).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator, Sequence
from typing import Any

import simpy

from clustersim.engine.events import URGENT, Env, alarm, now_of
from clustersim.engine.request import Request

Submit = Callable[[Request], None]


class OpenLoop:
    """Requests with fixed arrival times, submitted when their time comes.

    Either all built in advance (``requests``), or built one at a time as each comes due
    (:meth:`built_on_arrival`: ``requests`` stays empty and the source keeps none it has
    submitted, so that a run of a million requests holds only those in flight)."""

    def __init__(self, requests: list[Request]) -> None:
        self.requests = requests
        self.num_requests = len(requests)
        self._build: Callable[[int], Request] | None = None
        self._upcoming: Request | None = None
        """Built on arrival: the next request, built once its predecessor was submitted."""
        self._next = 0
        """The next request to submit."""
        self._env: Env | None = None
        self._submit: Submit | None = None

    @classmethod
    def built_on_arrival(cls, num_requests: int, build: Callable[[int], Request]) -> OpenLoop:
        """``num_requests`` requests, request ``i`` being ``build(i)`` (called in order, each
        once; arrival times not decreasing)."""
        source = cls([])
        source.num_requests = num_requests
        source._build = build
        return source

    def start(self, env: Env, submit: Submit) -> None:
        """Submit each request at its arrival time: a chain of timer callbacks, the first
        where a process started now would first run (the events a process waiting out each
        gap would see, in the same places)."""
        self._env, self._submit, self._next = env, submit, 0
        alarm(env, 0.0, self._send, URGENT)

    def _request(self, index: int) -> Request:
        build = self._build
        if build is None:
            return self.requests[index]
        upcoming = self._upcoming
        if upcoming is None:
            upcoming = self._upcoming = build(index)
        return upcoming

    def _send(self, _event: object = None) -> None:
        """Submit every request due now, then wait for the next one."""
        env, submit = self._env, self._submit
        assert env is not None and submit is not None
        while self._next < self.num_requests:
            request = self._request(self._next)
            delay = request.arrival_s - now_of(env)
            if delay > 0:
                alarm(env, delay, self._arrived)
                return
            self._next += 1
            self._upcoming = None
            submit(request)

    def _arrived(self, _event: object) -> None:
        assert self._submit is not None
        request = self._request(self._next)
        self._next += 1
        self._upcoming = None
        self._submit(request)
        self._send()

    def on_done(self, request: Request) -> None:
        """Open-loop clients do not wait for answers."""


class _ProcessSource:
    """A source whose clients are a SimPy process (``run``)."""

    def run(self, env: Env, submit: Submit) -> Generator[Any, Any, None]:
        raise NotImplementedError

    def start(self, env: Env, submit: Submit) -> None:
        env.process(self.run(env, submit))


class ClosedLoop(_ProcessSource):
    """``num_users`` clients: each sends its next request when its previous one is done.

    The requests (lengths fixed in advance, in order) are handed out first come, first served:
    whichever user is free next takes the next one, and its ``arrival_s`` is set when it is
    sent. At most ``num_users`` requests are ever in flight. A user's next request goes out
    ``think_time_s`` after the answer, as a separate event, so with no think time it arrives at
    the same instant but after the engine has planned its next step.
    """

    def __init__(
        self, requests: list[Request], num_users: int, think_time_s: float = 0.0,
        start_s: float = 0.0,
    ) -> None:
        self.requests = requests
        self.num_requests = len(requests)
        self.num_users = num_users
        self.think_time_s = think_time_s
        self.start_s = start_s
        self._build: Callable[[int], Request] | None = None
        self._num_sent = 0
        self._num_claimed = 0
        """Requests sent or waiting out a think time: a user took each of them."""
        self._env: Env | None = None
        self._submit: Submit | None = None

    @classmethod
    def built_on_arrival(cls, num_requests: int, build: Callable[[int], Request],
                         num_users: int, think_time_s: float = 0.0,
                         start_s: float = 0.0) -> ClosedLoop:
        """``num_requests`` requests, request ``i`` being ``build(i)``, built when a user
        sends it (``requests`` stays empty and the source keeps none)."""
        source = cls([], num_users, think_time_s, start_s)
        source.num_requests = num_requests
        source._build = build
        return source

    def run(self, env: Env, submit: Submit) -> Generator[Any, Any, None]:
        self._env, self._submit = env, submit
        yield env.timeout(max(self.start_s - now_of(env), 0.0))
        self._num_claimed = min(self.num_users, self.num_requests)
        for _ in range(self._num_claimed):
            self._send()

    def _send(self) -> None:
        assert self._env is not None and self._submit is not None
        build = self._build
        index = self._num_sent
        request = self.requests[index] if build is None else build(index)
        self._num_sent += 1
        request.arrival_s = now_of(self._env)
        self._submit(request)

    def _send_after_think(self) -> Generator[Any, Any, None]:
        assert self._env is not None
        yield self._env.timeout(self.think_time_s)
        self._send()

    def on_done(self, request: Request) -> None:
        """The user whose request this was takes the next one, if any is left."""
        if self._env is None:
            raise AssertionError(f"request {request.request_id} done before the source ran")
        if self._num_claimed < self.num_requests:
            self._num_claimed += 1
            self._env.process(self._send_after_think())


class Benchmark(_ProcessSource):
    """The client of ``vllm bench serve --max-concurrency N`` (``workload.benchmark``).

    First the warm-ups, at most ``max_concurrency`` in flight, until every one is done; then
    the measured ``requests``, each dispatched at ``start + offset`` into a FIFO queue in
    front of the semaphore (asyncio's ``Semaphore`` wakes its waiters in order) and sent as
    soon as a slot is free. A request's ``dispatch_s`` is its dispatch, ``arrival_s`` its
    send. A slot freed by an answer is taken by the next queued request as a separate event,
    as the closed loop's next request is. ``measured_start_s`` is when the measured run
    began (the tool's ``benchmark_start_time``). With ``ramp_up_s``, the measured run opens
    its slots one at a time: slot k (0-based) at ``k / (max_concurrency - 1) x ramp_up_s``.
    With ``turnarounds_s``, the n-th answer (warm-ups included) frees its slot that long after
    it is back, the client's own processing of the response.
    With :meth:`built_on_arrival` each measured request is built when it is sent; the queue
    holds only the dispatch times of those waiting.
    """

    def __init__(
        self, requests: list[Request], offsets_s: Sequence[float], warmups: list[Request],
        max_concurrency: int | None, start_s: float = 0.0, ramp_up_s: float = 0.0,
        turnarounds_s: Sequence[float] = (),
    ) -> None:
        if len(offsets_s) != len(requests):
            raise ValueError(f"{len(offsets_s)} dispatch times for {len(requests)} requests")
        self.requests = requests
        self.num_requests = len(requests)
        self.warmups = warmups
        self.offsets_s = list(offsets_s)
        self.max_concurrency = max_concurrency
        self.start_s = start_s
        self.ramp_up_s = ramp_up_s
        self.turnarounds_s = list(turnarounds_s)
        self._num_answers = 0
        self._build: Callable[[int], Request] | None = None
        self._limit = max_concurrency
        """Slots open now (below ``max_concurrency`` while the ramp opens them)."""
        self.measured_start_s: float | None = None
        self._queue: deque[Request] = deque()
        """Warm-ups waiting for a slot."""
        self._dispatched_s: deque[float] = deque()
        """Dispatch times of the measured requests waiting for a slot, in order: the first
        is request ``_num_sent``'s."""
        self._num_sent = 0
        self._num_in_flight = 0
        self._num_warmups_done = 0
        self._warmups_done: simpy.Event | None = None
        self._env: Env | None = None
        self._submit: Submit | None = None

    @classmethod
    def built_on_arrival(
        cls, num_requests: int, build: Callable[[int], Request], offsets_s: Sequence[float],
        warmups: list[Request], max_concurrency: int | None, start_s: float = 0.0,
        ramp_up_s: float = 0.0, turnarounds_s: Sequence[float] = (),
    ) -> Benchmark:
        """``num_requests`` measured requests, request ``i`` being ``build(i)``, built when it
        is sent (``requests`` stays empty and the source keeps none)."""
        if len(offsets_s) != num_requests:
            raise ValueError(f"{len(offsets_s)} dispatch times for {num_requests} requests")
        source = cls([], [], warmups, max_concurrency, start_s, ramp_up_s, turnarounds_s)
        source.offsets_s = list(offsets_s)
        source.num_requests = num_requests
        source._build = build
        return source

    def run(self, env: Env, submit: Submit) -> Generator[Any, Any, None]:
        self._env, self._submit = env, submit
        yield env.timeout(max(self.start_s - now_of(env), 0.0))
        if self.warmups:
            self._warmups_done = env.event()
            self._queue.extend(self.warmups)
            self._fill()
            yield self._warmups_done
        start = self.measured_start_s = now_of(env)
        if self.ramp_up_s > 0 and self.max_concurrency is not None and self.max_concurrency > 1:
            self._limit = 1
            env.process(self._ramp(env, self.max_concurrency))
        for offset in self.offsets_s:
            delay = start + offset - now_of(env)
            if delay > 0:
                yield env.timeout(delay)
            self._dispatched_s.append(now_of(env))
            self._fill()

    def _ramp(self, env: Env, slots: int) -> Generator[Any, Any, None]:
        """Open the measured run's slots one by one over ``ramp_up_s``."""
        gap = self.ramp_up_s / (slots - 1)
        for opened in range(2, slots + 1):
            yield env.timeout(gap)
            self._limit = opened
            self._fill()

    def _fill(self) -> None:
        """Send queued requests while a slot is free: the warm-ups, then the measured ones
        in dispatch order."""
        assert self._env is not None and self._submit is not None
        limit = self._limit
        while limit is None or self._num_in_flight < limit:
            if self._queue:
                request = self._queue.popleft()
            elif self._dispatched_s:
                index = self._num_sent
                build = self._build
                request = self.requests[index] if build is None else build(index)
                request.dispatch_s = self._dispatched_s.popleft()
                self._num_sent += 1
            else:
                break
            self._num_in_flight += 1
            request.arrival_s = now_of(self._env)
            self._submit(request)

    def on_done(self, request: Request) -> None:
        """The answer is back: its slot goes to the next queued request, after the client's
        turnaround if it has one."""
        env = self._env
        if env is None:
            raise AssertionError(f"request {request.request_id} done before the source ran")
        answer = self._num_answers
        self._num_answers = answer + 1
        if answer < len(self.turnarounds_s) and self.turnarounds_s[answer] > 0:
            env.timeout(self.turnarounds_s[answer]).callbacks.append(
                lambda _event: self._free(request))
        else:
            self._free(request)

    def _free(self, request: Request) -> None:
        """``request``'s slot is free: the next queued request takes it."""
        env = self._env
        assert env is not None
        self._num_in_flight -= 1
        if request.dispatch_s is None:  # a warm-up
            self._num_warmups_done += 1
            if self._num_warmups_done == len(self.warmups):
                assert self._warmups_done is not None
                self._warmups_done.succeed()
        if self._queue or self._dispatched_s:
            env.timeout(0).callbacks.append(lambda _event: self._fill())


class Sessions(_ProcessSource):
    """Sessions of requests (``workload.sessions``): session ``s`` sends its first request at
    ``starts_s[s]``; each of its next ones ``waits_s[r]`` after the one before it is done
    (the user's think time, or a tool's run), so each session is a closed loop of one. A
    request's ``arrival_s`` is set when it is sent; ``build(s, r)`` builds request ``r`` (an
    index over all requests, session ``s``'s being ``first[s] .. first[s + 1] - 1``), in order
    within a session. A rejected request ends its wait as an answer does: the session goes
    on as drawn. Its next request goes out as a separate event, even with no wait, as the
    closed loop's next request does. ``keep``: the requests sent are kept in ``requests``,
    in the order sent; else the source keeps none once done."""

    def __init__(self, starts_s: Sequence[float], first: Sequence[int],
                 waits_s: Sequence[float], build: Callable[[int, int], Request],
                 keep: bool = True) -> None:
        if len(first) != len(starts_s) + 1 or first[-1] != len(waits_s):
            raise ValueError(f"{len(starts_s)} sessions, {len(first)} offsets and "
                             f"{len(waits_s)} waits do not match")
        self.requests: list[Request] = []
        self.num_requests = len(waits_s)
        self.starts_s = list(starts_s)
        self.first = list(first)
        self.waits_s = list(waits_s)
        self._build = build
        self._keep = keep
        self._sent: dict[Request, tuple[int, int]] = {}
        """Requests sent and not yet done: their session and index."""
        self._env: Env | None = None
        self._submit: Submit | None = None

    def run(self, env: Env, submit: Submit) -> Generator[Any, Any, None]:
        self._env, self._submit = env, submit
        for session, start in enumerate(self.starts_s):
            delay = start - now_of(env)
            if delay > 0:
                yield env.timeout(delay)
            self._send(session, self.first[session])

    def _send(self, session: int, r: int) -> None:
        assert self._env is not None and self._submit is not None
        request = self._build(session, r)
        request.arrival_s = now_of(self._env)
        self._sent[request] = (session, r)
        if self._keep:
            self.requests.append(request)
        self._submit(request)

    def on_done(self, request: Request) -> None:
        """The session's next request goes after its wait, if the session has one left."""
        env = self._env
        if env is None:
            raise AssertionError(f"request {request.request_id} done before the source ran")
        session, r = self._sent.pop(request)
        if r + 1 < self.first[session + 1]:
            env.timeout(self.waits_s[r + 1]).callbacks.append(
                lambda _event: self._send(session, r + 1))
