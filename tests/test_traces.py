"""Trace files: the shipped traces and their README figures, every format, malformed files as
``file:line: message`` with exit code 2, and replay (window, rate, limit, prefix blocks)."""

from __future__ import annotations

import gzip
import hashlib
import json
import re
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

from clustersim.errors import ConfigError, InputError
from clustersim.scenario import parse_scenario
from clustersim.workload import build_requests, load_trace, resolve_paths
from clustersim.workload.replay import chain_block_hashes, expand_block_ids, spread_ties
from clustersim.workload.stats import trace_stats
from clustersim.workload.traces import FORMATS, SHIPPED_TRACES
from tests.helpers import run_cli

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT / ".." / "shared" / "data"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def replay(trace: str, **fields) -> object:
    data = {"name": "t", "model": "llama-3.1-8b", "gpu": "h100-sxm",
            "workload": {"kind": "replay", "trace": trace, **fields}}
    return parse_scenario(data).workload


# ------------------------------------------------------------- shipped traces
# (rows, span_s, mean req/s, peak req/min, CV of gaps, prompt mean/p50/p99/max,
#  output mean/p50/p99/max), from the traces folder's README (pandas, linear percentiles).
README = {
    "azure-conv-2023": (19366, 3501.7, 5.53, 507, 1.09, (1154.7, 1020, 4142, 14050),
                        (211.1, 129, 601, 1000)),
    "azure-code-2023": (8819, 3435.9, 2.57, 632, 13.2, (2047.8, 1469, 7436, 7437),
                        (27.9, 13, 251, 1899)),
    "mooncake-conversation": (12031, 3537.0, 3.40, 247, None, (12035.1, 6909, 85400, 126195),
                              (342.6, 350, 1118, 2000)),
}


@pytest.mark.parametrize("name", sorted(README))
def test_shipped_trace_stats_match_the_readme(name):
    rows, span, rate, peak, cv, prompt, output = README[name]
    stats = trace_stats(load_trace(name))
    assert stats["num_requests"] == rows
    assert stats["span_s"] == pytest.approx(span, abs=0.05)
    assert stats["mean_rate_per_s"] == pytest.approx(rate, abs=0.005)
    assert stats["peak_minute_requests"] == peak
    if cv is not None:
        assert stats["interarrival_cv"] == pytest.approx(cv, abs=0.05)
    for key, expected in (("prompt_tokens", prompt), ("output_tokens", output)):
        got = stats[key]
        assert got["mean"] == pytest.approx(expected[0], abs=0.05)
        # The README rounds percentiles to whole tokens.
        assert got["p50"] == pytest.approx(expected[1], abs=0.5)
        assert got["p99"] == pytest.approx(expected[2], abs=0.55)
        assert got["max"] == expected[3]


def test_shipped_files_are_unmodified_copies_listed_in_the_readme_and_notice():
    folder = resources.files("clustersim") / "data" / "traces"
    readme = (folder / "README.md").read_text()
    notice = (ROOT / "NOTICE").read_text()
    for shipped in SHIPPED_TRACES.values():
        digest = hashlib.sha256((folder / shipped.file).read_bytes()).hexdigest()
        assert f"{digest}  {shipped.file}" in readme
        assert shipped.file in notice
    assert "CC BY 4.0" in notice and "Splitwise" in notice and "Mooncake" in notice
    assert (folder / "LICENSE.Mooncake-Apache-2.0.txt").is_file()
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert '"data/traces/*"' in pyproject  # in [tool.setuptools.package-data] "clustersim"


def test_trace_stats_cli_prints_the_table_and_json():
    code, output = run_cli("trace", "stats", "azure-conv-2023")
    assert code == 0, output
    lines = output.splitlines()
    assert lines[0] == "azure-conv-2023 (azure): 19,366 requests over 3,501.7 s (58.4 min)"
    assert lines[1] == ("arrivals: mean 5.53 req/s, peak minute 507 req (8.45 req/s), "
                        "burstiness (CV of gaps) 1.09")
    assert lines[3].split() == ["prompt", "1154.7", "1020.0", "4142.0", "14050"]
    assert lines[4].split() == ["output", "211.1", "129.0", "601.0", "1000"]
    assert lines[5].startswith("mix (prompt > 2048 / output > 256 tokens): prefill-heavy ")
    code, output = run_cli("trace", "stats", "azure-code-2023", "--json")
    assert code == 0, output
    data = json.loads(output)
    assert data["num_requests"] == 8819
    mix = data["mix"]
    assert mix["prefill_heavy"] + mix["decode_heavy"] + mix["mixed"] == 8819
    code, output = run_cli("trace", "list")
    assert code == 0 and all(name in output for name in SHIPPED_TRACES)


