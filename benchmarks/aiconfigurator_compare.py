"""NVIDIA aiconfigurator and clustersim asked the same MoE capacity questions, side by side.

    python benchmarks/aiconfigurator_compare.py [--aiconfigurator CMD] [--question r1|qwen]...
        [--backend vllm|sglang]... [--out DIR] [--rerun-aiconfigurator] [--workers N]
        [--seeds N] [--no-means]

aiconfigurator is not a dependency of clustersim: install it into a virtual environment of its
own, outside this checkout, and name its command (or put it on PATH, or set AICONFIGURATOR):

    python -m venv /tmp/aic-venv && /tmp/aic-venv/bin/pip install aiconfigurator==0.12.0
    python benchmarks/aiconfigurator_compare.py --aiconfigurator /tmp/aic-venv/bin/aiconfigurator

(The PyPI package ``aiconfigurator`` 0.12.0 pulls in ``aiconfigurator-core`` 0.12.0, whose
kernel tables are the ones under shared/data/aiconfigurator.) Without it the script says so and
exits 0 without running anything.

The questions (``QUESTIONS``):

- ``r1``: DeepSeek-R1 (FP8 blocks) on 32 H200 SXM, 2,000-token prompts, 800-token answers,
  TTFT 2 s, TPOT 50 ms.
- ``qwen``: Qwen3-235B-A22B in FP8 on one 8 x H200 server, 1,500-token prompts, 300-token
  answers, TTFT 2 s, TPOT 60 ms: the question ``scenarios/qwen3_235b_h200_plan.yaml`` asks
  (its lognormal lengths' means, its SLO, its server), so the comparison checks a shipped plan.

How each tool is asked, and what its answer is:

- aiconfigurator: ``aiconfigurator cli default --model M --total-gpus N --system h200_sxm
  --backend B --isl I --osl O --ttft MS --tpot MS --top-n 1`` for each backend (vLLM and
  SGLang). It sweeps worker layouts (TP, attention DP, MoE TP/EP) and batch sizes, prices a
  steady batch of requests with exactly I prompt and O output tokens from its measured kernel
  tables (the engine's step repeated, no arrivals), keeps the operating points whose TTFT and
  TPOT are within the limits, and ranks them by output tokens/s per GPU; a disaggregated point
  is prefill and decode workers rate-matched into replicas. Its best aggregated and best
  disaggregated rows are read from ``best_config_topn.csv`` under its ``--save-dir``. Its
  req/s per GPU here is its output tokens/s per GPU of the whole budget
  (``tokens/s/gpu_cluster``, GPUs a replica leaves idle counted) over O.
- clustersim: ``python -m clustersim plan`` on a scenario this script writes: the same model,
  GPUs (H200 servers), lengths (fixed at I and O) and limits, Poisson arrivals, objective
  ``max_goodput_per_gpu`` with ``gpu_budget`` N, colocated and split layouts over TP, and DP
  with expert parallelism (the layouts of ``QUESTIONS``). Its answer is goodput: the highest
  Poisson rate at which 90 % of requests meet both limits at once (``criterion: joint``),
  measured by simulating vLLM's scheduler with queueing, per GPU of the budget.
  ``--seeds 1`` (the default here) measures one traffic draw per candidate; N+1 checks and
  the report are off.
- clustersim with ``criterion: mean`` (off with ``--no-means``): the same plan, a rate passing
  when the mean TTFT and the mean TPOT are within the limits. That is aiconfigurator's verdict
  on a simulated queue: its row beside the joint row shows how much of a gap is the
  attainment target (a 90th percentile against a mean), the rest being step times and layouts.

So the two answer different questions on purpose: aiconfigurator's figure is a static
operating point (a full batch, every request the same age apart, no arrival bursts), which a
real server reaches only on average; clustersim's is the rate a Poisson stream can be offered
while 90 % of requests meet the SLO, which sits below that point by the queueing the bursts
cause (TTFT waits; a batch that swells with arrivals slows every decode). Where clustersim is
the higher of the two, the cause is not the verdict: look at the step times (``python -m
clustersim step-time`` against ``aiconfigurator cli estimate --estimate-mode static_gen``) and
the layouts each tool searched.

Each row prints the layout, req/s per GPU, output tokens/s per GPU, tokens/s per user (one over
TPOT), TTFT and TPOT (aiconfigurator: its estimate at the operating point; clustersim: means at
goodput) and clustersim's req/s per GPU over that row's (the joint and the mean verdicts) for
the same layout kind (colocated against aggregated, split against disaggregated).

aiconfigurator's sweep is heavy (about 1 to 4 CPU minutes per model and backend, SGLang's
DeepSeek-R1 sweep the longest): each run's results are kept under ``--out`` with the command
that made them and read back while the command and aiconfigurator's version are the same
(``--rerun-aiconfigurator`` runs them again). It runs beside the clustersim plans.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
SYSTEM = "h200_sxm"
"""aiconfigurator's name for the H200 SXM (clustersim's h200 in hgx-h200 servers)."""
INSTALL = ("python -m venv /tmp/aic-venv && /tmp/aic-venv/bin/pip install aiconfigurator==0.12.0,"
           " then --aiconfigurator /tmp/aic-venv/bin/aiconfigurator")
BACKENDS = ("vllm", "sglang")


@dataclass(frozen=True)
class Shape:
    """One engine step both tools price: a prompt per rank (prefill, no cached prefix) or
    ``batch`` decodes per rank (clustersim at the mean context of the answer, prompt + half the
    output; aiconfigurator's TPOT averages the output's steps, context prompt to prompt +
    output)."""

    phase: str
    tp: int
    dp: int
    moe_tp: int
    moe_ep: int
    batch: int = 1

    def label(self) -> str:
        experts = f"EP{self.moe_ep}" if self.moe_ep > 1 else f"MoE TP{self.moe_tp}"
        what = ("one prompt" if self.phase == "prefill"
                else f"{self.batch} decodes")
        return f"TP{self.tp} x DP{self.dp} {experts}, {what} per rank"


@dataclass(frozen=True)
class Question:
    key: str
    title: str
    aic_model: str
    """aiconfigurator's --model (a Hugging Face id it ships the config of)."""
    model: str
    """clustersim's catalog model."""
    gpus: int
    isl: int
    osl: int
    ttft_s: float
    tpot_s: float
    engine: dict[str, Any]
    colocated: dict[str, Any]
    prefill: dict[str, Any]
    decode: dict[str, Any]
    shapes: tuple[Shape, ...] = ()


