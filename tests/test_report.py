"""The SLO report: it renders what the results hold (its numbers read back equal plan.json's
and summary.json's), the same inputs give the same bytes, every figure is labelled, and the
HTML file opens in a real browser with every image decoded and no console error."""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from clustersim.cli import app
from clustersim.metrics.goodput import wilson_interval
from clustersim.plan.executors import SerialExecutor
from clustersim.plan.planner import Planner
from clustersim.scenario import parse_scenario
from tests.helpers import run_cli

ROOT = Path(__file__).resolve().parents[1]
SCREENSHOTS = ROOT / "reports" / "screenshots"
FAST = {"seeds": 2, "tolerance": 0.05, "simulate_top": 1, "min_requests": 200,
        "min_duration_s": 10}
CHROMIUM = ("/usr/bin/chromium", "/usr/bin/chromedriver")
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--window-size=1400,1000")


def plan_scenario() -> dict:
    """Two H100s: colocated TP1 or TP2, or 1P + 1D; the TP2 one is left to the screen."""
    return {
        "name": "report-test", "seed": 3, "model": "llama-3.1-8b", "gpu": "h100-sxm",
        "engine": {"max_model_len": 8192},
        "workload": {"kind": "poisson", "rate_per_s": 10, "num_requests": 200,
                     "prompt_tokens": {"kind": "uniform", "low": 3000, "high": 6000},
                     "output_tokens": {"kind": "uniform", "low": 100, "high": 300}},
        "slo": {"ttft_s": 3.0, "tpot_s": 0.03},
        "plan": {"gpu_budget": 2, "layouts": ["colocated", "disaggregated"],
                 "colocated": {"tensor_parallel_sizes": [1, 2]}, "search": FAST},
    }


@pytest.fixture(scope="module")
def planned(tmp_path_factory) -> dict:
    """``clustersim plan --report`` on the small plan: its plan.json and its report."""
    tmp = tmp_path_factory.mktemp("plan")
    path = tmp / "plan.yaml"
    path.write_text(yaml.safe_dump(plan_scenario()))
    code, output = run_cli("plan", str(path), "--out", str(tmp / "out"), "--executor",
                           "serial", "--report", str(tmp / "report"))
    assert code == 0, output
    return {"output": output, "plan": json.loads((tmp / "out" / "plan.json").read_text()),
            "report": tmp / "report", "scenario": path}


# ------------------------------------------------------------ reading it back
def markdown_tables(text: str) -> list[list[list[str]]]:
    """Every pipe table of a Markdown text: rows of cells (header first, the rule dropped),
    escapes undone."""
    tables, current = [], []
    for line in text.splitlines():
        if line.startswith("|"):
            cells = [c.strip().replace("\\|", "|").replace("\\<", "<")
                     for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
            if not all(re.fullmatch(r":?-+:?", c) for c in cells):
                current.append(cells)
        elif current:
            tables.append(current)
            current = []
    if current:
        tables.append(current)
    return tables


class _Tables(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def html_tables(text: str) -> list[list[list[str]]]:
    parser = _Tables()
    parser.feed(text)
    return parser.tables


def pre_blocks(markdown: str) -> list[str]:
    return re.findall(r"```text\n(.*?)\n```", markdown, flags=re.DOTALL)


def table_with(tables: list[list[list[str]]], first_header: str, column: str) -> list[dict]:
    table = next(t for t in tables if t[0][0] == first_header and column in t[0])
    return [dict(zip(table[0], row, strict=True)) for row in table[1:]]


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.1f}"


def pct(fraction: float) -> str:
    return f"{fraction * 100:.1f}%"


def bench_values(block: str) -> dict[str, str]:
    return {m[1]: m[2] for m in re.finditer(r"^([^:\n]+):\s+(\S+)$", block, re.M)}


def assert_benchmark_block(block: str, summary: dict) -> None:
    """A "Serving Benchmark Result" block says what summary.json says, at two decimals."""
    assert block.splitlines()[0] == "============ Serving Benchmark Result ============"
    values = bench_values(block)
    assert values["Successful requests"] == str(summary["num_finished"])
    assert values["Failed requests"] == str(summary["num_rejected"])
    assert values["Benchmark duration (s)"] == f"{summary['makespan_s']:.2f}"
    assert values["Request throughput (req/s)"] == f"{summary['throughput']['requests_per_s']:.2f}"
    assert (values["Output token throughput (tok/s)"]
            == f"{summary['throughput']['output_tokens_per_s']:.2f}")
    for key, name in (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("itl_s", "ITL"),
                      ("e2e_s", "E2EL")):
        d = summary[key]
        assert values[f"Mean {name} (ms)"] == f"{d['mean'] * 1e3:.2f}"
        assert values[f"Median {name} (ms)"] == f"{d['p50'] * 1e3:.2f}"
        for p in (50, 90, 99):
            assert values[f"P{p} {name} (ms)"] == f"{d[f'p{p}'] * 1e3:.2f}"


# --------------------------------------------------------------------- plan
def test_plan_report_writes_markdown_figures_and_one_html_file(planned):
    folder = planned["report"]
    assert f"wrote report {folder}/report.md" in planned["output"]
    markdown = (folder / "report.md").read_text()
    html = (folder / "report.html").read_text()
    linked = re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)", markdown)
    assert linked and all((folder / name).is_file() for name in linked)
    assert sorted(p.name for p in folder.glob("*.png")) == sorted(linked)
    assert html.count('<img src="data:image/png;base64,') == len(linked)
    sources = re.findall(r'src="([^"]*)"', html)  # nothing outside the file
    assert all(src.startswith("data:image/png;base64,") for src in sources)
    assert "<link" not in html and "url(" not in html and "<script" not in html
    for heading in ("Answer", "Recommendation", "SLO verdict at goodput", "Candidates", "Evidence",
                    "Serving Benchmark Result per configuration", "Assumptions",
                    "Metric definitions"):
        assert f"\n## {heading}\n" in markdown and f"<h2>{heading}</h2>" in html
    names = " ".join(linked)
    for figure in ("n-plus-one", "latency-cdf", "attainment-vs-rate", "goodput-vs-pd", "pareto",
                   "timeline-recommendation", "kv-queue-recommendation", "kv-links"):
        assert figure in names
    captions = re.findall(r"^\*Figure (\d+)\. (.+)\*$", markdown, re.M)
    assert [int(n) for n, _ in captions] == list(range(1, len(linked) + 1))
    assert all("What to see: " in text for _, text in captions)


