"""Uploaded files as pages: pdf, docx, pptx, html, md and txt into ``Page.blocks`` with their places.

``parse_upload`` refuses what it cannot index with ``ValidationFailed(field="file")`` and a message a
user can act on: an empty file, one over the size cap, an unsupported type, a corrupt file, a zip bomb.
The kind is decided by content (``ragbot.sources.detect``), never by the extension alone.

What each kind keeps:

- pdf: one block per page, located ``page N``; headings from the outline (bookmarks) when it has one;
  a blank line where the vertical gap between lines says a paragraph starts. Text is taken in the
  order its glyphs are stored, and lines whose Hebrew was stored in visual order (reversed, as many
  producers write right-to-left text) are put back in logical order by ``fix_rtl_order``;
- docx: headings by paragraph style (``Heading N``, outline level), tables whole as ``| a | b |`` rows,
  list items as ``- item``, ``page N`` when Word saved its page breaks;
- pptx: one block per slide, located ``slide N``, the slide title as heading, tables whole;
- html: headings, paragraphs, list items and tables; script, style, nav and the like dropped;
- md: sections by ATX/setext headings (title from YAML front matter when present); txt: the text.

The page title is the document's own title metadata, else its first heading, else the file name.
"""

from __future__ import annotations

import hashlib
import io
import logging
import re
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from html.parser import HTMLParser
from pathlib import PurePath
from typing import Any

from ragbot.errors import ValidationFailed
from ragbot.schemas.pages import Block, Page, PageSourceKind
from ragbot.sources.detect import DocumentKind, ZipLimits, decode_text, detect_kind, refuse

__all__ = [
    "ParsedDocument",
    "extract_document",
    "fix_rtl_order",
    "fix_rtl_pages",
    "parse_upload",
    "rtl_vote",
    "stable_title",
    "table_markdown",
    "visual_to_logical",
]

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class ParsedDocument:
    """What a parser found: its title metadata, first heading, and blocks in reading order."""

    kind: DocumentKind
    blocks: list[Block]
    meta_title: str | None = None
    first_heading: str | None = None
    units: int | None = None  # pages (pdf) or slides (pptx)


def parse_upload(
    data: bytes,
    *,
    filename: str,
    max_bytes: int,
    page_id: int,
    revision_id: int = 1,
    revision_date: datetime | None = None,
    title: str | None = None,
    url: str | None = None,
    source: PageSourceKind = "upload",
    zip_limits: ZipLimits | None = None,
    max_pdf_pages: int = 5000,
) -> Page:
    """A file's bytes as a ``Page`` with blocks; refuses anything it cannot index, saying why."""
    if not data:
        raise refuse(filename, "the file is empty")
    if len(data) > max_bytes:
        raise refuse(filename, f"the file is {len(data)} bytes, over the {max_bytes}-byte limit")
    parsed = extract_document(data, filename=filename, zip_limits=zip_limits, max_pdf_pages=max_pdf_pages)
    blocks = [b for b in parsed.blocks if b.text.strip()]
    if not blocks:
        raise refuse(filename, _no_text_reason(parsed.kind))
    extra: dict[str, Any] = {
        "filename": PurePath(filename).name,
        "file_type": parsed.kind,
        "sha256": hashlib.sha256(data).hexdigest(),
        "bytes": len(data),
    }
    if parsed.units is not None:
        extra["pages" if parsed.kind == "pdf" else "slides"] = parsed.units
    return Page(
        page_id=page_id,
        revision_id=revision_id,
        revision_date=revision_date,
        title=(title or "").strip() or stable_title(parsed, filename=filename),
        url=url,
        content="\n\n".join(b.text for b in blocks),
        source=source,
        blocks=blocks,
        extra=extra,
    )


def stable_title(parsed: ParsedDocument, *, filename: str) -> str:
    """The document's title metadata, else its first heading, else the file name without extension."""
    for candidate in (parsed.meta_title, parsed.first_heading):
        if candidate and candidate.strip():
            return " ".join(candidate.split())
    path = PurePath(filename)
    return path.stem or path.name or "untitled"


