"""Markdown as a page: sections by ATX and setext headings, the title from YAML front matter."""

from __future__ import annotations

import re

from ragbot.sources.files.document import Outline, ParsedDocument, normalise_text

_FRONT_MATTER = re.compile(r"\A---[ \t]*\n(.*?)\n(?:---|\.\.\.)[ \t]*(?:\n|\Z)", re.S)
_FRONT_TITLE = re.compile(r"^title:[ \t]*(.+?)[ \t]*$", re.M)
_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(```|~~~)")
_LIST_OR_TABLE = re.compile(r"^\s*(?:[-*+]\s|\d+[.)]\s|\||>)")


def parse_markdown(text: str) -> ParsedDocument:
    """A markdown document's sections under its headings; fenced code never starts one."""
    text = normalise_text(text)
    meta_title: str | None = None
    front = _FRONT_MATTER.match(text)
    if front:
        found = _FRONT_TITLE.search(front.group(1))
        if found:
            meta_title = found.group(1).strip().strip("\"'") or None
        text = text[front.end() :]
    outline = Outline()
    section: list[str] = []
    lines = text.split("\n")
    fence: str | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        opened = _FENCE.match(line)
        if fence is not None:
            section.append(line)
            if opened and opened.group(1) == fence:
                fence = None
            i += 1
            continue
        if opened:
            fence = opened.group(1)
            section.append(line)
            i += 1
            continue
        level, title, consumed = _md_heading(lines, i)
        if consumed:
            outline.text("\n".join(section))
            section = []
            outline.heading(level, _md_inline(title))
            i += consumed
            continue
        section.append(line)
        i += 1
    outline.text("\n".join(section))
    return ParsedDocument(
        kind="md", blocks=outline.blocks, meta_title=meta_title, first_heading=outline.first_heading
    )


def _md_heading(lines: list[str], i: int) -> tuple[int, str, int]:
    atx = _ATX.match(lines[i])
    if atx:
        return len(atx.group(1)), atx.group(2) or "", 1
    line = lines[i].strip()
    previous_blank = i == 0 or not lines[i - 1].strip()
    if (
        line
        and previous_blank
        and i + 1 < len(lines)
        and not _LIST_OR_TABLE.match(lines[i])
        and not _SETEXT.match(lines[i])
    ):
        underline = _SETEXT.match(lines[i + 1])
        if underline:
            return (1 if underline.group(1).startswith("=") else 2), line, 2
    return 0, "", 0


def _md_inline(title: str) -> str:
    title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", title)
    return " ".join(title.replace("**", "").replace("__", "").replace("`", "").split()).strip("*_ ")
