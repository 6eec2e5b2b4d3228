"""The shipped calibration: fits on kernel profiles only, and the profile load_gpu merges."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from clustersim.calibration.fewshot import fit_few_shot
from clustersim.calibration.fit import GemmRows, fit_allreduce, fit_gemm
from clustersim.calibration.fitsets import (
    SETS,
    SHIPPED_FIT_ID,
    shipped_profiles,
)
from clustersim.calibration.profile import CATALOG_PROFILE, FIT_SET_PROFILES, dump_profiles
from clustersim.calibration.sources import FIT_DIR, VALIDATION_DIR, fit_files, validation_files
from clustersim.catalog import apply_profile, load_gpu, load_model, load_profiles
from clustersim.cost.roofline import BatchShape, CostModel
from clustersim.errors import ConfigError, InputError
from tests.helpers import run_cli


def make_gpu(**overrides):
    """The uncalibrated RTX 4090 entry with ``overrides``."""
    return load_gpu("rtx4090", profile="default").model_copy(update=overrides)


# ------------------------------------------------------------ data separation
@pytest.mark.slow
def test_calibration_reads_no_validation_file(calibration_run):
    """Every file the fit (and its DistServe cross-check) opens is under fit/, none under
    validation/ (the session's one fit run, spied on every way it opens a file)."""
    _, opened = calibration_run
    data_files = [p.resolve() for p in opened if FIT_DIR.parent in p.resolve().parents]
    assert data_files, "the spy saw no data file"
    assert all(FIT_DIR in p.parents for p in data_files)
    assert not set(data_files) & {p.resolve() for p in validation_files()}
    # and every declared fit file exists and is outside the validation folder
    assert fit_files() and all(VALIDATION_DIR not in p.parents for p in fit_files())


@pytest.mark.slow
def test_shipped_profiles_are_what_calibrate_writes(calibration_run):
    sets, _ = calibration_run
    shipped = yaml.safe_load(CATALOG_PROFILE.read_text())
    assert shipped == yaml.safe_load(dump_profiles(shipped_profiles(sets), fit_id=SHIPPED_FIT_ID))
    for name, path in FIT_SET_PROFILES.items():
        assert yaml.safe_load(path.read_text()) == yaml.safe_load(
            dump_profiles(sets[name], fit_id=SETS[name])), name


def test_shipped_data_carries_licenses():
    for folder in ("fit/vidur", "fit/rtx4090", "fit/rtx-pro-6000", "fit/distserve",
                   "fit/aiconfigurator",
                   "validation/splitwise",
                   "validation/llmservingsim"):
        assert list((FIT_DIR.parent / folder).glob("LICENSE*")), folder
    assert (FIT_DIR.parent / "README.md").is_file()


# ------------------------------------------------------------------ the fits
def test_fit_gemm_recovers_known_efficiencies():
    tokens = np.array([1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096], dtype=float)
    k = n = 4096
    flops_per_token = np.full_like(tokens, 2.0 * k * n)
    nbytes = (k * n + tokens * (k + n)) * 2
    peak, bw = 100e12, 1e12
    true = np.maximum((tokens + 32) * flops_per_token / (0.8 * peak), nbytes / (0.6 * bw))
    fitted = fit_gemm(GemmRows(tokens, flops_per_token, nbytes, true), peak, bw)
    assert fitted["compute_efficiency"] == pytest.approx(0.8, abs=0.011)
    assert fitted["memory_efficiency"] == pytest.approx(0.6, abs=0.011)
    assert fitted["compute_half_tokens"] == 32.0


def test_fit_allreduce_recovers_alpha_and_bus_bandwidth():
    sizes = np.geomspace(2048, 2**28, 40)
    frame = pd.DataFrame({"num_workers": 4, "size": sizes})
    frame["all_reduce_median"] = (20e-6 + 1.5 * sizes / 300e9) * 1e3
    gpu = make_gpu()
    fitted = fit_allreduce(frame, gpu)
    assert fitted["allreduce_latency_s"] == pytest.approx(20e-6, rel=1e-3)
    assert fitted["busbw_gb_per_s"] == pytest.approx(300, rel=1e-3)


def test_calibrated_values_are_plausible():
    for fit in ("calibrated", "vidur", "aiconfigurator"):
        profiles = load_profiles(fit)
        for gpu_id in ("a100-80gb-sxm", "h100-sxm"):
            p = profiles[gpu_id]
            assert 0.6 <= p["compute_efficiency"] <= 0.9, fit  # large-GEMM MFU, section 3.3
            assert 0.45 <= p["memory_efficiency"] <= 0.95, fit
            assert p["allreduce_latency_s"] < 1e-4, fit
            assert p["provenance"]["sources"], fit
        # the RTX PRO 6000 has its own GEMM, attention and PCIe all-reduce fit
        pro = profiles["rtx-pro-6000-server"]
        assert pro["provenance"]["sources"][:4] == ["rtx-pro-6000/dense.csv",
                                                    "rtx-pro-6000/dense_tp2.csv",
                                                    "rtx-pro-6000/attention_prefill.csv",
                                                    "rtx-pro-6000/allreduce_2rank.csv"]
        assert 0.5 <= pro["compute_efficiency"] <= 0.9, fit
        assert 10e-6 <= pro["allreduce_latency_s"] <= 20e-6, fit  # NCCL, 2 ranks over PCIe
        assert pro["provenance"]["attention"]["measured_on"] == "rtx-pro-6000-server"
        assert pro["provenance"]["attention"]["num_rows"] >= 50
        # the Workstation Edition borrows it, all-reduce fit included (the same PCIe link)
        work = profiles["rtx-pro-6000"]
        assert {k: v for k, v in work["provenance"].items() if k != "small_kernels"} == {
            "transferred_from": "rtx-pro-6000-server", "fp8_transferred_from": "l40s"}
        if fit != "vidur":  # fit-v2 prices the small kernels on the Server Edition's fit
            assert (work["provenance"]["small_kernels"]["calibration"]
                    == "fit-v2:rtx-pro-6000-server->rtx-pro-6000")
        assert work["allreduce_latency_s"] == pro["allreduce_latency_s"]
        assert "allreduce_latency_s" not in profiles["l40s"]
    # fit-v1 lends the L40S the RTX 4090's fit; fit-v2 (shipped) measures it on its own tables
    assert load_profiles("vidur")["l40s"]["provenance"]["transferred_from"] == "rtx4090"
    l40s = load_profiles()["l40s"]
    assert l40s["calibration"] == "fit-v2:l40s"
    assert l40s["provenance"]["sources"][0] == "aiconfigurator/gemm_l40s.csv"
    # the RTX 4090's GEMM floor, which its own 38-247 us GEMMs cannot tell, is the L40S's
    rtx4090 = load_profiles()["rtx4090"]
    assert rtx4090["gemm_floor_s"] == l40s["gemm_floor_s"]
    assert rtx4090["provenance"]["gemm"]["floor_from"] == "l40s"


# --------------------------------------------------------------- the profile
def test_load_gpu_merges_the_calibrated_profile():
    default, calibrated = load_gpu("h100-sxm", profile="default"), load_gpu("h100-sxm")
    entry = load_profiles()["h100-sxm"]
    assert calibrated.compute_efficiency == entry["compute_efficiency"]
    assert calibrated.link.efficiency == entry["link_efficiency"]
    assert calibrated.calibration == "fit-v2:h100-sxm"
    assert calibrated.gemm_floor_s == entry["gemm_floor_s"] > 0
    assert load_gpu("h100-sxm", profile="vidur").calibration == "fit-v1:h100-sxm"
    assert default.calibration == "default"
    assert calibrated.peak_flops == default.peak_flops


def test_profile_file_from_a_path(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump({"profiles": {"rtx4090": {"per_step_overhead_s": 0.005,
                                                             "calibration": "mine"}}}))
    gpu = load_gpu("rtx4090", profile=str(path))
    assert gpu.per_step_overhead_s == 0.005 and gpu.calibration == "mine"


def test_bad_profiles_are_errors(tmp_path):
    with pytest.raises(InputError, match="no such profile file"):  # located by its own path
        load_gpu("rtx4090", profile=str(tmp_path / "missing.yaml"))
    with pytest.raises(ConfigError, match="unknown profile fields"):
        apply_profile(make_gpu(), {"compute_efficency": 0.5})
    with pytest.raises(Exception, match="less than or equal"):
        apply_profile(make_gpu(), {"compute_efficiency": 1.5})


def test_half_tokens_slows_small_gemms_only():
    model = load_model("llama-3.1-8b")
    gpu = make_gpu(compute_efficiency=0.5, memory_efficiency=1.0)
    slow = gpu.model_copy(update={"compute_half_tokens": 64.0})
    big = BatchShape.from_chunks([(8192, 0, True)])
    t0, t1 = (CostModel(model, g).step_time(big).compute_s for g in (gpu, slow))
    assert t1 > t0 and t1 < 1.05 * t0
    one = BatchShape.from_chunks([(1, 100, True)])
    assert CostModel(model, slow).step_time(one).compute_s == 0.0  # still weight-read bound


# ------------------------------------------------------------------ few-shot
def test_few_shot_recovers_overheads_it_was_fitted_on():
    model, base = load_model("llama-2-70b"), load_gpu("a100-80gb-sxm")
    # one compute scale moves GEMMs and attention together, as the fit does
    truth = base.model_copy(update={"per_step_overhead_s": 0.02, "per_request_overhead_s": 2e-4,
                                    "compute_efficiency": base.compute_efficiency * 2 / 3,
                                    "attention_efficiency": base.attention_efficiency * 2 / 3})
    shapes = [BatchShape.from_chunks([(512, 0, True)]),
              BatchShape.from_chunks([(1, 600, True)]),
              BatchShape.from_chunks([(1, 600, True)] * 64)]
    points = [(s, CostModel(model, truth, 4).step_time(s).time_s) for s in shapes]
    tuned = fit_few_shot(model, base, 4, points)
    assert tuned.per_step_overhead_s == pytest.approx(0.02, rel=0.02)
    assert tuned.per_request_overhead_s == pytest.approx(2e-4, rel=0.05)
    check = BatchShape.from_chunks([(4096, 0, True)])
    assert CostModel(model, tuned, 4).step_time(check).time_s == pytest.approx(
        CostModel(model, truth, 4).step_time(check).time_s, rel=0.05)


def test_few_shot_reads_weights_faster_instead_of_a_negative_overhead():
    """Decodes faster than the kernel fit's weight read: the memory efficiency rises, the
    per-step overhead stays 0 (it does not go negative)."""
    model, base = load_model("llama-2-70b"), load_gpu("a100-80gb-sxm")
    truth = base.model_copy(update={
        "per_step_overhead_s": 0.0, "per_request_overhead_s": 1e-4,
        "memory_efficiency": base.memory_efficiency * 1.3})
    shapes = [BatchShape.from_chunks([(512, 0, True)]),
              BatchShape.from_chunks([(1, 600, True)]),
              BatchShape.from_chunks([(1, 600, True)] * 64)]
    points = [(s, CostModel(model, truth, 2).step_time(s).time_s) for s in shapes]
    tuned = fit_few_shot(model, base, 2, points)
    assert tuned.per_step_overhead_s == pytest.approx(0.0, abs=5e-4)
    assert tuned.memory_efficiency == pytest.approx(truth.memory_efficiency, rel=0.02)
    check = BatchShape.from_chunks([(1, 2000, True)] * 16)
    assert CostModel(model, tuned, 2).step_time(check).time_s == pytest.approx(
        CostModel(model, truth, 2).step_time(check).time_s, rel=0.02)
    # with room for an overhead the memory efficiency stays the kernel fit's
    slow = truth.model_copy(update={"per_step_overhead_s": 0.01,
                                    "memory_efficiency": base.memory_efficiency})
    points = [(s, CostModel(model, slow, 2).step_time(s).time_s) for s in shapes]
    tuned = fit_few_shot(model, base, 2, points)
    assert tuned.memory_efficiency == base.memory_efficiency
    assert tuned.per_step_overhead_s == pytest.approx(0.01, rel=0.02)


def test_one_measurement_fits_only_the_step_overhead():
    model, base = load_model("llama-2-70b"), load_gpu("a100-80gb-sxm")
    truth = base.model_copy(update={"per_step_overhead_s": 0.02})
    prefill = BatchShape.from_chunks([(2048, 0, True)])
    tuned = fit_few_shot(model, base, 4, [(prefill, CostModel(model, truth, 4).step_time(
        prefill).time_s)])
    assert tuned.per_step_overhead_s == pytest.approx(0.02, rel=1e-6)
    assert tuned.compute_efficiency == base.compute_efficiency


def test_few_shot_refuses_too_many_points():
    one = (BatchShape.from_chunks([(1, 10, True)]), 0.01)
    with pytest.raises(InputError):
        fit_few_shot(load_model("llama-3.1-8b"), make_gpu(), 1, [one] * 4)
    with pytest.raises(InputError):
        fit_few_shot(load_model("llama-3.1-8b"), make_gpu(), 1, [])


def test_yaml_profile_round_trip():
    text = dump_profiles({"rtx4090": {"per_step_overhead_s": 1e-3, "calibration": "x"}})
    assert yaml.safe_load(io.StringIO(text))["profiles"]["rtx4090"]["calibration"] == "x"


# ------------------------------------------------------------- from records
def _record(queued, first, last, prompt=100, output=11):
    return {"input_toks": prompt, "output_toks": output, "queued_ts": queued,
            "first_token_ts": first, "last_token_ts": last}


def test_measurements_from_records_pick_a_quiet_prefill_and_two_batches():
    from clustersim.calibration.records import measurements_from_records

    records = [
        _record(0.0, 0.05, 1.05, prompt=3000),  # alone during its TTFT: the prefill point
        _record(2.0, 2.02, 3.02),
        _record(2.0, 2.03, 3.03),
        _record(2.0, 2.04, 3.04),
        _record(5.0, 5.01, 5.51),  # decodes alone
    ]
    points = measurements_from_records(records, max_num_batched_tokens=2048)
    prefill_steps, ttft = points[0]
    assert [s.num_prefill_tokens for s in prefill_steps] == [2048, 952] and ttft == 0.05
    (alone,), tpot_alone = points[1]
    (crowded,), tpot_crowded = points[2]
    # the first request also decodes alone (ties keep record order): 1 s / 10 steps
    assert alone.num_decode_tokens == 1 and tpot_alone == pytest.approx(0.1)
    assert alone.decode_kv_tokens == 3000 + 5 + 1
    assert crowded.num_decode_tokens == 3 and tpot_crowded == pytest.approx(0.1)


def test_bad_records_are_input_errors(tmp_path):
    from clustersim.calibration.records import read_records

    path = tmp_path / "r.jsonl"
    path.write_text('{"input_toks": 1}\n')
    with pytest.raises(InputError, match="missing numeric fields"):
        read_records(path)
    with pytest.raises(InputError):
        read_records(tmp_path / "nope.jsonl")


def test_shipped_data_matches_the_readme_checksums():
    import hashlib

    readme = (FIT_DIR.parent / "README.md").read_text()
    for path in [*fit_files(), *validation_files()]:
        if path.name.startswith("LICENSE"):
            continue
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        assert f"{digest}  ./{path.relative_to(FIT_DIR.parent)}" in readme, path


def test_a_scenario_picks_a_profile_with_the_gpu_id(tmp_path):
    from clustersim.scenario import parse_scenario
    from clustersim.sim import run_scenario

    slow = tmp_path / "slow.yaml"
    slow.write_text(yaml.safe_dump({"profiles": {"h100-sxm": {"per_step_overhead_s": 0.05}}}))
    requests = [{"id": "a", "arrival_s": 0.0, "prompt_tokens": 64, "output_tokens": 4}]

    def finish_s(gpu: str) -> float:
        scenario = parse_scenario({"name": "t", "model": "llama-3.1-8b", "gpu": gpu,
                                   "workload": {"kind": "explicit", "requests": requests}})
        return run_scenario(scenario).requests[0].finish_s

    assert finish_s(f"h100-sxm@{slow}") > finish_s("h100-sxm") + 4 * 0.04


def _bench_serve_result(**overrides) -> dict:
    """A ``vllm bench serve --save-result --save-detailed`` result: four requests, one failed."""
    result = {
        "duration": 6.0, "completed": 3,
        "input_lens": [3000, 100, 100, 100],
        "output_lens": [11, 11, 11, 0],
        "ttfts": [0.05, 0.02, 0.03, 0.0],
        "itls": [[0.1] * 10, [0.1] * 10, [0.05] * 10, []],
        "start_times": [100.0, 102.0, 102.0, 102.5],
        "errors": ["", "", "", "Bad Request"],
    }
    return {**result, **overrides}


def test_vllm_bench_serve_results_become_records(tmp_path):
    from clustersim.calibration.records import measurements_from_records, read_records

    path = tmp_path / "bench.json"
    path.write_text(json.dumps(_bench_serve_result()))
    records = read_records(path)
    assert len(records) == 3  # the failed request is left out
    assert records[0]["queued_ts"] == 100.0
    assert records[0]["first_token_ts"] == pytest.approx(100.05)
    assert records[0]["last_token_ts"] == pytest.approx(101.05)
    (prefill, ttft), *_ = measurements_from_records(records, max_num_batched_tokens=2048)
    assert sum(s.num_prefill_tokens for s in prefill) == 3000 and ttft == pytest.approx(0.05)


def test_calibrate_from_a_vllm_bench_serve_result(tmp_path):
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(_bench_serve_result()))
    out = tmp_path / "mine.yaml"
    code, output = run_cli("calibrate", "--gpu", "h100-sxm", "--model", "llama-3.1-8b",
                           "--from-requests", str(path), "--out", str(out))
    assert code == 0, output
    assert "measurement from records" in output
    assert yaml.safe_load(out.read_text())["profiles"]["h100-sxm"]["calibration"]


