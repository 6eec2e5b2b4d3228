"""A Ray address that cannot serve a plan ends it in one line with exit 2, before Ray itself
retries it for minutes: without --executor ray, malformed, or where nothing listens."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from clustersim.errors import ConfigError
from clustersim.plan.executors import parse_ray_address
from tests.helpers import run_cli

QUICKSTART = str(Path(__file__).resolve().parent.parent / "scenarios" / "quickstart.yaml")


def _plan(tmp_path: Path, *args: str) -> tuple[int, str]:
    return run_cli("plan", QUICKSTART, "--no-report", "--out", str(tmp_path / "plan"), *args)


@pytest.mark.parametrize(("address", "expected"), [
    ("10.0.0.5:6379", ("10.0.0.5", 6379)),
    ("ray://head.example:10001", ("head.example", 10001)),
    ("[fe80::1]:6379", ("fe80::1", 6379)),
    ("auto", None),
    ("local", None),
])
def test_ray_addresses_read(address, expected):
    assert parse_ray_address(address) == expected


@pytest.mark.parametrize("address", ["head", "head:", "head:port", "head:70000", ":6379",
                                     "foo bar:6379", "ray://"])
def test_a_malformed_ray_address_is_refused(address):
    with pytest.raises(ConfigError, match="is not a Ray address"):
        parse_ray_address(address)


def test_an_address_without_the_ray_executor_is_refused(tmp_path):
    code, output = _plan(tmp_path, "--address", "10.0.0.5:6379")
    assert code == 2
    assert output.strip().splitlines()[-1] == (
        "--address: only with --executor ray (this plan runs on --executor process)")
    assert not (tmp_path / "plan").exists()


def test_a_port_where_nothing_listens_is_refused_at_once(tmp_path):
    pytest.importorskip("ray")
    with socket.socket() as s:  # a port free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    started = time.process_time()
    code, output = _plan(tmp_path, "--executor", "ray", "--address", f"127.0.0.1:{port}")
    assert code == 2
    (line,) = [x for x in output.splitlines() if x.startswith("--address")]
    assert line.startswith(f"--address: no Ray cluster answers at 127.0.0.1:{port} within")
    assert time.process_time() - started < 30


def test_a_malformed_address_ends_the_plan_in_one_line(tmp_path):
    pytest.importorskip("ray")
    code, output = _plan(tmp_path, "--executor", "ray", "--address", "head-node")
    assert code == 2
    assert output.strip().splitlines()[-1].startswith(
        "--address: 'head-node' is not a Ray address")
