"""Peak memory and time of reading a large trace file: prints a table.

    python benchmarks/trace_memory.py                        # 5M rows of each kind
    python benchmarks/trace_memory.py --rows 1000000 --kinds lengths
    python benchmarks/trace_memory.py --rows 11000000 --kinds lengths   # over the limit
    python benchmarks/trace_memory.py --rows 64000000 --kinds tiny      # issue 31's 256 MB
    python benchmarks/trace_memory.py --traces-module /tmp/old_traces.py  # another reader

Each kind of synthetic trace is written to a temporary folder (by a subprocess) and read by
``clustersim.workload.traces.load_trace`` in a fresh subprocess, so that its peak resident
memory (``ru_maxrss``) is the reading's own (Linux carries a process's peak over ``exec``, so
the script that starts it holds no numpy arrays). ``lengths`` is a two-number CSV
(``num_prefill_tokens,num_decode_tokens``), ``vidur`` the same with an arrival column,
``jsonl`` one vLLM-style JSON object a line (with a request id), and ``tiny`` (run only when
asked) the two-number CSV with every row ``5,3``: 4 bytes a row, as many rows as a file of
its size can hold. Columns: rows written, file MB (10^6 bytes), parse s (the ``load_trace``
call), RSS before MiB (the subprocess once numpy, pandas and clustersim are imported), peak RSS
MiB, and
the result (requests read, or the error's first words). ``--traces-module FILE`` reads with a
copy of ``traces.py`` loaded from ``FILE`` instead (``git show
REV:clustersim/workload/traces.py > FILE`` to measure an earlier reader).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KINDS = ("lengths", "vidur", "jsonl")
ALL_KINDS = (*KINDS, "tiny")
BLOCK = 1_000_000  # rows written at a time

CHILD = r"""
import importlib.util, json, resource, sys, time
path, module_file = sys.argv[1], sys.argv[2]
if module_file:
    spec = importlib.util.spec_from_file_location("bench_traces", module_file)
    traces = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(traces)
else:
    from clustersim.workload import traces
from clustersim.errors import InputError

scale = 1 if sys.platform.startswith("linux") else 1024  # ru_maxrss: KiB on Linux, bytes else
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / scale / 1024
start = time.perf_counter()
try:
    result = f"{len(traces.load_trace(path)):,} requests"
except InputError as error:
    result = "refused: " + " ".join(str(error.message).split()[:6])
seconds = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / scale / 1024
print(json.dumps({"seconds": seconds, "before_mb": before, "peak_mb": peak, "result": result}))
"""


def write_trace(folder: Path, kind: str, rows: int, seed: int = 0) -> Path:
    """``rows`` requests of ``kind`` written in blocks (the writer holds one block)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    path = folder / f"trace-{kind}.{'jsonl' if kind == 'jsonl' else 'csv'}"
    header = {"lengths": "num_prefill_tokens,num_decode_tokens\n",
              "tiny": "num_prefill_tokens,num_decode_tokens\n",
              "vidur": "arrived_at,num_prefill_tokens,num_decode_tokens\n", "jsonl": ""}[kind]
    clock = 0.0
    with path.open("w") as f:
        f.write(header)
        for start in range(0, rows, BLOCK):
            n = min(BLOCK, rows - start)
            if kind == "tiny":
                f.write("5,3\n" * n)
                continue
            prompts = rng.integers(1, 8192, n)
            outputs = rng.integers(1, 1024, n)
            if kind == "lengths":
                f.writelines(f"{p},{o}\n" for p, o in zip(prompts.tolist(), outputs.tolist(),
                                                           strict=True))
                continue
            times = clock + np.cumsum(rng.exponential(0.01, n))
            clock = float(times[-1])
            if kind == "vidur":
                f.writelines(f"{t:.6f},{p},{o}\n" for t, p, o in zip(
                    times.tolist(), prompts.tolist(), outputs.tolist(), strict=True))
            else:
                f.writelines(
                    f'{{"request_id": "r{start + i}", "input_toks": {p}, "output_toks": {o}, '
                    f'"arrival_time": {t:.6f}}}\n'
                    for i, (t, p, o) in enumerate(zip(times.tolist(), prompts.tolist(),
                                                      outputs.tolist(), strict=True)))
    return path


def measure(path: Path, module_file: str) -> dict:
    completed = subprocess.run([sys.executable, "-c", CHILD, str(path), module_file],
                               capture_output=True, text=True, cwd=ROOT, check=False)
    lines = completed.stdout.strip().splitlines()
    if completed.returncode != 0 or not lines:
        tail = (completed.stderr.strip().splitlines() or ["?"])[-1]
        return {"seconds": float("nan"), "before_mb": float("nan"), "peak_mb": float("nan"),
                "result": f"exit {completed.returncode}: {tail[:60]}"}
    return json.loads(lines[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=5_000_000, help="rows a trace (5,000,000)")
    parser.add_argument("--kinds", default=",".join(KINDS),
                        help=f"comma-separated, of {', '.join(ALL_KINDS)} (default: "
                        f"{','.join(KINDS)})")
    parser.add_argument("--traces-module", default="",
                        help="read with this copy of traces.py instead of clustersim's")
    parser.add_argument("--write", nargs=2, metavar=("FOLDER", "KIND"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.write:  # the writer's subprocess
        print(write_trace(Path(args.write[0]), args.write[1], args.rows))
        return
    kinds = [k for k in args.kinds.split(",") if k]
    unknown = sorted(set(kinds) - set(ALL_KINDS))
    if unknown:
        parser.error(f"unknown kind {unknown[0]!r}; choose from {', '.join(ALL_KINDS)}")
    reader = args.traces_module or "clustersim.workload.traces"
    print(f"reader: {reader}; python {sys.version.split()[0]}")
    print()
    print("| kind | rows | file MB | parse s | RSS before MiB | peak RSS MiB | result |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="trace-memory-") as folder:
        for kind in kinds:
            path = Path(subprocess.run(
                [sys.executable, __file__, "--rows", str(args.rows), "--write", folder, kind],
                capture_output=True, text=True, check=True).stdout.strip())
            size_mb = path.stat().st_size / 1e6
            row = measure(path, args.traces_module)
            path.unlink()
            print(f"| {kind} | {args.rows:,} | {size_mb:,.1f} | {row['seconds']:.1f} | "
                  f"{row['before_mb']:,.0f} | {row['peak_mb']:,.0f} | {row['result']} |",
                  flush=True)


if __name__ == "__main__":
    main()
