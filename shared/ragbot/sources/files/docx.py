"""Word files as pages: headings by paragraph style, tables whole, list items, ``page N`` when saved.

Headings come from the paragraph style (``Heading N``, a style based on it, or an outline level);
tables are kept whole as ``| a | b |`` rows, list items become ``- item``, and blocks are located
``page N`` when Word saved its page breaks.
"""

from __future__ import annotations

import io
import re
from typing import Any

from ragbot.sources.files.document import Outline, ParsedDocument

_HEADING_STYLE = re.compile(r"^heading\s*(\d)$", re.I)


def parse_docx(data: bytes) -> ParsedDocument:
    """A Word document's headings, paragraphs, lists and tables in reading order."""
    import docx
    from docx.table import Table
    from docx.text.paragraph import Paragraph

    document = docx.Document(io.BytesIO(data))
    body = document.element.body
    rendered = bool(body.xpath(".//w:lastRenderedPageBreak"))
    explicit = bool(body.xpath('.//w:br[@w:type="page"] | .//w:pPr/w:pageBreakBefore'))
    track_pages = rendered or explicit
    outline = Outline()
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
