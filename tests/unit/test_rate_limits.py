"""Rate limits (ragbot.http.limits): who is counted, the 429 with Retry-After, and failing open."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request, Response
from prometheus_client import CollectorRegistry
from starlette.types import Scope

from ragbot.errors import RateLimited
from ragbot.http.auth.credentials import Principal
from ragbot.http.limits import RateLimiter, limiter_key, rate_limit
from ragbot.observability.http import add_error_handlers
from ragbot.settings import RateLimitSettings


def request_with(
    state: dict[str, Any] | None = None, client: tuple[str, int] | None = ("10.0.0.7", 5555)
) -> Request:
    scope: Scope = {"type": "http", "method": "GET", "path": "/", "headers": [], "client": client}
    request = Request(scope)
    for name, value in (state or {}).items():
        setattr(request.state, name, value)
    return request


def test_the_key_is_the_principal_then_the_resolved_address_then_the_peer() -> None:
    principal = SimpleNamespace(name="kolzchut-wiki", scopes={"chat"})
    assert limiter_key(request_with({"principal": principal, "client_ip": "1.2.3.4"})) == (
        "key",
        "kolzchut-wiki",
    )
    assert limiter_key(request_with({"principal": None, "client_ip": "1.2.3.4"})) == ("address", "1.2.3.4")
    assert limiter_key(request_with()) == ("address", "10.0.0.7")
    assert limiter_key(request_with(client=None)) == ("address", "unknown")
    nameless = SimpleNamespace(name="")
    assert limiter_key(request_with({"principal": nameless})) == ("address", "10.0.0.7")


def test_callers_without_a_key_of_their_own_are_counted_per_address() -> None:
    for method in ("network", "session", "disabled"):
        principal = Principal(name=f"{method}-caller", scopes=frozenset({"chat"}), method=method)
        assert limiter_key(request_with({"principal": principal, "client_ip": "1.2.3.4"})) == (
            "address",
            "1.2.3.4",
        )
    keyed = Principal(name="kzchatbot", scopes=frozenset({"chat"}), method="basic")
    assert limiter_key(request_with({"principal": keyed, "client_ip": "1.2.3.4"})) == ("key", "kzchatbot")


def limited_app(limiter: RateLimiter, *, principal: str | None = None) -> FastAPI:
    app = FastAPI()
    add_error_handlers(app)
    app.state.rate_limiter = limiter

    @app.middleware("http")
    async def name_the_caller(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        if principal is not None:
            request.state.principal = SimpleNamespace(name=principal)
        return await call_next(request)

    @app.post("/chat", dependencies=[rate_limit("chat")])
    async def chat() -> dict[str, str]:
        return {"ok": "yes"}

    @app.post("/upload", dependencies=[rate_limit("upload")])
    async def upload() -> dict[str, str]:
        return {"ok": "yes"}

    return app


def memory_limiter(registry: CollectorRegistry, **limits: Any) -> RateLimiter:
    settings = RateLimitSettings(**{"enabled": True, **limits})
    return RateLimiter(settings=settings, redis_url="memory://", key_prefix="test", registry=registry)


async def test_the_request_past_the_limit_gets_429_with_retry_after_and_a_clear_message() -> None:
    registry = CollectorRegistry()
    limiter = memory_limiter(registry, chat_per_address="3/minute", upload_per_address="1/minute")
    transport = httpx.ASGITransport(app=limited_app(limiter))
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        statuses = [(await client.post("/chat")).status_code for _ in range(3)]
        refused = await client.post("/chat")
        other_group = await client.post("/upload")
    assert statuses == [200, 200, 200]
    assert refused.status_code == 429
    retry_after = int(refused.headers["Retry-After"])
    assert 1 <= retry_after <= 60
    body = refused.json()
    assert body["limit"] == "3 per 1 minute"
    assert body["retry_after_s"] == retry_after
    assert "rate limit of 3 per 1 minute" in body["detail"] and "address" in body["detail"]
    assert f"retry in {retry_after} s" in body["detail"]
    assert other_group.status_code == 200  # each route group has its own count
    assert registry.get_sample_value("ragbot_rate_limited_total", {"group": "chat", "kind": "address"}) == 1.0


async def test_a_named_key_has_its_own_limit_and_count() -> None:
    registry = CollectorRegistry()
    limiter = memory_limiter(registry, chat_per_key="2/minute", chat_per_address="1/minute")
    keyed = httpx.ASGITransport(app=limited_app(limiter, principal="wiki"))
    anonymous = httpx.ASGITransport(app=limited_app(limiter))
    async with httpx.AsyncClient(transport=keyed, base_url="http://test") as client:
        keyed_statuses = [(await client.post("/chat")).status_code for _ in range(3)]
    async with httpx.AsyncClient(transport=anonymous, base_url="http://test") as client:
        anonymous_statuses = [(await client.post("/chat")).status_code for _ in range(2)]
    assert keyed_statuses == [200, 200, 429]
    assert anonymous_statuses == [200, 429]
    assert registry.get_sample_value("ragbot_rate_limited_total", {"group": "chat", "kind": "key"}) == 1.0


async def test_several_limits_in_one_setting_each_hold() -> None:
    limiter = memory_limiter(CollectorRegistry(), chat_per_address="100/minute;2/hour")
    await limiter.hit(group="chat", kind="address", who="1.2.3.4")
    await limiter.hit(group="chat", kind="address", who="1.2.3.4")
    with pytest.raises(RateLimited) as refused:
        await limiter.hit(group="chat", kind="address", who="1.2.3.4")
    assert refused.value.limit == "2 per 1 hour"
    assert 3000 < refused.value.retry_after_s <= 3600


async def test_disabled_limits_count_nothing() -> None:
    limiter = memory_limiter(CollectorRegistry(), enabled=False, chat_per_address="1/minute")
    for _ in range(5):
        await limiter.hit(group="chat", kind="address", who="1.2.3.4")


async def test_redis_down_fails_open_with_a_log_line_and_a_metric(caplog: pytest.LogCaptureFixture) -> None:
    registry = CollectorRegistry()
    settings = RateLimitSettings(enabled=True, chat_per_address="1/minute", redis_timeout_s=0.5)
    # Port 9 (discard) on loopback: nothing listens, so every Redis call is refused.
    limiter = RateLimiter(
        settings=settings, redis_url="redis://127.0.0.1:9/0", key_prefix="t", registry=registry
    )
    transport = httpx.ASGITransport(app=limited_app(limiter))
    with caplog.at_level(logging.WARNING, logger="ragbot.http.limits"):
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            statuses = [(await client.post("/chat")).status_code for _ in range(3)]
    await limiter.close()
    assert statuses == [200, 200, 200]
    assert registry.get_sample_value("ragbot_rate_limit_errors_total", {"group": "chat"}) == 3.0
    warnings = [r for r in caplog.records if "fail open" in r.getMessage()]
    assert len(warnings) == 1  # once a minute, not once a request


def test_a_bad_limit_string_is_refused_with_the_setting_named() -> None:
    with pytest.raises(ValueError, match="not a rate limit: 'thirty a minute'"):
        RateLimitSettings(chat_per_key="thirty a minute")
