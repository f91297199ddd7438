"""The retriever's HTTP contract: 422 naming the field, 503 naming the dependency, never a hang.

The composition root is replaced by a resources factory holding small fakes (the real stores and
models are covered by their own suites and by tests/integration).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from ragbot.definition import parse_definition
from ragbot.errors import EmbeddingError, StoreUnavailable
from ragbot.ports import Filters, PageWrite, SearchHit, StoredParagraph, Vector
from ragbot.retrieval import RetrievalDefaults, RetrievalEngine
from ragbot.schemas.pages import PageState
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


class OneHotEmbedder:
    """Vector = one-hot of the text's length bucket: enough to rank deterministically."""

    name = "mini"

    def __init__(self) -> None:
        self.broken = False

    @property
    def dimension(self) -> int:
        return 8

    @property
    def max_tokens(self) -> int:
        return 128

    def warm_up(self) -> None:
        pass

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def embed_queries(self, texts: Sequence[str]) -> Vector:
        if self.broken:
            raise EmbeddingError("model file is gone")
        return self.embed_passages(texts)

    def embed_passages(self, texts: Sequence[str]) -> Vector:
        out = np.zeros((len(texts), 8), dtype=np.float32)
        for i, t in enumerate(texts):
            out[i, len(t) % 8] = 1.0
        return out

    def close(self) -> None:
        pass


class SwitchableStore:
    """Two pages; can be told to fail or to hang."""

    def __init__(self) -> None:
        self.state = "up"
        self.closed = False
        self.hits = [
            SearchHit(
                f"{p}-1-{i}",
                0.0,
                {"page_id": p, "paragraph": i, "title": f"page {p}", "content": f"text {i}"},
            )
            for p in (1, 2)
            for i in range(3)
        ]

    async def _gate(self) -> None:
        if self.state == "down":
            raise StoreUnavailable("connection refused")
        if self.state == "hang":
            await asyncio.sleep(3600)

    async def ensure_ready(self) -> None:
        pass

    async def ping(self) -> bool:
        return self.state == "up"

    async def warm_up(self) -> None:
        pass

    async def replace_page(
        self, *, page_id: int, revision_id: int, paragraphs: Sequence[StoredParagraph]
    ) -> None:
        raise NotImplementedError

    async def replace_pages(self, writes: Sequence[PageWrite]) -> dict[int, Exception]:
        raise NotImplementedError

    async def delete_page(self, *, page_id: int) -> int:
        raise NotImplementedError

    async def page_state(self, *, page_id: int) -> PageState | None:
        return None

    async def list_pages(self, *, limit: int = 100, offset: int = 0) -> list[PageState]:
        return []

    async def page_paragraphs(self, *, page_id: int) -> list[SearchHit]:
        return []

    async def knn(
        self, *, vector_field: str, vector: Vector, k: int, filters: Filters | None = None
    ) -> list[SearchHit]:
        await self._gate()
        return [SearchHit(h.doc_id, 2.0 - n * 0.1, h.source) for n, h in enumerate(self.hits[:k])]

    async def bm25(
        self, *, query: str, k: int, fields: Sequence[str] | None = None, filters: Filters | None = None
    ) -> list[SearchHit]:
        await self._gate()
        return [SearchHit(h.doc_id, 10.0 - n, h.source) for n, h in enumerate(reversed(self.hits[:k]))]

    async def get(self, *, doc_ids: Sequence[str]) -> list[SearchHit]:
        return []

    async def count(self) -> int:
        return len(self.hits)

    async def close(self) -> None:
        self.closed = True


@pytest.fixture()
def fakes() -> tuple[SwitchableStore, OneHotEmbedder]:
    return SwitchableStore(), OneHotEmbedder()


@pytest.fixture()
def client(fakes: tuple[SwitchableStore, OneHotEmbedder]) -> Iterator[TestClient]:
    store, embedder = fakes

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

    with TestClient(create_app(resources=factory)) as c:
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
    client: TestClient, fakes: tuple[SwitchableStore, OneHotEmbedder]
) -> None:
    fakes[0].state = "down"
    r = client.post("/v1/retrieve", json={"query": "text"})
    assert r.status_code == 503
    assert r.json()["dependency"] == "store"
    ready = client.get("/readyz")
    assert ready.status_code == 503 and ready.json()["checks"] == {"store": False}


def test_store_that_hangs_is_503_within_the_timeout(
    client: TestClient, fakes: tuple[SwitchableStore, OneHotEmbedder]
) -> None:
    fakes[0].state = "hang"
    r = client.post("/v1/retrieve", json={"query": "text"})
    assert r.status_code == 503
    assert r.json()["dependency"] == "store"
    assert "within" in r.json()["detail"]


def test_model_down_is_503_naming_the_model(
    client: TestClient, fakes: tuple[SwitchableStore, OneHotEmbedder]
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
