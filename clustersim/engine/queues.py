"""The waiting queues a scheduler admits from: first come first served, or by priority.

Compiled with the core (``clustersim.native``): the scheduler asks its queue for its length,
its head and to pop it every step, and those are native calls on a :class:`WaitingQueue`.
"""

from __future__ import annotations

from collections.abc import Iterator
from heapq import heapify as _heapify
from heapq import heappop as _heappop
from heapq import heappush as _heappush
from typing import Final

from clustersim.engine.request import Request

heapify: Final = _heapify
heappop: Final = _heappop
heappush: Final = _heappush

COMPACT_AT: Final = 64
"""An FCFS queue drops the requests it served from the front of its list once this many are
there and they are at least half of it (amortized O(1) per request)."""


class WaitingQueue:
    """Requests waiting to be admitted: ``add`` at the back, ``prepend`` a preempted one,
    ``peek`` and ``pop`` the next one served, ``remove`` an aborted one."""

    def add(self, request: Request) -> None:
        raise NotImplementedError

    def prepend(self, request: Request) -> None:
        raise NotImplementedError

    def peek(self) -> Request:
        raise NotImplementedError

    def pop(self) -> Request:
        raise NotImplementedError

    def remove(self, request: Request) -> None:
        raise NotImplementedError

    def __len__(self) -> int:
        raise NotImplementedError

    def __iter__(self) -> Iterator[Request]:
        raise NotImplementedError

    def __contains__(self, request: object) -> bool:
        """Whether this very request waits here (by identity)."""
        return any(waiting is request for waiting in self)


class FCFSQueue(WaitingQueue):
    """Waiting requests in arrival order; preempted ones go back to the front. A list read
    from ``head`` on (popping the front moves the head, not the other requests)."""

    def __init__(self) -> None:
        self._items: list[Request] = []
        self._head = 0

    def add(self, request: Request) -> None:
        self._items.append(request)

    def prepend(self, request: Request) -> None:
        if self._head:
            self._head -= 1
            self._items[self._head] = request
        else:
            self._items.insert(0, request)

    def peek(self) -> Request:
        if self._head == len(self._items):
            raise IndexError("peek from an empty queue")
        return self._items[self._head]

    def pop(self) -> Request:
        items = self._items
        head = self._head
        if head == len(items):
            raise IndexError("pop from an empty queue")
        request = items[head]
        head += 1
        if head == len(items):
            items.clear()
            head = 0
        elif head >= COMPACT_AT and 2 * head >= len(items):
            del items[:head]
            head = 0
        self._head = head
        return request

    def remove(self, request: Request) -> None:
        items = self._items
        for i in range(self._head, len(items)):
            if items[i] is request:
                del items[i]
                return
        raise ValueError("the request is not waiting")

    def __len__(self) -> int:
        return len(self._items) - self._head

    def __iter__(self) -> Iterator[Request]:
        return iter(self._items[self._head:])

    def __contains__(self, request: object) -> bool:
        items = self._items
        return any(items[i] is request for i in range(self._head, len(items)))


class PriorityQueue(WaitingQueue):
    """Waiting requests ordered by ``(priority, arrival)``; lower is served first (a
    retried request arrived when it was sent again)."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, float, int, Request]] = []
        self._seq = 0

    def add(self, request: Request) -> None:
        self._seq += 1
        heappush(self._heap, (request.priority, request.engine_arrival_s, self._seq, request))

    def prepend(self, request: Request) -> None:
        self.add(request)  # vLLM pushes a preempted request back into the heap

    def peek(self) -> Request:
        return self._heap[0][3]

    def pop(self) -> Request:
        return heappop(self._heap)[3]

    def remove(self, request: Request) -> None:
        self._heap = [entry for entry in self._heap if entry[3] is not request]
        heapify(self._heap)

    def __len__(self) -> int:
        return len(self._heap)

    def __iter__(self) -> Iterator[Request]:
        return (entry[3] for entry in sorted(self._heap))
