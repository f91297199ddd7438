"""Whether the retrieved paragraphs answer the question at all, decided before quoting or generating.

A paragraph on the right topic is not an answer: "who is entitled to unemployment benefits?" retrieves
the unemployment page, but "what is the hourly minimum wage?" retrieves it too. ``evidence`` reads what
the turn already has, with no extra model call:

- ``dense_top``: the best dense cosine of any candidate (absolute, as before);
- ``dense_gap``: how far the best page's best cosine stands above the next page's (relative: a question a
  page answers singles it out; an unanswerable one lands among several pages about as close);
- ``bm25_gap``: the same for BM25, as a share of the best BM25 score;
- ``agree``: 1 when BM25's best page is dense's best page (0 when BM25 found nothing);
- ``coverage``: the share of the question's key terms (analyzer tokens of three letters or more,
  function words left out) that the best few paragraphs hold; a question whose key terms are missing
  from every paragraph it found asks about something the pages do not say;
- ``sentence_top``: the best sentence score of the quote mode's scorer (the retriever's model, question
  against each sentence of the sources, ``ragbot.chat.quote.score``);
- ``cross_language``: 1 when the question is not in the best paragraph's language (coverage then says
  nothing, and cosines across languages run lower);
- ``tuned_top``, ``tuned_gap``: ``dense_top`` and ``dense_gap`` read on the lists the retriever searched
  with a tuned query encoder (``ragbot.retrieval.tuned``; 0 when it searched none). The other dense
  features always read the untuned lists.
- ``memory_best``, ``memory_agree``: the cosine of the question memory's nearest remembered question
  (``ragbot.retrieval.memory``, the retriever's ``debug.memory``), and 1 when that question's page is
  the retrieved first page; both 0 when the retriever has no memory.
- ``memory_unanswered``: the cosine of the nearest remembered question the wiki did not answer (the
  memory's ``unanswered``; 0 when it holds none). Unanswerable questions from the pages' field cluster
  by topic: a new one lands nearer an earlier unanswered question than an answerable one does.
- ``gate``: the learned gate's probability that the best numbered paragraph answers
  (``ragbot.chat.pair_gate``), read only for a rule that weighs it; 0 otherwise.

``decide`` combines them linearly (``AbstentionRule``: weights fitted on the tuning half of
``samples/kolzchut/abstention_questions.json`` by ``bench/answers/abstention.py --fit``, see
docs/benchmarks.md)
and abstains when the score is under the rule's threshold. A question in another language than its
best paragraph gets its own rule when one is given (``rule_for``): across languages the same scores
mean other things (e5's cosines run lower, BM25 and key terms match nothing, and the best page's dense
gap even ranks the other way), so one line fitted on both language pairs served neither. The chat
pipeline asks it in ``strict`` and ``quote`` mode (the Kol-Zchut routes use those): an abstention
answers "I did not find this" and lists the closest pages as related, not as an answer. A question in
another language than its best paragraph that the retriever also searched with a tuned query encoder
gets the tuned rule (``abstention_rule_cross_language_tuned``), fitted on such turns; when the
retriever's question memory voted too, the memory's rule (``abstention_rule_cross_language_memory``),
fitted on such turns with the memory features beside the tuned rule's. A question in its best
paragraph's language on which the memory voted gets the same-language memory rule when one is given
(``abstention_rule_memory``). A memory rule that weighs ``memory_unanswered`` applies only where the
memory holds unanswered questions; elsewhere the turn gets the rule it would get without a memory.
A rule that weighs ``gate`` reads the gate's probability among its evidence instead of stopping behind
the gate's threshold; where the gate is off or says nothing, the turn gets the next rule.

A turn the rule would answer still abstains when the question asks an amount or a duration and no
source sentence close to the best states one (``ragbot.chat.answer_kind``, ``answer_kind_margin``):
the pages name the benefit but not its sum.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from ragbot.chat.events import ChatRequest, Selection
from ragbot.chat.pair_gate import PairGate, best_probability, configured_gate
from ragbot.chat.quote import TurnSentences
from ragbot.chat.schemas import Source
from ragbot.prompts import PromptDocument, detect_language
from ragbot.schemas.retrieval import MEMORY_KEY, RetrieveResponse, read_kind
from ragbot.settings import ChatSettings
from ragbot.text import analyze

__all__ = [
    "AbstentionRule",
    "Decision",
    "Evidence",
    "assess",
    "decide",
    "dense_branches",
    "evidence",
    "key_terms",
    "knows_unanswered",
    "memory_evidence",
    "related_answer",
    "remembered",
    "rule_for",
    "searched_tuned",
    "turn_rule",
]

# Words that carry no question-specific meaning, in both languages (after the analyzer's lower-casing).
_FUNCTION_WORDS = frozenset(
    str.split(
        """
    the and for are was were what which who whom whose when where why how does did can could should would
    will shall may might must have has had not any all some this that these those with from into onto
    about after before until than then there their they them you your yours our ours his her hers its
    get got getting give given much many more most long per each own also other only just very
    israel israeli
    מה מי מתי איך כמה האם איזה איזו אילו למה מדוע היכן איפה עד של על את עם אם כי גם או אך רק לא כל
    יש אין הוא היא הם הן אני אנחנו אתה את אתם זה זו זאת אלה אלו כדי אחרי לפני בין תוך מול אצל
    צריך צריכה צריכים אפשר ניתן מגיע מגיעה מגיעים מקבל מקבלת מקבלים לקבל זכאי זכאית זכאים
        """
    )
)
_RELATED: Mapping[str, str] = {"he": "דפים קרובים שאולי יעזרו:", "en": "Related pages that may help:"}
RELATED_PAGES = 3
KEY_TERM_MIN_LETTERS = 3
COVERAGE_PARAGRAPHS = 3


def key_terms(question: str) -> list[set[str]]:
    """Each key term of the question as its analyzer variants (a Hebrew word with and without a prefix)."""
    out: list[set[str]] = []
    for word in question.split():
        variants = {t for t in analyze(word) if len(t) >= KEY_TERM_MIN_LETTERS}
        if variants and not variants & _FUNCTION_WORDS:
            out.append(variants)
    return out


def coverage(question: str, paragraphs: Sequence[str]) -> float:
    """The share of the question's key terms found in any of the paragraphs (1.0 with no key terms)."""
    terms = key_terms(question)
    if not terms:
        return 1.0
    have: set[str] = set()
    for text in paragraphs:
        have.update(analyze(text))
    return sum(bool(t & have) for t in terms) / len(terms)


