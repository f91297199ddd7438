"""Uploaded files as pages: pdf, docx, pptx, html, md and txt into ``Page.blocks`` with their places.

``parse_upload`` (``parse.py``) refuses what it cannot index with ``ValidationFailed(field="file")``
and a message a user can act on: an empty file, one over the size cap, an unsupported type, a corrupt
file, a zip bomb. The kind is decided by content (``ragbot.sources.detect``), never by the extension
alone. One module per format says what that kind keeps: ``pdf``, ``docx``, ``pptx``, ``html`` and
``markdown`` (txt is its text); ``bidi`` puts Hebrew stored in visual order back in logical order,
and ``document`` holds what every parser returns.

The page title is the document's own title metadata, else its first heading, else the file name.
"""

from ragbot.sources.files.bidi import fix_rtl_order, fix_rtl_pages, rtl_vote, visual_to_logical
from ragbot.sources.files.document import ParsedDocument, table_markdown
from ragbot.sources.files.parse import extract_document, parse_upload, stable_title

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
