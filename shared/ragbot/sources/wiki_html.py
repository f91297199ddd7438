"""MediaWiki's rendered HTML as heading-aware blocks (ChatbotRagContent's ``contentHtml``, ``action=parse``).

Each block carries its heading path ("H2 > H3"); paragraphs are separated by blank lines, list items
are lines (``- item``, ``1. item``, indented by depth), and each table is a block of its own with
``is_table=True`` (markdown rows, the first row the header), so the splitter keeps headings and tables.

Dropped: edit-section links, reference markers (``[1]``) and back-links, the table of contents,
navigation boxes, category links, hidden elements, scripts, styles and comments. Every link is reduced
to its text: internal links, red links (``action=edit&redlink=1``) and external links alike keep the
words the reader sees and lose their target, which is what the tag-stripped ``content`` got wrong
(``text (url)``); a line that is one link and nothing else but an attribution (an item of a list of
links, ``ragbot.text.links``) is written ``[text]()``, so the chat knows it for navigation and never
quotes it (``ragbot.chat.boilerplate``).
Autonumbered external links (``[1]`` for a bare ``[http://…]``) are dropped whole.

Parsed with lxml's HTML parser (libxml2): it repairs broken markup, never fetches anything, and caps
nesting depth; the tree is walked iteratively, so no page can exhaust the stack.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from lxml import etree, html

from ragbot.schemas.pages import Block
from ragbot.sources.files.document import Outline
from ragbot.text.links import link_line

_PROLOG = re.compile(r"^\s*<\?xml[^>]*\?>", re.IGNORECASE)
_HEADINGS = {f"h{n}": n for n in range(1, 7)}
_SKIP_TAGS = frozenset(
    {
        "script",
        "style",
        "noscript",
        "template",
        "nav",
        "head",
        "title",
        "meta",
        "link",
        "svg",
        "math",
        "iframe",
        "object",
        "audio",
        "video",
        "button",
        "input",
        "select",
        "textarea",
    }
)
_SKIP_CLASSES = frozenset(
    {
        "mw-editsection",
        "reference",  # <sup class="reference">[1]</sup>
        "mw-cite-backlink",
        "toc",
        "toclimit-2",
        "toclimit-3",
        "navbox",
        "vertical-navbox",
        "navbar",
        "catlinks",
        "printfooter",
        "mw-jump-link",
        "mw-indicators",
        "mw-empty-elt",
        "autonumber",  # [http://…] rendered as "[1]"
        "mw-ext-cite-error",
    }
)
_SKIP_IDS = frozenset({"toc", "catlinks", "mw-navigation", "jump-to-nav", "siteSub", "contentSub"})
_HIDDEN = re.compile(r"display\s*:\s*none", re.IGNORECASE)
_PARAGRAPH_TAGS = frozenset(
    {
        "p",
        "div",
        "section",
        "article",
        "main",
        "header",
        "footer",
        "aside",
        "blockquote",
        "pre",
        "center",
        "figure",
        "figcaption",
        "address",
        "hr",
        "details",
        "summary",
        "form",
        "body",
        "html",
    }
)
_LINE_TAGS = frozenset({"li", "dt", "dd"})
_LIST_TAGS = frozenset({"ul", "ol", "dl"})


def blocks_from_html(html_text: str) -> list[Block]:
    """The blocks of a rendered wiki page, in reading order; empty for empty or text-free HTML."""
    source = _PROLOG.sub("", html_text, count=1)
    if not source.strip():
        return []
    try:
        root = html.fragment_fromstring(source, create_parent="div")
    except etree.ParserError:
        return []
    walker = _Walker()
    walker.walk(root)
    return [Block(text=b.text, heading=b.heading, is_table=b.is_table) for b in walker.outline.blocks]


def _skipped(el: etree._Element) -> bool:
    """True for elements whose whole subtree is not page text (their tail still is)."""
    if not isinstance(el.tag, str):  # comments and processing instructions
        return True
    tag = el.tag.lower()
    if tag in _SKIP_TAGS:
        return True
    if tag == "sup" and "reference" in (el.get("class") or ""):
        return True
    classes = set((el.get("class") or "").split())
    if classes & _SKIP_CLASSES:
        return True
    if el.get("id") in _SKIP_IDS or el.get("role") == "navigation":
        return True
    return bool(_HIDDEN.search(el.get("style") or ""))


def inline_text(el: etree._Element) -> str:
    """An element's visible text on one line, skipped parts left out (headings, table cells)."""
    parts: list[str] = []
    walker = etree.iterwalk(el, events=("start", "end"))
    for event, node in walker:
        if node is el:
            if event == "start":
                parts.append(node.text or "")
            continue
        if event == "start":
            if _skipped(node):
                walker.skip_subtree()
            else:
                if isinstance(node.tag, str) and node.tag.lower() == "br":
                    parts.append(" ")
                parts.append(node.text or "")
        else:
            if isinstance(node.tag, str) and node.tag.lower() in _PARAGRAPH_TAGS | _LINE_TAGS:
                parts.append(" ")
            parts.append(node.tail or "")
    return " ".join("".join(parts).split())


