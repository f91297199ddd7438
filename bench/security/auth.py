"""Auth figures for the security report: writes accepted without a proper key, and what auth adds to
``/v1/retrieve``.

``unauthenticated_writes_accepted`` (target 0): every write route (POST, PUT, PATCH, DELETE) of the
ingest and chat apps' own route tables (the sign-in form excepted), with keys configured and no trusted
network, tried without credentials and with a key of the wrong scope; a response that is neither 401
nor 403 counts as accepted. ``auth_writes_tried`` is how many requests that was.

``auth_overhead_p50_ms`` (target <= 1 ms): the p50 of ``POST /v1/retrieve`` on a retriever app with a
key configured and sent as ``Authorization: Bearer``, minus the p50 on the same app built with
``RAGBOT_AUTH_ENABLED=false``; both in this process over the ASGI transport, requests alternating
between the two, over a small in-memory store with a hash embedder (so the difference is the auth
layer, not retrieval noise).

The hostile figures of issue 28, against real Redis (``RAGBOT_TEST_REDIS_URL``):

- ``guest_denied_routes``: how many of the routes a guest of the open chat page must not use
  (``support.hostile_cases.GUEST_DENIED``: config, MCP, the OpenAI endpoint, ``/search``, pings,
  another's conversation, ...) refused it, out of ``guest_routes_tried`` (target: all);
- ``signed_out_session_accepted``: requests an admin session's cookies still got through after
  ``POST /ui/signout`` (target 0);
- ``cross_service_cookie_accepted``: requests chat's admin cookies got through on ingest (target 0);
- ``header_bomb_status``: the status of a request with a 64 KiB header on a real ingest process
  (target 431);
- ``host_header_reflected``: answers to ``Host: evil.example`` that repeat it (target 0).

Run: ``uv run python -m bench.security.auth``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI
from fastapi.testclient import TestClient

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from support.auth import KEYS, auth_settings, chat_app, ingest_app, write_routes  # noqa: E402
from support.fakes import HashEmbedder, MemoryStore  # noqa: E402
from support.hostile_cases import GUEST_DENIED, SESSION  # noqa: E402
from support.processes import free_port, local_service, service_env  # noqa: E402

from ragbot.definition import parse_definition  # noqa: E402
from ragbot.http.auth import CSRF_COOKIE, CSRF_HEADER  # noqa: E402
from ragbot.ports import StoredParagraph  # noqa: E402
from ragbot.retrieval import RetrievalDefaults, RetrievalEngine  # noqa: E402
from ragbot.settings import AuthSettings, HttpSettings  # noqa: E402

WRONG_SCOPE = {"ingest": "kzchatbot", "chat": "prometheus"}
DEFINITION = parse_definition(
    {
        "identifier_field": "page_id",
        "saved_fields": {"title": "text", "page_id": "integer", "content": "text"},
        "field_for_llm": "content",
        "models": {"mini": "content"},
    }
)


def unauthenticated_writes() -> tuple[int, int]:
    """(accepted, tried) over every write route of ingest and chat."""
    accepted = tried = 0
    for service, build in (("ingest", ingest_app), ("chat", chat_app)):
        app = build(auth_settings())
        wrong = {"Authorization": f"Bearer {KEYS[WRONG_SCOPE[service]][0]}"}
        with TestClient(app, base_url="http://127.0.0.1") as client:
            for method, path in write_routes(app):
                for headers in ({}, wrong):
                    status = client.request(method, path, json={}, headers=headers).status_code
                    tried += 1
                    accepted += status not in (401, 403)
    return accepted, tried


def retriever_app(auth: AuthSettings) -> FastAPI:
    """The retriever over 40 paragraphs in memory and a hash embedder."""
    from ragbot_retriever.app import create_app
    from ragbot_retriever.deps import Resources

    embedder = HashEmbedder("mini", dimension=32, max_tokens=128)
    paragraphs = []
    for page_id in range(1, 11):
        for n in range(4):
            fields: dict[str, Any] = {"page_id": page_id, "title": f"page {page_id}", "content": f"text {n}"}
            [vector] = embedder.embed_passages([fields["content"]])
            paragraphs.append(
                StoredParagraph(f"{page_id}-1-{n}", page_id, 1, n, fields, {"content_mini_vectors": vector})
            )
    store = MemoryStore(paragraphs)

    @asynccontextmanager
    async def resources() -> AsyncIterator[Resources]:
        engine = RetrievalEngine(
            store=store, embedders={"mini": embedder}, definition=DEFINITION, defaults=RetrievalDefaults()
        )
        yield Resources(engine=engine, store=store, embedders={"mini": embedder}, definition=DEFINITION)

    return create_app(resources=resources, auth=auth)


async def retrieve_p50s(rounds: int = 1500) -> tuple[float, float]:
    """(p50 ms with auth on, p50 ms with auth off), requests alternating between the two apps."""
    on, off = retriever_app(auth_settings()), retriever_app(AuthSettings(enabled=False))
    headers = {"Authorization": f"Bearer {KEYS['chat-service'][0]}"}
    body = {"query": "text 2", "mode": "hybrid"}
    times: dict[str, list[float]] = {"on": [], "off": []}
    async with on.router.lifespan_context(on), off.router.lifespan_context(off):
        clients = {
            name: httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app, client=("10.9.9.9", 5000)), base_url="http://127.0.0.1"
            )
            for name, app in (("on", on), ("off", off))
        }
        for n in range(rounds + 100):
            for name, client in clients.items():
                start = time.perf_counter()
                response = await client.post("/v1/retrieve", json=body, headers=headers)
                elapsed = (time.perf_counter() - start) * 1000
                if response.status_code != 200:
                    raise RuntimeError(f"{name}: {response.status_code} {response.text}")
                if n >= 100:  # the first 100 rounds warm up
                    times[name].append(elapsed)
        for client in clients.values():
            await client.aclose()
    return statistics.median(times["on"]), statistics.median(times["off"])


CHAT = "http://localhost"


def _guest(client: TestClient) -> dict[str, str]:
    client.get("/")
    return {CSRF_HEADER: client.cookies[CSRF_COOKIE]}


def _sign_in(client: TestClient) -> dict[str, str]:
    client.post(
        "/ui/signin",
        content=f"key={KEYS['admin'][0]}&next=/admin",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
        follow_redirects=False,
    )
    cookies = dict(client.cookies)
    client.cookies.clear()
    return {"Cookie": "; ".join(f"{k}={v}" for k, v in cookies.items()), CSRF_HEADER: cookies[CSRF_COOKIE]}


def hostile(redis_url: str) -> dict[str, int]:
    """Guests, signed-out and cross-service cookies, and the Host header, in process."""
    denied = tried = 0
    with TestClient(chat_app(auth_settings(), redis_url=redis_url), base_url=CHAT) as chat:
        csrf = _guest(chat)
        session_id = chat.post("/v1/sessions", json={}, headers=csrf).json()["session_id"]
        for case in GUEST_DENIED:
            extra = {"Accept": "application/json, text/event-stream"} if case.path == "/mcp" else {}
            path = case.path.replace(SESSION, session_id)
            status = chat.request(case.method, path, json=case.body, headers={**csrf, **extra}).status_code
            tried += 1
            denied += status in (401, 403, 404)
        chat.cookies.clear()
        admin = _sign_in(chat)
        chat.post("/ui/signout", headers=admin, follow_redirects=False)
        after = [
            chat.get("/documents", headers=admin).status_code,
            chat.post("/set_config", json={"temperature": 0.5}, headers=admin).status_code,
        ]
        admin = _sign_in(chat)
    cross = []
    with TestClient(ingest_app(auth_settings()), base_url=CHAT) as ingest:
        cross = [
            ingest.get("/v1/pages", headers=admin).status_code,
            ingest.delete("/v1/pages/7", headers=admin).status_code,
        ]
    http = HttpSettings(trusted_hosts=[])
    with TestClient(ingest_app(auth_settings(), http=http), base_url="http://127.0.0.1") as ingest:
        evil = ingest.post(
            "/v1/pages/changed",
            json={"page_id": 7, "revision_id": 1, "revision_date": "20250101000000", "callback_url": "x"},
            headers={"Authorization": f"Bearer {KEYS['wiki'][0]}", "Host": "evil.example"},
        )
        reflected = int("evil.example" in evil.text or "evil.example" in str(evil.headers))
    return {
        "guest_denied_routes": denied,
        "guest_routes_tried": tried,
        "signed_out_session_accepted": sum(s not in (401, 403) for s in after),
        "cross_service_cookie_accepted": sum(s not in (401, 403) for s in cross),
        "host_header_reflected": reflected,
    }


def header_bomb_status() -> int:
    """The status a real ingest process answers a 64 KiB header with (it reads at most 32 KiB of it)."""
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        env = service_env({"RAGBOT_INGEST_HOST": "127.0.0.1", "RAGBOT_INGEST_PORT": str(port)})
        proc = local_service("ingest", module="ragbot_ingest", port=port, env=env, log_dir=Path(tmp))
        try:
            proc.start().wait_healthy(timeout_s=120)
            with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
                head = f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Bomb: ".encode()
                with contextlib.suppress(OSError):
                    sock.sendall(head + b"x" * 64 * 1024 + b"\r\n\r\n")
                answer = sock.recv(4096)
            return int(answer.split(b" ", 2)[1])
        finally:
            proc.stop()


def measure() -> dict[str, float | int]:
    """The auth figures (see the module docstring)."""
    accepted, tried = unauthenticated_writes()
    p50_on, p50_off = asyncio.run(retrieve_p50s())
    redis_url = os.environ.get("RAGBOT_TEST_REDIS_URL", "redis://127.0.0.1:6390/0")
    return {
        **hostile(redis_url),
        "header_bomb_status": header_bomb_status(),
        "unauthenticated_writes_accepted": accepted,
        "auth_writes_tried": tried,
        "retrieve_p50_ms_auth_on": round(p50_on, 3),
        "retrieve_p50_ms_auth_off": round(p50_off, 3),
        "auth_overhead_p50_ms": round(p50_on - p50_off, 3),
    }


if __name__ == "__main__":
    print(json.dumps(measure(), indent=2))