def extract_document(
    data: bytes, *, filename: str, zip_limits: ZipLimits | None = None, max_pdf_pages: int = 5000
) -> ParsedDocument:
    """Detect the kind by content and run its parser; vendor errors become a 'corrupt file' refusal."""
    kind = detect_kind(data, filename=filename, zip_limits=zip_limits)
    try:
        if kind == "pdf":
            return _parse_pdf(data, filename=filename, max_pages=max_pdf_pages)
        if kind == "docx":
            return _parse_docx(data)
        if kind == "pptx":
            return _parse_pptx(data)
        text = decode_text(data, filename=filename)
        if kind == "html":
            return _parse_html(text)
        if kind == "md":
            return _parse_markdown(text)
        return ParsedDocument(kind="txt", blocks=[Block(text=_normalise_text(text))])
    except ValidationFailed:
        raise
    except Exception as exc:  # a vendor parser failed on a malformed file: refuse it, never crash
        logger.info("cannot parse %s as %s: %r", PurePath(filename).name, kind, exc)
        reason = f"the file is corrupt or unreadable as {kind} ({type(exc).__name__})"
        raise refuse(filename, reason) from None


def _no_text_reason(kind: DocumentKind) -> str:
    if kind == "pdf":
        return "no text could be extracted (a scanned PDF? OCR is not supported)"
    return "the file has no text"


def _normalise_text(text: str) -> str:
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "")
    return "\n".join(line.rstrip() for line in text.split("\n")).strip("\n")


# --- sections: the heading path and the blocks under it --------------------------------------------


class _Outline:
    """Builds blocks: consecutive text under one heading path and location becomes one block."""

    def __init__(self) -> None:
        self.blocks: list[Block] = []
        self.first_heading: str | None = None
        self._stack: list[tuple[int, str]] = []

    @property
    def path(self) -> str:
        return " > ".join(title for _, title in self._stack)

    def heading(self, level: int, title: str) -> None:
        title = " ".join(title.split())
        if not title:
            return
        if self.first_heading is None:
            self.first_heading = title
        while self._stack and self._stack[-1][0] >= level:
            self._stack.pop()
        self._stack.append((level, title))

    def text(self, text: str, *, location: str | None = None, sep: str = "\n\n") -> None:
        text = text.strip("\n")
        if not text.strip():
            return
        last = self.blocks[-1] if self.blocks else None
        if last is not None and not last.is_table and last.heading == self.path and last.location == location:
            last.text = f"{last.text}{sep}{text}"
        else:
            self.blocks.append(Block(text=text, heading=self.path, location=location))

    def table(self, rows: Sequence[Sequence[str]], *, location: str | None = None) -> None:
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


# --- pdf --------------------------------------------------------------------------------------------

_UNHELPFUL_TITLE = re.compile(r"^(?:microsoft\s+\w+\s+-\s+|untitled)|\.(?:docx?|pdf|pptx?|odt|rtf)$", re.I)
_SPACES = re.compile(r"[ \t\u00a0]+")
_PYPDF_RTL = re.compile("[\u0590-\u08ff\ufb1d-\ufdff\ufe70-\ufeff]")  # what pypdf reverses
_PARAGRAPH_GAP = 1.6  # a line this many font sizes below the last one starts a paragraph
_BLANK_LINES = re.compile(r"\n{3,}")


