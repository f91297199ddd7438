"""The abstention decision: its evidence read from the retriever's debug view, the linear rule, and the
turn it ends in strict and quote mode (the "not found" answer with the closest pages as related, no
LLM call). Real models on held-out questions: tests/integration/test_abstention.py."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Literal

import pytest
from support.chat_fakes import RememberingRetriever, ScriptedLLM, StaticRetriever, TunedRetriever, document

from ragbot.chat.answerability import (
    AbstentionRule,
    Evidence,
    coverage,
    decide,
    evidence,
    key_terms,
    knows_unanswered,
    memory_evidence,
    remembered,
    rule_for,
    searched_tuned,
)
from ragbot.chat.events import ChatEvent, ChatRequest, DoneEvent
from ragbot.chat.pipeline import ChatPipeline
from ragbot.prompts import PromptLibrary
from ragbot.settings import ChatSettings
from ragbot.settings.chat import (
    ABSTENTION_RULE,
    ABSTENTION_RULE_CROSS_LANGUAGE,
    ABSTENTION_RULE_CROSS_LANGUAGE_MEMORY,
    ABSTENTION_RULE_CROSS_LANGUAGE_TUNED,
    ABSTENTION_RULE_MEMORY,
)


def _row(doc_id: str, page: int, **raw: float) -> dict[str, Any]:
    return {"_id": doc_id, "page_id": page, "score": 0.0, "raw_scores": raw}


DEBUG = {
    "branches": {"e5": {"kind": "dense"}, "bm25": {"kind": "bm25"}},
    "fused": [
        _row("1-1-0", 1, e5=1.90, bm25=12.0),
        _row("1-1-1", 1, e5=1.85),
        _row("2-1-0", 2, e5=1.84, bm25=4.0),
    ],
}


def test_evidence_reads_page_gaps_agreement_and_key_term_coverage() -> None:
    ev = evidence(
        question="How much is the maternity grant?",
        debug=DEBUG,
        paragraphs=["The maternity grant is paid once.", "Other text."],
        sentence_top=0.93,
    )
    assert ev is not None
    assert round(ev.dense_top, 3) == 0.9 and round(ev.dense_gap, 3) == 0.06
    assert round(ev.bm25_gap, 3) == round(8 / 12, 3) and ev.agree == 1.0
    assert ev.coverage == 1.0 and ev.sentence_top == 0.93 and ev.cross_language == 0.0
    # a retriever whose debug view has no branch scores gives no evidence: nothing is decided
    assert evidence(question="q", debug={}, paragraphs=["p"]) is None


TUNED_DEBUG = {
    "branches": {
        "e5": {"kind": "dense"},
        "e5@tuned": {"kind": "dense", "tuned": True},
        "bm25": {"kind": "bm25"},
    },
    "fused": [
        _row("1-1-0", 1, **{"e5": 1.80, "e5@tuned": 1.60, "bm25": 12.0}),
        _row("2-1-0", 2, **{"e5": 1.84, "e5@tuned": 1.40, "bm25": 4.0}),
    ],
}


def test_evidence_reads_the_tuned_lists_apart_from_their_untuned_twins() -> None:
    paragraphs = ["The maternity grant is paid once."]
    ev = evidence(question="maternity grant", debug=TUNED_DEBUG, paragraphs=paragraphs)
    assert ev is not None
    # untuned: page 2 is dense's best (0.84), BM25's is page 1, so they disagree
    assert round(ev.dense_top, 3) == 0.84 and round(ev.dense_gap, 3) == 0.04 and ev.agree == 0
    # tuned: page 1 at 0.60 stands 0.20 above page 2
    assert round(ev.tuned_top, 3) == 0.6 and round(ev.tuned_gap, 3) == 0.2
    assert searched_tuned(TUNED_DEBUG) and not searched_tuned(DEBUG)
    plain = evidence(question="maternity grant", debug=DEBUG, paragraphs=paragraphs)
    assert plain is not None and plain.tuned_top == 0.0 and plain.tuned_gap == 0.0


def test_key_terms_leave_out_function_words_and_match_hebrew_prefixes() -> None:
    assert [sorted(t)[0] for t in key_terms("What is the hourly minimum wage?")] == [
        "hourly",
        "minimum",
        "wage",
    ]
    assert coverage("מה גובה שכר המינימום?", ["שכר מינימום לשעה"]) == 2 / 3  # גובה is missing
    assert coverage("מה?", ["x"]) == 1.0


def test_the_rule_answers_at_its_threshold_and_abstains_below() -> None:
    rule = AbstentionRule(bias=-1.0, sentence_top=2.0, threshold=0.6)
    high = Evidence(0.9, 0.05, 0.5, 1.0, 1.0, sentence_top=0.8)
    low = Evidence(0.9, 0.05, 0.5, 1.0, 1.0, sentence_top=0.7)
    assert decide(high, rule).answer and not decide(low, rule).answer
    assert round(decide(low, rule).score, 6) == 0.4
    # the shipped rule is a fitted one, not the answer-everything default
    assert ABSTENTION_RULE["threshold"] > -1e9 and set(ABSTENTION_RULE) <= set(AbstentionRule.__slots__)


def test_a_question_in_another_language_than_its_page_gets_the_cross_language_rule() -> None:
    same, cross = AbstentionRule(bias=1.0), AbstentionRule(bias=-1.0)
    hebrew = Evidence(0.9, 0.05, 0.5, 1.0, 1.0, sentence_top=0.8)
    english = Evidence(0.9, 0.05, 0.5, 1.0, 1.0, sentence_top=0.8, cross_language=1.0)
    assert rule_for(hebrew, same, cross) is same and rule_for(english, same, cross) is cross
    assert rule_for(english, same, None) is same
    assert ABSTENTION_RULE_CROSS_LANGUAGE["threshold"] > -1e9


def _turn(
    mode: str,
    rule: dict[str, float],
    branches: Sequence[str] = (),
    question: str = "What is the hourly minimum wage?",
    text: str = "Annual leave is 16 days a year.",
) -> tuple[list[ChatEvent], ScriptedLLM]:
    docs = [
        document(7, 0, text, title="Annual leave"),
        document(8, 0, "x y z w"),
    ]
    llm = ScriptedLLM()
    pipeline = ChatPipeline(
        llm=llm,
        retriever=StaticRetriever(docs, [0.6, 0.55]),
        prompts=PromptLibrary(),
        settings=ChatSettings(
            _env_file=None, abstention_rule=rule, abstention_branches=list(branches), quote_min_score=0.0
        ),
    )
    request = ChatRequest(question=question, mode=mode, language="en")  # type: ignore[arg-type]

    async def collect() -> list[ChatEvent]:
        return [e async for e in pipeline.run(request)]

    return asyncio.run(collect()), llm


def test_an_abstention_says_not_found_and_offers_the_closest_pages_as_related_in_both_modes() -> None:
    never = {"bias": -1.0, "threshold": 0.0}
    for mode in ("quote", "strict"):
        events, llm = _turn(mode, never)
        done = events[-1]
        assert isinstance(done, DoneEvent) and done.abstained, mode
        assert done.citations == [] and [s.page_id for s in done.retrieved_not_cited] == [7, 8]
        assert "Related pages that may help:\n- Annual leave" in done.answer
        assert llm.calls == []
        assert events[0].debug["answerability"]["answer"] is False  # type: ignore[union-attr]


def test_a_rule_that_answers_lets_the_turn_go_on() -> None:
    events, llm = _turn("strict", {"bias": 1.0, "threshold": 0.0})
    done = events[-1]
    assert isinstance(done, DoneEvent) and not done.abstained and len(llm.calls) == 1


def test_a_rule_fitted_on_other_dense_branches_does_not_decide() -> None:
    never = {"bias": -1.0, "threshold": 0.0}
    events, llm = _turn("strict", never, branches=["content_multilingual-e5-small_vectors"])
    done = events[-1]
    assert isinstance(done, DoneEvent) and not done.abstained and len(llm.calls) == 1
    assert "answerability" not in events[0].debug  # type: ignore[union-attr]
    events, _ = _turn("strict", never, branches=["content_m_vectors"])  # the fake's one dense branch
    assert isinstance(events[-1], DoneEvent) and events[-1].abstained


def test_a_question_asking_an_amount_its_sources_never_state_abstains_even_when_the_rule_answers() -> None:
    always = {"bias": 1.0, "threshold": 0.0}
    for mode in ("quote", "strict"):
        events, llm = _turn(mode, always, question="How much is the annual leave pay per day?")
        done = events[-1]
        assert isinstance(done, DoneEvent) and done.abstained, mode
        assert "Related pages that may help:\n- Annual leave" in done.answer and llm.calls == []
        decision = events[0].debug["answerability"]  # type: ignore[union-attr]
        assert decision["answer"] is False and decision["reason"] == "answer_kind"
    # a duration the sources state: the turn goes on
    question, text = "How many days off do I get a year?", "Every worker gets 16 days off a year."
    events, llm = _turn("strict", always, question=question, text=text)
    done = events[-1]
    assert isinstance(done, DoneEvent) and not done.abstained and len(llm.calls) == 1
    assert events[0].debug["answerability"]["reason"] == "rule"  # type: ignore[union-attr]


def test_a_cross_language_question_searched_tuned_is_decided_by_the_tuned_rule() -> None:
    docs = [document(7, 0, "כל עובד זכאי לחופשה שנתית.", title="חופשה"), document(8, 0, "טקסט אחר")]
    untuned_answers = {"bias": -0.5, "dense_top": 1.0, "threshold": 0.0}  # cosine 0.6 >= 0.5
    tuned_abstains = {"bias": -0.6, "tuned_top": 1.0, "threshold": 0.0}  # tuned cosine 0.55 < 0.6

    def turn(retriever: StaticRetriever, tuned_rule: dict[str, float] | None) -> tuple[dict[str, Any], int]:
        """The turn's decision, and how many times it called the LLM (strict mode: once when answering)."""
        settings = ChatSettings(
            _env_file=None,
            abstention_rule=untuned_answers,
            abstention_rule_cross_language=untuned_answers,
            abstention_rule_cross_language_tuned=tuned_rule,
            abstention_branches=[],
        )
        llm = ScriptedLLM()
        pipeline = ChatPipeline(llm=llm, retriever=retriever, prompts=PromptLibrary(), settings=settings)
        request = ChatRequest(question="Who is entitled to annual leave?", mode="strict", language="en")

        async def collect() -> list[ChatEvent]:
            return [e async for e in pipeline.run(request)]

        events = asyncio.run(collect())
        return events[0].debug["answerability"], len(llm.calls)  # type: ignore[union-attr]

    decision, calls = turn(TunedRetriever(docs, [0.6, 0.5]), tuned_abstains)
    assert decision["answer"] is False and calls == 0
    assert decision["evidence"]["tuned_top"] == 0.55 and decision["evidence"]["dense_top"] == 0.6
    assert decision["evidence"]["cross_language"] == 1.0
    # no tuned rule set: the same turn is decided by the cross-language rule, and answers
    decision, calls = turn(TunedRetriever(docs, [0.6, 0.5]), None)
    assert decision["answer"] is True and calls == 1
    # a retriever that searched no tuned list: the tuned rule is not used, the usual rule decides
    decision, calls = turn(StaticRetriever(docs, [0.6, 0.5]), tuned_abstains)
    assert decision["answer"] is True and calls == 1
    # the shipped tuned rule reads the tuned cosine
    assert ABSTENTION_RULE_CROSS_LANGUAGE_TUNED["tuned_top"] > 0
    assert set(ABSTENTION_RULE_CROSS_LANGUAGE_TUNED) <= set(AbstentionRule.__slots__)