QUESTIONS = {
    "r1": Question(
        key="r1",
        title="DeepSeek-R1 on 32 x H200, 2,000 / 800 tokens, TTFT 2 s, TPOT 50 ms",
        aic_model="deepseek-ai/DeepSeek-R1", model="deepseek-r1", gpus=32, isl=2000, osl=800,
        ttft_s=2.0, tpot_s=0.05,
        engine={"max_model_len": 8192, "block_size": 64},
        # TP8, or DP8 with expert parallelism; TP1 alone does not fit and TP8 x DP8 is 64 GPUs
        colocated={"tensor_parallel_sizes": [1, 8], "data_parallel_sizes": [1, 8]},
        prefill={"tensor_parallel_sizes": [1, 8], "data_parallel_sizes": [1, 8, 16]},
        decode={"tensor_parallel_sizes": [1, 8], "data_parallel_sizes": [1, 8, 16]},
        shapes=(Shape("prefill", 1, 8, 1, 8), Shape("prefill", 8, 1, 8, 1),
                Shape("decode", 1, 8, 1, 8, 64), Shape("decode", 4, 2, 8, 1, 96),
                Shape("decode", 8, 1, 8, 1, 64)),
    ),
    "qwen": Question(
        key="qwen",
        title="Qwen3-235B-A22B FP8 on 8 x H200, 1,500 / 300 tokens, TTFT 2 s, TPOT 60 ms",
        aic_model="Qwen/Qwen3-235B-A22B-FP8", model="qwen3-235b-a22b", gpus=8, isl=1500,
        osl=300, ttft_s=2.0, tpot_s=0.06,
        engine={"quantization": "fp8", "max_model_len": 8192},
        # every TP x DP (EP) worker of 2 to 8 GPUs that holds the FP8 weights
        colocated={"tensor_parallel_sizes": [1, 2, 4, 8], "data_parallel_sizes": [1, 2, 4, 8]},
        prefill={"tensor_parallel_sizes": [1, 2, 4], "data_parallel_sizes": [1, 2, 4]},
        decode={"tensor_parallel_sizes": [1, 2, 4], "data_parallel_sizes": [1, 2, 4]},
        shapes=(Shape("prefill", 1, 2, 1, 2), Shape("prefill", 2, 2, 1, 4),
                Shape("decode", 1, 4, 1, 4, 96), Shape("decode", 2, 2, 1, 4, 64)),
    ),
}


