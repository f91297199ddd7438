"""From a page to stored paragraphs: fields, ids, and one batched embedding call per (model, field)."""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from support.fakes import HashEmbedder

from ragbot.definition import DocumentDefinition, load_definition, parse_definition
from ragbot.errors import ConfigurationError
from ragbot.indexing.embed import (
    EMBED_CALL_TEXTS,
    build_stored_paragraphs,
    doc_id,
    effective_max_tokens,
    embed_distinct,
)
from ragbot.ports import Embedder
from ragbot.schemas.pages import Block, Page

ROOT = Path(__file__).resolve().parents[2]
NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def recording(name: str, *, max_tokens: int = 512) -> HashEmbedder:
    """The shared fake model: tokens = words + 2 specials, passages only, every call recorded."""
    return HashEmbedder(name, dimension=4, max_tokens=max_tokens, passages_only=True)


CONTENT = """Opening paragraph of the page.

Eligibility
- ----

First rule about eligibility.

Second rule about eligibility.

### Details

A detail.
"""


def wiki_page(**overrides: object) -> Page:
    body: dict[str, object] = {
        "page_id": 42,
        "revision_id": 9,
        "revision_date": "20250102030405",
        "title": "Child allowance",
        "url": "https://wiki.example/Child_allowance",
        "summary": "Who gets it and how much.",
        "namespace": 0,
        "categories": ["Benefits", "Children"],
        "content": CONTENT,
        "audience": "parents",
    }
    body.update(overrides)
    return Page.from_wiki_content(body)


def embedders_for(definition: DocumentDefinition, **max_tokens: int) -> dict[str, HashEmbedder]:
    """One fake per model; ``max_tokens`` by model name with dashes as underscores."""
    limits = {m: max_tokens.get(m.replace("-", "_"), 512) for m in definition.models}
    return {m: recording(m, max_tokens=limit) for m, limit in limits.items()}


def default_definition() -> DocumentDefinition:
    return load_definition(ROOT / "config/definition.json")


def test_paragraph_fields_ids_and_core_fields() -> None:
    definition = default_definition()
    embedders = embedders_for(definition)
    stored = build_stored_paragraphs(
        wiki_page(), definition=definition, embedders=embedders, max_tokens=512, now=NOW
    )
    assert [s.fields["content"] for s in stored] == [
        "Opening paragraph of the page.",
        "First rule about eligibility.\n\nSecond rule about eligibility.",
        "A detail.",
    ]
    assert [s.doc_id for s in stored] == ["42-9-0", "42-9-1", "42-9-2"]
    assert [s.doc_id for s in stored] == [doc_id(42, 9, i) for i in range(3)]
    first = stored[1]
    assert (first.page_id, first.revision_id, first.paragraph) == (42, 9, 1)
    assert first.fields == {
        "title": "Child allowance",
        "page_id": 42,
        "url": "https://wiki.example/Child_allowance",
        "content": "First rule about eligibility.\n\nSecond rule about eligibility.",
        "summary": "Who gets it and how much.",
        "revision_date": "2025-01-02T03:04:05+00:00",
        "namespace": 0,
        "categories": ["Benefits", "Children"],
        "doc_id": "42-9-1",
        "revision_id": 9,
        "paragraph": 1,
        "heading": "Eligibility",
        "source": "wiki",
        "last_update": "2025-03-01T12:00:00+00:00",
    }
    assert stored[2].fields["heading"] == "Eligibility > Details"
    assert not any(key.endswith("_vectors") for s in stored for key in s.fields)


def test_every_model_field_pair_is_one_batched_call_and_the_title_is_embedded_once() -> None:
    definition = default_definition()
    embedders = embedders_for(definition)
    stored = build_stored_paragraphs(
        wiki_page(), definition=definition, embedders=embedders, max_tokens=512, now=NOW
    )
    contents = [s.fields["content"] for s in stored]
    assert embedders["all-MiniLM-L6-v2"].passage_calls == [contents]
    assert embedders["multilingual-e5-small"].passage_calls == [["Child allowance"], contents]
    expected = {v.name for v in definition.vector_fields}
    assert expected == {
        "content_all-MiniLM-L6-v2_vectors",
        "title_multilingual-e5-small_vectors",
        "content_multilingual-e5-small_vectors",
    }
    for s in stored:
        assert set(s.vectors) == expected
        for vector in s.vectors.values():
            assert vector.shape == (4,)
            assert vector.dtype == np.float32
    title_vectors = [s.vectors["title_multilingual-e5-small_vectors"] for s in stored]
    assert all(np.array_equal(v, title_vectors[0]) for v in title_vectors)
    content_vectors = [s.vectors["content_multilingual-e5-small_vectors"] for s in stored]
    assert not np.array_equal(content_vectors[0], content_vectors[1])