@dataclass(frozen=True, slots=True)
class Evidence:
    """What the turn's retrieval says about whether the question is answered (see the module docstring)."""

    dense_top: float
    dense_gap: float
    bm25_gap: float
    agree: float
    coverage: float
    sentence_top: float = 0.0
    cross_language: float = 0.0
    tuned_top: float = 0.0
    tuned_gap: float = 0.0
    memory_best: float = 0.0
    memory_agree: float = 0.0
    memory_unanswered: float = 0.0
    gate: float = 0.0

    def as_dict(self) -> dict[str, float]:
        """The features by name, rounded for debug and reports."""
        return {k: round(v, 6) for k, v in asdict(self).items()}


def _page_best(rows: Sequence[Mapping[str, Any]], branch_names: set[str], *, offset: float) -> list[float]:
    """Per page, the best raw score over the named branches, best page first."""
    best: dict[int, float] = {}
    for row in rows:
        raw = row.get("raw_scores") or {}
        scores = [float(v) - offset for k, v in raw.items() if k in branch_names]
        if scores:
            page = int(row.get("page_id") or 0)
            best[page] = max(best.get(page, -math.inf), max(scores))
    return sorted(best.values(), reverse=True)


def _top_page(rows: Sequence[Mapping[str, Any]], branch_names: set[str]) -> int | None:
    top: tuple[float, int] | None = None
    for row in rows:
        raw = row.get("raw_scores") or {}
        scores = [float(v) for k, v in raw.items() if k in branch_names]
        if scores and (top is None or max(scores) > top[0]):
            top = (max(scores), int(row.get("page_id") or 0))
    return None if top is None else top[1]


def remembered(debug: Mapping[str, Any]) -> bool:
    """Whether the retriever's question memory found remembered questions for this turn."""
    return bool((debug.get("memory") or {}).get("neighbours"))


def knows_unanswered(debug: Mapping[str, Any]) -> bool:
    """Whether the retriever's question memory holds questions the wiki did not answer (it then says the
    nearest one's cosine)."""
    return isinstance((debug.get("memory") or {}).get("unanswered"), Mapping)


