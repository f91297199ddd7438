"""The kolzchut-ragbot drop-in against real stores and the real packaged MiniLM model.

Runs on the embedded store (a temporary SQLite file) and on the real Elasticsearch reached through
an ``elasticsearch.Elasticsearch`` client, as kolzchut-ragbot's consumers pass it. Each test gets its own
file or index prefix and removes it.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from elasticsearch import Elasticsearch

from ragbot.compat.kolzchut import (
    Engine,
    Model,
    clear_engine_cache,
    engine_factory,
    es_client_factory,
    strip_vector_fields,
)
from ragbot.definition import DocumentDefinition, definition_to_json, parse_definition
from ragbot.embedders import build_embedders
from ragbot.errors import ConfigurationError
from ragbot.messaging.reembed import generation_of, split_options
from ragbot.ports import Embedder, Generation
from ragbot.settings import ModelSettings, StoreSettings
from ragbot.stores.embedded.generations import EmbeddedGenerations
from ragbot.stores.generations import embedded_file
from ragbot.stores.mapping import template_name

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MODEL = "all-MiniLM-L6-v2"

PAGES: dict[int, tuple[str, list[str]]] = {
    1001: (
        "Unemployment benefits",
        [
            "Unemployment benefits are paid to workers who lost their job and registered as job seekers.",
            "To claim unemployment benefits, file a claim with National Insurance within a year.",
            "The amount of unemployment benefit depends on your average salary in the last six months.",
        ],
    ),
    2002: (
        "Maternity leave",
        [
            "A mother who gave birth is entitled to fifteen weeks of paid maternity leave.",
            "Maternity allowance is paid by National Insurance instead of the salary during the leave.",
        ],
    ),
    3003: (
        "Rent assistance",
        [
            "New immigrants and low-income families can receive help paying their apartment rent.",
            "Apply for rent assistance at the Ministry of Housing with a signed lease agreement.",
        ],
    ),
    4004: (
        "Disability pension",
        [
            "A general disability pension is paid to people whose ability to work was reduced by illness.",
            "A medical committee decides the degree of medical disability.",
        ],
    ),
}


class Configs:
    """kolzchut-ragbot's configuration object is duck-typed: only get_config()."""

    def get_config(self) -> dict[str, str]:
        return {"paragraph_identifier": "paragraph"}


@pytest.fixture(scope="session")
def definition() -> DocumentDefinition:
    return parse_definition(
        {
            "identifier_field": "page_id",
            "saved_fields": {"title": "text", "page_id": "integer", "content": "text", "url": "keyword"},
            "field_for_llm": "content",
            "models": {MODEL: "content"},
        }
    )


@pytest.fixture(scope="session")
def embedders(definition: DocumentDefinition) -> dict[str, Embedder]:
    """The real MiniLM, loaded once for the session (about 20 s on two cores)."""
    built = build_embedders(settings=ModelSettings(), definition=definition)
    for embedder in built.values():
        embedder.warm_up()
    return built


@pytest.fixture(params=["embedded", "elasticsearch"])
def engine(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    definition: DocumentDefinition,
    embedders: dict[str, Embedder],
) -> Iterator[Engine]:
    """A compat engine on a fresh store: a temp SQLite file, or a uuid index prefix on the real ES."""
    prefix = f"test_compat_{uuid.uuid4().hex[:12]}"
    es_client: Elasticsearch | None = None
    if request.param == "embedded":
        settings = StoreSettings(backend="embedded", embedded_path=tmp_path / "compat.sqlite3")
    else:
        es_url: str = request.getfixturevalue("es_url")
        es_client = Elasticsearch(es_url)
        settings = StoreSettings(backend="embedded", es_index_prefix=prefix)  # es_client switches it to ES
    eng = Engine(Configs(), es_client, embedders=embedders, definition=definition, store_settings=settings)
    try:
        yield eng
    finally:
        eng.close()
        if es_client is not None:
            es_client.close()
            drop_indices(request.getfixturevalue("es_url"), prefix)


def drop_indices(es_url: str, prefix: str) -> None:
    """Delete this test's indices by name (ES refuses wildcard deletes by default) and its template."""
    listed = httpx.get(
        f"{es_url}/_cat/indices/{prefix}_*", params={"format": "json", "h": "index"}, timeout=30.0
    )
    names = [row["index"] for row in listed.json()] if listed.status_code == 200 else []
    if names:
        httpx.delete(f"{es_url}/{','.join(names)}", timeout=30.0).raise_for_status()
    httpx.delete(f"{es_url}/_index_template/{template_name(prefix)}", timeout=30.0)


