"""Strict mode's sentence check: only the LLM's sentences a source holds are streamed, citing that source."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from prometheus_client import CollectorRegistry
from support.chat_fakes import ScriptedLLM, StaticRetriever, document

from ragbot.chat.events import ChatEvent, ChatRequest, DoneEvent, TokenEvent
from ragbot.chat.grounding import SentenceGate
from ragbot.chat.loops import CUT_MARK
from ragbot.chat.metrics import chat_metrics
from ragbot.chat.pipeline import ChatPipeline
from ragbot.ports import ChatMessage
from ragbot.prompts import PromptLibrary
from ragbot.settings import ChatSettings
from ragbot.text.support import best_support

SOURCES = {
    1: "The benefit is paid every month to parents of a child under 18.",
    2: "Income tax is withheld by the employer from each salary payment.",
}


def stream(gate: SentenceGate, text: str) -> list[str]:
    """What the gate lets through when ``text`` arrives word by word, as an LLM streams it."""
    words = text.split(" ")
    out: list[str] = []
    for i, word in enumerate(words):
        out += gate.passed(word if i == 0 else " " + word)
    return out + gate.passed(None)


def test_a_sentence_a_source_holds_passes_with_its_citation_and_one_in_no_source_is_dropped() -> None:
    gate = SentenceGate(SOURCES, 0.6)
    sent = stream(gate, "The benefit is paid every month [1]. Everyone also gets a free car [2].")
    assert sent == ["The benefit is paid every month. [1]"]
    assert [c.kept for c in gate.checked] == [True, False]
    assert gate.checked[1].sentence == "Everyone also gets a free car [2]."


def test_a_sentence_is_sent_only_once_the_next_one_starts_so_marks_after_its_end_stay_with_it() -> None:
    gate = SentenceGate(SOURCES, 0.6)
    assert gate.passed("Tax is withheld by the employer.") == []
    assert gate.passed(" [2]") == []  # the marks after the full stop may still belong to it
    assert gate.passed(" The") == ["Tax is withheld by the employer. [2]"]
    assert gate.passed(" mayor pays") == []
    assert gate.passed(None) == []  # "The mayor pays" is in no source


def test_an_uncited_or_wrongly_cited_sentence_cites_the_source_that_holds_it() -> None:
    gate = SentenceGate(SOURCES, 0.6)
    sent = stream(
        gate, "Income tax is withheld from each salary payment. The benefit is paid to parents [2]."
    )
    assert sent == [
        "Income tax is withheld from each salary payment. [2]",
        " The benefit is paid to parents. [1]",
    ]


def test_line_breaks_end_sentences_and_are_kept() -> None:
    gate = SentenceGate(SOURCES, 0.6)
    assert stream(gate, "- The benefit is paid every month\n- Income tax is withheld by the employer") == [
        "- The benefit is paid every month [1]",
        "\n- Income tax is withheld by the employer [2]",
    ]


def test_hebrew_words_count_with_or_without_a_prefix_letter() -> None:
    gate = SentenceGate({1: "הקצבה משולמת להורים של ילד נכה בכל חודש."}, 0.6)
    assert stream(gate, "ההורים מקבלים את הקצבה בכל חודש.") == ["ההורים מקבלים את הקצבה בכל חודש. [1]"]
    assert best_support("ההורים מקבלים את הקצבה בכל חודש.", ["הקצבה משולמת להורים"]) == (2 / 6, 0)


def test_the_share_is_a_setting() -> None:
    text = "The benefit is paid by the mayor to everyone in the country."  # 5 of its 10 words in 1
    assert stream(SentenceGate(SOURCES, 0.6), text) == []
    assert stream(SentenceGate(SOURCES, 0.5), text) == [f"{text} [1]"]


REFUND = (
    "עצמאים ואחרים שמחויבים להגיש דין וחשבון על הוצאות ימלאו טופס 1301 ויצרפו אליו את האישורים "
    'המתאימים. יש לצרף טופס 106 (שניתן לעובדים מהמעסיק). למידע נוסף ראו הגשת דו"ח שנתי למס הכנסה.'
)
# What SmolLM2-135M wrote in strict mode in `make run` for "is a student's scholarship exempt from
# income tax?": most of its words are in the refund page's paragraph, in another order.
SHUFFLED = "עצמאים ואחרים שמחויבים להגיש דין יש לבקשת האם רק מסטודנט, נוסף ראו הגשת דו."


def test_a_shuffle_of_a_source_s_words_is_dropped_but_the_source_s_own_order_passes() -> None:
    assert best_support(SHUFFLED, [REFUND])[0] >= 0.6  # the word overlap alone would pass it
    assert stream(SentenceGate({5: REFUND}, 0.6, 0.6), SHUFFLED) == []
    assert stream(SentenceGate({5: REFUND}, 0.6, 0.0), SHUFFLED) == [f"{SHUFFLED} [5]"]
    paraphrase = "עצמאים שמחויבים להגיש דין וחשבון על הוצאות ימלאו את טופס 1301."
    assert stream(SentenceGate({5: REFUND}, 0.6, 0.6), paraphrase) == [f"{paraphrase} [5]"]


DOCS = [
    document(1, 0, "The benefit is paid every month to parents.", title="Benefit"),
    document(2, 0, "Income tax is withheld by the employer.", title="Taxes"),
]


def pipeline_with(answer: str, **settings: Any) -> tuple[ChatPipeline, CollectorRegistry]:
    registry = CollectorRegistry()

    def script(_: Sequence[ChatMessage]) -> str:
        return answer

    pipeline = ChatPipeline(
        llm=ScriptedLLM(script),
        retriever=StaticRetriever(DOCS),
        prompts=PromptLibrary(),
        settings=ChatSettings(**{"abstention_enabled": False, **settings}),
        metrics=chat_metrics(registry),
    )
    return pipeline, registry


async def turn(pipeline: ChatPipeline, mode: str = "strict") -> list[ChatEvent]:
    request = ChatRequest(question="How is the benefit paid?", mode=mode, language="en")  # type: ignore[arg-type]
    return [event async for event in pipeline.run(request)]


def count(registry: CollectorRegistry, outcome: str) -> float:
    return registry.get_sample_value("ragbot_chat_strict_sentences_total", {"outcome": outcome}) or 0.0


async def test_strict_streams_only_the_sentences_a_source_holds_and_counts_the_rest() -> None:
    pipeline, registry = pipeline_with(
        "The benefit is paid every month [1]. You can also ask the mayor for a bonus [1]."
    )
    events = await turn(pipeline)
    tokens = "".join(e.text for e in events if isinstance(e, TokenEvent))
    done = events[-1]
    assert isinstance(done, DoneEvent)
    assert tokens == done.answer == "The benefit is paid every month. [1]"  # as streamed, as stored
    assert [s.page_id for s in done.citations] == [1]
    assert (count(registry, "kept"), count(registry, "dropped")) == (1.0, 1.0)


async def test_when_no_sentence_of_the_model_is_in_a_source_strict_quotes_the_sources() -> None:
    pipeline, registry = pipeline_with("The document says many things about the topic.", quote_min_score=0.3)
    events = await turn(pipeline)
    done = events[-1]
    assert isinstance(done, DoneEvent) and not done.abstained
    assert done.citations and done.answer.endswith(f"[{done.citations[0].index}]")  # a quoted sentence
    assert done.answer[: -len(" [1]")] in {d["content"] for d in DOCS}
    assert "many things" not in "".join(e.text for e in events if isinstance(e, TokenEvent))
    assert count(registry, "dropped") == 1.0


async def test_strict_scores_the_sources_sentences_once_for_the_decision_and_the_fallback() -> None:
    pipeline, _ = pipeline_with(
        "The document says many things about the topic.",
        quote_min_score=0.3,
        abstention_branches=["content_m_vectors"],  # the fake's dense branch: the decision reads it
        abstention_rule={"bias": 1.0, "threshold": 0.0},
    )
    events = await turn(pipeline)
    done = events[-1]
    assert isinstance(done, DoneEvent) and not done.abstained and done.citations  # the quote fallback
    retriever = pipeline.retriever
    assert isinstance(retriever, StaticRetriever)
    assert len(retriever.similarity_requests) == 1


async def test_with_the_check_off_or_in_grounded_mode_the_model_s_text_is_sent_as_written() -> None:
    answer = "The document says many things about the topic."
    for pipeline, mode in (
        (pipeline_with(answer, strict_support_min=0)[0], "strict"),
        (pipeline_with(answer)[0], "grounded"),
    ):
        done = (await turn(pipeline, mode))[-1]
        assert isinstance(done, DoneEvent) and done.answer == answer


async def test_the_unfinished_sentence_the_token_cap_cut_is_not_sent() -> None:
    # ten words: the cap of nine cuts the second sentence after "paid", whose words are all in source 1
    pipeline, registry = pipeline_with(
        "The benefit is paid every month [1]. The benefit is paid monthly.", llm_max_tokens=9
    )
    events = await turn(pipeline)
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.finish_reason == "length"
    streamed = "".join(e.text for e in events if isinstance(e, TokenEvent))
    assert streamed == done.answer == f"The benefit is paid every month. [1]{CUT_MARK}"
    assert (count(registry, "kept"), count(registry, "dropped")) == (1.0, 1.0)


async def test_strict_drops_a_shuffled_sentence_unless_the_order_check_is_off() -> None:
    shuffled = "The employer is paid every month by income tax."  # every word in a source, in no order
    pipeline, registry = pipeline_with(f"{shuffled} [2]")
    done = (await turn(pipeline))[-1]
    assert isinstance(done, DoneEvent)
    assert shuffled not in done.answer and count(registry, "dropped") == 1
    pipeline, registry = pipeline_with(f"{shuffled} [2]", strict_order_min=0.0)
    done = (await turn(pipeline))[-1]
    assert isinstance(done, DoneEvent)
    assert done.answer.startswith(shuffled) and count(registry, "kept") == 1
