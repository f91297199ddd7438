"""Apps of the three HTTP services with keys configured, over fakes, and their write routes, for the auth
tests and bench/security/auth.py."""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import asynccontextmanager
from typing import Any, cast

import redis.asyncio as aioredis
from fastapi import FastAPI
from fastapi.routing import APIRoute

from ragbot.http.auth import install_auth
from ragbot.ports import SearchStore
from ragbot.settings import AuthScope, AuthSettings, ChatSettings, HttpSettings, IngestSettings, RedisSettings
from support.chat_fakes import ScriptedLLM, StaticRetriever, document
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


LEAVE = [document(5, 0, "Paid leave is 12 days.", title="Leave")]


def auth_settings(**overrides: Any) -> AuthSettings:
    """Every test key and the ping token configured, no trusted network."""
    values: dict[str, Any] = {
        "keys": [{"name": name, "scopes": scopes, "key": key} for name, (key, scopes) in KEYS.items()],
        "ping_tokens": [{"name": "wiki", "token": PING_TOKEN}],
        "session_secret": "test-session-secret-0123456789",
    }
    values.update(overrides)
    return AuthSettings(**values)


def session_redis() -> RedisSettings:
    """The test Redis, under a fresh prefix, for the signed-in sessions an app records."""
    url = os.environ.get("RAGBOT_TEST_REDIS_URL", "redis://127.0.0.1:6390/0")
    return RedisSettings(url=url, key_prefix=f"test-auth-{uuid.uuid4().hex[:10]}")


def with_sessions(app: FastAPI, auth: AuthSettings, *, service: str) -> FastAPI:
    """``app`` with its UI sessions recorded in the test Redis (``session_redis``)."""
    install_auth(app, auth, service=service, redis=session_redis())
    return app


def ingest_app(auth: AuthSettings, *, http: HttpSettings | None = None) -> FastAPI:
    """Ingest over in-memory fakes (``http``: its hosts and header limits)."""
    from ragbot_ingest.app import create_app
    from ragbot_ingest.deps import Resources

    settings = IngestSettings(allowed_callback_hosts=["wiki.test"])
    jobs, sender, store = FakeJobs(), FakeSender(), MemoryStore()

    @asynccontextmanager
    async def resources() -> AsyncIterator[Resources]:
        yield Resources(settings=settings, jobs=jobs, sender=sender, store=cast(SearchStore, store))

    return with_sessions(create_app(resources=resources, auth=auth, http=http), auth, service="ingest")


def chat_app(
    auth: AuthSettings, *, settings: ChatSettings | None = None, redis_url: str | None = None
) -> FastAPI:
    """Chat over a scripted LLM and a static retriever; its conversations in the Redis of ``redis_url``
    under a fresh prefix (deleted after), or no Redis at all (routes past auth may then answer 5xx)."""
    from ragbot_chat.app import assemble, create_app
    from ragbot_chat.deps import Resources

    chat_settings = settings or ChatSettings()
    prefix = f"test-auth-chat-{uuid.uuid4().hex[:10]}"

    @asynccontextmanager
    async def resources() -> AsyncIterator[Resources]:
        client = None if redis_url is None else aioredis.Redis.from_url(redis_url, socket_timeout=5)
        try:
            yield assemble(
                settings=chat_settings,
                llm=ScriptedLLM(),
                retriever=StaticRetriever(LEAVE if client is not None else ()),
                redis_client=cast(aioredis.Redis, client),
                key_prefix=prefix if client is not None else "unit-auth",
            )
        finally:
            if client is not None:
                async for key in client.scan_iter(f"{prefix}:*"):
                    await client.delete(key)
                await client.aclose()

    return with_sessions(create_app(resources=resources, auth=auth), auth, service="chat")


def retriever_app(auth: AuthSettings) -> FastAPI:
    """The retriever; its routes are refused before they need an engine."""
    from ragbot_retriever.app import create_app

    @asynccontextmanager
    async def resources() -> AsyncIterator[Any]:
        yield object()

    return with_sessions(create_app(resources=resources, auth=auth), auth, service="retriever")


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
