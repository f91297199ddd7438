"""One chat turn: rewrite a follow-up, retrieve, choose the sources, prompt, stream, cite.

``ChatPipeline.run`` yields events in a fixed order: ``SourcesEvent`` first (always, even when
retrieval failed or was skipped), then ``TokenEvent`` pieces, then ``DoneEvent`` or ``ErrorEvent``.
It never raises for a dependency failure once started: the client always learns what happened.
Closing the iterator (a client disconnecting) closes the LLM stream, which stops generation.

Answer modes (GenericChatBot's private / hybrid / public):

- ``strict``: only the retrieved paragraphs; when none pass the relevance threshold the fixed
  "no relevant documents" answer is returned and the LLM is never called; only the LLM's sentences a
  source holds are sent (``ragbot.chat.grounding``), and when none is the sources are quoted;
- ``grounded``: documents first, general knowledge allowed and labelled as such;
- ``open``: no retrieval; the LLM answers from what it knows;
- ``quote``: no LLM at all; the sentences of the sources that answer the question, each with its
  ``[n]`` (``ragbot.chat.quote``), or the fixed "no relevant documents" answer when none does.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncGenerator, Mapping, Sequence
from typing import Any

from ragbot.chat.answerability import assess, related_answer
from ragbot.chat.boilerplate import is_boilerplate
from ragbot.chat.citations import confidences, split_cited, to_source
from ragbot.chat.events import (
    ChatEvent,
    ChatRequest,
    DoneEvent,
    ErrorEvent,
    HistoryTurn,
    Selection,
    SourcesEvent,
    TokenEvent,
)
from ragbot.chat.grounding import SentenceGate
from ragbot.chat.history import recent_turns
from ragbot.chat.loops import CUT_MARK, LoopDetector
from ragbot.chat.metrics import ChatMetrics, chat_metrics
from ragbot.chat.quote import QuoteOptions, Sentence, TurnSentences, compose
from ragbot.chat.retriever import Retriever
from ragbot.chat.schemas import Source
from ragbot.errors import DependencyUnavailable, LLMError, ValidationFailed
from ragbot.llms.base import complete, with_timeouts
from ragbot.ports import ChatMessage, ChatModel
from ragbot.prompts import Language, PromptDocument, PromptLibrary, format_documents, render
from ragbot.schemas.retrieval import RetrieveRequest, RetrieveResponse
from ragbot.settings import ChatSettings
from ragbot.text.clean import strip_unsafe

logger = logging.getLogger(__name__)

COMPLETE_PAGE_PARAGRAPHS = 1000
_SPEAKERS: Mapping[str, tuple[str, str]] = {"he": ("משתמש", "עוזר"), "en": ("User", "Assistant")}


def _ms(seconds: float) -> float:
    return round(seconds * 1000.0, 3)


class ChatPipeline:
    """The chat use case over the ``ChatModel`` and ``Retriever`` ports; holds no per-request state."""

    def __init__(
        self,
        *,
        llm: ChatModel,
        retriever: Retriever,
        prompts: PromptLibrary,
        settings: ChatSettings,
        metrics: ChatMetrics | None = None,
    ) -> None:
        self.llm = llm
        self.retriever = retriever
        self.prompts = prompts
        self.settings = settings
        self.metrics = metrics or chat_metrics()

    # -- checks -----------------------------------------------------------------------------------

    def check_question(self, question: str, *, field_name: str = "question") -> str:
        """The question stripped (of controls and bidi overrides too); blank or over-long ones are refused."""
        text = strip_unsafe(question).strip()
        if not text:
            raise ValidationFailed(f"{field_name} must not be empty", field=field_name)
        limit = self.settings.max_question_chars
        if len(text) > limit:
            raise ValidationFailed(
                f"{field_name} is {len(text)} characters; the limit is {limit}", field=field_name
            )
        return text

    def no_documents_answer(self, language: Language) -> str:
        """The fixed strict-mode answer (a setting per language wins over the prompt file)."""
        configured = self.settings.no_documents_answer.get(language)
        return configured if configured else self.prompts.get("no_documents", language)

    # -- the turn ---------------------------------------------------------------------------------

    async def run(self, request: ChatRequest) -> AsyncGenerator[ChatEvent, None]:
        """Events of one turn, in order; see the module docstring."""
        started = time.perf_counter()
        timings: dict[str, float] = {}
        debug: dict[str, Any] = {}
        query = request.question
        rewritten: str | None = None

        # quote mode never calls the LLM, so a follow-up is searched as asked
        if request.mode not in ("open", "quote") and self._wants_rewrite(request):
            t0 = time.perf_counter()
            rewritten, rewrite_error = await self._rewrite(request)
            timings["rewrite_ms"] = _ms(time.perf_counter() - t0)
            debug["rewrite"] = {
                "original": request.question,
                "rewritten": rewritten,
                "time_ms": timings["rewrite_ms"],
                "error": rewrite_error,
            }
            query = rewritten or request.question

        response: RetrieveResponse | None = None
        if request.mode != "open":
            t0 = time.perf_counter()
            try:
                response = await self._retrieve(request, query)
            except (DependencyUnavailable, ValidationFailed) as exc:
                timings["retrieval_ms"] = _ms(time.perf_counter() - t0)
                timings["total_ms"] = _ms(time.perf_counter() - started)
                debug["timings_ms"] = timings
                yield SourcesEvent([], request.mode, request.language, rewritten, debug)
                dependency = exc.dependency if isinstance(exc, DependencyUnavailable) else None
                yield ErrorEvent(str(exc), dependency, "retrieval")
                self._count(request, "error")
                return
            timings["retrieval_ms"] = _ms(time.perf_counter() - t0)
            debug["retrieval"] = {
                "query": query,
                "debug": response.debug.model_dump(mode="json"),
                "timings_ms": response.timings_ms,
            }

        selection = self.select_sources(request, response)
        debug["docs_before_filter"] = selection.before_filter
        sentences = TurnSentences(
            retriever=self.retriever,
            question=request.question,
            documents=selection.documents,
            options=QuoteOptions.from_settings(self.settings),
        )
        # quote mode scores the sentences first, so the sources event's debug says how they scored
        chosen = await self._quote_choose(sentences, timings, debug) if request.mode == "quote" else []
        decision = await assess(
            request=request,
            response=response,
            selection=selection,
            sentences=sentences,
            settings=self.settings,
        )
        if decision is not None:
            debug["answerability"] = decision.debug()
        if decision is not None and not decision.answer and self.settings.abstention_enabled:
            yield SourcesEvent(selection.sources, request.mode, request.language, rewritten, debug)
            for event in self._abstain_events(request, selection, started, timings, related=True):
                yield event
            return
        yield SourcesEvent(selection.sources, request.mode, request.language, rewritten, debug)

        if request.mode == "quote":
            for event in self._quote_events(request, selection, chosen, started, timings):
                yield event
            return

        if request.mode == "strict" and not selection.sources:
            for event in self._abstain_events(request, selection, started, timings, related=False):
                yield event
            return

        messages = self.messages(request, selection.documents)
        debug["prompt_chars"] = sum(len(m.content) for m in messages)
        stream = with_timeouts(
            self.llm.stream(
                messages=messages,
                temperature=self.temperature(
                    request,
                    self.settings.llm_temperature if request.temperature is None else request.temperature,
                ),
                max_tokens=request.max_tokens or self.settings.llm_max_tokens,
                model=request.model,
            ),
            first_token_s=self.settings.llm_first_token_timeout_s,
            idle_s=self.settings.llm_idle_timeout_s,
            total_s=self.settings.llm_total_timeout_s,
        )
        detector = LoopDetector()
        gate = SentenceGate.for_turn(request.mode, selection.documents, self.settings)
        llm_started = time.perf_counter()
        first_at: float | None = None
        try:
            async for piece in stream:
                if first_at is None:
                    first_at = time.perf_counter()
                    timings["llm_ttft_ms"] = _ms(first_at - llm_started)
                    timings["ttft_ms"] = _ms(first_at - started)
                    self.metrics.llm_time_to_first_token.labels(self.llm.backend).observe(
                        first_at - llm_started
                    )
                    self.metrics.time_to_first_token.labels(request.mode, request.channel).observe(
                        first_at - started
                    )
                for text in [piece] if gate is None else gate.passed(piece):
                    yield TokenEvent(text)
                if detector.feed(piece):
                    logger.warning("the answer repeats itself: ended", extra={"backend": self.llm.backend})
                    break
        except LLMError as exc:
            self.metrics.llm_errors.labels(self.llm.backend, "answer").inc()
            self._count(request, "error")
            logger.warning("LLM failed", extra={"error": str(exc), "backend": self.llm.backend})
            yield ErrorEvent(str(exc), exc.dependency, "answer")
            return
        finally:
            await stream.aclose()

        ended = time.perf_counter()
        timings["llm_ms"] = _ms(ended - llm_started)
        timings["total_ms"] = _ms(ended - started)
        usage = stream.usage
        self.metrics.count_tokens(self.llm.backend, usage, "answer")
        if first_at is not None and usage.completion_tokens > 1 and ended > first_at:
            self.metrics.tokens_per_second.labels(self.llm.backend).observe(
                (usage.completion_tokens - 1) / (ended - first_at)
            )
        answer, finish_reason = detector.kept, usage.finish_reason
        if gate is not None:
            for text in gate.passed(None, cut=finish_reason == "length" or detector.looping):
                yield TokenEvent(text)
            answer = self._gated_answer(gate)
            if not answer:  # no sentence of the model is in a source: the sources' own sentences
                chosen = await self._quote_choose(sentences, timings, {})
                for event in self._quote_events(request, selection, chosen, started, timings):
                    yield event
                return
        if detector.looping:
            finish_reason = "loop"  # the repeats are dropped from the answer that is stored and shown
        elif finish_reason == "length" and answer.strip():
            yield TokenEvent(CUT_MARK)  # the token cap cut it: said so, never a silent half word
            answer += CUT_MARK
        cited, not_cited = split_cited(answer, selection.sources)
        self._count(request, "answered")
        yield DoneEvent(answer, cited, not_cited, usage.as_dict(), timings, False, finish_reason)

    def _gated_answer(self, gate: SentenceGate) -> str:
        """The kept sentences as one answer, kept and dropped ones counted."""
        kept, dropped = len(gate.kept), len(gate.checked) - len(gate.kept)
        self.metrics.strict_sentences.labels("kept").inc(kept)
        self.metrics.strict_sentences.labels("dropped").inc(dropped)
        return gate.answer

    def _abstain_events(
        self,
        request: ChatRequest,
        selection: Selection,
        started: float,
        timings: dict[str, float],
        *,
        related: bool,
    ) -> list[ChatEvent]:
        """The fixed "not found" answer; with ``related``, the closest pages as related (never cited)."""
        answer, pages = related_answer(
            self.no_documents_answer(request.language), request.language, selection.sources if related else []
        )
        timings["ttft_ms"] = _ms(time.perf_counter() - started)
        timings["total_ms"] = timings["ttft_ms"]
        self.metrics.abstentions.labels(request.mode).inc()
        self._count(request, "abstained")
        usage: dict[str, int | None] = {"prompt_tokens": None, "completion_tokens": 0, "total_tokens": None}
        return [TokenEvent(answer), DoneEvent(answer, [], pages, usage, timings, abstained=True)]

    async def _quote_choose(
        self, sentences: TurnSentences, timings: dict[str, float], debug: dict[str, Any]
    ) -> list[Sentence]:
        """The quote mode's sentences (scored by the retriever's model at most once a turn), with how
        they scored in debug."""
        t0 = time.perf_counter()
        chosen, debug["quote"] = await sentences.quote()
        timings["quote_ms"] = _ms(time.perf_counter() - t0)
        return chosen

    def _quote_events(
        self,
        request: ChatRequest,
        selection: Selection,
        chosen: list[Sentence],
        started: float,
        timings: dict[str, float],
    ) -> list[ChatEvent]:
        """The quote mode's tokens and done event: the chosen sentences with their [n], or abstention."""
        if not chosen:
            return self._abstain_events(request, selection, started, timings, related=True)
        pieces = compose(chosen)
        timings["ttft_ms"] = _ms(time.perf_counter() - started)
        self.metrics.time_to_first_token.labels(request.mode, request.channel).observe(
            time.perf_counter() - started
        )
        events: list[ChatEvent] = [TokenEvent(piece) for piece in pieces]
        answer = "".join(pieces)
        timings["total_ms"] = _ms(time.perf_counter() - started)
        usage: dict[str, int | None] = {"prompt_tokens": None, "completion_tokens": 0, "total_tokens": None}
        cited, not_cited = split_cited(answer, selection.sources)
        self._count(request, "answered")
        events.append(DoneEvent(answer, cited, not_cited, usage, timings, False, "stop"))
        return events

    def _count(self, request: ChatRequest, outcome: str) -> None:
        self.metrics.answers.labels(request.mode, request.channel, outcome).inc()

    def temperature(self, request: ChatRequest, wanted: float) -> float | None:
        """``wanted``, or None (nothing is sent) for a model listed in ``models_without_temperature``."""
        model = request.model or self.llm.model
        return None if model in self.settings.models_without_temperature else wanted

    def recent_history(self, history: Sequence[HistoryTurn], *, keep: int) -> list[HistoryTurn]:
        """The last ``keep`` turns within the history budget (``ragbot.chat.history``)."""
        return recent_turns(history, keep=keep, budget_chars=self.settings.history_budget_chars)

    # -- follow-up rewriting ----------------------------------------------------------------------

    def _wants_rewrite(self, request: ChatRequest) -> bool:
        if request.rephrase is not None:
            return request.rephrase
        return self.settings.rewrite_followups and bool(request.history)

    async def _rewrite(self, request: ChatRequest) -> tuple[str | None, str | None]:
        """(the standalone query or None, the error when the LLM failed); failures fall back quietly."""
        user, assistant = _SPEAKERS[request.language]
        turns = self.recent_history(request.history, keep=max(self.settings.history_turns, 1))
        history = "\n".join(f"{user}: {t.question}\n{assistant}: {t.answer}" for t in turns) or "-"
        template = request.prompts.rephrase or self.prompts.get("rephrase", request.language)
        prompt = render(template, history=history, question=request.question)
        stream = with_timeouts(
            self.llm.stream(
                messages=[ChatMessage("user", prompt)],
                temperature=self.temperature(request, 0.0),
                max_tokens=self.settings.rewrite_max_tokens,
                model=request.model,
            ),
            first_token_s=self.settings.llm_first_token_timeout_s,
            idle_s=self.settings.llm_idle_timeout_s,
            total_s=self.settings.llm_total_timeout_s,
        )
        try:
            text = await complete(stream)
        except LLMError as exc:
            self.metrics.llm_errors.labels(self.llm.backend, "rewrite").inc()
            logger.warning("follow-up rewrite failed; using the question as asked", extra={"error": str(exc)})
            return None, str(exc)
        self.metrics.count_tokens(self.llm.backend, stream.usage, "rewrite")
        return clean_rewrite(text, limit=self.settings.max_question_chars), None

    # -- retrieval and source selection -----------------------------------------------------------

    async def _retrieve(self, request: ChatRequest, query: str) -> RetrieveResponse:
        plan = list(request.paragraphs_per_page or self.settings.paragraphs_per_page)
        size = request.retrieval_size or self.settings.retrieval_size
        response = await self.retriever.retrieve(
            RetrieveRequest(query=query, retrieval_size=size, paragraphs_per_page=plan)
        )
        # Plain JSON shapes while pages are merged in; validated back into the typed response at the end.
        documents = [d.model_dump() for d in response.documents]
        debug = response.debug.model_dump()
        if request.complete_pages and documents:
            documents = await self._complete_pages(query, documents, debug)
        if request.page_id is not None:
            try:
                current = await self._page_documents(query, request.page_id, debug)
            except (DependencyUnavailable, ValidationFailed) as exc:  # the answer can do without it
                logger.warning(
                    "current page not added", extra={"page_id": request.page_id, "error": str(exc)}
                )
                debug["current_page_error"] = str(exc)
                current = []
            seen = {d.get("_id") for d in documents}
            documents.extend(d for d in current if d.get("_id") not in seen)
        return RetrieveResponse.model_validate(
            {"documents": documents, "debug": debug, "timings_ms": response.timings_ms}
        )

    async def _page_documents(self, query: str, page_id: int, debug: dict[str, Any]) -> list[dict[str, Any]]:
        """Every paragraph of one page, in paragraph order (its debug merged for confidences)."""
        response = await self.retriever.retrieve(
            RetrieveRequest(
                query=query,
                retrieval_size=COMPLETE_PAGE_PARAGRAPHS,
                paragraphs_per_page=[COMPLETE_PAGE_PARAGRAPHS],
                filters={"page_id": page_id},
                rerank=False,
            )
        )
        fused = list(debug.get("fused") or [])
        known = {row.get("_id") for row in fused}
        fused.extend(row.model_dump() for row in response.debug.fused if row.id not in known)
        debug["fused"] = fused
        branches = dict(debug.get("branches") or {})
        for name, branch in response.debug.branches.items():
            branches.setdefault(name, {"kind": branch.kind})
        debug["branches"] = branches
        documents = [d.model_dump() for d in response.documents]
        return sorted(documents, key=lambda d: int(d.get("paragraph") or 0))

    async def _complete_pages(
        self, query: str, documents: list[dict[str, Any]], debug: dict[str, Any]
    ) -> list[dict[str, Any]]:
        pages = list(dict.fromkeys(int(d["page_id"]) for d in documents))
        out: list[dict[str, Any]] = []
        for page_id in pages:
            out.extend(await self._page_documents(query, page_id, debug))
        return out

    def select_sources(self, request: ChatRequest, response: RetrieveResponse | None) -> Selection:
        """Number the documents that pass the threshold and fit the context budget."""
        if response is None:
            return Selection([], [], [])
        banned = set(request.banned_fields)
        conf = confidences(response.debug.model_dump())
        threshold = self.settings.relevance_threshold
        # quote mode reads the paragraphs itself, so the LLM's context budget does not bind it
        settings = self.settings
        budget = settings.quote_context_chars if request.mode == "quote" else settings.context_budget_chars
        text_field = self.settings.document_text_field
        sources: list[Source] = []
        documents: list[PromptDocument] = []
        before: list[dict[str, Any]] = []
        used = 0
        for doc in (d.model_dump() for d in response.documents):
            doc_id = str(doc.get("_id") or "")
            confidence = conf.get(doc_id)
            source = to_source(doc, index=len(sources) + 1, confidence=confidence)
            row = {k: v for k, v in source.model_dump().items() if k != "index"}
            before.append(row)
            if threshold > 0 and confidence is not None and confidence < threshold:
                row["dropped"] = "below relevance threshold"
                continue
            text = "" if text_field in banned else str(doc.get(text_field) or "")
            if settings.boilerplate_filter and is_boilerplate(str(doc.get(text_field) or "")):
                row["dropped"] = "boilerplate"
                continue
            if used + len(text) > budget:
                if documents:
                    row["dropped"] = "context budget"
                    continue
                text = text[:budget]
            used += len(text)
            title = "" if "title" in banned else source.title
            sources.append(source)
            documents.append(PromptDocument(number=source.index, title=title, text=text))
        return Selection(sources, documents, before)

    # -- prompts ----------------------------------------------------------------------------------

    def messages(self, request: ChatRequest, documents: Sequence[PromptDocument]) -> list[ChatMessage]:
        """System prompt, recent history, then the question with its numbered documents as data."""
        lang = request.language
        system = render(
            request.prompts.system or self.prompts.get("system", lang),
            mode_instructions=self.prompts.get(request.mode, lang),
        )
        out = [ChatMessage("system", system)]
        for turn in self.recent_history(request.history, keep=self.settings.history_turns):
            out.append(ChatMessage("user", turn.question))
            out.append(ChatMessage("assistant", turn.answer))
        if request.mode == "open":
            out.append(ChatMessage("user", request.question))
            return out
        block = format_documents(documents) if documents else self.prompts.get("no_context", lang)
        template = request.prompts.user or self.prompts.get("user", lang)
        out.append(ChatMessage("user", render(template, documents=block, question=request.question)))
        return out


def clean_rewrite(text: str, *, limit: int) -> str | None:
    """The first meaningful line of a rewrite, unquoted; None when empty or implausibly long."""
    for line in text.splitlines():
        candidate = line.strip().strip("\"'`“”«»").strip()
        for label in ("Standalone query:", "שאילתה עצמאית:", "Query:"):
            if candidate.startswith(label):
                candidate = candidate[len(label) :].strip()
        if candidate:
            return candidate if len(candidate) <= limit else None
    return None
