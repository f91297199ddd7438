"""The native API: sessions, messages answered as SSE or one JSON body, and feedback on an answer.

- ``POST /v1/sessions``                 open a conversation (mode and language default from settings)
- ``GET  /v1/sessions/{id}``            the conversation and its stored turns
- ``POST /v1/sessions/{id}/messages``   SSE ``sources``, ``token``s, then ``done`` or ``error``
- ``POST /v1/messages/{id}/feedback``   thumbs up or down, with an optional comment

A conversation and its answers belong to the caller that opened it (``ragbot.chat.sessions``): any other
caller gets 404. These four routes are also all the open chat page's guests may call; a guest gets no
``debug``, and its conversations and ratings count against a per-address limit (``guest``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel

from ragbot.chat import streams
from ragbot.chat.events import (
    ChatEvent,
    ChatRequest,
    DoneEvent,
    ErrorEvent,
    HistoryTurn,
    SourcesEvent,
    TokenEvent,
)
from ragbot.chat.schemas import (
    AnswerResponse,
    FeedbackCreate,
    FeedbackView,
    LanguageChoice,
    MessageCreate,
    SessionCreate,
    SessionInfo,
    SessionView,
    Usage,
)
from ragbot.chat.sessions import new_id
from ragbot.errors import Forbidden
from ragbot.http.auth import owner_of
from ragbot.http.limits import RATE_LIMITED, guest_limit, rate_limit
from ragbot.http.streams import event_stream_response
from ragbot.prompts import Language, detect_language
from ragbot_chat.deps import CallerDep, OwnerDep, Resources, ResourcesDep
from ragbot_chat.service import (
    LIMITED_RESPONSES,
    collect_while_connected,
    error_status,
    record_feedback,
    run_and_store,
)
from ragbot_chat.sse import CLIENT_GONE, event_stream, sse

router = APIRouter(prefix="/v1", tags=["chat"])


# -- use cases ---------------------------------------------------------------------------------------


def resolve_language(choice: LanguageChoice, question: str) -> Language:
    """``auto`` follows the question's script; otherwise the session's language."""
    return detect_language(question) if choice == "auto" else choice


async def open_session(*, res: Resources, body: SessionCreate, owner: str) -> SessionInfo:
    """Open a conversation of ``owner`` so follow-ups keep their context."""
    return await res.store.create_session(
        mode=body.mode or res.settings.default_mode,
        language=body.language or res.settings.default_language,
        owner=owner,
    )


async def show_session(*, res: Resources, session_id: str, owner: str) -> SessionView:
    """Show a conversation and its stored turns (404 once expired, or to another caller)."""
    return await res.store.view(session_id, owner=owner)


async def start_message(
    *, res: Resources, session_id: str, body: MessageCreate, owner: str
) -> tuple[str, ChatRequest, SessionInfo]:
    """Validate a question against its session (``owner``'s) before any byte of the answer is sent."""
    session = await res.store.session(session_id, owner=owner)
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


async def give_feedback(*, res: Resources, message_id: str, body: FeedbackCreate, owner: str) -> FeedbackView:
    """Record thumbs up/down on an answer (404 for unknown ids and other callers' answers)."""
    record = await record_feedback(
        res=res, message_id=message_id, rating=body.rating, comment=body.comment, channel="api", owner=owner
    )
    return FeedbackView(message_id=record.message_id, rating=record.rating, comment=record.comment)


def event_payload(
    event: ChatEvent, *, message_id: str, session_id: str | None, include_debug: bool
) -> dict[str, Any]:
    """The JSON carried by one SSE event of the own API (``ragbot.chat.streams``' models)."""
    data: BaseModel
    if isinstance(event, SourcesEvent):
        data = streams.SourcesEventData(
            message_id=message_id,
            session_id=session_id,
            mode=event.mode,
            language=event.language,
            rewritten_question=event.rewritten_question,
            sources=event.sources,
            debug=event.debug if include_debug else None,
        )
        # ``debug`` is left out, not null, when it was not asked for.
        return data.model_dump(mode="json", exclude={"debug"} if not include_debug else None)
    if isinstance(event, TokenEvent):
        data = streams.TokenEventData(text=event.text)
    elif isinstance(event, DoneEvent):
        data = streams.DoneEventData(
            message_id=message_id,
            answer=event.answer,
            abstained=event.abstained,
            citations=event.citations,
            retrieved_not_cited=event.retrieved_not_cited,
            usage=Usage.model_validate(event.usage),
            timings_ms=event.timings_ms,
            finish_reason=event.finish_reason,
        )
    else:
        data = streams.ErrorEventData(
            message_id=message_id, message=event.message, dependency=event.dependency, stage=event.stage
        )
    return data.model_dump(mode="json")


async def sse_stream(
    events: AsyncIterator[ChatEvent], *, message_id: str, session_id: str | None, include_debug: bool
) -> AsyncIterator[bytes]:
    """The own API's event stream: ``sources``, ``token``s, then ``done`` or ``error``."""
    async for event in events:
        yield sse(
            event.name,
            event_payload(event, message_id=message_id, session_id=session_id, include_debug=include_debug),
        )


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


# -- routes ------------------------------------------------------------------------------------------


@router.post(
    "/sessions",
    response_model=SessionInfo,
    status_code=201,
    responses=RATE_LIMITED,
    dependencies=[guest_limit()],
)
async def create_session(
    res: ResourcesDep, owner: OwnerDep, body: SessionCreate | None = None
) -> SessionInfo:
    """Start a conversation (mode and language default from settings)."""
    return await open_session(res=res, body=body or SessionCreate(), owner=owner)


@router.get("/sessions/{session_id}", response_model=SessionView)
async def get_session(session_id: str, res: ResourcesDep, owner: OwnerDep) -> SessionView:
    """A conversation with its stored turns (the caller's own)."""
    return await show_session(res=res, session_id=session_id, owner=owner)


@router.post(
    "/sessions/{session_id}/messages",
    response_model=AnswerResponse,
    responses={
        **event_stream_response(
            streams.NATIVE_EVENTS,
            description="SSE (default): `sources`, `token`s, then `done` or `error`; JSON with stream=false",
        ),
        **LIMITED_RESPONSES,
    },
    dependencies=[rate_limit("chat")],
)
async def post_message(
    session_id: str,
    body: MessageCreate,
    res: ResourcesDep,
    http_request: Request,
    who: CallerDep,
    stream: bool = Query(default=True, description="false: one JSON body instead of Server-Sent Events"),
    debug: bool = Query(
        default=False, description="include retrieval and rewrite debug in `sources` (not for guests)"
    ),
) -> Response:
    """Ask a question: SSE ``sources``, ``token``s, then ``done`` or ``error`` (or JSON with stream=false)."""
    if debug and who.method == "guest":
        raise Forbidden("debug shows internal settings: a guest of the open chat page cannot ask for it")
    owner = owner_of(who)
    message_id, request, session = await start_message(res=res, session_id=session_id, body=body, owner=owner)
    slot = await res.admission.acquire(
        needs_llm=request.mode != "quote"
    )  # LLMBusy (503 + Retry-After) before any byte is sent
    events = run_and_store(
        res=res, request=request, message_id=message_id, session_id=session.session_id, owner=owner
    )
    if stream:
        chunks = sse_stream(events, message_id=message_id, session_id=session_id, include_debug=debug)
        return event_stream(chunks, every_s=res.settings.sse_ping_s, on_close=slot.release)
    collected = await collect_while_connected(events, slot=slot, disconnected=http_request.is_disconnected)
    if collected is None:
        return Response(status_code=CLIENT_GONE)
    sources, done, error = collected
    answer = answer_response(
        request=request, message_id=message_id, session_id=session_id, sources=sources, done=done, error=error
    )
    if error is not None:
        body_json = answer.model_dump(mode="json")
        body_json["detail"] = error.message
        return JSONResponse(body_json, status_code=error_status(error))
    return JSONResponse(answer.model_dump(mode="json"))


@router.post(
    "/messages/{message_id}/feedback",
    response_model=FeedbackView,
    responses=RATE_LIMITED,
    dependencies=[guest_limit()],
)
async def post_feedback(
    message_id: str, body: FeedbackCreate, res: ResourcesDep, owner: OwnerDep
) -> FeedbackView:
    """Thumbs up or down on one of the caller's answers, with an optional comment (null withdraws it)."""
    return await give_feedback(res=res, message_id=message_id, body=body, owner=owner)