def test_mooncake_hash_ids_and_the_mix_match_a_direct_count():
    trace = load_trace("mooncake-conversation")
    assert trace.hash_ids is not None and trace.hash_block_tokens == 512
    assert all(len(ids) == -(-int(p) // 512) for ids, p in zip(trace.hash_ids,
                                                               trace.prompt_tokens, strict=True))
    # README: 36.6 % of all blocks repeat an id seen in an earlier request.
    seen: set[int] = set()
    repeats = total = 0
    for ids in trace.hash_ids:
        repeats += sum(1 for i in ids if i in seen)
        total += len(ids)
        seen.update(ids)
    assert total == 288_500 and repeats / total == pytest.approx(0.366, abs=0.0005)


# ---------------------------------------------------------- the other formats
def test_vidur_csv(tmp_path):
    path = write(tmp_path, "v.csv", "arrived_at,num_prefill_tokens,num_decode_tokens\n"
                 "0.0,374,44\n4.5,396,109\n4.5,10,1\n")
    trace = load_trace(path)
    assert trace.format == "vidur"
    assert trace.arrival_s.tolist() == [0.0, 4.5, 4.5]
    assert trace.prompt_tokens.tolist() == [374, 396, 10]
    assert trace.output_tokens.tolist() == [44, 109, 1]


def test_vllm_records_keep_their_ids_and_can_use_the_engine_clock(tmp_path):
    records = [
        {"request_id": "bench-0", "input_toks": 20, "output_toks": 5, "arrival_time": 1000.5,
         "queued_ts": 7.0},
        {"request_id": "bench-1", "input_toks": 30, "output_toks": 6, "arrival_time": 1000.75,
         "queued_ts": 7.5},
    ]
    path = write(tmp_path, "r.jsonl", "".join(json.dumps(r) + "\n" for r in records))
    trace = load_trace(path)
    assert trace.format == "vllm" and trace.request_ids == ("bench-0", "bench-1")
    assert trace.arrival_s.tolist() == [0.0, 0.25]
    engine_clock = load_trace(path, columns={"arrival": "queued_ts"})
    assert engine_clock.arrival_s.tolist() == [0.0, 0.5]
    requests = build_requests(replay(str(path)), np.random.default_rng(0))
    assert [r.request_id for r in requests] == ["bench-0", "bench-1"]


def test_llmservingsim_workload_in_nanoseconds(tmp_path):
    path = write(tmp_path, "w.jsonl", '{"input_toks": 8, "output_toks": 2, "arrival_time_ns": 0}\n'
                 '{"input_toks": 9, "output_toks": 3, "arrival_time_ns": 1500000000}\n')
    trace = load_trace(path)
    assert trace.format == "llmservingsim" and trace.arrival_s.tolist() == [0.0, 1.5]


def test_burstgpt_drops_failed_requests_and_counts_them(tmp_path):
    path = write(tmp_path, "b.csv",
                 "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                 "5,ChatGPT,472,18,490,Conversation log\n"
                 "45,ChatGPT,1087,0,1087,Conversation log\n"
                 "118,GPT-4,417,276,693,API log\n")
    trace = load_trace(path)
    assert trace.format == "burstgpt" and trace.num_dropped == 1
    assert trace.prompt_tokens.tolist() == [472, 417]
    assert trace.arrival_s.tolist() == [0.0, 113.0]
    assert trace.lines.tolist() == [2, 4]


