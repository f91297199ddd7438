"""One contract, two stores: the embedded SQLite store and Elasticsearch must behave the same.

Every test in the first part runs once per store (embedded in a tmp dir; Elasticsearch under a uuid
index prefix whose indices and template are deleted afterwards). The last part covers what only the
embedded store promises on its own: crash safety under kill -9 and visibility across processes.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ragbot.definition import parse_definition
from ragbot.errors import RagbotError, ValidationFailed
from ragbot.ports import PageWrite, SearchHit, SearchStore, StoredParagraph, Vector
from ragbot.settings import StoreSettings
from ragbot.stores import build_store, doc_id
from ragbot.stores.elasticsearch import ElasticsearchStore
from ragbot.stores.embedded import EmbeddedStore
from ragbot.stores.embedded import schema as embedded_module
from ragbot.stores.embedded.matrix import Matrix as _Matrix

pytestmark = pytest.mark.integration

DEFINITION = parse_definition(
    {
        "identifier_field": "page_id",
        "saved_fields": {
            "title": "text",
            "page_id": "integer",
            "url": "keyword",
            "content": "text",
            "revision_date": "date",
            "namespace": "integer",
            "categories": "keyword",
            "featured": "boolean",
        },
        "field_for_llm": "content",
        "models": {"mini": "content", "e5": ["title", "content"]},
    }
)
CONTENT_MINI = "content_mini_vectors"
TITLE_E5 = "title_e5_vectors"
CONTENT_E5 = "content_e5_vectors"
DIMENSIONS = {CONTENT_MINI: 8, TITLE_E5: 6, CONTENT_E5: 6}
BACKENDS = ["embedded", "elasticsearch"]


def vectors_for(seed: int) -> dict[str, Vector]:
    """Deterministic small random vectors per field (one seed per paragraph)."""
    rng = np.random.default_rng(seed)
    return {name: rng.standard_normal(dim).astype(np.float32) for name, dim in DIMENSIONS.items()}


def paragraph(
    page_id: int,
    revision_id: int,
    n: int,
    *,
    content: str | None = None,
    title: str | None = None,
    categories: Sequence[str] = ("general",),
    namespace: int = 0,
    featured: bool = False,
    vectors: dict[str, Vector] | None = None,
) -> StoredParagraph:
    fields: dict[str, Any] = {
        "title": title if title is not None else f"Page {page_id}",
        "content": content
        if content is not None
        else f"paragraph {n} of page {page_id} revision {revision_id}",
        "url": f"https://wiki.example/{page_id}",
        "page_id": page_id,
        "revision_date": "2025-01-01T12:00:00+00:00",
        "namespace": namespace,
        "categories": list(categories),
        "featured": featured,
        "heading": f"Section {n}",
        "source": "wiki",
    }
    return StoredParagraph(
        doc_id=doc_id(page_id, revision_id, n),
        page_id=page_id,
        revision_id=revision_id,
        paragraph=n,
        fields=fields,
        vectors=vectors if vectors is not None else vectors_for(page_id * 10_000 + revision_id * 100 + n),
    )


def page(page_id: int, revision_id: int, count: int, **kwargs: Any) -> list[StoredParagraph]:
    return [paragraph(page_id, revision_id, n, **kwargs) for n in range(count)]


async def replace(store: SearchStore, paragraphs: Sequence[StoredParagraph]) -> None:
    first = paragraphs[0]
    await store.replace_page(page_id=first.page_id, revision_id=first.revision_id, paragraphs=paragraphs)


def assert_clean(hits: Sequence[SearchHit]) -> None:
    for hit in hits:
        leaked = [k for k in hit.source if k.endswith("_vectors") or k.endswith("__bm25")]
        assert not leaked, f"{hit.doc_id} leaks {leaked}"
        assert hit.source["doc_id"] == hit.doc_id


def untied(hits: Sequence[SearchHit]) -> list[str]:
    """Ids of the hits whose score no other hit shares (within float noise), in rank order."""
    return [
        h.doc_id
        for h in hits
        if not any(o is not h and o.score == pytest.approx(h.score, rel=1e-4) for o in hits)
    ]


def es_settings(es_url: str) -> StoreSettings:
    return StoreSettings(
        backend="elasticsearch",
        es_url=es_url,
        es_index_prefix=f"test_{uuid.uuid4().hex[:12]}",
        es_timeout_s=30.0,
        vector_search="exact",
    )


async def open_store(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> SearchStore:
    if backend == "embedded":
        settings = StoreSettings(backend="embedded", embedded_path=tmp_path / "store.sqlite3")
    else:
        settings = es_settings(request.getfixturevalue("es_url"))
    store = build_store(settings=settings, definition=DEFINITION, dimensions=DIMENSIONS)
    await store.ensure_ready()
    return store


async def dispose(store: SearchStore) -> None:
    if isinstance(store, ElasticsearchStore):
        await store.drop_indices()
    await store.close()


@pytest.fixture(params=BACKENDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SearchStore]:
    opened = await open_store(request.param, request, tmp_path)
    try:
        yield opened
    finally:
        await dispose(opened)


# ---- the contract -------------------------------------------------------------------------------


async def test_replace_page_then_read_it_back(store: SearchStore) -> None:
    assert isinstance(store, SearchStore)
    assert await store.ping()
    await replace(store, page(1, 10, 5))
    paragraphs = await store.page_paragraphs(page_id=1)
    assert [h.doc_id for h in paragraphs] == [doc_id(1, 10, n) for n in range(5)]
    assert all(h.score == 0.0 for h in paragraphs)
    assert_clean(paragraphs)
    src = paragraphs[2].source
    assert src["page_id"] == 1 and src["revision_id"] == 10 and src["paragraph"] == 2
    assert src["categories"] == ["general"] and src["featured"] is False
    assert src["last_update"]
    assert await store.count() == 5
    state = await store.page_state(page_id=1)
    assert state is not None
    assert (state.revision_id, state.paragraphs, state.title) == (10, 5, "Page 1")
    assert state.paragraphs_per_model == {"mini": 5, "e5": 5}
    assert state.last_update is not None and state.last_update.tzinfo is not None


async def test_shrinking_revision_leaves_exactly_the_new_paragraphs(store: SearchStore) -> None:
    await replace(store, page(7, 1, 30))
    assert await store.count() == 30
    await replace(store, page(7, 2, 3))
    paragraphs = await store.page_paragraphs(page_id=7)
    assert [h.doc_id for h in paragraphs] == [doc_id(7, 2, n) for n in range(3)]
    assert await store.count() == 3
    assert await store.get(doc_ids=[doc_id(7, 1, n) for n in range(30)]) == []
    state = await store.page_state(page_id=7)
    assert state is not None and (state.revision_id, state.paragraphs) == (2, 3)


async def test_rewriting_the_same_revision_drops_surplus_paragraphs(store: SearchStore) -> None:
    await replace(store, page(8, 5, 10))
    await replace(store, page(8, 5, 4))
    assert [h.doc_id for h in await store.page_paragraphs(page_id=8)] == [doc_id(8, 5, n) for n in range(4)]
    assert await store.count() == 4


async def test_replace_leaves_only_the_given_revision_even_an_older_one(store: SearchStore) -> None:
    # Refusing stale revisions is the caller's job; the store does what it is told, atomically.
    await replace(store, page(9, 5, 4))
    await replace(store, page(9, 3, 2))
    hits = await store.page_paragraphs(page_id=9)
    assert {h.source["revision_id"] for h in hits} == {3}
    assert len(hits) == 2


async def test_replace_with_no_paragraphs_empties_the_page(store: SearchStore) -> None:
    await replace(store, page(11, 1, 3))
    await store.replace_page(page_id=11, revision_id=2, paragraphs=[])
    assert await store.page_paragraphs(page_id=11) == []
    assert await store.page_state(page_id=11) is None


async def test_pages_in_other_buckets_are_untouched(store: SearchStore) -> None:
    await replace(store, page(1, 1, 3))
    await replace(store, page(999, 1, 2))
    await replace(store, page(1500, 1, 4))  # another bucket: index <prefix>_1 on Elasticsearch
    await replace(store, page(1, 2, 1))
    assert len(await store.page_paragraphs(page_id=999)) == 2
    assert len(await store.page_paragraphs(page_id=1500)) == 4
    assert await store.count() == 7
    assert await store.delete_page(page_id=1500) == 4
    assert await store.count() == 3


def write(paragraphs: Sequence[StoredParagraph]) -> PageWrite:
    first = paragraphs[0]
    return PageWrite(first.page_id, first.revision_id, paragraphs)


async def doc_ids_of(store: SearchStore, page_id: int) -> list[str]:
    return [h.doc_id for h in await store.page_paragraphs(page_id=page_id)]


async def test_replace_pages_leaves_each_page_with_exactly_its_new_revision(store: SearchStore) -> None:
    for paragraphs in (page(1, 1, 3), page(2, 4, 2), page(1500, 1, 2), page(5, 1, 2)):
        await replace(store, paragraphs)
    failed = await store.replace_pages(
        [
            write(page(1, 2, 2)),  # a new revision replaces the old one
            write(page(2, 4, 5)),  # the same revision grows
            write(page(1500, 3, 4)),  # another bucket
            write(page(3, 1, 2)),  # a new page
            PageWrite(4, 1, []),  # no paragraphs: an empty page
        ]
    )
    assert failed == {}
    assert await doc_ids_of(store, 1) == [doc_id(1, 2, n) for n in range(2)]
    assert await doc_ids_of(store, 2) == [doc_id(2, 4, n) for n in range(5)]
    assert await doc_ids_of(store, 1500) == [doc_id(1500, 3, n) for n in range(4)]
    assert await doc_ids_of(store, 3) == [doc_id(3, 1, n) for n in range(2)]
    assert await doc_ids_of(store, 5) == [doc_id(5, 1, n) for n in range(2)]  # untouched
    assert await store.get(doc_ids=[doc_id(1, 1, n) for n in range(3)]) == []
    assert await store.count() == 15
    state = await store.page_state(page_id=1500)
    assert state is not None and (state.revision_id, state.paragraphs) == (3, 4)
    query = vectors_for(1 * 10_000 + 2 * 100 + 1)[CONTENT_MINI]  # paragraph 1 of page 1 revision 2
    [hit] = await store.knn(vector_field=CONTENT_MINI, vector=query, k=1)  # searchable at once
    assert hit.doc_id == doc_id(1, 2, 1)


async def test_replace_pages_reports_a_refused_page_and_writes_the_others(store: SearchStore) -> None:
    await replace(store, page(4, 1, 3))
    await replace(store, page(6, 1, 2))
    wrong_dimension = page(4, 2, 3)
    wrong_dimension[1].vectors[CONTENT_MINI] = np.ones(3, dtype=np.float32)
    wrong_type = page(8, 1, 2)
    wrong_type[1].fields["namespace"] = "abc"
    failed = await store.replace_pages(
        [write(wrong_dimension), write(page(6, 2, 1)), write(wrong_type), write(page(7, 1, 2))]
    )
    assert sorted(failed) == [4, 8]
    assert all(isinstance(e, ValidationFailed) for e in failed.values())
    assert "expects 8 dimensions" in str(failed[4])
    assert await doc_ids_of(store, 4) == [doc_id(4, 1, n) for n in range(3)]  # the old revision stays
    assert await doc_ids_of(store, 8) == []
    assert await doc_ids_of(store, 6) == [doc_id(6, 2, 0)]
    assert await doc_ids_of(store, 7) == [doc_id(7, 1, n) for n in range(2)]
    assert await store.count() == 6


async def test_replace_pages_of_nothing_is_a_no_op_and_a_page_twice_is_refused(store: SearchStore) -> None:
    await replace(store, page(1, 1, 2))
    assert await store.replace_pages([]) == {}
    with pytest.raises(ValueError, match="same page twice"):
        await store.replace_pages([write(page(2, 1, 1)), write(page(2, 2, 1))])
    assert await store.count() == 2 and await doc_ids_of(store, 2) == []


async def test_delete_page(store: SearchStore) -> None:
    await replace(store, page(3, 4, 6))
    await replace(store, page(4, 1, 2))
    assert await store.delete_page(page_id=3) == 6
    assert await store.page_paragraphs(page_id=3) == []
    assert await store.page_state(page_id=3) is None
    assert await store.delete_page(page_id=3) == 0
    assert await store.delete_page(page_id=123456) == 0
    assert await store.count() == 2
    hits = await store.knn(vector_field=CONTENT_MINI, vector=vectors_for(1)[CONTENT_MINI], k=10)
    assert {h.page_id for h in hits} == {4}


async def test_page_state_of_unknown_page_is_none(store: SearchStore) -> None:
    assert await store.page_state(page_id=424242) is None
    assert await store.page_paragraphs(page_id=424242) == []


async def test_list_pages_walks_every_page_by_id_with_its_newest_revision(store: SearchStore) -> None:
    assert await store.list_pages() == []
    for page_id, count in [(5, 3), (2, 1), (3000, 2), (9, 4)]:  # 3000 lives in another bucket index
        await replace(store, page(page_id, 1, count))
    await replace(store, page(9, 2, 2, title="Renamed"))
    listed = await store.list_pages(limit=10)
    assert [(p.page_id, p.revision_id, p.paragraphs, p.title) for p in listed] == [
        (2, 1, 1, "Page 2"),
        (5, 1, 3, "Page 5"),
        (9, 2, 2, "Renamed"),
        (3000, 1, 2, "Page 3000"),
    ]
    for listed_state in listed:
        state = await store.page_state(page_id=listed_state.page_id)
        assert state is not None and listed_state.last_update == state.last_update
        assert listed_state.last_update is not None and listed_state.last_update.tzinfo is not None
        assert listed_state.paragraphs_per_model == {}
    assert [p.page_id for p in await store.list_pages(limit=2, offset=1)] == [5, 9]
    assert [p.page_id for p in await store.list_pages(limit=1, offset=3)] == [3000]
    assert await store.list_pages(limit=5, offset=4) == []
    assert await store.list_pages(limit=5, offset=400) == []
    with pytest.raises(ValidationFailed):
        await store.list_pages(limit=0)
    with pytest.raises(ValidationFailed):
        await store.list_pages(offset=-1)
    await store.delete_page(page_id=5)
    assert [p.page_id for p in await store.list_pages()] == [2, 9, 3000]


async def test_page_revisions_lists_every_page_with_its_newest_revision(store: SearchStore) -> None:
    assert await store.page_revisions() == {}
    for page_id, revision_id in [(5, 3), (2, 1), (3000, 7), (9, 4), (12_345, 2)]:  # several bucket indices
        await replace(store, page(page_id, revision_id, 2))
    await replace(store, page(9, 6, 1))
    await replace(store, page(2, 1, 3))
    assert await store.page_revisions() == {2: 1, 5: 3, 9: 6, 3000: 7, 12_345: 2}
    await store.delete_page(page_id=5)
    assert await store.page_revisions() == {2: 1, 9: 6, 3000: 7, 12_345: 2}


async def _corpus(store: SearchStore) -> dict[str, dict[str, Vector]]:
    """20 pages x 3 paragraphs with random vectors; returns doc id -> vectors."""
    written: dict[str, dict[str, Vector]] = {}
    for pid in range(1, 21):
        paragraphs = page(pid, 1, 3, namespace=pid % 3, categories=["even" if pid % 2 == 0 else "odd", "all"])
        for p in paragraphs:
            written[p.doc_id] = p.vectors
        await replace(store, paragraphs)
    return written


def _expected(
    written: dict[str, dict[str, Vector]], field: str, query: Vector, k: int
) -> list[tuple[str, float]]:
    ids = list(written)
    matrix = np.stack([written[d][field] for d in ids]).astype(np.float64)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    q = query.astype(np.float64) / np.linalg.norm(query)
    scores = matrix @ q + 1.0
    order = np.argsort(-scores)[:k]
    return [(ids[i], float(scores[i])) for i in order]


async def test_warm_up_is_idempotent_on_an_empty_and_a_full_store(store: SearchStore) -> None:
    await store.warm_up()
    written = await _corpus(store)
    await store.warm_up()
    await store.warm_up()
    target = doc_id(6, 1, 1)
    hits = await store.knn(vector_field=CONTENT_MINI, vector=written[target][CONTENT_MINI], k=1)
    assert hits[0].doc_id == target
    assert await store.bm25(query="paragraph 1 of page 6", k=3)
    if isinstance(store, EmbeddedStore):  # the searches found everything built
        assert store._derived.matrices is not None and store._derived.lexical is not None


@pytest.mark.parametrize("field", [CONTENT_MINI, TITLE_E5, CONTENT_E5])
async def test_knn_per_vector_field_is_exact_cosine_plus_one(store: SearchStore, field: str) -> None:
    written = await _corpus(store)
    target = doc_id(13, 1, 2)
    rng = np.random.default_rng(99)
    query = (written[target][field] + 0.05 * rng.standard_normal(DIMENSIONS[field])).astype(np.float32)
    hits = await store.knn(vector_field=field, vector=query, k=5)
    assert_clean(hits)
    assert hits[0].doc_id == target
    expected = _expected(written, field, query, 5)
    assert [h.doc_id for h in hits] == [d for d, _ in expected]
    for hit, (_, score) in zip(hits, expected, strict=True):
        assert 0.0 <= hit.score <= 2.0
        assert hit.score == pytest.approx(score, abs=1e-4)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    # The opposite direction scores near 0, the query itself near 2.
    far = await store.knn(vector_field=field, vector=-written[target][field], k=60)
    assert far[-1].doc_id == target and far[-1].score == pytest.approx(0.0, abs=1e-4)
    assert len(far) == 60


async def test_knn_filters(store: SearchStore) -> None:
    written = await _corpus(store)
    query = written[doc_id(13, 1, 0)][CONTENT_E5]
    hits = await store.knn(vector_field=CONTENT_E5, vector=query, k=100, filters={"categories": "even"})
    assert len(hits) == 30 and all(h.page_id % 2 == 0 for h in hits)
    assert hits == sorted(hits, key=lambda h: -h.score)
    hits = await store.knn(vector_field=CONTENT_E5, vector=query, k=100, filters={"page_id": [13, 14]})
    assert {h.page_id for h in hits} == {13, 14} and hits[0].doc_id == doc_id(13, 1, 0)
    hits = await store.knn(
        vector_field=CONTENT_E5, vector=query, k=100, filters={"namespace": 1, "categories": ["odd", "nope"]}
    )
    assert {h.page_id for h in hits} == {p for p in range(1, 21) if p % 3 == 1 and p % 2 == 1}
    assert await store.knn(vector_field=CONTENT_E5, vector=query, k=5, filters={"featured": True}) == []
    assert len(await store.knn(vector_field=CONTENT_E5, vector=query, k=5, filters={"featured": False})) == 5
    assert await store.knn(vector_field=CONTENT_E5, vector=query, k=5, filters={"page_id": []}) == []


HEBREW = {
    31: ("זכויות עובדים", "לכל עובד יש זכות לחופשה שנתית בתשלום ודמי הבראה"),
    32: ("דמי אבטלה", "מי שפוטר מעבודתו זכאי לדמי אבטלה מביטוח לאומי"),
    33: ("מס הכנסה", "החזר מס הכנסה לשכירים שעבדו חלק מהשנה"),
    34: ("Housing grant", "Tenants may apply for a housing grant through the ministry"),
}


async def _hebrew_corpus(store: SearchStore) -> None:
    for pid, (title, content) in HEBREW.items():
        featured = pid == 32
        await replace(store, [paragraph(pid, 1, 0, title=title, content=content, featured=featured)])


async def test_bm25_finds_hebrew_words_without_their_prefix(store: SearchStore) -> None:
    await _hebrew_corpus(store)
    hits = await store.bm25(query="לעובדים", k=5)  # ל + עובדים; the title says עובדים
    assert hits and hits[0].page_id == 31
    hits = await store.bm25(query="האבטלה", k=5)  # ה + אבטלה
    assert hits and hits[0].page_id == 32
    assert await store.bm25(query="ומס", k=5) == []  # "מס" is two letters: too short a stem
    hits = await store.bm25(query="במס הכנסה", k=5)
    assert hits and hits[0].page_id == 33
    assert_clean(hits)
    assert all(h.score > 0 for h in hits)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


async def test_bm25_english_fields_and_empty_queries(store: SearchStore) -> None:
    await _hebrew_corpus(store)
    hits = await store.bm25(query="How do I get a HOUSING grant?", k=3)
    assert hits[0].page_id == 34
    assert await store.bm25(query="tenants", k=3, fields=["title"]) == []
    assert (await store.bm25(query="tenants", k=3, fields=["content"]))[0].page_id == 34
    assert (await store.bm25(query="grant", k=3, fields=["title^3", "content"]))[0].page_id == 34
    assert await store.bm25(query=" ?! ", k=3) == []
    assert await store.bm25(query="nothingmatcheshere", k=3) == []


async def test_bm25_filters(store: SearchStore) -> None:
    await _hebrew_corpus(store)
    hits = await store.bm25(query="דמי", k=5)
    assert {h.page_id for h in hits} == {31, 32}
    hits = await store.bm25(query="דמי", k=5, filters={"featured": True})
    assert [h.page_id for h in hits] == [32]
    hits = await store.bm25(query="דמי", k=5, filters={"page_id": 31, "url": "https://wiki.example/31"})
    assert [h.page_id for h in hits] == [31]
    assert await store.bm25(query="דמי", k=5, filters={"categories": ["other"]}) == []


@pytest.mark.parametrize(
    ("filters", "named"),
    [
        ({"colour": "red"}, "filters.colour"),
        ({"content": "x"}, "filters.content"),
        ({"page_id": "x"}, "filters.page_id"),
    ],
)
async def test_bad_filters_are_refused_naming_the_field(
    store: SearchStore, filters: dict[str, Any], named: str
) -> None:
    with pytest.raises(ValidationFailed) as bm25_error:
        await store.bm25(query="x", k=3, filters=filters)
    assert bm25_error.value.field == named
    with pytest.raises(ValidationFailed) as knn_error:
        await store.knn(vector_field=CONTENT_MINI, vector=vectors_for(1)[CONTENT_MINI], k=3, filters=filters)
    assert knn_error.value.field == named


async def test_bad_searches_and_writes_are_refused(store: SearchStore) -> None:
    with pytest.raises(ValidationFailed):
        await store.knn(vector_field="nope_vectors", vector=np.ones(8, dtype=np.float32), k=3)
    with pytest.raises(ValidationFailed):
        await store.knn(vector_field=CONTENT_MINI, vector=np.ones(5, dtype=np.float32), k=3)
    with pytest.raises(ValidationFailed):
        await store.knn(vector_field=CONTENT_MINI, vector=np.ones(8, dtype=np.float32), k=0)
    with pytest.raises(ValidationFailed):
        await store.bm25(query="x", k=3, fields=["url"])
    bad = paragraph(5, 1, 0, vectors={CONTENT_MINI: np.ones(3, dtype=np.float32)})
    with pytest.raises(ValidationFailed):
        await replace(store, [bad])
    with pytest.raises(ValidationFailed):
        await store.replace_page(page_id=6, revision_id=1, paragraphs=[paragraph(5, 1, 0)])
    assert await store.count() == 0


@pytest.mark.parametrize(
    ("name", "value"),
    [("namespace", "abc"), ("featured", "yes"), ("revision_date", "20250101120000"), ("title", {"a": 1})],
)
async def test_values_a_field_type_cannot_hold_are_refused(store: SearchStore, name: str, value: Any) -> None:
    await replace(store, page(12, 1, 2))
    bad = page(12, 2, 3)
    bad[2].fields[name] = value
    with pytest.raises(ValidationFailed) as err:
        await replace(store, bad)
    assert err.value.field == f"paragraphs.{name}"
    assert [h.doc_id for h in await store.page_paragraphs(page_id=12)] == [doc_id(12, 1, 0), doc_id(12, 1, 1)]


async def test_get_by_ids_keeps_the_order_asked(store: SearchStore) -> None:
    await replace(store, page(1, 1, 3))
    await replace(store, page(2000, 4, 2))
    wanted = [doc_id(2000, 4, 1), "missing-1-1", doc_id(1, 1, 2), doc_id(1, 1, 0), doc_id(2000, 4, 1)]
    hits = await store.get(doc_ids=wanted)
    assert [h.doc_id for h in hits] == [doc_id(2000, 4, 1), doc_id(1, 1, 2), doc_id(1, 1, 0)]
    assert_clean(hits)
    assert await store.get(doc_ids=[]) == []


async def test_no_vectors_or_analyzed_copies_in_any_result(store: SearchStore) -> None:
    written = await _corpus(store)
    results: list[SearchHit] = []
    results += await store.knn(vector_field=CONTENT_MINI, vector=written[doc_id(2, 1, 1)][CONTENT_MINI], k=10)
    results += await store.bm25(query="paragraph page", k=10)
    results += await store.get(doc_ids=list(written)[:10])
    results += await store.page_paragraphs(page_id=2)
    assert len(results) == 33
    assert_clean(results)


async def test_elasticsearch_approximate_mode_uses_hnsw(es_url: str) -> None:
    settings = es_settings(es_url).model_copy(update={"vector_search": "approximate"})
    store = ElasticsearchStore(settings=settings, definition=DEFINITION, dimensions=DIMENSIONS)
    try:
        await store.ensure_ready()
        mapping = store.template["template"]["mappings"]["properties"][CONTENT_MINI]
        assert mapping["index_options"] == {"type": "hnsw"}
        written = await _corpus(store)
        target = doc_id(4, 1, 1)
        hits = await store.knn(vector_field=CONTENT_MINI, vector=written[target][CONTENT_MINI], k=3)
        assert hits[0].doc_id == target and hits[0].score == pytest.approx(2.0, abs=1e-4)
    finally:
        await dispose(store)


async def test_elasticsearch_quantized_mode_scans_int8_and_returns_exact_float_scores(es_url: str) -> None:
    settings = es_settings(es_url).model_copy(update={"vector_search": "quantized"})
    store = ElasticsearchStore(settings=settings, definition=DEFINITION, dimensions=DIMENSIONS)
    try:
        await store.ensure_ready()
        mapping = store.template["template"]["mappings"]["properties"][CONTENT_MINI]
        assert mapping["index_options"] == {"type": "int8_flat"}
        written = await _corpus(store)
        rng = np.random.default_rng(5)
        for field in (CONTENT_MINI, TITLE_E5, CONTENT_E5):
            for _ in range(3):
                query = rng.standard_normal(DIMENSIONS[field]).astype(np.float32)
                hits = await store.knn(vector_field=field, vector=query, k=5)
                expected = _expected(written, field, query, 5)
                # The int8 pass only picks candidates; the order and scores come from the float vectors.
                assert [h.doc_id for h in hits] == [d for d, _ in expected]
                assert [h.score for h in hits] == pytest.approx([s for _, s in expected], abs=1e-4)
        odd = await store.knn(
            vector_field=CONTENT_MINI,
            vector=written[doc_id(3, 1, 0)][CONTENT_MINI],
            k=4,
            filters={"categories": ["odd"]},
        )
        assert odd[0].doc_id == doc_id(3, 1, 0) and all(h.page_id % 2 == 1 for h in odd)
    finally:
        await dispose(store)


async def test_elasticsearch_default_bm25_field_scores_as_combined_fields(es_url: str) -> None:
    store = ElasticsearchStore(settings=es_settings(es_url), definition=DEFINITION, dimensions=DIMENSIONS)
    try:
        await store.ensure_ready()
        await _hebrew_corpus(store)
        await _corpus(store)
        queries = ("לעובדים", "דמי אבטלה", "housing grant", "paragraph 2 of page 7", "זכויות עובדים במס")
        fast = [await store.bm25(query=q, k=8) for q in queries]
        assert store._default_field_ok  # every index has the one-field copy: the term-query path ran
        # Other weights than the copy's (all 1) never take that path.
        weighted = await store.bm25(query="housing grant", k=8, fields=["title^3", "content"])
        # The combined_fields path (what indices made before the field get) scores the same.
        store._default_field_ok, store._default_field_checked = False, time.monotonic()
        slow = [await store.bm25(query=q, k=8) for q in queries]
        combined = await store.bm25(query="housing grant", k=8, fields=["title^3", "content"])
        assert [h.score for h in weighted] == pytest.approx([h.score for h in combined], rel=1e-6)
        for q, a, b in zip(queries, fast, slow, strict=True):
            assert a, q
            assert [h.score for h in a] == pytest.approx([h.score for h in b], rel=1e-3), q
            assert untied(a) == untied(b), q
    finally:
        await dispose(store)


async def test_elasticsearch_an_index_without_the_default_bm25_field_falls_back(es_url: str) -> None:
    settings = es_settings(es_url)
    store = ElasticsearchStore(settings=settings, definition=DEFINITION, dimensions=DIMENSIONS)
    try:
        await store.ensure_ready()
        await replace(store, page(3, 1, 2))
        # An index as an older ragbot made it: per-field BM25 copies, no one-field copy.
        await store._client.indices.delete_index_template(name=f"{settings.es_index_prefix}-paragraphs")
        legacy = f"{settings.es_index_prefix}_7"
        mapping = {"content__bm25": {"type": "text", "analyzer": "whitespace"}, "page_id": {"type": "long"}}
        await store._client.indices.create(index=legacy, mappings={"dynamic": False, "properties": mapping})
        reader = ElasticsearchStore(settings=settings, definition=DEFINITION, dimensions=DIMENSIONS)
        try:
            assert not await reader._default_field_mapped()
            hits = await reader.bm25(query="paragraph page", k=5)
            assert {h.doc_id for h in hits} == {doc_id(3, 1, 0), doc_id(3, 1, 1)}
        finally:
            await reader.close()
    finally:
        await dispose(store)


async def test_elasticsearch_undoes_a_page_whose_documents_fail_in_the_bulk(es_url: str) -> None:
    # Elasticsearch refuses an integer out of its field's range per document, after our checks pass.
    store = ElasticsearchStore(settings=es_settings(es_url), definition=DEFINITION, dimensions=DIMENSIONS)
    try:
        await store.ensure_ready()
        await replace(store, page(20, 1, 2))
        await replace(store, page(21, 1, 3))
        broken = page(20, 2, 3)
        broken[2].fields["namespace"] = 2**40
        failed = await store.replace_pages([write(broken), write(page(21, 2, 1)), write(page(22, 1, 2))])
        assert list(failed) == [20] and type(failed[20]) is RagbotError
        assert "refused indexing page 20" in str(failed[20])
        # Its new documents that did go in are removed again; the old revision stays whole.
        assert await doc_ids_of(store, 20) == [doc_id(20, 1, 0), doc_id(20, 1, 1)]
        assert await doc_ids_of(store, 21) == [doc_id(21, 2, 0)]
        assert await doc_ids_of(store, 22) == [doc_id(22, 1, 0), doc_id(22, 1, 1)]
        assert await store.count() == 5
        with pytest.raises(RagbotError, match="refused indexing page 20"):  # one page: raised
            await store.replace_page(page_id=20, revision_id=2, paragraphs=broken)
        assert await doc_ids_of(store, 20) == [doc_id(20, 1, 0), doc_id(20, 1, 1)]
    finally:
        await dispose(store)


async def test_elasticsearch_force_merge_leaves_one_segment_and_the_same_answers(es_url: str) -> None:
    store = ElasticsearchStore(settings=es_settings(es_url), definition=DEFINITION, dimensions=DIMENSIONS)
    try:
        await store.ensure_ready()
        written = await _corpus(store)  # one refresh per page: several segments
        before = await store.bm25(query="paragraph page", k=10)
        await store.force_merge()
        segments = await store._client.indices.segments(index=store._pattern)
        for shard_copies in (i["shards"] for i in segments["indices"].values()):
            for copies in shard_copies.values():
                assert all(c["num_search_segments"] == 1 for c in copies)
        after = await store.bm25(query="paragraph page", k=10)
        assert [h.doc_id for h in after] == [h.doc_id for h in before]
        target = doc_id(4, 1, 1)
        hits = await store.knn(vector_field=CONTENT_MINI, vector=written[target][CONTENT_MINI], k=1)
        assert hits[0].doc_id == target
    finally:
        await dispose(store)


# ---- both stores agree --------------------------------------------------------------------------


async def test_both_stores_return_the_same_sources_and_rankings(es_url: str, tmp_path: Path) -> None:
    embedded = build_store(
        settings=StoreSettings(backend="embedded", embedded_path=tmp_path / "s.sqlite3"),
        definition=DEFINITION,
        dimensions=DIMENSIONS,
    )
    es = build_store(settings=es_settings(es_url), definition=DEFINITION, dimensions=DIMENSIONS)
    try:
        for s in (embedded, es):
            await s.ensure_ready()
            await _hebrew_corpus(s)
            await _corpus(s)
        a, b = await embedded.page_paragraphs(page_id=31), await es.page_paragraphs(page_id=31)
        assert a and [h.source.keys() for h in a] == [h.source.keys() for h in b]
        written_at = {"last_update"}  # each store stamps its own write time
        assert [{k: v for k, v in h.source.items() if k not in written_at} for h in a] == [
            {k: v for k, v in h.source.items() if k not in written_at} for h in b
        ]
        query = vectors_for(5)[TITLE_E5]
        ka = await embedded.knn(vector_field=TITLE_E5, vector=query, k=10)
        kb = await es.knn(vector_field=TITLE_E5, vector=query, k=10)
        assert [h.doc_id for h in ka] == [h.doc_id for h in kb]
        assert [h.score for h in ka] == pytest.approx([h.score for h in kb], abs=1e-4)
        # Same BM25F formula (Lucene's, with the (k1 + 1) scale): same ranking, same scores.
        for q in ("לעובדים", "דמי אבטלה", "housing grant", "paragraph 2 of page 7", "זכויות עובדים במס"):
            ba, bb = await embedded.bm25(query=q, k=5), await es.bm25(query=q, k=5)
            assert [h.score for h in ba] == pytest.approx([h.score for h in bb], rel=1e-3), q
            # Equal scores may come in either order; ids are compared where scores differ.
            assert untied(ba) == untied(bb), q
    finally:
        await dispose(embedded)
        await dispose(es)


# ---- embedded store only ------------------------------------------------------------------------


def embedded_at(path: Path) -> EmbeddedStore:
    return EmbeddedStore(path=path, definition=DEFINITION, dimensions=DIMENSIONS)


async def test_embedded_sees_writes_of_another_writer(tmp_path: Path) -> None:
    reader, writer = embedded_at(tmp_path / "s.sqlite3"), embedded_at(tmp_path / "s.sqlite3")
    try:
        await replace(reader, page(1, 1, 3))
        probe = vectors_for(77)
        assert (await reader.knn(vector_field=CONTENT_MINI, vector=probe[CONTENT_MINI], k=1))[0].page_id == 1
        await replace(writer, [paragraph(2, 1, 0, content="zebra crossing", vectors=probe)])
        hits = await reader.knn(vector_field=CONTENT_MINI, vector=probe[CONTENT_MINI], k=1)
        assert hits[0].doc_id == doc_id(2, 1, 0) and hits[0].score == pytest.approx(2.0, abs=1e-5)
        assert (await reader.bm25(query="zebra", k=1))[0].page_id == 2
        await writer.delete_page(page_id=2)
        hits = await reader.knn(vector_field=CONTENT_MINI, vector=probe[CONTENT_MINI], k=10)
        assert {h.page_id for h in hits} == {1}
        assert await reader.count() == 3
    finally:
        await reader.close()
        await writer.close()


async def test_embedded_reader_far_behind_reloads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the removed-rows log's reach, a reader reloads instead of patching, and stays right."""
    monkeypatch.setattr(embedded_module, "REMOVED_LOG_KEEP", 3)
    path = tmp_path / "s.sqlite3"
    reader, writer = embedded_at(path), embedded_at(path)
    try:
        for pid in (1, 2, 3):
            await replace(reader, page(pid, 1, 2, content=f"word{pid}"))
        probe = vectors_for(1)[CONTENT_MINI]
        assert len(await reader.knn(vector_field=CONTENT_MINI, vector=probe, k=10)) == 6
        assert (await reader.bm25(query="word2", k=1))[0].page_id == 2
        for revision in range(2, 8):  # six writes: more than the log keeps
            await replace(writer, page(2, revision, 1, content=f"word{revision * 10}"))
        await writer.delete_page(page_id=3)
        hits = await reader.knn(vector_field=CONTENT_MINI, vector=probe, k=10)
        assert sorted(h.doc_id for h in hits) == sorted([doc_id(1, 1, 0), doc_id(1, 1, 1), doc_id(2, 7, 0)])
        assert await reader.bm25(query="word2", k=1) == []
        assert (await reader.bm25(query="word70", k=1))[0].doc_id == doc_id(2, 7, 0)
    finally:
        await reader.close()
        await writer.close()