def index_all(engine: Engine) -> None:
    for page_id, (title, paragraphs) in PAGES.items():
        engine.update_docs(
            [
                {"page_id": page_id, "title": title, "content": text, "url": f"https://wiki/{page_id}"}
                for text in paragraphs
            ],
            delete_existing=True,
        )


def test_retrieve_documents_keeps_kolzchut_ragbots_shapes_and_semantics(engine: Engine) -> None:
    index_all(engine)
    documents, scores, elapsed = engine.retrieve_documents(
        query="how do I claim unemployment benefit after losing my job",
        retrieval_size=50,
        paragraphs_per_page=[3, 2, 1],
    )
    assert isinstance(elapsed, float) and elapsed > 0
    pages = [d["page_id"] for d in documents]
    assert pages[:3] == [1001, 1001, 1001]  # three paragraphs from the best page
    assert len(documents) == 6 and len(set(pages)) == 3
    assert pages[3] == pages[4] != pages[5]
    assert len({d["_id"] for d in documents}) == 6  # never the same paragraph twice
    assert all(not k.endswith("_vectors") for d in documents for k in d)
    assert {"_id", "title", "content", "page_id", "url"} <= set(documents[0])
    assert engine.field_for_answer == "content"
    assert isinstance(engine.configs_class, Configs)

    assert list(scores) == [MODEL]
    candidates = scores[MODEL]
    assert len(candidates) == 9  # every paragraph is a candidate with retrieval_size 50
    first = candidates[0]
    assert {"doc", "title", "score", "page_id", "_id", "_source"} <= set(first)
    assert first["doc"] == first["title"] == "Unemployment benefits"
    assert all(0.0 <= c["score"] <= 2.0 for c in candidates)  # cosine + 1, kolzchut-ragbot's scale
    assert [c["score"] for c in candidates] == sorted((c["score"] for c in candidates), reverse=True)
    assert all(not k.endswith("_vectors") for c in candidates for k in c["_source"])


def test_threshold_drops_weak_paragraphs(engine: Engine) -> None:
    index_all(engine)
    everything, _, _ = engine.retrieve_documents("rent for new immigrants", 50, [5, 5, 5, 5])
    assert len(everything) == 9
    strong, scores, _ = engine.retrieve_documents("rent for new immigrants", 50, [5, 5, 5, 5], 1.45)
    assert 0 < len(strong) < 9
    kept = {c["_id"] for c in scores[MODEL] if c["score"] >= 1.45}
    assert {d["_id"] for d in strong} == kept
    nothing, _, _ = engine.retrieve_documents("rent for new immigrants", 50, [3], 1.999)
    assert nothing == []


def test_update_docs_replaces_or_appends_and_refuses_mixed_pages(engine: Engine) -> None:
    index_all(engine)
    engine.update_docs(
        [
            {
                "page_id": 3003,
                "title": "Rent assistance",
                "content": "Rent help was moved to the local municipality.",
            }
        ],
        delete_existing=True,
    )
    docs, _, _ = engine.retrieve_documents("rent assistance apartment", 50, [5])
    assert [d["content"] for d in docs if d["page_id"] == 3003] == [
        "Rent help was moved to the local municipality."
    ]

    engine.update_docs(
        [{"page_id": 3003, "title": "Rent assistance", "content": "Students may also receive rent support."}],
    )
    docs, _, _ = engine.retrieve_documents("rent assistance apartment", 50, [5])
    assert sorted(d["content"] for d in docs if d["page_id"] == 3003) == [
        "Rent help was moved to the local municipality.",
        "Students may also receive rent support.",
    ]
    assert len({d["_id"] for d in docs}) == len(docs)

    with pytest.raises(ValueError, match="one page"):
        engine.update_docs([{"page_id": 1, "content": "a"}, {"page_id": 2, "content": "b"}])
    with pytest.raises(ValueError, match="page ids start at 1"):  # issue 28 item 4
        engine.update_docs([{"page_id": 0, "content": "a"}])
    given = [{"page_id": 4004, "title": "x", "content": "unchanged input"}]
    engine.update_docs(given, delete_existing=True)
    assert given == [{"page_id": 4004, "title": "x", "content": "unchanged input"}]


def test_hybrid_mode_adds_the_bm25_list(engine: Engine) -> None:
    index_all(engine)
    engine.mode, engine.fusion = "hybrid", "rrf"
    docs, scores, _ = engine.retrieve_documents("medical committee disability degree", 20, [2])
    assert set(scores) == {MODEL, "bm25"}
    assert scores["bm25"] and scores["bm25"][0]["page_id"] == 4004
    assert docs[0]["page_id"] == 4004


