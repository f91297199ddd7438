"""One turn for every contract: the pipeline's events, the answer stored before ``done`` goes out.

The contract modules (``native``, ``openai_compat``, ``kolzchut``, ``widget``) check what can fail
before an answer starts (unknown session, empty or over-long question) and raise there, so the client
gets a 4xx instead of a stream. Once streaming, failures become ``error`` events and the sources already
sent stay valid. A turn is stored before its ``done`` event goes out, so feedback can follow at once.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from ragbot.chat.admission import Slot
from ragbot.chat.events import ChatEvent, ChatRequest, DoneEvent, ErrorEvent, SourcesEvent
from ragbot.chat.schemas import CitedSource, Rating, Source, Turn
from ragbot.chat.sessions import MessageRecord, now_iso
from ragbot.errors import DependencyUnavailable
from ragbot.http.limits import RATE_LIMITED, RETRY_AFTER_HEADER
from ragbot_chat.deps import Resources
from ragbot_chat.sse import unless_disconnected

logger = logging.getLogger(__name__)

LIMITED_RESPONSES: dict[int | str, dict[str, Any]] = {
    **RATE_LIMITED,
    503: {
        "description": "a dependency is down, or every LLM slot and the wait queue are taken",
        "headers": RETRY_AFTER_HEADER,
    },
}
"""OpenAPI of the routes that are rate limited and admission controlled (429 and 503 with Retry-After)."""


async def run_and_store(
    *,
    res: Resources,
    request: ChatRequest,
    message_id: str,
    session_id: str | None,
    asked_from: str | None = None,
    forwarded_for: str | None = None,
    owner: str | None = None,
) -> AsyncIterator[ChatEvent]:
    """The pipeline's events; the turn and the message (of ``owner``) are stored just before ``done``
    is passed on."""
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
                    owner=owner,
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
    owner: str | None = None,
) -> None:
    """Keep the answer for feedback, and the turn in its session for follow-ups."""
    stamp = now_iso()
    cited_pages = list(dict.fromkeys(s.page_id for s in done.citations))
    first = {s.page_id: s for s in reversed(done.citations)}
    sources = [CitedSource(page_id=p, title=first[p].title, url=first[p].url) for p in cited_pages]
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
            cited_sources=sources,
            created_at=stamp,
            owner=owner,
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


async def record_feedback(
    *,
    res: Resources,
    message_id: str,
    rating: Rating | None,
    comment: str | None,
    channel: str,
    owner: str | None = None,
) -> MessageRecord:
    """Store feedback on the answer (``owner``'s only) and keep it in the review log, which outlives the
    answer's record."""
    record = await res.store.set_feedback(message_id, rating=rating, comment=comment, owner=owner)
    res.pipeline.metrics.feedback.labels(channel, rating or "none").inc()
    await res.feedback.keep(record)
    return record


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


def sources_json(sources: list[Source]) -> list[dict[str, Any]]:
    """Sources as plain JSON objects."""
    return [s.model_dump() for s in sources]


def error_status(error: ErrorEvent) -> int:
    """503 when a dependency failed, 422 when the query itself was refused."""
    return 503 if error.dependency else 422


async def collect_while_connected(
    events: AsyncIterator[ChatEvent], *, slot: Slot, disconnected: Callable[[], Awaitable[bool]]
) -> tuple[SourcesEvent | None, DoneEvent | None, ErrorEvent | None] | None:
    """A non-streamed turn run to the end on its LLM slot (then freed); None once the client has gone."""
    try:
        return await unless_disconnected(collect(events), disconnected=disconnected)
    finally:
        slot.release()