def test_any_csv_or_jsonl_with_a_column_mapping(tmp_path):
    csv_path = write(tmp_path, "mine.csv", "t_ms,in,out,user\n100,5,7,a\n350,6,8,b\n")
    trace = load_trace(csv_path, "csv", {"arrival": "t_ms", "prompt_tokens": "in",
                                         "output_tokens": "out"}, "ms")
    assert trace.arrival_s.tolist() == [0.0, 0.25]
    assert trace.output_tokens.tolist() == [7, 8]
    lengths_only = load_trace(csv_path, "csv", {"prompt_tokens": "in", "output_tokens": "out"})
    assert lengths_only.arrival_s is None
    jsonl_path = write(tmp_path, "mine.jsonl", '{"t": "2024-05-10T00:00:00+00:00", "p": 3, '
                       '"o": 4}\n\n{"t": "2024-05-10T00:00:02.5+00:00", "p": 5, "o": 6}\n')
    trace = load_trace(jsonl_path, "jsonl", {"arrival": "t", "prompt_tokens": "p",
                                             "output_tokens": "o"}, "datetime")
    assert trace.arrival_s.tolist() == [0.0, 2.5] and trace.lines.tolist() == [1, 3]


def test_length_tables_and_gzip(tmp_path):
    text = "num_prefill_tokens,num_decode_tokens,num_total_tokens,pd_ratio\n74,918,992,0.08\n"
    path = tmp_path / "sharegpt.csv.gz"
    with gzip.open(path, "wt") as f:
        f.write(text)
    trace = load_trace(path)
    assert trace.format == "lengths" and trace.arrival_s is None
    assert (trace.prompt_tokens.tolist(), trace.output_tokens.tolist()) == ([74], [918])
    with pytest.raises(ConfigError, match="has no arrival times"):
        build_requests(replay(str(path)), np.random.default_rng(0))


def test_azure_2024_timestamps_with_an_offset(tmp_path):
    path = write(tmp_path, "a24.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                 "2024-05-10 00:00:00.009930+00:00,2162,5\n"
                 "2024-05-10 00:00:00.509930+00:00,2399,3\n")
    assert load_trace(path).arrival_s.tolist() == pytest.approx([0.0, 0.5])


def test_datetime_arrivals_are_exact_to_the_nanosecond(tmp_path):
    # the difference is taken in int64 nanoseconds: through float64 nanoseconds since 1970
    # (1.7e18, 256 ns apart) the first gap would come out as 0.049408960 s
    path = write(tmp_path, "a23.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                 "2023-11-16 18:15:46.6444420,374,44\n"
                 "2023-11-16 18:15:46.6938510,396,109\n"
                 "2023-11-16 18:15:46.6938511,879,42\n")
    assert load_trace(path).arrival_s.tolist() == [0.0, 0.049409, 0.0494091]


def test_every_format_in_the_schema_has_a_reader():
    from typing import get_args

    from clustersim.workload.spec import TraceSource

    assert set(get_args(TraceSource.model_fields["format"].annotation)) == {"auto", *FORMATS}


REAL_FILES = [
    ("traces/vidur_splitwise_conv.csv", "vidur", 19366),
    ("traces/azure_conv_2023.csv", "azure", 19366),
    ("traces/mooncake_synthetic.jsonl", "mooncake", 3993),
    ("traces/sharegpt_lengths.csv", "lengths", 30731),
    ("traces/bwb_lengths.csv", "lengths", 33768),
    ("llmservingsim/RTX4090_Llama-3.1-8B/vllm_requests.jsonl", "vllm", 300),
    ("llmservingsim/sharegpt-llama-3.1-8b-300-sps10.slim.jsonl", "llmservingsim", 300),
]


@pytest.mark.parametrize(("relative", "format", "rows"), REAL_FILES)
def test_real_files_beside_the_repository_when_present(relative, format, rows):
    path = SHARED / relative
    if not path.is_file():
        pytest.skip(f"{relative} is not beside this checkout")
    trace = load_trace(path)
    assert (trace.format, len(trace)) == (format, rows)


