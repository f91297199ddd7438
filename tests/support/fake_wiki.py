"""A local HTTP server that answers like the wiki's content API (ChatbotRagContent).

``GET /w/rest.php/cbragcontent/v0/page_id/<id>`` returns the page's record as JSON, 404 when the page
is unknown (left scope), or whatever status a test forces with ``fail``. Records are shaped like
``samples/kolzchut/pages.jsonl``. The server runs in a daemon thread on 127.0.0.1.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any

CONTENT_PATH = "/w/rest.php/cbragcontent/v0/page_id/"
SAMPLES = Path(__file__).resolve().parents[2] / "samples" / "kolzchut" / "pages.jsonl"


def load_pages(path: Path = SAMPLES) -> list[dict[str, Any]]:
    """Page records from a JSONL file (one content-API body per line)."""
    with path.open(encoding="utf-8") as lines:
        return [json.loads(line) for line in lines if line.strip()]


class FakeWiki:
    """The content API over an in-memory dict of pages; tests change pages and failures live."""

    def __init__(
        self, pages: Iterable[Mapping[str, Any]] = (), *, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        self.pages: dict[int, dict[str, Any]] = {int(p["page_id"]): dict(p) for p in pages}
        self.failures: dict[int, int] = {}
        self.hits: Counter[int] = Counter()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer((host, port), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-wiki", daemon=True)

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def callback_url(self) -> str:
        """What a ping carries: the content API base, the page id is appended."""
        return self.base_url + CONTENT_PATH

    def ping(self, page_id: int, *, revision_id: int | None = None) -> dict[str, Any]:
        """The ping the wiki would send for a page (its current revision unless given)."""
        page = self.pages.get(page_id, {})
        return {
            "page_id": page_id,
            "revision_id": revision_id if revision_id is not None else int(page.get("revision_id", 1)),
            "revision_date": str(page.get("revision_date", "20250101000000")),
            "callback_url": self.callback_url,
        }

    def put(self, page: Mapping[str, Any]) -> None:
        """Add or replace a page."""
        with self._lock:
            self.pages[int(page["page_id"])] = dict(page)

    def remove(self, page_id: int) -> None:
        """Make a page answer 404 (deleted, moved, excluded)."""
        with self._lock:
            self.pages.pop(page_id, None)

    def fail(self, page_id: int, status: int | None) -> None:
        """Force a status for a page (None clears it)."""
        with self._lock:
            if status is None:
                self.failures.pop(page_id, None)
            else:
                self.failures[page_id] = status

    def start(self) -> FakeWiki:
        """Serve in the background."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and free the port."""
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FakeWiki:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _answer(self, path: str) -> tuple[int, bytes]:
        if not path.startswith(CONTENT_PATH):
            return 404, b'{"error":"no such route"}'
        tail = path[len(CONTENT_PATH) :].split("?", 1)[0]
        if not tail.isdigit():
            return 400, b'{"error":"page id must be a number"}'
        page_id = int(tail)
        with self._lock:
            self.hits[page_id] += 1
            forced = self.failures.get(page_id)
            page = self.pages.get(page_id)
        if forced is not None:
            return forced, b'{"error":"forced by the test"}'
        if page is None:
            return 404, b'{"error":"page not found or out of scope"}'
        return 200, json.dumps(page, ensure_ascii=False).encode("utf-8")

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        wiki = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                status, body = wiki._answer(self.path)
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                """Keep test output quiet."""

        return Handler
