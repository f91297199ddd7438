"""PowerPoint files as pages: one block per slide, located ``slide N``, its title as heading, tables whole."""

from __future__ import annotations

import io
from collections.abc import Iterable, Iterator
from typing import Any

from ragbot.schemas.pages import Block
from ragbot.sources.files.document import ParsedDocument, table_markdown


def parse_pptx(data: bytes) -> ParsedDocument:
    """A presentation's slides as blocks, each under its slide title."""
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
