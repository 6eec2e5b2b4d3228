"""docs/glossary.md defines every abbreviation the commands and the report print.

The abbreviations are read from the text the printing modules hold (their string literals, not
their docstrings or comments): a word of two capitals or more, such as TTFT, MoE or PCIe, with
its plural and a parallel size (TP2, DP16, TPn) read as the word. Each is defined in the glossary,
or is a name, a unit or a file format listed in ``NOT_TERMS``. The terms of art that no
pattern can find are listed in ``TERMS``: each is printed and defined.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GLOSSARY = ROOT / "docs" / "glossary.md"

PRINTING = [
    *sorted((ROOT / "clustersim" / "cli").glob("*.py")),
    *sorted((ROOT / "clustersim" / "report").glob("*.py")),
    *sorted((ROOT / "clustersim" / "plan").glob("*.py")),
    *sorted((ROOT / "clustersim" / "metrics").glob("*.py")),
    ROOT / "clustersim" / "output.py",
    ROOT / "clustersim" / "calibration" / "report.py",
    ROOT / "clustersim" / "calibration" / "aiconfigurator_section.py",
]
"""What ``plan``, ``simulate``, ``compare``, ``validate``, ``step-time`` and the report print
is written in these modules. ``cli/reference.py`` writes docs pages, not output."""
NOT_PRINTING = {"reference.py"}

TERMS = ["mnbt", "goodput", "attainment", "operating rate", "cliff", "Pareto front", "handoff",
         "N+1", "P:D", "statistical tie", "keep-or-reject rule", "headroom", "tolerance",
         "draw", "probe", "candidate", "screen", "pruned", "three_pool", "colocated",
         "disaggregated", "kernel floor", "compute-bound", "memory-bound", "zero-shot",
         "few-shot", "rms log error", "failure domain", "binding just above goodput",
         "best split", "split rule"]
"""Terms of art the output prints that are ordinary words, or carry punctuation: each must be
printed by the modules above (or the list rots) and defined in the glossary."""

NOT_TERMS = {
    # companies, products and projects, named as they call themselves
    "AMD", "NVIDIA", "RTX", "PRO", "L40S", "MI300X", "GB200", "GB300", "NVL72", "SGLang",
    "ShareGPT", "MLPerf", "BLIS",
    "LLMServingSim", "CUTLASS", "FA3", "DistServe", "TensorRT", "HuggingFace", "DejaVu",
    "NixlConnector", "CustomAllreduce", "FlashAttention", "Qwen3", "SiLU", "RMSNorms", "V1",
    "vLLM",
    # file formats, units and everyday computing words
    "JSON", "YAML", "CSV", "HTML", "PNG", "PNGs", "README", "NOTICE", "HTTP", "API", "ID", "GB",
    "MB", "GiB", "MiB", "KiB", "CPU", "GPU", "LLM", "USD", "DRAM", "L2", "IO", "UI", "GCS",
    # placeholders of the command line's help and of file names
    "FILE", "SECONDS", "TOKENS", "BATCH", "CONTEXT", "COLUMN", "COL", "KEY", "PROFILE",
    "HOST", "PORT", "YYYYmmdd", "HHMMSS", "GENERATED", "RPS", "COMMAND", "REGEX", "PREFILL",
    "DECODE", "PR", "NAME",
    # environment variables the commands set for the processes they start
    "PYTHONPATH", "COLUMNS", "TERM",
    # the SLO verdict's and the N+1 check's words, in capitals for emphasis: defined in lower
    # case
    "FAILS", "HOLDS",
    # the statistical tables' shapes, queueing notation the docs spell out
    "NEXTN",
}
"""Words of two capitals or more that are names, units, formats or placeholders, not terms a
reader needs defined."""

_WORD = re.compile(r"(?<![\w.-])[A-Za-z][A-Za-z0-9]*(?![\w-])")
"""A word standing alone: not a part of a model's name (Qwen3-30B-A3B), an identifier
(NO_COLOR) or a file's."""


def _abbreviation(word: str) -> str | None:
    """The abbreviation ``word`` is, or None: at least two capitals and no two lower-case
    letters in a row (MoE, PCIe), a plural ``s`` and a parallel size's digits dropped."""
    base = re.sub(r"^(TP|PP|DP|EP)(\d+|[a-z])$", r"\1", word)
    if base.endswith("s") and len(base) > 2 and base[-2].isupper():
        base = base[:-1]
    if sum(c.isupper() for c in base) < 2 or re.search(r"[a-z]{2}", base):
        return None
    return base


def printed_strings() -> list[str]:
    """The string literals of the printing modules, less docstrings."""
    texts = []
    for module in PRINTING:
        if module.name in NOT_PRINTING:
            continue
        tree = ast.parse(module.read_text(encoding="utf-8"))
        docstrings = {id(node.value) for node in ast.walk(tree)
                      if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}
        texts += [node.value for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and isinstance(node.value, str)
                  and id(node) not in docstrings]
    return texts


def defined_terms() -> list[str]:
    """Every term the glossary defines, in order: its bold words (the glossary sets a term in
    bold where it defines it, and nowhere else); a term of several words also defines each."""
    return re.findall(r"\*\*(.+?)\*\*", GLOSSARY.read_text(encoding="utf-8"))


def _words(terms: list[str]) -> set[str]:
    return set(terms) | {word for term in terms for word in term.split()}


def test_every_abbreviation_printed_is_in_the_glossary():
    defined = _words(defined_terms())
    found: dict[str, str] = {}
    for text in printed_strings():
        for word in _WORD.findall(text):
            abbreviation = _abbreviation(word)
            if abbreviation and abbreviation not in NOT_TERMS and word not in NOT_TERMS:
                found.setdefault(abbreviation, text)
    missing = {a: text[:80] for a, text in found.items() if a not in defined}
    assert not missing, (
        "printed but not in docs/glossary.md (define each there, or add a name, unit or "
        f"format to NOT_TERMS in this test): {missing}")


def test_every_term_of_art_is_printed_and_defined():
    printed = "\n".join(printed_strings())
    defined = set(defined_terms())
    assert [t for t in TERMS if t not in printed] == [], "no longer printed: drop from TERMS"
    assert [t for t in TERMS if t not in defined] == [], "not defined in docs/glossary.md"


def test_the_glossary_defines_each_term_once():
    terms = defined_terms()
    assert sorted({term for term in terms if terms.count(term) > 1}) == []


def test_the_abbreviation_reader_finds_what_it_should():
    assert [_abbreviation(w) for w in ("TTFT", "TP2", "DP16", "TPn", "GEMMs", "MoE", "PCIe",
                                        "H100", "NVLink", "goodput", "Qwen")] == [
        "TTFT", "TP", "DP", "TP", "GEMM", "MoE", "PCIe", None, None, None, None]