def _parse_pdf(data: bytes, *, filename: str, max_pages: int) -> ParsedDocument:
    from pypdf import PdfReader

    reader = PdfReader(io.BytesIO(data), strict=False)
    if reader.is_encrypted:
        try:
            opened = bool(reader.decrypt(""))
        except Exception:  # an unsupported encryption method is as unreadable as a password
            opened = False
        if not opened:
            raise refuse(filename, "the PDF is encrypted (password protected)")
    count = len(reader.pages)
    if count == 0:
        raise refuse(filename, "the file is corrupt or unreadable as pdf (no pages)")
    if count > max_pages:
        raise refuse(filename, f"the PDF has {count} pages (limit {max_pages})")
    headings = _pdf_outline_headings(reader, count)
    texts: list[str] = []
    unreadable = 0
    for number, page in enumerate(reader.pages, start=1):
        try:
            texts.append(_pdf_page_text(page))
        except Exception as exc:  # one broken page costs that page, not the document
            logger.info("%s: page %d unreadable: %r", PurePath(filename).name, number, exc)
            texts.append("")
            unreadable += 1
    if unreadable == count:
        raise refuse(filename, "the file is corrupt or unreadable as pdf (no page could be read)")
    texts = fix_rtl_pages(texts)
    blocks = [
        Block(text=text, heading=headings[i], location=f"page {i + 1}")
        for i, text in enumerate(texts)
        if text.strip()
    ]
    meta = reader.metadata
    meta_title = str(meta.title).strip() if meta is not None and meta.title else None
    if meta_title and _UNHELPFUL_TITLE.search(meta_title):
        meta_title = None
    first_heading = next((h.split(" > ")[0] for h in headings if h), None)
    return ParsedDocument(
        kind="pdf", blocks=blocks, meta_title=meta_title, first_heading=first_heading, units=count
    )


def _pdf_page_text(page: Any) -> str:
    """A page's text in glyph order, a blank line where the vertical gap says a new paragraph starts.

    pypdf writes each right-to-left run reversed (it assumes visual order); its text visitor hands
    over exactly those runs, so turning them back gives the order the glyphs were stored in, and
    ``fix_rtl_pages`` decides per line whether that order was visual.
    """
    pieces: list[tuple[str, float | None, float]] = []  # text, baseline y (None: a line break), size

    def visit(text: str, cm: Sequence[float], tm: Sequence[float], _font: Any, size: float) -> None:
        if not text:
            return
        if not text.strip("\n"):
            pieces.append((text, None, 0.0))
            return
        y = tm[4] * cm[1] + tm[5] * cm[3] + cm[5]
        scale = abs(tm[2] * cm[1] + tm[3] * cm[3]) or 1.0
        if _PYPDF_RTL.search(text):  # pypdf adds line breaks after reversing: keep them in place
            text = "\n".join(segment[::-1] for segment in text.split("\n"))
        pieces.append((text, y, float(size) * scale))

    page.extract_text(visitor_text=visit)
    out: list[str] = []
    last: tuple[float, float] | None = None  # y and size of the last line
    broke = False
    for text, y, size in pieces:
        if y is None:
            out.append(text)
            broke = True
            continue
        if broke and last is not None:
            gap = last[0] - y
            if gap < 0 or gap > _PARAGRAPH_GAP * max(size, last[1]):
                out.append("\n")
        out.append(text)
        last, broke = (y, size), text.endswith("\n")
    lines = [_SPACES.sub(" ", line).strip() for line in _normalise_text("".join(out)).split("\n")]
    return _BLANK_LINES.sub("\n\n", "\n".join(lines)).strip("\n")


def _pdf_outline_headings(reader: Any, count: int) -> list[str]:
    """For each page, the path of the last outline entry that starts on or before it ('' if none)."""
    starts: list[tuple[int, int, list[str]]] = []  # (page, order, path)

    def walk(items: Iterable[Any], parents: list[str]) -> None:
        last: list[str] = parents
        for item in items:
            if isinstance(item, list):
                walk(item, last)
                continue
            title = " ".join(str(getattr(item, "title", "") or "").split())
            try:
                number = reader.get_destination_page_number(item)
            except Exception:  # a broken bookmark names no page: skip it, keep the others
                number = None
            last = [*parents, title] if title else parents
            if number is not None and 0 <= number < count and title:
                starts.append((number, len(starts), last))

    try:
        walk(reader.outline, [])
    except Exception as exc:  # a malformed outline only costs the headings
        logger.debug("pdf outline unreadable: %r", exc)
        return [""] * count
    starts.sort(key=lambda s: (s[0], s[1]))
    headings: list[str] = []
    current = ""
    it = iter(starts)
    pending = next(it, None)
    for page in range(count):
        while pending is not None and pending[0] <= page:
            current = " > ".join(pending[2])
            pending = next(it, None)
        headings.append(current)
    return headings


# --- right-to-left text in visual order -------------------------------------------------------------

