"""The answer-quality figures of ``ragbot eval-answers``: sentences of an answer, support by token
overlap with a cited paragraph, loops, gold citations, and the committed question file."""

from __future__ import annotations

import json

from ragbot.cli.main import build_parser
from ragbot.evaluation.answers import (
    DEFAULT_PAGES,
    SAMPLE_PAGES,
    SAMPLE_QUESTIONS,
    AnswerRow,
    answer_sentences,
    figures,
    half_of,
    load_questions,
    supported,
)

PARAGRAPH = "נערות ונערים עובדים בגילאי 18-16 זכאים לנקודת זיכוי ממס הכנסה. שווי ההטבה הוא 2,904 ₪ לשנה."


def test_answer_sentences_drop_citations_and_the_cut_mark() -> None:
    answer = "נערים בגילאי 18-16 זכאים לנקודת זיכוי [1]. שווי ההטבה 2,904 ₪ [1, 2]\n\nOther text here! [3] …"
    assert answer_sentences(answer) == [
        "נערים בגילאי 18-16 זכאים לנקודת זיכוי .",
        "שווי ההטבה 2,904 ₪",
        "Other text here!",
    ]
    assert answer_sentences("[1]") == []


def test_support_is_token_overlap_with_one_cited_paragraph() -> None:
    assert supported("הנערים בגילאי 18-16 זכאים לנקודת זיכוי", [PARAGRAPH])
    assert not supported("הנערים זכאים לפנסיה מוקדמת ולהנחה בארנונה", [PARAGRAPH])
    assert not supported("הנערים בגילאי 18-16 זכאים לנקודת זיכוי", [])
    half = "נערים זכאים לפנסיה מוקדמת והנחה בחשמל"  # 2 of its 6 words are in the paragraph
    assert not supported(half, [PARAGRAPH]) and supported(half, [PARAGRAPH], threshold=0.3, order=0.0)


def test_support_needs_the_paragraph_s_word_order_not_only_its_words() -> None:
    shuffled = "זיכוי לנקודת זכאים 18-16 בגילאי הנערים"  # every word of the supported one, reversed
    assert not supported(shuffled, [PARAGRAPH])
    assert supported("הנערים זכאים לנקודת זיכוי", [PARAGRAPH])  # words left out between stay in order


def _row(gold: bool, sentences: int, ok: int, looped: bool = False, abstained: bool = False) -> AnswerRow:
    return AnswerRow(
        "q", "quote", "?", 1, "a", [1] if gold else [], gold, sentences, ok, looped, abstained, None, 1.0
    )


def test_figures_are_shares_of_answers_and_of_all_sentences() -> None:
    fig = figures(
        [
            _row(True, 3, 3),
            _row(False, 1, 0, looped=True),
            _row(False, 0, 0, abstained=True),
            _row(True, 4, 3),
        ]
    )
    assert (fig.gold_cited, fig.loop_rate, fig.abstained) == (0.5, 0.25, 0.25)
    assert fig.supported_sentences == round(6 / 8, 4) and fig.sentences == 8


def test_the_question_file_has_hebrew_and_english_questions_on_the_sample_pages() -> None:
    questions = load_questions(SAMPLE_QUESTIONS)
    pages = {json.loads(line)["page_id"] for line in SAMPLE_PAGES.read_text(encoding="utf-8").splitlines()}
    assert (
        sum(q.language == "he" for q in questions) >= 12 and sum(q.language == "en" for q in questions) >= 8
    )
    assert {q.gold_page_id for q in questions} - {None} <= pages
    assert sum(q.gold_page_id is None for q in questions) >= 4
    assert len({q.id for q in questions}) == len(questions)


def test_the_cli_has_the_subcommand() -> None:
    args = build_parser().parse_args(["eval-answers", "--modes", "quote", "strict", "--max-tokens", "64"])
    assert args.modes == ["quote", "strict"] and args.max_tokens == 64


def test_the_abstention_set_is_large_bilingual_and_a_third_unanswerable_mostly_from_the_same_field() -> None:
    questions = load_questions()
    pages = {
        json.loads(line)["page_id"] for path in DEFAULT_PAGES for line in path.read_text("utf-8").splitlines()
    }
    unanswerable = [q for q in questions if q.gold_page_id is None]
    assert len(questions) >= 120 and len({q.id for q in questions}) == len(questions)
    assert {q.language for q in questions} == {"he", "en"}
    assert len(unanswerable) >= len(questions) / 3
    assert sum(q.scope == "same_field" for q in unanswerable) > len(unanswerable) / 2
    assert all(q.gold_pages <= pages for q in questions)
    assert all((q.gold_page_id is None) == (q.scope != "answerable") for q in questions)


def test_the_split_is_deterministic_disjoint_and_stratified() -> None:
    questions = load_questions()
    tune, held_out = half_of(questions, "tune"), half_of(questions, "held_out")
    assert {q.id for q in tune}.isdisjoint({q.id for q in held_out})
    assert len(tune) + len(held_out) == len(questions)
    assert [q.id for q in half_of(list(reversed(questions)), "held_out")] == [
        q.id for q in reversed(held_out)
    ]
    for scope in ("answerable", "same_field", "off_field"):
        for language in ("he", "en"):
            a = sum(q.scope == scope and q.language == language for q in tune)
            b = sum(q.scope == scope and q.language == language for q in held_out)
            assert abs(a - b) <= 1, (scope, language, a, b)