async def test_embedded_matrices_follow_own_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Patched in place (appends, deletions, compaction), the matrices answer like a fresh reload."""
    monkeypatch.setattr(_Matrix, "compact_min", 4)
    path = tmp_path / "s.sqlite3"
    store = embedded_at(path)
    rng = np.random.default_rng(3)
    query = {name: rng.standard_normal(dim).astype(np.float32) for name, dim in DIMENSIONS.items()}
    try:
        await store.knn(vector_field=TITLE_E5, vector=query[TITLE_E5], k=1)  # load (empty) matrices
        for step in range(40):
            pid = int(rng.integers(1, 8))
            if step % 5 == 4:
                await store.delete_page(page_id=pid)
            else:
                await replace(store, page(pid, step, int(rng.integers(1, 6))))
            if step % 10 == 9:
                fresh = embedded_at(path)
                for name in DIMENSIONS:
                    mine = await store.knn(vector_field=name, vector=query[name], k=50)
                    theirs = await fresh.knn(vector_field=name, vector=query[name], k=50)
                    assert [h.doc_id for h in mine] == [h.doc_id for h in theirs]
                    assert len(mine) == await store.count()
                await fresh.close()
    finally:
        await store.close()


_CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    sys.path.insert(0, {tests!r})
    from integration.test_store_contract import embedded_at, page

    async def main() -> None:
        store = embedded_at(Path({path!r}))
        revision = 100
        while True:
            revision += 1
            paragraphs = page(7, revision, 200 + revision % 7)
            print("begin", revision, flush=True)
            await store.replace_page(page_id=7, revision_id=revision, paragraphs=paragraphs)
            print("done", revision, flush=True)

    asyncio.run(main())
    """
)