def test_bench_serve_results_without_start_times_are_refused(tmp_path):
    result = _bench_serve_result()
    del result["start_times"]
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(result))
    code, output = run_cli("calibrate", "--gpu", "h100-sxm", "--model", "llama-3.1-8b",
                           "--from-requests", str(path), "--out", str(tmp_path / "m.yaml"))
    assert code == 2
    assert "vllm bench serve result without ['start_times']" in output


def test_few_shot_for_a_data_parallel_moe_deployment(tmp_path):
    """Measurements of a group priced as it runs (the MoE layers see both ranks' tokens) are
    fitted back, and a step not among them comes out as the group would run it."""
    model = load_model("qwen3-30b-a3b")
    base = load_gpu("rtx-pro-6000")
    # one compute scale moves GEMMs, attention and the fused-MoE experts together, as the fit does
    scale = 0.7
    moe = base.moe_gemm and base.moe_gemm.model_copy(
        update={"compute_efficiency": base.moe_gemm.compute_efficiency * scale})
    truth = base.model_copy(update={
        "per_step_overhead_s": 2e-3, "per_request_overhead_s": 5e-5,
        "compute_efficiency": base.compute_efficiency * scale,
        "attention_efficiency": base.attention_efficiency * scale, "moe_gemm": moe})
    group = CostModel(model, truth, 1, dp=2, expert_parallel=True)

    def measured(chunks):
        batch = BatchShape.from_chunks(chunks)
        tokens = batch.num_prefill_tokens + batch.num_decode_tokens
        return group.step_time(batch, 2 * tokens).time_s

    out = tmp_path / "moe.yaml"
    code, output = run_cli(
        "calibrate", "--gpu", "rtx-pro-6000", "--model", "qwen3-30b-a3b", "--dp", "2",
        "--expert-parallel", "--prefill", f"2048={measured([(2048, 0, True)]):.6f}",
        "--decode", f"128@1200={measured([(1, 1200, True)] * 128):.6f}",
        "--decode", f"1@1200={measured([(1, 1200, True)]):.6f}", "--out", str(out))
    assert code == 0, output
    entry = yaml.safe_load(out.read_text())["profiles"]["rtx-pro-6000"]
    assert entry["provenance"]["measurements"]["dp"] == 2
    gpu = apply_profile(load_gpu("rtx-pro-6000", profile="default"), entry)
    cost = CostModel(model, gpu, 1, dp=2, expert_parallel=True)
    held_out = [(1, 3000, True)] * 48
    batch = BatchShape.from_chunks(held_out)
    assert cost.step_time(batch, 96).time_s == pytest.approx(measured(held_out), rel=0.03)
    code, output = run_cli("calibrate", "--gpu", "h100-sxm", "--model", "llama-3.1-8b",
                           "--dp", "2", "--decode", "1@100=0.01", "--out", str(out))
    assert code == 2 and "--dp: llama-3.1-8b is dense" in output


