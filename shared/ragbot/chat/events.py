"""What one chat turn takes in and gives out: the request, its history, and the events it yields."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ragbot.chat.schemas import Mode, Source
from ragbot.prompts import Language, PromptDocument


@dataclass(frozen=True, slots=True)
class HistoryTurn:
    """An earlier question and its answer."""

    question: str
    answer: str


@dataclass(frozen=True, slots=True)
class PromptOverrides:
    """Templates replacing the prompt files for one request (the Kol-Zchut config's prompts)."""

    system: str | None = None
    user: str | None = None
    rephrase: str | None = None


@dataclass(slots=True)
class ChatRequest:
    """Everything one turn needs; ``language`` is already resolved (``he`` or ``en``)."""

    question: str
    mode: Mode
    language: Language
    channel: str = "api"
    history: Sequence[HistoryTurn] = ()
    rephrase: bool | None = None
    page_id: int | None = None
    retrieval_size: int | None = None
    paragraphs_per_page: Sequence[int] | None = None
    complete_pages: bool = False
    temperature: float | None = None
    model: str | None = None
    max_tokens: int | None = None
    prompts: PromptOverrides = field(default_factory=PromptOverrides)
    banned_fields: Sequence[str] = ()


@dataclass(slots=True)
class SourcesEvent:
    """The numbered paragraphs the answer may cite (empty in open mode or when nothing was found)."""

    sources: list[Source]
    mode: Mode
    language: Language
    rewritten_question: str | None
    debug: dict[str, Any]
    name: Literal["sources"] = "sources"


@dataclass(slots=True)
class TokenEvent:
    """A piece of the answer."""

    text: str
    name: Literal["token"] = "token"


@dataclass(slots=True)
class DoneEvent:
    """The whole answer, what it cites, what it cost and how long each step took."""

    answer: str
    citations: list[Source]
    retrieved_not_cited: list[Source]
    usage: dict[str, int | None]
    timings_ms: dict[str, float]
    abstained: bool
    finish_reason: str | None = None
    name: Literal["done"] = "done"


@dataclass(slots=True)
class ErrorEvent:
    """Why there is no (complete) answer; ``dependency`` names what failed."""

    message: str
    dependency: str | None
    stage: str
    name: Literal["error"] = "error"


ChatEvent = SourcesEvent | TokenEvent | DoneEvent | ErrorEvent


@dataclass(slots=True)
class Selection:
    """The numbered sources of a turn, their prompt blocks, and every retrieved paragraph (debug)."""

    sources: list[Source]
    documents: list[PromptDocument]
    before_filter: list[dict[str, Any]]
