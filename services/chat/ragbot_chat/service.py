"""The chat service's use cases: each HTTP route calls one of these; they drive ``ChatPipeline``.

Checks that can fail before an answer starts (unknown session, empty or over-long question) raise here,
so the client gets a 4xx instead of a stream. Once streaming, failures become ``error`` events and the
sources already sent stay valid. A turn is stored before its ``done`` event goes out, so feedback can
follow immediately.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, TypeVar

from ragbot.chat.citations import unique_pages
from ragbot.chat.events import (
    ChatEvent,
    ChatRequest,
    DoneEvent,
    ErrorEvent,
    HistoryTurn,
    PromptOverrides,
    SourcesEvent,
    TokenEvent,
)
from ragbot.chat.kolzchut import KolZchutConfig, KolZchutConfigIn, RatingRequest, SearchRequest, page_plan
from ragbot.chat.schemas import (
    AnswerResponse,
    FeedbackCreate,
    FeedbackView,
    LanguageChoice,
    MessageCreate,
    Mode,
    Rating,
    SessionCreate,
    SessionInfo,
    SessionView,
    Source,
    Turn,
    Usage,
)
from ragbot.chat.sessions import MessageRecord, new_id, now_iso
from ragbot.errors import DependencyUnavailable, ValidationFailed
from ragbot.prompts import Language, detect_language
from ragbot_chat.deps import Resources

logger = logging.getLogger(__name__)
T = TypeVar("T")
# Status logged when a client left before its JSON answer was ready (nginx's "client closed request").
CLIENT_GONE = 499

SSE_HEADERS: Mapping[str, str] = {
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
    "Connection": "keep-alive",
}


def resolve_language(choice: LanguageChoice, question: str) -> Language:
    """``auto`` follows the question's script; otherwise the session's language."""
    return detect_language(question) if choice == "auto" else choice


# -- own API: sessions and messages ------------------------------------------------------------------


async def create_session(*, res: Resources, body: SessionCreate) -> SessionInfo:
    """Open a conversation so follow-ups keep their context."""
    return await res.store.create_session(
        mode=body.mode or res.settings.default_mode,
        language=body.language or res.settings.default_language,
    )


async def get_session(*, res: Resources, session_id: str) -> SessionView:
    """Show a conversation and its stored turns (404 once expired)."""
    return await res.store.view(session_id)


async def start_message(
    *, res: Resources, session_id: str, body: MessageCreate
) -> tuple[str, ChatRequest, SessionInfo]:
    """Validate a question against its session before any byte of the answer is sent."""
    session = await res.store.session(session_id)
    question = res.pipeline.check_question(body.question)
    turns = await res.store.turns(session_id, last=res.settings.history_turns)
    request = ChatRequest(
        question=question,
        mode=body.mode or session.mode,
        language=resolve_language(session.language, question),
        channel="api",
        history=[HistoryTurn(t.question, t.answer) for t in turns],
    )
    return new_id(), request, session


async def run_and_store(
    *,
    res: Resources,
    request: ChatRequest,
    message_id: str,
    session_id: str | None,
    asked_from: str | None = None,
    forwarded_for: str | None = None,
) -> AsyncIterator[ChatEvent]:
    """The pipeline's events; the turn and the message are stored just before ``done`` is passed on."""
    rewritten: str | None = None
    async for event in res.pipeline.run(request):
        if isinstance(event, SourcesEvent):
            rewritten = event.rewritten_question
        if isinstance(event, DoneEvent):
            try:
                await store_answer(
                    res=res,
                    request=request,
                    done=event,
                    message_id=message_id,
                    session_id=session_id,
                    rewritten=rewritten,
                    asked_from=asked_from,
                    forwarded_for=forwarded_for,
                )
            except DependencyUnavailable as exc:  # the answer is still worth delivering
                logger.warning("answer not stored", extra={"message_id": message_id, "error": str(exc)})
        yield event


