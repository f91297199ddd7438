"""Store pieces that need no running service: index names, the template, ids, filters, failures."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ragbot.cli.store_init import main as init_main
from ragbot.definition import parse_definition
from ragbot.errors import StoreUnavailable, ValidationFailed
from ragbot.ports import SearchStore, StoredParagraph
from ragbot.settings import StoreSettings
from ragbot.stores import build_store, doc_id
from ragbot.stores.common import bm25_fields, prepare_source, validate_filters
from ragbot.stores.elasticsearch import ElasticsearchStore
from ragbot.stores.embedded import EmbeddedStore
from ragbot.stores.mapping import index_name, index_pattern, index_template

DEFINITION = parse_definition(
    {
        "identifier_field": "page_id",
        "saved_fields": {
            "title": "text",
            "page_id": "integer",
            "content": "text",
            "url": "keyword",
            "categories": "keyword",
            "revision_date": "date",
            "public": "boolean",
        },
        "field_for_llm": "content",
        "models": {"m1": "content", "m2": ["title", "content"]},
    }
)
DIMS = {"content_m1_vectors": 384, "title_m2_vectors": 768, "content_m2_vectors": 768}


def test_doc_id_and_bucket_index() -> None:
    assert doc_id(123, 456, 7) == "123-456-7"
    assert index_name("ragbot", 0) == "ragbot_0"
    assert index_name("ragbot", 999) == "ragbot_0"  # kolzchut-ragbot's round() would say ragbot_1
    assert index_name("ragbot", 1500) == "ragbot_1"
    assert index_pattern("ragbot") == "ragbot_*"


@pytest.mark.parametrize(
    ("mode", "index_type"), [("exact", "flat"), ("quantized", "int8_flat"), ("approximate", "hnsw")]
)
def test_template_from_definition(mode: str, index_type: str) -> None:
    settings = StoreSettings(es_index_prefix="kz", vector_search=mode, es_shards=2, es_replicas=1)
    body = index_template(settings=settings, definition=DEFINITION, dimensions=DIMS)
    assert body["index_patterns"] == ["kz_*"]
    assert body["template"]["settings"] == {"number_of_shards": 2, "number_of_replicas": 1}
    props = body["template"]["mappings"]["properties"]
    assert body["template"]["mappings"]["dynamic"] is False
    for name, dims in DIMS.items():
        assert props[name] == {
            "type": "dense_vector",
            "dims": dims,
            "index": True,
            "similarity": "cosine",
            "index_options": {"type": index_type},
        }
    assert props["title"] == {"type": "text", "index": False}
    assert props["title__bm25"] == {"type": "text", "analyzer": "whitespace"}
    assert props["heading__bm25"]["analyzer"] == "whitespace"
    assert props["ragbot_default__bm25"] == {"type": "text", "analyzer": "whitespace"}
    assert props["url"] == props["categories"] == props["doc_id"] == {"type": "keyword"}
    assert props["page_id"] == {"type": "long"}  # ragbot's core type wins over the definition's integer
    assert props["revision_date"] == props["last_update"] == {"type": "date"}
    assert props["public"] == {"type": "boolean"}


def test_longer_prefixes_get_higher_template_priority() -> None:
    short = index_template(
        settings=StoreSettings(es_index_prefix="rb"), definition=DEFINITION, dimensions=DIMS
    )
    long = index_template(
        settings=StoreSettings(es_index_prefix="rb_test"), definition=DEFINITION, dimensions=DIMS
    )
    assert long["priority"] > short["priority"]


def test_build_store_picks_the_backend(tmp_path: Path) -> None:
    embedded = build_store(
        settings=StoreSettings(backend="embedded", embedded_path=tmp_path / "x.sqlite3"),
        definition=DEFINITION,
        dimensions=DIMS,
    )
    es = build_store(settings=StoreSettings(backend="elasticsearch"), definition=DEFINITION, dimensions=DIMS)
    assert isinstance(embedded, EmbeddedStore) and isinstance(embedded, SearchStore)
    assert isinstance(es, ElasticsearchStore) and isinstance(es, SearchStore)
    assert not (tmp_path / "x.sqlite3").exists()  # building opens nothing


def test_prepared_source_is_plain_json_without_vectors() -> None:
    from datetime import UTC, datetime

    p = StoredParagraph(
        doc_id="1-2-3",
        page_id=1,
        revision_id=2,
        paragraph=3,
        fields={"title": "t", "content_m1_vectors": [1.0], "revision_date": datetime(2025, 1, 1, tzinfo=UTC)},
        vectors={"content_m1_vectors": np.ones(384, dtype=np.float32)},
    )
    source = prepare_source(p, now=datetime(2025, 2, 3, 4, 5, 6, 789000, tzinfo=UTC))
    assert source == {
        "title": "t",
        "revision_date": "2025-01-01T00:00:00+00:00",
        "doc_id": "1-2-3",
        "page_id": 1,
        "revision_id": 2,
        "paragraph": 3,
        "last_update": "2025-02-03T04:05:06.789+00:00",
    }
    json.dumps(source)


def test_filters_are_validated_and_coerced() -> None:
    (f,) = validate_filters({"page_id": ["3", 4.0]}, definition=DEFINITION)
    assert f.values == (3, 4)
    (f,) = validate_filters({"categories": 5}, definition=DEFINITION)
    assert f.values == ("5",)
    with pytest.raises(ValidationFailed, match="unknown filter field 'nope'") as err:
        validate_filters({"nope": 1}, definition=DEFINITION)
    assert err.value.field == "filters.nope"
    with pytest.raises(ValidationFailed, match="type text"):
        validate_filters({"title": "x"}, definition=DEFINITION)
    with pytest.raises(ValidationFailed):
        validate_filters({"public": "yes"}, definition=DEFINITION)
    with pytest.raises(ValidationFailed):
        validate_filters({"page_id": True}, definition=DEFINITION)


def test_bm25_fields_and_weights() -> None:
    text = ("title", "content", "heading")
    assert bm25_fields(None, text_fields=text) == [("title", 1.0), ("content", 1.0)]
    assert bm25_fields(["title^2.5", "heading"], text_fields=text) == [("title", 2.5), ("heading", 1.0)]
    for bad in (["url"], ["title^x"], ["title^0.5"]):
        with pytest.raises(ValidationFailed):
            bm25_fields(bad, text_fields=text)


async def test_unreachable_elasticsearch_is_store_unavailable_not_a_hang() -> None:
    settings = StoreSettings(backend="elasticsearch", es_url="http://127.0.0.1:9", es_timeout_s=2.0)
    store = build_store(settings=settings, definition=DEFINITION, dimensions=DIMS)
    try:
        assert await store.ping() is False
        with pytest.raises(StoreUnavailable) as err:
            await store.count()
        assert err.value.dependency == "elasticsearch"
        with pytest.raises(StoreUnavailable):
            await store.bm25(query="x", k=3)
    finally:
        await store.close()


async def test_unusable_embedded_file_is_store_unavailable(tmp_path: Path) -> None:
    bad = tmp_path / "not-a-db.sqlite3"
    bad.write_bytes(b"this is not a database" * 100)
    store = build_store(
        settings=StoreSettings(backend="embedded", embedded_path=bad), definition=DEFINITION, dimensions=DIMS
    )
    try:
        assert await store.ping() is False
        with pytest.raises(StoreUnavailable):
            await store.count()
    finally:
        await store.close()


def test_init_prints_the_template_without_loading_models(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from ragbot.settings import clear_settings_caches

    definition = tmp_path / "definition.json"
    definition.write_text(
        json.dumps(
            {
                "identifier_field": "page_id",
                "saved_fields": {"page_id": "integer", "content": "text"},
                "field_for_llm": "content",
                "models": {"all-MiniLM-L6-v2": "content"},
            }
        )
    )
    monkeypatch.setenv("RAGBOT_DOCUMENT_DEFINITION", str(definition))
    monkeypatch.setenv("RAGBOT_STORE_ES_INDEX_PREFIX", "kz")
    clear_settings_caches()
    try:
        assert init_main(["--print", "--dimension", "all-MiniLM-L6-v2=384"]) == 0
    finally:
        clear_settings_caches()
    body = json.loads(capsys.readouterr().out)
    assert body["index_patterns"] == ["kz_*"]
    assert body["template"]["mappings"]["properties"]["content_all-MiniLM-L6-v2_vectors"]["dims"] == 384


async def test_init_creates_the_embedded_store(tmp_path: Path) -> None:
    from ragbot.cli.store_init import init_store

    path = tmp_path / "var" / "ragbot.sqlite3"
    await init_store(
        store_settings=StoreSettings(backend="embedded", embedded_path=path),
        definition=DEFINITION,
        dimensions=DIMS,
    )
    assert path.exists()
