"""RetrievalEngine orchestration with small in-memory fakes of the store and the embedder.

The real stores and models have their own contract and integration suites; here only the engine's
own decisions are under test: which branches run, weights, fusion, grouping, rerank, errors, timeouts.
"""

from __future__ import annotations

import asyncio
import re
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from ragbot.definition import DocumentDefinition, parse_definition
from ragbot.embedders import CachedQueryEmbedder, cached_queries
from ragbot.errors import DependencyUnavailable, EmbeddingError, StoreUnavailable, ValidationFailed
from ragbot.ports import Filters, PageWrite, SearchHit, StoredParagraph, Vector
from ragbot.retrieval import BM25_BRANCH, RetrievalDefaults, RetrievalEngine
from ragbot.schemas.pages import PageState
from ragbot.schemas.retrieval import RetrieveRequest

DIM = 64


def definition() -> DocumentDefinition:
    return parse_definition(
        {
            "identifier_field": "page_id",
            "saved_fields": {"title": "text", "page_id": "integer", "content": "text"},
            "field_for_llm": "content",
            "models": {"alpha": "content", "beta": ["title", "content"]},
        }
    )


def words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


class FakeEmbedder:
    """Bag-of-words hashed into DIM buckets (seeded per model), L2-normalised."""

    def __init__(self, name: str, *, fail: bool = False, delay_s: float = 0.0) -> None:
        self.name = name
        self.fail = fail
        self.delay_s = delay_s
        self.calls = 0

    @property
    def dimension(self) -> int:
        return DIM

    @property
    def max_tokens(self) -> int:
        return 256

    def warm_up(self) -> None:
        pass

    def count_tokens(self, text: str) -> int:
        return len(words(text))

    def _vec(self, text: str) -> Vector:
        v = np.zeros(DIM, dtype=np.float32)
        for w in words(text):
            v[zlib.crc32(f"{self.name}:{w}".encode()) % DIM] += 1.0
        n = float(np.linalg.norm(v))
        return v / n if n else v

    def embed_queries(self, texts: Sequence[str]) -> Vector:
        self.calls += 1
        if self.fail:
            raise EmbeddingError(f"{self.name} is broken")
        if self.delay_s:
            import time

            time.sleep(self.delay_s)
        return np.stack([self._vec(t) for t in texts])

    def embed_passages(self, texts: Sequence[str]) -> Vector:
        return np.stack([self._vec(t) for t in texts])

    def close(self) -> None:
        pass