_HEBREW = re.compile(r"[\u05d0-\u05ea]")
_HEBREW_WORD = re.compile(r"[\u05d0-\u05ea]{2,}")
_NIQQUD = re.compile(r"[\u0591-\u05c7]")
_FINALS = frozenset("ךםןףץ")
_NON_FINALS = frozenset("כמנפצ")  # the letters that take a final form at the end of a word
_MIRROR = str.maketrans("()[]{}<>«»", ")(][}{><»«")


def rtl_vote(line: str) -> int:
    """Evidence that a line's Hebrew is reversed (> 0) or in logical order (< 0); 0 when unknown.

    Hebrew writes ך ם ן ף ץ only at the end of a word and כ מ נ פ צ almost never there, so a word
    that starts with a final form, or ends with its ordinary form, was stored backwards.
    """
    score = 0
    for match in _HEBREW_WORD.finditer(_NIQQUD.sub("", line)):
        word = match.group()
        score += (word[0] in _FINALS) + (word[-1] in _NON_FINALS)
        score -= (word[-1] in _FINALS) + (word[0] in _NON_FINALS)
    return score


def fix_rtl_order(text: str) -> str:
    """``text`` with every line whose Hebrew is in visual order put back in logical order."""
    return fix_rtl_pages([text])[0]


def fix_rtl_pages(pages: Sequence[str]) -> list[str]:
    """Lines voted reversed are reordered; undecided Hebrew lines follow the document's majority."""
    split = [page.split("\n") for page in pages]
    votes = [[rtl_vote(line) for line in lines] for lines in split]
    visual_default = sum(sum(v) for v in votes) > 0
    out: list[str] = []
    for lines, line_votes in zip(split, votes, strict=True):
        fixed = [
            visual_to_logical(line)
            if vote > 0 or (vote == 0 and visual_default and _HEBREW.search(line))
            else line
            for line, vote in zip(lines, line_votes, strict=True)
        ]
        out.append("\n".join(fixed))
    return out


def visual_to_logical(line: str, *, rtl_paragraph: bool | None = None) -> str:
    """One line from visual (left-to-right display) order to logical order.

    In a right-to-left paragraph (more Hebrew than Latin letters, unless told) the whole line is
    reversed, then Latin and number runs are turned back so they read as written, and brackets
    are mirrored. In a left-to-right paragraph only the right-to-left runs are reversed in place.
    Number runs separated by spaces stay separate (a Hebrew paragraph shows "2024 2025" as
    "2025 2024"); a run with Latin letters reads as one.
    """
    classes = [_bidi_class(c) for c in line]
    if rtl_paragraph is None:
        rtl_paragraph = classes.count("R") >= classes.count("L")
    if rtl_paragraph:
        return _reverse_rtl(line)
    out: list[str] = []
    pos = 0
    for start, end in _rtl_spans(classes):
        out.append(line[pos:start])
        out.append(_reverse_rtl(line[start:end]))
        pos = end
    out.append(line[pos:])
    return "".join(out)


def _bidi_class(char: str) -> str:
    """Collapsed bidi class: L (strong left-to-right), R, D (digit), T (terminator like %), N."""
    bidi = unicodedata.bidirectional(char)
    if bidi in ("R", "AL"):
        return "R"
    if bidi in ("EN", "AN"):
        return "D"
    if bidi == "ET":
        return "T"
    if bidi == "L":
        return "L"
    return "N"


def _reverse_rtl(text: str) -> str:
    """A visual right-to-left run in logical order: reversed, its Latin and number runs turned back."""
    rev = text[::-1]
    classes = [_bidi_class(c) for c in rev]
    out: list[str] = []
    pos = 0
    for start, end in _ltr_spans(classes):
        out.append(rev[pos:start].translate(_MIRROR))
        segment = rev[start:end]
        if "L" in classes[start:end]:
            out.append(segment[::-1])
        else:
            out.append(re.sub(r"\S+", lambda m: m.group()[::-1], segment))
        pos = end
    out.append(rev[pos:].translate(_MIRROR))
    return "".join(out)


