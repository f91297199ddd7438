"""Apps of the three HTTP services with keys configured, over fakes, and their write routes, for the auth
tests and bench/security/auth.py."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import asynccontextmanager
from typing import Any, cast

import redis.asyncio as aioredis
from fastapi import FastAPI
from fastapi.routing import APIRoute

from ragbot.ports import SearchStore
from ragbot.settings import AuthScope, AuthSettings, ChatSettings, IngestSettings
from support.chat_fakes import ScriptedLLM, StaticRetriever
from support.fakes import FakeJobs, FakeSender, MemoryStore

# Plain keys for tests only (16+ characters); settings get them as {"key": ...} and keep the hash.
KEYS: dict[str, tuple[str, list[AuthScope]]] = {
    "wiki": ("wiki-key-0123456789abcdef", ["ingest"]),
    "wiki-next": ("wiki-next-key-0123456789ab", ["ingest"]),
    "kzchatbot": ("kzchatbot-key-0123456789ab", ["chat"]),
    "admin": ("admin-key-0123456789abcdef", ["admin", "chat"]),
    "chat-service": ("chat-service-key-01234567", ["retrieve", "ingest"]),
    "prometheus": ("prometheus-key-0123456789", ["metrics"]),
}
PING_TOKEN = "ping-token-0123456789abcd"
WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# The sign-in form takes a key itself: it is the door, not a write behind it.
OPEN_WRITES = frozenset({"/ui/signin", "/ui/signout"})


def auth_settings(**overrides: Any) -> AuthSettings:
    """Every test key and the ping token configured, no trusted network."""
    values: dict[str, Any] = {
        "keys": [{"name": name, "scopes": scopes, "key": key} for name, (key, scopes) in KEYS.items()],
        "ping_tokens": [{"name": "wiki", "token": PING_TOKEN}],
        "session_secret": "test-session-secret-0123456789",
    }
    values.update(overrides)
    return AuthSettings(**values)


def ingest_app(auth: AuthSettings) -> FastAPI:
    """Ingest over in-memory fakes."""
    from ragbot_ingest.app import create_app
    from ragbot_ingest.deps import Resources

    settings = IngestSettings(allowed_callback_hosts=["wiki.test"])
    jobs, sender, store = FakeJobs(), FakeSender(), MemoryStore()

    @asynccontextmanager
    async def resources() -> AsyncIterator[Resources]:
        yield Resources(settings=settings, jobs=jobs, sender=sender, store=cast(SearchStore, store))

    return create_app(resources=resources, auth=auth)


def chat_app(auth: AuthSettings, *, settings: ChatSettings | None = None) -> FastAPI:
    """Chat over a scripted LLM and a static retriever (no Redis: routes past auth may answer 5xx)."""
    from ragbot_chat.app import assemble, create_app
    from ragbot_chat.deps import Resources

    chat_settings = settings or ChatSettings()

    @asynccontextmanager
    async def resources() -> AsyncIterator[Resources]:
        yield assemble(
            settings=chat_settings,
            llm=ScriptedLLM(),
            retriever=StaticRetriever(),
            redis_client=cast(aioredis.Redis, None),
            key_prefix="unit-auth",
        )

    return create_app(resources=resources, auth=auth)


def retriever_app(auth: AuthSettings) -> FastAPI:
    """The retriever; its routes are refused before they need an engine."""
    from ragbot_retriever.app import create_app

    @asynccontextmanager
    async def resources() -> AsyncIterator[Any]:
        yield object()

    return create_app(resources=resources, auth=auth)


def api_routes(routes: Iterable[Any]) -> Iterator[APIRoute]:
    """Every API route, looking inside included routers (FastAPI includes them lazily)."""
    for route in routes:
        if isinstance(route, APIRoute):
            yield route
        elif (inner := getattr(route, "original_router", None)) is not None:
            yield from api_routes(inner.routes)


def write_routes(app: FastAPI) -> Iterator[tuple[str, str]]:
    """(method, concrete path) of every write route in the app's own route table."""
    for route in api_routes(app.routes):
        if route.path in OPEN_WRITES:
            continue
        path = re.sub(r"\{[^}:]+(:path)?\}", "1", route.path)
        for method in sorted((route.methods or set()) & WRITE_METHODS):
            yield method, path
