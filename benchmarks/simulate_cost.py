"""What the whole ``clustersim simulate`` command costs, with and without ``--steps``: prints
a table.

    python benchmarks/simulate_cost.py                  # cases b and dgx64
    python benchmarks/simulate_cost.py --cases b --repeat 3
    python benchmarks/simulate_cost.py --cases c100k,c      # 100k and 1M requests, 64 instances

Each row is one ``python -m clustersim simulate SCENARIO --out DIR [--steps]`` in its own
subprocess, measured whole (interpreter start, imports, the run, the files, the printout)
from the rusage ``os.wait4`` returns for it: CPU s = user + system seconds, peak RSS = its
own maximum resident memory. SimPy's null-event rate (``sim_speed.null_event_rate``, a
process doing ``yield env.timeout(1)``) is measured in this process before and after each
subprocess and averaged; ratio = requests per CPU-second over that rate, so that figures from
machines of different speed compare. Output MB = the size of the files the command wrote.

Cases: (b) ``sim_speed.py``'s case b, 8 prefill + 8 decode H100 instances on dgx-h100-x2
serving the Azure conversation trace 2023 hour at 4x (no shipped scenario has 16 instances on
that trace); (dgx64) ``scenarios/llama70b_dgx_64.yaml``, the largest shipped colocated
scenario (8 instances of TP8 on 64 GPUs); (azure) ``scenarios/azure_conv_h100.yaml``, the
shipped Azure x4 scenario, on one H100; (c) ``sim_speed.py``'s case c, 64 H100 instances
serving the 3-class mix, 1M requests (issue 32: the whole command under 500 MB), and (c100k)
the same with 100k requests; both without ``--steps`` only (one row per step would be 19M rows).
``--format parquet`` passes that option on (pyarrow installed).
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import yaml

ROOT = Path(__file__).resolve().parents[1]


@functools.cache
def sim_speed() -> ModuleType:
    """``benchmarks/sim_speed.py`` as a module (its null-event rate and its cases)."""
    path = Path(__file__).resolve().parent / "sim_speed.py"
    spec = importlib.util.spec_from_file_location("sim_speed", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["sim_speed"] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class Case:
    description: str
    scenario: str
    """A shipped scenario's path under the repository root, or ``sim_speed:KEY`` for one of
    ``sim_speed.py``'s cases."""
    num_requests: int | None = None
    """A ``sim_speed`` case with this many requests instead of its own number."""
    with_steps: bool = True
    """Also measured with ``--steps``."""


CASES: dict[str, Case] = {
    "b": Case("8P+8D H100 dgx-h100-x2, Azure conv 2023 x4", "sim_speed:b"),
    "dgx64": Case("8 x H100 TP8 llama-3.1-70b (llama70b_dgx_64)",
                  "scenarios/llama70b_dgx_64.yaml"),
    "azure": Case("1 H100 llama-3.1-8b, Azure conv x4 (azure_conv_h100)",
                  "scenarios/azure_conv_h100.yaml"),
    "c": Case("64 H100 qwen2.5-7b, 3-class mix, 1M req", "sim_speed:c", with_steps=False),
    "c100k": Case("64 H100 qwen2.5-7b, 3-class mix, 100k req", "sim_speed:c",
                  num_requests=100_000, with_steps=False),
}


def scenario_file(case: Case, folder: Path) -> Path:
    """The case's scenario as a file (a ``sim_speed`` case written to ``folder``)."""
    if not case.scenario.startswith("sim_speed:"):
        return ROOT / case.scenario
    data = sim_speed().CASES[case.scenario.split(":", 1)[1]].scenario()
    if case.num_requests is not None:
        data["workload"]["num_requests"] = case.num_requests
        data["name"] = f"{data['name']}-{case.num_requests}"
    path = folder / f"{data['name']}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def simulate_once(scenario: Path, out: Path, steps: bool, output_format: str = "csv") -> dict:
    """One ``clustersim simulate`` in a subprocess: its CPU seconds, peak RSS and files."""
    argv = [sys.executable, "-m", "clustersim", "simulate", str(scenario), "--out", str(out),
            *(["--steps"] if steps else []),
            *(["--format", output_format] if output_format != "csv" else [])]
    null_rate = sim_speed().null_event_rate
    before = null_rate()
    child = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    assert child.stderr is not None
    errors = child.stderr.read().decode()
    child.stderr.close()
    if child.returncode:
        raise SystemExit(f"{' '.join(argv)} exited {child.returncode}:\n{errors}")
    after = null_rate()
    summary = json.loads((out / "summary.json").read_text())
    files = sorted(out.iterdir())
    return {
        "requests": summary["num_requests"],
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "rss_mb": usage.ru_maxrss / 1024,
        "null_rate": (before + after) / 2,
        "output_mb": sum(f.stat().st_size for f in files) / 1e6,
        "files": [f.name for f in files],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="b,dgx64", help="comma-separated case keys "
                        f"({', '.join(CASES)})")
    parser.add_argument("--repeat", type=int, default=1, help="runs per row; the least CPU "
                        "shown, the largest peak RSS")
    parser.add_argument("--format", default="csv", choices=("csv", "parquet"),
                        help="simulate's --format (parquet: pyarrow installed)")
    args = parser.parse_args()
    from clustersim import native

    header = (f"{'case':<60}{'--steps':>8}{'requests':>10}{'CPU s':>8}{'req/CPU-s':>11}"
              f"{'null ev/s':>11}{'ratio':>8}{'RSS MB':>8}{'out MB':>8}")
    print(header)
    print("-" * len(header))
    with tempfile.TemporaryDirectory(prefix="simulate-cost-") as tmp:
        folder = Path(tmp)
        for key in args.cases.split(","):
            case = CASES[key]
            scenario = scenario_file(case, folder)
            for steps in (False, True) if case.with_steps else (False,):
                runs = [simulate_once(scenario, folder / f"{key}-{steps}-{i}", steps,
                                      args.format)
                        for i in range(args.repeat)]
                r = min(runs, key=lambda run: run["cpu_s"])
                rate = r["requests"] / r["cpu_s"]
                print(f"{f'({key}) {case.description}':<60}{'yes' if steps else 'no':>8}"
                      f"{r['requests']:>10,}{r['cpu_s']:>8.2f}{rate:>11,.0f}"
                      f"{r['null_rate']:>11,.0f}{rate / r['null_rate']:>8.4f}"
                      f"{max(run['rss_mb'] for run in runs):>8.0f}{r['output_mb']:>8.1f}",
                      flush=True)
    print("\nthe whole `clustersim simulate` command in a subprocess; CPU s = its user + system "
          "time; ratio = req/CPU-s over SimPy's null-event rate (measured here around each "
          "run, averaged); RSS = its peak resident memory; out MB = the files it wrote.")
    print(f"core: {native.status()}")


if __name__ == "__main__":
    main()