# ------------------------------------------------------- bad calibrate input
FEW_SHOT = ["calibrate", "--gpu", "h100-sxm", "--model", "llama-3.1-8b"]


def one_line_error(output: str, path: str) -> None:
    """The project rule: bad input is one ``path: message`` line, nothing printed before it."""
    lines = output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{path}: "), output


@pytest.mark.parametrize(
    ("args", "path", "message"),
    [
        # non-finite seconds used to fit a NaN per-step overhead and exit 0
        (["--prefill", "128=inf"], "--prefill", "expected TOKENS=SECONDS"),
        (["--prefill", "128=1e400"], "--prefill", "expected TOKENS=SECONDS"),
        (["--decode", "1@128=nan"], "--decode", "expected BATCH@CONTEXT=SECONDS"),
        # a batch of 0 decodes was fitted; a digit int() cannot read raised ValueError
        (["--decode", "0@128=0.01"], "--decode", "expected BATCH@CONTEXT=SECONDS"),
        (["--decode", "\u00b2@128=0.01"], "--decode", "expected BATCH@CONTEXT=SECONDS"),
        # huge shapes: a MemoryError building the batch, or a fit on impossible requests
        (["--decode", "99999999999@10=0.01"], "--decode", "99,999,999,999 requests of 11"),
        (["--decode", "1@99999999999=0.01"], "--decode", "100,000,000,000 tokens in one"),
        (["--prefill", "99999999999999999999=1"], "--prefill", "99,999,999,999,999,999,999"),
        # --tp named as the option, not as a scenario field; 0 refused by the option itself
        (["--tp", "3", "--prefill", "128=0.01"], "--tp", "3 does not divide"),
        (["--tp", "0", "--prefill", "128=0.01"], "--tp", ""),
        (["--tp", "abc", "--prefill", "128=0.01"], "--tp", ""),
        (["--dp", "0", "--prefill", "128=0.01"], "--dp", ""),
        (["--max-num-batched-tokens", "0", "--prefill", "128=0.01"],
         "--max-num-batched-tokens", ""),
        # given with --prefill/--decode it was ignored without a word
        (["--max-num-batched-tokens", "512", "--prefill", "128=0.01"],
         "--max-num-batched-tokens", "goes with --from-requests"),
    ],
)
def test_calibrate_bad_measurements_and_options_are_one_line(tmp_path, args, path, message):
    code, output = run_cli(*FEW_SHOT, "--out", str(tmp_path / "p.yaml"), *args)
    assert code == 2
    one_line_error(output, path)
    assert message in output
    assert not (tmp_path / "p.yaml").exists()