# ---------------------------------------------------------- malformed traces
AZURE_HEAD = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
MALFORMED = [
    ("empty.csv", "", 1, "empty file"),
    ("header.csv", AZURE_HEAD, 1, "no requests in the file"),
    ("missing.csv", "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46.1,5\n", 1,
     "missing column 'GeneratedTokens' (columns: TIMESTAMP, ContextTokens)"),
    ("negative.csv", AZURE_HEAD + "2023-11-16 18:15:46.1,5,3\n2023-11-16 18:15:47.1,-4,3\n", 3,
     "ContextTokens is negative (-4)"),
    ("zero.csv", AZURE_HEAD + "2023-11-16 18:15:46.1,5,0\n", 2,
     "GeneratedTokens is 0; a request has at least 1 prompt and 1 output token"),
    ("word.csv", AZURE_HEAD + "2023-11-16 18:15:46.1,5,3\n2023-11-16 18:15:47.1,five,3\n", 3,
     "ContextTokens 'five' is not a whole number of tokens"),
    ("backwards.csv", AZURE_HEAD + "2023-11-16 18:15:46.1,5,3\n\n2023-11-16 18:15:45.1,5,3\n", 4,
     "TIMESTAMP '2023-11-16 18:15:45.1' is earlier than the previous row's "
     "'2023-11-16 18:15:46.1': rows must be in arrival order"),
    ("underscore.csv", AZURE_HEAD + "2023-11-16 18:15:46.1,5,3\n2023-11-16 18:15:47.1,1_000,3\n",
     3, "ContextTokens '1_000' is not a whole number of tokens"),
    ("unicode.csv", AZURE_HEAD + "2023-11-16 18:15:46.1,5,3\n2023-11-16 18:15:47.1,\u0665,3\n",
     3, "ContextTokens '\u0665' is not a whole number of tokens"),
    ("huge.csv", AZURE_HEAD + "2023-11-16 18:15:46.1,5,3\n2023-11-16 18:15:47.1,"
     + "9" * 30 + ",3\n", 3, "ContextTokens '" + "9" * 30 + "' is more than 100,000,000 tokens"),
    ("badtime.csv", AZURE_HEAD + "2023-11-16 18:15:46.1,5,3\nyesterday,5,3\n", 3,
     "TIMESTAMP 'yesterday' is not an ISO 8601 time"),
    ("short.csv", AZURE_HEAD + "2023-11-16 18:15:46.1,5,3\n2023-11-16 18:15:47.1,5\n", 3,
     "GeneratedTokens is missing"),
    ("null.jsonl", '{"request_id": "a", "input_toks": null, "output_toks": 1, "arrival_time": 0}'
     '\n', 1, "input_toks is missing"),
    ("ragged.csv", AZURE_HEAD + "2023-11-16 18:15:46.1,5,3\n2023-11-16 18:15:47.1,5,3,9\n", 3,
     "malformed CSV"),
    ("vidur.csv", "arrived_at,num_prefill_tokens,num_decode_tokens\n0,5,3\nsoon,5,3\n", 3,
     "arrived_at 'soon' is not a number (s)"),
    ("m.jsonl", '{"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [1, 2]}\n'
     '{"timestamp": 5, "input_length": 600, "output_length": 3\n', 2, "invalid JSON"),
    ("keys.jsonl", '{"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [1, 2]}'
     '\n{"timestamp": 5, "input_length": 600, "hash_ids": [1, 2]}\n', 2,
     "missing field 'output_length'"),
    ("hash.jsonl", '{"timestamp": 0, "input_length": 1100, "output_length": 3, "hash_ids": [1]}\n',
     1, "hash_ids has 1 ids for 1100 prompt tokens; expected 3 (512 tokens each)"),
    ("ms.jsonl", '{"timestamp": 3000, "input_length": 5, "output_length": 3, "hash_ids": [1]}\n'
     '{"timestamp": 2999, "input_length": 5, "output_length": 3, "hash_ids": [2]}\n', 2,
     "timestamp 2999 is earlier than the previous row's 3000"),
    ("dup.jsonl", '{"request_id": "a", "input_toks": 1, "output_toks": 1, "arrival_time": 0}\n'
     '{"request_id": "a", "input_toks": 1, "output_toks": 1, "arrival_time": 1}\n', 2,
     "duplicate request_id 'a' (also line 1)"),
    ("unknown.csv", "a,b\n1,2\n", 1, "cannot tell the trace format from ['a', 'b']"),
]


@pytest.mark.parametrize(("name", "text", "line", "message"), MALFORMED,
                         ids=[m[0] for m in MALFORMED])
def test_malformed_traces_are_file_line_message_and_exit_2(tmp_path, name, text, line, message):
    path = write(tmp_path, name, text)
    with pytest.raises(InputError) as error:
        load_trace(path)
    assert error.value.path == f"{path}:{line}"
    assert error.value.message.startswith(message), error.value.message
    code, output = run_cli("trace", "stats", str(path))
    assert code == 2
    assert output.startswith(f"{path}:{line}: {message}"), output
    assert "Traceback" not in output


