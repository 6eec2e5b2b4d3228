"""``clustersim catalog``: every id a scenario can name, with the figures behind it."""

from __future__ import annotations

import json

from clustersim.catalog import default_prices, gpu_ids, load_gpu, model_ids
from clustersim.cluster.topology import shipped_topologies
from tests.helpers import run_cli


def test_catalog_lists_every_model_gpu_and_topology():
    code, output = run_cli("catalog")
    assert code == 0, output
    first_words = {line.split(" ")[0] for line in output.splitlines() if line}
    for catalog_id in [*model_ids(), *gpu_ids(), *shipped_topologies()]:
        assert catalog_id in first_words, catalog_id
    rows = {line.split()[0]: line.split() for line in output.splitlines() if line.strip()}
    # params, active params of a MoE model, layers; memory, bandwidth, TFLOPS, link, price
    assert rows["llama-3.1-8b"][1:4] == ["8.0B", "32", "4096"]
    assert rows["mixtral-8x7b"][1:3] == ["46.7B", "12.9B"]
    assert rows["h100-sxm"][1:8] == ["79.2", "3,350", "989", "1,979", "nvlink", "450", "2.69"]
    assert rows["dgx-h100-x2"][1:] == ["2", "16", "x", "h100-sxm"]


def test_catalog_json_carries_sources_and_prices():
    code, output = run_cli("catalog", "--json")
    assert code == 0, output
    data = json.loads(output)
    assert [m["id"] for m in data["models"]] == model_ids()
    assert [g["id"] for g in data["gpus"]] == gpu_ids()
    assert [t["name"] for t in data["topologies"]] == shipped_topologies()
    prices = default_prices()
    for gpu in data["gpus"]:
        assert gpu["source"] and gpu["mem_bw_gb_per_s"] == load_gpu(gpu["id"]).mem_bw_gb_per_s
        price = prices.get(gpu["id"])
        assert (gpu["usd_per_gpu_hour"], gpu["price_source"]) == (price or (None, None))
    assert all(m["source"] and m["num_params"] >= m["active_params"] > 0
               for m in data["models"])
    moe = next(m for m in data["models"] if m["id"] == "qwen3-30b-a3b")
    assert (moe["num_experts"], moe["num_experts_per_tok"]) == (128, 8)
