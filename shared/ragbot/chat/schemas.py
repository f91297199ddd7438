"""Bodies of the chat service's own API (``/v1/sessions``, ``/v1/messages``) and the chat stream events.

The stream is Server-Sent Events: ``sources`` first, then ``token`` pieces, then ``done`` or ``error``.
With ``?stream=false`` the same content comes back as one ``AnswerResponse``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

Mode = Literal["strict", "grounded", "open", "quote"]
LanguageChoice = Literal["auto", "he", "en"]
Rating = Literal["up", "down"]


class Source(BaseModel):
    """A paragraph handed to the LLM as document ``[index]``, and where it comes from."""

    index: int = Field(description="the n of [n] in the answer")
    title: str
    url: str | None = None
    page_id: int
    paragraph: int | None = None
    score: float = Field(description="the retriever's final score (fused, or reranked)")
    confidence_pct: int | None = Field(
        default=None, description="0-100: reranker probability, else best dense cosine; None for BM25 only"
    )
    doc_id: str


class SessionCreate(BaseModel):
    """``POST /v1/sessions``: the answer mode and language of a new conversation (defaults apply)."""

    mode: Mode | None = None
    language: LanguageChoice | None = None


class SessionInfo(BaseModel):
    """A session and how long it lives."""

    session_id: str
    mode: Mode
    language: LanguageChoice
    created_at: str
    updated_at: str
    expires_in_s: int


class Turn(BaseModel):
    """One question and its answer, as stored in the session."""

    message_id: str
    question: str
    rewritten_question: str | None = None
    answer: str
    mode: Mode
    abstained: bool = False
    cited_page_ids: list[int] = Field(default_factory=list)
    created_at: str


class SessionView(SessionInfo):
    """``GET /v1/sessions/{id}``: the session with its stored turns, oldest first."""

    turns: list[Turn]


class MessageCreate(BaseModel):
    """``POST /v1/sessions/{id}/messages``: a question; ``mode`` overrides the session's for this turn."""

    question: str
    mode: Mode | None = None


class FeedbackCreate(BaseModel):
    """``POST /v1/messages/{id}/feedback``: thumbs up, down, or none (withdrawn), and a comment."""

    rating: Rating | None = None
    comment: str | None = Field(default=None, max_length=5000)


class FeedbackView(BaseModel):
    """The feedback now stored for an answer."""

    message_id: str
    rating: Rating | None
    comment: str | None


class CitedSource(BaseModel):
    """A page an answer cited: what an editor opens to fix the answer."""

    page_id: int
    title: str | None = None
    url: str | None = None


class FeedbackEntry(BaseModel):
    """One rated or commented answer, as ``GET /v1/feedback`` lists and exports it."""

    message_id: str
    channel: str
    rating: Rating | None
    comment: str | None
    question: str
    answer: str
    sources: list[CitedSource] = Field(default_factory=list)
    asked_at: str
    feedback_at: str
    session_id: str | None = None


class FeedbackPage(BaseModel):
    """A cited page and how the listed answers citing it were rated (worst first)."""

    page_id: int
    title: str | None = None
    url: str | None = None
    down: int = 0
    up: int = 0


class FeedbackList(BaseModel):
    """``GET /v1/feedback``: the matching entries, newest feedback first, and their cited pages."""

    entries: list[FeedbackEntry]
    pages: list[FeedbackPage]
    truncated: bool = Field(description="more entries matched than ``limit``")


class Usage(BaseModel):
    """Tokens the LLM read and wrote (None when it did not say, or was not called)."""

    prompt_tokens: int | None = None
    completion_tokens: int = 0
    total_tokens: int | None = None


class AnswerResponse(BaseModel):
    """The whole answer at once (``?stream=false``); ``error`` is set when the LLM failed."""

    message_id: str
    session_id: str | None = None
    mode: Mode
    language: Literal["he", "en"]
    question: str
    rewritten_question: str | None = None
    answer: str
    abstained: bool
    sources: list[Source]
    citations: list[Source]
    retrieved_not_cited: list[Source]
    usage: Usage
    timings_ms: dict[str, float]
    error: dict[str, Any] | None = None
