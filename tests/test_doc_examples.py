"""The command output that README.md and docs/ show is what the command prints now.

Each such block follows a marker naming its command (``<!-- example: COMMAND -->``);
``clustersim docs --write`` regenerates them and ``--check`` fails when one has drifted. The
mechanism is tested here on small pages; one real example (the README's ``simulate``) is
checked in the default run, and every one of them, the plans included, in the slow run.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

from clustersim.cli.examples import (
    Example,
    example_pages,
    excerpt,
    find_examples,
    masked,
    regenerate,
    rewritten,
    run_examples,
)
from clustersim.errors import ClusterSimError
from tests.helpers import run_cli

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

PAGE = """# A page

Some prose, then what a command prints:

<!-- example: python -c "print('one'); print('two  '); print('three')"
     from: ^two
     to: three -->
```
old
```

More prose.

<!-- example: clustersim --version -->
```text
```
"""


def _checkout(tmp_path: Path, page: str = PAGE) -> Path:
    """A checkout's docs folder holding ``page`` as docs/page.md."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "page.md").write_text(page, encoding="utf-8")
    return docs


def test_a_marker_names_its_command_and_the_lines_shown(tmp_path):
    docs = _checkout(tmp_path)
    first, second = find_examples(docs / "page.md")
    assert (first.line, first.command, first.start, first.end, first.keep, first.block) == (
        5, "python -c \"print('one'); print('two  '); print('three')\"", "^two", "three", None,
        "old\n")
    assert (second.line, second.command, second.start, second.end, second.keep,
            second.block) == (14, "clustersim --version", None, None, None, "")
    assert example_pages(docs) == [docs / "page.md"]


def test_an_excerpt_runs_from_its_first_line_to_its_last_without_trailing_blanks(tmp_path):
    example = find_examples(_checkout(tmp_path) / "page.md")[0]
    assert excerpt(example, "one\ntwo  \nthree\nfour\n") == "two\nthree\n"
    with pytest.raises(ClusterSimError, match="to: no line of .* matches 'three' at or after"):
        excerpt(example, "three\ntwo\n")
    rows = replace(example, keep="^(two|f)")
    assert excerpt(rows, "one\ntwo\nskip\nfour\nthree\nfive\n") == "two\nfour\n"


def test_only_what_changes_between_runs_is_masked():
    one = ("candidates: 16 (8 simulated, 8 screened); 164 simulations in 4.9 s on 2 workers\n"
           "wrote report reports/quickstart-20261204-122511/report.md\n")
    other = ("candidates: 16 (8 simulated, 8 screened); 164 simulations in 1,234.5 s on 16 "
             "workers\nwrote report reports/quickstart-20270101-000000/report.md\n")
    assert masked(one) == masked(other)
    assert masked(one) != masked(one.replace("164 simulations", "165 simulations"))
    assert masked(one) != masked(one.replace("8 screened", "9 screened"))


def test_docs_writes_the_examples_then_finds_them_current(tmp_path):
    docs = _checkout(tmp_path)
    code, output = run_cli("docs", "--folder", str(docs), "--check")
    assert code == 1
    assert f"{docs / 'page.md'}:5: `python -c" in output and ": stale (" in output
    assert "-old\n+two\n+three" in output  # what drifted, as a diff
    code, output = run_cli("docs", "--folder", str(docs), "--write")
    assert code == 0, output
    text = (docs / "page.md").read_text(encoding="utf-8")
    assert "     to: three -->\n```\ntwo\nthree\n```\n\nMore prose." in text
    assert "<!-- example: clustersim --version -->\n```text\nclustersim " in text
    code, output = run_cli("docs", "--folder", str(docs), "--check")
    assert code == 0, output
    assert output.count(": current (") == 2
    code, output = run_cli("docs", "--folder", str(docs), "--check", "--only", "page.md:5 ")
    assert code == 0 and output.count(": current (") == 1 and "--version" not in output


def test_an_example_runs_beside_the_checkout_not_in_it(tmp_path):
    """Its command reads the checkout's files and writes its own into a scratch folder."""
    (tmp_path / "scenarios").mkdir()
    (tmp_path / "scenarios" / "s.txt").write_text("read me\n")
    docs = _checkout(tmp_path, (
        "<!-- example: python -c \"import pathlib; pathlib.Path('runs').mkdir(); "
        "print(open('scenarios/s.txt').read())\" -->\n```\n```\n"))
    code, output = run_cli("docs", "--folder", str(docs), "--write")
    assert code == 0, output
    assert "```\nread me\n```" in (docs / "page.md").read_text()
    assert not (tmp_path / "runs").exists()


