"""The BM25 analyzer both stores share: normalisation, tokens, Hebrew prefix variants."""

from __future__ import annotations

import pytest

from ragbot.text import MAX_PREFIX_LETTERS, MIN_STEM_LETTERS, analyze


def test_chosen_settings() -> None:
    # Chosen on HeQ (bench/retrieval/hebrew_analyzer.py); changing them changes every BM25 index.
    assert (MAX_PREFIX_LETTERS, MIN_STEM_LETTERS) == (1, 3)


def test_lowercases_and_splits_on_non_word_characters() -> None:
    assert analyze("Hello, WORLD! foo_bar 42") == ["hello", "world", "foo_bar", "42"]


def test_nfkc_folds_compatibility_forms() -> None:
    assert analyze("ﬁle Ｔｅｓｔ ①") == ["file", "test", "1"]


def test_strips_niqqud_and_cantillation() -> None:
    assert analyze("שָׁלוֹם")[0] == "שלום"
    assert analyze("בְּרֵאשִׁ֖ית")[0] == "בראשית"


def test_presentation_forms_become_plain_letters() -> None:
    # U+FB2A (shin with shin dot) and U+FB4B (vav with holam) decompose under NFKC.
    assert analyze("\ufb2a\u05dc\ufb4b\u05dd")[0] == "שלום"


@pytest.mark.parametrize("text", ['מע"מ', "מע״מ", "מע'מ", "מע׳מ"])
def test_hebrew_acronyms_stay_one_token(text: str) -> None:
    assert analyze(text) == ["מעמ"]


def test_prefix_variant_follows_its_word() -> None:
    assert analyze("ובבית") == ["ובבית", "בבית"]
    assert analyze("הבית שלנו") == ["הבית", "בית", "שלנו", "לנו"]


def test_one_prefix_letter_comes_off_by_default() -> None:
    assert analyze("וכשהתקבל") == ["וכשהתקבל", "כשהתקבל"]


def test_deeper_stripping_stays_available_for_measurement() -> None:
    assert analyze("ובבית", max_prefix=2) == ["ובבית", "בבית", "בית"]
    assert analyze("וכשהתקבל", max_prefix=3) == ["וכשהתקבל", "כשהתקבל", "שהתקבל", "התקבל"]


def test_stem_keeps_at_least_three_letters() -> None:
    assert analyze("בו") == ["בו"]
    assert analyze("מהם") == ["מהם"]
    assert analyze("שלי") == ["שלי"]
    assert analyze("לעבד") == ["לעבד", "עבד"]
    assert analyze("מהם", min_stem=2) == ["מהם", "הם"]


def test_words_without_a_prefix_letter_have_no_variant() -> None:
    assert analyze("זכויות עובדים") == ["זכויות", "עובדים"]


def test_mixed_tokens_get_no_variant() -> None:
    assert analyze("ב2020 ב-2020") == ["ב2020", "ב", "2020"]


def test_prefix_depth_zero_turns_variants_off() -> None:
    assert analyze("ובבית", max_prefix=0) == ["ובבית"]


def test_query_with_prefix_shares_a_token_with_plain_word() -> None:
    assert "עובדים" in analyze("לעובדים")
    assert "זכויות" in analyze("הזכויות")
    assert set(analyze("בבית")) & set(analyze("ובבית"))


def test_latin_text_is_untouched_by_hebrew_rules() -> None:
    assert analyze("Bob's ballet") == ["bob", "s", "ballet"]


def test_empty_and_punctuation_only() -> None:
    assert analyze("") == []
    assert analyze(" ,.-!? ") == []
