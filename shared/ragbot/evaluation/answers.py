"""``ragbot eval-answers``: how good the answers are, per answer mode, on questions with a gold page.

Each question (``samples/kolzchut/answer_questions.json``: Hebrew and English questions written for
the sample pages, each with the page that answers it) goes through the real chat pipeline once per
mode. Three figures per mode:

- ``gold_cited``: the share of answers whose citations include the gold page (an abstention cites
  nothing, so it counts as a miss);
- ``supported_sentences``: the share of answer sentences (over all answers) supported by a paragraph
  the answer cites: at least ``SUPPORT_THRESHOLD`` of the sentence's distinct words occur in one cited
  paragraph, compared through the BM25 analyzer (a Hebrew word matches with or without its one-letter
  prefix; one-letter words and the ``[n]`` marks left out), and the same paragraph holds at least
  ``ORDER_THRESHOLD`` of its neighbouring word pairs in order (``ragbot.text.support``). A sentence
  of an answer that cites nothing is unsupported;
- ``loop_rate``: the share of answers the loop detector ended (``finish_reason`` ``loop``) or whose
  stored text still ends in a loop.

These are over the questions with a gold page. The file also holds questions the pages do not answer
(``gold_page_id`` null): ``off_topic_abstained`` is the share of those the mode abstained on.

``run_answers`` builds what it needs: by default a temporary embedded store holding the sample pages,
indexed through the real indexing pipeline with the configured definition and models (what
``make run`` indexes), or a running retriever (``retriever_url``); the configured LLM for the modes
that call one.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import BaseModel, Field

from ragbot.chat.events import ChatRequest, DoneEvent, ErrorEvent, SourcesEvent
from ragbot.chat.loops import CUT_MARK, LoopDetector
from ragbot.chat.pipeline import ChatPipeline
from ragbot.chat.retriever import Retriever
from ragbot.chat.schemas import Mode
from ragbot.evaluation.split import Half, split_halves
from ragbot.schemas.retrieval import PageDocuments, RetrieveRequest, RetrieveResponse
from ragbot.schemas.similarity import SimilarityRequest, SimilarityResponse
from ragbot.text.support import CITATION_MARK, paragraph_tokens, supported_by

logger = logging.getLogger(__name__)

SUPPORT_THRESHOLD: Final = 0.6
ORDER_THRESHOLD: Final = 0.6
ROOT: Final = Path(__file__).resolve().parents[3]
DEFAULT_QUESTIONS: Final = ROOT / "samples" / "kolzchut" / "abstention_questions.json"
SAMPLE_QUESTIONS: Final = ROOT / "samples" / "kolzchut" / "answer_questions.json"
SAMPLE_PAGES: Final = ROOT / "samples" / "kolzchut" / "pages.jsonl"
DEFAULT_PAGES: Final = (
    ROOT / "samples" / "kolzchut" / "rights_pages.jsonl",
    ROOT / "samples" / "kolzchut" / "content_api_pages.jsonl",
)
# Sentences that are the site's furniture wherever they appear (the disclaimer, the page's own key-points
# and update lines): an answer quoting one quoted boilerplate. Kept apart from ragbot.chat.boilerplate so
# the figure does not grade the rule by itself.
FURNITURE_MARKERS: Final = (
    "המידע באתר הוא מידע כללי",
    "השימוש במידע המופיע באתר",
    "האתר פונה לנשים וגברים כאחד",
    "אין בסיוע משרד המשפטים",
    "information on this site is general",
    "this document covers topics related to",
    "last updated:",
)
BEFORE: Final = "_before"
# Today's behaviour before the abstention rule, the boilerplate filter and strict's sentence check, measured
# in the same run.
BEFORE_OVERRIDES: Final[Mapping[str, Any]] = {
    "abstention_enabled": False,
    "boilerplate_filter": False,
    "strict_support_min": 0.0,
}
_SENTENCE_END = re.compile(r"(?<=[.!?…׃؟])\s+")


class AnswerQuestion(BaseModel):
    """A question written for the sample pages and the page that answers it."""

    id: str
    language: Literal["he", "en"]
    question: str = Field(min_length=1)
    gold_page_id: int | None = Field(description="the page that answers; None: the pages do not, abstain")
    other_gold_page_ids: list[int] = Field(default_factory=list, description="other pages that answer too")
    scope: Literal["answerable", "same_field", "off_field"] | None = Field(
        default=None, description="unanswerable ones: from the pages' own field, or from elsewhere"
    )

    @property
    def gold_pages(self) -> set[int]:
        """Every page whose citation counts as citing the answer."""
        return set() if self.gold_page_id is None else {self.gold_page_id, *self.other_gold_page_ids}


class AnswerQuestions(BaseModel):
    """The committed question file."""

    about: str = ""
    questions: list[AnswerQuestion] = Field(min_length=1)


def load_questions(path: Path = DEFAULT_QUESTIONS) -> list[AnswerQuestion]:
    """The questions of a question file."""
    return AnswerQuestions.model_validate_json(path.read_text(encoding="utf-8")).questions


def half_of(questions: Sequence[AnswerQuestion], half: Half) -> list[AnswerQuestion]:
    """One half of the questions (``ragbot.evaluation.split``, stratified by scope and language)."""
    halves = split_halves(
        questions, key=lambda q: q.id, stratum=lambda q: (q.scope or str(q.gold_page_id is None), q.language)
    )
    return halves[half]


def answer_sentences(answer: str) -> list[str]:
    """The sentences of an answer, without its ``[n]`` marks or the cut mark; empty pieces left out."""
    text = answer[: -len(CUT_MARK)] if answer.endswith(CUT_MARK) else answer
    out: list[str] = []
    for line in text.splitlines():
        for piece in _SENTENCE_END.split(CITATION_MARK.sub(" ", line)):
            piece = " ".join(piece.split()).strip(" -*•")
            if paragraph_tokens(piece):
                out.append(piece)
    return out


def furniture(sentence: str) -> bool:
    """Whether an answer sentence is one of the site's furniture sentences (``FURNITURE_MARKERS``)."""
    folded = " ".join(sentence.split()).casefold()
    return any(marker in folded for marker in FURNITURE_MARKERS)