def test_missing_files_and_bad_options_exit_2(tmp_path):
    code, output = run_cli("trace", "stats", str(tmp_path / "nope.csv"))
    assert code == 2 and output.startswith(f"{tmp_path / 'nope.csv'}: no such file, and not a "
                                           "shipped trace (azure-conv-2023")
    code, output = run_cli("trace", "stats", "azure-conv-2023", "--format", "parquet")
    assert code == 2 and output.startswith("--format: unknown format 'parquet'")
    code, output = run_cli("trace", "stats", "azure-conv-2023", "--columns", "when=x")
    assert code == 2 and output.startswith("--columns: expected KEY=COLUMN pairs")
    path = write(tmp_path, "c.csv", "a,b\n1,2\n")
    code, output = run_cli("trace", "stats", str(path), "--format", "csv")
    assert code == 2 and "format csv needs columns" in output
    code, output = run_cli("trace", "stats", str(path), "--format", "csv", "--columns",
                           "prompt_tokens=a,output_tokens=b")
    assert code == 0 and "arrivals: none" in output


def test_a_bad_trace_in_a_scenario_exits_2_with_its_line(tmp_path):
    from tests.helpers import scenario, write_scenario

    trace = write(tmp_path, "t.csv", AZURE_HEAD + "2023-11-16 18:15:46.1,5,3\n"
                  "2023-11-16 18:15:47.1,-1,3\n")
    path = write_scenario(tmp_path, scenario(workload={"kind": "replay", "trace": str(trace)}))
    code, output = run_cli("simulate", str(path), "--out", str(tmp_path / "out"))
    assert code == 2 and output.startswith(f"{trace}:3: ContextTokens is negative (-1)"), output


# -------------------------------------------------------------------- replay
def test_replay_window_rate_multiplier_and_request_limit():
    trace = load_trace("azure-conv-2023")
    times = trace.arrival_s
    in_window = np.flatnonzero((times >= 600) & (times < 720))
    requests = build_requests(replay("azure-conv-2023", window_start_s=600, window_end_s=720,
                                     rate_multiplier=4.0), np.random.default_rng(0))
    assert len(requests) == len(in_window) == 603
    assert [r.request_id for r in requests] == [str(i) for i in in_window]
    assert requests[0].arrival_s == pytest.approx((times[in_window[0]] - 600) / 4)
    assert requests[-1].arrival_s < 30.0
    assert requests[5].num_prompt_tokens == trace.prompt_tokens[in_window[5]]
    assert requests[5].max_tokens == trace.output_tokens[in_window[5]]
    limited = build_requests(replay("azure-conv-2023", max_num_requests=10),
                             np.random.default_rng(0))
    assert [r.request_id for r in limited] == [str(i) for i in range(10)]
    assert limited[0].arrival_s == 0.0
    with pytest.raises(ConfigError, match=r"no request of azure-conv-2023 arrives in \[4000"):
        build_requests(replay("azure-conv-2023", window_start_s=4000), np.random.default_rng(0))


def test_mooncake_blocks_expand_to_engine_blocks_and_share_prefixes():
    # 512-token id -> 32 keys of 16 tokens; only full engine blocks of the prompt get keys.
    a = expand_block_ids([7, 8], 1000, 512, 16)
    b = expand_block_ids([7, 9], 600, 512, 16)
    assert len(a) == 1000 // 16 and len(b) == 600 // 16
    assert a[:32] == b[:32] and a[32] != b[32]
    assert a[:32] == chain_block_hashes([hash((7, j)) for j in range(32)])
    assert len(expand_block_ids([7], 512, 512, 64)) == 8
    requests = build_requests(replay("mooncake-conversation", max_num_requests=3),
                              np.random.default_rng(0))
    # The first three requests share their first 512-token block (hash id 0).
    assert requests[0].block_hashes[:32] == requests[1].block_hashes[:32]
    assert requests[0].block_hashes[32] != requests[1].block_hashes[32]
    assert len(requests[0].block_hashes) == 6758 // 16
    big = build_requests(replay("mooncake-conversation", max_num_requests=1),
                         np.random.default_rng(0), block_size=128)
    assert len(big[0].block_hashes) == 6758 // 128