@dataclass
class Answer:
    """One tool's best layout of one kind (colocated / split) for one question."""

    kind: str
    source: str
    layout: str
    req_per_gpu: float
    tokens_per_gpu: float
    tokens_per_user: float
    ttft_ms: float
    tpot_ms: float
    note: str = ""


@dataclass
class Outcome:
    question: Question
    answers: list[Answer] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


# --- aiconfigurator -----------------------------------------------------------------------


def find_aiconfigurator(given: str | None) -> list[str] | None:
    """The aiconfigurator command: --aiconfigurator, $AICONFIGURATOR, or one on PATH."""
    text = given or os.environ.get("AICONFIGURATOR")
    if text:
        command = shlex.split(text)
        return command if shutil.which(command[0]) else None
    found = shutil.which("aiconfigurator")
    return [found] if found else None


def aic_version(command: list[str]) -> str:
    done = subprocess.run([*command, "version"], capture_output=True, text=True, check=False)
    lines = [line.strip() for line in done.stdout.splitlines()
             if re.search(r"\d+\.\d+", line) and "deprecat" not in line.lower()]
    return lines[-1] if lines else "unknown"


def aic_arguments(question: Question, backend: str) -> list[str]:
    return ["cli", "default", "--model", question.aic_model, "--total-gpus", str(question.gpus),
            "--system", SYSTEM, "--backend", backend, "--isl", str(question.isl),
            "--osl", str(question.osl), "--ttft", f"{question.ttft_s * 1e3:g}",
            "--tpot", f"{question.tpot_s * 1e3:g}", "--top-n", "1", "--no-color"]


def best_rows(save_dir: Path) -> dict[str, dict[str, str]]:
    """Rank 1 of each serving mode's ``best_config_topn.csv`` under a ``--save-dir``."""
    rows = {}
    for mode in ("agg", "disagg"):
        for path in sorted(save_dir.rglob(f"{mode}/best_config_topn.csv")):
            with path.open(newline="") as handle:
                first = next(csv.DictReader(handle), None)
            if first is not None:
                rows[mode] = first
    return rows


def _worker(parallel: str, batch: str) -> str:
    return f"{parallel} bs {batch}"


def aic_answer(mode: str, row: dict[str, str], question: Question, backend: str) -> Answer:
    """An aiconfigurator row as an Answer: per GPU of the whole budget, per user as it says."""
    tokens_per_gpu = float(row["tokens/s/gpu_cluster"])
    gpus_per_replica = int(float(row["num_total_gpus"]))
    replicas = question.gpus // gpus_per_replica
    if mode == "agg":
        kind = "colocated"
        layout = f"{replicas} x {_worker(row['parallel'], row['bs'])}"
    else:
        kind = "split"
        layout = (f"{replicas} x ({row['(p)workers']}P {_worker(row['(p)parallel'], row['(p)bs'])}"
                  f" + {row['(d)workers']}D {_worker(row['(d)parallel'], row['(d)bs'])})")
    return Answer(kind=kind, source=f"aiconfigurator {backend}", layout=layout,
                  req_per_gpu=tokens_per_gpu / question.osl, tokens_per_gpu=tokens_per_gpu,
                  tokens_per_user=float(row["tokens/s/user"]), ttft_ms=float(row["ttft"]),
                  tpot_ms=float(row["tpot"]))


def run_aiconfigurator(command: list[str], version: str, question: Question, backend: str,
                       out: Path, rerun: bool) -> tuple[list[Answer], str | None]:
    """Run (or read back) one ``cli default`` sweep; its answers, or why there are none."""
    folder = out / "aiconfigurator" / f"{question.key}-{backend}"
    arguments = aic_arguments(question, backend)
    stamp = {"command": arguments, "version": version}
    stamp_file = folder / "command.json"
    cached = (not rerun and stamp_file.is_file()
              and json.loads(stamp_file.read_text()) == stamp and best_rows(folder / "results"))
    if not cached:
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        with (folder / "log.txt").open("w") as log:
            done = subprocess.run([*command, *arguments, "--save-dir", str(folder / "results")],
                                  stdout=log, stderr=subprocess.STDOUT, check=False)
        if done.returncode != 0:
            return [], (f"aiconfigurator {backend} exited {done.returncode}: see "
                        f"{folder / 'log.txt'}")
        stamp_file.write_text(json.dumps(stamp, indent=1))
    rows = best_rows(folder / "results")
    missing = [m for m in ("agg", "disagg") if m not in rows]
    answers = [aic_answer(mode, row, question, backend) for mode, row in rows.items()]
    problem = (f"aiconfigurator {backend} found no {' or '.join(missing)} point within the SLO"
               if missing else None)
    return answers, problem


