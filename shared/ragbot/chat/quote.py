"""The ``quote`` answer mode: the retrieved sentences that answer the question, each with its ``[n]``.

No LLM is called. The numbered sources of the turn (already ranked and filtered by the retriever) are
cut into sentences (``split_sentences``: lines and list items first, then ``.`` ``!`` ``?`` and the
Hebrew/Arabic question marks followed by a space, the same in Hebrew and English); each sentence is
scored against the question by the retriever's own loaded model (``POST /v1/similarity``: the query
as a query, the sentence as a passage, cosine), so chat needs no model and a question in English still
finds a Hebrew sentence. Two corrections are added to the cosine: ``lexical_weight`` times the share of
the question's analyzer tokens (the BM25 analyzer, Hebrew prefixes included) the sentence holds, and
``cross_language_bonus`` when the sentence is not in the question's language (e5-small's cosines
across Hebrew and English run lower than within one language). When the retriever cannot score, the
token share alone stands in, with its own floor, and the debug says so.

``choose_sentences`` keeps at most ``max_sentences`` whose score is at least ``min_score`` and within
``margin`` of the best, then ``compose`` writes them grouped by source in rank order, in document order
inside a paragraph, each followed by its source's ``[n]``. Nothing at ``min_score``: no sentence is
quoted and the turn abstains with the fixed "no relevant documents" answer.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ragbot.chat.answer_kind import Kind, asked, states
from ragbot.chat.boilerplate import LIST_ITEM_MARK, MARKDOWN_LINK, PAREN_TARGET, strip_furniture
from ragbot.chat.retriever import Retriever
from ragbot.errors import DependencyUnavailable, ValidationFailed
from ragbot.prompts import PromptDocument, detect_language
from ragbot.schemas.similarity import MAX_SIMILARITY_TEXT_CHARS, MAX_SIMILARITY_TEXTS, SimilarityRequest
from ragbot.settings import ChatSettings
from ragbot.text import analyze
from ragbot.text.support import CITATION_MARK, paragraph_tokens, sentence_words, support_share

__all__ = [
    "QuoteOptions",
    "Scored",
    "Sentence",
    "TurnSentences",
    "choose_sentences",
    "compose",
    "repeats",
    "score",
    "split_sentences",
    "stating",
]

_HEADING = re.compile(r"^\s*#{1,6}\s")
_RULE = re.compile(r"^\s*[-=_*|:\s]{3,}$")
# A sentence ends at . ! ? … (or the Hebrew sof pasuq, the Arabic question mark) before a space, unless
# the period closes a one- or two-letter Latin abbreviation ("e.g.", "Dr.") or a lone digit ("1.").
_SENTENCE_END = re.compile(r"(?<=[.!?…׃؟])(?<!\b[A-Za-z]\.)(?<!\b[A-Za-z]{2}\.)(?<!\b\d\.)\s+")
_LINK_TAIL = re.compile(r"\]\((?:\\.|[^()\\\n]|\([^()\n]*\))*\)")
_URL = re.compile(r"https?://|www\.", re.IGNORECASE)
_EMPHASIS = re.compile(r"\*\*|__|`")
MIN_WORDS = 4
# Two sentences with this share of the shorter one's words in common say the same thing: one is quoted.
REPEAT_SHARE = 0.9


@dataclass(frozen=True, slots=True)
class QuoteOptions:
    """How many sentences, how good the best must be, how far below it the others may be."""

    max_sentences: int = 3
    min_score: float = 0.8
    margin: float = 0.04
    model: str | None = None
    lexical_min_score: float = 0.5
    lexical_weight: float = 0.0
    cross_language_bonus: float = 0.0
    kind_margin: float = -1.0

    @classmethod
    def from_settings(cls, s: ChatSettings) -> QuoteOptions:
        """The quote mode's thresholds from the chat settings."""
        return cls(
            max_sentences=s.quote_max_sentences,
            min_score=s.quote_min_score,
            margin=s.quote_margin,
            model=s.quote_model or None,
            lexical_min_score=s.quote_lexical_min_score,
            lexical_weight=s.quote_lexical_weight,
            cross_language_bonus=s.quote_cross_language_bonus,
            kind_margin=s.answer_kind_margin if s.abstention_enabled else -1.0,
        )


