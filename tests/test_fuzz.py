"""The fuzz campaign's quick runs (the long one: ``python -m tests.fuzz --cases 10000``), its
file-level mutator, and its classifier on hand-made answers."""

from __future__ import annotations

import os
import signal
import stat
from pathlib import Path

import pytest
import yaml

from tests.fuzz import checks, generate
from tests.fuzz.runner import FAILURES, OK, Campaign
from tests.fuzz.strategies import SOURCES

SMOKE_CASES = 30
QUICK_CASES = 150


def _campaign(num_cases: int, seed: int) -> None:
    cases = generate(num_cases, seed=seed)
    with Campaign(jobs=2) as campaign:
        report = campaign.run(cases)
    assert report.num_cases == num_cases
    assert report.total[OK] > 0
    failures = [f"{r.outcome}: clustersim {' '.join(r.case.argv)}: {r.detail[:300]}"
                for r in report.failures]
    assert not failures, "\n".join(failures)
    assert not set(report.total) & set(FAILURES)


def test_a_fuzz_smoke_run_has_no_failures():
    # every source, the file-level one included, a few cases each (seconds)
    _campaign(SMOKE_CASES, seed=7)


@pytest.mark.slow
def test_a_quick_fuzz_campaign_has_no_failures():
    assert {case.source for case in generate(QUICK_CASES, seed=20261201)} == {
        source for source, _, _ in SOURCES}
    _campaign(QUICK_CASES, seed=20261201)


def test_the_same_seed_draws_the_same_cases():
    assert generate(20, seed=5) == generate(20, seed=5)
    assert generate(20, seed=5) != generate(20, seed=6)


def test_exit_2_messages_must_be_a_few_path_message_lines():
    assert checks.error_lines("workload.rate_per_s: Input should be greater than 0\n") == []
    many = "".join(f"s.yaml: k{i}: unknown field\n" for i in range(10))
    assert checks.error_lines(many + "... and 3 more problems\n") == []
    assert checks.error_lines("") == ["exit 2 without a message"]
    assert checks.error_lines(": cannot read profile\n")[0].startswith("not a path: message")
    assert checks.error_lines("layout: Input should be a valid dictionary or instance of "
                              "LayoutSpec\n")[0].startswith("internals ['instance of']")
    assert checks.error_lines(many + many)[0] == "20 lines (at most 11)"


def test_run_outputs_catch_non_finite_numbers_and_broken_invariants(tmp_path: Path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "summary.json").write_text('{"num_requests": 1, "num_finished": 1, '
                                      '"num_rejected": 0, "mean": NaN, "engine": [{"name": '
                                      '"m", "max_num_batched_tokens": 8, "max_num_seqs": 1, '
                                      '"num_gpu_blocks": 3}]}')
    (out / "requests.csv").write_text(
        "id,arrival_s,first_token_s,finish_s,ttft_s,tpot_s,e2e_s,prompt_tokens,output_tokens,"
        "preemptions,outcome\nr,0,2,1,2,,1,5,1,0,finished\n")
    (out / "steps.csv").write_text(
        "instance,step,start_s,end_s,num_decode_tokens,prefill_chunks,num_scheduled_tokens,"
        "num_running,num_waiting,kv_blocks_used,num_preempted\nm,0,0,1,0,r:9,9,2,0,3,0\n")
    problems = checks.run_outputs(out)
    assert any("NaN is not JSON" in p for p in problems)
    (out / "summary.json").write_text('{"num_requests": 1, "num_finished": 1, '
                                      '"num_rejected": 0, "engine": [{"name": "m", '
                                      '"max_num_batched_tokens": 8, "max_num_seqs": 1, '
                                      '"num_gpu_blocks": 3}]}')
    problems = checks.run_outputs(out)
    assert "request r: TTFT 2.0 > E2E 1.0" in problems
    assert any("9 tokens over the budget 8" in p for p in problems)
    assert any("2 running over max_num_seqs 1" in p for p in problems)
    assert any("3 KV blocks used of 2" in p for p in problems)


