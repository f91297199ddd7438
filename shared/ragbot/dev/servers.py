"""Local development servers: a wiki that answers like the content API, and services as child processes.

``LocalWiki`` serves page records shaped like ``samples/kolzchut/pages.jsonl`` on
``GET /w/rest.php/cbragcontent/v0/page_id/<id>`` (404 when the page is unknown, or whatever status a
caller forces with ``fail``) from a daemon thread. ``ServiceProcess`` runs one ``python -m <module>``
child, waits on its health endpoint and stops it cleanly. ``make run`` and the end-to-end tests use both.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import httpx

CONTENT_PATH = "/w/rest.php/cbragcontent/v0/page_id/"
# The page list ChatbotRagContent's maintenance/GetRelevantPageIds.php --output=json prints, served
# as a wiki might serve a cron's copy of it: a JSON array of the page ids the wiki wants indexed.
RELEVANT_IDS_PATH = "/relevant_page_ids.json"
# The answer mode ``make run`` gives the web UI, the native API and the Kol-Zchut routes when the only
# LLM is the embedded one (RAGBOT_CHAT_LLM_BACKEND=llamacpp): chosen by bench/answers/modes.py, see
# docs/benchmarks.md "Answers". An explicit RAGBOT_CHAT_DEFAULT_MODE / _KOLZCHUT_MODE wins.
EMBEDDED_LLM_MODE = "quote"
# The scripts whose questions ``make run`` searches with e5's query side tuned on Kol-Zchut's questions
# (RAGBOT_RETRIEVER_QUERY_TUNING_SCRIPTS; the library's default is Latin only): Hebrew too since the
# check on fresh35-fresh36 (docs/benchmarks.md). bench/answers/memory_rule.py answers as make run does.
TUNED_SCRIPTS = ("latin", "hebrew")


def load_pages(path: Path) -> list[dict[str, Any]]:
    """Page records from a JSONL file (one content-API body per line)."""
    with path.open(encoding="utf-8") as lines:
        return [json.loads(line) for line in lines if line.strip()]


class LocalWiki:
    """The content API over an in-memory dict of pages; callers change pages and failures live."""

    def __init__(
        self, pages: Iterable[Mapping[str, Any]] = (), *, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        self.pages: dict[int, dict[str, Any]] = {int(p["page_id"]): dict(p) for p in pages}
        self.failures: dict[int, int] = {}
        self.hits: Counter[int] = Counter()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer((host, port), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="local-wiki", daemon=True)

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

    def start(self) -> LocalWiki:
        """Serve in the background."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and free the port."""
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> LocalWiki:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def list_url(self) -> str:
        """Where the wiki's page list is (GetRelevantPageIds.php's JSON output)."""
        return self.base_url + RELEVANT_IDS_PATH

    def _answer(self, path: str) -> tuple[int, bytes]:
        if path.split("?", 1)[0] == RELEVANT_IDS_PATH:
            with self._lock:
                ids = sorted(self.pages)
            return 200, json.dumps(ids).encode("utf-8")
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
            return forced, b'{"error":"forced by the caller"}'
        if page is None:  # ChatbotRagContent's own not-found body
            body = {
                "message": f"Invalid page ID provided: {page_id}",
                "httpCode": 404,
                "httpReason": "Not Found",
            }
            return 404, json.dumps(body).encode("utf-8")
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
                """Keep the terminal and test output quiet."""

        return Handler


# Ports handed out below Linux's ephemeral range (32768-60999 by default), so that no outgoing connection
# (to Redis, Elasticsearch, a model server) can take one between the check and the child's bind, and
# never the same one twice in a process.
_PORT_RANGE = range(20000, 32000)
_handed_out: set[int] = set()
_port_lock = threading.Lock()


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on now, outside the ephemeral range, not handed out before."""
    with _port_lock:
        candidates = [port for port in _PORT_RANGE if port not in _handed_out]
        random.shuffle(candidates)
        for port in candidates:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                try:
                    sock.bind(("127.0.0.1", port))
                except OSError:
                    continue
            _handed_out.add(port)
            return port
    raise RuntimeError(f"no free TCP port on 127.0.0.1 in {_PORT_RANGE.start}-{_PORT_RANGE.stop - 1}")


@dataclass
class ServiceProcess:
    """One ``python -m <module>`` child with its log file and health URL."""

    name: str
    module: str
    env: Mapping[str, str]
    health_url: str
    log_path: Path
    cwd: Path | None = None
    args: Sequence[str] = ()
    process: subprocess.Popen[bytes] | None = field(default=None, init=False)
    _log: IO[bytes] | None = field(default=None, init=False)

    def start(self) -> ServiceProcess:
        """Spawn the process in its own process group, logs to ``log_path``."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", self.module, *self.args],
            env=dict(self.env),
            cwd=self.cwd,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        return self

    def alive(self) -> bool:
        """True while the process runs."""
        return self.process is not None and self.process.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        """The end of the process's log, for failure messages."""
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def wait_healthy(self, *, timeout_s: float) -> None:
        """Poll the health URL until it answers 200; fail early if the process exits."""
        deadline = time.monotonic() + timeout_s
        last = "no answer yet"
        while time.monotonic() < deadline:
            if not self.alive():
                code = self.process.returncode if self.process else None
                raise RuntimeError(
                    f"{self.name} exited with {code} before it was healthy:\n{self.log_tail()}"
                )
            try:
                response = httpx.get(self.health_url, timeout=2.0)
                if response.status_code == 200:
                    return
                last = f"HTTP {response.status_code}"
            except httpx.HTTPError as exc:
                last = repr(exc)
            time.sleep(0.25)
        raise RuntimeError(f"{self.name} not healthy after {timeout_s:.0f} s ({last}):\n{self.log_tail()}")

    def stop(self, *, grace_s: float = 20.0) -> int | None:
        """SIGTERM the process group, SIGKILL after ``grace_s``; returns the exit code."""
        proc = self.process
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        if self._log is not None:
            self._log.close()
            self._log = None
        return proc.returncode if proc is not None else None


def local_service(
    name: str,
    *,
    module: str,
    port: int,
    env: Mapping[str, str],
    log_dir: Path,
    cwd: Path | None = None,
    health: str = "healthz",
) -> ServiceProcess:
    """A service on 127.0.0.1:``port`` checked at ``/<health>``, logging to ``<log_dir>/<name>.log``."""
    return ServiceProcess(
        name=name,
        module=module,
        env=env,
        health_url=f"http://127.0.0.1:{port}/{health}",
        log_path=log_dir / f"{name}.log",
        cwd=cwd,
    )