@dataclass(frozen=True, slots=True)
class Sentence:
    """A sentence of source ``number``, ``position`` in its paragraph."""

    number: int
    position: int
    text: str


@dataclass(frozen=True, slots=True)
class Scored:
    """The sentences, their scores and how they were scored."""

    sentences: list[Sentence]
    scores: list[float]
    scorer: str
    error: str | None = None


def clean_line(line: str) -> str:
    """A line as a reader sees it: link text without targets (markdown's, or the content API's
    ``text (url)``), no bullets, emphasis or stray ``[n]``."""
    line = MARKDOWN_LINK.sub(r"\1", line)
    line = PAREN_TARGET.sub("", line)
    line = CITATION_MARK.sub("", line)  # a paragraph's own "[2]" would read as one of our citations
    line = _LINK_TAIL.sub("", line).replace("[", "")  # a link the paragraph split cut in two
    line = LIST_ITEM_MARK.sub("", line)
    line = _EMPHASIS.sub("", line)
    return " ".join(line.split())


def split_sentences(text: str, *, title: str = "") -> list[str]:
    """The sentences of a paragraph in order: lines and list items, then sentence ends; headings, rules,
    fragments under ``MIN_WORDS`` words, lead-ins ending in ``:``, and page furniture (a line holding a
    URL or the page's whole title, such as "This document covers topics related to: <title>") are
    left out."""
    out: list[str] = []
    title = " ".join(title.split()).casefold()
    for raw in MARKDOWN_LINK.sub(r"\1", text).splitlines():
        if _HEADING.match(raw) or _RULE.match(raw):
            continue
        line = clean_line(raw)
        for piece in _SENTENCE_END.split(line):
            piece = piece.strip()
            if _URL.search(piece) or (len(title) > 3 and title in piece.casefold()):
                continue
            if piece.endswith(":"):  # a list's lead-in ("to apply by post:") says nothing alone
                continue
            if len(piece.split()) >= MIN_WORDS:
                out.append(piece[:MAX_SIMILARITY_TEXT_CHARS])
    return out


def sentences_of(documents: Sequence[PromptDocument]) -> list[Sentence]:
    """Every sentence of the numbered documents, in rank then document order, capped at what the
    retriever scores in one call (and without repeats: the first source that says it keeps it); the
    site's furniture lines (``ragbot.chat.boilerplate``) are never among them."""
    seen: set[str] = set()
    out: list[Sentence] = []
    for doc in documents:
        for position, text in enumerate(split_sentences(strip_furniture(doc.text), title=doc.title)):
            key = text.casefold()
            if key in seen:
                continue
            seen.add(key)
            out.append(Sentence(doc.number, position, text))
            if len(out) == MAX_SIMILARITY_TEXTS:
                return out
    return out


def overlap(question: str, sentence: str) -> float:
    """The share of the question's distinct analyzer tokens that the sentence holds (0..1)."""
    wanted = {t for t in analyze(question) if len(t) > 1}
    if not wanted:
        return 0.0
    return len(wanted & set(analyze(sentence))) / len(wanted)


async def score(
    *, retriever: Retriever, question: str, sentences: Sequence[Sentence], options: QuoteOptions
) -> Scored:
    """Cosines from the retriever's model; token overlap when the retriever cannot score."""
    if not sentences:
        return Scored([], [], "none")
    try:
        response = await retriever.similarity(
            SimilarityRequest(query=question, texts=[s.text for s in sentences], model=options.model)
        )
    except (DependencyUnavailable, ValidationFailed) as exc:
        lexical = [overlap(question, s.text) for s in sentences]
        return Scored(list(sentences), lexical, "overlap", str(exc))
    weight, language = options.lexical_weight, detect_language(question)
    scores = [
        c
        + (weight * overlap(question, s.text) if weight else 0.0)
        + (options.cross_language_bonus if detect_language(s.text) != language else 0.0)
        for c, s in zip(response.scores, sentences, strict=True)
    ]
    return Scored(list(sentences), scores, f"similarity:{response.model}")


def repeats(a: str, b: str) -> bool:
    """Whether one sentence says the other again: the longer holds ``REPEAT_SHARE`` of the shorter's
    words (``ragbot.text.support``: a cut-short copy, such as a page's summary repeating its own
    sentence, or the same words again)."""
    shorter, longer = sorted((a, b), key=lambda text: len(text.split()))
    return support_share(sentence_words(shorter), paragraph_tokens(longer)) >= REPEAT_SHARE


