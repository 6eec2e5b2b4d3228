"""The command line: outputs, determinism, and bad input as ``path: message`` with exit code 2."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from clustersim.cli.common import check_out_dir, writing
from clustersim.errors import ClusterSimError, OutputError
from clustersim.scenario import load_scenario
from tests.helpers import explicit, run_cli, scenario, simulate, write_scenario

ROOT = Path(__file__).resolve().parents[1]


def test_simulate_writes_the_three_files_with_the_documented_columns(tmp_path):
    result = simulate(tmp_path, scenario())
    out = result["out"]
    with (out / "requests.csv").open() as f:
        assert next(csv.reader(f)) == [
            "id", "arrival_s", "first_token_s", "finish_s", "ttft_s", "tpot_s", "e2e_s",
            "prompt_tokens", "output_tokens", "preemptions", "outcome", "prefill_instance",
            "decode_instance", "handoff_bytes", "handoff_start_s", "handoff_end_s",
        ]
    with (out / "steps.csv").open() as f:
        assert next(csv.reader(f)) == [
            "instance", "step", "start_s", "end_s", "num_decode_tokens", "prefill_chunks",
            "num_scheduled_tokens", "num_running", "num_waiting", "kv_blocks_used",
            "num_preempted",
        ]
    row = result["requests"]["r0"]
    assert row["outcome"] == "finished"
    assert int(row["output_tokens"]) == 4
    assert result["summary"]["num_finished"] == 1


@pytest.mark.slow
def test_shipped_scenarios_run_and_are_byte_identical_across_runs(tmp_path):
    for path in sorted((ROOT / "scenarios").glob("*.yaml")):
        outputs = []
        for run in ("a", "b"):
            out = tmp_path / path.stem / run
            code, text = run_cli("simulate", str(path), "--out", str(out), "--steps")
            assert code == 0, text
            outputs.append({f.name: f.read_bytes() for f in sorted(out.iterdir())})
        assert outputs[0] == outputs[1], path.name
        summary = json.loads(outputs[0]["summary.json"])
        assert summary["num_requests"] == summary["num_finished"] + summary["num_rejected"]


@pytest.mark.parametrize("name", ["pd_decode_failure", "quickstart_awq"])
def test_steps_csv_is_opt_in_and_changes_no_byte_of_the_other_files(name, tmp_path):
    """Without --steps no step is recorded: summary.json (per-instance steps, busy share, KV
    use), requests.csv, transfers.csv and the printout are the same bytes as with it; the
    wrote line names the files written, and an earlier run's steps.csv goes."""
    path = ROOT / "scenarios" / f"{name}.yaml"
    folders, printed = {}, {}
    for label, extra in (("steps", ("--steps",)), ("lean", ())):
        out = folders[label] = tmp_path / label
        code, printed[label] = run_cli("simulate", str(path), "--out", str(out), *extra)
        assert code == 0, printed[label]
    files = {label: {f.name: f.read_bytes() for f in sorted(out.iterdir())}
             for label, out in folders.items()}
    assert files["steps"].pop("steps.csv").count(b"\n") > 100
    assert files["lean"] == files["steps"]
    transfers = ["transfers.csv"] if name.startswith("pd_") else []
    for label, out in folders.items():
        *lines, wrote = printed[label].replace(str(out), "OUT").splitlines()
        printed[label] = lines
        names = ["requests.csv", *(["steps.csv"] if label == "steps" else []), *transfers,
                 "summary.json"]
        assert sorted(f.name for f in out.iterdir()) == sorted(names)
        assert wrote == "wrote OUT/" + ", ".join(names)
    assert printed["lean"] == printed["steps"]
    code, output = run_cli("simulate", str(path), "--out", str(folders["steps"]))
    assert code == 0, output
    assert not (folders["steps"] / "steps.csv").exists()


