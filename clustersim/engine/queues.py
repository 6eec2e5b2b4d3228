"""The waiting queues a scheduler admits from: first come first served, or by priority."""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterator

from clustersim.engine.request import Request


class FCFSQueue(deque[Request]):
    """Waiting requests in arrival order; preempted ones go back to the front. A deque, so
    that ``len()`` and iteration, which the scheduler asks for every step, cost no Python
    call."""

    add = deque.append
    prepend = deque.appendleft
    pop = deque.popleft  # type: ignore[assignment]  # the front: the next one served

    def peek(self) -> Request:
        return self[0]


class PriorityQueue:
    """Waiting requests ordered by ``(priority, arrival)``; lower is served first (a
    retried request arrived when it was sent again)."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, float, int, Request]] = []
        self._seq = 0

    def add(self, request: Request) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (request.priority, request.engine_arrival_s, self._seq, request))

    prepend = add  # vLLM pushes a preempted request back into the heap

    def peek(self) -> Request:
        return self._heap[0][3]

    def pop(self) -> Request:
        return heapq.heappop(self._heap)[3]

    def remove(self, request: Request) -> None:
        self._heap = [entry for entry in self._heap if entry[3] is not request]
        heapq.heapify(self._heap)

    def __len__(self) -> int:
        return len(self._heap)

    def __iter__(self) -> Iterator[Request]:
        return (entry[3] for entry in sorted(self._heap))