def estimate_arguments(question: Question, shape: Shape, backend: str) -> list[str]:
    return ["cli", "estimate", "--model", question.aic_model, "--system", SYSTEM,
            "--backend", backend, "--isl", str(question.isl), "--osl", str(question.osl),
            "--estimate-mode", "static_ctx" if shape.phase == "prefill" else "static_gen",
            "--tp-size", str(shape.tp), "--attention-dp-size", str(shape.dp),
            "--moe-tp-size", str(shape.moe_tp), "--moe-ep-size", str(shape.moe_ep),
            "--batch-size", str(shape.batch), "--no-color"]


def estimate_ms(text: str, phase: str) -> float | None:
    """The step time an ``estimate`` printed: TTFT of a static prefill, TPOT of a static
    decode."""
    found = re.search(rf"^\s*{'TTFT' if phase == 'prefill' else 'TPOT'}:\s+([0-9.,]+) ms",
                      text, re.MULTILINE)
    return float(found.group(1).replace(",", "")) if found else None


def aic_step_ms(command: list[str], version: str, question: Question, shape: Shape,
                backend: str, out: Path, rerun: bool) -> float | None:
    """aiconfigurator's price of ``shape`` (kept in ``estimates.json`` by command and
    version)."""
    path = out / "aiconfigurator" / "estimates.json"
    arguments = estimate_arguments(question, shape, backend)
    key = json.dumps([version, arguments])
    kept = json.loads(path.read_text()) if path.is_file() else {}
    if rerun or key not in kept:
        done = subprocess.run([*command, *arguments], capture_output=True, text=True,
                              check=False)
        kept[key] = estimate_ms(done.stdout, shape.phase) if done.returncode == 0 else None
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(kept, indent=1))
    return kept[key]


# --- clustersim ---------------------------------------------------------------------------