def test_spread_ties_spreads_each_tick_over_the_gap_to_the_next():
    times = np.array([0.0, 0.0, 0.0, 3.0, 3.0, 6.0])
    assert spread_ties(times).tolist() == [0.0, 1.0, 2.0, 3.0, 4.5, 6.0]
    requests = build_requests(replay("mooncake-conversation", spread_ties=True,
                                     window_end_s=30), np.random.default_rng(0))
    arrivals = [r.arrival_s for r in requests]
    assert len(set(arrivals)) == len(arrivals) and arrivals == sorted(arrivals)


def test_relative_trace_paths_resolve_against_the_scenario_folder(tmp_path):
    folder = tmp_path / "scenarios"
    folder.mkdir()
    write(folder, "mine.csv", "arrived_at,num_prefill_tokens,num_decode_tokens\n0,5,3\n1,6,4\n")
    workload = replay("mine.csv")
    with pytest.raises(InputError, match="no such file"):
        build_requests(workload, np.random.default_rng(0))
    assert len(build_requests(workload, np.random.default_rng(0), base_dir=folder)) == 2
    resolved = resolve_paths(workload, folder)
    assert Path(resolved.trace) == folder / "mine.csv"
    assert len(build_requests(resolved, np.random.default_rng(0))) == 2
    assert resolve_paths(replay("azure-conv-2023"), folder).trace == "azure-conv-2023"
    assert re.match(r"azure-conv-2023", resolve_paths(replay("azure-conv-2023"), folder).trace)


@pytest.mark.parametrize("kind", ["csv", "jsonl"])
def test_the_request_limit_is_checked_before_the_rows_are_read(tmp_path, monkeypatch, kind):
    # a 256 MB trace of 64M rows was split into lines whole, and read by pandas to 10M rows,
    # before the limit: a MemoryError under a 4 GB address limit
    from clustersim.workload import traces

    monkeypatch.setattr(traces, "MAX_NUM_REQUESTS", 5)
    header, row = (("num_prefill_tokens,num_decode_tokens\n", "5,3\n") if kind == "csv"
                   else ("", '{"input_toks": 5, "output_toks": 3}\n'))
    columns = {"prompt_tokens": "input_toks", "output_tokens": "output_toks"}
    how = ("lengths", None) if kind == "csv" else ("jsonl", columns)
    assert len(load_trace(write(tmp_path, f"t.{kind}", header + row * 5), *how)) == 5
    if kind == "csv":
        def refuse(*args, **kwargs):
            raise AssertionError("pandas read a file over the limit")

        import pandas

        monkeypatch.setattr(pandas, "read_csv", refuse)
    path = write(tmp_path, f"t.{kind}", header + row * 6 + "{not read\n")
    with pytest.raises(InputError) as error:
        load_trace(path, *how)
    line = 7 if kind == "csv" else 6  # the sixth request
    assert str(error.value).startswith(f"{path}:{line}: more than 5 requests: a run holds "
                                       "every request in memory"), error.value


# ------------------------------------------------------------ streamed reading
def _same_trace(a, b) -> None:
    assert (a.format, a.num_dropped, a.hash_ids, a.request_ids) == (
        b.format, b.num_dropped, b.hash_ids, b.request_ids)
    for field in ("prompt_tokens", "output_tokens", "lines", "arrival_s"):
        x, y = getattr(a, field), getattr(b, field)
        assert (x is None and y is None) or x.tolist() == y.tolist(), field


STREAMED = [  # good files with what a chunk boundary could split: blank lines, CRLF, a BOM,
    # a quoted value over two lines, BurstGPT's dropped rows, datetimes, request ids
    ("v.csv", "\n\narrived_at,num_prefill_tokens,num_decode_tokens\r\n0.0,374,44\r\n\r\n"
     "4.5,396,109\r\n4.5,10,1\r\n,,\n7,\"8\n\",9\n12,1,1"),
    ("bom.csv", "\ufeffnum_prefill_tokens,num_decode_tokens\n" + "5,3\n" * 7),
    ("b.csv", "Timestamp,Model,Request tokens,Response tokens\n" + "".join(
        f"{t},ChatGPT,{t % 3},{t % 4}\n" for t in range(40))),
    ("a.csv", AZURE_HEAD + "".join(f"2024-05-10 00:00:{s:02d}.5+00:00,{s + 1},2\n"
                                   for s in range(30))),
    ("r.jsonl", "\n".join(json.dumps({"request_id": f"q{i}", "input_toks": i + 1,
                                      "output_toks": 2, "arrival_time": i / 4})
                          for i in range(25)) + "\n\n"),
]