async def _check_page_7_whole(path: Path, committed: int) -> None:
    store = embedded_at(path)
    try:
        hits = await store.page_paragraphs(page_id=7)
        revisions = {h.source["revision_id"] for h in hits}
        assert len(revisions) == 1, f"mixed revisions {revisions}"
        (revision,) = revisions
        assert revision in (committed, committed + 1)  # the last commit, or one not yet reported
        expected = 200 + revision % 7
        assert [h.source["paragraph"] for h in hits] == list(range(expected))
        state = await store.page_state(page_id=7)
        assert state is not None and state.paragraphs_per_model == {"mini": expected, "e5": expected}
        hits = await store.knn(vector_field=CONTENT_E5, vector=vectors_for(1)[CONTENT_E5], k=1000)
        assert len(hits) == expected
        assert len(await store.bm25(query="page 7", k=1000)) == expected
    finally:
        await store.close()


def test_embedded_replace_survives_kill_9(tmp_path: Path) -> None:
    """kill -9 a writer mid-replace, three times: the page is always one whole revision."""
    path = tmp_path / "s.sqlite3"
    script = _CHILD.format(tests=str(Path(__file__).parents[1]), path=str(path))
    rng = np.random.default_rng(11)
    for _round in range(3):
        child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
        assert child.stdout is not None
        deadline = time.monotonic() + 60
        done: list[int] = []
        while time.monotonic() < deadline:  # commit a few revisions, then catch the start of the next
            line = child.stdout.readline().split()
            assert line, "the writer died before committing"
            if line[0] == "done":
                done.append(int(line[1]))
            elif len(done) >= 3:
                break
        # Not a readiness wait: a replace takes ~40 ms here, so this lands the kill inside one.
        time.sleep(float(rng.uniform(0.002, 0.02)))
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
        assert child.returncode == -signal.SIGKILL
        with sqlite3.connect(path) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        asyncio.run(_check_page_7_whole(path, done[-1]))


