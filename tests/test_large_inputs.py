"""A large trace under a tight address limit, as issue 31 found it: a 256 MB trace of 64M
two-number rows (under the 1 GiB file limit, past the 10M-request one) once died with a
MemoryError traceback under a 4 GB address limit, the whole text split into lines before any
limit was checked. Now it is read in pieces and refused at the first request past the limit:
under 2 GB of address space it must end in exit 0 or in exit 2 with one ``path: message``
line. And a file past its size limit is refused by its size, before it is read."""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.fuzz.checks import error_lines

ADDRESS_LIMIT = 2 << 30
ROWS = 64 << 20
"""4 bytes a row (``5,3\\n``): 256 MiB."""


def _write_trace(path: Path) -> None:
    block = b"5,3\n" * (1 << 20)  # a million rows a write: the file in half a second
    with path.open("wb") as f:
        f.write(b"num_prefill_tokens,num_decode_tokens\n")
        for _ in range(ROWS >> 20):
            f.write(block)


def _limited() -> None:  # in the child, before exec
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_LIMIT, ADDRESS_LIMIT))


@pytest.fixture(scope="module")
def big_trace(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("big")
    _write_trace(folder / "t.csv")
    assert (folder / "t.csv").stat().st_size > 256 * 10**6
    (folder / "s.yaml").write_text(yaml.safe_dump({
        "name": "big", "model": "qwen2.5-7b-instruct", "gpu": "h100-sxm",
        "workload": {"kind": "replay", "trace": "t.csv"}}))
    return folder


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS as Linux has it")
@pytest.mark.parametrize("argv", [("trace", "stats", "t.csv"),
                                  ("simulate", "s.yaml", "--out", "out")],
                         ids=["trace stats", "simulate a replay"])
def test_a_256_mb_trace_under_a_2_gb_address_limit_is_one_line(big_trace, argv):
    run = subprocess.run([sys.executable, "-m", "clustersim", *argv], cwd=big_trace,
                         capture_output=True, text=True, preexec_fn=_limited, timeout=600)
    assert run.returncode in (0, 2), run.stderr[-2000:]
    assert "Traceback" not in run.stderr and "MemoryError" not in run.stderr
    if run.returncode == 2:
        assert error_lines(run.stderr, max_lines=1) == [], run.stderr[-2000:]
        assert run.stderr.startswith("t.csv:10000002: more than 10,000,000 requests"), (
            run.stderr)
    else:
        assert run.stderr == ""


@pytest.mark.parametrize(("name", "argv", "message"), [
    ("r.jsonl", ("calibrate", "--gpu", "h100-sxm", "--model", "qwen2.5-7b-instruct",
                 "--from-requests", "r.jsonl", "--out", "p.yaml"),
     "r.jsonl: records file larger than 1,024 MiB; clustersim reads it whole into memory"),
    ("s.yaml", ("simulate", "s.yaml", "--out", "out"),
     "s.yaml: scenario file larger than 16 MiB; clustersim reads it whole into memory"),
])
def test_a_file_past_its_size_limit_is_refused_before_it_is_read(tmp_path, monkeypatch, name,
                                                                  argv, message):
    # a sparse GiB of records was read whole (1.1 GB resident, 4 s) before being refused
    from clustersim.inputs import MAX_TRACE_BYTES
    from tests.helpers import run_cli

    monkeypatch.chdir(tmp_path)
    with (tmp_path / name).open("wb") as f:
        f.write(b'{"input_toks": 1}\n')
        f.truncate(MAX_TRACE_BYTES + 1)
    start = time.process_time()
    code, output = run_cli(*argv)
    assert time.process_time() - start < 1.0
    assert code == 2 and output.splitlines() == [message], output