@pytest.mark.parametrize("chunk_bytes", [1, 7, 64])
def test_the_chunk_size_does_not_change_what_is_read(tmp_path, monkeypatch, chunk_bytes):
    # a trace is read a few MiB at a time; with chunks of a few bytes every row, line end,
    # quote and multi-byte character is split somewhere, and the answer stays the same
    from clustersim import inputs

    expected = {}
    for name, text in STREAMED:
        expected[name] = load_trace(write(tmp_path, name, text))
    old_mac = write(tmp_path, "cr.csv", "num_prefill_tokens,num_decode_tokens\r5,3\r6,4\r")
    expected["cr.csv"] = load_trace(old_mac, "lengths")  # lines that end in a lone CR
    assert expected["cr.csv"].lines.tolist() == [2, 3]
    for name, text, _, _ in MALFORMED:
        with pytest.raises(InputError) as error:
            load_trace(write(tmp_path, name, text))
        expected[name] = str(error.value)
    monkeypatch.setattr(inputs, "CHUNK_BYTES", chunk_bytes)
    for name, _ in STREAMED:
        _same_trace(load_trace(tmp_path / name), expected[name])
    _same_trace(load_trace(old_mac, "lengths"), expected["cr.csv"])
    assert expected["v.csv"].lines.tolist() == [4, 6, 7, 9, 11]
    assert expected["b.csv"].num_dropped == 20
    for name, *_ in MALFORMED:
        with pytest.raises(InputError) as error:
            load_trace(tmp_path / name)
        assert str(error.value) == expected[name]


def test_a_shipped_trace_read_in_small_chunks_is_the_same(monkeypatch):
    from clustersim import inputs

    whole = load_trace("mooncake-conversation")
    monkeypatch.setattr(inputs, "CHUNK_BYTES", 1 << 16)
    _same_trace(load_trace("mooncake-conversation"), whole)


@pytest.mark.parametrize("gz", [False, True])
def test_a_trace_past_the_request_limit_is_refused_while_it_is_read(tmp_path, monkeypatch, gz):
    # the limit is checked chunk by chunk: the file after the first request past it is never
    # read (here, a byte that is not UTF-8 three hundred lines further on)
    from clustersim import inputs
    from clustersim.workload import traces

    monkeypatch.setattr(traces, "MAX_NUM_REQUESTS", 50)
    monkeypatch.setattr(inputs, "CHUNK_BYTES", 100)
    head = "arrived_at,num_prefill_tokens,num_decode_tokens\n"
    rows = [f"{i},5,3\n" + ("\n" if i % 10 == 0 else "") for i in range(60)]  # blank lines
    data = (head + "".join(rows[:50])).encode()
    within = tmp_path / ("within.csv.gz" if gz else "within.csv")
    within.write_bytes(gzip.compress(data) if gz else data)
    assert len(load_trace(within)) == 50
    data = (head + "".join(rows) + "1,1,1\n" * 300 + "\xfe").encode("latin-1")
    past = tmp_path / ("past.csv.gz" if gz else "past.csv")
    past.write_bytes(gzip.compress(data) if gz else data)
    code, output = run_cli("trace", "stats", str(past))
    line = 1 + 50 + 5 + 1  # the header, 50 rows, 5 blank lines, the 51st request
    assert code == 2, output
    assert output == (f"{past}:{line}: more than 50 requests: a run holds every request in "
                      "memory; cut the trace (its first rows: head -n)\n")
    jsonl = tmp_path / "past.jsonl"
    jsonl.write_bytes(b"".join(b'{"input_toks": 5, "output_toks": 3}\n\n' for _ in range(60))
                      + b"\xfe\n")
    code, output = run_cli("trace", "stats", str(jsonl), "--format", "jsonl", "--columns",
                           "prompt_tokens=input_toks,output_tokens=output_toks")
    assert code == 2 and output.startswith(f"{jsonl}:101: more than 50 requests"), output