def choose_sentences(scored: Scored, options: QuoteOptions, kind: Kind | None = None) -> list[Sentence]:
    """The best sentences (at most ``max_sentences``, at least the floor, within ``margin`` of the
    best), in rank order of their sources and document order inside each; empty when none passes.
    For a question that asks ``kind`` of fact, only sentences that state one (``stating``)."""
    if not scored.scores:
        return []
    floor = options.lexical_min_score if scored.scorer == "overlap" else options.min_score
    candidates = stating(scored, options, kind)
    if not candidates:
        return []
    best = max(scored.scores[i] for i in candidates)
    if best < floor:
        return []
    cut = max(floor, best - options.margin)
    ranked = sorted(candidates, key=lambda i: -scored.scores[i])
    kept: list[Sentence] = []
    for i in ranked:
        if len(kept) == options.max_sentences or scored.scores[i] < cut:
            break
        if not any(repeats(scored.sentences[i].text, k.text) for k in kept):
            kept.append(scored.sentences[i])
    order = {n: i for i, n in enumerate(dict.fromkeys(s.number for s in scored.sentences))}
    return sorted(kept, key=lambda s: (order[s.number], s.position))


def stating(scored: Scored, options: QuoteOptions, kind: Kind | None) -> list[int]:
    """The sentences that may answer: all of them, or for a question asking ``kind`` (with the check
    on: ``kind_margin`` >= 0) those that state such a fact and score within ``kind_margin`` of the
    best sentence (``ragbot.chat.answer_kind``)."""
    every = list(range(len(scored.sentences)))
    if kind is None or options.kind_margin < 0 or not scored.scores:
        return every
    best = max(scored.scores)
    return [
        i
        for i in every
        if scored.scores[i] >= best - options.kind_margin and states(kind, scored.sentences[i].text)
    ]


def compose(chosen: Sequence[Sentence]) -> list[str]:
    """The answer's pieces, as streamed: each sentence with its ``[n]``; a new source starts a paragraph."""
    pieces: list[str] = []
    previous: int | None = None
    for sentence in chosen:
        lead = "" if previous is None else (" " if sentence.number == previous else "\n\n")
        pieces.append(f"{lead}{sentence.text} [{sentence.number}]")
        previous = sentence.number
    return pieces


@dataclass(slots=True)
class TurnSentences:
    """A turn's source sentences, scored against the question at most once (one ``POST
    /v1/similarity``) and shared by quote mode, the answerability decision and strict's fallback."""

    retriever: Retriever
    question: str
    documents: Sequence[PromptDocument]
    options: QuoteOptions
    _scored: Scored | None = field(default=None, init=False)

    async def scored(self) -> Scored:
        """The sentences and their scores (scored on the first call only)."""
        if self._scored is None:
            self._scored = await score(
                retriever=self.retriever,
                question=self.question,
                sentences=sentences_of(self.documents),
                options=self.options,
            )
        return self._scored

    async def best_score(self) -> float | None:
        """The best sentence's score by the retriever's model; None when only token overlap scored."""
        scored = await self.scored()
        return max(scored.scores) if scored.scores and scored.scorer != "overlap" else None

    @property
    def kind(self) -> Kind | None:
        """The kind of fact the question asks for (``ragbot.chat.answer_kind``), if one."""
        return asked(self.question)

    async def states_kind(self) -> bool:
        """False when the question asks an amount or a duration and no sentence close enough to the
        best states one (``stating``); True otherwise, and when the check is off."""
        scored = await self.scored()
        return not scored.sentences or bool(stating(scored, self.options, self.kind))

    async def quote(self) -> tuple[list[Sentence], dict[str, Any]]:
        """The sentences to quote, and how they scored (the debug view)."""
        scored = await self.scored()
        chosen = choose_sentences(scored, self.options, self.kind)
        position = {id(s): i for i, s in enumerate(scored.sentences)}
        return chosen, {
            "scorer": scored.scorer,
            "error": scored.error,
            "sentences": len(scored.sentences),
            "best": round(max(scored.scores), 6) if scored.scores else None,
            "kind": self.kind,
            "chosen": [
                {"n": s.number, "position": s.position, "score": round(scored.scores[position[id(s)]], 6)}
                for s in chosen
            ],
        }
