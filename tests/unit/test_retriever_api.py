"""The retriever's HTTP contract: 422 naming the field, 503 naming the dependency, never a hang.

The composition root is replaced by a resources factory holding small fakes (the real stores and
models are covered by their own suites and by tests/integration).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from support.chat_fakes import serve_app
from support.fakes import HashEmbedder, MemoryStore

from ragbot.chat.retriever import HttpRetriever
from ragbot.definition import parse_definition
from ragbot.errors import NotFound
from ragbot.ports import StoredParagraph
from ragbot.retrieval import RetrievalDefaults, RetrievalEngine
from ragbot.schemas.retrieval import PageDocuments
from ragbot_retriever.app import create_app
from ragbot_retriever.deps import Resources

DEFINITION = parse_definition(
    {
        "identifier_field": "page_id",
        "saved_fields": {"title": "text", "page_id": "integer", "content": "text"},
        "field_for_llm": "content",
        "models": {"mini": "content"},
    }
)
VECTOR_FIELD = "content_mini_vectors"


def two_pages(embedder: HashEmbedder) -> MemoryStore:
    """Two pages of three paragraphs each, embedded by ``embedder``."""
    paragraphs = []
    for page_id in (1, 2):
        for n in range(3):
            fields: dict[str, Any] = {"page_id": page_id, "title": f"page {page_id}", "content": f"text {n}"}
            [vector] = embedder.embed_passages([fields["content"]])
            paragraphs.append(
                StoredParagraph(f"{page_id}-1-{n}", page_id, 1, n, fields, {VECTOR_FIELD: vector})
            )
    return MemoryStore(paragraphs)


@pytest.fixture()
def fakes() -> tuple[MemoryStore, HashEmbedder]:
    embedder = HashEmbedder("mini", dimension=8, max_tokens=128)
    return two_pages(embedder), embedder


def retriever_app(store: MemoryStore, embedder: HashEmbedder) -> FastAPI:
    """The retriever app over the fakes (the store is closed when the app stops)."""

    @asynccontextmanager
    async def resources() -> AsyncIterator[Resources]:
        engine = RetrievalEngine(
            store=store,
            embedders={"mini": embedder},
            definition=DEFINITION,
            defaults=RetrievalDefaults(store_timeout_s=0.3, embed_timeout_s=0.3, max_query_chars=500),
        )
        try:
            yield Resources(engine=engine, store=store, embedders={"mini": embedder}, definition=DEFINITION)
        finally:
            await store.close()

    def factory() -> AbstractAsyncContextManager[Resources]:
        return resources()

    return create_app(resources=factory)


@pytest.fixture()
def client(fakes: tuple[MemoryStore, HashEmbedder]) -> Iterator[TestClient]:
    store, embedder = fakes
    with TestClient(retriever_app(store, embedder)) as c:
        yield c
    assert store.closed


def field_of(response: Any) -> list[Any]:
    """Every field path named in a 422 body."""
    return [tuple(err["loc"]) for err in response.json()["detail"]]


def test_retrieve_answers_documents_debug_and_timings(client: TestClient) -> None:
    r = client.post("/v1/retrieve", json={"query": "text", "paragraphs_per_page": [2, 1]})
    assert r.status_code == 200, r.text
    body = r.json()
    assert len(body["documents"]) == 3
    pages = [d["page_id"] for d in body["documents"]]
    assert pages[0] == pages[1] != pages[2]
    assert all(not key.endswith("_vectors") for d in body["documents"] for key in d)
    assert set(body["debug"]["branches"]) == {VECTOR_FIELD, "bm25"}
    assert set(body["timings_ms"]) >= {"embed", "dense", "bm25", "fusion", "rerank", "total"}
    assert "x-request-id" in r.headers


def test_a_page_is_read_whole_in_paragraph_order_and_an_unknown_one_is_404(client: TestClient) -> None:
    r = client.get("/v1/pages/2")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["page_id"] == 2
    assert [d["_id"] for d in body["documents"]] == ["2-1-0", "2-1-1", "2-1-2"]
    assert [d["content"] for d in body["documents"]] == ["text 0", "text 1", "text 2"]
    assert all(not key.endswith("_vectors") for d in body["documents"] for key in d)
    missing = client.get("/v1/pages/99")
    assert missing.status_code == 404 and "99" in missing.json()["detail"]


def test_the_chat_services_http_client_reads_a_page_and_gets_not_found_for_an_unknown_one(
    fakes: tuple[MemoryStore, HashEmbedder],
) -> None:
    async def read(url: str) -> tuple[PageDocuments, str]:
        retriever = HttpRetriever(base_url=url, timeout_s=10)
        try:
            page = await retriever.page(1)
            with pytest.raises(NotFound) as missing:
                await retriever.page(99)
            return page, str(missing.value)
        finally:
            await retriever.close()

    with serve_app(retriever_app(*fakes)) as url:
        page, missing = asyncio.run(read(url))
    assert page.page_id == 1 and [d.id for d in page.documents] == ["1-1-0", "1-1-1", "1-1-2"]
    assert page.documents[0].title == "page 1" and page.documents[0].content == "text 0"
    assert "99" in missing


def test_models_lists_dimensions_and_vector_fields(client: TestClient) -> None:
    r = client.get("/v1/models")
    assert r.status_code == 200
    assert r.json() == {"models": [{"name": "mini", "dimension": 8, "vector_fields": [VECTOR_FIELD]}]}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"query": ""}, ("body", "query")),
        ({"query": "   "}, ("body", "query")),
        ({"query": "x" * 5000}, ("body", "query")),
        ({"query": "x" * 600}, ("body", "query")),  # over the service's own max_query_chars
        ({"query": "q", "models": {"nope": 1.0}}, ("body", "models")),
        ({"query": "q", "models": {"mini": "heavy"}}, ("body", "models", "mini")),
        ({"query": "q", "models": {"mini": -1}}, ("body", "models")),
        ({"query": "q", "paragraphs_per_page": []}, ("body", "paragraphs_per_page")),
        ({"query": "q", "paragraphs_per_page": [2, -1]}, ("body", "paragraphs_per_page")),
        ({"query": "q", "bm25_weight": "lots"}, ("body", "bm25_weight")),
        ({"query": "q", "rerank": True}, ("body", "rerank")),
        ({"query": "q", "mode": "fuzzy"}, ("body", "mode")),
    ],
)
def test_bad_input_is_422_naming_the_field(
    client: TestClient, body: dict[str, Any], field: tuple[str, ...]
) -> None:
    r = client.post("/v1/retrieve", json=body)
    assert r.status_code == 422, r.text
    assert field in field_of(r)


def test_store_down_is_503_naming_the_store(
    client: TestClient, fakes: tuple[MemoryStore, HashEmbedder]
) -> None:
    fakes[0].down = True
    r = client.post("/v1/retrieve", json={"query": "text"})
    assert r.status_code == 503
    assert r.json()["dependency"] == "store"
    ready = client.get("/readyz")
    assert ready.status_code == 503 and ready.json()["checks"] == {"store": False}


def test_store_that_hangs_is_503_within_the_timeout(
    client: TestClient, fakes: tuple[MemoryStore, HashEmbedder]
) -> None:
    fakes[0].hang = True
    r = client.post("/v1/retrieve", json={"query": "text"})
    assert r.status_code == 503
    assert r.json()["dependency"] == "store"
    assert "within" in r.json()["detail"]


def test_model_down_is_503_naming_the_model(
    client: TestClient, fakes: tuple[MemoryStore, HashEmbedder]
) -> None:
    fakes[1].broken = True
    r = client.post("/v1/retrieve", json={"query": "text", "mode": "semantic"})
    assert r.status_code == 503
    assert r.json()["dependency"] == "model:mini"
    lexical = client.post("/v1/retrieve", json={"query": "text", "mode": "lexical"})
    assert lexical.status_code == 200  # BM25 does not need the model


def test_health_ready_and_metrics(client: TestClient) -> None:
    assert client.get("/healthz").status_code == 200
    ready = client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["ready"] is True
    client.post("/v1/retrieve", json={"query": "text"})
    metrics = client.get("/metrics").text
    assert "/v1/retrieve" in metrics


def _sample(text: str, prefix: str) -> float:
    """The value of the exposition line that starts with ``prefix`` (0 when absent)."""
    for line in text.splitlines():
        if line.startswith(prefix):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_metrics_carry_stage_timings_dependency_health_and_the_build(client: TestClient) -> None:
    total = 'ragbot_retrieval_stage_seconds_count{stage="total"}'
    before = _sample(client.get("/metrics").text, total)
    assert client.post("/v1/retrieve", json={"query": "text"}).status_code == 200
    text = client.get("/metrics").text
    assert _sample(text, total) == before + 1
    assert _sample(text, 'ragbot_retrieval_stage_seconds_count{stage="bm25"}') >= 1
    assert _sample(text, 'ragbot_dependency_up{dependency="store",service="retriever"}') == 1.0
    [info] = [line for line in text.splitlines() if line.startswith("ragbot_build_info{")]
    assert 'version="0.1.0"' in info and 'python="3.' in info and "git_sha=" in info
    # The dead-letter gauge's old name is gone from every scrape (it clashed with the counter's family).
    assert "ragbot_dead_letters " not in text


def test_a_store_that_stops_answering_shows_in_the_next_scrape(
    client: TestClient, fakes: tuple[MemoryStore, HashEmbedder]
) -> None:
    store, _ = fakes
    store.down = True
    text = client.get("/metrics").text
    assert _sample(text, 'ragbot_dependency_up{dependency="store",service="retriever"}') == 0.0
