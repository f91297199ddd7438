"""The events of the chat service's streams as typed models: what each SSE event carries on the wire.

- native (``POST /v1/sessions/{id}/messages``): ``event: sources``, ``token``s, then ``done`` or
  ``error``; each ``data`` is one of the ``*EventData`` models, framed as the ``*Event`` ones describe;
- OpenAI-compatible (``POST /v1/chat/completions`` with ``stream: true``): ``data:`` lines carrying a
  ``ChatCompletionChunk`` (or a ``CompletionStreamError``), then the literal ``data: [DONE]``.

The routes build their events from these models, so the OpenAPI (``ragbot.http.streams``) is what is sent.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from ragbot.chat.schemas import Mode, Source, Usage

# -- native ------------------------------------------------------------------------------------------


class SourcesEventData(BaseModel):
    """First event: the numbered paragraphs the answer may cite (``[n]`` is ``sources[].index``)."""

    message_id: str
    session_id: str | None
    mode: Mode
    language: Literal["he", "en"]
    rewritten_question: str | None = Field(description="the standalone question a follow-up became")
    sources: list[Source]
    debug: dict[str, Any] | None = Field(
        default=None, description="only with ?debug=true: rewrite, retrieval (the retriever's debug view)"
    )


class TokenEventData(BaseModel):
    """A piece of the answer; the pieces concatenated are ``done.answer``."""

    text: str


class DoneEventData(BaseModel):
    """Last event of an answered turn: the whole answer, what it cites, tokens and timings."""

    message_id: str
    answer: str
    abstained: bool
    citations: list[Source]
    retrieved_not_cited: list[Source]
    usage: Usage
    timings_ms: dict[str, float]
    finish_reason: str | None = Field(description="stop, length, loop (a repetition cut) or null")


class ErrorEventData(BaseModel):
    """Last event of a turn that failed once streaming: why, and which dependency (if one) failed."""

    message_id: str
    message: str
    dependency: str | None
    stage: str = Field(description="where it failed: retrieve, generate ...")


class SourcesEvent(BaseModel):
    """``event: sources``."""

    event: Literal["sources"] = "sources"
    data: SourcesEventData


class TokenEvent(BaseModel):
    """``event: token`` (any number, after ``sources``)."""

    event: Literal["token"] = "token"
    data: TokenEventData


class DoneEvent(BaseModel):
    """``event: done`` (last)."""

    event: Literal["done"] = "done"
    data: DoneEventData


class ErrorEvent(BaseModel):
    """``event: error`` (last, instead of ``done``)."""

    event: Literal["error"] = "error"
    data: ErrorEventData


NATIVE_EVENTS: tuple[type[BaseModel], ...] = (SourcesEvent, TokenEvent, DoneEvent, ErrorEvent)

# -- OpenAI-compatible -------------------------------------------------------------------------------


class ChunkDelta(BaseModel):
    """What a chunk adds: the role once (first chunk), then content pieces; empty in the last."""

    role: Literal["assistant"] | None = None
    content: str | None = None


class ChunkChoice(BaseModel):
    """The one choice ragbot streams."""

    index: int = 0
    delta: ChunkDelta
    finish_reason: Literal["stop", "length", "content_filter", "tool_calls"] | None = None


class CompletionUsage(BaseModel):
    """OpenAI's usage object (integers; 0 when the LLM did not say)."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class ChatCompletionChunk(BaseModel):
    """One ``chat.completion.chunk``; the last one (``finish_reason`` set) also carries usage and
    ragbot's ``citations`` and ``sources``."""

    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: CompletionUsage | None = None
    citations: list[Source] | None = Field(default=None, description="last chunk: the sources cited")
    sources: list[Source] | None = Field(default=None, description="last chunk: every source given")


class StreamErrorDetail(BaseModel):
    """Why the stream stopped without an answer."""

    message: str
    type: Literal["dependency_unavailable", "invalid_request_error"]
    code: int = Field(description="the HTTP status the same failure has without streaming (503, 422)")
    param: str | None = Field(default=None, description="the dependency that failed")


class CompletionStreamError(BaseModel):
    """An error chunk, sent instead of the last chunk; ``[DONE]`` still follows."""

    error: StreamErrorDetail


class CompletionChunkEvent(BaseModel):
    """``data: <ChatCompletionChunk>``."""

    data: ChatCompletionChunk


class CompletionErrorEvent(BaseModel):
    """``data: <CompletionStreamError>``."""

    data: CompletionStreamError


class CompletionDoneEvent(BaseModel):
    """``data: [DONE]``: the stream is over."""

    data: Literal["[DONE]"] = "[DONE]"


OPENAI_EVENTS: tuple[type[BaseModel], ...] = (CompletionChunkEvent, CompletionErrorEvent, CompletionDoneEvent)
STREAM_MODELS: tuple[type[BaseModel], ...] = NATIVE_EVENTS + OPENAI_EVENTS
