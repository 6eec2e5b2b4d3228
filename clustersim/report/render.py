"""Render a :class:`Document` with the package's Jinja2 templates and write the report folder:
``report.md`` with its PNGs beside it, and ``report.html`` with the PNGs inline."""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass, replace
from pathlib import Path

import jinja2

from clustersim.errors import ClusterSimError
from clustersim.report.document import Document, Figure, Section
from clustersim.safe_write import atomic_write_bytes, atomic_write_text

_MD_SPECIAL = re.compile(r"([\\`*|]|<(?=[A-Za-z/!?])|\](?=[(\[]))")


def md_escape(text: str) -> str:
    """Text that Markdown shows as written: backslashes, backticks, asterisks and pipes
    escaped, ``<`` where it could open a tag, ``]`` where it could close a link. ``_`` is left
    alone: GitHub's Markdown does not read underscores inside words as emphasis, and
    identifiers stay readable."""
    return _MD_SPECIAL.sub(r"\\\1", text)


def md_code(text: str) -> str:
    fence = "``" if "`" in text else "`"
    return f"{fence}{text}{fence}"


def _environment(autoescape: bool) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("clustersim.report", "templates"),
        autoescape=autoescape,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["md_escape"] = md_escape
    env.filters["md_code"] = md_code
    env.filters["base64"] = lambda data: base64.b64encode(data).decode("ascii")
    return env


def numbered(document: Document) -> Document:
    """Figures numbered in reading order, each with a file name that carries its number."""
    count = 0
    sections = []
    for section in document.sections:
        blocks = []
        for block in section.blocks:
            if isinstance(block, Figure):
                count += 1
                block = replace(block, number=count, name=f"fig{count:02d}-{block.name}.png")
            blocks.append(block)
        sections.append(Section(section.title, blocks, section.anchor or _anchor(section.title)))
    return Document(document.title, document.subtitle, sections)


def _anchor(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")


def render_markdown(document: Document) -> str:
    return _environment(autoescape=False).get_template("report.md.j2").render(doc=document)


def render_html(document: Document) -> str:
    return _environment(autoescape=True).get_template("report.html.j2").render(doc=document)


@dataclass(frozen=True)
class ReportFiles:
    markdown: Path
    html: Path
    figures: tuple[Path, ...]

    def describe(self) -> str:
        n = len(self.figures)
        return (f"wrote report {self.markdown} ({n} figure{'s' if n != 1 else ''} beside it) "
                f"and {self.html} (self-contained)")


def write_report(document: Document, folder: Path) -> ReportFiles:
    """Write ``report.md``, its figures and ``report.html`` into ``folder`` (created). An
    earlier report's files there are replaced, its figures (``figNN-*.png``) removed."""
    document = numbered(document)
    figures = document.figures()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        keep = {f.name for f in figures}
        for old in folder.glob("fig[0-9][0-9]-*.png"):
            if old.name not in keep:
                old.unlink()
        for figure in figures:
            atomic_write_bytes(folder / figure.name, figure.png)
        atomic_write_text(folder / "report.md", render_markdown(document))
        atomic_write_text(folder / "report.html", render_html(document))
    except OSError as error:
        where = error.filename or folder
        raise ClusterSimError(str(where), f"cannot write the report: {error.strerror}") from None
    return ReportFiles(folder / "report.md", folder / "report.html",
                       tuple(folder / f.name for f in figures))
