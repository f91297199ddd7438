"""``POST /v1/similarity``: cosines of short texts to a query with a loaded model, the model chosen
(named, else multilingual-e5-small, else the first), 422 for unknown models and oversize bodies, 503
when the model fails or is too slow (the embedder is the hashed bag-of-words fake)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import numpy as np
import pytest
from fastapi.testclient import TestClient
from support.fakes import HashEmbedder, MemoryStore

from ragbot.definition import parse_definition
from ragbot.retrieval import RetrievalDefaults, RetrievalEngine
from ragbot.retrieval.similarity import choose_model
from ragbot.schemas.similarity import MAX_SIMILARITY_TEXT_CHARS, MAX_SIMILARITY_TEXTS
from ragbot_retriever.app import create_app
from ragbot_retriever.deps import Resources

DEFINITION = parse_definition(
    {
        "identifier_field": "page_id",
        "saved_fields": {"title": "text", "page_id": "integer", "content": "text"},
        "field_for_llm": "content",
        "models": {"mini": "content", "multilingual-e5-small": "content"},
    }
)


@pytest.fixture()
def embedders() -> dict[str, HashEmbedder]:
    return {
        "mini": HashEmbedder("mini", dimension=16),
        "multilingual-e5-small": HashEmbedder("e5", dimension=16, fail_on="explode"),
    }


@pytest.fixture()
def client(embedders: dict[str, HashEmbedder]) -> Iterator[TestClient]:
    store = MemoryStore([])

    @asynccontextmanager
    async def resources() -> AsyncIterator[Resources]:
        engine = RetrievalEngine(
            store=store,
            embedders=embedders,
            definition=DEFINITION,
            defaults=RetrievalDefaults(store_timeout_s=0.3, embed_timeout_s=0.3),
        )
        yield Resources(engine=engine, store=store, embedders=embedders, definition=DEFINITION)

    def factory() -> AbstractAsyncContextManager[Resources]:
        return resources()

    with TestClient(create_app(resources=factory)) as c:
        yield c


def test_scores_each_text_in_order_with_the_multilingual_model_by_default(
    client: TestClient, embedders: dict[str, HashEmbedder]
) -> None:
    body = {"query": "credit points for teenagers", "texts": ["credit points for teenagers", "penguins nest"]}
    response = client.post("/v1/similarity", json=body)
    assert response.status_code == 200, response.text
    data = response.json()
    assert data["model"] == "multilingual-e5-small"
    assert data["scores"][0] == pytest.approx(1.0, abs=1e-5) and data["scores"][1] < 0.5
    assert embedders["multilingual-e5-small"].passage_calls == [body["texts"]]
    assert embedders["mini"].calls == []


def test_vectors_come_back_only_when_asked_and_are_what_the_scores_came_from(client: TestClient) -> None:
    body = {"query": "credit points", "texts": ["credit points for teenagers", "penguins nest"]}
    plain = client.post("/v1/similarity", json=body).json()
    assert plain["query_vector"] is None and plain["vectors"] is None
    data = client.post("/v1/similarity", json={**body, "vectors": True}).json()
    q, p = np.array(data["query_vector"]), np.array(data["vectors"])
    assert q.shape == (16,) and p.shape == (2, 16)
    assert np.allclose(p @ q, data["scores"], atol=1e-5) and data["scores"] == plain["scores"]
    assert np.allclose(np.linalg.norm(p, axis=1), 1.0, atol=1e-5)


def test_a_named_model_answers_and_an_unknown_one_is_refused(client: TestClient) -> None:
    ok = client.post("/v1/similarity", json={"query": "a b", "texts": ["a b"], "model": "mini"})
    assert ok.status_code == 200 and ok.json()["model"] == "mini"
    bad = client.post("/v1/similarity", json={"query": "a b", "texts": ["a b"], "model": "nope"})
    assert bad.status_code == 422 and "nope" in bad.text


def test_bodies_out_of_bounds_are_422(client: TestClient) -> None:
    many = client.post("/v1/similarity", json={"query": "q", "texts": ["t"] * (MAX_SIMILARITY_TEXTS + 1)})
    too_long = "x" * (MAX_SIMILARITY_TEXT_CHARS + 1)
    long = client.post("/v1/similarity", json={"query": "q", "texts": [too_long]})
    none = client.post("/v1/similarity", json={"query": "q", "texts": []})
    assert [many.status_code, long.status_code, none.status_code] == [422, 422, 422]


def test_a_failing_model_is_503_naming_it(client: TestClient) -> None:
    response = client.post("/v1/similarity", json={"query": "q", "texts": ["it will explode"]})
    assert response.status_code == 503
    assert "multilingual-e5-small" in response.text


def test_choose_model_falls_back_to_the_first_loaded() -> None:
    assert choose_model({"a": HashEmbedder("a"), "b": HashEmbedder("b")}, None) == "a"
