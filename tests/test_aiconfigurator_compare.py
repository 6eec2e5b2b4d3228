"""benchmarks/aiconfigurator_compare.py reads aiconfigurator's files and writes clustersim
scenarios: both checked on saved samples, without aiconfigurator installed."""

import importlib.util
import sys
from pathlib import Path

import pytest

from clustersim.scenario import parse_scenario

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "aiconfigurator_compare.py"
spec = importlib.util.spec_from_file_location("aiconfigurator_compare", BENCH)
bench = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = bench  # its dataclasses look their module up there
spec.loader.exec_module(bench)

# the header and rank-1 rows of aiconfigurator 0.12.0's best_config_topn.csv for DeepSeek-R1
# on 32 h200_sxm, vLLM, 2000/800 tokens, TTFT 2000 ms, TPOT 50 ms (`cli default --save-dir`)
AGG = (
    "model,isl,osl,prefix,concurrency,request_rate,bs,global_bs,ttft,tpot,request_latency,"
    "encoder_latency,encoder_memory,seq/s,seq/s/gpu,tokens/s,tokens/s/gpu,tokens/s/user,"
    "num_total_gpus,tp,pp,dp,moe_tp,moe_ep,cp,parallel,gemm,kvcache,fmha,moe,comm,memory,"
    "balance_score,num_ctx_reqs,num_gen_reqs,num_tokens,ctx_tokens,gen_tokens,backend,version,"
    "system,power_w,tokens/s/gpu_cluster\n"
    "deepseek-ai/DeepSeek-R1,2000,800,0,160,4.11,20,160,798.289,47.718,38924.724,0,0.0,4.11,"
    "0.514,3284.288,410.536,20.957,8,1,1,8,8,1,1,tp1pp1dp8etp8ep1,fp8_block,fp8,bfloat16,"
    "fp8_block,half,109.681,0.025,1.0,19.0,2019.0,2000,19.0,vllm,0.24.0,h200_sxm,0.0,410.536\n"
)
DISAGG = (
    "model,isl,osl,prefix,concurrency,request_rate,(p)bs,(p)global_bs,(p)workers,(d)bs,"
    "(d)global_bs,(d)workers,ttft,tpot,request_latency,encoder_latency,seq/s,seq/s/gpu,tokens/s,"
    "tokens/s/gpu,tokens/s/user,(p)seq/s/worker,(d)seq/s/worker,num_total_gpus,(p)tp,(p)pp,"
    "(p)dp,(p)moe_tp,(p)moe_ep,(p)cp,(p)parallel,(p)gemm,(p)kvcache,(p)fmha,(p)moe,(p)comm,"
    "(p)memory,(p)backend,(p)version,(p)system,(d)tp,(d)pp,(d)dp,(d)moe_tp,(d)moe_ep,"
    "(d)parallel,(d)gemm,(d)kvcache,(d)fmha,(d)moe,(d)comm,(d)memory,(d)backend,(d)version,"
    "(d)system,(e)workers,(e)tp,(e)pp,(e)bs,(e)parallel,(e)memory,power_w,tokens/s/gpu_cluster\n"
    # a replica of 24 GPUs in a budget of 32: per GPU of the budget is tokens/s/gpu_cluster
    "deepseek-ai/DeepSeek-R1,2000,800,0,640,14.066,1,8,1,80,320,2,921.386,49.324,40324.07,0.0,"
    "14.066,0.586,11252.88,468.87,20.278,15.629,8.014,24,1,1,8,8,1,1,tp1pp1dp8etp8ep1,fp8_block,"
    "fp8,bfloat16,fp8_block,half,107.844,vllm,0.24.0,h200_sxm,2,1,4,8,1,tp2pp1dp4etp8ep1,"
    "fp8_block,fp8,fp8,fp8_block,half,96.1,vllm,0.24.0,h200_sxm,0,0,0,0,,0.0,0.0,"
    "351.65250000000003\n"
)
ESTIMATE = """\
============================================================
  Performance Estimate (static_gen)
============================================================
  Model:            deepseek-ai/DeepSeek-R1
  Batch Size:       96
------------------------------------------------------------
  Generation lat.:  33239.702 ms
  TPOT:             41.602 ms
  Power (per GPU):  unavailable (0.0% coverage)
------------------------------------------------------------
  tokens/s:         4,615.20
"""


def _save_dir(tmp_path: Path, disagg: bool = True) -> Path:
    run = tmp_path / "deepseek-ai" / "DeepSeek-R1_h200_sxm_vllm_isl2000_osl800_ttft2000_tpot50_1"
    (run / "agg").mkdir(parents=True)
    (run / "agg" / "best_config_topn.csv").write_text(AGG)
    if disagg:
        (run / "disagg").mkdir()
        (run / "disagg" / "best_config_topn.csv").write_text(DISAGG)
    return tmp_path


def test_reads_both_modes_per_gpu_of_the_budget(tmp_path):
    question = bench.QUESTIONS["r1"]
    rows = bench.best_rows(_save_dir(tmp_path))
    agg = bench.aic_answer("agg", rows["agg"], question, "vllm")
    assert agg.kind == "colocated" and agg.layout == "4 x tp1pp1dp8etp8ep1 bs 20"
    assert agg.req_per_gpu == pytest.approx(410.536 / 800)
    assert (agg.tokens_per_user, agg.ttft_ms, agg.tpot_ms) == (20.957, 798.289, 47.718)
    split = bench.aic_answer("disagg", rows["disagg"], question, "vllm")
    assert split.kind == "split"
    assert split.layout == "1 x (1P tp1pp1dp8etp8ep1 bs 1 + 2D tp2pp1dp4etp8ep1 bs 80)"
    # the 8 GPUs the replica leaves idle count: 14.066 req/s over 32, not over 24
    assert split.req_per_gpu == pytest.approx(14.066 / 32, rel=1e-3)
    assert split.tokens_per_gpu == pytest.approx(351.6525)


def test_a_missing_mode_is_reported_not_invented(tmp_path):
    rows = bench.best_rows(_save_dir(tmp_path, disagg=False))
    assert set(rows) == {"agg"}


def test_reads_an_estimate():
    assert bench.estimate_ms(ESTIMATE, "decode") == 41.602
    assert bench.estimate_ms(ESTIMATE, "prefill") is None
    assert bench.estimate_ms("  TTFT:             1,465.346 ms\n", "prefill") == 1465.346


@pytest.mark.parametrize("key", sorted(bench.QUESTIONS))
@pytest.mark.parametrize("criterion", ["joint", "mean"])
def test_each_question_is_a_valid_plan(key, criterion):
    question = bench.QUESTIONS[key]
    scenario = parse_scenario(bench.scenario(question, criterion, seeds=1))
    assert scenario.plan.gpu_budget == question.gpus
    assert scenario.slo.criterion == criterion
    assert (scenario.slo.ttft_s, scenario.slo.tpot_s) == (question.ttft_s, question.tpot_s)
    assert bench.aic_arguments(question, "sglang")[-11:] == [
        "--isl", str(question.isl), "--osl", str(question.osl),
        "--ttft", f"{question.ttft_s * 1e3:g}", "--tpot", f"{question.tpot_s * 1e3:g}",
        "--top-n", "1", "--no-color"]


def test_skips_without_aiconfigurator(monkeypatch, capsys, tmp_path):
    monkeypatch.delenv("AICONFIGURATOR", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr("sys.argv", ["aiconfigurator_compare.py", "--out", str(tmp_path)])
    assert bench.main() == 0
    assert "skipped, aiconfigurator is not installed" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