def test_different_seeds_give_different_poisson_traffic(tmp_path):
    workload = {"kind": "poisson", "rate_per_s": 5.0, "num_requests": 20,
                "prompt_tokens": {"kind": "uniform", "low": 10, "high": 200},
                "output_tokens": 8}
    a = simulate(tmp_path / "a", scenario(seed=1, workload=workload))
    b = simulate(tmp_path / "b", scenario(seed=2, workload=workload))
    assert [r["arrival_s"] for r in a["requests"].values()] != [
        r["arrival_s"] for r in b["requests"].values()
    ]


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"engine": {"max_num_seqs": 0}}, "engine.max_num_seqs: Input should be greater than 0"),
        ({"engine": {"max_num_seq": 4}},
         "engine.max_num_seq: unknown field; did you mean max_num_seqs?"),
        ({"engine": {"step_policy": "greedy"}}, "engine.step_policy: Input should be"),
        ({"gpu": "h900"}, "gpu: unknown GPU 'h900'"),
        ({"model": "llama-9"}, "model: unknown model 'llama-9'"),
        ({"workload": {"kind": "zipf"}},
         "workload.kind: unknown kind 'zipf'; choose one of explicit, poisson, synthetic, replay"),
        ({"workload": {"kind": "poisson", "rate_per_s": 1, "num_requests": 3,
                       "prompt_tokens": {"kind": "uniform", "low": 9, "high": 3},
                       "output_tokens": 2}},
         "workload.prompt_tokens: low (9) must be <= high (3)"),
        ({"workload": explicit(("a", 0.0, 10, 2), ("a", 1.0, 10, 2))},
         "workload.requests: duplicate request id 'a'"),
        ({"workload": explicit(("a", -1.0, 10, 2))},
         "workload.requests[0].arrival_s: Input should be greater than or equal to 0"),
        ({"engine": {"enable_chunked_prefill": False, "max_num_batched_tokens": 2048,
                     "max_model_len": 4096}},
         "engine.max_num_batched_tokens: 2048 is smaller than max_model_len 4096 with "
         "chunked prefill disabled"),
        ({"engine": {"max_num_batched_tokens": 8, "max_num_seqs": 16}},
         "engine.max_num_batched_tokens: 8 must be >= max_num_seqs 16"),
        ({"engine": {"max_model_len": 1_000_000}},
         "engine.max_model_len: 1000000 exceeds the model's max_position_embeddings"),
        ({"engine": {"num_gpu_blocks_override": 4, "max_model_len": 1024}},
         "engine: KV cache of 3 usable blocks"),
        ({"tensor_parallel_size": 3}, "tensor_parallel_size: 3 does not divide"),
        ({"engine": {"enable_chunked_prefill": False, "max_model_len": 4096,
                     "max_num_batched_tokens": 4096, "max_num_scheduled_tokens": 1024}},
         "engine.max_num_scheduled_tokens: 1024 is smaller than max_model_len 4096"),
        ({"layout": {"kind": "colocated", "pools": [{"name": "a", "engine": {"block_size": 32}}]}},
         "layout.pools[0].engine.block_size: 32 differs from the scenario's engine.block_size"),
        ({"topology": {"node": "dgx-h100", "count": 0}},
         "topology.count: Input should be greater than 0"),
        ({"topology": {"node": "dgx-h100", "count": 2000}},
         "topology.count: 2,000 is more than 1,024: a topology's graph and paths are built "
         "before the run"),
        ({"topology": {"node": "dgx-h100", "count": 2, "rails": 8}},
         "topology.rails: unknown field\n"),
        ({"topology": {"node": "dgx-h100-x2", "count": 2}},
         "topology.node: 'dgx-h100-x2' has 2 nodes (node0, node1): a node type is a topology "
         "with one node"),
        ({"topology": {"node": "rtx4090-pcie-box", "count": 2}},
         "topology.count: 2 nodes of 'rtx4090-pcie-box', whose node has no nics, cannot be "
         "networked"),
        ({"topology": {"node": "dgx-h200", "count": 2}},
         "topology.node: 'dgx-h200' is neither a shipped topology"),
        ({"topology": 8},
         "topology: expected a shipped topology name, a topology file path, {node: NAME, "
         "count: N} or a list of those mappings"),
        ({"topology": [{"node": "dgx-h100", "count": 1}, {"node": "rtx4090-pcie-box",
                                                         "count": 1}]},
         "topology[1].count: 1 node of 'rtx4090-pcie-box', whose node has no nics, cannot be "
         "networked"),
    ],
)
def test_bad_scenarios_exit_2_with_path_and_message(tmp_path, change, expected):
    path = write_scenario(tmp_path, scenario(**change))
    code, output = run_cli("simulate", str(path), "--out", str(tmp_path / "out"))
    assert code == 2, output
    assert output.startswith(f"{path}: {expected}"), output
    assert "Traceback" not in output


