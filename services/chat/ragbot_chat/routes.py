"""HTTP routes of the chat service: the own API, the OpenAI-compatible endpoint, the Kol-Zchut contract."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict

from ragbot.chat.kolzchut import KolZchutConfig, KolZchutConfigIn, RatingRequest, SearchRequest
from ragbot.chat.schemas import (
    AnswerResponse,
    FeedbackCreate,
    FeedbackView,
    MessageCreate,
    Mode,
    SessionCreate,
    SessionInfo,
    SessionView,
)
from ragbot.chat.sessions import new_id
from ragbot_chat import service
from ragbot_chat.deps import ResourcesDep

router = APIRouter(prefix="/v1", tags=["chat"])
openai_router = APIRouter(prefix="/v1", tags=["openai"])
kolzchut_router = APIRouter(tags=["kolzchut"])


# -- own API -----------------------------------------------------------------------------------------


@router.post("/sessions", response_model=SessionInfo, status_code=201)
async def create_session(res: ResourcesDep, body: SessionCreate | None = None) -> SessionInfo:
    """Start a conversation (mode and language default from settings)."""
    return await service.create_session(res=res, body=body or SessionCreate())


@router.get("/sessions/{session_id}", response_model=SessionView)
async def get_session(session_id: str, res: ResourcesDep) -> SessionView:
    """A conversation with its stored turns."""
    return await service.get_session(res=res, session_id=session_id)


@router.post(
    "/sessions/{session_id}/messages",
    response_model=AnswerResponse,
    responses={200: {"content": {"text/event-stream": {}}}},
)
async def post_message(
    session_id: str,
    body: MessageCreate,
    res: ResourcesDep,
    http_request: Request,
    stream: bool = Query(default=True, description="false: one JSON body instead of Server-Sent Events"),
    debug: bool = Query(default=False, description="include retrieval and rewrite debug in `sources`"),
) -> Response:
    """Ask a question: SSE ``sources``, ``token``s, then ``done`` or ``error`` (or JSON with stream=false)."""
    message_id, request, session = await service.start_message(res=res, session_id=session_id, body=body)
    events = service.run_and_store(
        res=res, request=request, message_id=message_id, session_id=session.session_id
    )
    if stream:
        chunks = service.sse_stream(events, message_id=message_id, session_id=session_id, include_debug=debug)
        return StreamingResponse(
            service.with_pings(chunks, every_s=res.settings.sse_ping_s),
            media_type="text/event-stream",
            headers=dict(service.SSE_HEADERS),
        )
    collected = await service.unless_disconnected(
        service.collect(events), disconnected=http_request.is_disconnected
    )
    if collected is None:
        return Response(status_code=service.CLIENT_GONE)
    sources, done, error = collected
    answer = service.answer_response(
        request=request, message_id=message_id, session_id=session_id, sources=sources, done=done, error=error
    )
    if error is not None:
        body_json = answer.model_dump(mode="json")
        body_json["detail"] = error.message
        return JSONResponse(body_json, status_code=service.error_status(error))
    return JSONResponse(answer.model_dump(mode="json"))


@router.post("/messages/{message_id}/feedback", response_model=FeedbackView)
async def post_feedback(message_id: str, body: FeedbackCreate, res: ResourcesDep) -> FeedbackView:
    """Thumbs up or down on an answer, with an optional comment (null withdraws the rating)."""
    return await service.give_feedback(res=res, message_id=message_id, body=body)


# -- OpenAI-compatible -------------------------------------------------------------------------------


class ChatCompletionRequest(BaseModel):
    """The parts of OpenAI's chat completion request ragbot reads; ``mode`` is ragbot's own extra."""

    model_config = ConfigDict(extra="allow")

    model: str | None = None
    messages: list[dict[str, Any]]
    stream: bool = False
    mode: Mode | None = None


@openai_router.post("/chat/completions")
async def chat_completions(body: ChatCompletionRequest, res: ResourcesDep, http_request: Request) -> Response:
    """Answer the last user message with retrieval and citations, in OpenAI's shapes."""
    request = service.openai_turn(res=res, messages=body.messages, mode=body.mode)
    completion_id = f"chatcmpl-{new_id()}"
    model = body.model or "ragbot"
    events = service.run_and_store(res=res, request=request, message_id=completion_id, session_id=None)
    if body.stream:
        chunks = service.openai_stream(events, request=request, completion_id=completion_id, model=model)
        return StreamingResponse(
            service.with_pings(chunks, every_s=res.settings.sse_ping_s),
            media_type="text/event-stream",
            headers=dict(service.SSE_HEADERS),
        )
    collected = await service.unless_disconnected(
        service.collect(events), disconnected=http_request.is_disconnected
    )
    if collected is None:
        return Response(status_code=service.CLIENT_GONE)
    sources, done, error = collected
    if error is not None or done is None:
        status = service.error_status(error) if error is not None else 500
        message = error.message if error is not None else "no answer"
        kind = "dependency_unavailable" if status == 503 else "invalid_request_error"
        return JSONResponse({"error": {"message": message, "type": kind, "code": status}}, status_code=status)
    return JSONResponse(
        service.openai_completion(
            request=request, completion_id=completion_id, model=model, sources=sources, done=done
        )
    )


@openai_router.get("/models")
async def list_models() -> dict[str, Any]:
    """The one model OpenAI clients should name: ragbot (retrieval + the configured LLM)."""
    return {
        "object": "list",
        "data": [{"id": "ragbot", "object": "model", "created": 0, "owned_by": "ragbot"}],
    }


# -- Kol-Zchut contract ------------------------------------------------------------------------------


@kolzchut_router.post("/search")
async def search(
    body: SearchRequest,
    res: ResourcesDep,
    http_request: Request,
    forwarded_for: Annotated[str | None, Header(alias="X-Forwarded-For")] = None,
) -> Response:
    """KZChatbot's question: ``{gpt_result, docs, conversation_id}`` (plus debug fields when asked)."""
    answered = await service.unless_disconnected(
        service.kolzchut_search(res=res, body=body, forwarded_for=service.first_forwarded(forwarded_for)),
        disconnected=http_request.is_disconnected,
    )
    if answered is None:
        return Response(status_code=service.CLIENT_GONE)
    status, payload = answered
    return JSONResponse(payload, status_code=status)


@kolzchut_router.post("/rating")
async def rating(body: RatingRequest, res: ResourcesDep) -> dict[str, Any]:
    """Like, dislike or withdraw on a conversation; unknown ids are 404."""
    return await service.kolzchut_rate(res=res, body=body)


@kolzchut_router.get("/get_config", response_model=KolZchutConfig)
async def get_config(res: ResourcesDep) -> KolZchutConfig:
    """The live configuration."""
    return await service.kolzchut_get_config(res=res)


@kolzchut_router.post("/set_config", response_model=KolZchutConfig)
async def set_config(body: KolZchutConfigIn, res: ResourcesDep) -> KolZchutConfig:
    """Replace the configuration (validated, versioned, applied without a restart)."""
    return await service.kolzchut_set_config(res=res, body=body)


@kolzchut_router.get("/get_models_version")
async def get_models_version(res: ResourcesDep) -> list[str]:
    """Versions of the models in use; the extension shows element 0."""
    return await service.kolzchut_models_version(res=res)


@kolzchut_router.api_route("/get_config_metadata", methods=["GET", "POST"])
async def get_config_metadata(res: ResourcesDep) -> dict[str, Any]:
    """What the admin page may choose: models, temperature and page-count options, field types."""
    return res.configs.metadata()
