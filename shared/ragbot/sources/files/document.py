"""What every format parser returns, and the ``Outline`` that gathers its blocks under heading paths."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ragbot.schemas.pages import Block
from ragbot.sources.detect import DocumentKind


@dataclass(slots=True)
class ParsedDocument:
    """What a parser found: its title metadata, first heading, and blocks in reading order."""

    kind: DocumentKind
    blocks: list[Block]
    meta_title: str | None = None
    first_heading: str | None = None
    units: int | None = None  # pages (pdf) or slides (pptx)


def normalise_text(text: str) -> str:
    """Text with its line ends as ``\\n``, no NUL, no trailing spaces, no blank lines around it."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "")
    return "\n".join(line.rstrip() for line in text.split("\n")).strip("\n")


class Outline:
    """Builds blocks: consecutive text under one heading path and location becomes one block."""

    def __init__(self) -> None:
        self.blocks: list[Block] = []
        self.first_heading: str | None = None
        self._stack: list[tuple[int, str]] = []

    @property
    def path(self) -> str:
        """The heading path of the text that comes next, ``A > B``."""
        return " > ".join(title for _, title in self._stack)

    def heading(self, level: int, title: str) -> None:
        """A heading at ``level``: it replaces the path's entries at that level and deeper."""
        title = " ".join(title.split())
        if not title:
            return
        if self.first_heading is None:
            self.first_heading = title
        while self._stack and self._stack[-1][0] >= level:
            self._stack.pop()
        self._stack.append((level, title))

    def text(self, text: str, *, location: str | None = None, sep: str = "\n\n") -> None:
        """Text under the current path: joined to the last block when its path and location match."""
        text = text.strip("\n")
        if not text.strip():
            return
        last = self.blocks[-1] if self.blocks else None
        if last is not None and not last.is_table and last.heading == self.path and last.location == location:
            last.text = f"{last.text}{sep}{text}"
        else:
            self.blocks.append(Block(text=text, heading=self.path, location=location))

    def table(self, rows: Sequence[Sequence[str]], *, location: str | None = None) -> None:
        """A table as a block of its own, kept whole."""
        rendered = table_markdown(rows)
        if rendered:
            self.blocks.append(Block(text=rendered, heading=self.path, location=location, is_table=True))


def table_markdown(rows: Sequence[Sequence[str]]) -> str:
    """Rows as a markdown table (the first row is the header); empty rows dropped, cells on one line."""
    clean = [[" ".join(c.split()).replace("|", "\\|") for c in row] for row in rows]
    clean = [row for row in clean if any(row)]
    if not clean:
        return ""
    width = max(len(row) for row in clean)
    clean = [row + [""] * (width - len(row)) for row in clean]
    lines = ["| " + " | ".join(row) + " |" for row in clean]
    lines.insert(1, "|" + " --- |" * width)
    return "\n".join(lines)