LOGNORMAL = {"kind": "lognormal", "mean": 100, "cv": 0.5}


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"sede": 7}, "sede: unknown field; did you mean seed?"),
        ({"engine": {"max_modle_len": 4096}},
         "engine.max_modle_len: unknown field; did you mean max_model_len?"),
        ({"layout": {"pools": [{"name": "a", "instancs": 2}]}},
         "layout.pools[0].instancs: unknown field; did you mean instances?"),
        # inside kind unions, two levels down: synthetic workload -> lengths -> lognormal
        ({"workload": {"kind": "synthetic", "arrivals": {"kind": "poisson", "rate_per_s": 1},
                       "num_requests": 3, "lengths": {
                           "kind": "independent", "output_tokens": 4,
                           "prompt_tokens": {**LOGNORMAL, "hihg": 500}}}},
         "workload.lengths.prompt_tokens.hihg: unknown field; did you mean high?"),
        ({"topology": [{"node": "dgx-h100", "cont": 1}]},
         "topology[0].cont: unknown field; did you mean count?"),
        # nothing close: no guess
        ({"workload": {"kind": "poisson", "rate_per_s": 1, "num_requests": 3,
                       "output_tokens": 4, "prompt_tokens": {**LOGNORMAL, "sigma": 1}}},
         "workload.prompt_tokens.sigma: unknown field"),
    ],
)
def test_a_misspelt_field_names_the_file_and_the_nearest_field(tmp_path, monkeypatch, change,
                                                               expected):
    monkeypatch.chdir(tmp_path)
    write_scenario(tmp_path, scenario(**change), "quickstart.yaml")
    code, output = run_cli("simulate", "quickstart.yaml")
    assert code == 2 and "Traceback" not in output, output
    lines = output.splitlines()  # a misspelt required field is also a missing one
    assert lines[-1] == f"quickstart.yaml: {expected}"  # the file as given
    assert all(line.startswith("quickstart.yaml: ") for line in lines), output
    assert not (tmp_path / "runs").exists()


def test_errors_of_files_the_scenario_names_keep_their_own_path(tmp_path):
    (tmp_path / "t.csv").write_text(
        "arrived_at,num_prefill_tokens,num_decode_tokens\n0,5,3\n1,-1,3\n")
    path = write_scenario(tmp_path, scenario(workload={"kind": "replay", "trace": "t.csv"}))
    code, output = run_cli("simulate", str(path), "--out", str(tmp_path / "out"))
    assert code == 2 and output.startswith("t.csv:3: num_prefill_tokens is negative"), output
    code, output = run_cli("simulate", str(path), "--out", str(path))  # a file in the way
    assert code == 2 and output.startswith(f"{path}: cannot create output directory"), output
    assert "Traceback" not in output


@pytest.mark.parametrize(
    ("command", "change", "message"),
    [
        ("simulate", {"engine": {"max_model_len": 1_000_000}},
         "engine.max_model_len: 1000000 exceeds"),
        ("simulate", {"layout": {"kind": "disaggregated", "pools": [
            {"name": "p", "role": "prefill"}, {"name": "d", "role": "decode"}]}},
         "topology: layout disaggregated needs a topology"),
        ("plan", {}, "plan: the scenario has no plan: section"),
        ("compare", {"layout": {"kind": "colocated", "pools": [{"name": "a"}, {"name": "b"}]}},
         "layout.pools: compare splits one colocated pool into prefill and decode, this "
         "layout has 2"),
    ],
)
def test_a_failed_run_leaves_no_new_folder(tmp_path, monkeypatch, command, change, message):
    monkeypatch.chdir(tmp_path)
    write_scenario(tmp_path, scenario(**change), "s.yaml")
    load_scenario("s.yaml")  # the scenario is valid: the run itself fails
    (tmp_path / "runs").mkdir()  # a folder the user had stays, empty as it was
    before = sorted(tmp_path.rglob("*"))
    code, output = run_cli(command, "s.yaml", "--report", "new/report")
    assert code == 2, output
    assert output.startswith(f"s.yaml: {message}") and "Traceback" not in output, output
    assert sorted(tmp_path.rglob("*")) == before


