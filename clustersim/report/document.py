"""A report as plain data: sections of blocks, rendered to Markdown and to HTML by the same
Jinja2 templates' two dialects, so the two files say the same thing::

    Document(title, sections=[Section(title, blocks=[Text, Table, Pre, Figure, Bullets])])
        -> report.md   + one PNG per Figure beside it
        -> report.html   the same blocks, every PNG inline as base64 (one file to mail)

Blocks hold strings that are already formatted; nothing here reads a result.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Span:
    """A run of inline text: plain, ``code``, ``strong``, or a link when ``href`` is set."""

    text: str
    style: str = ""
    href: str | None = None


Inline = str | Span


@dataclass(frozen=True, slots=True)
class Text:
    """A paragraph."""

    spans: tuple[Span, ...]
    kind: str = "text"

    @classmethod
    def of(cls, *parts: Inline) -> Text:
        return cls(tuple(p if isinstance(p, Span) else Span(p) for p in parts))


@dataclass(frozen=True, slots=True)
class Bullets:
    items: tuple[tuple[Span, ...], ...]
    kind: str = "bullets"

    @classmethod
    def of(cls, *items: Inline | tuple[Inline, ...]) -> Bullets:
        def spans(item: Inline | tuple[Inline, ...]) -> tuple[Span, ...]:
            parts = item if isinstance(item, tuple) else (item,)
            return tuple(p if isinstance(p, Span) else Span(p) for p in parts)

        return cls(tuple(spans(i) for i in items))


@dataclass(frozen=True, slots=True)
class Table:
    """Header and rows of formatted cells; ``align`` per column, ``l`` or ``r``."""

    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    align: str = ""
    kind: str = "table"

    def __post_init__(self) -> None:
        width = len(self.header)
        bad = [row for row in self.rows if len(row) != width]
        if bad:
            raise ValueError(f"table row {bad[0]!r} has {len(bad[0])} cells, header {width}")
        if self.align and len(self.align) != width:
            raise ValueError(f"align {self.align!r} does not match {width} columns")

    def alignment(self, column: int) -> str:
        return self.align[column] if self.align else "l"


@dataclass(frozen=True, slots=True)
class Pre:
    """Preformatted text (a benchmark block, commands), shown as is; ``style="commands"``:
    one shell command a line, which HTML wraps with a hanging indent where it is too wide."""

    text: str
    style: str = ""
    kind: str = "pre"


@dataclass(frozen=True, slots=True)
class Figure:
    """A PNG with its file name (beside report.md), alt text and caption."""

    name: str
    png: bytes
    alt: str
    caption: str
    number: int = 0
    kind: str = "figure"


Block = Text | Bullets | Table | Pre | Figure


@dataclass(frozen=True)
class Section:
    title: str
    blocks: list[Block] = field(default_factory=list)
    anchor: str = ""


@dataclass(frozen=True)
class Document:
    title: str
    subtitle: str
    sections: list[Section]

    def figures(self) -> list[Figure]:
        return [b for s in self.sections for b in s.blocks if isinstance(b, Figure)]