def supported(
    sentence: str,
    paragraphs: Sequence[str],
    *,
    threshold: float = SUPPORT_THRESHOLD,
    order: float = ORDER_THRESHOLD,
) -> bool:
    """Whether one paragraph holds at least ``threshold`` of the sentence's distinct words (a word
    counts when it, or its form without a Hebrew prefix letter, is among the paragraph's tokens) and
    ``order`` of its neighbouring word pairs in order."""
    return threshold > 0 and bool(supported_by(sentence, paragraphs, threshold, order))


class RecordingRetriever:
    """A ``Retriever`` that keeps the text of every paragraph it returned, to check what was cited."""

    def __init__(self, inner: Retriever, *, text_field: str = "content") -> None:
        self.inner = inner
        self.text_field = text_field
        self.texts: dict[str, str] = {}

    async def retrieve(self, request: RetrieveRequest) -> RetrieveResponse:
        """The inner retriever's answer, its paragraph texts kept by document id."""
        response = await self.inner.retrieve(request)
        for doc in response.documents:
            fields = doc.model_dump(by_alias=True)
            self.texts[str(fields.get("_id") or "")] = str(fields.get(self.text_field) or "")
        return response

    async def similarity(self, request: SimilarityRequest) -> SimilarityResponse:
        """The inner retriever's scores."""
        return await self.inner.similarity(request)

    async def page(self, page_id: int) -> PageDocuments:
        """The inner retriever's page."""
        return await self.inner.page(page_id)

    async def model_names(self) -> list[str]:
        """The inner retriever's models."""
        return await self.inner.model_names()

    async def ping(self) -> bool:
        """The inner retriever's health."""
        return await self.inner.ping()

    async def ping_store(self) -> bool:
        """The inner retriever's store health."""
        return await self.inner.ping_store()

    async def close(self) -> None:
        """Close the inner retriever."""
        await self.inner.close()


@dataclass(slots=True)
class AnswerRow:
    """One question answered in one mode, and how it scored."""

    id: str
    mode: str
    question: str
    gold_page_id: int | None
    answer: str
    cited_page_ids: list[int]
    gold_cited: bool
    sentences: int
    supported: int
    looped: bool
    abstained: bool
    error: str | None
    seconds: float
    scope: str | None = None
    boilerplate: bool = False
    evidence: dict[str, float] = field(default_factory=dict)
    # what decided an abstention ("rule", "gate", "answer_kind"), and the gate's best probability
    reason: str | None = None
    gate: float | None = None


