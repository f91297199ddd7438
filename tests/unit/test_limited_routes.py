"""Every route issue 14 names is rate limited in its service's real app, and documents its 429.

The apps are served without their lifespan, so no resources exist: the limit is counted before the
route's other dependencies (which then answer 503 "still starting"), and the second call is refused.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from prometheus_client import CollectorRegistry

from ragbot.http.limits import RateLimiter
from ragbot.settings import RateLimitSettings
from ragbot_chat.app import create_app as create_chat_app
from ragbot_ingest.app import create_app as create_ingest_app
from ragbot_retriever.app import create_app as create_retriever_app

LIMITED: list[tuple[str, str, str, str, dict[str, Any]]] = [
    ("chat", "POST", "/v1/sessions/{session_id}/messages", "/v1/sessions/s1/messages", {"question": "q"}),
    ("chat", "POST", "/v1/chat/completions", "/v1/chat/completions", {"messages": []}),
    ("chat", "POST", "/search", "/search", {"query": "q"}),
    ("chat", "GET", "/kzchatbot/v0/status", "/kzchatbot/v0/status", {}),
    ("chat", "POST", "/kzchatbot/v0/question", "/kzchatbot/v0/question", {"text": "q", "uuid": "u"}),
    ("chat", "POST", "/kzchatbot/v0/rate", "/kzchatbot/v0/rate", {"answerId": "a", "like": True}),
    ("ingest", "POST", "/v1/documents", "/v1/documents", {}),
    ("retriever", "POST", "/v1/retrieve", "/v1/retrieve", {"query": "q"}),
]
FACTORIES: dict[str, Callable[[], FastAPI]] = {
    "chat": create_chat_app,
    "ingest": create_ingest_app,
    "retriever": create_retriever_app,
}


def limited(service: str) -> FastAPI:
    app = FACTORIES[service]()
    groups = ("chat", "search", "widget", "upload", "retrieve")
    settings = RateLimitSettings.model_validate(
        {"enabled": True, **{f"{group}_per_address": "1/minute" for group in groups}}
    )
    registry = CollectorRegistry()
    app.state.rate_limiter = RateLimiter(
        settings=settings, redis_url="memory://", key_prefix="t", registry=registry
    )
    return app


@pytest.mark.parametrize(("service", "method", "template", "path", "body"), LIMITED)
async def test_the_second_call_within_the_limit_is_refused_with_retry_after(
    service: str, method: str, template: str, path: str, body: dict[str, Any]
) -> None:
    app = limited(service)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        kwargs: dict[str, Any] = {"json": body} if method == "POST" else {}
        first = await client.request(method, path, **kwargs)
        second = await client.request(method, path, **kwargs)
    assert first.status_code != 429, first.text
    assert second.status_code == 429, second.text
    assert 1 <= int(second.headers["Retry-After"]) <= 60
    operation = app.openapi()["paths"][template][method.lower()]
    assert "429" in operation["responses"], f"{method} {template} does not document its 429"


def test_routes_not_named_by_the_issue_are_not_limited() -> None:
    # POST /v1/sessions counts the open chat page's guests (issue 28): tests/unit/test_guest_scope.py.
    app = create_chat_app()
    for path, method in [("/v1/models", "get"), ("/rating", "post"), ("/get_config", "get")]:
        assert "429" not in app.openapi()["paths"][path][method]["responses"], path