def _decision(
    retriever: StaticRetriever, settings: ChatSettings, question: str, language: Literal["he", "en"]
) -> dict[str, Any]:
    """The answerability decision of one strict-mode turn (``debug.answerability``)."""
    pipeline = ChatPipeline(
        llm=ScriptedLLM(), retriever=retriever, prompts=PromptLibrary(), settings=settings
    )
    request = ChatRequest(question=question, mode="strict", language=language)

    async def collect() -> list[ChatEvent]:
        return [e async for e in pipeline.run(request)]

    decision: dict[str, Any] = asyncio.run(collect())[0].debug["answerability"]  # type: ignore[union-attr]
    return decision


def _rules(
    answers: dict[str, float],
    *,
    memory: dict[str, float] | None,
    cross_language_memory: dict[str, float] | None = None,
) -> ChatSettings:
    """Chat settings whose every rule is ``answers`` but the two memory rules (the cross-language one
    ``answers`` too unless given), on any dense branches."""
    return ChatSettings(
        _env_file=None,
        abstention_rule=answers,
        abstention_rule_cross_language=answers,
        abstention_rule_cross_language_tuned=answers,
        abstention_rule_cross_language_memory=cross_language_memory or answers,
        abstention_rule_memory=memory,
        abstention_branches=[],
    )