async def store_answer(
    *,
    res: Resources,
    request: ChatRequest,
    done: DoneEvent,
    message_id: str,
    session_id: str | None,
    rewritten: str | None,
    asked_from: str | None,
    forwarded_for: str | None = None,
) -> None:
    """Keep the answer for feedback, and the turn in its session for follow-ups."""
    stamp = now_iso()
    cited_pages = list(dict.fromkeys(s.page_id for s in done.citations))
    await res.store.save_message(
        MessageRecord(
            message_id=message_id,
            session_id=session_id,
            channel=request.channel,
            asked_from=asked_from,
            forwarded_for=forwarded_for,
            question=request.question,
            rewritten_question=rewritten,
            answer=done.answer,
            mode=request.mode,
            abstained=done.abstained,
            cited_page_ids=cited_pages,
            created_at=stamp,
        )
    )
    if session_id is not None:
        await res.store.add_turn(
            session_id,
            Turn(
                message_id=message_id,
                question=request.question,
                rewritten_question=rewritten,
                answer=done.answer,
                mode=request.mode,
                abstained=done.abstained,
                cited_page_ids=cited_pages,
                created_at=stamp,
            ),
        )


def sources_json(sources: list[Source]) -> list[dict[str, Any]]:
    """Sources as plain JSON objects."""
    return [s.model_dump() for s in sources]


def event_payload(
    event: ChatEvent, *, message_id: str, session_id: str | None, include_debug: bool
) -> dict[str, Any]:
    """The JSON carried by one SSE event of the own API."""
    if isinstance(event, SourcesEvent):
        payload: dict[str, Any] = {
            "message_id": message_id,
            "session_id": session_id,
            "mode": event.mode,
            "language": event.language,
            "rewritten_question": event.rewritten_question,
            "sources": sources_json(event.sources),
        }
        if include_debug:
            payload["debug"] = event.debug
        return payload
    if isinstance(event, TokenEvent):
        return {"text": event.text}
    if isinstance(event, DoneEvent):
        return {
            "message_id": message_id,
            "answer": event.answer,
            "abstained": event.abstained,
            "citations": sources_json(event.citations),
            "retrieved_not_cited": sources_json(event.retrieved_not_cited),
            "usage": event.usage,
            "timings_ms": event.timings_ms,
            "finish_reason": event.finish_reason,
        }
    return {
        "message_id": message_id,
        "message": event.message,
        "dependency": event.dependency,
        "stage": event.stage,
    }


def sse(event: str, data: Mapping[str, Any] | str) -> bytes:
    """One Server-Sent Event (JSON escapes newlines, so ``data`` stays on one line)."""
    body = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return f"event: {event}\ndata: {body}\n\n".encode()


async def sse_stream(
    events: AsyncIterator[ChatEvent], *, message_id: str, session_id: str | None, include_debug: bool
) -> AsyncIterator[bytes]:
    """The own API's event stream: ``sources``, ``token``s, then ``done`` or ``error``."""
    async for event in events:
        yield sse(
            event.name,
            event_payload(event, message_id=message_id, session_id=session_id, include_debug=include_debug),
        )


async def with_pings(chunks: AsyncIterator[bytes], *, every_s: float) -> AsyncGenerator[bytes, None]:
    """Pass chunks through, adding an SSE comment when none came for ``every_s`` (keeps proxies open).

    When the client goes away the server cancels this generator; the pending step of ``chunks`` is
    cancelled and ``chunks`` closed, which closes the LLM stream and stops generation.
    """
    iterator = aiter(chunks)
    pending: asyncio.Future[bytes] | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(anext(iterator))
            done, _ = await asyncio.wait({pending}, timeout=every_s)
            if not done:
                yield b": ping\n\n"
                continue
            step, pending = pending, None
            try:
                chunk = step.result()
            except StopAsyncIteration:
                return
            yield chunk
    finally:
        if pending is not None:
            pending.cancel()
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                await pending
        closer = getattr(iterator, "aclose", None)
        if closer is not None:
            await closer()