@pytest.mark.parametrize(
    ("args", "path", "message"),
    [
        # 128 experts over 3 GPUs, and a 16-GPU group on an 8-GPU node, used to be fitted
        (["--dp", "3", "--expert-parallel"], "--expert-parallel",
         "128 experts do not split evenly over --dp x --tp = 3 GPUs"),
        (["--dp", "4", "--tp", "4"], "--dp", "4 ranks x --tp 4 = 16 GPUs"),
        # was blamed on tensor_parallel_size
        (["--dp", "64"], "--dp", "64 ranks x --tp 1 = 64 GPUs"),
    ],
)
def test_calibrate_checks_a_moe_deployment_as_a_scenario_would(tmp_path, args, path, message):
    code, output = run_cli("calibrate", "--gpu", "h100-sxm", "--model", "qwen3-30b-a3b",
                           "--prefill", "2048=0.15", "--out", str(tmp_path / "p.yaml"), *args)
    assert code == 2
    one_line_error(output, path)
    assert message in output


def test_calibrate_options_that_describe_measurements_need_measurements(tmp_path):
    # without measurements calibrate fits the shipped profiles: --tp 2 was silently ignored
    code, output = run_cli("calibrate", "--tp", "2", "--out", str(tmp_path / "cal.yaml"))
    assert code == 2
    one_line_error(output, "--tp")