def test_plan_report_numbers_are_plan_json_numbers(planned):
    plan = planned["plan"]
    markdown = (planned["report"] / "report.md").read_text()
    tables = markdown_tables(markdown)
    rows = table_with(tables, "#", "goodput req/s [95% CI]")
    simulated = [c for c in plan["candidates"] if c["goodput"] is not None]
    assert len(rows) == len(simulated) >= 2
    for i, (row, c) in enumerate(zip(rows, simulated, strict=True)):
        g, s = c["goodput"], c["at_goodput"]
        assert row["#"] == str(i + 1) and row["candidate"] == c["label"]
        assert row["layout"] == c["layout"]
        assert row["GPUs"] == " + ".join(f"{n} x {gpu}" for gpu, n in c["gpus"].items())
        assert row["P:D"] == (c["pd_ratio"] or "-")
        low, high = g["ci95_per_s"]
        assert row["goodput req/s [95% CI]"] == (
            f"{g['mean_per_s']:,.2f} [{low:,.2f}-{high:,.2f}]")
        assert row["goodput per GPU"] == f"{c['goodput_per_gpu']:,.3f}"
        for key, name in (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("itl_s", "ITL")):
            d = s[key]
            assert row[f"{name} p50 / p90 / p99 (ms)"] == (
                f"{ms(d['p50'])} / {ms(d['p90'])} / {ms(d['p99'])}")
        assert row["attainment"] == pct(s["slo"]["attainment"])
        assert row["$/h"] == f"${c['cost_per_hour']:,.2f}"
        assert row["$/1M output tokens"] == f"${c['cost_per_million_output_tokens']:,.3f}"
        assert row["status"].split(",")[0] == c["status"]
    assert rows[0]["status"] == "simulated, recommended"
    assert simulated[0]["id"] == plan["recommended"]

    others = table_with(tables, "#", "reason")
    rest = [c for c in plan["candidates"] if c["goodput"] is None]
    assert [(r["candidate"], r["status"], r["reason"], r["screen estimate req/s"])
            for r in others] == [(c["label"], c["status"], c["reason"],
                                  f"{c['screen_per_s']:,.2f}") for c in rest]

    # the HTML says the same, cell for cell
    html = (planned["report"] / "report.html").read_text()
    assert [t for t in html_tables(html)] == [
        [[cell.replace("\\", "") for cell in row] for row in t] for t in tables]


def unescaped(markdown: str) -> str:
    return re.sub(r"\\(.)", r"\1", markdown)


def goodput_words(c: dict) -> str:
    """goodput_text's wording of a candidate of plan.json (several draws, measured)."""
    g = c["goodput"]
    low, high = g["ci95_per_s"]
    return (f"{g['mean_per_s']:,.2f} req/s (95% CI {low:,.2f}-{high:,.2f}), "
            f"{c['goodput_per_gpu']:,.3f} req/s per GPU")


def test_the_printout_plan_json_and_report_tell_one_story(planned):
    """The short answer, the best of each kind, their goodput and goodput per GPU, the split
    rule's pair and verdict, and its handoff p95 with its budget are the same words in the
    printout, plan.json, the report's text and its figures."""
    plan, output = planned["plan"], planned["output"]
    markdown = unescaped((planned["report"] / "report.md").read_text())
    captions = re.findall(r"^\*Figure \d+\. (.+)\*$", markdown, re.M)
    by_id = {c["id"]: c for c in plan["candidates"]}
    number = {c["id"]: i + 1 for i, c in enumerate(plan["candidates"])}
    rec, other = by_id[plan["recommended"]], by_id[plan["runner_up"]]
    names = {"colocated": "best colocated", "disaggregated": "best split"}

    # the short answer opens the printout and the report, as plan.json holds it
    short = plan["short_answer"]
    assert 3 <= len(short) <= 5
    printed = output.split("\nanswer:\n", 1)[1].split("\n\n", 1)[0]
    assert printed.splitlines() == [f"  {line}" for line in short]
    first = markdown.split("\n## ")[1]
    assert first == "Answer\n\n" + "\n\n".join(short) + "\n"
    assert short[0].startswith(f"Deploy {rec['label']} on ")
    assert short[0].endswith(f"chosen as {plan['chosen_by']}.")
    assert "at its operating rate" in short[1] and goodput_words(rec) in short[1]

    # the best of each kind: chosen once, named the same everywhere
    assert plan["best"] == {rec["layout"]: rec["id"], other["layout"]: other["id"]}
    name = names[other["layout"]]
    assert short[-1].startswith(f"The {name} is {other['label']}: {goodput_words(other)}")
    assert f"\n{name}: {other['label']} on " in output
    assert f"The {name} is {other['label']}: {goodput_words(other)}." in plan["answer"]
    assert f"|  | recommendation | {name} |" in markdown
    table = table_with(markdown_tables(markdown), "#", "goodput req/s [95% CI]")
    assert table[number[other["id"]] - 1]["status"] == f"simulated, {name}"
    assert re.search(rf"^ +{number[other['id']]} .*simulated, {name}$", output, re.M)
    for c in (rec, other):
        assert f"  goodput {goodput_words(c)}\n" in output
        assert goodput_words(c) in plan["answer"] and goodput_words(c) in markdown

    # the split rule: the pair it weighs, its verdict, and the one handoff statistic
    v = plan["split_verdict"]
    colocated, split = by_id[v["colocated"]], by_id[v["split"]]
    assert (v["colocated"], v["split"]) == (plan["best"]["colocated"],
                                            plan["best"]["disaggregated"])
    assert v["handoff_p95_s"] == split["handoff_p95_s"] == split["at_operating"]["handoff_s"][
        "p95"]
    assert v["handoff_rate_per_s"] == split["operating_rate_per_s"]
    assert split["at_operating"]["seed"] == split["at_goodput"]["seed"]
    within = v["handoff_p95_s"] <= v["handoff_budget_s"]
    assert v["handoff_within_budget"] == within
    handoff = (f"KV handoff p95 {v['handoff_p95_s'] * 1e3:,.1f} ms at its operating rate, "
               f"{v['handoff_rate_per_s']:,.2f} req/s, {'within' if within else 'over'} its "
               f"{v['handoff_budget_s'] * 1e3:,.1f} ms budget")
    assert v["reasons"][-1] == handoff
    assert (handoff in v["against"]) == (not within)
    for text in (output, plan["answer"], markdown):
        assert handoff in text
    verdict = "keep the split" if v["keep_split"] else "stay colocated"
    rule = (f"The keep-or-reject rule for a split, between the best colocated "
            f"({colocated['label']}) and the best split ({split['label']}): {verdict}.")
    assert f"split rule: {rule}" in output and rule in plan["answer"] and rule in markdown
    assert f"the split rule says {verdict} (" in short[-1]
    assert all(reason in output and reason in markdown for reason in v["reasons"])

    # the figures: the KV links of the split's run at its operating rate state the same p95,
    # and count its handoffs over the budget as that p95 allows
    links = [c for c in captions if "KV handoffs" in c]
    assert len(links) == 1 and links[0].startswith(
        f"#{number[split['id']]} {'recommendation' if split is rec else name} at its operating "
        f"rate, {split['operating_rate_per_s']:,.2f} req/s")
    assert links[0].endswith(f"the {handoff}.")
    over, total = (int(n.replace(",", "")) for n in re.search(
        r"([\d,]+) of ([\d,]+) took longer than the budget", links[0]).groups())
    assert total == split["at_operating"]["handoff_s"]["count"]
    assert over / total <= 0.05 + 1 / total if within else over / total >= 0.05 - 1 / total
    pd = next(c for c in captions if "P:D ratio" in c)
    assert (f"Here the plan's best split is #{number[split['id']]} {split['label']} ("
            in pd)
    assert f"its best colocated #{number[colocated['id']]} {colocated['label']} (" in pd
    timelines = [c for c in captions if "every engine step of" in c]
    assert [t.split(":")[0] for t in timelines] == [
        f"#{number[c['id']]} {role} at its operating rate, {c['operating_rate_per_s']:,.2f} "
        "req/s" for c, role in ((rec, "recommendation"), (other, name))]
    assert all("of those arriving in the middle half of the run" in t for t in timelines)