def memory_evidence(debug: Mapping[str, Any], top_page: int | None) -> tuple[float, float, float]:
    """The nearest remembered question's cosine, 1.0 when its page is ``top_page`` (the retrieved first
    page), and the nearest unanswered question's cosine; zeros without a memory."""
    memory = debug.get("memory") or {}
    unanswered = memory.get("unanswered")
    far = float(unanswered.get("cosine") or 0.0) if isinstance(unanswered, Mapping) else 0.0
    neighbours = memory.get("neighbours") or []
    if not neighbours:
        return 0.0, 0.0, far
    nearest = max(neighbours, key=lambda n: float(n.get("cosine") or 0.0))
    pages = {int(p) for p in nearest.get("pages") or []}
    return float(nearest.get("cosine") or 0.0), float(top_page is not None and top_page in pages), far


def evidence(
    *,
    question: str,
    debug: Mapping[str, Any],
    paragraphs: Sequence[str],
    sentence_top: float | None = None,
    top_page: int | None = None,
) -> Evidence | None:
    """The features of one turn from the retriever's debug view, the numbered paragraphs' texts and the
    retrieved first page; None when the debug view holds no branch scores to read (a retriever that does
    not say)."""
    branches = debug.get("branches") or {}
    kinds = {name: read_kind(b) for name, b in branches.items()}
    dense = {n for n, k in kinds.items() if k == "dense"}
    bm25 = {n for n, k in kinds.items() if k == "bm25"}
    rows = [r for r in (debug.get("fused") or []) if isinstance(r, Mapping)]
    dense_pages = _page_best(rows, dense, offset=1.0)
    tuned_pages = _page_best(rows, {n for n, k in kinds.items() if k == "tuned"}, offset=1.0)
    bm25_pages = _page_best(rows, bm25, offset=0.0)
    if not dense_pages and not bm25_pages:
        return None
    dense_top = dense_pages[0] if dense_pages else 0.0
    dense_gap = dense_pages[0] - dense_pages[1] if len(dense_pages) > 1 else dense_top
    if bm25_pages and bm25_pages[0] > 0:
        second = bm25_pages[1] if len(bm25_pages) > 1 else 0.0
        bm25_gap = (bm25_pages[0] - second) / bm25_pages[0]
    else:
        bm25_gap = 0.0
    top_dense, top_bm25 = _top_page(rows, dense), _top_page(rows, bm25)
    agree = 1.0 if top_bm25 is not None and top_bm25 == top_dense else 0.0
    memory_best, memory_agree, memory_unanswered = memory_evidence(debug, top_page)
    return Evidence(
        dense_top=dense_top,
        dense_gap=dense_gap,
        bm25_gap=bm25_gap,
        agree=agree,
        coverage=coverage(question, paragraphs[:COVERAGE_PARAGRAPHS]),
        sentence_top=sentence_top if sentence_top is not None else dense_top,
        cross_language=float(
            bool(paragraphs) and detect_language(question) != detect_language(paragraphs[0])
        ),
        tuned_top=tuned_pages[0] if tuned_pages else 0.0,
        tuned_gap=tuned_pages[0] - tuned_pages[1] if len(tuned_pages) > 1 else 0.0,
        memory_best=memory_best,
        memory_agree=memory_agree,
        memory_unanswered=memory_unanswered,
    )


@dataclass(frozen=True, slots=True)
class AbstentionRule:
    """A linear score over the evidence; under ``threshold`` the turn abstains."""

    bias: float = 0.0
    dense_top: float = 0.0
    dense_gap: float = 0.0
    bm25_gap: float = 0.0
    agree: float = 0.0
    coverage: float = 0.0
    sentence_top: float = 0.0
    cross_language: float = 0.0
    tuned_top: float = 0.0
    tuned_gap: float = 0.0
    memory_best: float = 0.0
    memory_agree: float = 0.0
    memory_unanswered: float = 0.0
    gate: float = 0.0
    threshold: float = -math.inf

    def score(self, ev: Evidence) -> float:
        """The rule's score for the evidence (higher: more likely answered)."""
        return (
            self.bias
            + self.dense_top * ev.dense_top
            + self.dense_gap * ev.dense_gap
            + self.bm25_gap * ev.bm25_gap
            + self.agree * ev.agree
            + self.coverage * ev.coverage
            + self.sentence_top * ev.sentence_top
            + self.cross_language * ev.cross_language
            + self.tuned_top * ev.tuned_top
            + self.tuned_gap * ev.tuned_gap
            + self.memory_best * ev.memory_best
            + self.memory_agree * ev.memory_agree
            + self.memory_unanswered * ev.memory_unanswered
            + self.gate * ev.gate
        )


