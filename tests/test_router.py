"""Routers choose among a pool's instances from what they sent and what came back."""

from __future__ import annotations

import numpy as np

from clustersim.cluster.router import InstanceLoad, Router
from clustersim.engine.request import Request
from clustersim.workload import chain_block_hashes


def make_router(kind: str, n: int = 3, seed: int = 0) -> Router:
    return Router(kind, [InstanceLoad(f"i{k}") for k in range(n)], np.random.default_rng(seed))


def req(rid: str, prompt: int = 100, output: int = 10, hashes: tuple[int, ...] = ()) -> Request:
    return Request(rid, 0.0, prompt, output, block_hashes=chain_block_hashes(hashes))


def route(router: Router, request: Request) -> int:
    index = router.choose(request)
    router.sent(index, request)
    return index


def test_round_robin_cycles():
    router = make_router("round_robin")
    assert [route(router, req(str(i))) for i in range(5)] == [0, 1, 2, 0, 1]


def test_least_outstanding_requests_and_tokens_differ():
    by_requests = make_router("least_outstanding_requests", n=2)
    by_tokens = make_router("least_outstanding_tokens", n=2)
    for router in (by_requests, by_tokens):
        route(router, req("long", prompt=10_000))   # -> instance 0
        route(router, req("a", prompt=10))          # -> instance 1
    # instance 0 has 1 request of 10,010 tokens, instance 1 has 1 of 20 tokens
    route(by_requests, req("b", prompt=10))        # tie on requests -> lowest index
    route(by_tokens, req("b", prompt=10))
    assert by_requests.loads[0].outstanding_requests == 2
    assert by_tokens.loads[1].outstanding_requests == 2


def test_returned_requests_free_capacity():
    router = make_router("least_outstanding_requests", n=2)
    first = req("first")
    assert route(router, first) == 0
    assert route(router, req("second")) == 1
    router.returned(0, first)
    assert router.choose(req("third")) == 0
    assert router.loads[0].outstanding_tokens == 0


def test_power_of_two_is_seeded_and_prefers_the_lighter_sample():
    picks = [route(make_router("power_of_two", n=4, seed=7), req("x")) for _ in range(3)]
    assert len(set(picks)) == 1  # same seed, same choice
    router = make_router("power_of_two", n=2, seed=1)
    for i in range(20):
        route(router, req(str(i)))
    assert {load.outstanding_requests for load in router.loads} == {10}


def test_prefix_aware_follows_the_longest_cached_prefix():
    router = make_router("prefix_aware", n=3)
    assert route(router, req("a", hashes=(1, 2, 3))) == 0
    assert route(router, req("b", hashes=(9,))) == 1
    # shares two blocks with 'a' -> instance 0 although it is not the least loaded
    assert router.choose(req("c", hashes=(1, 2, 7))) == 0
    # no hashes: least outstanding requests
    assert router.choose(req("d")) == 2


def test_least_loaded_is_the_first_instance_up_with_the_fewest_under_any_history():
    """The kept tournament tree chooses what a scan of every instance up would: the fewest
    outstanding requests (tokens), the lowest index on a tie, never one that is down."""
    rng = np.random.default_rng(3)
    for kind, count in (("least_outstanding_requests", "outstanding_requests"),
                        ("least_outstanding_tokens", "outstanding_tokens")):
        for n in (1, 2, 5, 8, 13):
            router = make_router(kind, n=n)
            held: list[tuple[int, Request]] = []
            for step in range(400):
                action = rng.random()
                if action < 0.1:
                    index = int(rng.integers(n))
                    router.set_down(index, index not in router.down)
                elif action < 0.45 and held:
                    index, request = held.pop(int(rng.integers(len(held))))
                    router.returned(index, request)
                else:
                    request = req(f"r{step}", prompt=int(rng.integers(1, 50)),
                                  output=int(rng.integers(1, 50)))
                    up = [i for i in range(n) if i not in router.down]
                    index = router.choose(request)
                    if not up:
                        assert index is None
                        continue
                    expected = min(up, key=lambda i: (getattr(router.loads[i], count), i))
                    assert index == expected, (kind, n, step)
                    router.sent(index, request)
                    held.append((index, request))