def test_plan_report_benchmark_blocks_and_slo_lines_are_the_runs_at_goodput(planned):
    plan = planned["plan"]
    blocks = pre_blocks((planned["report"] / "report.md").read_text())
    bench = [b for b in blocks if "Serving Benchmark Result" in b]
    simulated = [c for c in plan["candidates"] if c.get("at_goodput") is not None]
    assert len(bench) == len(simulated)
    for block, c in zip(bench, simulated, strict=True):
        assert_benchmark_block(block, c["at_goodput"])
        seed = plan["seeds"].index(c["at_goodput"]["seed"])
        passing = [p["rate_per_s"] for p in c["probes"] if p["seed"] == seed and p["met"]]
        assert bench_values(block)["Request rate configured (RPS)"] == f"{max(passing):.2f}"

    verdict = next(b for b in blocks if "MLPerf server-scenario style" in b)
    slo = plan["candidates"][0]["at_goodput"]["slo"]
    low, high = slo["attainment_ci95"]
    assert "Result is : VALID" in verdict  # the run at goodput meets the SLO
    assert (f"Joint attainment (every limit at once) : {pct(slo['attainment'])} "
            f"[95% CI {pct(low)}-{pct(high)}]") in verdict
    n = plan["candidates"][0]["at_goodput"]["num_requests"]
    for key, name in (("ttft_s", "TTFT"), ("tpot_s", "TPOT")):
        share = slo["marginal_attainment"][key]
        lo, hi = wilson_interval(round(share * n), n)
        state = "VALID" if share >= slo["attainment_target"] else "INVALID"
        assert re.search(rf"^{name} constraint .* : {state}, {re.escape(pct(share))} within "
                         rf"\[95% CI {re.escape(pct(lo))}-{re.escape(pct(hi))}\]$", verdict, re.M)


def test_plan_report_states_its_assumptions_and_definitions(planned):
    markdown = (planned["report"] / "report.md").read_text()
    plan = planned["plan"]
    assumptions = markdown.split("\n## Assumptions\n")[1].split("\n## Metric definitions\n")[0]
    assert "async_scheduling" in assumptions and "vllm_compat" in assumptions
    assert "fit-v2:h100-sxm" in assumptions and "docs/validation.md" in assumptions
    assert f"seeds {', '.join(map(str, plan['seeds']))}" in assumptions
    assert "GB/s per direction" in assumptions  # the fleet's links
    price = plan["prices"]["h100-sxm"]
    assert price["source"] in assumptions
    definitions = markdown.split("\n## Metric definitions\n")[1]
    assert "TTFT = first output token - arrival" in definitions
    assert "Student-t" in definitions


def test_plan_json_is_unchanged_by_the_report_and_json_mode_prints_only_json(planned, tmp_path):
    result = CliRunner().invoke(app, ["plan", str(planned["scenario"]), "--out",
                                      str(tmp_path / "out"), "--executor", "serial", "--json",
                                      "--report", str(tmp_path / "report")])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == planned["plan"]
    assert "wrote report" in result.stderr and (tmp_path / "report" / "report.html").is_file()


