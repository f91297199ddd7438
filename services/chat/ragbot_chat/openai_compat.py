"""OpenAI compatibility: ``/v1/chat/completions`` (streamed or whole) and ``/v1/models``.

Front ends built for OpenAI's API talk to ragbot unchanged: the last user message is the question,
earlier pairs the history; cited sources ride in the last chunk (and under the answer as text).
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict

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
from ragbot.chat.schemas import Mode, Source
from ragbot.chat.sessions import new_id
from ragbot.errors import ValidationFailed
from ragbot.http.limits import rate_limit
from ragbot.http.streams import event_stream_response
from ragbot.prompts import Language, detect_language
from ragbot_chat.deps import Resources, ResourcesDep
from ragbot_chat.service import (
    LIMITED_RESPONSES,
    collect_while_connected,
    error_status,
    run_and_store,
    sources_json,
)
from ragbot_chat.sse import CLIENT_GONE, event_stream

router = APIRouter(prefix="/v1", tags=["openai"])


class ChatCompletionRequest(BaseModel):
    """The parts of OpenAI's chat completion request ragbot reads; ``mode`` is ragbot's own extra."""

    model_config = ConfigDict(extra="allow")

    model: str | None = None
    messages: list[dict[str, Any]]
    stream: bool = False
    mode: Mode | None = None


# -- use cases ---------------------------------------------------------------------------------------


FinishReason = Literal["stop", "length", "content_filter", "tool_calls"]
_FINISH: dict[str, FinishReason] = {r: r for r in ("stop", "length", "content_filter", "tool_calls")}


def openai_finish(reason: str | None) -> FinishReason:
    """OpenAI's finish reasons only: an answer the loop detector ended (``loop``) stopped."""
    return _FINISH.get(reason or "", "stop")


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
    *,
    completion_id: str,
    created: int,
    model: str,
    delta: streams.ChunkDelta,
    finish: FinishReason | None,
    **extra: Any,
) -> dict[str, Any]:
    """One ``chat.completion.chunk`` (``ragbot.chat.streams.ChatCompletionChunk``): only the fields set,
    ``finish_reason`` always (null until the last)."""
    chunk = streams.ChatCompletionChunk(
        id=completion_id,
        created=created,
        model=model,
        choices=[streams.ChunkChoice(index=0, delta=delta, finish_reason=finish)],
        **extra,
    )
    return chunk.model_dump(mode="json", exclude_unset=True)


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
            delta=streams.ChunkDelta(role="assistant"),
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
                    delta=streams.ChunkDelta(content=event.text),
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
                        delta=streams.ChunkDelta(content=footer),
                        finish=None,
                    )
                )
            yield data(
                openai_chunk(
                    completion_id=completion_id,
                    created=created,
                    model=model,
                    delta=streams.ChunkDelta(),
                    finish=openai_finish(event.finish_reason),
                    usage=openai_usage(event.usage),
                    citations=event.citations,
                    sources=sources,
                )
            )
        elif isinstance(event, ErrorEvent):
            failure = streams.CompletionStreamError(
                error=streams.StreamErrorDetail(
                    message=event.message,
                    type="dependency_unavailable" if event.dependency else "invalid_request_error",
                    code=error_status(event),
                    param=event.dependency,
                )
            )
            yield data(failure.model_dump(mode="json"))
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
                "finish_reason": openai_finish(done.finish_reason),
            }
        ],
        "usage": openai_usage(done.usage),
        "citations": sources_json(done.citations),
        "retrieved_not_cited": sources_json(done.retrieved_not_cited),
        "sources": sources_json(sources.sources if sources else []),
    }


# -- routes ------------------------------------------------------------------------------------------


@router.post(
    "/chat/completions",
    responses={
        **event_stream_response(
            streams.OPENAI_EVENTS,
            description="with stream: true, `data:` chunks then `data: [DONE]`; else one chat.completion",
        ),
        **LIMITED_RESPONSES,
    },
    dependencies=[rate_limit("chat")],
)
async def chat_completions(body: ChatCompletionRequest, res: ResourcesDep, http_request: Request) -> Response:
    """Answer the last user message with retrieval and citations, in OpenAI's shapes."""
    request = openai_turn(res=res, messages=body.messages, mode=body.mode)
    completion_id = f"chatcmpl-{new_id()}"
    model = body.model or "ragbot"
    slot = await res.admission.acquire()  # LLMBusy (503 + Retry-After) before any byte is sent
    events = run_and_store(res=res, request=request, message_id=completion_id, session_id=None)
    if body.stream:
        chunks = openai_stream(events, request=request, completion_id=completion_id, model=model)
        return event_stream(chunks, every_s=res.settings.sse_ping_s, on_close=slot.release)
    collected = await collect_while_connected(events, slot=slot, disconnected=http_request.is_disconnected)
    if collected is None:
        return Response(status_code=CLIENT_GONE)
    sources, done, error = collected
    if error is not None or done is None:
        status = error_status(error) if error is not None else 500
        message = error.message if error is not None else "no answer"
        kind = "dependency_unavailable" if status == 503 else "invalid_request_error"
        return JSONResponse({"error": {"message": message, "type": kind, "code": status}}, status_code=status)
    return JSONResponse(
        openai_completion(
            request=request, completion_id=completion_id, model=model, sources=sources, done=done
        )
    )


@router.get("/models")
async def list_models() -> dict[str, Any]:
    """The one model OpenAI clients should name: ragbot (retrieval + the configured LLM)."""
    return {
        "object": "list",
        "data": [{"id": "ragbot", "object": "model", "created": 0, "owned_by": "ragbot"}],
    }