def test_the_worker_stops_a_run_at_its_cpu_wall_and_memory_limits(tmp_path: Path):
    from tests.fuzz.runner import HANG, MEMORY, TIMEOUT, Worker, classify
    from tests.fuzz.strategies import Case

    os.mkfifo(tmp_path / "fifo")
    # a writer that never writes: reading the pipe waits for ever without spending CPU, which
    # only the wall-clock backstop ends (one with no writer at all is refused at once)
    writer = os.open(tmp_path / "fifo", os.O_RDWR)
    worker = Worker(hash_seed=1)
    try:
        answer = worker.run(tmp_path, ["trace", "stats", "fifo"], wall_s=1.0)
        assert answer["hung"] and not answer["past_cpu"] and 1.0 <= answer["wall_s"] < 5.0
        assert answer["cpu_s"] < 0.5
        case = Case("test", ("trace", "stats", "fifo"))
        assert classify(case, tmp_path, answer)[0] == HANG
        # a plan of the quick start takes seconds of CPU: stopped by SIGXCPU at 1 s
        quickstart = str(Path(__file__).parents[1] / "scenarios" / "quickstart.yaml")
        argv = ["plan", quickstart, "--executor", "serial", "--no-report", "--out", "p"]
        answer = worker.run(tmp_path, argv, cpu_s=1.0)
        assert answer["past_cpu"] and answer["signal"] == signal.SIGXCPU, answer
        assert 0.9 <= answer["cpu_s"] < 2.5 and not answer["hung"]  # (ticks, not exact)
        assert classify(Case("test", tuple(argv)), tmp_path, answer)[0] == TIMEOUT
        assert not list(tmp_path.glob("core*"))  # no core dump left in the case folder
        # two million requests' columns (48 MB of arrays drawn before the run) cannot fit in
        # 64 MB of address space, whatever the fork server had already mapped (the quick start
        # itself, 300 requests streamed, can run in the heap the server left free)
        big = yaml.safe_load(Path(quickstart).read_text())
        big.pop("plan")
        big["workload"].update(num_requests=2_000_000, rate_per_s=2000.0)
        (tmp_path / "big.yaml").write_text(yaml.safe_dump(big))
        argv = ["simulate", str(tmp_path / "big.yaml"), "--out", "out"]
        answer = worker.run(tmp_path, argv, memory_bytes=64 << 20)
        assert classify(Case("test", tuple(argv)), tmp_path, answer)[0] == MEMORY
    finally:
        worker.close()
        os.close(writer)


# ------------------------------------------------------------ file-level mutator
def test_the_file_level_mutator_makes_every_kind_of_file(tmp_path: Path):
    from tests.fuzz.files import make_special

    root, outside = tmp_path / "case", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "victim.txt").write_text("precious\n")
    (root / "s.yaml").write_text("name: x\n")
    (root / "t.csv").write_text("a,p,o\n")
    for name, kind, argument in [
            ("fifo", "fifo", ""), ("sock", "socket", ""), ("zero", "device", "zero"),
            ("out/link", "link", "{outside}/victim.txt"), ("loop", "link", "loop"),
            ("s.yaml", "pad", str(1 << 20)), ("t.csv", "sparse", str(1 << 30))]:
        make_special(root, outside, name, kind, argument)
    assert stat.S_ISFIFO((root / "fifo").lstat().st_mode)
    assert stat.S_ISSOCK((root / "sock").lstat().st_mode)
    assert stat.S_ISCHR((root / "zero").stat().st_mode)  # a device, or a link to /dev/zero
    assert (root / "out" / "link").read_text() == "precious\n"
    assert os.readlink(root / "out" / "link") == str(outside.resolve() / "victim.txt")
    assert (root / "loop").is_symlink() and not (root / "loop").exists()
    padded = (root / "s.yaml").read_bytes()
    assert len(padded) == 1 << 20 and padded.startswith(b"name: x\n\n###")
    assert (root / "t.csv").stat().st_size == 1 << 30
    assert (root / "t.csv").stat().st_blocks * 512 < 1 << 20  # a hole, not a GiB on disk