async def unless_disconnected(
    work: Awaitable[T], *, disconnected: Callable[[], Awaitable[bool]], every_s: float = 1.0
) -> T | None:
    """``work``'s result, or None once the client has gone: the work is cancelled, stopping the LLM.

    Non-streaming answers (``/search``, ``stream=false``) would otherwise keep generating for a client
    that gave up (KZChatbot's testing page waits 180 s) and slow every answer queued behind it. The
    embedded llama.cpp stops at its next token, so a prompt it is reading is still read to the end.
    """
    task = asyncio.ensure_future(work)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=every_s)
            if done:
                return task.result()
            if await disconnected():
                logger.info("client disconnected; answer cancelled")
                return None
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def collect(
    events: AsyncIterator[ChatEvent],
) -> tuple[SourcesEvent | None, DoneEvent | None, ErrorEvent | None]:
    """Run a turn to the end (non-streaming callers)."""
    sources: SourcesEvent | None = None
    done: DoneEvent | None = None
    error: ErrorEvent | None = None
    async for event in events:
        if isinstance(event, SourcesEvent):
            sources = event
        elif isinstance(event, DoneEvent):
            done = event
        elif isinstance(event, ErrorEvent):
            error = event
    return sources, done, error


def answer_response(
    *,
    request: ChatRequest,
    message_id: str,
    session_id: str | None,
    sources: SourcesEvent | None,
    done: DoneEvent | None,
    error: ErrorEvent | None,
) -> AnswerResponse:
    """The whole answer as one JSON body."""
    return AnswerResponse(
        message_id=message_id,
        session_id=session_id,
        mode=request.mode,
        language=request.language,
        question=request.question,
        rewritten_question=sources.rewritten_question if sources else None,
        answer=done.answer if done else "",
        abstained=done.abstained if done else False,
        sources=sources.sources if sources else [],
        citations=done.citations if done else [],
        retrieved_not_cited=done.retrieved_not_cited if done else [],
        usage=Usage.model_validate(done.usage) if done else Usage(),
        timings_ms=done.timings_ms if done else {},
        error=(
            {"message": error.message, "dependency": error.dependency, "stage": error.stage}
            if error
            else None
        ),
    )


def error_status(error: ErrorEvent) -> int:
    """503 when a dependency failed, 422 when the query itself was refused."""
    return 503 if error.dependency else 422


async def give_feedback(*, res: Resources, message_id: str, body: FeedbackCreate) -> FeedbackView:
    """Record thumbs up/down on an answer (404 for unknown ids)."""
    record = await res.store.set_feedback(message_id, rating=body.rating, comment=body.comment)
    res.pipeline.metrics.feedback.labels("api", body.rating or "none").inc()
    return FeedbackView(message_id=record.message_id, rating=record.rating, comment=record.comment)


# -- Kol-Zchut contract ------------------------------------------------------------------------------


def _page_id(value: int | str | None) -> int | None:
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def first_forwarded(forwarded_for: str | None) -> str | None:
    """The client a proxy named first in ``X-Forwarded-For`` (clipped), kept with the answer."""
    return forwarded_for.split(",")[0].strip()[:64] if forwarded_for else None


