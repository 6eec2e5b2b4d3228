"""``python -m tests.fuzz --cases 10000 [--seed 0] [--jobs 2] [--keep DIR]``: generate that many
cases, run each under 30 s of CPU time and 2 GB, print the count per outcome (and every
failure)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from tests.fuzz import generate
from tests.fuzz.runner import Campaign


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__)
    parser.add_argument("--cases", type=int, default=1000, help="How many inputs to generate.")
    parser.add_argument("--seed", type=int, default=0, help="Hypothesis seed of the draw.")
    parser.add_argument("--jobs", type=int, default=2, help="Cases run at once.")
    parser.add_argument("--keep", type=Path, default=None,
                        help="Copy each failing case's folder here.")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    cases = generate(args.cases, args.seed)
    generated_s = time.perf_counter() - started
    print(f"generated {len(cases):,} cases in {generated_s:.1f} s (seed {args.seed})",
          flush=True)

    def progress(done: int, total: int) -> None:
        if done % 500 == 0 or done == total:
            print(f"  {done:,} / {total:,} run, {time.perf_counter() - started:,.0f} s",
                  flush=True)

    with Campaign(jobs=args.jobs, keep=args.keep) as campaign:
        report = campaign.run(cases, progress)
    print()
    print(report.table())
    print()
    print(f"{report.num_cases:,} cases in {time.perf_counter() - started:,.0f} s on "
          f"{args.jobs} jobs; slowest run {report.slowest_s:.1f} s of CPU, largest "
          f"{report.peak_bytes / 2**20:,.0f} MB resident")
    for label, result in (("slowest", report.slowest), ("largest", report.largest)):
        if result is not None:
            print(f"{label}: [{result.case.source}] {result.outcome}: clustersim "
                  f"{' '.join(result.case.argv)[:300]}")
    for failure in report.failures:
        print(f"\n{failure.outcome}: [{failure.case.source}] clustersim "
              f"{' '.join(failure.case.argv)}\n  {failure.detail[:2000]}")
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
