"""The bounds every API body, path and query parameter shares, sized to what the stores can hold."""

from __future__ import annotations

MAX_INT64 = 2**63 - 1
"""The largest integer any store holds (SQLite INTEGER, Elasticsearch ``long``); JSON beyond it is refused."""
MAX_PAGE_ID = 2**31 - 1
"""Page ids are an Elasticsearch ``integer`` in the definition file (and MediaWiki's are 32-bit)."""
PAGE_IDS_START_AT_1 = "page ids start at 1 (MediaWiki page ids are positive)"
"""Why a page id below 1 is refused: pushes, uploads, reindex lines, GET and DELETE /v1/pages/{id}
(the only 0 ragbot takes is ChatbotRagContent's delete ping, which names no page)."""


def positive_page_id(value: int) -> int:
    """``value`` when it is a page id a page can have (1 and up), else ``ValueError`` saying so."""
    if value < 1:
        raise ValueError(PAGE_IDS_START_AT_1)
    return value


MAX_REVISION_ID = MAX_INT64
MAX_NAMESPACE = 2**31 - 1
MAX_OFFSET = 1_000_000
"""How far into a listing (pages, jobs) a window may start."""
MAX_TITLE_CHARS = 1_000
MAX_CONTENT_CHARS = 32 * 1024 * 1024
"""A page's text; above the upload cap so any accepted file's text fits."""
MAX_SUMMARY_CHARS = 100_000
MAX_CATEGORIES = 1_000
MAX_JSON_DEPTH = 32
"""Arrays and objects nested deeper than this are refused before any model sees the body."""
MAX_JSON_BODY_BYTES = 64 * 1024 * 1024
"""A JSON body larger than this is refused with a 413 (uploads and JSONL reindex are not JSON bodies)."""
