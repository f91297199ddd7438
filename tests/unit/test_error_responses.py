"""Every operation of every service documents the common error responses with the bodies really sent."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any, cast

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from support.fakes import FakeJobs, FakeSender, MemoryStore

from ragbot.http.responses import COMMON_RESPONSES, ValidationErrorBody, add_error_responses
from ragbot.ports import SearchStore
from ragbot.settings import IngestSettings
from ragbot_chat.app import create_app as chat_app
from ragbot_ingest.app import create_app as ingest_app
from ragbot_ingest.deps import Resources
from ragbot_retriever.app import create_app as retriever_app

METHODS = {"get", "post", "put", "delete", "patch"}


def operations(schema: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (path, method, op)
        for path, item in schema["paths"].items()
        for method, op in item.items()
        if method in METHODS
    ]


APPS = {"ingest": ingest_app, "retriever": retriever_app, "chat": chat_app}


@pytest.mark.parametrize("factory", list(APPS.values()), ids=list(APPS))
def test_every_operation_documents_the_common_errors(factory: Any) -> None:
    app: FastAPI = factory()
    schema = app.openapi()
    ops = operations(schema)
    assert ops
    for path, method, op in ops:
        codes = set(op["responses"])
        assert {str(c) for c in COMMON_RESPONSES} <= codes, (method, path, codes)
        if "{" in path:
            assert "404" in codes, (method, path)
        assert "HTTPValidationError" not in str(op["responses"]["422"]), (method, path)
    assert {"ErrorBody", "UnavailableBody", "ValidationErrorBody"} <= set(schema["components"]["schemas"])
    assert schema is app.openapi()  # cached, and adding again changes nothing
    assert add_error_responses(schema) == app.openapi()


def test_a_route_keeps_its_own_description_of_a_status() -> None:
    ops = {(p, m): op for p, m, op in operations(ingest_app().openapi())}
    upload = ops[("/v1/documents", "post")]["responses"]
    assert upload["413"]["description"] == "a file is over the size cap"
    assert "Retry-After" in upload["429"]["headers"]  # a rate-limited route documents its 429
    assert "429" not in ops[("/v1/pages", "get")]["responses"]  # and only those
    widget = {(p, m): op for p, m, op in operations(chat_app().openapi())}[("/kzchatbot/v0/status", "get")]
    # The widget answers {message}: the statuses added to its routes say so.
    assert widget["responses"]["503"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "/MessageError"
    )


@pytest.fixture
def ingest() -> Iterator[TestClient]:
    @asynccontextmanager
    async def resources() -> AsyncIterator[Resources]:
        yield Resources(
            settings=IngestSettings(),
            jobs=FakeJobs(),
            sender=FakeSender(),
            store=cast(SearchStore, MemoryStore()),
        )

    with TestClient(ingest_app(resources=resources), raise_server_exceptions=False) as client:
        yield client


def test_the_documented_bodies_match_what_the_services_send(ingest: TestClient) -> None:
    """FastAPI's own 422 (a list of issues) and a one-message 422 both fit the documented model."""
    listed = ingest.get("/v1/pages", params={"limit": 0})
    assert listed.status_code == 422
    ValidationErrorBody.model_validate(listed.json())
    ValidationErrorBody.model_validate({"detail": "the callback host is not allowed"})


@pytest.mark.parametrize(
    "path",
    [
        "/v1/pages/61073729117035818959289450496",
        "/v1/pages?limit=10&offset=93703195830844571648",
        "/v1/jobs?state=queued&offset=1872478787701512317099889917952",
        "/v1/jobs?state=queued&offset=9223372036854775807",
    ],
)
def test_integers_beyond_64_bits_are_a_422_naming_the_field(ingest: TestClient, path: str) -> None:
    response = ingest.get(path)
    assert response.status_code == 422, response.text
    [issue] = response.json()["detail"]
    assert issue["loc"][-1] in {"page_id", "offset"} and "less than or equal" in issue["msg"]
