"""The quote answer mode: sentence splitting (Hebrew and English), selection, [n] numbering, and the
turn through the pipeline with no LLM call (the retriever is the small fake of chat_fakes)."""

from __future__ import annotations

import asyncio
from typing import Any

from prometheus_client import CollectorRegistry
from support.chat_fakes import ScriptedLLM, StaticRetriever, document

from ragbot.chat.citations import cited_numbers
from ragbot.chat.events import ChatEvent, ChatRequest, DoneEvent, SourcesEvent, TokenEvent
from ragbot.chat.metrics import chat_metrics
from ragbot.chat.pipeline import ChatPipeline
from ragbot.chat.quote import (
    QuoteOptions,
    Scored,
    Sentence,
    choose_sentences,
    compose,
    overlap,
    repeats,
    score,
    sentences_of,
    split_sentences,
)
from ragbot.prompts import PromptDocument, PromptLibrary
from ragbot.settings import ChatSettings

HEBREW = (
    'נערות ונערים עובדים בגילאי 18-16 זכאים ל[נקודת זיכוי](/he/x "נקודת זיכוי") ממס הכנסה. '
    "שווי ההטבה הוא 2,904 ₪ לשנה (נכון לשנת 2024)! האם צריך להגיש בקשה? כן, דרך טופס 101.\n"
    "*   לשם מימוש הזכאות יש למלא **טופס 101** ולמסור אותו למעסיק.\n"
    "### גורמים מסייעים\n"
    "- ----\n"
    "קצר מדי."
)


def test_hebrew_sentences_split_on_ends_lines_and_bullets_and_read_clean() -> None:
    assert split_sentences(HEBREW) == [
        "נערות ונערים עובדים בגילאי 18-16 זכאים לנקודת זיכוי ממס הכנסה.",
        "שווי ההטבה הוא 2,904 ₪ לשנה (נכון לשנת 2024)!",
        "האם צריך להגיש בקשה?",
        "כן, דרך טופס 101.",
        "לשם מימוש הזכאות יש למלא טופס 101 ולמסור אותו למעסיק.",
    ]


def test_english_sentences_keep_abbreviations_decimals_and_drop_stray_citations() -> None:
    text = (
        "Workers aged 16 to 18 get 2.25 credit points, e.g. students with jobs. "
        "Dr. Cohen signs the form [3] for them. Apply before the end of December!\n"
        "1. Fill in form 101 and give it to the employer."
    )
    assert split_sentences(text) == [
        "Workers aged 16 to 18 get 2.25 credit points, e.g. students with jobs.",
        "Dr. Cohen signs the form for them.",
        "Apply before the end of December!",
        "Fill in form 101 and give it to the employer.",
    ]


def test_sentences_of_documents_keep_their_number_and_position_and_skip_repeats() -> None:
    docs = [
        PromptDocument(2, "b", "One two three four. Five six seven eight."),
        PromptDocument(1, "a", "Five six seven eight. Nine ten eleven twelve."),
    ]
    assert sentences_of(docs) == [
        Sentence(2, 0, "One two three four."),
        Sentence(2, 1, "Five six seven eight."),
        Sentence(1, 1, "Nine ten eleven twelve."),
    ]


def test_a_sentence_said_again_or_cut_short_is_a_repeat_and_is_quoted_once() -> None:
    full = "Workers aged 16 to 18 get a credit point from income tax every year."
    assert repeats(full, "Workers aged 16 to 18 get a credit point")  # a summary's cut-short copy
    assert repeats("נערים עובדים זכאים לנקודת זיכוי ממס הכנסה.", "נערים עובדים זכאים לנקודת זיכוי")
    assert not repeats(full, "Workers aged 16 to 18 need form 101 from the employer.")
    sentences = [
        Sentence(1, 0, full),
        Sentence(2, 0, "Workers aged 16 to 18 get a credit point"),
        Sentence(2, 1, "The employer files form 101 with the tax office."),
    ]
    chosen = choose_sentences(Scored(sentences, [0.9, 0.89, 0.88], "similarity:m"), QuoteOptions())
    assert [s.text for s in chosen] == [full, "The employer files form 101 with the tax office."]


def _scored(scores: list[float], scorer: str = "similarity:m") -> Scored:
    sentences = [Sentence(1, 0, "a"), Sentence(1, 1, "b"), Sentence(2, 0, "c"), Sentence(3, 0, "d")]
    return Scored(sentences, scores, scorer)


def test_choose_keeps_the_best_within_the_margin_in_source_then_document_order() -> None:
    options = QuoteOptions(max_sentences=3, min_score=0.8, margin=0.05)
    chosen = choose_sentences(_scored([0.83, 0.90, 0.70, 0.88]), options)
    assert [(s.number, s.position) for s in chosen] == [(1, 1), (3, 0)]  # 0.83 is 0.07 below the best
    wider = QuoteOptions(max_sentences=2, min_score=0.8, margin=0.2)
    assert [s.text for s in choose_sentences(_scored([0.83, 0.90, 0.70, 0.88]), wider)] == ["b", "d"]


def test_choose_abstains_below_the_floor_and_overlap_has_its_own_floor() -> None:
    options = QuoteOptions(min_score=0.8, lexical_min_score=0.5)
    assert choose_sentences(_scored([0.79, 0.5, 0.1, 0.0]), options) == []
    assert choose_sentences(Scored([], [], "none"), options) == []
    assert [s.text for s in choose_sentences(_scored([0.6, 0.0, 0.0, 0.0], "overlap"), options)] == ["a"]