@dataclass(frozen=True, slots=True)
class Decision:
    """Whether to answer, the score it came from, the evidence behind it, and what decided: the
    ``rule``, or ``answer_kind`` (the question asks an amount or a duration no source sentence states)."""

    answer: bool
    score: float
    evidence: Evidence
    reason: str = "rule"
    gate: float | None = None

    def debug(self) -> dict[str, Any]:
        """The decision as the sources event's debug shows it."""
        return {
            "answer": self.answer,
            "reason": self.reason,
            "score": round(self.score, 6),
            "gate": None if self.gate is None else round(self.gate, 6),
            "evidence": self.evidence.as_dict(),
        }


def searched_tuned(debug: Mapping[str, Any]) -> bool:
    """Whether the retriever also searched a dense list with a tuned query encoder for this turn."""
    return any(read_kind(b) == "tuned" for b in (debug.get("branches") or {}).values())


def searched_order(
    selection: Selection, debug: Mapping[str, Any]
) -> tuple[list[PromptDocument], list[float]]:
    """The sources' paragraphs and scores as the search alone ranked them: less what the question
    memory's votes added (``debug.fused[].raw_scores.memory``), pages by their best paragraph. The gate
    was fitted on the search's scores and ranks; votes are not evidence that a paragraph answers.
    Without votes, the sources as they are."""
    added: dict[str, float] = {}
    for row in debug.get("fused") or []:
        vote = (row.get("raw_scores") or {}).get(MEMORY_KEY)
        if vote:
            added[str(row.get("_id"))] = float(vote)
    sources, documents = selection.sources, selection.documents
    if not added:
        return list(documents), [s.score for s in sources]
    scores = [s.score - added.get(s.doc_id, 0.0) for s in sources]
    best: dict[int, float] = {}
    for source, score in zip(sources, scores, strict=True):
        best[source.page_id] = max(best.get(source.page_id, -math.inf), score)
    order = sorted(range(len(sources)), key=lambda i: -best[sources[i].page_id])
    return [documents[i] for i in order], [scores[i] for i in order]


def rule_for(ev: Evidence, rule: AbstentionRule, cross_language: AbstentionRule | None) -> AbstentionRule:
    """The cross-language rule for a question in another language than its best paragraph, when given."""
    return cross_language if cross_language is not None and ev.cross_language else rule


def turn_rule(
    ev: Evidence, debug: Mapping[str, Any], settings: ChatSettings, *, gate: bool = True
) -> AbstentionRule:
    """The rule given for what the turn searched, the most specific first: a same-language turn the
    question memory voted on gets the same-language memory rule; a cross-language turn searched with a
    tuned encoder the cross-language memory rule (when the memory voted) or the tuned rule; any other
    turn the rule of its language pair (``rule_for``). A rule set to None falls back to the next, and so
    does a memory rule that weighs ``memory_unanswered`` when the memory holds no unanswered question,
    or ``gate`` when ``gate`` says the gate's probability is not to be had."""
    if (
        ev.cross_language
        and settings.abstention_rule_cross_language_tuned is not None
        and searched_tuned(debug)
    ):
        memory_rule = _memory_rule(settings.abstention_rule_cross_language_memory, debug, gate=gate)
        return memory_rule or AbstentionRule(**settings.abstention_rule_cross_language_tuned)
    same_memory = _memory_rule(settings.abstention_rule_memory, debug, gate=gate)
    if not ev.cross_language and same_memory is not None:
        return same_memory
    cross = settings.abstention_rule_cross_language
    return rule_for(
        ev, AbstentionRule(**settings.abstention_rule), None if cross is None else AbstentionRule(**cross)
    )


