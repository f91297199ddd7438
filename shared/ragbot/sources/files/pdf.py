"""PDF files as pages: one block per page, headings from the outline, paragraphs from line gaps.

Each block is located ``page N``; its heading is the outline (bookmark) entry that starts on or before
the page when the PDF has one; a blank line goes where the vertical gap between lines says a paragraph
starts. Text is taken in the order its glyphs are stored, and lines whose Hebrew was stored in visual
order (reversed, as many producers write right-to-left text) are put back in logical order
(``ragbot.sources.files.bidi``).
"""

from __future__ import annotations

import io
import logging
import re
import time
from collections.abc import Iterable, Sequence
from pathlib import PurePath
from typing import Any

from ragbot.schemas.pages import Block
from ragbot.sources.detect import refuse
from ragbot.sources.files.bidi import fix_rtl_pages
from ragbot.sources.files.document import ParsedDocument, normalise_text

logger = logging.getLogger(__name__)


_UNHELPFUL_TITLE = re.compile(r"^(?:microsoft\s+\w+\s+-\s+|untitled)|\.(?:docx?|pdf|pptx?|odt|rtf)$", re.I)
_SPACES = re.compile(r"[ \t\u00a0]+")
_PYPDF_RTL = re.compile("[\u0590-\u08ff\ufb1d-\ufdff\ufe70-\ufeff]")  # what pypdf reverses
_PARAGRAPH_GAP = 1.6  # a line this many font sizes below the last one starts a paragraph
_BLANK_LINES = re.compile(r"\n{3,}")


def _declared_pages(reader: Any) -> int:
    """The page count the page tree's root declares (0 when absent), read without walking the tree."""
    try:
        return int(reader.trailer["/Root"]["/Pages"].get("/Count", 0))
    except Exception:  # a broken root is found by the walk that follows
        return 0


def parse_pdf(data: bytes, *, filename: str, max_pages: int, max_seconds: float = 60.0) -> ParsedDocument:
    """A PDF's pages as blocks; refuses an encrypted, empty, unreadable, over-long or too slow one.

    The declared page count is checked before the page tree is walked (a huge tree costs nothing), the
    walked count after, and text extraction stops with a refusal once it has taken ``max_seconds``.
    """
    from pypdf import PdfReader

    started = time.monotonic()

    reader = PdfReader(io.BytesIO(data), strict=False)
    if reader.is_encrypted:
        try:
            opened = bool(reader.decrypt(""))
        except Exception:  # an unsupported encryption method is as unreadable as a password
            opened = False
        if not opened:
            raise refuse(filename, "the PDF is encrypted (password protected)")
    declared = _declared_pages(reader)
    if declared > max_pages:
        raise refuse(filename, f"the PDF declares {declared} pages (limit {max_pages}): split it")
    count = len(reader.pages)
    if count == 0:
        raise refuse(filename, "the file is corrupt or unreadable as pdf (no pages)")
    if count > max_pages:
        raise refuse(filename, f"the PDF has {count} pages (limit {max_pages})")
    headings = _pdf_outline_headings(reader, count)
    texts: list[str] = []
    unreadable = 0
    for number, page in enumerate(reader.pages, start=1):
        if time.monotonic() - started > max_seconds:
            raise refuse(
                filename,
                f"reading the PDF took over {max_seconds:.0f} s (stopped at page {number}): split it.",
            )
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
    lines = [_SPACES.sub(" ", line).strip() for line in normalise_text("".join(out)).split("\n")]
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
