"""Word-by-word translation of English questions into the corpus's language, with the real packaged e5."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from ragbot.definition import load_definition, parse_definition
from ragbot.embedders import E5Embedder
from ragbot.retrieval.translation import (
    LexiconTranslator,
    common_english_words,
    corpus_words,
    translation_model,
)

ROOT = Path(__file__).resolve().parents[2]
HEBREW = ["חודשים", "ילדים", "מס", "אבטלה", "שלום", "נקודות", "הורים", "עבודה", "לידה", "זכויות"]


@pytest.fixture(scope="module")
def e5() -> Iterator[E5Embedder]:
    embedder = E5Embedder()
    embedder.warm_up()
    yield embedder
    embedder.close()


@pytest.fixture(scope="module")
def translator(e5: E5Embedder) -> LexiconTranslator:
    return LexiconTranslator.build(
        model="multilingual-e5-small",
        embedder=e5,
        language="he",
        words=HEBREW,
        reference=common_english_words(400),
    )


def test_corpus_words_are_the_languages_own_counted_once_per_text() -> None:
    texts = [
        'דמי אבטלה משולמים לעובד. דמי לידה? Form 101, ב-2024 ו-5 ש"ח',
        "דמי אבטלה שוב: אבטלה",
    ]
    counted = corpus_words(texts, language="he")
    assert counted["אבטלה"] == 2  # in two texts, counted once in each
    assert counted["דמי"] == 2
    assert counted["לידה"] == 1
    assert 'ש"ח' in counted  # a Hebrew acronym keeps its gershayim
    assert "Form" not in counted and "101" not in counted  # another script, or no letters
    assert not any(len(w) < 2 for w in counted)
    with pytest.raises(ValueError, match="no known script"):
        corpus_words(texts, language="xx")


def test_content_words_leave_out_function_words_and_keep_numbers(translator: LexiconTranslator) -> None:
    assert translator.content_words("How many months of maternity pay do I get in 2024?") == [
        "months",
        "maternity",
        "pay",
        "2024",
    ]
    assert translator.content_words("what is it?") == []


def test_the_model_that_serves_both_languages_translates() -> None:
    shipped = load_definition(ROOT / "config" / "definition.json")
    assert translation_model(shipped, "he") == "multilingual-e5-small"
    english_only = parse_definition(
        {
            "identifier_field": "page_id",
            "saved_fields": {"page_id": "integer", "content": "text"},
            "field_for_llm": "content",
            "models": {"all-MiniLM-L6-v2": "content"},
        }
    )
    assert translation_model(english_only, "he") is None


def test_english_words_translate_to_their_hebrew_corpus_words(
    translator: LexiconTranslator, e5: E5Embedder
) -> None:
    assert translator.vectors.shape == (len(HEBREW), e5.dimension)
    assert np.allclose(np.linalg.norm(translator.vectors, axis=1), 1.0, atol=1e-4)
    assert translator.hubness.shape == (len(HEBREW),)
    words = translator.translate("How many months for my children?", e5).split()
    assert words == ["חודשים", "ילדים"]
    assert translator.translate("Unemployment and tax in 2025", e5).split() == ["אבטלה", "מס", "2025"]
    assert translator.translate("what is it?", e5) == ""


def test_a_lexicon_needs_words(e5: E5Embedder) -> None:
    with pytest.raises(ValueError, match="needs corpus words"):
        LexiconTranslator.build(model="m", embedder=e5, language="he", words=[], reference=["tax"])


def test_the_question_chooses_among_a_words_senses(e5: E5Embedder) -> None:
    senses = LexiconTranslator.build(
        model="multilingual-e5-small",
        embedder=e5,
        language="he",
        words=["חופשה", "לעזוב", "מחלה", "עבודה", "תשלום", "תביעה", "משפט", "דירה", "שכר", "קצבה"],
        reference=common_english_words(400),
    )

    def leave_in(question: str) -> str:
        translated = senses.translate(question, e5).split()
        return translated[senses.content_words(question).index("leave")]

    # "leave" alone is nearest "to leave"; among its best corpus words the question picks the sense
    assert leave_in("Can I leave my job and still get benefits?") == "לעזוב"
    assert leave_in("How many days of sick leave do I get?") == "חופשה"
    alone = senses.translate("How many days of sick leave do I get?", e5, context=0.0).split()
    assert "חופשה" not in alone
    claim = senses.translate("Do I need a lawyer for a claim in court?", e5).split()
    assert "תביעה" in claim