def test_compose_cites_every_sentence_and_starts_a_paragraph_per_source() -> None:
    chosen = [Sentence(1, 0, "A one."), Sentence(1, 2, "A three."), Sentence(3, 0, "C one.")]
    pieces = compose(chosen)
    assert pieces == ["A one. [1]", " A three. [1]", "\n\nC one. [3]"]
    assert cited_numbers("".join(pieces)) == [1, 3]


def test_overlap_matches_hebrew_prefixed_words() -> None:
    assert overlap("מי זכאי לנקודת זיכוי?", "הנערים זכאים לנקודת זיכוי אחת") >= 0.5
    assert overlap("", "anything") == 0.0


# -- through the pipeline ----------------------------------------------------------------------------

DOCS = [
    document(10, 0, "The credit is worth 242 shekels a month. It is given to working teens aged 16 to 18."),
    document(20, 3, "Students may get a scholarship exemption. Apply with form 101 at the tax office."),
]


def make(**settings: Any) -> tuple[ChatPipeline, ScriptedLLM, StaticRetriever, CollectorRegistry]:
    registry = CollectorRegistry()
    llm = ScriptedLLM()
    retriever = StaticRetriever(DOCS)
    pipeline = ChatPipeline(
        llm=llm,
        retriever=retriever,
        prompts=PromptLibrary(),
        settings=ChatSettings(**{"quote_min_score": 0.5, "abstention_enabled": False, **settings}),
        metrics=chat_metrics(registry),
    )
    return pipeline, llm, retriever, registry


def turn(pipeline: ChatPipeline, question: str, **kwargs: Any) -> list[ChatEvent]:
    request = ChatRequest(question=question, mode="quote", language="en", **kwargs)

    async def go() -> list[ChatEvent]:
        return [event async for event in pipeline.run(request)]

    return asyncio.run(go())


def test_quote_turn_streams_cited_sentences_without_calling_the_llm() -> None:
    pipeline, llm, retriever, registry = make()
    events = turn(pipeline, "How much is the credit worth a month?")
    assert isinstance(events[0], SourcesEvent) and [s.index for s in events[0].sources] == [1, 2]
    tokens = [e.text for e in events if isinstance(e, TokenEvent)]
    done = events[-1]
    assert isinstance(done, DoneEvent) and not done.abstained
    assert done.answer == "".join(tokens) == "The credit is worth 242 shekels a month. [1]"
    assert [s.page_id for s in done.citations] == [10]
    assert [s.page_id for s in done.retrieved_not_cited] == [20]
    assert done.usage["completion_tokens"] == 0 and done.finish_reason == "stop"
    assert llm.calls == []
    assert retriever.similarity_requests[0].texts[0] == "The credit is worth 242 shekels a month."
    assert events[0].debug["quote"]["scorer"] == "similarity:m"
    assert (
        registry.get_sample_value(
            "ragbot_chat_answers_total", {"mode": "quote", "channel": "api", "outcome": "answered"}
        )
        == 1.0
    )


def test_quote_turn_abstains_honestly_when_no_sentence_scores() -> None:
    pipeline, llm, _, registry = make()
    events = turn(pipeline, "Where do penguins nest?")
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.abstained
    assert done.answer.startswith(pipeline.no_documents_answer("en")) and done.citations == []
    # the closest pages are offered as related, never as citations
    assert "Related pages" in done.answer and done.retrieved_not_cited
    assert llm.calls == []
    assert registry.get_sample_value("ragbot_chat_abstentions_total", {"mode": "quote"}) == 1.0


def test_quote_follow_up_is_not_rewritten_by_the_llm() -> None:
    from ragbot.chat.events import HistoryTurn

    pipeline, llm, _, _ = make()
    events = turn(pipeline, "Which form do I apply with?", history=[HistoryTurn("q", "a")], rephrase=True)
    assert isinstance(events[-1], DoneEvent) and "form 101 at the tax office. [2]" in events[-1].answer
    assert llm.calls == []


def test_quote_falls_back_to_token_overlap_when_the_retriever_cannot_score() -> None:
    pipeline, _, retriever, _ = make(quote_lexical_min_score=0.5)
    retriever.similarity_down = True
    events = turn(pipeline, "scholarship exemption for students")
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.answer == "Students may get a scholarship exemption. [2]"
    assert isinstance(events[0], SourcesEvent)
    assert events[0].debug["quote"]["scorer"] == "overlap" and events[0].debug["quote"]["error"]


def test_page_furniture_and_links_cut_by_a_paragraph_split_are_left_out() -> None:
    title = "נקודות זיכוי ממס הכנסה לנוער עובד (זכות)"
    text = (
        f"- This document covers topics related to: {title} – כל-זכות\n"
        "- Source URL: https://www.kolzchut.org.il/he/some_page and more words here\n"
        'זיכוי](/he/%D7%A0 "נקודות זיכוי") נוספות ניתנות לעובדים שהם תושבי ישראל.\n'
        "הגשת בקשה להחזר באופן ידני:"
    )
    assert split_sentences(text, title=title) == ["זיכוי נוספות ניתנות לעובדים שהם תושבי ישראל."]


def test_cross_language_sentences_get_the_bonus_and_tokens_add_their_share() -> None:
    retriever = StaticRetriever([])
    sentences = [Sentence(1, 0, "credit points for working teens"), Sentence(1, 1, "נקודות זיכוי לנוער עובד")]
    options = QuoteOptions(lexical_weight=0.1, cross_language_bonus=0.05)
    scored = asyncio.run(
        score(retriever=retriever, question="credit points", sentences=sentences, options=options)
    )
    # the fake's cosine is the token share itself: 1.0 and 0.0
    assert scored.scores == [1.0 + 0.1 * 1.0, 0.0 + 0.05]