def test_writing_removes_only_the_empty_folders_it_created(tmp_path):
    (tmp_path / "had").mkdir()
    with pytest.raises(ValueError), writing(tmp_path / "had" / "new" / "deeper"):
        raise ValueError("a bug while writing")
    assert sorted(tmp_path.rglob("*")) == [tmp_path / "had"]
    with pytest.raises(ClusterSimError), writing(tmp_path / "had" / "a"):
        (tmp_path / "had" / "a" / "part.csv").write_text("x")
        raise ClusterSimError("x", "failed after a file was written")
    assert (tmp_path / "had" / "a" / "part.csv").exists()  # not empty: kept
    assert check_out_dir(tmp_path / "b" / "c") == tmp_path / "b" / "c"
    assert not (tmp_path / "b").exists()  # checked, not created
    with pytest.raises(OutputError, match="cannot create output directory"):
        check_out_dir(tmp_path / "had" / "a" / "part.csv" / "x")


def test_simulate_on_a_node_count_topology_writes_its_summary(tmp_path):
    result = simulate(tmp_path, scenario(topology={"node": "dgx-h100", "count": 2}))
    assert result["summary"]["num_finished"] == 1
    assert result["summary"]["topology"] == "2 x dgx-h100"


def test_unreadable_and_malformed_yaml_exit_2(tmp_path):
    code, output = run_cli("simulate", str(tmp_path / "missing.yaml"))
    assert code == 2 and "missing.yaml: cannot read scenario" in output
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nengine: [\n")
    code, output = run_cli("simulate", str(bad))
    assert code == 2 and output.startswith(f"{bad}:3: invalid YAML")


def test_requests_that_cannot_be_served_are_rejected_with_a_reason(tmp_path):
    data = scenario(engine={"max_model_len": 64}, workload=explicit(
        ("fits", 0.0, 32, 8), ("long", 0.0, 64, 1), ("overflow", 0.0, 60, 8)))
    result = simulate(tmp_path, data)
    rows = result["requests"]
    assert rows["fits"]["outcome"] == "finished"
    assert rows["long"]["outcome"].startswith("rejected: prompt of 64 tokens leaves no room")
    assert rows["overflow"]["outcome"].startswith(
        "rejected: prompt 60 + output 8 tokens exceed max_model_len 64")
    assert result["summary"]["num_rejected"] == 2


def test_step_time_json_and_exclusive_shapes():
    code, output = run_cli("step-time", "--model", "llama-3.1-8b", "--gpu", "h100-sxm",
                           "--decode-batch", "1", "--context", "1024", "--json")
    assert code == 0, output
    data = json.loads(output)
    assert {"time_s", "compute_s", "memory_s", "communication_s"} <= data.keys()
    weight_read_s = 16.06e9 / 3.35e12
    assert weight_read_s < data["time_s"] < 2 * weight_read_s
    code, output = run_cli("step-time", "--model", "llama-3.1-8b", "--gpu", "h100-sxm")
    assert code == 2 and "give exactly one of --prefill-tokens or --decode-batch" in output
    code, output = run_cli("step-time", "--model", "llama-3.1-8b", "--gpu", "nope",
                           "--prefill-tokens", "128")
    assert code == 2 and output.startswith("gpu: unknown GPU 'nope'")


STEP = ["step-time", "--gpu", "h100-sxm"]


@pytest.mark.parametrize(
    ("args", "path", "message"),
    [
        # Click's own errors came as a multi-line usage box
        (["--model", "llama-3.1-8b", "--prefill-tokens", "0"], "--prefill-tokens", ""),
        (["--model", "llama-3.1-8b", "--prefill-tokens", "abc"], "--prefill-tokens", ""),
        (["--model", "llama-3.1-8b", "--prefill-tokens", "8", "--context", "-1"], "--context", ""),
        (["--model", "llama-3.1-8b", "--decode-batch", "0", "--context", "8"], "--decode-batch",
         ""),
        (["--model", "llama-3.1-8b", "--prefill-tokens", "8", "--tp", "0"], "--tp", ""),
        (["--model", "qwen3-30b-a3b", "--prefill-tokens", "8", "--dp", "0"], "--dp", ""),
        (["--prefill-tokens", "8"], "root step-time", "Missing option '--model'"),
        # --tp named as the option, not as the scenario field tensor_parallel_size
        (["--model", "qwen3-30b-a3b", "--prefill-tokens", "8", "--dp", "2", "--tp", "3"], "--tp",
         "3 does not divide the 32 attention heads"),
        # priced although vLLM cannot place 128 experts on 3 GPUs, or a group on one node
        (["--model", "qwen3-30b-a3b", "--prefill-tokens", "8", "--dp", "3", "--expert-parallel"],
         "--expert-parallel", "128 experts do not split evenly"),
        (["--model", "qwen3-30b-a3b", "--prefill-tokens", "8", "--dp", "4", "--tp", "4"], "--dp",
         "4 ranks x --tp 4 = 16 GPUs, more than one node's 8 h100-sxm GPUs"),
        # a MemoryError building the batch; astronomical times for impossible requests
        (["--model", "llama-3.1-8b", "--decode-batch", "99999999999", "--context", "10"],
         "--decode-batch", "99,999,999,999 requests of 11 tokens hold"),
        (["--model", "llama-3.1-8b", "--decode-batch", "4", "--context", "99999999999"],
         "--context", "exceed the 131,072 positions of llama-3.1-8b"),
        (["--model", "llama-3.1-8b", "--prefill-tokens", "99999999999"], "--prefill-tokens",
         "exceed the 131,072 positions of llama-3.1-8b"),
    ],
)
def test_step_time_bad_options_are_one_line(args, path, message):
    code, output = run_cli(*STEP, *args)
    assert code == 2
    lines = output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{path}: "), output
    assert message in output


def test_step_time_prices_a_request_at_the_models_full_context():
    code, output = run_cli(*STEP, "--model", "llama-3.1-8b", "--decode-batch", "1",
                           "--context", str(131_072 - 1))
    assert code == 0, output


def test_validate_refuses_an_unwritable_docs_path_before_scoring(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    for page, message in ((tmp_path, "cannot write: Is a directory"),
                          (blocker / "validation.md",
                           f"cannot write: {blocker} is a file, not a folder")):
        code, output = run_cli("validate", "--write-docs", str(page))
        assert code == 2
        lines = output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"{page}: {message}"), output


def test_a_bare_command_group_still_prints_its_help():
    code, output = run_cli("trace")
    assert "Usage:" in output and "stats" in output


def test_a_run_names_the_gpu_profile_that_priced_it(tmp_path):
    """summary.json and the printed report say which calibration priced the steps, so a report
    can be traced to its validation errors; a user's own profile shows as such."""
    result = simulate(tmp_path / "a", scenario())
    assert result["summary"]["engine"][0]["calibration"] == "fit-v2:h100-sxm"
    path = write_scenario(tmp_path, scenario())
    code, output = run_cli("simulate", str(path), "--out", str(tmp_path / "b"))
    assert code == 0, output
    assert "step times priced with h100-sxm: fit-v2:h100-sxm" in output
    profile = tmp_path / "mine.yaml"
    code, output = run_cli("calibrate", "--gpu", "h100-sxm", "--model", "qwen2.5-7b-instruct",
                           "--decode", "1@100=0.008", "--out", str(profile))
    assert code == 0, output
    path = write_scenario(tmp_path, scenario(gpu=f"h100-sxm@{profile}"))
    code, output = run_cli("simulate", str(path), "--out", str(tmp_path / "c"))
    assert code == 0, output
    assert "h100-sxm: fit-v2:h100-sxm+few-shot" in output