def test_a_tuned_turn_the_memory_voted_on_is_decided_by_the_memory_rule() -> None:
    docs = [document(7, 0, "כל עובד זכאי לחופשה שנתית.", title="חופשה"), document(8, 0, "טקסט אחר")]
    tuned_answers = {"bias": -0.5, "tuned_top": 1.0, "threshold": 0.0}  # tuned cosine 0.55 >= 0.5
    # answers when the nearest remembered question is close (0.9) and of the first page
    memory_rule = {"bias": -1.5, "memory_best": 1.0, "memory_agree": 1.0, "threshold": 0.0}

    def decide(retriever: StaticRetriever, rule: dict[str, float] | None) -> dict[str, Any]:
        settings = ChatSettings(
            _env_file=None,
            abstention_rule_cross_language_tuned=tuned_answers,
            abstention_rule_cross_language_memory=rule,
            abstention_branches=[],
        )
        return _decision(retriever, settings, "Who is entitled to annual leave?", "en")

    agreeing = decide(RememberingRetriever(docs, [0.6, 0.5], page=7, cosine=0.9), memory_rule)
    assert agreeing["answer"] is True
    assert agreeing["evidence"]["memory_best"] == 0.9 and agreeing["evidence"]["memory_agree"] == 1.0
    # the nearest remembered question is of another page: the memory rule abstains
    other = decide(RememberingRetriever(docs, [0.6, 0.5], page=8, cosine=0.9), memory_rule)
    assert other["answer"] is False and other["evidence"]["memory_agree"] == 0.0
    # no memory rule: the tuned rule decides the same turn, and answers
    assert decide(RememberingRetriever(docs, [0.6, 0.5], page=8, cosine=0.9), None)["answer"] is True
    # a retriever without a memory: the tuned rule decides, and the memory features are 0
    plain = decide(TunedRetriever(docs, [0.6, 0.5]), memory_rule)
    assert plain["answer"] is True and plain["evidence"]["memory_best"] == 0.0
    # the shipped memory rule weighs both memory features up
    assert ABSTENTION_RULE_CROSS_LANGUAGE_MEMORY["memory_best"] > 0
    assert set(ABSTENTION_RULE_CROSS_LANGUAGE_MEMORY) <= set(AbstentionRule.__slots__)


