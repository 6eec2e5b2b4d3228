"""Bad input, each kind at its smallest: one ``path: message`` line (or a few), exit code 2,
no traceback; and the files a command may write. The fuzz campaign (``tests/fuzz``) draws
thousands more of each kind."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import threading
import time
from pathlib import Path

import pytest
import yaml

from clustersim.errors import InputError
from clustersim.limits import MAX_TOKENS
from tests.helpers import run_cli, scenario

TRACE = "arrived_at,num_prefill_tokens,num_decode_tokens\n0,5,3\n1.5,50,30\n"
GOOD = yaml.safe_dump(scenario(), sort_keys=False).encode()
GZ = gzip.compress(TRACE.encode() * 50, mtime=0)


def scn(**change: object) -> bytes:
    return yaml.safe_dump(scenario(**change), sort_keys=False).encode()


def pool(**fields: object) -> dict[str, object]:
    return {"kind": "prompt_pool", "num_groups": 2, "num_prompts_per_group": 3,
            "system_prompt_tokens": 64, "question_tokens": 16, "output_tokens": 8,
            "arrivals": {"kind": "poisson", "rate_per_s": 1}, "num_requests": 5, **fields}


def sessions(**fields: object) -> dict[str, object]:
    return {"kind": "sessions", "arrivals": {"kind": "poisson", "rate_per_s": 1},
            "num_sessions": 3, "system_prompt_tokens": 300, "turns": 2, "user_tokens": 10,
            "output_tokens": 10, **fields}


def replay(trace: str, **fields: object) -> bytes:
    return scn(workload={"kind": "replay", "trace": trace, **fields})


PROFILE = yaml.safe_dump({"profiles": {"h100-sxm": {"per_step_overhead_s": 0.001}}}).encode()
CONFIG = json.dumps({"model_type": "llama", "hidden_size": 1024, "intermediate_size": 4096,
                     "max_position_embeddings": 4096, "num_attention_heads": 8,
                     "num_hidden_layers": 4, "vocab_size": 32000}).encode()
RECORDS = b"".join(json.dumps({"input_toks": 100, "output_toks": 11, "queued_ts": t,
                               "first_token_ts": t + 0.05, "last_token_ts": t + 1.0}).encode()
                   + b"\n" for t in (0.0, 2.0))
FEW_SHOT = ("calibrate", "--gpu", "h100-sxm", "--model", "qwen2.5-7b-instruct")
SIM = ("simulate", "s.yaml", "--out", "out")

# (id, files, argv, first line of the answer); {d} is the folder the files are in
BAD_INPUTS = [
    # ------------------------------------------------ bytes that are not text
    ("scenario not UTF-8", {"s.yaml": GOOD + b"description: \xff\n"}, SIM,
     "s.yaml:{n}: not UTF-8 text: byte 0xff at column 14 (invalid start byte)"),
    ("trace not UTF-8", {"s.yaml": replay("t.csv"), "t.csv": TRACE.encode() + b"\xfe,1,1\n"},
     SIM, "t.csv:4: not UTF-8 text: byte 0xfe at column 1"),
    ("topology not UTF-8", {"s.yaml": scn(topology="topo.yaml"), "topo.yaml": b"name: \xc3\x28"},
     SIM, "{d}/topo.yaml:1: not UTF-8 text: byte 0xc3 at column 7"),
    ("profile not UTF-8", {"s.yaml": scn(gpu="h100-sxm@{d}/p.yaml"), "p.yaml": b"\x80"}, SIM,
     "{d}/p.yaml:1: not UTF-8 text: byte 0x80 at column 1"),
    ("config.json not UTF-8", {"s.yaml": scn(model="{d}/cfg"), "cfg/config.json": b"{\xff}"},
     SIM, "{d}/cfg/config.json:1: not UTF-8 text: byte 0xff at column 2"),
    ("records not UTF-8", {"r.jsonl": RECORDS + b"\xff"},
     (*FEW_SHOT, "--from-requests", "r.jsonl", "--out", "p.yaml"),
     "r.jsonl:3: not UTF-8 text: byte 0xff at column 1"),
    # ------------------------------------------------ files that are not there or broken
    ("scenario is a folder", {"s.yaml/": b""}, SIM, "s.yaml: is a folder, not a scenario file"),
    ("scenario empty", {"s.yaml": b"\n"}, SIM, "s.yaml:1: empty file"),
    ("scenario missing", {}, SIM, "s.yaml: cannot read scenario: No such file or directory"),
    ("truncated .gz trace", {"s.yaml": replay("t.csv.gz"),
                             "t.csv.gz": gzip.compress(TRACE.encode() * 50)[:60]}, SIM,
     "t.csv.gz: truncated gzip file: it ends before its last block"),
    ("corrupt .gz trace", {"s.yaml": replay("t.csv.gz"),
                           "t.csv.gz": GZ[:20] + bytes([GZ[20] ^ 0xFF]) + GZ[21:]},
     SIM, "t.csv.gz: corrupt gzip file: "),
    ("not a .gz at all", {"t.csv.gz": TRACE.encode()}, ("trace", "stats", "t.csv.gz"),
     "t.csv.gz: corrupt gzip file: Not a gzipped file"),
    # ------------------------------------------------ YAML and JSON
    ("duplicate key", {"s.yaml": GOOD + b"seed: 1\n"}, SIM,
     "s.yaml:{n}: duplicate key 'seed' (first on line 2)"),
    ("1,000-deep nesting", {"s.yaml": GOOD + b"description: " + b"[" * 1000 + b"]" * 1000},
     SIM, "s.yaml:{n}: invalid YAML: nested deeper than 64 levels"),
    ("alias bomb", {"s.yaml": GOOD + b"".join(
        f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10) if i else '1'}]\n".encode()
        for i in range(8))}, SIM,
     "s.yaml:{m}: invalid YAML: its aliases expand to more than 1,000,000 values"),
    ("alias cycle", {"s.yaml": GOOD + b"loop: &loop [*loop]\n"}, SIM,
     "s.yaml:{n}: invalid YAML: an alias refers to the value that contains it"),
    ("NUL character", {"s.yaml": GOOD + b"name: a\x00b\n"}, SIM,
     "s.yaml:{n}: invalid YAML: character U+0000 is not allowed in YAML text"),
    ("JSON NaN in a config", {"s.yaml": scn(model="{d}/c.json"),
                              "c.json": CONFIG[:-1] + b', "rope_theta": NaN}'}, SIM,
     "{d}/c.json: invalid JSON: NaN is not a number JSON allows"),
    ("JSON key twice in a trace", {"t.jsonl": b'{"input_toks": 1, "input_toks": 2}\n'},
     ("trace", "stats", "t.jsonl"), "t.jsonl:1: invalid JSON: duplicate key 'input_toks'"),
    # ------------------------------------------------ sizes, before any memory is taken
    ("tensor_parallel_size 1e9", {"s.yaml": scn(tensor_parallel_size=10**9)}, SIM,
     "s.yaml: tensor_parallel_size: 1,000,000,000 is more than 72: tensor parallelism stays inside "
     "one NVLink domain"),
    ("instances 1e9", {"s.yaml": scn(layout={"pools": [{"name": "a", "instances": 10**9}]})},
     SIM, "s.yaml: layout.pools[0].instances: 1,000,000,000 is more than 16,384"),
    ("GPUs in all", {"s.yaml": scn(tensor_parallel_size=8, layout={"pools": [
        {"name": "a", "instances": 2100}]})}, SIM,
     "s.yaml: layout.pools[0].instances: 16,800 GPUs in all (instances x data-parallel ranks x "
     "tensor-parallel GPUs), more than 16,384"),
    ("KV blocks past memory", {"s.yaml": scn(engine={"num_gpu_blocks_override": 10**9})}, SIM,
     "s.yaml: engine.num_gpu_blocks_override: 1,000,000,000 blocks of 16 tokens hold "
     "917,504.0 GB of KV cache per GPU"),
    ("num_requests 1e12", {"s.yaml": scn(workload={
        "kind": "poisson", "rate_per_s": 1, "num_requests": 10**12, "prompt_tokens": 8,
        "output_tokens": 8})}, SIM,
     "s.yaml: workload.num_requests: 1,000,000,000,000 is more than 10,000,000: a run holds every "
     "request in memory"),
    ("duration x rate", {"s.yaml": scn(workload={
        "kind": "synthetic", "arrivals": {"kind": "poisson", "rate_per_s": 1000},
        "lengths": {"kind": "independent", "prompt_tokens": 8, "output_tokens": 8},
        "duration_s": 86400})}, SIM,
     "s.yaml: workload: duration_s 86400 s at up to 1000 requests/s brings up to 86,400,000 "
     "requests"),
    ("on_s infinite", {"s.yaml": scn(workload={
        "kind": "synthetic", "arrivals": {"kind": "on_off", "on_rate_per_s": 1,
                                          "on_s": float("inf"), "off_s": 1},
        "lengths": {"kind": "independent", "prompt_tokens": 8, "output_tokens": 8},
        "num_requests": 5})}, SIM,
     "s.yaml: workload.arrivals.on_s: Input should be a finite number"),
    ("arrivals past 3 years", {"s.yaml": scn(workload={
        "kind": "poisson", "rate_per_s": 1e-8, "num_requests": 100, "prompt_tokens": 8,
        "output_tokens": 8})}, SIM,
     "s.yaml: workload.rate_per_s: the last request would arrive at"),
    ("seed -1", {"s.yaml": scn(seed=-1)}, SIM,
     "s.yaml: seed: -1 is less than 0: numpy's generators take non-negative seeds"),
    ("class weight .inf", {"s.yaml": scn(workload={
        "kind": "poisson", "rate_per_s": 1, "num_requests": 3, "classes": [
            {"name": "a", "weight": float("inf"), "prompt_tokens": 8, "output_tokens": 8}]})},
     SIM, "s.yaml: workload.classes[0].weight: Input should be a finite number"),
    ("10^22-token prompt", {"s.yaml": scn(workload={"kind": "explicit", "requests": [
        {"id": "a", "arrival_s": 0, "prompt_tokens": 10**22, "output_tokens": 1}]})}, SIM,
     f"s.yaml: workload.requests[0].prompt_tokens: 10,000,000,000,000,000,000,000 is more than "
     f"{MAX_TOKENS:,}"),
    ("fixed step .inf", {"s.yaml": scn(cost={"kind": "fixed", "step_time_s": float("inf")})},
     SIM, "s.yaml: cost.step_time_s: Input should be a finite number"),
    ("profile efficiency ~0", {"s.yaml": scn(gpu="h100-sxm@{d}/p.yaml"), "p.yaml": yaml.safe_dump(
        {"profiles": {"h100-sxm": {"memory_efficiency": 1e-300}}}).encode()}, SIM,
     "{d}/p.yaml:h100-sxm.memory_efficiency: 1e-300 is less than 0.001"),
    # ------------------------------------------------ trace counts that used to wrap
    ("CSV count above 2^63", {"t.csv": (TRACE + "2,1e30,3\n").encode()},
     ("trace", "stats", "t.csv"),
     "t.csv:4: num_prefill_tokens '1e30' is more than 100,000,000 tokens"),
    ("JSONL count above 2^63", {"t.jsonl": b'{"input_toks": 5, "output_toks": '
                                           b'1000000000000000000000000000000, "arrival_time"'
                                           b': 0, "request_id": "a"}\n'},
     ("trace", "stats", "t.jsonl"),
     "t.jsonl:1: output_toks 1000000000000000000000000000000 is more than 100,000,000 tokens"),
    ("JSON true as a count", {"t.jsonl": b'{"input_toks": true, "output_toks": 2, '
                                         b'"arrival_time": 0, "request_id": "a"}\n'},
     ("trace", "stats", "t.jsonl"), "t.jsonl:1: input_toks must be a number, got True"),
    ("arrival past 3 years", {"t.csv": (TRACE + "1e12,5,3\n").encode()},
     ("trace", "stats", "t.csv"),
     "t.csv:4: arrived_at '1e12' is more than 1e+08 s after the first request"),
    # ------------------------------------------------ paths always set
    ("trace ''", {"s.yaml": replay("")}, SIM,
     "s.yaml: workload.trace: String should have at least 1 character"),
    ("gpu h100-sxm@", {"s.yaml": scn(gpu="h100-sxm@")}, SIM,
     "s.yaml: gpu: nothing after '@' in 'h100-sxm@'"),
    ("trace stats ''", {}, ("trace", "stats", ""), "trace: empty trace name"),
    # ------------------------------------------------ the name names the output folders
    ("name ../../x", {"s.yaml": scn(name="../../x")}, SIM,
     "s.yaml: name: must be a plain file name (letters, digits, '.', '_', '-'; no '/' or '..'): "
     "it names the output folders; got '../../x'"),
    ("name absolute", {"s.yaml": scn(name="/srv/x")}, SIM,
     "s.yaml: name: must be a plain file name (letters, digits, '.', '_', '-'; no '/' or '..'): "
     "it names the output folders; got '/srv/x'"),
    ("name with NUL", {"s.yaml": scn(name="a\0b")}, SIM,
     "s.yaml: name: must be a plain file name (letters, digits, '.', '_', '-'; no '/' or '..'): "
     "it names the output folders; got 'a\\x00b'"),
    ("name ..", {"s.yaml": scn(name="..")}, SIM, "s.yaml: name: must be a plain file name"),
    ("name 101 characters", {"s.yaml": scn(name="x" * 101)}, SIM,
     "s.yaml: name: 101 characters, more than 100: it names the output folders"),
    # ------------------------------------------------ pydantic's words made plain
    ("layout: 5", {"s.yaml": scn(layout=5)}, SIM,
     "s.yaml: layout: expected a mapping of fields, got an integer 5"),
    ("cost without kind", {"s.yaml": scn(cost={"step_time_s": 1})}, SIM,
     "s.yaml: cost.kind: missing: choose one of roofline, fixed"),
    ("unknown kind", {"s.yaml": scn(cost={"kind": "free"})}, SIM,
     "s.yaml: cost.kind: unknown kind 'free'; choose one of roofline, fixed"),
    # ------------------------------------------------ prompt pools and sessions
    ("answer stop share 1.5", {"s.yaml": scn(workload=pool(output_tokens={
        "kind": "stop_or_length", "max_tokens": 9, "stop_fraction": 1.5, "stop_tokens": 4}))},
     SIM, "s.yaml: workload.output_tokens.stop_fraction: 1.5 is more than 1: it is a share"),
    ("pool of 2M prompts", {"s.yaml": scn(workload=pool(num_groups=2000,
                                                        num_prompts_per_group=1000))}, SIM,
     "s.yaml: workload.num_prompts_per_group: 2,000 groups of 1,000 prompts are 2,000,000 "
     "prompts, more than 1,000,000"),
    ("pool order", {"s.yaml": scn(workload=pool(order="shuffle"))}, SIM,
     "s.yaml: workload.order: Input should be 'cycle' or 'random'"),
    ("closed-loop sessions", {"s.yaml": scn(workload=sessions(
        arrivals={"kind": "closed_loop", "num_users": 2}))}, SIM,
     "s.yaml: workload.arrivals.kind: unknown kind 'closed_loop'; choose one of poisson, "
     "gamma, constant, on_off, rate_curve"),
    ("20,000 turns", {"s.yaml": scn(workload=sessions(turns=20_000))}, SIM,
     "s.yaml: workload.turns: 20,000 is more than 10,000: a session of more is a trace"),
    ("unbounded turns", {"s.yaml": scn(workload=sessions(
        turns={"kind": "lognormal", "mean": 4, "cv": 1}))}, SIM,
     "s.yaml: workload.turns: give the lognormal a high (at most 10,000)"),
    ("think time past 10 min", {"s.yaml": scn(workload=sessions(think_time_s={
        "kind": "exponential", "mean_s": 900}))}, SIM,
     "s.yaml: workload.think_time_s.mean_s: 900 s is more than 600 s"),
    ("tool latency inverted", {"s.yaml": scn(workload=sessions(tool_calls={
        "calls_per_turn": 3, "output_tokens": 50,
        "latency_s": {"kind": "uniform", "low_s": 3, "high_s": 1}}))}, SIM,
     "s.yaml: workload.tool_calls.latency_s: low_s (3.0) must be <= high_s (1.0)"),
    ("context cap mode", {"s.yaml": scn(workload=sessions(at_context_cap="summarize"))}, SIM,
     "s.yaml: workload.at_context_cap: Input should be 'truncate' or 'end_session'"),
    ("shared system prompts of none", {"s.yaml": scn(workload=sessions(
        system_prompt_tokens=None, num_system_prompts=3))}, SIM,
     "s.yaml: workload.num_system_prompts: shared system prompts need system_prompt_tokens"),
    ("cap below every first request", {"s.yaml": scn(workload=sessions(
        max_context_tokens=200))}, SIM,
     "s.yaml: workload.max_context_tokens: 200 tokens hold no session's first request"),
    # ------------------------------------------------ files only where asked
    ("compare --out /proc/x", {"s.yaml": scn(layout={"pools": [{"name": "a", "instances": 2}]},
                                             topology="dgx-h100")},
     ("compare", "s.yaml", "--out", "/proc/x"),
     "/proc/x/colocated: cannot create output directory"),
    ("simulate --out /proc/self", {"s.yaml": GOOD}, ("simulate", "s.yaml", "--out", "/proc/self"),
     "/proc/self/requests.csv: cannot write"),
    ("validate into a missing folder", {}, ("validate", "--write-docs", "nope/dir/x.md"),
     "nope/dir/x.md: cannot write: no folder nope/dir"),
    ("calibrate without --out", {}, ("calibrate",), "--out: give the profile file to write"),
    ("few-shot into a missing folder", {}, (*FEW_SHOT, "--decode", "1@100=0.008", "--out",
                                           "nope/p.yaml"),
     "nope/p.yaml: cannot write: no folder nope"),
    # ------------------------------------------------ the command line
    ("unknown command", {}, ("simulat",), "root: No such command 'simulat'."),
    ("unknown top option", {}, ("--bogus",), "root: No such option: --bogus"),
    ("unknown option", {}, ("simulate", "--bogus"), "root simulate: No such option: --bogus"),
]


@pytest.mark.parametrize(("files", "argv", "expected"), [c[1:] for c in BAD_INPUTS],
                         ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_is_path_message_and_exit_2(tmp_path, monkeypatch, files, argv, expected):
    monkeypatch.chdir(tmp_path)
    for name, data in files.items():
        path = tmp_path / name
        if name.endswith("/"):
            path.mkdir()
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data.replace(b"{d}", str(tmp_path).encode()))
    line = len(GOOD.split(b"\n"))  # the first line after GOOD's
    code, output = run_cli(*(arg.replace("{d}", str(tmp_path)) for arg in argv))
    assert code == 2, output
    assert output.startswith(expected.format(d=tmp_path, n=line, m=line + 6)), output
    assert "Traceback" not in output and len(output.strip().splitlines()) <= 11


@pytest.mark.slow
def test_many_unknown_keys_are_ten_lines_and_a_count(tmp_path):
    data = scenario(**{f"k{i}": i for i in range(100_000)})
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    code, output = run_cli("simulate", str(path), "--out", str(tmp_path / "out"))
    lines = output.strip().splitlines()
    assert code == 2 and len(lines) == 11
    assert lines[0] == f"{path}: k0: unknown field"
    assert lines[-1] == "... and 99,990 more problems"


def test_weights_near_the_float_limit_draw_classes_without_a_warning(tmp_path):
    # the weights summed to inf: "invalid value encountered in divide", then a traceback
    path = tmp_path / "s.yaml"
    path.write_bytes(scn(workload={"kind": "poisson", "rate_per_s": 1, "num_requests": 5,
                                   "classes": [{"name": n, "weight": 1e308, "prompt_tokens": 8,
                                                "output_tokens": 2} for n in "ab"]}))
    code, output = run_cli("simulate", str(path), "--out", str(tmp_path / "out"))
    assert code == 0, output
    assert "Warning" not in output and "5 arrived, 5 finished" in output


def test_version_and_short_help_on_every_command():
    code, output = run_cli("--version")
    assert code == 0 and output.startswith("clustersim ")
    for command in ([], ["plan"], ["simulate"], ["compare"], ["step-time"], ["calibrate"],
                    ["validate"], ["trace"], ["trace", "stats"], ["trace", "list"]):
        code, output = run_cli(*command, "-h")
        assert code == 0 and "Usage:" in output and "Error" not in output, command


def test_a_bare_command_group_prints_its_help_once_and_exits_0():
    for command in ([], ["trace"]):
        code, output = run_cli(*command)
        assert code == 0 and output.count("Usage:") == 1, output


@pytest.mark.slow
def test_calibrate_writes_only_where_out_says(tmp_path, monkeypatch, fit_once):
    import clustersim.catalog

    shipped = Path(clustersim.catalog.__file__).with_name("calibrated.yaml")
    before = shipped.read_bytes()
    monkeypatch.chdir(tmp_path)
    code, _ = run_cli("calibrate")
    assert code == 2 and shipped.read_bytes() == before and not list(tmp_path.iterdir())
    code, output = run_cli("calibrate", "--out", "mine.yaml")
    assert code == 0, output
    assert [p.name for p in tmp_path.iterdir()] == ["mine.yaml"]
    assert shipped.read_bytes() == before


# ------------------------------------------------ files that are not files
# (id, files, argv, the special file, the start of the answer); {d} as in BAD_INPUTS
SPECIAL_FILES = [
    ("scenario", {}, SIM, "s.yaml", "s.yaml: is {kind}, not a scenario file"),
    ("trace", {"s.yaml": replay("t.csv")}, SIM, "t.csv", "t.csv: is {kind}, not a trace file"),
    ("trace stats", {}, ("trace", "stats", "t.csv"), "t.csv",
     "t.csv: is {kind}, not a trace file"),
    ("topology", {"s.yaml": scn(topology="topo.yaml")}, SIM, "topo.yaml",
     "{d}/topo.yaml: is {kind}, not a topology file"),
    ("profile", {"s.yaml": scn(gpu="h100-sxm@{d}/p.yaml")}, SIM, "p.yaml",
     "{d}/p.yaml: is {kind}, not a profile file"),
    ("config.json", {"s.yaml": scn(model="{d}/cfg"), "cfg/": b""}, SIM, "cfg/config.json",
     "{d}/cfg/config.json: is {kind}, not a model config file"),
    ("records", {}, (*FEW_SHOT, "--from-requests", "r.jsonl", "--out", "p.yaml"), "r.jsonl",
     "r.jsonl: is {kind}, not a records file"),
]
KINDS = {"fifo": "a pipe that nothing writes to", "device": "a character device"}


def _unblock_after(fifo: Path, seconds: float) -> threading.Timer:
    """A reader stuck opening ``fifo`` is let go after ``seconds`` (a writer opens and closes
    it), so that a missing check fails the test instead of hanging it."""
    def open_and_close() -> None:
        with contextlib.suppress(OSError):  # no reader: nothing is stuck
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))

    timer = threading.Timer(seconds, open_and_close)
    timer.start()
    return timer


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize(("files", "argv", "special", "expected"),
                         [c[1:] for c in SPECIAL_FILES], ids=[c[0] for c in SPECIAL_FILES])
def test_a_pipe_or_a_device_is_refused_before_it_is_read(tmp_path, monkeypatch, files, argv,
                                                          special, expected, kind):
    # reading a pipe with no writer waited for ever; /dev/zero never ends
    monkeypatch.chdir(tmp_path)
    for name, data in files.items():
        if name.endswith("/"):
            (tmp_path / name).mkdir()
        else:
            (tmp_path / name).write_bytes(data.replace(b"{d}", str(tmp_path).encode()))
    path = tmp_path / special
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    timer = _unblock_after(path, 10.0)
    try:
        code, output = run_cli(*(arg.replace("{d}", str(tmp_path)) for arg in argv))
    finally:
        timer.cancel()
    assert code == 2, output
    assert output.startswith(expected.format(d=tmp_path, kind=KINDS[kind])), output
    assert len(output.strip().splitlines()) == 1, output


@pytest.mark.skipif(not Path("/dev/fd").is_dir(), reason="needs /dev/fd")
def test_a_pipe_with_a_writer_and_a_link_to_a_file_are_read(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.csv").write_text(TRACE)
    (tmp_path / "link.csv").symlink_to(tmp_path / "t.csv")
    code, output = run_cli("trace", "stats", "link.csv")
    assert code == 0 and output.startswith("link.csv (vidur): 2 requests"), output
    read, write = os.pipe()  # what `clustersim trace stats <(cat t.csv)` reads
    try:
        os.write(write, TRACE.encode())
        os.close(write)
        code, output = run_cli("trace", "stats", f"/dev/fd/{read}")
    finally:
        os.close(read)
    assert code == 0 and output.startswith(f"/dev/fd/{read} (vidur): 2 requests"), output


@pytest.mark.parametrize("name", ["../../escaped", "/escaped", "a\0b"])
def test_a_name_that_is_not_a_file_name_writes_nothing(tmp_path, monkeypatch, name):
    # runs/plan/<name> and reports/<name>-<time> once wrote two levels up, or at /escaped
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    (work / "s.yaml").write_bytes(scn(name=name))
    for argv in (("plan", "s.yaml"), ("simulate", "s.yaml")):
        code, output = run_cli(*argv)
        assert code == 2 and output.startswith("s.yaml: name: must be a plain file name"), output
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == [
        "a", "a/b", "a/b/s.yaml"]
    assert not Path("/escaped").exists()


def _explicit_scenario(num_requests: int) -> str:
    requests = "".join(f"  - {{id: r{i}, arrival_s: {i}, prompt_tokens: 9, output_tokens: 9}}\n"
                       for i in range(num_requests))
    return ("name: big\nmodel: qwen2.5-7b-instruct\ngpu: h100-sxm\nworkload:\n"
            f"  kind: explicit\n  requests:\n{requests}")


@pytest.mark.skipif(not hasattr(yaml, "CSafeLoader"), reason="counted with libyaml's parser")
def test_a_scenario_of_too_many_values_is_refused_in_seconds(tmp_path):
    # 231,430 explicit requests (15.9 MiB) took 90 s of CPU and 1.7 GB before being refused,
    # and the message blamed aliases the file did not have
    path = tmp_path / "s.yaml"
    path.write_text(_explicit_scenario(120_000))  # 13 values, then 9 a request
    start = time.process_time()
    code, output = run_cli("simulate", str(path), "--out", str(tmp_path / "out"))
    assert time.process_time() - start < 5.0
    assert code == 2 and output.startswith(
        f"{path}:111116: more than 1,000,000 values, the most a YAML file may hold"), output
    assert "; workload.requests[111109].prompt_tokens passes it: list long request sets in a " \
           "trace file" in output
    assert "alias" not in output


@pytest.mark.parametrize("libyaml", [True, False])
def test_the_value_count_is_the_same_with_and_without_libyaml(monkeypatch, libyaml):
    from clustersim import inputs

    if libyaml and not hasattr(yaml, "CSafeLoader"):
        pytest.skip("no libyaml")
    monkeypatch.setattr(inputs, "MAX_YAML_NODES", 14)
    if not libyaml:
        monkeypatch.setattr(inputs, "_FAST_LOADER", yaml.SafeLoader)
    assert inputs.parse_yaml("a: [1, 2, {b: 3, c: [4, 5]}]\nd: 6\n", "s.yaml") == {
        "a": [1, 2, {"b": 3, "c": [4, 5]}], "d": 6}  # 14 values, keys and mappings too
    with pytest.raises(InputError) as error:
        inputs.parse_yaml("a: [1, 2, {b: 3, c: [4, 5]}]\nd: [6]\n", "s.yaml")
    assert str(error.value).startswith("s.yaml:2: more than 14 values")
    assert ("; d[0] passes it" in str(error.value)) is libyaml


def test_a_long_shipped_yaml_is_read_back_from_its_json_cache(tmp_path, monkeypatch):
    from clustersim.inputs import CACHE_MIN_CHARS, parse_shipped_yaml

    monkeypatch.setenv("CLUSTERSIM_CACHE_DIR", str(tmp_path))
    rows = "".join(f"  - {{tp: {k % 8 + 1}, latency: {k / 7:.6g}, name: r{k}}}\n"
                   for k in range(CACHE_MIN_CHARS // 30))
    text = f"# a comment\nprofiles:\n{rows}"
    built = parse_shipped_yaml(text)
    (cached,) = tmp_path.glob("*.json")
    assert parse_shipped_yaml(text) == built == yaml.safe_load(text)
    # what the second call read is the cache: a planted value shows through
    cached.write_text('{"profiles": "from the cache"}')
    assert parse_shipped_yaml(text) == {"profiles": "from the cache"}
    # an unreadable cache is passed over and rewritten; an edited text is another name
    cached.write_text("{not json")
    assert parse_shipped_yaml(text) == built
    assert parse_shipped_yaml(text + "extra: 1\n")["extra"] == 1
    assert len(list(tmp_path.glob("*.json"))) == 2
    # short files and CLUSTERSIM_CACHE_DIR=off are never cached
    monkeypatch.setenv("CLUSTERSIM_CACHE_DIR", "off")
    assert parse_shipped_yaml(text + "more: 2\n")["more"] == 2
    assert len(list(tmp_path.glob("*.json"))) == 2