@pytest.mark.parametrize("chunk_bytes", [100, 1 << 20])
def test_a_line_longer_than_any_trace_line_is_refused(tmp_path, monkeypatch, chunk_bytes):
    # the reader holds a line whole: one without an end would be read into memory whole
    from clustersim import inputs
    from clustersim.workload import traces

    monkeypatch.setattr(traces, "MAX_LINE_BYTES", 1000)
    monkeypatch.setattr(inputs, "CHUNK_BYTES", chunk_bytes)
    path = write(tmp_path, "long.csv", AZURE_HEAD + "2023-11-16 18:15:46.1,5,3\n" + "9" * 5000)
    with pytest.raises(InputError) as error:
        load_trace(path)
    assert str(error.value) == (f"{path}:3: a line longer than 1,000 bytes: not a trace (one "
                                "request a line)")
    path = write(tmp_path, "first.csv", "9" * 5000)
    with pytest.raises(InputError) as error:
        load_trace(path)
    assert str(error.value).startswith(f"{path}:1: a line longer than")


def test_a_corrupt_gz_says_so_before_what_its_bytes_decompressed_to(tmp_path, monkeypatch):
    # a .gz's checksum is checked at its end: an error in its first rows (what damaged bytes
    # may decompress to) gives way to the gzip error, as when the file was read whole
    from clustersim import inputs

    monkeypatch.setattr(inputs, "CHUNK_BYTES", 64)
    data = gzip.compress((AZURE_HEAD + "2023-11-16 18:15:46.1,5,3\n2023-11-16 18:15:47.1,-4,3\n"
                          + "2023-11-16 18:15:48.1,5,3\n" * 100).encode(), mtime=0)
    path = tmp_path / "t.csv.gz"
    path.write_bytes(data)
    with pytest.raises(InputError, match="ContextTokens is negative"):
        load_trace(path)
    path.write_bytes(data[:-8] + bytes([data[-8] ^ 0xFF]) + data[-7:])  # the CRC-32
    with pytest.raises(InputError) as error:
        load_trace(path)
    assert str(error.value).startswith(f"{path}: corrupt gzip file: CRC check failed")


def test_prefix_reuse_counts_blocks_that_open_an_earlier_prompt_and_how_far_back():
    from clustersim.workload.stats import prefix_reuse

    #            blocks of 4 tokens        prompt  arrival
    ids = [(1, 2, 3),                    # 12      0 s
           (1, 2, 9),                    # 12      1 s: 1, 2 reused (1 request, 1 s back)
           (5,),                         #  4      2 s
           (1, 2, 9, 7),                 # 15     30 s: 1, 2, 9 (2 requests, 29 s back)
           (1, 2, 9, 7)]                 # 15     31 s: all, 7 being 3 tokens (1, 1 s)
    reuse = prefix_reuse(ids, np.array([12, 12, 4, 15, 15]),
                         np.array([0.0, 1.0, 2.0, 30.0, 31.0]), 4)
    total = 12 + 12 + 4 + 15 + 15
    assert reuse["reused_share"] == (8 + 12 + 15) / total
    assert reuse["within_requests"]["1"] == (8 + 15) / total
    assert reuse["within_requests"]["10"] == (8 + 12 + 15) / total
    assert reuse["within_s"]["1"] == (8 + 15) / total
    assert reuse["within_s"]["60"] == (8 + 12 + 15) / total
    # a block that matches out of place (9 after 5) is no prefix: not reused
    assert prefix_reuse([(5, 9), (1, 9)], np.array([8, 8]), np.array([0.0, 1.0]),
                        4)["reused_share"] == 0


def test_trace_stats_prints_mooncake_s_prefix_reuse():
    code, output = run_cli("trace", "stats", "mooncake-conversation")
    assert code == 0, output
    lines = output.splitlines()
    assert lines[6].startswith("prefix reuse: 37.4% of prompt tokens are in blocks that "
                               "open an earlier prompt too (512-token blocks)")
    assert lines[7].startswith("  last seen within n requests: 1: 4.3%")
    code, output = run_cli("trace", "stats", "azure-conv-2023", "--json")
    assert "prefix_reuse" not in json.loads(output)  # no prefix-block ids
