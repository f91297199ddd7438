"""The web UI's server side: pages and static files, and the same-origin proxies to ingest and the
retriever (allow-list, forwarding, streamed uploads, upstream failures), against httpx.MockTransport."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import cast

import httpx
import pytest
import redis.asyncio as aioredis
from fastapi.testclient import TestClient
from support.chat_fakes import ScriptedLLM, StaticRetriever

from ragbot.settings import ChatSettings
from ragbot_chat.app import assemble, create_app
from ragbot_chat.deps import Resources
from ragbot_chat.ui import INGEST_ROUTES, STATIC_DIR, ingest_allowed

INGEST = "http://ingest.test:8001"
RETRIEVER = "http://retriever.test:8002"


@dataclass
class Upstream:
    """What the proxies sent, and how the fake upstream answers."""

    requests: list[httpx.Request] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)
    down: bool = False

    def handle(self, request: httpx.Request) -> httpx.Response:
        if self.down:
            raise httpx.ConnectError("connection refused", request=request)
        self.requests.append(request)
        self.bodies.append(request.content)
        if request.url.path == "/v1/retrieve":
            if b'"query"' not in request.content:
                return httpx.Response(422, json={"detail": [{"loc": ["body", "query"], "msg": "missing"}]})
            return httpx.Response(200, json={"documents": [], "debug": {}, "timings_ms": {"total": 1.0}})
        return httpx.Response(
            202 if request.method == "POST" else 200,
            json={"path": request.url.path, "query": str(request.url.query, "ascii")},
        )


@pytest.fixture
def upstream() -> Upstream:
    return Upstream()


@pytest.fixture
def client(upstream: Upstream) -> Iterator[TestClient]:
    settings = ChatSettings(ingest_url=INGEST + "/", retriever_url=RETRIEVER)

    @asynccontextmanager
    async def resources() -> AsyncIterator[Resources]:
        yield assemble(
            settings=settings,
            llm=ScriptedLLM(),
            retriever=StaticRetriever(),
            redis_client=cast(aioredis.Redis, None),
            key_prefix="unit-ui",
        )

    app = create_app(resources=resources)
    app.state.ui_transport = httpx.MockTransport(upstream.handle)
    with TestClient(app) as test_client:
        yield test_client


@pytest.mark.parametrize(
    ("path", "script"), [("/", "chat.js"), ("/documents", "documents.js"), ("/admin", "admin.js")]
)
def test_each_page_is_served_with_its_module_and_a_strict_policy(
    client: TestClient, path: str, script: str
) -> None:
    response = client.get(path)
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/html")
    assert f'<script type="module" src="/ui/static/js/{script}">' in response.text
    policy = response.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "connect-src 'self'" in policy and "unsafe-inline" not in policy
    assert 'href="/ui/static/css/ui.css"' in response.text


def test_static_files_are_served_as_modules_and_css(client: TestClient) -> None:
    js = client.get("/ui/static/js/markdown.js")
    assert js.status_code == 200 and "javascript" in js.headers["content-type"]
    assert "export function renderMarkdown" in js.text
    assert client.get("/ui/static/css/ui.css").headers["content-type"].startswith("text/css")
    assert client.get("/ui/static/js/nope.js").status_code == 404


def test_every_referenced_static_file_exists() -> None:
    for page in ("index.html", "documents.html", "admin.html"):
        text = (STATIC_DIR / page).read_text(encoding="utf-8")
        for ref in ("css/ui.css", "js/common.js", "js/markdown.js"):
            assert (STATIC_DIR / ref).is_file(), ref
        assert "style=" not in text, f"{page}: inline styles break the content security policy"


def test_ingest_calls_are_forwarded_with_their_query_and_request_id(
    client: TestClient, upstream: Upstream
) -> None:
    response = client.get(
        "/ui/api/ingest/v1/jobs", params={"state": "failed", "limit": 5}, headers={"X-Request-ID": "rid-ui-1"}
    )
    assert response.status_code == 200, response.text
    assert response.json() == {"path": "/v1/jobs", "query": "state=failed&limit=5"}
    sent = upstream.requests[-1]
    assert str(sent.url).startswith(f"{INGEST}/v1/jobs?") and sent.headers["x-request-id"] == "rid-ui-1"
    assert "cookie" not in sent.headers
    retried = client.post("/ui/api/ingest/v1/jobs/abc123:2/retry")
    assert retried.status_code == 202 and retried.json()["path"] == "/v1/jobs/abc123:2/retry"
    assert client.get("/ui/api/ingest/v1/pages/42").json()["path"] == "/v1/pages/42"


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/ui/api/ingest/v1/pages/changed"),
        ("POST", "/ui/api/ingest/v1/reindex"),
        ("GET", "/ui/api/ingest/metrics"),
        ("GET", "/ui/api/ingest/v1/documents"),
        ("GET", "/ui/api/ingest/v1/jobs/../../admin"),
        ("POST", "/ui/api/ingest/v1/pages"),
    ],
)
def test_calls_outside_the_allow_list_are_refused_without_reaching_ingest(
    client: TestClient, upstream: Upstream, method: str, path: str
) -> None:
    response = client.request(method, path)
    assert response.status_code in (404, 405), response.text
    assert upstream.requests == []


def test_the_allow_list_is_exact() -> None:
    assert ingest_allowed("POST", "v1/documents") and not ingest_allowed("GET", "v1/documents")
    assert ingest_allowed("GET", "v1/pages") and not ingest_allowed("GET", "v1/pages/x")
    assert not ingest_allowed("DELETE", "v1/pages/1") and len(INGEST_ROUTES) == 6


def test_uploads_reach_ingest_as_the_same_multipart_body(client: TestClient, upstream: Upstream) -> None:
    content = "# Title\n\nשלום עולם\n".encode() * 1000
    response = client.post(
        "/ui/api/ingest/v1/documents", files={"file": ("notes.md", content, "text/markdown")}
    )
    assert response.status_code == 202, response.text
    sent = upstream.requests[-1]
    assert sent.headers["content-type"].startswith("multipart/form-data; boundary=")
    assert content in upstream.bodies[-1]
    assert int(sent.headers["content-length"]) == len(upstream.bodies[-1])


def test_ingest_down_is_503_naming_it(client: TestClient, upstream: Upstream) -> None:
    upstream.down = True
    response = client.get("/ui/api/ingest/v1/pages")
    assert response.status_code == 503
    assert response.json()["dependency"] == "ingest" and INGEST in response.json()["detail"]


def test_retrieve_is_forwarded_and_upstream_errors_pass_through(
    client: TestClient, upstream: Upstream
) -> None:
    ok = client.post("/ui/api/retrieve", json={"query": "tax", "retrieval_size": 5})
    assert ok.status_code == 200 and ok.json()["timings_ms"] == {"total": 1.0}
    assert str(upstream.requests[-1].url) == f"{RETRIEVER}/v1/retrieve"
    bad = client.post("/ui/api/retrieve", json={"retrieval_size": 5})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["body", "query"]
    assert client.get("/ui/api/models").status_code == 200
    assert str(upstream.requests[-1].url) == f"{RETRIEVER}/v1/models"
