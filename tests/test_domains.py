"""The failure domains of a placed deployment: what a capacity review can lose."""

from __future__ import annotations

from pathlib import Path

import pytest

from clustersim.catalog import load_model
from clustersim.cluster.domains import failure_domains
from clustersim.scenario import load_scenario

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"


def _domains(name: str):
    scenario = load_scenario(SCENARIOS / name)
    return failure_domains(scenario, load_model(scenario.model))


def test_a_data_parallel_group_is_one_instance_with_every_rank_s_gpus():
    domains = _domains("moe_dp_ep_h100.yaml")
    (group,) = domains.instances
    assert group.role == "colocated" and len(group.gpus) == 4
    assert group.gpu_counts == {"h100-sxm": 4}
    assert not domains.has_servers


def test_a_split_on_a_topology_names_each_server_and_what_it_holds():
    domains = _domains("h100_prefill_a100_decode.yaml")
    prefill, decode = domains.first_of("prefill"), domains.first_of("decode")
    assert prefill is not None and decode is not None
    assert set(prefill.gpu_counts) == {"h100-sxm"}
    assert set(decode.gpu_counts) <= {"a100-80gb-sxm", "a100-40gb-sxm"}
    assert domains.has_servers
    every_gpu = [g for i in domains.instances for g in i.gpus]
    assert sorted(g for s in domains.servers for g in domains.gpus_on(s)) == sorted(every_gpu)
    for server in domains.servers:
        for name in domains.held_by(server):
            (instance,) = [i for i in domains.instances if i.name == name]
            assert any(domains.server_of[g] == server for g in instance.gpus)


# ------------------------------------------------- data-parallel groups of split pools
def _split(dp: int, nodes: int, faults: dict | None = None) -> dict:
    """A Qwen3-30B-A3B decode pool of one ``dp``-rank expert-parallel group over the first
    ``nodes - 1`` DGX H100s, one prefill instance on the last."""
    data = {
        "name": "dp-split", "model": "qwen3-30b-a3b", "gpu": "h100-sxm",
        "enable_expert_parallel": True,
        "topology": {"node": "dgx-h100", "count": nodes},
        "engine": {"max_model_len": 4096, "block_size": 64},
        "layout": {"kind": "disaggregated", "pools": [
            {"name": "prefill", "role": "prefill", "enable_expert_parallel": False,
             "nodes": [f"node{nodes - 1}"]},
            {"name": "decode", "role": "decode", "data_parallel_size": dp,
             "nodes": [f"node{i}" for i in range(nodes - 1)]},
        ]},
        "workload": {"kind": "poisson", "rate_per_s": 40.0, "num_requests": 160,
                     "prompt_tokens": 256, "output_tokens": 64},
    }
    if faults is not None:
        data["faults"] = faults
    return data


def test_a_split_pool_s_data_parallel_group_is_one_domain_with_every_rank_s_gpus():
    from clustersim.scenario import parse_scenario

    scenario = parse_scenario(_split(16, nodes=3))
    domains = failure_domains(scenario, load_model(scenario.model))
    decode = domains.first_of("decode")
    assert decode is not None and decode.name == "decode-0"
    assert decode.gpu_counts == {"h100-sxm": 16} and len(decode.gpus) == 16
    assert [i.name for i in domains.instances if i.role == "decode"] == ["decode-0"]
    # the group spans node0 and node1: losing either server takes the whole group
    assert "decode-0" in domains.held_by("node0") and "decode-0" in domains.held_by("node1")


@pytest.mark.parametrize("named", ["decode-0.dp3", "decode-0"])
def test_losing_one_rank_of_a_decode_group_loses_every_rank(named):
    """vLLM and SGLang stop a data-parallel expert-parallel group when one engine core dies
    (every MoE layer's collective waits on it): no rank serves after the failure, whichever
    of its names the fault gives."""
    from clustersim.scenario import parse_scenario
    from clustersim.sim import run_scenario

    fault = {"events": [{"kind": "instance", "name": named, "at_s": 1.0}],
             "client": {"max_retries": 0}}
    result = run_scenario(parse_scenario(_split(8, nodes=2, faults=fault)))
    ranks = {f"decode-0.dp{r}" for r in range(8)}
    late = [r for r in result.requests if r.decode_instance in ranks and r.finish_s > 1.0
            and r.outcome == "finished"]
    assert not late, "a rank of the failed group went on decoding"
    assert max(s.end_s for s in result.steps if s.instance in ranks) <= 1.0 + 1e-9
    lost = [r for r in result.requests if r.outcome.startswith("rejected: lost")]
    assert lost and all("decode-0" in r.outcome for r in lost)
    (tally,) = result.faults.tallies.values()
    assert tally.num_lost == len(lost)


def test_a_node_loss_takes_every_group_with_a_rank_on_it():
    """A DP16 decode group over node0 and node1: node1's loss stops the ranks on node0 too."""
    from clustersim.scenario import parse_scenario
    from clustersim.sim import run_scenario

    fault = {"events": [{"kind": "node", "name": "node1", "at_s": 1.0}],
             "client": {"max_retries": 0}}
    result = run_scenario(parse_scenario(_split(16, nodes=3, faults=fault)))
    on_node0 = {f"decode-0.dp{r}" for r in range(8)}  # ranks 0-7 sit on node0
    assert result.steps and all(s.end_s <= 1.0 + 1e-9 for s in result.steps
                                if s.instance in on_node0)
    assert any(s.instance in on_node0 for s in result.steps)