def test_a_same_language_turn_the_memory_voted_on_is_decided_by_the_same_language_memory_rule() -> None:
    docs = [document(7, 0, "כל עובד זכאי לחופשה שנתית.", title="חופשה"), document(8, 0, "טקסט אחר")]
    answers = {"bias": -0.5, "dense_top": 1.0, "threshold": 0.0}  # cosine 0.6 >= 0.5
    # answers when the nearest remembered question is close (0.9) and of the first page
    memory_rule = {"bias": -1.5, "memory_best": 1.0, "memory_agree": 1.0, "threshold": 0.0}

    def decide(retriever: StaticRetriever, rule: dict[str, float] | None, question: str) -> dict[str, Any]:
        return _decision(retriever, _rules(answers, memory=rule), question, "he")

    hebrew = "מי זכאי לחופשה שנתית?"
    agreeing = decide(RememberingRetriever(docs, [0.6, 0.5], page=7, cosine=0.9), memory_rule, hebrew)
    assert agreeing["answer"] is True and agreeing["evidence"]["cross_language"] == 0.0
    # the nearest remembered question is of another page: the same-language memory rule abstains
    other = decide(RememberingRetriever(docs, [0.6, 0.5], page=8, cosine=0.9), memory_rule, hebrew)
    assert other["answer"] is False and other["evidence"]["memory_agree"] == 0.0
    # no such rule: the same-language rule decides the same turn, and answers
    assert decide(RememberingRetriever(docs, [0.6, 0.5], page=8, cosine=0.9), None, hebrew)["answer"] is True
    # a retriever without a memory: the same-language rule decides
    assert decide(StaticRetriever(docs, [0.6, 0.5]), memory_rule, hebrew)["answer"] is True
    # a cross-language turn is not the same-language memory rule's
    english = decide(
        RememberingRetriever(docs, [0.6, 0.5], page=8, cosine=0.9), memory_rule, "Who gets annual leave?"
    )
    assert english["answer"] is True and english["evidence"]["cross_language"] == 1.0
    # the shipped rule weighs the nearest remembered question's cosine up
    assert ChatSettings(_env_file=None).abstention_rule_memory == ABSTENTION_RULE_MEMORY
    assert ABSTENTION_RULE_MEMORY["memory_best"] > 0
    assert set(ABSTENTION_RULE_MEMORY) <= set(AbstentionRule.__slots__)


