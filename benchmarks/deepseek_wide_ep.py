"""DeepSeek-R1 with SGLang's PD split and wide expert parallelism on 12 x DGX H100, beside
the LMSYS blog's published per-node throughput (2025-05-05, "Deploying DeepSeek with PD
Disaggregation and Large-scale Expert Parallelism on 96 H100 GPUs").

    python benchmarks/deepseek_wide_ep.py

Runs ``scenarios/deepseek_r1_sglang_96xh100.yaml`` in-process (``run_scenario``, what
``clustersim simulate`` runs) and prints:

- prefill: the input tokens/s per node of the prefill pool (3 nodes, EP 24) over its busy
  span, the burst keeping it saturated (published: 52.3k per node, 54.5k at 2K on 4 nodes);
- decode: the output tokens/s per node the decode pool (9 nodes, EP 72) reached in that run,
  at the batch the 3 prefill nodes could feed it, and at the blog's operating point (256
  requests per GPU, 2,000 tokens of context), priced by the same decode rank's cost model
  (published: 22.3k per node; the blog filled its decode ranks by slowing them down);
- the same two figures with two-batch overlap on both pools (``engine.two_batch_overlap``),
  which the blog's servers ran (``--enable-two-batch-overlap`` in its launch lines,
  github.com/sgl-project/sglang issue 6017) and the scenario leaves off;
- the same operating points for the blog's baseline, SGLang TP16 with DP attention on pairs
  of nodes (here: a colocated group of 16 DP-attention ranks over two nodes, every expert
  sliced 16 ways, all-gather over the NICs), and the ratio (the blog: 5.2x on decode, 3.3x
  on prefill, "up to 5x").

Nothing is fitted to the published figures.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from clustersim.catalog import load_model
from clustersim.cluster.system import Cluster
from clustersim.engine.clock import Clock
from clustersim.inputs import load_yaml
from clustersim.scenario import load_scenario, parse_scenario
from clustersim.sim import run_scenario

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "deepseek_r1_sglang_96xh100.yaml"
PUBLISHED_PREFILL = 52_300.0
"""Input tokens/s per node (the blog's headline; 54,543 at 2K prompts on 4 prefill nodes)."""
PUBLISHED_DECODE = 22_300.0
"""Output tokens/s per node (22,282 on 9 decode nodes, 256 requests per GPU, 2K context)."""
PUBLISHED_DECODE_RATIO = 5.2
"""Decode over the TP16 baseline (the blog's "up to 5x")."""
PUBLISHED_PREFILL_RATIO = 3.3
GPUS_PER_NODE = 8
PROMPT = 2000
BATCH = 256


def _cluster(scenario: Any) -> Cluster:
    model = load_model(scenario.model, path="model")
    return Cluster(Clock(), scenario, model, np.random.default_rng(0), on_done=lambda r: None)


def _decode_rate(prices: Any, batch: int, context: int) -> float:
    """Output tokens/s of one rank decoding ``batch`` requests of ``context`` tokens."""
    # every rank of the group decodes a batch like this one (the MoE layers see all of them)
    step = prices.decode_run_s(batch, batch * (context + 1), 1, prices.dp * batch)[0]
    return batch / step


def _prefill_rate(cost_model: Any, tokens: int, moe_tokens: int | None = None) -> float:
    """Input tokens/s of one rank running ``tokens`` prompt tokens in 2,000-token prompts."""
    from clustersim.cost.roofline import BatchShape

    chunks = [(PROMPT, 0, True)] * (tokens // PROMPT)
    shape = BatchShape.from_chunks(chunks)
    return shape.num_prefill_tokens / cost_model.step_time(shape, moe_tokens).time_s


def _a2a_share(prices: Any, tokens: int, prompts: bool) -> tuple[float, float]:
    """(step s, of it the experts' all-to-all s) of one rank's step: ``tokens`` prompt tokens
    in 2,000-token prompts (``prompts``) or a decode of ``tokens`` requests at 2,000 tokens of
    context, its MoE layers seeing every rank's as many (the group's lockstep step)."""
    ops: list[Any] = []
    if prompts:
        chunks = tokens // PROMPT
        args = (chunks * PROMPT, chunks * PROMPT * (PROMPT + 1) / 2, chunks * PROMPT, 0, 0,
                chunks, chunks)
    else:
        args = (0, 0.0, 0, tokens, tokens * (PROMPT + 1), tokens, tokens)
    parts = prices.parts(*args, prices.dp * tokens, ops)
    a2a = sum(op[3] for op in ops if "all-to-all" in op[0])
    return sum(parts), a2a


def _rates(scenario: Any) -> tuple[float, float, float, float]:
    """(prefill input tok/s per node over the run, decode output tok/s per node over the run,
    the run's mean decode batch per GPU, decode output tok/s per node at the blog's point)."""
    result = run_scenario(scenario)
    nodes = {pool.name: len(pool.nodes) for pool in scenario.layout.pools}
    rows: dict[str, list[Any]] = {"prefill": [], "decode": []}
    for step in result.steps:
        rows[step.instance.split("-", 1)[0]].append(step)
    prefill = rows["prefill"]
    prefill_tokens = sum(sum(n for _, n in s.prefill_chunks) for s in prefill)
    prefill_span = max(s.end_s for s in prefill) - min(s.start_s for s in prefill)
    decode = rows["decode"]
    decode_tokens = sum(s.num_decode_tokens for s in decode)
    decode_span = max(s.end_s for s in decode) - min(s.start_s for s in decode)
    group = next(g for g in _cluster(scenario).rank_groups if g.role == "decode")
    assert group.lockstep is not None
    decode_prices = group.lockstep.price_steps.cost_model.prices
    return (prefill_tokens / prefill_span / nodes["prefill"],
            decode_tokens / decode_span / nodes["decode"], decode_tokens / len(decode),
            _decode_rate(decode_prices, BATCH, PROMPT) * GPUS_PER_NODE)


def main() -> None:
    scenario = load_scenario(SCENARIO)
    pools = {p.name: p for p in scenario.layout.pools}
    nodes = {name: len(pool.nodes) for name, pool in pools.items()}
    run_prefill, run_decode, mean_batch, op_decode = _rates(scenario)
    # the same servers with two-batch overlap, as the blog's ran (sglang#6017's launch lines)
    overlap = dict(load_yaml(SCENARIO, "scenario"))
    overlap["engine"] = {**overlap["engine"], "two_batch_overlap": True}
    tbo_prefill, _, _, tbo_decode = _rates(parse_scenario(overlap))

    # the baseline: SGLang TP16 + DP attention on two nodes, six such groups on the twelve
    data = dict(load_yaml(SCENARIO, "scenario"))
    data.pop("layout")
    data["enable_expert_parallel"] = False
    data["data_parallel_size"] = 16
    data["topology"] = {"node": "dgx-h100", "count": 2}
    data["engine"] = {"max_model_len": 8192, "block_size": 64, "max_num_seqs": 1024,
                      "max_num_batched_tokens": 16384}
    base = parse_scenario(data)
    group = _cluster(base).instances["colocated"][0]
    base_cost = group.price_steps.cost_model
    rank = group.ranks[0]
    kv_tokens = rank.scheduler.kv.num_usable_blocks * base.engine.block_size
    base_batch = min(1024, kv_tokens // (PROMPT + 100))
    base_decode = 0.0
    if base_batch:
        step = base_cost.decode_run_s(base_batch, base_batch * (PROMPT + 1), 1, 16 * base_batch)
        base_decode = base_batch / step[0] * GPUS_PER_NODE
    base_prefill = _prefill_rate(base_cost, 16_000, 16 * 16_000) * GPUS_PER_NODE

    print(f"{scenario.name}: {scenario.workload.num_requests} requests of {PROMPT} prompt tokens; "
          f"prefill {nodes['prefill']} nodes (EP {pools['prefill'].data_parallel_size}), "
          f"decode {nodes['decode']} nodes (EP {pools['decode'].data_parallel_size})")
    print(f"{'per node':44s} {'simulated':>11s} {'published':>11s} {'sim/pub':>8s}")
    for label, sim, pub in (
        ("prefill input tok/s (saturated run)", run_prefill, PUBLISHED_PREFILL),
        (f"decode output tok/s (run, mean batch {mean_batch:.0f}/GPU)", run_decode,
         PUBLISHED_DECODE),
        (f"decode output tok/s ({BATCH}/GPU, {PROMPT} context)", op_decode, PUBLISHED_DECODE),
    ):
        print(f"{label:44s} {sim:11,.0f} {pub:11,.0f} {sim / pub:8.2f}")
    print("with two-batch overlap (engine.two_batch_overlap, as the blog's servers ran):")
    for label, sim, pub in (
        ("  prefill input tok/s (saturated run)", tbo_prefill, PUBLISHED_PREFILL),
        (f"  decode output tok/s ({BATCH}/GPU, {PROMPT} context)", tbo_decode, PUBLISHED_DECODE),
    ):
        print(f"{label:44s} {sim:11,.0f} {pub:11,.0f} {sim / pub:8.2f}")
    print(f"baseline TP16-like (DP16 attention, experts sliced 16 ways, 2 nodes): decode batch "
          f"{base_batch}/GPU fits its KV")
    print(f"{'  decode output tok/s per node':44s} {base_decode:11,.0f}")
    print(f"{'  prefill input tok/s per node':44s} {base_prefill:11,.0f}")
    cluster = _cluster(scenario)
    for label, pool, tokens, prompts in (("prefill rank, a 16,000-token step", "prefill",
                                          16_000, True),
                                         (f"decode rank, {BATCH} requests", "decode", BATCH,
                                          False)):
        group = next(g for g in cluster.rank_groups if g.role == pool)
        assert group.lockstep is not None
        step, a2a = _a2a_share(group.lockstep.price_steps.cost_model.prices, tokens, prompts)
        print(f"{label}: {step * 1e3:,.1f} ms, of which the experts' all-to-all "
              f"{a2a * 1e3:,.1f} ms")
    if base_decode:
        print(f"wide EP over baseline: decode {op_decode / base_decode:.1f}x "
              f"(published {PUBLISHED_DECODE_RATIO}x), prefill {run_prefill / base_prefill:.1f}x "
              f"(published {PUBLISHED_PREFILL_RATIO}x)")


if __name__ == "__main__":
    main()