class FakeStore:
    """Exact cosine + 1 and a word-overlap 'BM25' over paragraphs held in a list."""

    def __init__(self, paragraphs: list[StoredParagraph], *, hang: bool = False, down: bool = False) -> None:
        self.paragraphs = paragraphs
        self.hang = hang
        self.down = down
        self.calls: list[str] = []

    async def _gate(self, what: str) -> None:
        self.calls.append(what)
        if self.down:
            raise StoreUnavailable("fake store is down")
        if self.hang:
            await asyncio.sleep(3600)

    async def ensure_ready(self) -> None:
        pass

    async def ping(self) -> bool:
        return not self.down

    async def warm_up(self) -> None:
        pass

    async def replace_page(
        self, *, page_id: int, revision_id: int, paragraphs: Sequence[StoredParagraph]
    ) -> None:
        self.paragraphs = [p for p in self.paragraphs if p.page_id != page_id] + list(paragraphs)

    async def replace_pages(self, writes: Sequence[PageWrite]) -> dict[int, Exception]:
        for w in writes:
            await self.replace_page(page_id=w.page_id, revision_id=w.revision_id, paragraphs=w.paragraphs)
        return {}

    async def delete_page(self, *, page_id: int) -> int:
        before = len(self.paragraphs)
        self.paragraphs = [p for p in self.paragraphs if p.page_id != page_id]
        return before - len(self.paragraphs)

    async def page_state(self, *, page_id: int) -> PageState | None:
        return None

    async def list_pages(self, *, limit: int = 100, offset: int = 0) -> list[PageState]:
        return []

    async def page_paragraphs(self, *, page_id: int) -> list[SearchHit]:
        return [self._hit(p, 0.0) for p in self.paragraphs if p.page_id == page_id]

    @staticmethod
    def _hit(p: StoredParagraph, score: float) -> SearchHit:
        source = {**p.fields, "page_id": p.page_id, "paragraph": p.paragraph, "revision_id": p.revision_id}
        return SearchHit(doc_id=p.doc_id, score=score, source=source)

    def _filtered(self, filters: Filters | None) -> list[StoredParagraph]:
        if not filters:
            return self.paragraphs
        return [p for p in self.paragraphs if all(p.fields.get(k) == v for k, v in filters.items())]

    async def knn(
        self, *, vector_field: str, vector: Vector, k: int, filters: Filters | None = None
    ) -> list[SearchHit]:
        await self._gate(f"knn:{vector_field}")
        scored = [
            (float(np.dot(p.vectors[vector_field], vector)) + 1.0, p)
            for p in self._filtered(filters)
            if vector_field in p.vectors
        ]
        scored.sort(key=lambda sp: sp[0], reverse=True)
        return [self._hit(p, s) for s, p in scored[:k]]

    async def bm25(
        self, *, query: str, k: int, fields: Sequence[str] | None = None, filters: Filters | None = None
    ) -> list[SearchHit]:
        await self._gate("bm25")
        q = set(words(query))
        scored = []
        for p in self._filtered(filters):
            overlap = len(q & set(words(f"{p.fields.get('title', '')} {p.fields.get('content', '')}")))
            if overlap:
                scored.append((float(overlap), p))
        scored.sort(key=lambda sp: sp[0], reverse=True)
        return [self._hit(p, s) for s, p in scored[:k]]

    async def get(self, *, doc_ids: Sequence[str]) -> list[SearchHit]:
        by_id = {p.doc_id: p for p in self.paragraphs}
        return [self._hit(by_id[i], 0.0) for i in doc_ids if i in by_id]

    async def count(self) -> int:
        return len(self.paragraphs)

    async def close(self) -> None:
        pass


CORPUS = {
    1: (
        "Unemployment benefits",
        [
            "How to claim unemployment benefits",
            "Who is eligible for benefits",
            "Appeals against benefit decisions",
        ],
    ),
    2: ("Maternity leave", ["Length of maternity leave", "Maternity allowance and benefits"]),
    3: ("Rent assistance", ["Rent assistance for new immigrants", "How to apply for rent help"]),
    4: ("Disability pension", ["Disability pension rates", "Medical committee for disability"]),
}


def build(
    embedders: dict[str, FakeEmbedder] | None = None, **store_kwargs: Any
) -> tuple[RetrievalEngine, FakeStore, dict[str, FakeEmbedder]]:
    d = definition()
    embs = embedders or {"alpha": FakeEmbedder("alpha"), "beta": FakeEmbedder("beta")}
    paragraphs = []
    for page_id, (title, texts) in CORPUS.items():
        for i, text in enumerate(texts):
            fields: dict[str, Any] = {"title": title, "content": text, "page_id": page_id}
            vectors = {
                v.name: embs[v.model].embed_passages([str(fields[v.field])])[0] for v in d.vector_fields
            }
            paragraphs.append(StoredParagraph(f"{page_id}-1-{i}", page_id, 1, i, fields, vectors))
    store = FakeStore(paragraphs, **store_kwargs)
    engine = RetrievalEngine(
        store=store,
        embedders=embs,
        definition=d,
        defaults=RetrievalDefaults(store_timeout_s=0.2, embed_timeout_s=0.5),
    )
    return engine, store, embs


class FakeReranker:
    def __init__(self, scores: dict[str, float]) -> None:
        self.scores = scores
        self.seen: list[str] = []

    def warm_up(self) -> None:
        pass

    def score(self, query: str, passages: Sequence[str]) -> list[float]:
        self.seen = list(passages)
        return [self.scores.get(p, 0.0) for p in passages]

    def close(self) -> None:
        pass


