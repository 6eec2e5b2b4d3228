"""Which all-reduce vLLM runs (custom below its size limit, NCCL above) and its measured curve,
as clustersim prices them."""

from __future__ import annotations

import pytest

from clustersim.catalog import load_gpu, load_model
from clustersim.cost.collectives import custom_allreduce_max_bytes
from clustersim.cost.roofline import BatchShape, CostModel

MIB = 1024 * 1024


@pytest.mark.parametrize("tp, limit", [(2, 8 * MIB), (4, 8 * MIB), (6, MIB // 2), (8, MIB // 4),
                                       (3, 0)])
def test_hopper_limits_follow_vllm_with_symmetric_memory(tp, limit):
    gpu = load_gpu("h100-sxm", profile="aiconfigurator")
    assert custom_allreduce_max_bytes(gpu, tp, gpu.link) == limit


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_ampere_keeps_the_default_8_mib(tp):
    gpu = load_gpu("a100-80gb-sxm", profile="aiconfigurator")
    assert custom_allreduce_max_bytes(gpu, tp, gpu.link) == 8 * MIB


def test_pcie_needs_a_pair_and_a_fit():
    h100 = load_gpu("h100-sxm", profile="aiconfigurator")
    # vLLM: "not supported on more than two PCIe-only GPUs"; a PCIe pair with P2P is
    assert custom_allreduce_max_bytes(h100, 4, h100.pcie) == 0
    assert custom_allreduce_max_bytes(h100, 2, h100.pcie) == 8 * MIB
    # no custom all-reduce measured (fit-v1, the RTX PRO 6000): NCCL at every size
    assert custom_allreduce_max_bytes(load_gpu("h100-sxm", profile="vidur"), 2,
                                      h100.link) == 0
    pro = load_gpu("rtx-pro-6000-server")
    assert custom_allreduce_max_bytes(pro, 2, pro.link) == 0


def test_llama_70b_tp8_switches_to_nccl_at_16_tokens_on_the_h100_fits():
    """256 KiB at TP8 on Hopper is 16 tokens of Llama-3.1-70B's 8192-wide bf16 hidden state:
    priced by the fits (the H100 without its measured curve), the all-reduce cost jumps to
    NCCL's latency there (vLLM's strict ``bytes < max_size``)."""
    model = load_model("llama-3.1-70b")
    gpu = load_gpu("h100-sxm", profile="aiconfigurator").model_copy(
        update={"allreduce_curves": ()})
    cost = CostModel(model, gpu, 8)
    comm = {n: cost.step_time(BatchShape.from_chunks([(1, 500, True)] * n)).communication_s
            for n in (15, 16)}
    count = 2 * model.num_layers + 1
    assert gpu.custom_allreduce_latency_s < gpu.allreduce_latency_s
    jump = count * (gpu.allreduce_latency_s - gpu.custom_allreduce_latency_s)
    assert comm[16] - comm[15] > 0.9 * jump


@pytest.mark.parametrize("gpu_id", ["h100-sxm", "a100-80gb-sxm", "h200"])
def test_the_measured_curve_prices_every_tp_group_on_nvlink(gpu_id):
    """The H100 and A100 SXM profiles carry vLLM's all-reduce measured at 2, 4 and 8 GPUs; the
    H200, on the same NVLink, inherits the H100's. A step's 161 all-reduces of Llama-3.1-70B
    (8 KiB of hidden state a token) cost 161 x the curve's time at the step's message size."""
    model, gpu = load_model("llama-3.1-70b"), load_gpu(gpu_id)
    assert [curve.gpus for curve in gpu.allreduce_curves] == [2, 4, 8]
    count = 2 * model.num_layers + 1
    for curve in gpu.allreduce_curves:
        cost = CostModel(model, gpu, curve.gpus)
        for size, seconds in curve.points:
            tokens = size / (model.hidden_size * 2)
            if tokens < 1 or not tokens.is_integer():
                continue
            (op,) = [op for op in cost.operators(BatchShape.from_chunks([(int(tokens), 0, True)]))
                     if op.name.startswith("all-reduce")]
            assert op.name == "all-reduce (vLLM's, measured)"
            assert op.communication_s == pytest.approx(count * seconds, rel=1e-9)


def test_an_h100_pcie_group_keeps_the_fits():
    """The curve was measured over NVLink: the H100 PCIe's profile does not carry it."""
    assert load_gpu("h100-pcie").allreduce_curves == ()
