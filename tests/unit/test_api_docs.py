"""``/docs`` and ``/redoc`` of every HTTP service load nothing from another host: their scripts, styles and
icons are the service's own vendored assets, and each one they name is served."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from ragbot_chat.app import create_app as chat_app
from ragbot_ingest.app import create_app as ingest_app
from ragbot_retriever.app import create_app as retriever_app

APPS: dict[str, Callable[[], FastAPI]] = {"ingest": ingest_app, "retriever": retriever_app, "chat": chat_app}
REFERENCE = re.compile(
    r"""(?:src|href|spec-url)\s*=\s*["']([^"']+)["']|url\(\s*['"]?([^'")]+)|\burl\s*:\s*['"]([^'"]+)"""
)


@pytest.mark.parametrize("service", list(APPS))
@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_the_docs_page_names_only_its_own_assets_and_they_are_served(service: str, page: str) -> None:
    client = TestClient(APPS[service]())  # no lifespan: the docs need no resources
    response = client.get(page)
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/html")
    html = response.text
    assert not re.search(r"(?:https?:)?//[a-z0-9.-]+\.[a-z]{2,}", html, re.IGNORECASE), html
    references = [next(g for g in m.groups() if g) for m in REFERENCE.finditer(html)]
    assert "/openapi.json" in references
    assert any(r.endswith(".js") for r in references)
    for reference in references:
        assert reference.startswith("/"), reference
        served = client.get(reference)
        assert served.status_code == 200, reference
        assert served.content, reference


def test_the_vendored_bundles_are_real_and_load_no_fonts_from_a_cdn() -> None:
    client = TestClient(retriever_app())
    swagger = client.get("/docs-assets/swagger-ui-bundle.js")
    assert swagger.headers["content-type"].startswith(("text/javascript", "application/javascript"))
    assert len(swagger.content) > 1_000_000 and b"SwaggerUIBundle" in swagger.content
    redoc = client.get("/docs-assets/redoc.standalone.js")
    assert len(redoc.content) > 500_000 and b"Redoc" in redoc.content
    assert "fonts.googleapis.com" not in client.get("/redoc").text
