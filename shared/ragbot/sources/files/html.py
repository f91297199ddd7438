"""HTML as a page: headings, paragraphs, list items and tables; script, style, nav and the like dropped."""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser

from ragbot.sources.files.document import Outline, ParsedDocument

_HTML_SKIP = frozenset(
    {"script", "style", "noscript", "template", "svg", "iframe", "object", "canvas", "nav"}
)
_HTML_BLOCK = frozenset(
    [
        "p",
        "div",
        "section",
        "article",
        "main",
        "header",
        "footer",
        "aside",
        "blockquote",
        "ul",
        "ol",
        "dl",
        "dt",
        "dd",
        "pre",
        "form",
        "figure",
        "figcaption",
        "address",
        "hr",
        "li",
        "body",
        "html",
        "caption",
        "details",
        "summary",
    ]
)
_HTML_HEADINGS = {f"h{n}": n for n in range(1, 7)}
_HTML_HEAD_TAGS = frozenset({"title", "meta", "link", "base", "style", "script", "noscript", "template"})
_BR = "\x0b"  # a <br> while a paragraph is collected (vertical tab: never kept from HTML text)


@dataclass(slots=True)
class _HtmlTable:
    rows: list[list[str]] = field(default_factory=list)
    cell: list[str] | None = None
    inner: int = 0  # depth of tables nested in a cell: their text joins the cell

    def open_cell(self) -> list[str]:
        self.close_cell()
        if not self.rows:
            self.rows.append([])
        self.cell = []
        return self.cell

    def close_cell(self) -> None:
        if self.cell is not None:
            if not self.rows:
                self.rows.append([])
            self.rows[-1].append("".join(self.cell))
            self.cell = None


class _HtmlExtractor(HTMLParser):
    """Headings, paragraphs, list items and tables of an HTML document, in order."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.outline = Outline()
        self.title: str | None = None
        self._skip = 0
        self._head = False
        self._in_title = False
        self._title_parts: list[str] = []
        self._para: list[str] = []
        self._prefix = ""
        self._after_item = False
        self._pre = 0
        self._heading: tuple[int, list[str]] | None = None
        self._table: _HtmlTable | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self._head and tag not in _HTML_HEAD_TAGS:  # content starts the body, as in a browser
            self._head = False
        if tag in _HTML_SKIP:
            self._skip += 1
        elif self._skip:
            return
        elif tag == "head":
            self._head = True
        elif tag == "title":
            self._in_title = self.title is None
        elif tag == "body":
            self._head = False
        elif self._table is not None:
            self._table_start(self._table, tag)
        elif tag == "table":
            self._flush()
            self._table = _HtmlTable()
        elif tag in _HTML_HEADINGS:
            self._flush()
            self._heading = (_HTML_HEADINGS[tag], [])
        elif tag == "br":
            self._sink().append(_BR)
        elif tag in _HTML_BLOCK:
            self._flush()
            if tag == "pre":
                self._pre += 1
            elif tag == "li":
                self._prefix = "- "

    def handle_endtag(self, tag: str) -> None:
        if tag in _HTML_SKIP:
            self._skip = max(0, self._skip - 1)
        elif self._skip:
            return
        elif tag == "head":
            self._head = False
        elif tag == "title":
            if self._in_title:
                self.title = " ".join("".join(self._title_parts).split()) or None
            self._in_title = False
        elif self._table is not None:
            self._table_end(self._table, tag)
        elif tag in _HTML_HEADINGS and self._heading is not None:
            level, parts = self._heading
            self._heading = None
            self.outline.heading(level, "".join(parts))
        elif tag in _HTML_BLOCK:
            self._flush()
            if tag == "pre":
                self._pre = max(0, self._pre - 1)

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self._title_parts.append(data)
        elif self._skip or self._head:
            return
        elif self._table is not None:
            if self._table.cell is not None:
                self._table.cell.append(data)
            elif data.strip():  # text outside any cell: a cell of its own
                self._table.open_cell().append(data)
        else:
            self._sink().append(data.replace(_BR, " "))

    def close(self) -> None:
        super().close()
        if self._table is not None:
            self._table.inner = 0
            self._table_end(self._table, "table")
        if self._heading is not None:
            self.handle_endtag(f"h{self._heading[0]}")
        self._flush()

    def _sink(self) -> list[str]:
        return self._heading[1] if self._heading is not None else self._para

    def _table_start(self, table: _HtmlTable, tag: str) -> None:
        if tag == "table":
            table.inner += 1
        elif table.inner:
            if table.cell is not None:
                table.cell.append(" ")
        elif tag == "tr":
            table.close_cell()
            table.rows.append([])
        elif tag in ("td", "th"):
            table.open_cell()
        elif table.cell is not None:  # br, p, div... inside a cell: keep the words apart
            table.cell.append(" ")

    def _table_end(self, table: _HtmlTable, tag: str) -> None:
        if tag == "table":
            if table.inner:
                table.inner -= 1
                return
            table.close_cell()
            self._table = None
            self.outline.table(table.rows)
        elif not table.inner and tag in ("td", "th", "tr"):
            table.close_cell()
        elif table.cell is not None:
            table.cell.append(" ")

    def _flush(self) -> None:
        raw = "".join(self._para)
        self._para = []
        prefix, self._prefix = self._prefix, ""
        if self._pre:
            text = raw.replace(_BR, "\n").strip("\n")
        else:  # source line breaks are spaces; only <br> breaks a line
            text = "\n".join(" ".join(line.split()) for line in raw.split(_BR)).strip()
        if text.strip():
            self.outline.text(prefix + text, sep="\n" if prefix and self._after_item else "\n\n")
            self._after_item = bool(prefix)


def parse_html(text: str) -> ParsedDocument:
    """An HTML document's blocks under its headings, titled by its ``<title>``."""
    parser = _HtmlExtractor()
    parser.feed(text)
    parser.close()
    return ParsedDocument(
        kind="html",
        blocks=parser.outline.blocks,
        meta_title=parser.title,
        first_heading=parser.outline.first_heading,
    )