async def test_hybrid_searches_every_vector_field_and_bm25_and_groups_by_page() -> None:
    engine, store, _ = build()
    response = await engine.retrieve(
        RetrieveRequest(query="unemployment benefits claim", paragraphs_per_page=[2, 1])
    )
    assert sorted(store.calls) == sorted(
        ["bm25", "knn:content_alpha_vectors", "knn:title_beta_vectors", "knn:content_beta_vectors"]
    )
    docs = response.documents
    assert [d["page_id"] for d in docs][:2] == [1, 1]
    assert len(docs) == 3 and len({d["page_id"] for d in docs}) == 2
    assert all(not k.endswith("_vectors") for d in docs for k in d)
    assert {"_id", "score", "page_id", "content", "title"} <= set(docs[0])
    branches = response.debug["branches"]
    assert set(branches) == {
        "content_alpha_vectors",
        "title_beta_vectors",
        "content_beta_vectors",
        BM25_BRANCH,
    }
    bm25 = branches[BM25_BRANCH]["candidates"]
    assert {"_id", "score", "title", "page_id"} <= set(bm25[0])
    assert response.debug["fused"][0]["ranks"]
    assert set(response.timings_ms) == {"embed", "dense", "bm25", "fusion", "rerank", "total"}
    assert response.timings_ms["total"] >= response.timings_ms["fusion"]


async def test_modes_choose_branches() -> None:
    engine, store, _ = build()
    await engine.retrieve(RetrieveRequest(query="rent", mode="lexical"))
    assert store.calls == ["bm25"]
    store.calls.clear()
    await engine.retrieve(RetrieveRequest(query="rent", mode="semantic", models={"alpha": 1.0}))
    assert store.calls == ["knn:content_alpha_vectors"]


async def test_zero_weight_skips_a_model_and_unknown_model_is_refused() -> None:
    engine, store, _ = build()
    await engine.retrieve(RetrieveRequest(query="rent", mode="semantic", models={"alpha": 0.0, "beta": 2.0}))
    assert "knn:content_alpha_vectors" not in store.calls
    with pytest.raises(ValidationFailed) as err:
        await engine.retrieve(RetrieveRequest(query="rent", models={"gamma": 1.0}))
    assert err.value.field == "models"
    with pytest.raises(ValidationFailed) as err:
        await engine.retrieve(RetrieveRequest(query="rent", mode="semantic", models={"alpha": 0.0}))
    assert err.value.field == "models"
    with pytest.raises(ValidationFailed) as err:
        await engine.retrieve(RetrieveRequest(query="rent", models={"alpha": float("inf")}))
    assert err.value.field == "models"


async def test_query_limits_come_from_defaults() -> None:
    engine, _, _ = build()
    engine.defaults = RetrievalDefaults(max_query_chars=10)
    with pytest.raises(ValidationFailed) as err:
        await engine.retrieve(RetrieveRequest(query="x" * 11))
    assert err.value.field == "query"


async def test_page_rrf_uses_pages_requested_as_k_and_kolzchut_ragbots_ordering() -> None:
    engine, _, _ = build()
    result = await engine.run(
        RetrieveRequest(
            query="disability pension", mode="semantic", fusion="page_rrf", paragraphs_per_page=[2, 1, 1]
        )
    )
    assert result.rrf_k == 3
    first_page = [d for d in result.documents if d.page_id == result.documents[0].page_id]
    best = [max(s for n, s in d.raw_scores.items()) for d in first_page]
    assert best == sorted(best, reverse=True)
    assert result.documents[0].page_id == 4


async def test_threshold_drops_dense_candidates_before_fusion() -> None:
    engine, _, _ = build()
    result = await engine.run(
        RetrieveRequest(query="maternity leave", mode="semantic", paragraph_relevance_threshold=1.3)
    )
    assert sum(result.dropped_by_threshold.values()) > 0
    assert all(s >= 1.3 for f in result.fused for s in f.raw_scores.values())
    none = await engine.run(
        RetrieveRequest(query="maternity leave", mode="semantic", paragraph_relevance_threshold=2.5)
    )
    assert none.documents == []