async def kolzchut_search(
    *, res: Resources, body: SearchRequest, forwarded_for: str | None = None
) -> tuple[int, dict[str, Any]]:
    """Answer KZChatbot's ``/search``: (status code, body) with exactly its field names."""
    started = time.perf_counter()
    config = await res.configs.get()
    question = res.pipeline.check_question(body.query, field_name="query")
    request = ChatRequest(
        question=question,
        mode=res.settings.kolzchut_mode,
        language=detect_language(question),
        channel="kolzchut",
        rephrase=body.rephrase,
        page_id=_page_id(body.page_id) if config.add_current_page_to_search else None,
        retrieval_size=body.retrieval_size,
        paragraphs_per_page=page_plan(
            num_of_pages=config.num_of_pages,
            base=res.settings.paragraphs_per_page,
            max_per_page=body.max_documents_from_same_page,
        ),
        complete_pages=body.send_complete_pages_to_llm,
        temperature=config.temperature,  # the pipeline sends none for models_without_temperature
        model=config.model,
        prompts=PromptOverrides(
            system=config.system_prompt, user=config.user_prompt, rephrase=config.rephrase_prompt
        ),
        banned_fields=config.banned_fields,
    )
    conversation_id = new_id()
    asked_from = None if body.asked_from is None else str(body.asked_from)
    sources, done, error = await collect(
        run_and_store(
            res=res,
            request=request,
            message_id=conversation_id,
            session_id=None,
            asked_from=asked_from,
            forwarded_for=forwarded_for,
        )
    )
    docs = [{"title": s.title, "url": s.url} for s in unique_pages(sources.sources if sources else [])]
    if error is not None:
        return error_status(error), {
            "detail": error.message,
            "dependency": error.dependency,
            "docs": docs,
            "conversation_id": None,
        }
    assert done is not None
    if done.abstained:
        docs = []
    payload: dict[str, Any] = {"gpt_result": done.answer, "docs": docs, "conversation_id": conversation_id}
    if body.include_debug_data:
        debug = sources.debug if sources else {}
        rewrite = debug.get("rewrite") or {}
        payload.update(
            docs_before_filter=debug.get("docs_before_filter", []),
            debug_data={
                "mode": request.mode,
                "config_version": config.version,
                "model": config.model,
                "llm_backend": res.llm.backend,
                "sources": sources_json(sources.sources if sources else []),
                "citations": sources_json(done.citations),
                "retrieved_not_cited": sources_json(done.retrieved_not_cited),
                "abstained": done.abstained,
                "usage": done.usage,
                "timings_ms": done.timings_ms,
                "retrieval": debug.get("retrieval"),
            },
            original_question=question,
            rephrased_question=rewrite.get("rewritten"),
            response_time=round(time.perf_counter() - started, 3),
            rephrase_time=None if not rewrite else round(float(rewrite.get("time_ms", 0.0)) / 1000.0, 3),
        )
    return 200, payload


async def kolzchut_rate(*, res: Resources, body: RatingRequest) -> dict[str, Any]:
    """Record a like/dislike on a conversation (404 for unknown ids: the extension shows the status)."""
    rating: Rating | None = None if body.like is None else ("up" if body.like else "down")
    await res.store.set_feedback(body.conversation_id, rating=rating, comment=body.free_text)
    res.pipeline.metrics.feedback.labels("kolzchut", rating or "none").inc()
    return {"conversation_id": body.conversation_id, "like": body.like, "free_text": body.free_text}


async def kolzchut_get_config(*, res: Resources) -> KolZchutConfig:
    """The live configuration (defaults until the first ``set_config``)."""
    return await res.configs.get()


async def kolzchut_set_config(*, res: Resources, body: KolZchutConfigIn) -> KolZchutConfig:
    """Validate and store a new configuration version; the next search uses it."""
    return await res.configs.set(body)


async def kolzchut_models_version(*, res: Resources) -> list[str]:
    """Human-readable versions of the models behind the answers; element 0 is the summary shown."""
    config = await res.configs.get()
    try:
        embedders = await res.retriever.model_names()
    except (DependencyUnavailable, ValidationFailed):
        embedders = []
    retrieval = ", ".join(embedders) if embedders else "unavailable"
    summary = f"{config.model} ({res.llm.backend}); retrieval: {retrieval}; config v{config.version}"
    return [summary, f"llm: {config.model}", *(f"embedding: {name}" for name in embedders)]


# -- OpenAI-compatible endpoint ----------------------------------------------------------------------