def test_calibrate_out_that_cannot_be_written_is_one_line(tmp_path):
    code, output = run_cli(*FEW_SHOT, "--prefill", "128=0.01", "--out", str(tmp_path))
    assert code == 2
    one_line_error(output, str(tmp_path))
    assert "cannot write: Is a directory" in output
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code, output = run_cli(*FEW_SHOT, "--prefill", "128=0.01", "--out", str(blocker / "p.yaml"))
    assert code == 2
    one_line_error(output, str(blocker / "p.yaml"))
    # the full fit too, before it runs
    code, output = run_cli("calibrate", "--out", str(tmp_path))
    assert code == 2
    one_line_error(output, str(tmp_path))
    # a folder that does not exist is not made: the file goes where --out says or nowhere
    out = tmp_path / "new" / "p.yaml"
    code, output = run_cli(*FEW_SHOT, "--prefill", "128=0.01", "--out", str(out))
    assert code == 2
    one_line_error(output, str(out))
    assert f"no folder {tmp_path / 'new'}" in output and not (tmp_path / "new").exists()


def test_few_shot_profile_is_keyed_by_the_catalog_gpu_id(tmp_path):
    # `--gpu h100-sxm@default` wrote a profile for "h100-sxm@default", which no scenario can use
    out = tmp_path / "p.yaml"
    code, output = run_cli("calibrate", "--gpu", "h100-sxm@default", "--model", "llama-3.1-8b",
                           "--prefill", "2048=0.15", "--out", str(out))
    assert code == 0, output
    assert f"gpu: h100-sxm@{out}" in output
    assert list(yaml.safe_load(out.read_text())["profiles"]) == ["h100-sxm"]
    assert load_gpu(f"h100-sxm@{out}").calibration == "default+few-shot"