def test_model_writes_pre_embedded_documents(engine: Engine, embedders: dict[str, Embedder]) -> None:
    text = "Veterans of the army are entitled to a discharge grant."
    vector = embedders[MODEL].embed_passages([text])[0]
    Model(engine=engine).create_or_update_documents(
        [
            {
                "page_id": 5005,
                "title": "Discharge grant",
                "content": text,
                f"content_{MODEL}_vectors": vector.tolist(),
            }
        ],
        update=True,
    )
    docs, scores, _ = engine.retrieve_documents("army discharge grant for veterans", 10, [1])
    assert docs and docs[0]["page_id"] == 5005
    assert scores[MODEL][0]["score"] > 1.5


def test_bad_arguments_are_value_errors(engine: Engine) -> None:
    for args in (("", 10, [1]), ("q", 10, []), ("q", 10, [0]), ("q", 0, [1]), ("q" * 5000, 10, [1])):
        with pytest.raises(ValueError):
            engine.retrieve_documents(*args)


def test_factory_is_lazy_and_keyed_by_its_arguments(
    definition: DocumentDefinition,
    embedders: dict[str, Embedder],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RAGBOT_STORE_BACKEND", "embedded")
    monkeypatch.setenv("RAGBOT_STORE_EMBEDDED_PATH", str(tmp_path / "factory.sqlite3"))
    from ragbot.settings import clear_settings_caches

    clear_settings_caches()
    try:
        configs_a, configs_b = Configs(), Configs()
        a = engine_factory(configs_a, embedders=embedders, definition=definition)
        assert engine_factory(configs_a, embedders=embedders, definition=definition) is a
        b = engine_factory(configs_b, embedders=embedders, definition=definition)
        assert b is not a and b.configs_class is configs_b  # new arguments are never ignored
        assert a._engine is None  # nothing built until first use
        assert not (tmp_path / "factory.sqlite3").exists()
        a.update_docs([{"page_id": 7, "title": "t", "content": "lazy engines build on first use"}])
        assert a.retrieve_documents("lazy engines", 5, [1])[0][0]["page_id"] == 7
        writer = es_client_factory(None)
        assert isinstance(writer, Model)
    finally:
        clear_engine_cache()
        clear_settings_caches()


def test_reciprocal_rank_fusion_and_strip_vector_fields() -> None:
    assert Engine.reciprocal_rank_fusion([[1, 2, 3], [2, 3, 4], [3, 4, 5]]) == [3, 2, 4, 1, 5]
    source: dict[str, Any] = {"title": "t", "content_m_vectors": [0.1], "page_id": 1}
    assert strip_vector_fields(source) == {"title": "t", "page_id": 1}
    assert "content_m_vectors" in source


def test_the_engine_reads_and_writes_the_live_generation_and_refuses_one_it_cannot_read(
    tmp_path: Path, definition: DocumentDefinition, embedders: dict[str, Embedder]
) -> None:
    """After a re-embed switched, kolzchut-ragbot's Engine uses what ragbot's readers query."""
    path = tmp_path / "compat.sqlite3"
    dimensions = {v.name: embedders[v.model].dimension for v in definition.vector_fields}
    live = generation_of(
        definition, dimensions=dimensions, split=split_options(max_tokens=512, link_targets="drop")
    )
    other = parse_definition({**definition_to_json(definition), "models": {MODEL: ["title", "content"]}})
    unreadable = generation_of(
        other,
        dimensions={v.name: 384 for v in other.vector_fields},
        split=split_options(max_tokens=512, link_targets="drop"),
    )

    async def switch(to: Generation) -> None:
        generations = EmbeddedGenerations(path=path)
        await generations.record(to)
        await generations.switch(to=to.generation_id)
        await generations.close()

    asyncio.run(switch(live))
    settings = StoreSettings(backend="embedded", embedded_path=path)
    eng = Engine(Configs(), None, embedders=embedders, definition=definition, store_settings=settings)
    try:
        index_all(eng)
        docs, _, _ = eng.retrieve_documents("disability pension", 10, [1])
        assert docs and docs[0]["page_id"] == 4004
    finally:
        eng.close()
    assert embedded_file(path, live.generation_id).exists() and not path.exists()

    asyncio.run(switch(unreadable))
    eng = Engine(Configs(), None, embedders=embedders, definition=definition, store_settings=settings)
    try:
        with pytest.raises(ConfigurationError, match="stores other fields"):
            eng.retrieve_documents("disability pension", 10, [1])
    finally:
        eng.close()