def test_memory_evidence_reads_the_nearest_remembered_question() -> None:
    debug = {
        "memory": {
            "neighbours": [
                {"question": "a", "pages": [3], "cosine": 0.8},
                {"question": "b", "pages": [4, 5], "cosine": 0.93},
            ]
        }
    }
    assert memory_evidence(debug, 5) == (0.93, 1.0, 0.0)
    assert memory_evidence(debug, 3) == (0.93, 0.0, 0.0)
    assert memory_evidence(debug, None) == (0.93, 0.0, 0.0)
    assert memory_evidence({"memory": None}, 3) == (0.0, 0.0, 0.0) and memory_evidence({}, 3) == (
        0.0,
        0.0,
        0.0,
    )
    assert remembered(debug) and not remembered({"memory": {"neighbours": []}})
    # the nearest question the wiki did not answer, when the memory holds such
    knowing = {"memory": {**debug["memory"], "unanswered": {"question": "c", "cosine": 0.91}}}
    assert memory_evidence(knowing, 5) == (0.93, 1.0, 0.91)
    assert knows_unanswered(knowing) and not knows_unanswered(debug) and not knows_unanswered({})


def test_a_memory_rule_that_weighs_unanswered_questions_applies_only_where_the_memory_holds_them() -> None:
    docs = [document(7, 0, "כל עובד זכאי לחופשה שנתית.", title="חופשה"), document(8, 0, "טקסט אחר")]
    answers = {"bias": -0.5, "dense_top": 1.0, "threshold": 0.0}  # cosine 0.6 >= 0.5
    # answers unless an unanswered question is nearer than the nearest answered one
    margin = {"memory_best": 1.0, "memory_unanswered": -1.0, "threshold": 0.0}
    settings = _rules(answers, memory=margin, cross_language_memory=margin)

    def decide(question: str, language: Literal["he", "en"], unanswered: float | None) -> dict[str, Any]:
        retriever = RememberingRetriever(docs, [0.6, 0.5], page=7, cosine=0.9, unanswered=unanswered)
        return _decision(retriever, settings, question, language)

    asked: list[tuple[str, Literal["he", "en"]]] = [
        ("מי זכאי לחופשה שנתית?", "he"),
        ("Who gets annual leave?", "en"),
    ]
    for question, language in asked:
        near = decide(question, language, 0.95)
        assert near["answer"] is False and near["evidence"]["memory_unanswered"] == 0.95
        assert decide(question, language, 0.8)["answer"] is True
        # a memory without unanswered questions: the rule without the memory decides (and answers)
        plain = decide(question, language, None)
        assert plain["answer"] is True and plain["evidence"]["memory_unanswered"] == 0.0


def test_a_rule_is_turned_off_by_null_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGBOT_CHAT_ABSTENTION_RULE_CROSS_LANGUAGE_MEMORY", "null")
    monkeypatch.setenv("RAGBOT_CHAT_ABSTENTION_RULE_CROSS_LANGUAGE_TUNED", "null")
    settings = ChatSettings(_env_file=None)
    assert settings.abstention_rule_cross_language_memory is None
    assert settings.abstention_rule_cross_language_tuned is None
    assert settings.abstention_rule_cross_language is not None  # not named: its default stays