def test_file_cases_cover_inputs_outputs_and_their_hazards():
    from tests.fuzz import _draw
    from tests.fuzz.files import SOURCE, file_cases

    cases = _draw(file_cases(), 200, seed=3)
    assert {case.source for case in cases} == {SOURCE}
    kinds = {kind for case in cases for _, kind, _ in case.specials}
    assert kinds == {"fifo", "socket", "device", "link", "pad", "sparse"}
    assert {case.argv[0] for case in cases} == {"simulate", "plan", "compare", "calibrate",
                                                "trace"}
    assert any(name.startswith("out/") for case in cases for name, _, _ in case.specials)


def test_a_change_beside_the_case_folder_is_a_failure(tmp_path: Path):
    from tests.fuzz.runner import OUTSIDE_CHANGED, Worker, _beside, _changed_beside, _write_files
    from tests.fuzz.strategies import Case

    case = Case("files", ("simulate", "s.yaml"), (("../outside/s.yaml", b"name: x\n"),),
                (("out/summary.json", "link", "../../outside/victim.txt"),))
    folder = tmp_path / "a" / "case"
    _write_files(folder, case)
    before = _beside(folder)
    assert sorted(before) == ["outside", "outside/dir", "outside/dir/victim.txt",
                              "outside/s.yaml", "outside/victim.txt"]
    (folder / "out" / "summary.json").write_text("{}\n")  # written through the link
    (folder / "out" / "new.json").write_text("{}\n")  # inside: nobody's business
    (tmp_path / "a" / "escaped").mkdir()
    assert _changed_beside(before, _beside(folder)) == (
        "outside/victim.txt changed; escaped created")
    assert OUTSIDE_CHANGED in FAILURES and Worker  # (the runner counts it as a failure)


def test_docs_check_may_exit_1_where_the_pages_are_missing(tmp_path: Path):
    from tests.fuzz.runner import OTHER_EXIT, STALE, classify
    from tests.fuzz.strategies import Case

    (tmp_path / "stdout.txt").write_text("docs/commands.md: missing\n")
    (tmp_path / "stderr.txt").write_text("run `clustersim docs --write` to update them\n")
    answer = {"code": 1, "signal": None, "wall_s": 0.1, "cpu_s": 0.1, "maxrss_bytes": 1,
              "past_cpu": False, "hung": False}
    assert classify(Case("x", ("docs", "--check")), tmp_path, answer)[0] == STALE
    assert classify(Case("x", ("docs",)), tmp_path, answer)[0] == OTHER_EXIT


def test_a_plan_without_an_answer_may_exit_3_or_4_with_its_plan_and_reasons(tmp_path: Path):
    from tests.fuzz.runner import BAD_NO_ANSWER, NO_ANSWER, OTHER_EXIT, classify
    from tests.fuzz.strategies import Case

    out = tmp_path / "out"
    out.mkdir()
    (out / "plan.json").write_text('{"recommended": null, "candidates": []}')
    (tmp_path / "stdout.txt").write_text("plan s: max_goodput_per_gpu\n")
    (tmp_path / "stderr.txt").write_text(
        "plan: goodput, round 1: 1 simulation in 0.5 s (1 in 1 s so far)\n"
        "s.yaml: no candidate can run: all 2 were pruned (each one's reason is in ledger.csv):\n"
        "  2 candidates (1 x rtx4090 TP1, ...): rtx4090 TP1: does not fit\n")
    answer = {"code": 3, "signal": None, "wall_s": 0.1, "cpu_s": 0.1, "maxrss_bytes": 1,
              "past_cpu": False, "hung": False}
    plan = Case("x", ("plan", "s.yaml", "--out", "out"))
    assert classify(plan, tmp_path, answer) == (NO_ANSWER, "")
    assert classify(Case("x", ("simulate", "s.yaml")), tmp_path, answer)[0] == OTHER_EXIT
    (out / "plan.json").write_text('{"recommended": "colocated/x", "candidates": []}')
    assert classify(plan, tmp_path, answer) == (
        BAD_NO_ANSWER, "a plan that exits 3 or 4 has a recommendation")
    (out / "plan.json").unlink()
    (tmp_path / "stderr.txt").write_text("")
    assert classify(plan, tmp_path, answer)[1].endswith("exit 3 or 4 without a reason")