@dataclass(slots=True)
class ModeFigures:
    """The figures of one mode and what they were computed over."""

    gold_cited: float
    supported_sentences: float
    loop_rate: float
    abstained: float
    off_topic_abstained: float
    boilerplate_quoted: int
    answers: int
    off_topic: int
    sentences: int
    seconds_per_answer: float
    rows: list[AnswerRow] = field(default_factory=list)

    def summary(self) -> dict[str, float]:
        """The figures without the rows."""
        return {
            "gold_cited": self.gold_cited,
            "supported_sentences": self.supported_sentences,
            "loop_rate": self.loop_rate,
            "abstained": self.abstained,
            "off_topic_abstained": self.off_topic_abstained,
            "boilerplate_quoted": float(self.boilerplate_quoted),
            "answers": float(self.answers),
            "off_topic": float(self.off_topic),
            "sentences": float(self.sentences),
            "seconds_per_answer": self.seconds_per_answer,
        }


def figures(rows: Sequence[AnswerRow]) -> ModeFigures:
    """The mode's figures: gold_cited, supported_sentences, loop_rate and abstained over the questions
    with a gold page; off_topic_abstained over those without (the share that abstained);
    boilerplate_quoted: answers (all of them) that quoted a furniture sentence."""
    gold = [r for r in rows if r.gold_page_id is not None]
    off = [r for r in rows if r.gold_page_id is None]
    n = max(len(gold), 1)
    sentences = sum(r.sentences for r in gold)
    return ModeFigures(
        gold_cited=round(sum(r.gold_cited for r in gold) / n, 4),
        supported_sentences=round(sum(r.supported for r in gold) / sentences, 4) if sentences else 0.0,
        loop_rate=round(sum(r.looped for r in gold) / n, 4),
        abstained=round(sum(r.abstained for r in gold) / n, 4),
        off_topic_abstained=round(sum(r.abstained for r in off) / len(off), 4) if off else 0.0,
        boilerplate_quoted=sum(r.boilerplate for r in rows),
        answers=len(gold),
        off_topic=len(off),
        sentences=sentences,
        seconds_per_answer=round(sum(r.seconds for r in rows) / max(len(rows), 1), 3),
        rows=list(rows),
    )


async def answer_one(
    *, pipeline: ChatPipeline, recorder: RecordingRetriever, question: AnswerQuestion, mode: Mode
) -> AnswerRow:
    """Run one question through the pipeline and score its answer."""
    started = time.perf_counter()
    request = ChatRequest(question=question.question, mode=mode, language=question.language, channel="eval")
    done: DoneEvent | None = None
    error: str | None = None
    decision: dict[str, Any] = {}
    async for event in pipeline.run(request):
        if isinstance(event, DoneEvent):
            done = event
        elif isinstance(event, ErrorEvent):
            error = event.message
        elif isinstance(event, SourcesEvent):
            decision = dict(event.debug.get("answerability") or {})
    seconds = time.perf_counter() - started
    answer = done.answer if done else ""
    cited = done.citations if done else []
    paragraphs = [recorder.texts.get(s.doc_id, "") for s in cited]
    sentences = [] if done is None or done.abstained else answer_sentences(answer)
    detector = LoopDetector()
    detector.feed(answer)
    cited_pages = list(dict.fromkeys(s.page_id for s in cited))
    return AnswerRow(
        id=question.id,
        mode=mode,
        question=question.question,
        gold_page_id=question.gold_page_id,
        answer=answer,
        cited_page_ids=cited_pages,
        gold_cited=bool(question.gold_pages & set(cited_pages)),
        sentences=len(sentences),
        supported=sum(supported(s, paragraphs) for s in sentences),
        looped=bool(done and done.finish_reason == "loop") or detector.looping,
        abstained=bool(done and done.abstained),
        error=error,
        seconds=round(seconds, 3),
        scope=question.scope,
        boilerplate=any(furniture(s) for s in sentences),
        evidence=dict(decision.get("evidence") or {}),
        reason=decision.get("reason"),
        gate=decision.get("gate"),
    )


async def evaluate(
    *,
    pipeline: ChatPipeline,
    recorder: RecordingRetriever,
    questions: Sequence[AnswerQuestion],
    modes: Sequence[Mode],
) -> dict[str, ModeFigures]:
    """Every question in every mode, one at a time; the figures per mode."""
    out: dict[str, ModeFigures] = {}
    for mode in modes:
        rows: list[AnswerRow] = []
        for q in questions:
            row = await answer_one(pipeline=pipeline, recorder=recorder, question=q, mode=mode)
            logger.info(
                "answered %s in %s mode in %.1f s: gold cited %s, %d/%d sentences supported, loop %s%s",
                row.id,
                mode,
                row.seconds,
                row.gold_cited,
                row.supported,
                row.sentences,
                row.looped,
                f", error: {row.error}" if row.error else "",
            )
            rows.append(row)
        out[mode] = figures(rows)
    return out


