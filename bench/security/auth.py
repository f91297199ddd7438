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
layer, not retrieval noise). Run: ``uv run python -m bench.security.auth``.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
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

from ragbot.definition import parse_definition  # noqa: E402
from ragbot.ports import StoredParagraph  # noqa: E402
from ragbot.retrieval import RetrievalDefaults, RetrievalEngine  # noqa: E402
from ragbot.settings import AuthSettings  # noqa: E402

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
        with TestClient(app) as client:
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
                transport=httpx.ASGITransport(app=app, client=("10.9.9.9", 5000)), base_url="http://r"
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


def measure() -> dict[str, float | int]:
    """The auth figures (see the module docstring)."""
    accepted, tried = unauthenticated_writes()
    p50_on, p50_off = asyncio.run(retrieve_p50s())
    return {
        "unauthenticated_writes_accepted": accepted,
        "auth_writes_tried": tried,
        "retrieve_p50_ms_auth_on": round(p50_on, 3),
        "retrieve_p50_ms_auth_off": round(p50_off, 3),
        "auth_overhead_p50_ms": round(p50_on - p50_off, 3),
    }


if __name__ == "__main__":
    print(json.dumps(measure(), indent=2))