def openai_turn(*, res: Resources, messages: list[dict[str, Any]], mode: Mode | None) -> ChatRequest:
    """The last user message is the question; earlier user/assistant pairs are the history."""
    texts: list[tuple[str, str]] = []
    for message in messages:
        role = str(message.get("role", ""))
        texts.append((role, _content_text(message.get("content"))))
    last_user = max((i for i, (role, _) in enumerate(texts) if role == "user"), default=None)
    if last_user is None:
        raise ValidationFailed("messages must contain a user message", field="messages")
    question = res.pipeline.check_question(texts[last_user][1], field_name="messages")
    history: list[HistoryTurn] = []
    pending: str | None = None
    for role, text in texts[:last_user]:
        if role == "user":
            pending = text
        elif role == "assistant" and pending is not None:
            history.append(HistoryTurn(pending, text))
            pending = None
    return ChatRequest(
        question=question,
        mode=mode or res.settings.default_mode,
        language=detect_language(question),
        channel="openai",
        history=history,
    )


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(part.get("text", ""))
            for part in content
            if isinstance(part, dict) and part.get("type") == "text"
        )
    return ""


def sources_footer(citations: list[Source], language: Language) -> str:
    """Cited sources as text under the answer, for front ends that only show content."""
    if not citations:
        return ""
    label = "מקורות" if language == "he" else "Sources"
    lines = [f"[{s.index}] {s.title}" + (f" — {s.url}" if s.url else "") for s in citations]
    return f"\n\n{label}:\n" + "\n".join(lines)


def openai_usage(usage: Mapping[str, int | None]) -> dict[str, int]:
    """OpenAI's usage object has integers only: unknown counts become 0."""
    prompt = int(usage.get("prompt_tokens") or 0)
    completion = int(usage.get("completion_tokens") or 0)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def openai_chunk(
    *, completion_id: str, created: int, model: str, delta: dict[str, Any], finish: str | None, **extra: Any
) -> dict[str, Any]:
    """One ``chat.completion.chunk``."""
    return {
        "id": completion_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        **extra,
    }


async def openai_stream(
    events: AsyncIterator[ChatEvent], *, request: ChatRequest, completion_id: str, model: str
) -> AsyncIterator[bytes]:
    """OpenAI's streaming shape (``data: {chunk}`` lines, then ``data: [DONE]``); citations ride last."""
    created = int(time.time())
    sources: list[Source] = []

    def data(obj: Mapping[str, Any]) -> bytes:
        return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n".encode()

    yield data(
        openai_chunk(
            completion_id=completion_id,
            created=created,
            model=model,
            delta={"role": "assistant"},
            finish=None,
        )
    )
    async for event in events:
        if isinstance(event, SourcesEvent):
            sources = event.sources
        elif isinstance(event, TokenEvent):
            yield data(
                openai_chunk(
                    completion_id=completion_id,
                    created=created,
                    model=model,
                    delta={"content": event.text},
                    finish=None,
                )
            )
        elif isinstance(event, DoneEvent):
            footer = sources_footer(event.citations, request.language)
            if footer:
                yield data(
                    openai_chunk(
                        completion_id=completion_id,
                        created=created,
                        model=model,
                        delta={"content": footer},
                        finish=None,
                    )
                )
            yield data(
                openai_chunk(
                    completion_id=completion_id,
                    created=created,
                    model=model,
                    delta={},
                    finish=event.finish_reason or "stop",
                    usage=openai_usage(event.usage),
                    citations=sources_json(event.citations),
                    sources=sources_json(sources),
                )
            )
        elif isinstance(event, ErrorEvent):
            yield data(
                {
                    "error": {
                        "message": event.message,
                        "type": "dependency_unavailable" if event.dependency else "invalid_request_error",
                        "code": error_status(event),
                        "param": event.dependency,
                    }
                }
            )
    yield b"data: [DONE]\n\n"


def openai_completion(
    *,
    request: ChatRequest,
    completion_id: str,
    model: str,
    sources: SourcesEvent | None,
    done: DoneEvent,
) -> dict[str, Any]:
    """OpenAI's non-streaming ``chat.completion`` with ragbot's citations alongside."""
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": done.answer + sources_footer(done.citations, request.language),
                },
                "finish_reason": done.finish_reason or "stop",
            }
        ],
        "usage": openai_usage(done.usage),
        "citations": sources_json(done.citations),
        "retrieved_not_cited": sources_json(done.retrieved_not_cited),
        "sources": sources_json(sources.sources if sources else []),
    }
