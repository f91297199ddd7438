"""Language-aware embedding: a field embeds only the texts in a language its model serves."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from support.fakes import HashEmbedder

from ragbot.definition import DocumentDefinition, VectorField, load_definition, parse_definition
from ragbot.indexing.embed import build_pages_paragraphs, embed_prepared, prepare_paragraphs
from ragbot.indexing.languages import LanguageFilter
from ragbot.schemas.pages import Page
from ragbot.text.language import detect_language

ROOT = Path(__file__).resolve().parents[2]
NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
MINILM = VectorField("all-MiniLM-L6-v2", "content")
E5_CONTENT = VectorField("multilingual-e5-small", "content")
HEBREW = "דמי אבטלה משולמים למי שפוטר מעבודתו ונרשם בלשכת התעסוקה."
ENGLISH = "Unemployment benefits are paid to dismissed workers."


def shipped() -> DocumentDefinition:
    return load_definition(ROOT / "config" / "definition.json")


def definition_with(models: dict[str, object]) -> DocumentDefinition:
    return parse_definition(
        {
            "identifier_field": "page_id",
            "saved_fields": {"page_id": "integer", "title": "text", "content": "text"},
            "field_for_llm": "content",
            "models": models,
        }
    )


def fakes(definition: DocumentDefinition) -> dict[str, HashEmbedder]:
    return {m: HashEmbedder(m, dimension=4, passages_only=True) for m in definition.models}


def page(page_id: int, title: str, content: str) -> Page:
    return Page.from_wiki_content(
        {
            "page_id": page_id,
            "revision_id": 1,
            "title": title,
            "content": content,
            "url": f"https://w/{page_id}",
        }
    )


def sent(embedder: HashEmbedder) -> list[str]:
    return [text for call in embedder.passage_calls for text in call]


def test_the_shipped_definition_gives_minilm_no_hebrew_paragraph() -> None:
    definition = shipped()
    embedders = fakes(definition)
    hebrew, english = build_pages_paragraphs(
        [page(1, "דמי אבטלה", HEBREW), page(2, "Unemployment benefits", ENGLISH)],
        definition=definition,
        embedders=embedders,
        max_tokens=512,
        now=NOW,
    )
    assert [set(p.vectors) for p in hebrew] == [
        {"title_multilingual-e5-small_vectors", "content_multilingual-e5-small_vectors"}
    ]
    assert [set(p.vectors) for p in english] == [
        {
            "title_multilingual-e5-small_vectors",
            "content_multilingual-e5-small_vectors",
            "content_all-MiniLM-L6-v2_vectors",
        }
    ]
    assert sent(embedders["all-MiniLM-L6-v2"]) == [ENGLISH]
    assert HEBREW in sent(embedders["multilingual-e5-small"])


def test_mixed_unknown_and_unserved_texts_are_embedded_by_every_field() -> None:
    languages = LanguageFilter(shipped())
    assert not languages.embeds(MINILM, HEBREW)
    assert languages.embeds(E5_CONTENT, HEBREW)
    # Half Hebrew, half Latin letters: mixed, so routing keeps MiniLM for it and so does indexing.
    mixed = "הגשת טופס באתר השירות Employment Service"
    assert detect_language(mixed).script == "mixed"
    assert languages.embeds(MINILM, mixed)
    assert languages.embeds(MINILM, "2024 - 15%")  # no letters: nothing to decide by
    assert languages.embeds(MINILM, ENGLISH)
    # No field of this definition serves Hebrew: every field embeds it, as routing falls back to all.
    english_only = LanguageFilter(definition_with({"all-MiniLM-L6-v2": "content"}))
    assert english_only.embeds(MINILM, HEBREW)


def test_declared_languages_decide_and_any_language_embeds_everything() -> None:
    declared = definition_with(
        {
            "all-MiniLM-L6-v2": {"fields": ["content"], "languages": ["*"]},
            "multilingual-e5-small": {"fields": ["title", "content"], "languages": {"title": ["en"]}},
        }
    )
    languages = LanguageFilter(declared)
    assert languages.embeds(MINILM, HEBREW)
    assert not languages.embeds(VectorField("multilingual-e5-small", "title"), "דמי אבטלה")
    assert languages.kept(MINILM, ["", HEBREW]) == ["", HEBREW]
    assert LanguageFilter(shipped()).kept(MINILM, [ENGLISH, HEBREW, " "]) == [ENGLISH, "", " "]


def test_a_paragraph_that_became_hebrew_loses_its_old_english_model_vector() -> None:
    """The kolzchut-ragbot drop-in re-embeds paragraphs that carry vectors: a stale one must not stay."""
    definition = shipped()
    embedders = fakes(definition)
    [paragraph] = prepare_paragraphs(
        page(1, "דמי אבטלה", HEBREW), definition=definition, embedders=embedders, max_tokens=512
    )
    paragraph.vectors[MINILM.name] = embedders["all-MiniLM-L6-v2"].embed_passages([ENGLISH])[0]
    embed_prepared([[paragraph]], definition=definition, embedders=embedders)
    assert MINILM.name not in paragraph.vectors
