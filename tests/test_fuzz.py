"""The fuzz campaign's quick run (the long one: ``python -m tests.fuzz --cases 10000``), and
its classifier on hand-made answers."""

from __future__ import annotations

from pathlib import Path

from tests.fuzz import checks, generate
from tests.fuzz.runner import FAILURES, OK, Campaign
from tests.fuzz.strategies import SOURCES

QUICK_CASES = 150


def test_a_quick_fuzz_campaign_has_no_failures():
    cases = generate(QUICK_CASES, seed=20261201)
    assert {case.source for case in cases} == {source for source, _, _ in SOURCES}
    with Campaign(jobs=2) as campaign:
        report = campaign.run(cases)
    assert report.num_cases == QUICK_CASES
    assert report.total[OK] > 0
    failures = [f"{r.outcome}: clustersim {' '.join(r.case.argv)}: {r.detail[:300]}"
                for r in report.failures]
    assert not failures, "\n".join(failures)
    assert not set(report.total) & set(FAILURES)


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


def test_the_worker_stops_a_run_at_its_time_and_memory_limits(tmp_path: Path):
    import os

    from tests.fuzz.runner import MEMORY, TIMEOUT, Worker, classify
    from tests.fuzz.strategies import Case

    os.mkfifo(tmp_path / "fifo")
    # a writer that never writes: reading the pipe waits for ever (one with no writer at all
    # is refused at once)
    writer = os.open(tmp_path / "fifo", os.O_RDWR)
    worker = Worker(hash_seed=1)
    try:
        answer = worker.run(tmp_path, ["trace", "stats", "fifo"], timeout_s=1.0)
        assert answer["timed_out"] and 1.0 <= answer["wall_s"] < 5.0
        case = Case("test", ("trace", "stats", "fifo"))
        assert classify(case, tmp_path, answer)[0] == TIMEOUT
        # a whole run (thousands of requests) cannot fit in 64 MB of address space, whatever
        # the fork server had already mapped; a scenario that fails validation early might
        quickstart = str(Path(__file__).parents[1] / "scenarios" / "quickstart.yaml")
        argv = ["simulate", quickstart, "--out", "out"]
        answer = worker.run(tmp_path, argv, memory_bytes=64 << 20)
        assert classify(Case("test", tuple(argv)), tmp_path, answer)[0] == MEMORY
    finally:
        worker.close()
        os.close(writer)