def test_a_profile_that_is_not_yaml_is_one_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("profiles: [\n")
    code, output = run_cli(*FEW_SHOT, "--gpu", f"h100-sxm@{bad}", "--prefill", "128=0.01",
                           "--out", str(tmp_path / "p.yaml"))
    assert code == 2
    one_line_error(output, f"{bad}:2")


def _jsonl(tmp_path, records, name="r.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


_GOOD = [_record(0.0, 0.05, 1.05, prompt=3000), _record(2.0, 2.02, 3.02),
         _record(2.0, 2.03, 3.03), _record(5.0, 5.01, 5.51)]


@pytest.mark.parametrize(
    ("records", "message"),
    [
        ([[1, 2], [3]], "expected a JSON object"),  # AttributeError
        ([None, None], "expected a JSON object"),
        ([{**r, "input_toks": True} for r in _GOOD], "['input_toks'] must be finite numbers"),
        ([{**r, "first_token_ts": float("nan")} for r in _GOOD],
         "invalid JSON: NaN is not a number JSON allows"),  # was "need two requests ..."
        ([{**r, "input_toks": 100.5} for r in _GOOD], "input_toks must be a whole number"),
        ([{**r, "input_toks": 0} for r in _GOOD], "input_toks must be a whole number >= 1"),
        ([{**r, "output_toks": 0} for r in _GOOD], "output_toks must be a whole number >= 1"),
        ([_record(0.0, 1.0, 0.5)] * 4, "last_token_ts 0.5 is before first_token_ts 1.0"),
        ([_record(1.0, 0.5, 2.0)] * 4, "first_token_ts 0.5 is not after queued_ts 1.0"),
        ([_record(0.0, 0.0, 1.0)] * 4, "first_token_ts 0.0 is not after queued_ts 0.0"),
        ([{**r, "output_toks": 10**12} for r in _GOOD], "exceed the model's 131,072 positions"),
    ],
)
def test_bad_request_records_are_one_line(tmp_path, records, message):
    path = _jsonl(tmp_path, records)
    code, output = run_cli(*FEW_SHOT, "--from-requests", str(path),
                           "--out", str(tmp_path / "p.yaml"))
    assert code == 2
    one_line_error(output, f"{path}:1")
    assert message in output


def test_records_that_decode_one_token_each_name_the_file(tmp_path):
    path = _jsonl(tmp_path, [{**r, "output_toks": 1} for r in _GOOD])
    code, output = run_cli(*FEW_SHOT, "--from-requests", str(path),
                           "--out", str(tmp_path / "p.yaml"))
    assert code == 2
    one_line_error(output, str(path))
    assert "need two requests with more than one output token" in output


def test_unreadable_records_are_one_line(tmp_path):
    binary = tmp_path / "r.bin"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    for path, where, message in (
        (binary, f"{binary}:1", "not UTF-8 text: byte 0xff at column 1"),
        (tmp_path, str(tmp_path), "is a folder, not a records file"),
        (_jsonl(tmp_path, [], "empty.jsonl"), f"{tmp_path / 'empty.jsonl'}:1", "empty file"),
        (_jsonl(tmp_path, [{}], "one.jsonl"), f"{tmp_path / 'one.jsonl'}:1", "missing numeric"),
    ):
        code, output = run_cli(*FEW_SHOT, "--from-requests", str(path),
                               "--out", str(tmp_path / "p.yaml"))
        assert code == 2
        one_line_error(output, where)
        assert message in output


def test_records_errors_come_before_any_measurement_is_printed(tmp_path):
    path = _jsonl(tmp_path, _GOOD)
    code, output = run_cli(*FEW_SHOT, "--dp", "2", "--from-requests", str(path),
                           "--out", str(tmp_path / "p.yaml"))
    assert code == 2
    one_line_error(output, "--dp")


@pytest.mark.parametrize(
    ("overrides", "where", "message"),
    [
        ({"itls": [["a"] * 10, [0.1] * 10, [0.05] * 10, []]}, "request 0", "itls lists"),
        ({"itls": [[None] * 10, [0.1] * 10, [0.05] * 10, []]}, "request 0", "itls lists"),
        # a null or string TTFT without an error was dropped as a failed request
        ({"ttfts": [None, 0.02, 0.03, 0.0]}, "request 0", "ttfts and start_times must be"),
        ({"ttfts": ["0.05", 0.02, 0.03, 0.0]}, "request 0", "ttfts and start_times must be"),
        ({"input_lens": ["3000", 100, 100, 100]}, "request 0", "['input_lens'] must be finite"),
        ({"output_lens": [None, 11, 11, 0]}, "request 0", "['output_lens'] must be finite"),
        ({"itls": [[-0.1] * 10, [0.1] * 10, [0.05] * 10, []]}, "request 0", "is before"),
        ({"errors": [""]}, "", "errors must be a list of 4 entries"),
        ({"errors": ["x", "y", "z", "w"]}, "", "got 0 successful requests of 4"),
    ],
)
def test_bad_vllm_bench_serve_results_are_one_line(tmp_path, overrides, where, message):
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(_bench_serve_result(**overrides)))
    code, output = run_cli(*FEW_SHOT, "--from-requests", str(path),
                           "--out", str(tmp_path / "p.yaml"))
    assert code == 2
    one_line_error(output, f"{path}: {where}" if where else str(path))
    assert message in output