def test_the_same_plan_gives_the_same_report_bytes(tmp_path):
    from clustersim.report import write_plan_report

    spec = parse_scenario(plan_scenario())
    planner = Planner(spec, SerialExecutor())
    result = planner.run()
    written = []
    for attempt in ("a", "b"):  # the plan itself gives the same bytes: tests/test_plan.py
        runs = {c.id: planner.full_run(c.candidate, c.at_goodput_rate_per_s,
                                       c.at_goodput.seed - result.seeds[0])
                for c in (result.recommended, result.runner_up)}
        written.append(write_plan_report(result, spec, runs, tmp_path / attempt / "report"))
    a, b = written
    assert a.figures and len(a.figures) == len(b.figures)
    for x, y in zip((a.markdown, a.html, *a.figures), (b.markdown, b.html, *b.figures),
                    strict=True):
        assert x.name == y.name and x.read_bytes() == y.read_bytes(), x.name


def test_report_options_that_cannot_work_are_one_line_and_exit_2(tmp_path):
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan_scenario()))
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    code, output = run_cli("plan", str(path), "--out", str(tmp_path / "out"),
                           "--report", str(blocker / "report"))
    assert code == 2 and output.strip().startswith(f"{blocker / 'report'}: cannot create")
    assert len(output.strip().splitlines()) == 1
    code, output = run_cli("plan", str(path), "--report", str(tmp_path / "r"), "--no-report")
    assert code == 2 and output.strip() == "--no-report: cannot be given with --report"
    code, output = run_cli("simulate", str(path), "--out", str(tmp_path / "sim"),
                           "--report", str(blocker / "sim"))
    assert code == 2 and len(output.strip().splitlines()) == 1


# ------------------------------------------------------- simulate / compare
def test_simulate_report_renders_the_runs_summary(tmp_path):
    scenario = ROOT / "scenarios" / "quickstart.yaml"
    folders = []
    for attempt, steps in (("a", ()), ("b", ("--steps",))):
        report = tmp_path / attempt / "report"
        code, output = run_cli("simulate", str(scenario), "--out", str(tmp_path / attempt),
                               "--report", str(report), *steps)
        assert code == 0, output
        assert f"wrote report {report}/report.md (3 figures" in output
        folders.append(report)
    # the report reads every step with --steps or without; steps.csv is written only with it
    assert [(tmp_path / a / "steps.csv").is_file() for a in "ab"] == [False, True]
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    markdown = (folders[0] / "report.md").read_text()
    blocks = pre_blocks(markdown)
    bench = next(b for b in blocks if "Serving Benchmark Result" in b)
    assert_benchmark_block(bench, summary)
    assert bench_values(bench)["Request rate configured (RPS)"] == "2.00"
    verdict = next(b for b in blocks if "MLPerf" in b)
    assert f"Joint attainment (every limit at once) : {pct(summary['slo']['attainment'])}" \
        in verdict
    names = sorted(p.name for p in folders[0].glob("*.png"))
    assert [n.split("-", 1)[1] for n in names] == ["latency-cdf.png", "timeline-1.png",
                                                   "kv-queue-1.png"]
    for name in ("report.md", "report.html", *names):  # same scenario, same bytes
        assert (folders[0] / name).read_bytes() == (folders[1] / name).read_bytes(), name
    assert sorted(p.name for p in folders[0].iterdir()) == sorted(
        p.name for p in folders[1].iterdir())


def test_compare_report_shows_both_runs_and_the_verdict(tmp_path):
    report = tmp_path / "report"
    code, output = run_cli("compare", str(ROOT / "scenarios" / "pd_azure_conv_dgx.yaml"),
                           "--out", str(tmp_path / "runs"), "--report", str(report))
    assert code == 0, output
    markdown = (report / "report.md").read_text()
    verdict = re.search(r"^verdict: (.+)$", output, re.M)[1]
    assert (f"The keep-or-reject rule for a split, on the same traffic and GPUs: {verdict}."
            in markdown)
    reasons = [line.strip()[2:] for line in output.splitlines() if line.startswith("  - ")]
    assert reasons and all(f"\n- {reason}\n" in markdown for reason in reasons)
    bench = [b for b in pre_blocks(markdown) if "Serving Benchmark Result" in b]
    for block, label in zip(bench, ("colocated", "disaggregated"), strict=True):
        assert_benchmark_block(block, json.loads(
            (tmp_path / "runs" / label / "summary.json").read_text()))
    side = table_with(markdown_tables(markdown), "", "disaggregated")
    p95 = {row[""]: (row["colocated"], row["disaggregated"]) for row in side}
    for label, column in (("colocated", 0), ("disaggregated", 1)):
        summary = json.loads((tmp_path / "runs" / label / "summary.json").read_text())
        assert p95["TTFT p95 (ms)"][column] == ms(summary["ttft_s"]["p95"])
        assert p95["ITL p99 (ms)"][column] == ms(summary["itl_s"]["p99"])
    names = " ".join(p.name for p in report.glob("*.png"))
    for figure in ("latency-cdf", "timeline-1", "timeline-2", "kv-queue-1", "kv-queue-2",
                   "kv-links-2"):
        assert figure in names


def test_every_figure_has_labelled_axes_with_units():
    """The figure helper refuses an axis without a label that carries its unit."""
    from clustersim.report.figures import canvas, figure

    with canvas(4, 3) as fig:
        ax = fig.subplots()
        ax.plot([0, 1], [0, 1])
        ax.set_xlabel("time (s)")
        ax.set_ylabel("latency")
        with pytest.raises(ValueError, match="unit"):
            figure(fig, "x", "x", "x")
        ax.set_ylabel("latency (ms)")
        assert figure(fig, "x", "x", "x").png.startswith(b"\x89PNG")