def _ltr_spans(classes: Sequence[str]) -> Iterator[tuple[int, int]]:
    """Spans from a strong or digit char to the last such char before the next right-to-left char."""
    n = len(classes)
    i = 0
    while i < n:
        if classes[i] not in ("L", "D"):
            i += 1
            continue
        start = last = i
        j = i + 1
        while j < n and classes[j] != "R":
            if classes[j] in ("L", "D"):
                last = j
            j += 1
        while start > 0 and classes[start - 1] == "T" and classes[start] == "D":
            start -= 1
        end = last + 1
        while end < n and classes[end] == "T" and classes[end - 1] in ("D", "T"):
            end += 1
        yield start, end
        i = max(j, end)


def _rtl_spans(classes: Sequence[str]) -> Iterator[tuple[int, int]]:
    """Spans from a right-to-left char to the last one before the next strong left-to-right char."""
    n = len(classes)
    i = 0
    while i < n:
        if classes[i] != "R":
            i += 1
            continue
        start = last = i
        j = i + 1
        while j < n and classes[j] != "L":
            if classes[j] == "R":
                last = j
            j += 1
        yield start, last + 1
        i = j


# --- docx -------------------------------------------------------------------------------------------

_HEADING_STYLE = re.compile(r"^heading\s*(\d)$", re.I)


def _parse_docx(data: bytes) -> ParsedDocument:
    import docx
    from docx.table import Table
    from docx.text.paragraph import Paragraph

    document = docx.Document(io.BytesIO(data))
    body = document.element.body
    rendered = bool(body.xpath(".//w:lastRenderedPageBreak"))
    explicit = bool(body.xpath('.//w:br[@w:type="page"] | .//w:pPr/w:pageBreakBefore'))
    track_pages = rendered or explicit
    outline = _Outline()
    title_paragraph: str | None = None
    page = 1
    for item in document.iter_inner_content():
        if isinstance(item, Paragraph):
            before, after = _docx_breaks(item._p, rendered=rendered)
            page += before
            location = f"page {page}" if track_pages else None
            text = item.text.strip()
            level = _docx_heading_level(item)
            if level == 0:
                title_paragraph = title_paragraph or (" ".join(text.split()) or None)
            elif level is not None and text:
                outline.heading(level, text)
            elif text:
                outline.text(f"- {text}" if _docx_is_list(item) else text, location=location)
            page += after
        elif isinstance(item, Table):
            location = f"page {page}" if track_pages else None
            outline.table(_docx_rows(item), location=location)
            page += sum(_docx_breaks(item._tbl, rendered=rendered))
    meta_title = (document.core_properties.title or "").strip() or None
    return ParsedDocument(
        kind="docx",
        blocks=outline.blocks,
        meta_title=meta_title or title_paragraph,
        first_heading=outline.first_heading,
    )


def _docx_heading_level(paragraph: Any) -> int | None:
    """0 for the Title style, N for Heading N (or a style based on it, or an outline level), else None."""
    outline = paragraph._p.xpath("./w:pPr/w:outlineLvl/@w:val")
    if outline and str(outline[0]).isdigit() and int(outline[0]) < 9:
        return int(outline[0]) + 1
    style = paragraph.style
    for _ in range(4):
        if style is None:
            break
        name = str(style.name or "")
        if name.lower() == "title":
            return 0
        match = _HEADING_STYLE.match(name)
        if match:
            return int(match.group(1))
        style = style.base_style
    return None


def _docx_is_list(paragraph: Any) -> bool:
    if paragraph._p.xpath("./w:pPr/w:numPr"):
        return True
    style = paragraph.style
    return style is not None and str(style.name or "").lower().startswith("list")