def cs_step_ms(question: Question, shape: Shape) -> float:
    """clustersim's price of ``shape`` (``python -m clustersim step-time --json``)."""
    arguments = ["--model", question.model, "--gpu", "h200", "--tp", str(shape.tp),
                 "--dp", str(shape.dp)]
    arguments += ["--expert-parallel"] if shape.moe_ep > 1 else []
    arguments += (["--quantization", question.engine["quantization"]]
                  if "quantization" in question.engine else [])
    arguments += (["--prefill-tokens", str(question.isl)] if shape.phase == "prefill" else
                  ["--decode-batch", str(shape.batch),
                   "--context", str(question.isl + question.osl // 2)])
    done = subprocess.run([sys.executable, "-m", "clustersim", "step-time", *arguments, "--json"],
                          capture_output=True, text=True, env=_env(), cwd=ROOT, check=True)
    return json.loads(done.stdout)["time_s"] * 1e3


def _env() -> dict[str, str]:
    """This checkout's clustersim first on the path of a child interpreter."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}



def scenario(question: Question, criterion: str, seeds: int) -> dict[str, Any]:
    """The clustersim plan scenario that asks ``question``."""
    nodes = -(-question.gpus // 8)
    return {
        "name": f"aic-{question.key}-{criterion}",
        "description": question.title,
        "seed": 0,
        "model": question.model,
        "gpu": "h200",
        "tensor_parallel_size": 8,
        "topology": {"node": "hgx-h200", "count": nodes},
        "engine": question.engine,
        "workload": {
            "kind": "synthetic",
            "arrivals": {"kind": "poisson", "rate_per_s": 1.0},
            "lengths": {"kind": "independent",
                        "prompt_tokens": {"kind": "fixed", "value": question.isl},
                        "output_tokens": {"kind": "fixed", "value": question.osl}},
            "num_requests": 1000,
        },
        "slo": {"ttft_s": question.ttft_s, "tpot_s": question.tpot_s, "criterion": criterion},
        "plan": {
            "objective": "max_goodput_per_gpu",
            "gpu_budget": question.gpus,
            "layouts": ["colocated", "disaggregated"],
            "colocated": question.colocated,
            "prefill": question.prefill,
            "decode": question.decode,
            "search": {"seeds": seeds},
        },
    }


def plan_answers(plan: dict[str, Any], criterion: str) -> list[Answer]:
    """The plan's best colocated and best split candidates (``best``: its pick of each layout
    kind; a plan.json without it, its recommendation and the best of the other kind)."""
    by_id = {c["id"]: c for c in plan["candidates"]}
    answers = []
    picks = (plan["best"].get(kind) for kind in ("colocated", "disaggregated")) \
        if plan.get("best") else (plan.get(key) for key in ("recommended", "runner_up"))
    for pick in picks:
        candidate = by_id.get(pick or "")
        if candidate is None or candidate.get("goodput") is None:
            continue
        at = candidate["at_goodput"]
        goodput = candidate["goodput"]
        quality = goodput.get("quality", "measured")
        answers.append(Answer(
            kind="colocated" if candidate["layout"] == "colocated" else "split",
            source=f"clustersim {'P90 joint' if criterion == 'joint' else 'means'}",
            layout=candidate["label"], req_per_gpu=candidate["goodput_per_gpu"],
            tokens_per_gpu=at["output_tokens_per_s_per_gpu"],
            tokens_per_user=at["tokens_per_s_per_user"], ttft_ms=at["ttft_s"]["mean"] * 1e3,
            tpot_ms=at["tpot_s"]["mean"] * 1e3,
            note="" if quality == "measured" else quality))
    return answers


def run_plan(question: Question, criterion: str, out: Path, workers: int,
             seeds: int) -> tuple[list[Answer], str | None]:
    folder = out / "clustersim" / f"{question.key}-{criterion}"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario(question, criterion, seeds), sort_keys=False))
    with (folder / "log.txt").open("w") as log:
        done = subprocess.run(
            [sys.executable, "-m", "clustersim", "plan", str(path), "--out", str(folder),
             "--no-report", "--no-n-plus-one", "--workers", str(workers)],
            stdout=log, stderr=subprocess.STDOUT, env=_env(), cwd=ROOT, check=False)
    if done.returncode not in (0, 4) or not (folder / "plan.json").is_file():
        return [], f"clustersim plan exited {done.returncode}: see {folder / 'log.txt'}"
    return plan_answers(json.loads((folder / "plan.json").read_text()), criterion), None


# --- the table ----------------------------------------------------------------------------


def table(outcome: Outcome) -> list[str]:
    """One block per question: per layout kind, each tool's rows and clustersim over it."""
    ours = {(a.kind, a.source): a for a in outcome.answers if a.source.startswith("clustersim")}
    verdicts = [s for s in ("clustersim P90 joint", "clustersim means")
                if any(src == s for _, src in ours)]
    header = (f"{'kind':<10}{'tool':<22}{'layout':<64}{'req/s/GPU':>10}{'tok/s/GPU':>10}"
              f"{'tok/s/user':>11}{'TTFT ms':>9}{'TPOT ms':>9}"
              + "".join(f"{'x ' + s.split()[1]:>10}" for s in verdicts))
    lines = [outcome.question.title, header, "-" * len(header)]
    for kind in ("colocated", "split"):
        rows = sorted((a for a in outcome.answers if a.kind == kind),
                      key=lambda a: (a.source.startswith("clustersim"), a.source))
        for a in rows:
            ratios = ""
            for s in verdicts:
                mine = ours.get((kind, s))
                ratios += (f"{mine.req_per_gpu / a.req_per_gpu:>9.2f}x"
                           if mine and not a.source.startswith("clustersim") and a.req_per_gpu
                           else f"{'':>10}")
            layout = a.layout + (f" ({a.note})" if a.note else "")
            lines.append(f"{kind:<10}{a.source:<22}{layout:<64}{a.req_per_gpu:>10.3f}"
                         f"{a.tokens_per_gpu:>10.1f}{a.tokens_per_user:>11.2f}{a.ttft_ms:>9.1f}"
                         f"{a.tpot_ms:>9.1f}{ratios}")
    lines += [f"  ! {p}" for p in outcome.problems]
    return lines


def step_table(question: Question, steps: dict[tuple[Shape, str], float | None],
               backends: list[str]) -> list[str]:
    """Each shape's step time in ms: clustersim's, each backend's, and theirs over ours."""
    header = (f"{'step (' + question.model + ' on H200)':<52}{'phase':<9}{'clustersim':>11}"
              + "".join(f"{'aic ' + b:>12}{'x':>7}" for b in backends))
    lines = [header, "-" * len(header)]
    for shape in question.shapes:
        ours = steps.get((shape, "clustersim"))
        row = f"{shape.label():<52}{shape.phase:<9}{_ms(ours):>11}"
        for backend in backends:
            theirs = steps.get((shape, backend))
            ratio = f"{theirs / ours:.2f}" if theirs and ours else "-"
            row += f"{_ms(theirs):>12}{ratio:>7}"
        lines.append(row)
    return lines


def _ms(value: float | None) -> str:
    return f"{value:.1f}" if value is not None else "-"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--aiconfigurator", help="its command, e.g. /tmp/aic-venv/bin/"
                        "aiconfigurator (default: $AICONFIGURATOR, else one on PATH)")
    parser.add_argument("--question", action="append", choices=sorted(QUESTIONS))
    parser.add_argument("--backend", action="append", choices=BACKENDS)
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "aiconfigurator_compare")
    parser.add_argument("--rerun-aiconfigurator", action="store_true")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--no-means", action="store_true",
                        help="skip the clustersim plans with criterion: mean")
    args = parser.parse_args()

    command = find_aiconfigurator(args.aiconfigurator)
    if command is None:
        print("aiconfigurator_compare: skipped, aiconfigurator is not installed (none given, "
              f"none on PATH). Install it outside this checkout: {INSTALL}", file=sys.stderr)
        return 0
    version = aic_version(command)
    questions = [QUESTIONS[k] for k in (args.question or list(QUESTIONS))]
    backends = args.backend or list(BACKENDS)
    criteria = ["joint"] if args.no_means else ["joint", "mean"]
    outcomes = {q.key: Outcome(q) for q in questions}
    steps: dict[tuple[Shape, str], float | None] = {}
    lock = threading.Lock()

    def sweeps() -> None:
        for q in questions:
            for backend in backends:
                answers, problem = run_aiconfigurator(command, version, q, backend, args.out,
                                                      args.rerun_aiconfigurator)
                with lock:
                    outcomes[q.key].answers += answers
                    outcomes[q.key].problems += [problem] if problem else []
            for shape in q.shapes:
                for backend in backends:
                    ms = aic_step_ms(command, version, q, shape, backend, args.out,
                                     args.rerun_aiconfigurator)
                    with lock:
                        steps[shape, backend] = ms

    print(f"aiconfigurator: {' '.join(command)} ({version}); clustersim: {ROOT}",
          file=sys.stderr)
    thread = threading.Thread(target=sweeps)
    thread.start()
    for q in questions:
        for shape in q.shapes:
            steps[shape, "clustersim"] = cs_step_ms(q, shape)
        for criterion in criteria:
            answers, problem = run_plan(q, criterion, args.out, args.workers, args.seeds)
            with lock:
                outcomes[q.key].answers += answers
                outcomes[q.key].problems += [problem] if problem else []
    thread.join()
    for q in questions:
        print("\n".join(table(outcomes[q.key])) + "\n")
        print("\n".join(step_table(q, steps, backends)) + "\n")
    print("req/s/GPU: per GPU of the budget; aiconfigurator: its static operating point "
          "(output tok/s/GPU over the output length); clustersim: goodput, P90 joint (90 % of "
          "Poisson arrivals within both limits) or means (mean TTFT and mean TPOT within them). "
          "x P90 / x means: clustersim's req/s/GPU of the same layout kind over the row's. "
          "TTFT, TPOT: aiconfigurator's estimate; clustersim's means at goodput.\n"
          "step: ms of one engine step; clustersim: `clustersim step-time` (decodes at prompt + "
          "half the output of context); aic: `aiconfigurator cli estimate --estimate-mode "
          "static_ctx` TTFT (prefill) or `static_gen` TPOT (decode, averaged over the output); "
          "x: aic over clustersim.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
