"""Fixed-length closed-loop clients: no lockstep artefact.

32 clients, each sending its next request when its answer is back, every prompt 512 tokens and
every answer 32: the first round is one cold burst (all 32 sent at one instant, their TTFTs a
staircase of prefill steps), and from the second round on the API server's queue has spread
the prompts, so the TTFTs within a round differ. Spreading the clients over the cycle (a
concurrency ramp) lowers the mean TTFT of rounds 2-9: the prompts meet each other less.

What the API server's spread cannot undo is the burst's cohorts in steps: requests prefilled in
one step and answering the same number of tokens finish in one step, whatever spread their
sends had, so a fixed-length closed loop repeats its burst every cycle (evalscope PR #1641
measured the same on a real server: fixed 64-token answers with ``ignore_eos`` kept a 1.86x
TTFT ramp across a cycle of 8 clients, answers of 48-64 tokens or an open loop none).
"""

from __future__ import annotations

import numpy as np
import pytest

from clustersim.scenario import parse_scenario
from clustersim.sim import run_scenario

CLIENTS = 32
ROUNDS = 10


def _rounds(ramp_up_s: float = 0.0, sends: bool = False) -> list[np.ndarray]:
    """TTFT (s) of each round's requests (their send times with ``sends``), rounds in send
    order."""
    data = {
        "name": "closed-loop-drift", "seed": 0, "model": "llama-3.1-8b", "gpu": "h100-sxm",
        "engine": {"max_num_batched_tokens": 2048},
        "workload": {
            "kind": "benchmark", "num_prompts": CLIENTS * ROUNDS, "max_concurrency": CLIENTS,
            "ramp_up_s": ramp_up_s,
            "lengths": {"kind": "independent", "prompt_tokens": 512, "output_tokens": 32},
        },
        "api_server": {},
    }
    result = run_scenario(parse_scenario(data), record_steps=False)
    sent = sorted(result.requests, key=lambda r: (r.arrival_s, r.request_id))
    if sends:
        return [np.array([r.arrival_s for r in sent[k:k + CLIENTS]])
                for k in range(0, len(sent), CLIENTS)]
    return [np.array([r.first_token_s - r.arrival_s for r in sent[k:k + CLIENTS]])
            for k in range(0, len(sent), CLIENTS)]


@pytest.fixture(scope="module")
def cold_burst() -> list[np.ndarray]:
    return _rounds()


def test_the_first_round_is_one_burst_and_later_rounds_are_spread(cold_burst):
    assert len(cold_burst) == ROUNDS
    first = cold_burst[0]
    assert first.max() > 4 * first.min()  # a staircase: 32 x 512 tokens over 2,048-token steps
    sends = _rounds(sends=True)
    assert len(np.unique(sends[0])) == 1  # the cold burst: one instant
    for later, sent in zip(cold_burst[1:-1], sends[1:-1], strict=True):
        # no lockstep: the round goes out at many instants, its TTFTs differ, and none waits
        # as long as the cold burst's last prompt did
        assert len(np.unique(sent)) >= CLIENTS // 4
        assert later.std() > 0.01
        assert later.max() < first.max()


def test_mean_ttft_of_rounds_2_to_9_falls_as_the_prompts_spread(cold_burst):
    cycle = max(r.max() for r in cold_burst) + 32 * 0.02  # a generous bound on one round
    means = [float(np.mean(np.concatenate(rounds[1:-1])))
             for rounds in (cold_burst, _rounds(cycle / 2), _rounds(cycle))]
    assert means[0] > means[1] > means[2]


def _late_over_first(output_tokens: int | dict) -> float:
    """Mean TTFT of rounds 7-12 over the cold burst's, 16 clients of 1,024-token prompts."""
    clients, rounds = 16, 12
    data = {
        "name": "closed-loop-cohorts", "seed": 0, "model": "llama-3.1-8b", "gpu": "h100-sxm",
        "engine": {"max_num_batched_tokens": 8192},
        "workload": {
            "kind": "benchmark", "num_prompts": clients * rounds, "max_concurrency": clients,
            "lengths": {"kind": "independent", "prompt_tokens": 1024,
                        "output_tokens": output_tokens},
        },
        "api_server": {},
    }
    result = run_scenario(parse_scenario(data), record_steps=False)
    sent = sorted(result.requests, key=lambda r: (r.arrival_s, r.request_id))
    ttft = [np.mean([r.first_token_s - r.arrival_s for r in sent[k:k + clients]])
            for k in range(0, len(sent), clients)]
    return float(np.mean(ttft[rounds // 2:]) / ttft[0])


def test_fixed_lengths_repeat_the_burst_and_answers_a_few_tokens_apart_dissolve_it():
    assert _late_over_first(128) > 0.8  # the burst comes back every cycle
    assert _late_over_first({"kind": "uniform", "low": 120, "high": 128}) < 0.5