def _memory_rule(
    weights: Mapping[str, float] | None, debug: Mapping[str, Any], *, gate: bool
) -> AbstentionRule | None:
    """A memory rule for the turn: given, the memory voted, it knows unanswered questions when the rule
    weighs them, and the gate's probability is to be had when it weighs that; else None."""
    if weights is None or not remembered(debug):
        return None
    rule = AbstentionRule(**weights)
    if (rule.memory_unanswered and not knows_unanswered(debug)) or (rule.gate and not gate):
        return None
    return rule


def decide(ev: Evidence, rule: AbstentionRule) -> Decision:
    """Answer when the rule's score reaches its threshold."""
    value = rule.score(ev)
    return Decision(answer=value >= rule.threshold, score=value, evidence=ev)


def dense_branches(debug: Mapping[str, Any]) -> set[str]:
    """The retriever's dense branches, those language routing skipped included (tuned ones not)."""
    branches = debug.get("branches") or {}
    names = {n for n, b in branches.items() if read_kind(b) == "dense"}
    routing = debug.get("routing") or {}
    for name, route in (routing.get("branches") or {}).items():
        if isinstance(route, Mapping) and route.get("kind") == "dense":
            names.add(name)
    return names


async def assess(
    *,
    request: ChatRequest,
    response: RetrieveResponse | None,
    selection: Selection,
    sentences: TurnSentences,
    settings: ChatSettings,
) -> Decision | None:
    """The turn's decision in ``strict`` and ``quote`` mode, when the retriever's debug view has branch
    scores to read and its dense branches are those the rules were fitted on (``abstention_branches``;
    empty: any); None otherwise: a rule's weights mean nothing on another definition's scores. Both modes
    read the best sentence score from the turn's one scoring of its sentences, so they decide on the
    same evidence."""
    if request.mode not in ("strict", "quote") or response is None or not selection.sources:
        return None
    fitted = set(settings.abstention_branches)
    if fitted and dense_branches(response.debug.model_dump()) != fitted:
        return None
    best = await sentences.best_score()
    debug = response.debug.model_dump()
    ev = evidence(
        question=request.question,
        debug=debug,
        paragraphs=[d.text for d in selection.documents],
        sentence_top=None if best is None else float(best),
        top_page=response.documents[0].page_id if response.documents else None,
    )
    if ev is None:
        return None
    gate = configured_gate(settings)
    rule = turn_rule(ev, debug, settings, gate=gate is not None)
    probability: float | None = None
    # a rule that weighs the gate reads its probability as evidence; any other turn meets the gate's bar
    weighs_gate = bool(rule.gate)
    if gate is not None and weighs_gate:
        probability = await _probability(gate, request, selection, sentences, debug, ev)
        if probability is None:
            rule = turn_rule(ev, debug, settings, gate=False)
        else:
            ev = replace(ev, gate=probability)
    decision = replace(decide(ev, rule), gate=probability)
    if not decision.answer:
        return decision
    if gate is not None and not weighs_gate:
        probability = await _probability(gate, request, selection, sentences, debug, ev)
        decision = replace(decision, gate=probability)
        bar = gate.threshold(bool(ev.cross_language), tuned=searched_tuned(debug))
        if probability is not None and probability < bar:
            return replace(decision, answer=False, reason="gate")
    if not await sentences.states_kind():
        return replace(decision, answer=False, reason="answer_kind")
    return decision


async def _probability(
    gate: PairGate,
    request: ChatRequest,
    selection: Selection,
    sentences: TurnSentences,
    debug: Mapping[str, Any],
    ev: Evidence,
) -> float | None:
    """The gate's probability for the turn's best paragraph, in the order the search alone ranked them."""
    documents, scores = searched_order(selection, debug)
    return await best_probability(
        retriever=sentences.retriever,
        gate=gate,
        question=request.question,
        documents=documents,
        scores=scores,
        cross_language=bool(ev.cross_language),
    )


def related_answer(not_found: str, language: str, sources: Sequence[Source]) -> tuple[str, list[Source]]:
    """The abstention's answer: "not found", then the closest pages (one source each, at most
    ``RELATED_PAGES``) listed as related; and those sources, to send as related, never as citations."""
    pages = list({s.page_id: s for s in sources}.values())[:RELATED_PAGES]
    if not pages:
        return not_found, []
    titles = "\n".join(f"- {s.title or s.url or s.page_id}" for s in pages)
    return f"{not_found}\n\n{_RELATED.get(language, _RELATED['en'])}\n{titles}", pages
