"""The local content-API wiki (``ragbot.dev.servers.LocalWiki``) under its test name, samples default.

``GET /w/rest.php/cbragcontent/v0/page_id/<id>`` returns the page's record as JSON, 404 with the
extension's own not-found body when the page is unknown (left scope), or whatever status a test forces
with ``fail``. Serve ``load_pages(CAPTURED)`` for bodies shaped as the real extension sends them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ragbot.dev import servers as devserver
from ragbot.dev.servers import CONTENT_PATH
from ragbot.dev.servers import LocalWiki as FakeWiki

__all__ = ["CAPTURED", "CONTENT_PATH", "SAMPLES", "FakeWiki", "load_pages"]

SAMPLES = Path(__file__).resolve().parents[2] / "samples" / "kolzchut" / "pages.jsonl"
# Bodies the real ChatbotRagContent extension answered (tag-stripped ``content`` plus ``contentHtml``,
# categories as a list); tests/fixtures/kolzchut-content-api/README.md describes their shape.
CAPTURED = Path(__file__).resolve().parents[1] / "fixtures" / "kolzchut-content-api" / "bodies.jsonl"


def load_pages(path: Path = SAMPLES) -> list[dict[str, Any]]:
    """Page records from a JSONL file (the Kol-Zchut samples unless given)."""
    return devserver.load_pages(path)