@dataclass(slots=True)
class _Walker:
    """Walks the tree once, gathering lines into paragraphs and paragraphs into the outline."""

    outline: Outline = field(default_factory=Outline)
    _line: list[str] = field(default_factory=list)
    _lines: list[str] = field(default_factory=list)
    _prefix: str = ""
    _lists: list[list[int]] = field(default_factory=list)  # one [kind, counter] per open list
    _pre: int = 0
    _link_open: int | None = None  # where in ``_line`` the open ``<a>`` began
    _links: list[tuple[int, int]] = field(default_factory=list)  # the line's links, as ``_line`` spans

    def walk(self, root: etree._Element) -> None:
        walker = etree.iterwalk(root, events=("start", "end"))
        for event, el in walker:
            if event == "start":
                if el is not root and _skipped(el):
                    walker.skip_subtree()
                    continue
                if self._start(el):
                    walker.skip_subtree()
                    continue
                self._add(el.text)
            else:
                if el is not root and not _skipped(el):
                    self._end(el)
                if el is not root:
                    self._add(el.tail)
        self._end_paragraph()

    def _start(self, el: etree._Element) -> bool:
        """Open ``el``; True when it was consumed whole (headings, tables)."""
        tag = str(el.tag).lower()
        if tag in _HEADINGS:
            self._end_paragraph()
            self.outline.heading(_HEADINGS[tag], inline_text(el))
            return True
        if tag == "table":
            self._end_paragraph()
            self._table(el)
            return True
        if tag == "a":
            self._link_open = len(self._line)
        elif tag == "br":
            self._end_line()
        elif tag in _LIST_TAGS:
            if not self._lists:
                self._end_paragraph()
            else:
                self._end_line()
            self._lists.append([1 if tag == "ol" else 0, _start_number(el)])
        elif tag in _LINE_TAGS:
            self._end_line()
            self._prefix = self._item_prefix(tag)
        elif tag in _PARAGRAPH_TAGS:
            if self._lists:
                self._end_line()
            else:
                self._end_paragraph()
            if tag == "pre":
                self._pre += 1
        return False

    def _end(self, el: etree._Element) -> None:
        tag = str(el.tag).lower()
        if tag == "a":
            if self._link_open is not None:
                self._links.append((self._link_open, len(self._line)))
            self._link_open = None
        elif tag in _LIST_TAGS:
            self._end_line()
            if self._lists:
                self._lists.pop()
            if not self._lists:
                self._end_paragraph()
        elif tag in _LINE_TAGS:
            self._end_line()
        elif tag in _PARAGRAPH_TAGS:
            if self._lists:
                self._end_line()
            else:
                self._end_paragraph()
            if tag == "pre":
                self._pre = max(0, self._pre - 1)

    def _item_prefix(self, tag: str) -> str:
        depth = max(0, len(self._lists) - 1)
        indent = "  " * depth
        if tag != "li" or not self._lists:
            return indent
        ordered, number = self._lists[-1]
        if ordered:
            self._lists[-1][1] = number + 1
            return f"{indent}{number}. "
        return f"{indent}- "

    def _add(self, text: str | None) -> None:
        if text:
            self._line.append(text)

    def _end_line(self) -> None:
        raw = "".join(self._line)
        link = self._link_alone()
        self._line, self._links, self._link_open = [], [], None
        if link is not None:
            raw = f"[{link[0]}](){link[1]}"
        if self._pre:
            lines = [line.rstrip() for line in raw.strip("\n").split("\n")]
            self._lines.extend(line for line in lines if line.strip())
            return
        text = " ".join(raw.split())
        if text:
            self._lines.append(f"{self._prefix}{text}")
            self._prefix = ""

    def _link_alone(self) -> tuple[str, str] | None:
        """The text of the line's one link and what follows it, when the link is the line's whole
        content (an item of a list of links: ``ragbot.text.links.link_line``)."""
        if len(self._links) != 1:
            return None
        start, end = self._links[0]
        text = " ".join("".join(self._line[start:end]).split())
        tail = " ".join("".join(self._line[end:]).split())
        if not text or not link_line("".join(self._line[:start]), tail):
            return None
        return text, (f" {tail}" if tail and tail[0] in "-–—(" else tail)

    def _end_paragraph(self) -> None:
        self._end_line()
        self._prefix = ""
        if self._lines:
            self.outline.text("\n".join(self._lines))
            self._lines = []

    def _table(self, table: etree._Element) -> None:
        caption = table.find("caption")
        if caption is not None:
            self.outline.text(inline_text(caption))
        rows: list[list[str]] = []
        for tr in table.xpath("./tr | ./thead/tr | ./tbody/tr | ./tfoot/tr"):
            if _skipped(tr):
                continue
            cells = [inline_text(c) for c in tr.xpath("./td | ./th") if not _skipped(c)]
            if any(cells):
                rows.append(cells)
        if len(rows) == 1 and len(rows[0]) == 1:  # a one-cell layout box: its text, not a table
            self.outline.text(rows[0][0])
        elif rows:
            self.outline.table(rows)


def _start_number(el: etree._Element) -> int:
    start = el.get("start") or ""
    return int(start) if start.strip().isdigit() else 1


__all__ = ["blocks_from_html", "inline_text"]
