"""Language routing end to end on both stores: the shipped definition, the real packaged models.

A small bilingual wiki (Hebrew and English pages) is embedded by MiniLM (English only, by the
packaged defaults) and multilingual-e5-small, stored in the embedded store or Elasticsearch, and
searched through the retrieval engine: a Hebrew question must never reach MiniLM's field, an
English one must reach every field, routing off must search every field again, and languages the
file states per field must be obeyed.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from ragbot.definition import DocumentDefinition, load_definition, parse_definition
from ragbot.embedders import build_embedders
from ragbot.indexing.pipeline import IndexingPipeline
from ragbot.ports import Embedder, SearchStore, StoredParagraph
from ragbot.retrieval import BM25_BRANCH, RetrievalDefaults, RetrievalEngine
from ragbot.retrieval.translation import build_translator
from ragbot.schemas.pages import Page
from ragbot.schemas.retrieval import RetrieveRequest
from ragbot.settings import ModelSettings, StoreSettings
from ragbot.stores import build_store, doc_id
from ragbot.stores.elasticsearch import ElasticsearchStore

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
MINILM_FIELD = "content_all-MiniLM-L6-v2_vectors"
E5_FIELDS = {"title_multilingual-e5-small_vectors", "content_multilingual-e5-small_vectors"}
PAGES: dict[int, tuple[str, list[str]]] = {
    1: (
        "דמי אבטלה",
        [
            "דמי אבטלה משולמים למי שפוטר מעבודתו ונרשם בלשכת התעסוקה כדורש עבודה.",
            "כדי לקבל דמי אבטלה יש להגיש תביעה לביטוח הלאומי בתוך שנה מיום הפיטורים.",
        ],
    ),
    2: (
        "חופשת לידה",
        [
            "עובדת שילדה זכאית לחופשת לידה של 26 שבועות, מתוכם 15 שבועות בתשלום.",
            "דמי לידה משולמים על ידי הביטוח הלאומי במקום המשכורת.",
        ],
    ),
    3: (
        "שכר מינימום",
        ["שכר המינימום בישראל נקבע בחוק ומתעדכן מדי שנה.", "מעסיק חייב לשלם לפחות שכר מינימום."],
    ),
    4: (
        "Unemployment benefits",
        [
            "Unemployment benefits are paid to dismissed workers registered at the employment service.",
            "To receive unemployment benefits, file a claim with the National Insurance Institute.",
        ],
    ),
    5: (
        "Maternity leave",
        ["A worker who gave birth is entitled to 26 weeks of maternity leave, 15 of them paid."],
    ),
}


@pytest.fixture(scope="module")
def definition() -> DocumentDefinition:
    """The shipped definition: MiniLM on content, multilingual-e5-small on title (weight 0.5) and content."""
    return load_definition(ROOT / "config" / "definition.json")


@pytest.fixture(scope="module")
def embedders(definition: DocumentDefinition) -> dict[str, Embedder]:
    """The real packaged models, loaded once for the module."""
    built = build_embedders(settings=ModelSettings(models_location=None, device="cpu"), definition=definition)
    for embedder in built.values():
        embedder.warm_up()
    return built


def paragraphs(definition: DocumentDefinition, embedders: dict[str, Embedder]) -> list[list[StoredParagraph]]:
    pages = []
    for page_id, (title, texts) in PAGES.items():
        rows = [
            {"title": title, "content": text, "page_id": page_id, "url": f"https://wiki.example/{page_id}"}
            for text in texts
        ]
        vectors: dict[str, Any] = {}
        for v in definition.vector_fields:
            vectors[v.name] = embedders[v.model].embed_passages([str(r[v.field]) for r in rows])
        pages.append(
            [
                StoredParagraph(
                    doc_id(page_id, 1, n),
                    page_id,
                    1,
                    n,
                    row,
                    {name: matrix[n] for name, matrix in vectors.items()},
                )
                for n, row in enumerate(rows)
            ]
        )
    return pages


async def open_store(
    backend: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    definition: DocumentDefinition,
    embedders: dict[str, Embedder],
) -> SearchStore:
    """An empty, ready store: a temp SQLite file, or a uuid prefix on the real Elasticsearch."""
    if backend == "embedded":
        settings = StoreSettings(
            backend="embedded", embedded_path=tmp_path / f"routing-{uuid.uuid4().hex[:8]}.sqlite3"
        )
    else:
        settings = StoreSettings(
            backend="elasticsearch",
            es_url=request.getfixturevalue("es_url"),
            es_index_prefix=f"test_routing_{uuid.uuid4().hex[:12]}",
            vector_search="exact",
        )
    dimensions = {v.name: embedders[v.model].dimension for v in definition.vector_fields}
    store = build_store(settings=settings, definition=definition, dimensions=dimensions)
    await store.ensure_ready()
    return store


@pytest.fixture(params=["embedded", "elasticsearch"])
async def store(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    definition: DocumentDefinition,
    embedders: dict[str, Embedder],
) -> AsyncIterator[SearchStore]:
    """A fresh store holding the bilingual pages: a temp SQLite file, or a uuid prefix on the real ES."""
    opened = await open_store(request.param, request, tmp_path, definition, embedders)
    try:
        for page in paragraphs(definition, embedders):
            await opened.replace_page(page_id=page[0].page_id, revision_id=1, paragraphs=page)
        yield opened
    finally:
        if isinstance(opened, ElasticsearchStore):
            await opened.drop_indices()
        await opened.close()


def engine_on(
    store: SearchStore, definition: DocumentDefinition, embedders: dict[str, Embedder], *, routing: bool
) -> RetrievalEngine:
    return RetrievalEngine(
        store=store,
        embedders=embedders,
        definition=definition,
        defaults=RetrievalDefaults(fusion="score", rerank=False, language_routing=routing),
    )


async def test_a_hebrew_question_skips_the_english_model_unless_routing_is_off(
    store: SearchStore, definition: DocumentDefinition, embedders: dict[str, Embedder]
) -> None:
    engine = engine_on(store, definition, embedders, routing=True)
    question = RetrieveRequest(query="איך מגישים תביעה לדמי אבטלה?", paragraphs_per_page=[2, 1])
    response = await engine.retrieve(question)
    debug = response.debug.model_dump()
    assert set(debug["branches"]) == E5_FIELDS | {BM25_BRANCH}
    routing = debug["routing"]
    assert routing["detected"]["script"] == "hebrew" and "he" in routing["detected"]["languages"]
    assert set(routing["ran"]) == E5_FIELDS | {BM25_BRANCH}
    assert set(routing["skipped"]) == {MINILM_FIELD}
    assert "serves en only" in routing["skipped"][MINILM_FIELD]
    assert all(MINILM_FIELD not in f["ranks"] for f in debug["fused"])
    # The shipped definition weighs e5's title at half its content (config/definition.json).
    assert debug["branches"]["title_multilingual-e5-small_vectors"]["weight"] == 0.5
    assert debug["branches"]["content_multilingual-e5-small_vectors"]["weight"] == 1.0
    assert response.documents[0].page_id == 1

    english = await engine.retrieve(RetrieveRequest(query="How do I claim unemployment benefits?"))
    assert set(english.debug.model_dump()["branches"]) == E5_FIELDS | {MINILM_FIELD, BM25_BRANCH}
    assert english.debug.model_dump()["routing"]["skipped"] == {}
    assert english.debug.model_dump()["branches"][MINILM_FIELD]["candidates"]
    assert english.documents[0].page_id == 4

    off = engine_on(store, definition, embedders, routing=False)
    unrouted = await off.retrieve(question)
    assert set(unrouted.debug.model_dump()["branches"]) == E5_FIELDS | {MINILM_FIELD, BM25_BRANCH}
    assert unrouted.debug.model_dump()["routing"]["enabled"] is False
    assert any(MINILM_FIELD in f["ranks"] for f in unrouted.debug.model_dump()["fused"])


async def test_a_definition_that_declares_languages_routes_by_them(
    store: SearchStore, definition: DocumentDefinition, embedders: dict[str, Embedder]
) -> None:
    """The same stored fields, with e5's title declared English-only: a Hebrew question keeps e5's content."""
    raw_models = {m: definition.model_entry(m) for m in definition.models}
    raw_models["multilingual-e5-small"]["languages"] = {"title": ["en"], "content": ["*"]}
    declared = parse_definition(
        {
            "identifier_field": definition.identifier_field,
            "saved_fields": definition.saved_fields,
            "field_for_llm": definition.field_for_llm,
            "models": raw_models,
        }
    )
    engine = engine_on(store, declared, embedders, routing=True)
    response = await engine.retrieve(RetrieveRequest(query="כמה שבועות חופשת לידה?"))
    ran = response.debug.model_dump()["routing"]["ran"]
    assert set(ran) == {"content_multilingual-e5-small_vectors", BM25_BRANCH}
    assert response.documents[0].page_id == 2


async def test_pages_indexed_through_the_pipeline_give_minilm_only_their_english_paragraphs(
    tmp_path: Path,
    request: pytest.FixtureRequest,
    definition: DocumentDefinition,
    embedders: dict[str, Embedder],
) -> None:
    """The indexing pipeline embeds a Hebrew page with e5 only; both stores then search it without MiniLM."""
    for backend in ("embedded", "elasticsearch"):
        store = await open_store(backend, request, tmp_path, definition, embedders)
        try:
            pages = [
                Page.from_wiki_content(
                    {"page_id": page_id, "revision_id": 1, "title": title, "content": "\n\n".join(texts)}
                )
                for page_id, (title, texts) in PAGES.items()
            ]
            await IndexingPipeline(definition=definition, embedders=embedders).index(pages, store=store)
            engine = engine_on(store, definition, embedders, routing=False)
            english = (
                await engine.retrieve(RetrieveRequest(query="How do I claim unemployment benefits?"))
            ).debug
            minilm = english.model_dump()["branches"][MINILM_FIELD]["candidates"]
            assert minilm, backend
            assert {int(c["page_id"]) for c in minilm} <= {4, 5}, backend  # the English pages only
            e5 = english.model_dump()["branches"]["content_multilingual-e5-small_vectors"]["candidates"]
            assert {1, 4} <= {int(c["page_id"]) for c in e5}, backend
            routed = engine_on(store, definition, embedders, routing=True)
            hebrew = await routed.retrieve(RetrieveRequest(query="איך מגישים תביעה לדמי אבטלה?"))
            assert hebrew.documents[0].page_id == 1, backend
        finally:
            if isinstance(store, ElasticsearchStore):
                await store.drop_indices()
            await store.close()


async def test_an_english_question_also_searches_with_its_words_in_the_corpus_language(
    store: SearchStore, definition: DocumentDefinition, embedders: dict[str, Embedder]
) -> None:
    """The lexicon is the store's Hebrew words; only an English question is translated: the multilingual
    model's vector and BM25's query change (BM25's only when translation_bm25 is on), MiniLM's never,
    and MiniLM, which does not read Hebrew, weighs 0 in the fusion."""
    translator = await build_translator(
        store=store, definition=definition, embedders=embedders, language="he", limit=500, reference_words=400
    )
    assert translator is not None and translator.model == "multilingual-e5-small"
    assert {"אבטלה", "לידה", "מינימום"} <= set(translator.words)
    assert not any(w.isascii() for w in translator.words)  # the English pages' words are not targets

    plain = engine_on(store, definition, embedders, routing=True)
    engine = engine_on(store, definition, embedders, routing=True)
    engine.translator = translator
    question = RetrieveRequest(query="What is the minimum wage?")
    before = (await plain.retrieve(question)).debug.model_dump()
    after = (await engine.retrieve(question)).debug.model_dump()
    assert before["translation"] is None
    translation = after["translation"]
    assert translation["model"] == "multilingual-e5-small" and translation["language"] == "he"
    words = translation["words"].split()
    assert len(words) == 2 and set(words) <= set(translator.words)

    def scores(debug: dict[str, Any], branch: str) -> dict[str, float]:
        return {c["_id"]: c["score"] for c in debug["branches"][branch]["candidates"]}

    assert scores(after, MINILM_FIELD) == scores(before, MINILM_FIELD)
    # translated, the question is searched as a Hebrew one: the English-only model weighs nothing
    assert before["branches"][MINILM_FIELD]["weight"] == 1.0
    assert after["branches"][MINILM_FIELD]["weight"] == 0.0
    e5_content = "content_multilingual-e5-small_vectors"
    assert after["branches"][e5_content]["weight"] == before["branches"][e5_content]["weight"] == 1.0
    assert scores(after, e5_content) != scores(before, e5_content)
    # BM25 now also searches the Hebrew words: the Hebrew page on the minimum wage is among its hits
    bm25_pages = {c["page_id"] for c in after["branches"][BM25_BRANCH]["candidates"]}
    assert 3 in bm25_pages and 3 not in {c["page_id"] for c in before["branches"][BM25_BRANCH]["candidates"]}
    dense_only = engine_on(store, definition, embedders, routing=True)
    dense_only.defaults = replace(dense_only.defaults, translation_bm25=False)
    dense_only.translator = translator
    kept = (await dense_only.retrieve(question)).debug.model_dump()
    assert scores(kept, BM25_BRANCH) == scores(before, BM25_BRANCH)
    assert scores(kept, e5_content) == scores(after, e5_content)
    hebrew = await engine.retrieve(RetrieveRequest(query="מה גובה שכר המינימום?"))
    assert hebrew.debug.model_dump()["translation"] is None


async def test_the_retriever_builds_its_translator_in_the_background_once_the_store_has_pages(
    tmp_path: Path, definition: DocumentDefinition, embedders: dict[str, Embedder]
) -> None:
    """RAGBOT_RETRIEVER_TRANSLATE_QUERIES_TO: the generation serves at once, untranslated, while its store
    is empty (make run starts the retriever before it indexes the sample pages); once pages arrive the
    lexicon is built from their words and English questions are translated; closing the generation
    stops the loop."""
    import asyncio

    from ragbot.ports import Generation
    from ragbot_retriever.generations import close, serve

    settings = StoreSettings(backend="embedded", embedded_path=tmp_path / "served.sqlite3")
    dimensions = {v.name: embedders[v.model].dimension for v in definition.vector_fields}
    writer = build_store(settings=settings, definition=definition, dimensions=dimensions)
    await writer.ensure_ready()
    serving = await serve(
        generation=Generation("legacy"),
        configured=definition,
        store_settings=settings,
        embedders_for=lambda d: {m: embedders[m] for m in d.model_names},
        reranker=None,
        defaults=RetrievalDefaults(fusion="score", rerank=False),
        store_timeout_s=10,
        translate_to="he",
        vocabulary=200,
        translation_poll_s=0.2,
    )
    try:
        question = RetrieveRequest(query="How do I claim unemployment benefits?")
        await asyncio.sleep(1.0)
        assert serving.engine.translator is None  # nothing to learn from yet: served untranslated
        assert (await serving.engine.retrieve(question)).debug.model_dump()["translation"] is None
        for page in paragraphs(definition, embedders):
            await writer.replace_page(page_id=page[0].page_id, revision_id=1, paragraphs=page)
        for _ in range(300):
            if serving.engine.translator is not None:
                break
            await asyncio.sleep(0.2)
        translator = serving.engine.translator
        assert translator is not None and "אבטלה" in translator.words
        response = await serving.engine.retrieve(question)
        assert response.debug.model_dump()["translation"]["language"] == "he"
        # a page more (9 -> 10 paragraphs, over the 5% that triggers a rebuild): its words join
        row = {
            "title": "קופת חולים",
            "content": "קופת חולים מספקת סל שירותי בריאות",
            "page_id": 6,
            "url": "u",
        }
        vectors = {
            v.name: embedders[v.model].embed_passages([str(row[v.field])])[0]
            for v in definition.vector_fields
        }
        await writer.replace_page(
            page_id=6, revision_id=1, paragraphs=[StoredParagraph(doc_id(6, 1, 0), 6, 1, 0, row, vectors)]
        )
        for _ in range(300):
            if "קופת" in serving.engine.translator.words:
                break
            await asyncio.sleep(0.2)
        assert "קופת" in serving.engine.translator.words
    finally:
        await writer.close()
        await close(serving, keep_models=True)
    assert serving.translating is not None and serving.translating.cancelled()


async def test_a_corpus_without_the_language_is_read_once_not_every_poll(
    tmp_path: Path, definition: DocumentDefinition, embedders: dict[str, Embedder]
) -> None:
    """Translation is on by default: over an English-only store the loop reads the pages once, finds no
    Hebrew word, and waits for the paragraph count to change before it reads them again."""
    import asyncio

    from ragbot.retrieval.translation import keep_translating

    settings = StoreSettings(backend="embedded", embedded_path=tmp_path / "english.sqlite3")
    dimensions = {v.name: embedders[v.model].dimension for v in definition.vector_fields}
    store = build_store(settings=settings, definition=definition, dimensions=dimensions)
    await store.ensure_ready()
    for page in paragraphs(definition, embedders):
        if page[0].page_id in (4, 5):
            await store.replace_page(page_id=page[0].page_id, revision_id=1, paragraphs=page)
    reads: list[int] = []
    list_pages = store.list_pages

    async def counted(**kwargs: Any) -> Any:
        reads.append(kwargs.get("offset", 0))
        return await list_pages(**kwargs)

    store.list_pages = counted  # type: ignore[method-assign]
    installed: list[object] = []
    loop = asyncio.create_task(
        keep_translating(
            installed.append,
            store=store,
            definition=definition,
            embedders=embedders,
            language="he",
            limit=100,
            poll_s=0.05,
        )
    )
    try:
        await asyncio.sleep(1.5)  # about 30 polls
    finally:
        loop.cancel()
        await store.close()
    assert installed == []
    assert reads.count(0) == 1, reads  # one pass over the pages (a pass starts at offset 0)