def test_embedded_store_file_layout(tmp_path: Path) -> None:
    """WAL mode, the recorded dimensions and derived fields, and the indexed filter rows."""

    async def make() -> None:
        store = embedded_at(tmp_path / "s.sqlite3")
        await replace(store, page(1, 1, 2))
        await store.close()

    asyncio.run(make())
    with sqlite3.connect(tmp_path / "s.sqlite3") as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        meta = dict(conn.execute("SELECT key, value FROM meta"))
        assert json.loads(meta["dimensions"]) == DIMENSIONS
        derived = json.loads(meta["derived_from"])
        assert derived["text_fields"] == ["title", "content", "heading"]
        assert set(derived["filter_fields"]) == {"url", "namespace", "categories", "featured", "source"}
        assert conn.execute("SELECT COUNT(*) FROM vectors").fetchone()[0] == 6
        rows = conn.execute(
            "SELECT field, value FROM filter_values WHERE id = (SELECT MIN(id) FROM paragraphs)"
        )
        expected = [("url", "https://wiki.example/1"), ("namespace", 0), ("categories", "general")]
        expected += [("featured", 0), ("source", "wiki")]
        assert sorted(rows) == sorted(expected)


async def test_embedded_rederives_when_the_definition_changes(tmp_path: Path) -> None:
    """A new text field becomes searchable and a new keyword field filterable on the existing rows."""
    path = tmp_path / "s.sqlite3"
    before = embedded_at(path)
    await replace(before, [paragraph(1, 1, 0, content="alpha")])
    await replace(before, [paragraph(2, 1, 0, content="beta")])
    await before.close()
    raw = {
        "identifier_field": "page_id",
        "saved_fields": {"page_id": "integer", "content": "text", "url": "text", "categories": "keyword"},
        "field_for_llm": "content",
        "models": {"mini": "content"},
    }
    after = EmbeddedStore(path=path, definition=parse_definition(raw), dimensions={CONTENT_MINI: 8})
    try:
        hits = await after.bm25(query="wiki example 2", k=5, fields=["url"])
        assert [h.page_id for h in hits][:1] == [2]
        assert await after.bm25(query="alpha", k=5, fields=["content"], filters={"categories": "general"})
        with pytest.raises(ValidationFailed):
            await after.bm25(query="alpha", k=5, filters={"url": "x"})  # url is text now
    finally:
        await after.close()