def test_tp2_cross_check_reads_calibration_data_only_and_matches_the_model(monkeypatch):
    """The Qwen3-32B TP2 decode-step cross-check sums kernel-profile rows and NCCL samples
    (calibration data) and agrees with the cost model at every batch."""
    from clustersim.calibration import tp_check

    seen: list[Path] = []
    real_read_csv = pd.read_csv

    def spy(path, *args, **kwargs):
        seen.append(Path(path))
        return real_read_csv(path, *args, **kwargs)

    monkeypatch.setattr(tp_check.pd, "read_csv", spy)
    for fit in ("calibrated", "vidur", "aiconfigurator"):
        checks = tp_check.decode_step_checks(profile=fit)
        assert seen and all(FIT_DIR in p.resolve().parents for p in seen)
        assert [c.batch for c in checks] == [1, 32, 128]
        totals = [c.profile_ms for c in checks]
        assert totals == sorted(totals)
        for c in checks:
            assert c.profile_ms == pytest.approx(
                c.gemm_ms + c.attention_ms + c.elementwise_ms + c.lm_head_ms + c.collectives_ms)
            # GPU time against the GPU time of the ops the model prices (the profile holds no
            # CPU overhead; norms, rotary and activations are not priced)
            assert c.clustersim_ms == pytest.approx(c.profile_ms - c.elementwise_ms, rel=0.10)
            assert c.clustersim_total_ms > c.clustersim_ms
    with pytest.raises(ValueError, match="outside the measured range"):
        tp_check.decode_step_checks(batches=(3,))


def test_few_shot_cli_reports_how_well_the_fit_matches(tmp_path):
    out = tmp_path / "m.yaml"
    code, output = run_cli("calibrate", "--gpu", "a100-80gb-sxm", "--model", "llama-2-70b",
                           "--tp", "2", "--prefill", "512=0.197", "--decode", "1@576=0.0549",
                           "--decode", "64@576=0.0702", "--out", str(out))
    assert code == 0, output
    assert "prices your measurements at +0.0 %, +0.0 %, +0.0 %" in output
    assert "warning" not in output
    # a decode faster than the weights can be read at the datasheet bandwidth
    code, output = run_cli("calibrate", "--gpu", "a100-80gb-sxm", "--model", "llama-2-70b",
                           "--tp", "2", "--decode", "1@576=0.01", "--out", str(out))
    assert code == 0, output
    assert "warning: the model cannot match every measurement within 10 %" in output


