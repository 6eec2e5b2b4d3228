"""The failure domains of a placed deployment: what a capacity review can lose."""

from __future__ import annotations

from pathlib import Path

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
