"""One uploaded file to one ``Page``: its kind detected by content, its parser run, or a refusal."""

from __future__ import annotations

import hashlib
import logging
from datetime import datetime
from pathlib import PurePath
from typing import Any

from pydantic import ValidationError

from ragbot.errors import ValidationFailed
from ragbot.schemas.limits import MAX_CONTENT_CHARS, MAX_TITLE_CHARS
from ragbot.schemas.pages import Block, Page, PageSourceKind
from ragbot.sources.detect import DocumentKind, ZipLimits, decode_text, detect_kind, refuse, safe_filename
from ragbot.sources.files.document import ParsedDocument, normalise_text
from ragbot.sources.files.docx import parse_docx
from ragbot.sources.files.html import parse_html
from ragbot.sources.files.markdown import parse_markdown
from ragbot.sources.files.pdf import parse_pdf
from ragbot.sources.files.pptx import parse_pptx

logger = logging.getLogger(__name__)


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
        "filename": safe_filename(filename),
        "file_type": parsed.kind,
        "sha256": hashlib.sha256(data).hexdigest(),
        "bytes": len(data),
    }
    if parsed.units is not None:
        extra["pages" if parsed.kind == "pdf" else "slides"] = parsed.units
    content = "\n\n".join(b.text for b in blocks)
    if len(content) > MAX_CONTENT_CHARS:
        raise refuse(filename, f"its text is {len(content)} characters, over the {MAX_CONTENT_CHARS} limit")
    try:
        return Page(
            page_id=page_id,
            revision_id=revision_id,
            revision_date=revision_date,
            title=((title or "").strip() or stable_title(parsed, filename=filename))[:MAX_TITLE_CHARS],
            url=url,
            content=content,
            source=source,
            blocks=blocks,
            extra=extra,
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(map(str, first["loc"]))
        raise refuse(filename, f"cannot index it: {where}: {first['msg']}") from None


def stable_title(parsed: ParsedDocument, *, filename: str) -> str:
    """The document's title metadata, else its first heading, else the file name without extension."""
    for candidate in (parsed.meta_title, parsed.first_heading):
        if candidate and candidate.strip():
            return " ".join(candidate.split())
    path = PurePath(safe_filename(filename))
    return path.stem or path.name or "untitled"


def extract_document(
    data: bytes, *, filename: str, zip_limits: ZipLimits | None = None, max_pdf_pages: int = 5000
) -> ParsedDocument:
    """Detect the kind by content and run its parser; vendor errors become a 'corrupt file' refusal."""
    kind = detect_kind(data, filename=filename, zip_limits=zip_limits)
    try:
        if kind == "pdf":
            return parse_pdf(data, filename=filename, max_pages=max_pdf_pages)
        if kind == "docx":
            return parse_docx(data)
        if kind == "pptx":
            return parse_pptx(data)
        text = decode_text(data, filename=filename)
        if kind == "html":
            return parse_html(text)
        if kind == "md":
            return parse_markdown(text)
        return ParsedDocument(kind="txt", blocks=[Block(text=normalise_text(text))])
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