@dataclass(slots=True)
class AnswersRun:
    """What ``run_answers`` measured and with what."""

    modes: dict[str, ModeFigures]
    questions: int
    llm: str
    retrieval: str
    index_seconds: float
    seconds: float

    def report(self, *, rows: bool = True) -> dict[str, Any]:
        """A JSON-ready report."""
        body: dict[str, Any] = {
            "questions": self.questions,
            "llm": self.llm,
            "retrieval": self.retrieval,
            "support_threshold": SUPPORT_THRESHOLD,
            "order_threshold": ORDER_THRESHOLD,
            "index_seconds": round(self.index_seconds, 2),
            "seconds": round(self.seconds, 2),
            "modes": {m: f.summary() for m, f in self.modes.items()},
        }
        if rows:
            body["answers"] = [_row_json(r) for f in self.modes.values() for r in f.rows]
        return body


def _row_json(row: AnswerRow) -> dict[str, Any]:
    return {k: getattr(row, k) for k in AnswerRow.__slots__}


async def run_answers(
    *,
    questions: Sequence[AnswerQuestion],
    modes: Sequence[Mode],
    chat_overrides: Mapping[str, Any] | None = None,
    retriever_url: str | None = None,
    pages_paths: Sequence[Path] = DEFAULT_PAGES,
    work_dir: Path | None = None,
    before: bool = False,
    retriever_overrides: Mapping[str, Any] | None = None,
    compare: Mapping[str, tuple[Mapping[str, Any], Mapping[str, Any]]] | None = None,
) -> AnswersRun:
    """Build the retrieval (a fresh store of the sample pages, or a running retriever), the LLM when a
    mode needs one, and the chat pipeline from settings; evaluate every mode; ``before``: again without
    the rule and the boilerplate filter (``<mode>_before``); ``compare``: again per suffix with its chat
    (on ``chat_overrides``) and retriever (on the configured settings) overrides, over the same index."""
    from ragbot.chat.retriever import HttpRetriever
    from ragbot.evaluation.sample_index import SampleIndex
    from ragbot.llms import build_llm
    from ragbot.prompts import PromptLibrary
    from ragbot.settings import get_chat_settings

    started = time.perf_counter()
    base = get_chat_settings()
    settings = base.model_copy(update=dict(chat_overrides or {}))
    needs_llm = any(m != "quote" for m in modes)
    llm = build_llm(settings=settings)
    if needs_llm:
        llm.warm_up()
    index_seconds = 0.0
    index: SampleIndex | None = None
    try:
        if retriever_url:
            inner: Retriever = HttpRetriever(base_url=retriever_url, timeout_s=settings.retriever_timeout_s)
            retrieval = f"retriever at {retriever_url}"
        else:
            index = await SampleIndex.build(pages_paths, work_dir)
            index_seconds = index.index_seconds
            inner = await index.engine_with(retriever_overrides or {})
            models = list(index.definition.model_names)
            retrieval = f"{index.pages} sample pages, models {models}, embedded store"
        recorder = RecordingRetriever(inner, text_field=settings.document_text_field)
        prompts = PromptLibrary(settings.prompts_dir)
        pipeline = ChatPipeline(llm=llm, retriever=recorder, prompts=prompts, settings=settings)
        results = await evaluate(pipeline=pipeline, recorder=recorder, questions=questions, modes=modes)
        earlier_ones = {BEFORE: (BEFORE_OVERRIDES, retriever_overrides or {})} if before else {}
        for suffix, (chat_changes, retriever_changes) in {**earlier_ones, **(compare or {})}.items():
            if retriever_url and retriever_changes:
                raise ValueError("retriever overrides need the embedded store, not a running retriever")
            other = RecordingRetriever(
                inner if index is None else await index.engine_with(retriever_changes),
                text_field=settings.document_text_field,
            )
            old = base.model_copy(update={**dict(chat_overrides or {}), **dict(chat_changes)})
            pipeline = ChatPipeline(llm=llm, retriever=other, prompts=prompts, settings=old)
            earlier = await evaluate(pipeline=pipeline, recorder=other, questions=questions, modes=modes)
            results.update({f"{mode}{suffix}": fig for mode, fig in earlier.items()})
        await recorder.close()
    finally:
        if index is not None:
            await index.close()
        await llm.close()
    return AnswersRun(
        modes=results,
        questions=len(questions),
        llm=f"{llm.backend}:{llm.model}" if needs_llm else "none",
        retrieval=retrieval,
        index_seconds=index_seconds,
        seconds=time.perf_counter() - started,
    )