# ----------------------------------------------------------------- browser
def _chromium():
    missing = [p for p in CHROMIUM if not Path(p).exists()]
    if missing:
        message = (f"{', '.join(missing)} missing: apt-get install -y chromium "
                   "chromium-driver (.ci/run does)")
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM[0]
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    profile = tempfile.mkdtemp(prefix="clustersim-chromium-")
    options.add_argument(f"--user-data-dir={profile}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(CHROMIUM[1]), options=options), profile


def test_report_html_opens_in_headless_chromium(planned, tmp_path):
    driver, profile = _chromium()
    try:
        driver.get((planned["report"] / "report.html").resolve().as_uri())
        images = driver.execute_script(
            "return Array.from(document.images).map(i => [i.complete, i.naturalWidth, i.alt])")
        errors = [entry for entry in driver.get_log("browser")
                  if entry["level"] in ("SEVERE", "WARNING")]
        title = driver.title
        height = driver.execute_script("return document.body.scrollHeight")
        driver.set_window_size(1400, min(height + 50, 12000))
        shot = tmp_path / "report-test.png"
        assert driver.save_screenshot(str(shot))
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
    assert title == "clustersim plan: report-test"
    assert len(images) == len(list(planned["report"].glob("*.png"))) >= 6
    assert all(complete and width > 0 for complete, width, _ in images), images
    assert errors == []
    assert shot.read_bytes().startswith(b"\x89PNG")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(shot, SCREENSHOTS / shot.name)
    print(f"browser: {len(images)} images decoded, 0 console errors, screenshot "
          f"{SCREENSHOTS / shot.name}")


def test_a_plan_nothing_meets_still_reports_why(tmp_path):
    from clustersim.report import write_plan_report

    data = plan_scenario()
    data["slo"] = {"ttft_s": 0.05, "tpot_s": 0.03}
    data["plan"]["layouts"] = ["colocated"]
    spec = parse_scenario(data)
    result = Planner(spec, SerialExecutor()).run()
    assert result.recommended is None
    files = write_plan_report(result, spec, {}, tmp_path / "report")
    markdown = files.markdown.read_text().replace("\\<", "<")
    assert all(part in markdown for part in result.answer_parts)
    assert result.answer == " ".join(result.answer_parts)
    assert result.short_answer == result.answer_parts[:1]
    assert markdown.split("\n## ")[1] == f"Answer\n\n{result.short_answer[0]}\n"
    infeasible = next(c for c in result.candidates if c.status == "infeasible")
    rows = table_with(markdown_tables(markdown), "#", "goodput req/s [95% CI]")
    assert rows[0]["status"] == f"infeasible, {infeasible.reason}"
    assert "there is no run at goodput to show" in markdown
    assert [f.name.split("-", 1)[1] for f in files.figures] == ["attainment-vs-rate.png"]


# --------------------------------------------------- figures read in five seconds
def test_plan_report_html_links_nothing_outside_itself(planned):
    """One file to mail: every href and src is an anchor, inline data or a public http(s)
    page; the docs it rests on are cited by name."""
    html = (planned["report"] / "report.html").read_text()
    targets = re.findall(r'(?:href|src)="([^"]*)"', html)
    assert targets and all(t.startswith(("#", "data:", "https://", "http://")) for t in targets)
    assert "<code>docs/validation.md</code>" in html


def make_goodput(mean: float, low: float | None = None, high: float | None = None,
                 num_seeds: int = 3):
    from clustersim.plan.result import Goodput

    low = mean if low is None else low
    high = mean if high is None else high
    return Goodput(per_seed_per_s=(mean,) * num_seeds, mean_per_s=mean, low_per_s=low,
                   high_per_s=high, probes=10, converged=True)


def make_candidate(layout: str = "disaggregated", prefill: int = 1, decode: int = 1,
                   colocated: int = 2, goodput=None, gpu: str = "h100-sxm"):
    from clustersim.plan.result import CandidateResult
    from clustersim.plan.space import Candidate, PoolChoice

    pools = ((PoolChoice("prefill", gpu, 1, prefill), PoolChoice("decode", gpu, 1, decode))
             if layout == "disaggregated" else (PoolChoice("colocated", gpu, 1, colocated),))
    return CandidateResult(Candidate(layout, pools, None, True), "simulated",
                           goodput=goodput or make_goodput(10.0, 9.0, 11.0))


def make_plan(*candidates, **fields):
    """What the figures read of a plan: its candidates (numbered in order), and the rest."""
    from types import SimpleNamespace

    values = {"candidates": candidates, "recommended": None, "pareto": (), "seeds": (0, 1, 2),
              "best": {}, "chosen_by": "",
              "measured": tuple(c for c in candidates if getattr(c, "goodput", None) is not None)}
    values.update(fields)
    return SimpleNamespace(**values)


def numbered(plan) -> dict[str, int]:
    return {c.id: i + 1 for i, c in enumerate(plan.candidates)}


def test_pd_figure_draws_points_per_gpu_when_sizes_differ_and_says_what_it_shows():
    from clustersim.report.plan_figures import goodput_vs_pd

    split = make_candidate(prefill=1, decode=1, goodput=make_goodput(14.0, 13, 15))
    colocated = make_candidate("colocated", colocated=2, goodput=make_goodput(10.0, 9, 11))
    same_size = make_plan(split, colocated, best={"disaggregated": split.id,
                                                  "colocated": colocated.id})
    figure = goodput_vs_pd(same_size, numbered(same_size))
    assert "per GPU" not in figure.caption
    assert (f"Here the plan's best split is #1 {split.candidate.label()} (1:1, 14.00 "
            f"[13.00-15.00] req/s), above its best colocated #2 {colocated.candidate.label()} "
            "(colocated, 10.00 [9.00-11.00] req/s); their intervals do not overlap.") \
        in figure.caption

    # 2P+1D on 3 GPUs against colocated on 2: per GPU 5.0 against 6.0, the order turns
    split = make_candidate(prefill=2, decode=1, goodput=make_goodput(15.0, 12, 18))
    colocated = make_candidate("colocated", colocated=2, goodput=make_goodput(12.0, 11, 13))
    sized = make_plan(split, colocated, best={"disaggregated": split.id,
                                              "colocated": colocated.id})
    figure = goodput_vs_pd(sized, numbered(sized))
    assert "divided by its GPUs (per GPU)" in figure.caption
    assert (f"Here the plan's best split is #1 {split.candidate.label()} (2:1, 5.000 "
            "[4.000-6.000] req/s per GPU), below its best colocated "
            f"#2 {colocated.candidate.label()} (colocated, 6.000 [5.500-6.500] req/s per GPU); "
            "their intervals overlap, so the seeds cannot tell them apart.") in figure.caption


def test_pd_figure_names_the_plans_picks_not_its_own_highest_points():
    """The figure reads the plan's best of each kind; a point drawn higher (a min_gpus plan
    picks the fewest GPUs, not the most per GPU) is named with what chose the pick."""
    from clustersim.report.plan_figures import goodput_vs_pd

    small = make_candidate("colocated", colocated=1, goodput=make_goodput(4.3, 4.0, 4.6))
    large = make_candidate("colocated", colocated=7, goodput=make_goodput(11.4, 11.0, 11.8))
    split = make_candidate(prefill=2, decode=2, goodput=make_goodput(12.0, 11.5, 12.5))
    plan = make_plan(split, large, small, best={"disaggregated": split.id, "colocated": large.id},
                     chosen_by="the fewest GPUs whose lowest traffic draw carries the target "
                     "11 req/s within the SLO")
    caption = goodput_vs_pd(plan, numbered(plan)).caption
    assert f"its best colocated #2 {large.candidate.label()} (colocated, 1.629" in caption
    assert caption.endswith("#3 is drawn higher: the plan picks each kind as it picked the "
                            "recommendation, by the fewest GPUs whose lowest traffic draw "
                            "carries the target 11 req/s within the SLO.")


def test_pd_figure_joins_no_ratios_and_shows_only_those_simulated(monkeypatch):
    from clustersim.report import plan_figures

    plan = make_plan(make_candidate(prefill=1, decode=1), make_candidate(prefill=3, decode=1),
                     make_candidate("colocated"))
    drawn = {}

    def keep(fig, name, alt, caption):
        ax = fig.axes[0]
        drawn["ticks"] = [t.get_text() for t in ax.get_xticklabels()]
        drawn["lines"] = [line for line in ax.get_lines() if len(line.get_xdata()) > 1
                          and line.get_linestyle() not in ("None", "none", "")]
        drawn["ylabel"] = ax.get_ylabel()
        return None

    monkeypatch.setattr(plan_figures, "figure", keep)
    plan_figures.goodput_vs_pd(plan, numbered(plan))
    assert drawn["ticks"] == ["1:1", "3:1"]  # 2:1 was never simulated: no slot for it
    # the only line is the colocated reference (10 req/s on 2 GPUs); none joins the ratios
    assert [set(line.get_ydata()) for line in drawn["lines"]] == [{5.0}]
    assert drawn["ylabel"] == "goodput per GPU (req/s per GPU)"  # 2, 4 and 2 GPUs


def test_attainment_panels_share_one_y_range(monkeypatch):
    from clustersim.plan.result import Probe
    from clustersim.report import plan_figures

    def probes(*points: tuple[float, float]) -> list[Probe]:
        return [Probe(seed=0, rate_per_s=rate, attainment=share, attainment_low=share - 0.02,
                      attainment_high=min(1.0, share + 0.02), met=share >= 0.9,
                      num_requests=500) for rate, share in points]

    steep = make_candidate(goodput=make_goodput(10.0, 9, 11))
    steep.probes.extend(probes((8, 0.99), (10, 0.91), (12, 0.30)))
    gentle = make_candidate("colocated", goodput=make_goodput(20.0, 19, 21))
    gentle.probes.extend(probes((18, 0.97), (20, 0.92), (22, 0.85)))
    plan = make_plan(steep, gentle)
    ranges = []
    monkeypatch.setattr(plan_figures, "figure", lambda fig, *_: ranges.extend(
        ax.get_ylim() for ax in fig.axes if ax.get_visible()))
    plan_figures.attainment_vs_rate(plan, numbered(plan), 0.9)
    assert len(ranges) == 2 and ranges[0] == ranges[1]
    assert ranges[0][0] < 28  # the steep one's lowest probe (28 %) shows on both


def test_point_labels_never_overlap_each_other_or_a_point():
    from clustersim.report.figures import canvas, label_box, place_labels

    # six points within a label's width of one another, and one far away
    points = [(10.0, 100.0), (10.2, 100.5), (10.1, 99.6), (10.4, 100.1), (9.9, 100.3),
              (10.3, 99.8), (20.0, 140.0)]
    with canvas(6, 4) as fig:
        ax = fig.subplots()
        ax.scatter(*zip(*points, strict=True))
        ax.set_xlim(8, 22)
        ax.set_ylim(90, 150)
        labels = place_labels(ax, points, [f"#{i + 1}" for i in range(len(points))])
        renderer = fig.canvas.get_renderer()
        boxes = [label_box(label, renderer) for label in labels]
        frame = ax.get_window_extent(renderer)
        markers = [ax.transData.transform(p) for p in points]
    for i, a in enumerate(boxes):
        assert frame.contains(a.x0, a.y0) and frame.contains(a.x1, a.y1)
        for b in boxes[i + 1:]:
            assert not a.overlaps(b), (a, b)
        assert not any(a.contains(x, y) for x, y in markers)


def test_pareto_places_its_labels_apart():
    from types import SimpleNamespace

    from clustersim.report.figures import canvas, label_box
    from clustersim.report.plan_figures import draw_pareto

    spots = {(1, 1): (42.0, 1450.0), (2, 1): (42.6, 1425.0), (3, 1): (43.0, 1440.0),
             (1, 2): (52.5, 870.0), (2, 2): (52.7, 820.0)}
    points = []
    for (prefill, decode), (user, per_gpu) in spots.items():
        c = make_candidate(prefill=prefill, decode=decode)
        points.append(SimpleNamespace(id=c.id, candidate=c.candidate, at_goodput=SimpleNamespace(
            tokens_per_s_per_user=user, output_tokens_per_s_per_gpu=per_gpu)))
    plan = make_plan(*points, pareto=(points[0].id, points[3].id), recommended=points[0])
    with canvas(8, 4.6) as fig:
        labels = draw_pareto(fig.subplots(), plan, points, numbered(plan))
        renderer = fig.canvas.get_renderer()
        boxes = [label_box(label, renderer) for label in labels]
    assert [label.get_text() for label in labels] == ["#1", "#2", "#3", "#4", "#5"]
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            assert not a.overlaps(b), (a, b)


def test_a_legend_on_the_data_is_refused_and_one_outside_passes():
    from clustersim.report.figures import canvas, figure, legend_outside

    with canvas(4, 3) as fig:
        ax = fig.subplots()
        ax.plot([0, 1], [0, 1], label="a line")
        ax.set_xlabel("time (s)")
        ax.set_ylabel("latency (ms)")
        ax.legend(loc="upper left")
        with pytest.raises(ValueError, match="legend covers"):
            figure(fig, "x", "x", "x")
        ax.get_legend().remove()
        legend_outside(fig)
        assert figure(fig, "x", "x", "x").png.startswith(b"\x89PNG")


def make_loss(kind: str = "instance", lost: str = "decode-0", attainment: float = 0.95,
              after: float = 0.93, target: float = 0.9, num_failed: int = 0):
    from clustersim.plan.result import LossCheck

    return LossCheck(kind=kind, lost=lost, gpus={"h100-sxm": 1}, at_s=7.5,
                     attainment=attainment, attainment_after=after, meets=attainment >= target,
                     meets_after=after >= target, num_lost=num_failed, num_retried_requests=0,
                     num_failed=num_failed, spare_cost_per_hour=2.69,
                     spare_cost_per_million_output_tokens=0.3)


def test_n_plus_one_figure_reads_as_failing_when_a_loss_fails():
    from clustersim.plan.result import NPlusOne
    from clustersim.report.plan_figures import n_plus_one
    from clustersim.scenario import SLO

    slo = SLO(ttft_s=1.0, tpot_s=0.05)
    holding = make_loss()
    total = make_loss("node", "node0", attainment=0.185, after=0.0, num_failed=163)
    both = NPlusOne(candidate="x", rate_per_s=10.0, rate_basis="the operating rate",
                    max_retries=2, instance=holding, node=total, tried=(holding, total))
    figure = n_plus_one(both, slo)
    assert figure.png.startswith(b"\x89PNG")
    assert ("Here 1 of 2 losses fail; the worst, losing node0, leaves 18.5% of the run's "
            "requests and 0.0% of those from the failure on within the SLO; 163 requests "
            "failed outright.") in figure.caption
    fine = NPlusOne(candidate="x", rate_per_s=10.0, rate_basis="the operating rate",
                    max_retries=2, instance=holding, node=None, tried=(holding,))
    assert ("Here every loss holds; the closest is losing decode-0, 95.0% over the run and "
            "93.0% from the failure on.") in n_plus_one(fine, slo).caption


def make_verdict(attainment: float, low: float, high: float, target: float = 0.9):
    from clustersim.metrics.goodput import SloVerdict
    from clustersim.scenario import SLO

    slo = SLO(ttft_s=1.0, attainment_target=target)
    return SloVerdict(slo=slo, num_requests=1000, attainment=attainment,
                      attainment_interval=(low, high), marginal={"ttft_s": attainment},
                      means={"ttft_s": 0.5}, rejected_share=0.0,
                      passes={"joint": attainment >= target, "marginal": attainment >= target,
                              "mean": True})


def test_the_slo_note_says_where_the_interval_lies_against_the_target():
    from clustersim.report.blocks import slo_note

    def note(verdict) -> str:
        return "".join(s.text for s in slo_note([("the run", verdict)], at_goodput=True).spans)

    above = note(make_verdict(0.982, 0.975, 0.987))
    assert ("In the run, the joint share, 98.2% [95% CI 97.5%-98.7%], lies above the 90% "
            "target with its whole interval") in above
    assert "straddles" not in above and "by construction" not in above
    assert ("the joint share, 90.4% [95% CI 88.4%-92.1%], straddles the 90% target"
            in note(make_verdict(0.904, 0.884, 0.921)))
    assert ("the joint share, 81.0% [95% CI 78.5%-83.3%], lies below the 90% target"
            in note(make_verdict(0.81, 0.785, 0.833)))


def test_the_plan_report_slo_note_follows_the_run_at_goodput(planned):
    plan = planned["plan"]
    slo = plan["candidates"][0]["at_goodput"]["slo"]
    low, high = slo["attainment_ci95"]
    where = ("lies above" if low >= slo["attainment_target"] else "lies below"
             if high < slo["attainment_target"] else "straddles")
    markdown = (planned["report"] / "report.md").read_text()
    section = markdown.split("\n## SLO verdict at goodput\n")[1].split("\n## ")[0]
    assert (f"the joint share, {pct(slo['attainment'])} [95% CI {pct(low)}-{pct(high)}], "
            f"{where} the {slo['attainment_target']:.0%} target") in section


def test_the_split_rule_sentence_says_whether_the_recommendation_agrees():
    from dataclasses import replace

    from clustersim.plan.result import PlanResult, SplitVerdict
    from clustersim.plan.story import chosen_by, split_rule_sentence

    split, colocated = make_candidate(), make_candidate("colocated")
    keep = SplitVerdict(keep_split=True, reasons=(), rate_per_s=12.0, colocated=colocated.id,
                        split=split.id, within=0.02)
    stay = replace(keep, keep_split=False)
    plan = PlanResult(
        scenario="t", objective="max_goodput_per_gpu", criterion="joint",
        target_rate_per_s=None, gpu_budget=4, base_rate_per_s=10.0, seeds=(0,), tolerance=0.02,
        candidates=(split, colocated), recommended=split, runner_up=colocated,
        split_verdict=keep, pareto=(), answer="")

    def sentence(verdict: SplitVerdict, rec, **fields) -> str:
        result = replace(plan, split_verdict=verdict, recommended=rec, **fields)
        return split_rule_sentence(replace(result, chosen_by=chosen_by(result)))

    said = sentence(keep, split)
    assert said.startswith(f"The keep-or-reject rule for a split, between the best colocated "
                           f"({colocated.candidate.label()}) and the best split "
                           f"({split.candidate.label()}): keep the split.")
    assert "a change of 2% or less holds" in said
    assert said.endswith("The recommendation is disaggregated and agrees; it was chosen as the "
                         "most goodput per GPU within the SLO.")
    assert "colocated and agrees" in sentence(stay, colocated)
    assert "disaggregated and overrules it" in sentence(stay, split)
    # what chose it is said as it was: a min_cost answer is not chosen by goodput
    cheap = sentence(keep, colocated, objective="min_cost", target_rate_per_s=8.0)
    assert "overrules it: it was chosen as the lowest cost per hour whose lowest traffic draw " \
        "carries the target 8 req/s within the SLO" in cheap
    assert "goodput per GPU within" not in cheap.split("It keeps")[1].split("overrules")[1]
    fewest = sentence(keep, split, objective="min_gpus", target_rate_per_s=8.0, headroom=0.2)
    assert "chosen as the fewest GPUs whose lowest traffic draw less the 20% headroom carries " \
        "the target 8 req/s within the SLO" in fewest


def test_the_timeline_caption_reads_the_steps_it_draws():
    import numpy as np

    from clustersim.report.run_figures import _timeline_reading

    steps = np.array([12.0, 12.5, 13.0, 131.0, 12.2])
    chunked = np.array([False, False, False, True, False])
    stretched = _timeline_reading("colocated-0", steps, chunked, split=False)
    assert "take up to 131.0 ms against 12.3 ms at the median for the others (10.6x)" \
        in stretched
    steps[3] = 14.0
    held = _timeline_reading("colocated-0", steps, chunked, split=False)
    assert "take up to 14.0 ms" in held and "barely stretches" in held
    flat = _timeline_reading("decode-0", steps[~chunked], chunked[~chunked], split=True)
    assert flat.startswith("no step of decode-0 carries the prompt (it arrives as a KV "
                           "handoff)") and "stays flat" in flat


def test_report_html_fits_1280_px_in_headless_chromium(planned, tmp_path):
    """At 1,280 px the page never scrolls sideways, no code block is cut (commands wrap), a
    table wider than the text scrolls inside its own box, and nothing links outside."""
    driver, profile = _chromium()
    try:
        driver.set_window_size(1280, 1000)
        driver.get((planned["report"] / "report.html").resolve().as_uri())
        width = driver.execute_script("return window.innerWidth")
        page = driver.execute_script(
            "const d = document.documentElement; return [d.scrollWidth, d.clientWidth]")
        pres = driver.execute_script(
            "return Array.from(document.querySelectorAll('pre'))"
            ".map(p => [p.scrollWidth, p.clientWidth, p.textContent.slice(0, 40)])")
        tables = driver.execute_script(
            "return Array.from(document.querySelectorAll('table')).map(t => {"
            "  const box = t.parentElement;"
            "  return [t.getBoundingClientRect().width, box.clientWidth,"
            "          getComputedStyle(box).overflowX, box.getBoundingClientRect().right]; })")
        links = driver.execute_script(
            "return Array.from(document.querySelectorAll('[href], [src]'))"
            ".map(e => e.getAttribute('href') || e.getAttribute('src'))")
        opening = driver.execute_script(
            "const s = document.querySelector('section');"
            "const box = s.getBoundingClientRect();"
            "return [s.querySelector('h2').textContent, box.top, box.bottom,"
            "        Array.from(s.querySelectorAll('p')).map(p => p.textContent)]")
        captions = driver.execute_script(
            "return Array.from(document.querySelectorAll('figcaption'))"
            ".map(c => c.textContent)")
        text = driver.execute_script(
            "return Array.from(document.querySelectorAll('section > p, section li'))"
            ".map(p => p.textContent).join('\\n')")
        height = driver.execute_script("return document.body.scrollHeight")
        driver.set_window_size(1280, min(height + 150, 16000))
        shot = tmp_path / "report-test-1280.png"
        assert driver.save_screenshot(str(shot))
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
    assert width == 1280
    scroll_width, client_width = page
    assert scroll_width <= client_width, page
    assert pres and all(scroll <= client for scroll, client, _ in pres), pres
    assert any("vllm serve" in text for _, _, text in pres)  # the deploy commands, whole
    for table_width, box_width, overflow, right in tables:
        assert right <= client_width
        assert table_width <= box_width + 1 or overflow in ("auto", "scroll"), tables
    assert links and all(link.startswith(("#", "data:", "http://", "https://"))
                         for link in links), [link[:60] for link in links]
    # the page opens with the short answer, whole on the first screen
    plan = planned["plan"]
    heading, top, bottom, lines = opening
    assert heading == "Answer" and lines == plan["short_answer"] and 3 <= len(lines) <= 5
    assert top >= 0 and bottom <= 1000, opening
    # no figure contradicts the text: every layout a caption names by its role is the one
    # the text names so, and the split's handoff p95 is the text's
    by_id = {c["id"]: c for c in plan["candidates"]}
    number = {c["id"]: i + 1 for i, c in enumerate(plan["candidates"])}
    roles = {"recommendation": plan["recommended"], "best colocated": plan["best"]["colocated"],
             "best split": plan["best"]["disaggregated"]}
    named = [(int(n), role) for caption in captions
             for n, role in re.findall(r"#(\d+) (recommendation|best colocated|best split)\b",
                                       caption)]
    rec_kind = by_id[plan["recommended"]]["layout"]
    other = "best split" if rec_kind == "colocated" else "best colocated"
    assert {role for _, role in named} >= {"recommendation", other}, captions
    assert all(n == number[roles[role]] for n, role in named), named
    pd = next(c for c in captions if "P:D ratio" in c).replace("best split is", "best split")
    for role in ("best split", "best colocated"):
        label = by_id[roles[role]]["label"]
        assert f"the {role} ({label})" in text  # the split rule's sentence
        assert f"{role} #{number[roles[role]]} {label} (" in pd, pd
    handoff = next(reason for reason in plan["split_verdict"]["reasons"]
                   if reason.startswith("KV handoff p95"))
    assert handoff in text and any(c.endswith(f"the {handoff}.") for c in captions)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(shot, SCREENSHOTS / shot.name)