def _docx_breaks(element: Any, *, rendered: bool) -> tuple[int, int]:
    """(page breaks before the element's first text, page breaks after it).

    Word saves where it last broke pages (``lastRenderedPageBreak``); when it did, those are used,
    else the explicit page breaks of the document.
    """
    from docx.oxml.ns import qn

    t_tag, rendered_tag, br_tag, before_tag = (
        qn("w:t"),
        qn("w:lastRenderedPageBreak"),
        qn("w:br"),
        qn("w:pageBreakBefore"),
    )
    before = after = 0
    seen_text = False
    for node in element.iter():
        tag = node.tag
        if tag == t_tag:
            seen_text = seen_text or bool((node.text or "").strip())
            continue
        is_break = (
            tag == rendered_tag
            if rendered
            else (tag == br_tag and node.get(qn("w:type")) == "page") or tag == before_tag
        )
        if is_break:
            if seen_text:
                after += 1
            else:
                before += 1
    return before, after


def _docx_rows(table: Any) -> list[list[str]]:
    rows: list[list[str]] = []
    for row in table.rows:
        cells: list[str] = []
        previous: Any = None
        for cell in row.cells:
            if previous is not None and cell._tc is previous:  # a merged cell repeats itself
                continue
            previous = cell._tc
            cells.append(cell.text)
        rows.append(cells)
    return rows


# --- pptx -------------------------------------------------------------------------------------------


def _parse_pptx(data: bytes) -> ParsedDocument:
    import pptx

    presentation = pptx.Presentation(io.BytesIO(data))
    blocks: list[Block] = []
    first_title: str | None = None
    count = 0
    for number, slide in enumerate(presentation.slides, start=1):
        count = number
        location = f"slide {number}"
        title_shape = slide.shapes.title
        title = " ".join(title_shape.text_frame.text.split()) if title_shape is not None else ""
        first_title = first_title or title or None
        title_id = title_shape.shape_id if title_shape is not None else None
        lines: list[str] = []
        tables: list[str] = []
        for shape in _pptx_shapes(slide.shapes):
            if shape.shape_id == title_id:
                continue
            if getattr(shape, "has_table", False) and shape.has_table:
                tables.append(table_markdown([[c.text for c in row.cells] for row in shape.table.rows]))
            elif shape.has_text_frame:
                for paragraph in shape.text_frame.paragraphs:
                    text = " ".join(paragraph.text.split())
                    if text:
                        lines.append(("  " * paragraph.level) + text)
        body = "\n".join(lines) if lines else ("" if tables else title)
        if body:
            blocks.append(Block(text=body, heading=title, location=location))
        blocks.extend(Block(text=t, heading=title, location=location, is_table=True) for t in tables if t)
    meta_title = (presentation.core_properties.title or "").strip() or None
    return ParsedDocument(
        kind="pptx", blocks=blocks, meta_title=meta_title, first_heading=first_title, units=count
    )


def _pptx_shapes(shapes: Iterable[Any]) -> Iterator[Any]:
    """Every shape of a slide in order, group shapes opened."""
    from pptx.enum.shapes import MSO_SHAPE_TYPE

    for shape in shapes:
        if shape.shape_type == MSO_SHAPE_TYPE.GROUP:
            yield from _pptx_shapes(shape.shapes)
        else:
            yield shape


# --- html -------------------------------------------------------------------------------------------

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
        self.outline = _Outline()
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


def _parse_html(text: str) -> ParsedDocument:
    parser = _HtmlExtractor()
    parser.feed(text)
    parser.close()
    return ParsedDocument(
        kind="html",
        blocks=parser.outline.blocks,
        meta_title=parser.title,
        first_heading=parser.outline.first_heading,
    )


# --- markdown ---------------------------------------------------------------------------------------

_FRONT_MATTER = re.compile(r"\A---[ \t]*\n(.*?)\n(?:---|\.\.\.)[ \t]*(?:\n|\Z)", re.S)
_FRONT_TITLE = re.compile(r"^title:[ \t]*(.+?)[ \t]*$", re.M)
_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(```|~~~)")
_LIST_OR_TABLE = re.compile(r"^\s*(?:[-*+]\s|\d+[.)]\s|\||>)")


def _parse_markdown(text: str) -> ParsedDocument:
    text = _normalise_text(text)
    meta_title: str | None = None
    front = _FRONT_MATTER.match(text)
    if front:
        found = _FRONT_TITLE.search(front.group(1))
        if found:
            meta_title = found.group(1).strip().strip("\"'") or None
        text = text[front.end() :]
    outline = _Outline()
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