def test_a_page_edited_while_its_commands_ran_keeps_the_edit(tmp_path):
    docs = _checkout(tmp_path)
    example = find_examples(docs / "page.md")[0]
    key = (example.command, example.start, example.end, example.keep, 0)
    edited = PAGE.replace("Some prose,", "Some prose,\nwritten meanwhile over two lines,")
    text = rewritten(docs / "page.md", edited, {key: (example, "two\nthree\n")})
    assert "written meanwhile over two lines," in text
    assert "     to: three -->\n```\ntwo\nthree\n```\n" in text


@pytest.mark.parametrize("marker, message", [
    ("<!-- example: ls -l -->", "an example's command starts with `clustersim` or `python`"),
    ("<!-- example: clustersim catalog\n     since: x -->", "'since: x': a line below the "
     "command is `from: REGEX`, `to: REGEX` or `keep: REGEX`, each at most once"),
    ("<!-- example: clustersim catalog\n     from: ( -->", "from: not a regular expression"),
    ("<!-- example: clustersim catalog -->\nprose between", "an example's marker ends in `-->` "
     "and its fenced block (```) starts on the next line"),
    ("<!-- example: clustersim catalog --bogus -->", "`clustersim catalog --bogus` exited "
     "with 2: python -m clustersim catalog: No such option: --bogus"),
])
def test_a_bad_marker_is_one_line_and_exit_2(tmp_path, marker, message):
    docs = _checkout(tmp_path, f"{marker}\n```\n```\n")
    code, output = run_cli("docs", "--folder", str(docs), "--check")
    assert code == 2
    assert output.strip().splitlines()[-1].startswith(f"{docs / 'page.md'}:1: {message}")


def test_a_failing_example_leaves_the_others_written(tmp_path):
    docs = _checkout(tmp_path, (
        "<!-- example: python -c \"import sys; sys.exit('no such thing')\" -->\n```\n```\n\n"
        "<!-- example: python -c \"print('made')\" -->\n```\n```\n"))
    code, output = run_cli("docs", "--folder", str(docs), "--write")
    assert code == 2
    assert "`: failed: `python -c" in output and ": written (" in output
    assert output.strip().splitlines()[-1].endswith("exited with 1: no such thing")
    assert "```\nmade\n```" in (docs / "page.md").read_text()


def test_only_is_refused_without_examples():
    code, output = run_cli("docs", "--no-examples", "--only", "plan")
    assert code == 2 and output.strip() == "--only: cannot be given with --no-examples"


def _shipped() -> list[Example]:
    return [example for page in example_pages(DOCS) for example in find_examples(page)]


def test_the_docs_mark_their_command_output():
    commands = {example.command for example in _shipped()}
    assert {"clustersim plan scenarios/quickstart.yaml",
            "clustersim plan scenarios/qwen7b_a100_min_gpus.yaml",
            "clustersim simulate scenarios/quickstart.yaml --out runs/quickstart",
            "clustersim compare scenarios/pd_azure_conv_dgx.yaml"} <= commands


def test_the_readme_simulate_example_is_what_simulate_prints():
    say: list[str] = []
    stale = run_examples(DOCS, "simulate scenarios/quickstart.yaml", None, say.append)
    assert len(say) >= 1 and stale == 0, (
        "\n".join(say) + "\nrun `clustersim docs --write` and commit the pages")


_RAN: dict[str, str] = {}
"""Each command's output, run once for the examples that share it."""


MINUTES = ("qwen7b_a100_day.yaml", "qwen7b_a100_min_gpus.yaml", "distserve_compare.py")
"""Commands that take minutes each even on the compiled core (a day of traffic, a plan that
must survive a loss, DistServe's goodput searches): `clustersim docs --check` runs them before
a release; the CI's slow campaign, which runs beside the default selection within its time,
leaves them out."""


def _checked_in_ci() -> list[Example]:
    return [e for e in _shipped() if not any(name in e.command for name in MINUTES)]


def test_ci_leaves_out_only_the_named_long_examples():
    left_out = {e.command for e in _shipped()} - {e.command for e in _checked_in_ci()}
    assert left_out and all(any(name in c for name in MINUTES) for c in left_out)
    assert "clustersim plan scenarios/quickstart.yaml" in {e.command for e in _checked_in_ci()}


@pytest.mark.slow
@pytest.mark.parametrize("example", _checked_in_ci(), ids=lambda e: f"{e.page.name}:{e.line}")
def test_every_example_is_what_its_command_prints(example):
    outcome = regenerate(example, ROOT, _RAN)
    assert outcome.current, (
        f"{example.where}: `{example.command}` prints something else now: run "
        f"`{sys.executable} -m clustersim docs --write --only '{example.command}'` from the "
        "repository root and commit the page")
