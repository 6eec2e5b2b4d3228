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
    for heading in ("Recommendation", "SLO verdict at goodput", "Candidates", "Evidence",
                    "Serving Benchmark Result per configuration", "Assumptions",
                    "Metric definitions"):
        assert f"\n## {heading}\n" in markdown and f"<h2>{heading}</h2>" in html
    names = " ".join(linked)
    for figure in ("latency-cdf", "attainment-vs-rate", "goodput-vs-pd", "pareto",
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
    for attempt in ("a", "b"):
        report = tmp_path / attempt / "report"
        code, output = run_cli("simulate", str(scenario), "--out", str(tmp_path / "run"),
                               "--report", str(report))
        assert code == 0, output
        assert f"wrote report {report}/report.md (3 figures" in output
        folders.append(report)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
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


def test_compare_report_shows_both_runs_and_the_verdict(tmp_path):
    report = tmp_path / "report"
    code, output = run_cli("compare", str(ROOT / "scenarios" / "pd_azure_conv_dgx.yaml"),
                           "--out", str(tmp_path / "runs"), "--report", str(report))
    assert code == 0, output
    markdown = (report / "report.md").read_text()
    verdict = re.search(r"^verdict: (.+)$", output, re.M)[1]
    assert f"Golden S7 on the same traffic and GPUs: {verdict}." in markdown
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
    markdown = files.markdown.read_text()
    assert result.answer in markdown.replace("\\<", "<")
    infeasible = next(c for c in result.candidates if c.status == "infeasible")
    rows = table_with(markdown_tables(markdown), "#", "goodput req/s [95% CI]")
    assert rows[0]["status"] == f"infeasible, {infeasible.reason}"
    assert "there is no run at goodput to show" in markdown
    assert [f.name.split("-", 1)[1] for f in files.figures] == ["attainment-vs-rate.png"]
