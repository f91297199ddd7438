"""The local content-API wiki (``ragbot.dev.servers.LocalWiki``) under its test name, samples default.

``GET /w/rest.php/cbragcontent/v0/page_id/<id>`` returns the page's record as JSON, 404 when the page
is unknown (left scope), or whatever status a test forces with ``fail``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ragbot.dev import servers as devserver
from ragbot.dev.servers import CONTENT_PATH
from ragbot.dev.servers import LocalWiki as FakeWiki

__all__ = ["CONTENT_PATH", "SAMPLES", "FakeWiki", "load_pages"]

SAMPLES = Path(__file__).resolve().parents[2] / "samples" / "kolzchut" / "pages.jsonl"


def load_pages(path: Path = SAMPLES) -> list[dict[str, Any]]:
    """Page records from a JSONL file (the Kol-Zchut samples unless given)."""
    return devserver.load_pages(path)