def test_extra_fields_come_from_the_page_when_the_definition_saves_them() -> None:
    definition = parse_definition(
        {
            "identifier_field": "page_id",
            "saved_fields": {
                "page_id": "integer",
                "content": "text",
                "audience": "keyword",
                "missing": "text",
            },
            "field_for_llm": "content",
            "models": {"m": "content"},
        }
    )
    stored = build_stored_paragraphs(
        wiki_page(), definition=definition, embedders=embedders_for(definition), max_tokens=512, now=NOW
    )
    assert stored[0].fields["audience"] == "parents"
    assert "missing" not in stored[0].fields
    assert "title" not in stored[0].fields  # not a saved field of this definition


def test_a_blank_field_gets_no_vector_instead_of_the_embedding_of_nothing() -> None:
    definition = parse_definition(
        {
            "identifier_field": "page_id",
            "saved_fields": {"page_id": "integer", "content": "text", "summary": "text"},
            "field_for_llm": "content",
            "models": {"m": ["summary", "content"]},
        }
    )
    embedders = embedders_for(definition)
    stored = build_stored_paragraphs(
        wiki_page(summary=None), definition=definition, embedders=embedders, max_tokens=512, now=NOW
    )
    assert all(set(s.vectors) == {"content_m_vectors"} for s in stored)
    assert len(embedders["m"].passage_calls) == 1


def test_the_budget_is_the_smallest_model_limit_and_the_strictest_tokenizer() -> None:
    definition = default_definition()
    embedders = embedders_for(definition, all_MiniLM_L6_v2=8)
    assert effective_max_tokens(512, embedders.values()) == 8
    assert effective_max_tokens(6, embedders.values()) == 6
    stored = build_stored_paragraphs(
        wiki_page(), definition=definition, embedders=embedders, max_tokens=512, now=NOW
    )
    assert all(len(s.fields["content"].split()) + 2 <= 8 for s in stored)
    assert len(stored) == 4  # the two eligibility rules no longer fit together


def test_uploads_keep_each_paragraphs_location_when_the_definition_saves_it() -> None:
    definition = parse_definition(
        {
            "identifier_field": "page_id",
            "saved_fields": {"page_id": "integer", "content": "text", "location": "keyword"},
            "field_for_llm": "content",
            "models": {"m": "content"},
        }
    )
    page = Page(
        page_id=5,
        revision_id=1,
        source="upload",
        blocks=[Block(text="One.", location="page 1"), Block(text="Two.", location="page 2")],
    )
    stored = build_stored_paragraphs(
        page, definition=definition, embedders=embedders_for(definition), max_tokens=64, now=NOW
    )
    assert [(s.fields["content"], s.fields["location"], s.fields["source"]) for s in stored] == [
        ("One.", "page 1", "upload"),
        ("Two.", "page 2", "upload"),
    ]


def test_a_model_without_an_embedder_is_a_configuration_error() -> None:
    definition = default_definition()
    embedders: dict[str, Embedder] = {"all-MiniLM-L6-v2": recording("all-MiniLM-L6-v2")}
    with pytest.raises(ConfigurationError, match="multilingual-e5-small"):
        build_stored_paragraphs(wiki_page(), definition=definition, embedders=embedders, max_tokens=512)


def test_an_empty_page_gives_no_paragraphs_and_calls_no_model() -> None:
    definition = default_definition()
    embedders = embedders_for(definition)
    stored = build_stored_paragraphs(
        wiki_page(content=""), definition=definition, embedders=embedders, max_tokens=512
    )
    assert stored == []
    assert all(e.passage_calls == [] for e in embedders.values())


def test_a_real_kolzchut_page_is_indexed_with_fresh_timestamps() -> None:
    with (ROOT / "samples/kolzchut/pages.jsonl").open(encoding="utf-8") as f:
        page = Page.from_wiki_content(json.loads(f.readline()))
    definition = default_definition()
    embedders = embedders_for(definition)
    before = datetime.now(UTC)
    stored = build_stored_paragraphs(page, definition=definition, embedders=embedders, max_tokens=256)
    assert len(stored) > 5
    assert all(datetime.fromisoformat(s.fields["last_update"]) >= before for s in stored)
    assert all(len(s.fields["content"].split()) + 2 <= 256 for s in stored)
    assert len({s.doc_id for s in stored}) == len(stored)
    assert sum(len(c) for c in embedders["multilingual-e5-small"].passage_calls) == len(stored) + 1


def test_embedding_calls_take_texts_by_token_count_not_characters() -> None:
    # The fake counts words: a few long words are long in characters and short in tokens.
    embedder = HashEmbedder(max_tokens=40)
    texts = [
        f"lengthyword{n:04d}xxxx " * (n % 7 + 1) if n % 2 else f"a{n} " * (n % 30 + 1)
        for n in range(3 * EMBED_CALL_TEXTS)
    ]
    vectors = embed_distinct(embedder, texts)
    calls = embedder.passage_calls
    assert len(calls) > 1
    capped = [[min(embedder.count_tokens(t), embedder.max_tokens) for t in call] for call in calls]
    for earlier, later in itertools.pairwise(capped):
        assert min(earlier) >= max(later)
    # and each text still gets its own vector
    expected = embedder.vectors(texts)
    for i, vector in enumerate(vectors):
        assert vector is not None
        np.testing.assert_allclose(vector, expected[i], atol=1e-6)