async def test_query_embeddings_go_through_the_embedders_lru() -> None:
    engine, _, embs = build()
    engine.embedders = cached_queries(embs, max_size=8)  # as the composition roots wrap them
    for _ in range(3):
        await engine.retrieve(RetrieveRequest(query="rent help", mode="semantic"))
    assert embs["alpha"].calls == 1 and embs["beta"].calls == 1
    await engine.retrieve(RetrieveRequest(query="other text", mode="semantic"))
    assert embs["alpha"].calls == 2
    alpha = engine.embedders["alpha"]
    assert isinstance(alpha, CachedQueryEmbedder) and alpha.hits == 2


async def test_score_fusion_and_bm25_weight() -> None:
    engine, _, _ = build()
    result = await engine.run(RetrieveRequest(query="rent assistance", fusion="score", bm25_weight=3.0))
    assert result.fusion == "score"
    assert result.documents[0].page_id == 3
    bm25 = next(b for b in result.branches if b.name == BM25_BRANCH)
    assert bm25.weight == 3.0


async def test_store_that_hangs_is_a_store_unavailable_not_a_hang() -> None:
    engine, _, _ = build(hang=True)
    with pytest.raises(StoreUnavailable) as err:
        await asyncio.wait_for(engine.retrieve(RetrieveRequest(query="rent")), timeout=5)
    assert err.value.dependency == "store"


async def test_model_down_names_the_model() -> None:
    engine, _, _ = build({"alpha": FakeEmbedder("alpha", fail=True), "beta": FakeEmbedder("beta")})
    with pytest.raises(DependencyUnavailable) as err:
        await engine.retrieve(RetrieveRequest(query="rent"))
    assert err.value.dependency == "model:alpha"
    slow, _, _ = build({"alpha": FakeEmbedder("alpha", delay_s=2.0), "beta": FakeEmbedder("beta")})
    with pytest.raises(DependencyUnavailable) as err:
        await slow.retrieve(RetrieveRequest(query="rent"))
    assert err.value.dependency == "model:alpha"


async def test_rerank_reorders_cuts_and_reports_no_relevant_paragraphs() -> None:
    engine, _, _ = build()
    reranker = FakeReranker(
        {
            "Rent assistance for new immigrants": 0.9,
            "How to apply for rent help": 0.85,
            "Who is eligible for benefits": 0.2,
        }
    )
    engine.reranker = reranker
    engine.defaults = RetrievalDefaults(rerank_top_n=8, rerank_min_score=0.5, rerank_gap_ratio=0.5)
    response = await engine.retrieve(RetrieveRequest(query="rent help benefits", paragraphs_per_page=[3, 3]))
    assert len(reranker.seen) == 8
    assert [d["content"] for d in response.documents] == [
        "Rent assistance for new immigrants",
        "How to apply for rent help",
    ]
    assert response.documents[0]["score"] == 0.9
    assert response.debug["rerank"]["kept"] == 2
    assert response.timings_ms["rerank"] > 0

    engine.reranker = FakeReranker({})
    empty = await engine.retrieve(RetrieveRequest(query="rent help benefits"))
    assert empty.documents == [] and empty.debug["rerank"]["no_relevant_paragraphs"] is True

    skipped = await engine.retrieve(RetrieveRequest(query="rent help benefits", rerank=False))
    assert skipped.documents and skipped.debug["rerank"] is None


async def test_rerank_without_reranker_is_refused() -> None:
    engine, _, _ = build()
    with pytest.raises(ValidationFailed) as err:
        await engine.retrieve(RetrieveRequest(query="rent", rerank=True))
    assert err.value.field == "rerank"


async def test_filters_pass_through_to_every_branch() -> None:
    engine, _, _ = build()
    result = await engine.run(RetrieveRequest(query="benefits", filters={"title": "Maternity leave"}))
    assert result.documents and {d.page_id for d in result.documents} == {2}


def test_models_info_lists_dimensions_and_vector_fields() -> None:
    engine, _, _ = build()
    assert engine.models_info() == [
        {"name": "alpha", "dimension": DIM, "vector_fields": ["content_alpha_vectors"]},
        {"name": "beta", "dimension": DIM, "vector_fields": ["title_beta_vectors", "content_beta_vectors"]},
    ]
