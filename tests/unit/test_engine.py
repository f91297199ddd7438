"""RetrievalEngine orchestration with small in-memory fakes of the store and the embedder.

The real stores and models have their own contract and integration suites; here only the engine's
own decisions are under test: which branches run, weights, fusion, grouping, rerank, errors, timeouts.
"""

from __future__ import annotations

import asyncio

import pytest
from support.engine_corpus import DIM, build, embedder
from support.fakes import FakeReranker

from ragbot.embedders import CachedQueryEmbedder, cached_queries
from ragbot.errors import DependencyUnavailable, StoreUnavailable, ValidationFailed
from ragbot.retrieval import BM25_BRANCH, RetrievalDefaults
from ragbot.schemas.retrieval import RetrieveRequest


async def test_hybrid_searches_every_vector_field_and_bm25_and_groups_by_page() -> None:
    engine, store, _ = build()
    response = await engine.retrieve(
        RetrieveRequest(query="unemployment benefits claim", paragraphs_per_page=[2, 1])
    )
    assert sorted(store.calls) == sorted(
        ["bm25", "knn:content_alpha_vectors", "knn:title_beta_vectors", "knn:content_beta_vectors"]
    )
    docs = response.model_dump(mode="json")["documents"]
    assert [d["page_id"] for d in docs][:2] == [1, 1]
    assert len(docs) == 3 and len({d["page_id"] for d in docs}) == 2
    assert all(not k.endswith("_vectors") for d in docs for k in d)
    assert {"_id", "score", "page_id", "content", "title"} <= set(docs[0])
    assert response.documents[0].content and response.documents[0].id == docs[0]["_id"]
    branches = response.model_dump(mode="json")["debug"]["branches"]
    assert set(branches) == {
        "content_alpha_vectors",
        "title_beta_vectors",
        "content_beta_vectors",
        BM25_BRANCH,
    }
    bm25 = branches[BM25_BRANCH]["candidates"]
    assert {"_id", "score", "title", "page_id"} <= set(bm25[0])
    assert response.debug.fused[0].ranks and response.debug.branches[BM25_BRANCH].kind == "bm25"
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
    assert len(embs["alpha"].query_calls) == 1 and len(embs["beta"].query_calls) == 1
    await engine.retrieve(RetrieveRequest(query="other text", mode="semantic"))
    assert len(embs["alpha"].query_calls) == 2
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
    engine, _, _ = build({"alpha": embedder("alpha", broken=True), "beta": embedder("beta")})
    with pytest.raises(DependencyUnavailable) as err:
        await engine.retrieve(RetrieveRequest(query="rent"))
    assert err.value.dependency == "model:alpha"
    slow, _, _ = build({"alpha": embedder("alpha", query_delay_s=2.0), "beta": embedder("beta")})
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
    assert [d.content for d in response.documents] == [
        "Rent assistance for new immigrants",
        "How to apply for rent help",
    ]
    assert response.documents[0].score == 0.9
    assert response.debug.rerank is not None and response.debug.rerank.kept == 2
    assert response.timings_ms["rerank"] > 0

    engine.reranker = FakeReranker({})
    empty = await engine.retrieve(RetrieveRequest(query="rent help benefits"))
    assert empty.documents == [] and empty.debug.rerank and empty.debug.rerank.no_relevant_paragraphs

    skipped = await engine.retrieve(RetrieveRequest(query="rent help benefits", rerank=False))
    assert skipped.documents and skipped.debug.rerank is None


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