def test_gathers_and_scatters_get_their_own_fit_and_price():
    """The RTX PRO 6000's all-gather and reduce-scatter samples are fitted apart from its
    all-reduces (slower per byte there), and a data-parallel MoE step's gathers use them."""
    from clustersim.calibration.fit import fit_collective

    gpu = load_gpu("rtx-pro-6000-server", profile="default")
    link_bw = gpu.link.bw_gb_per_s_per_dir * 1e9
    sizes = np.array([4096.0, 65536.0, 1 << 20, 1 << 24])
    fitted = fit_collective(sizes, 12e-6 + sizes / (0.4 * link_bw), 2, gpu)
    assert fitted["latency_s"] == pytest.approx(12e-6, rel=1e-3)
    assert fitted["link_efficiency"] == pytest.approx(0.4, abs=1e-3)

    pro = load_gpu("rtx-pro-6000-server")
    assert pro.allgather_link_efficiency < pro.link.efficiency
    assert pro.reduce_scatter_link_efficiency < pro.link.efficiency
    v1 = load_gpu("h100-sxm", profile="vidur")  # no all-gather table: as an all-reduce
    assert v1.collective("all_gather", 2) == (v1.allreduce_latency_s, 1.0)
    h100 = load_gpu("h100-sxm")  # fit-v2: nccl-tests' all-gathers, slower per byte
    assert h100.collective("all_gather", 2) == (
        h100.allgather_latency_s, h100.allgather_link_efficiency / h100.link.efficiency)
    assert h100.collective("all_gather", 2)[1] < 1.0
    model = load_model("qwen3-30b-a3b")
    as_allreduce = pro.model_copy(update={k: None for k in (
        "allgather_latency_s", "allgather_link_efficiency", "reduce_scatter_latency_s",
        "reduce_scatter_link_efficiency")})
    batch = BatchShape.from_chunks([(1000, 0, True)])
    measured = CostModel(model, pro, 1, dp=2, expert_parallel=True).step_time(batch, 2000)
    old = CostModel(model, as_allreduce, 1, dp=2, expert_parallel=True).step_time(batch, 2000)
    assert measured.communication_s > 1.2 * old.communication_s
    assert measured.compute_s == old.compute_s


def test_a_few_shot_profile_prices_the_same_after_a_round_trip(tmp_path):
    """What `calibrate --out` writes reloads as the profile it fitted (the link efficiency
    included), and a hand-written profile is labelled after its base and file."""
    from clustersim.calibration.fewshot import fit_errors

    out = tmp_path / "mine.yaml"
    code, output = run_cli("calibrate", "--gpu", "rtx-pro-6000-server", "--model", "qwen3-32b",
                           "--tp", "2", "--prefill", "2048=0.33", "--decode", "128@1000=0.058",
                           "--decode", "1@1500=0.025", "--out", str(out))
    assert code == 0, output
    reloaded = load_gpu(f"rtx-pro-6000-server@{out}")
    assert reloaded.link.efficiency == load_gpu("rtx-pro-6000-server").link.efficiency
    model = load_model("qwen3-32b")
    points = [(BatchShape.from_chunks([(2048, 0, True)]), 0.33),
              (BatchShape.from_chunks([(1, 1000, True)] * 128), 0.058),
              (BatchShape.from_chunks([(1, 1500, True)]), 0.025)]
    printed = output.split("prices your measurements at ")[1].splitlines()[0]
    assert printed == ", ".join(f"{round(e * 100, 1) + 0.0:+.1f} %"
                                for e in fit_errors(model, reloaded, 2, points))
    hand = tmp_path / "hand.yaml"
    hand.write_text("profiles:\n  rtx4090:\n    compute_efficiency: 0.5\n")
    assert load_gpu(f"rtx4090@{hand}").calibration == "default+hand.yaml"


def test_gathers_never_beat_the_all_reduce_nor_leave_their_link():
    gpu = load_gpu("h100-pcie").model_copy(update={"allgather_link_efficiency": 1.0})
    assert gpu.collective("all_gather", 2)[1] == 1.0  # clamped: not faster than all-reduce
    pro = load_gpu("rtx-pro-6000-server")
    assert pro.collective("all_gather", 2)[1] < 1.0
    narrow = pro.model_copy(update={"link": pro.link.model_copy(update={"max_gpus": 2})})
    assert narrow.collective("all_gather", 4)[1] == 1.0  # over the PCIe fallback, unmeasured


def test_the_silicon_benchmark_replays_through_the_package():
    # benchmarks/silicon_calibration.py prints what clustersim.calibration.silicon replays
    # (tests/test_silicon.py checks the replay itself)
    import importlib.util

    from clustersim.calibration import silicon

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "silicon_calibration.py"
    spec = importlib.util.spec_from_file_location("silicon_calibration", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.replay is silicon.replay and bench.rows is silicon.rows
