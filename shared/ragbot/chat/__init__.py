"""The chat domain: sessions, answer modes, follow-up rewriting, sources and citations, the Kol-Zchut
contract's config. The chat service (``services/chat``) drives it over HTTP."""

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
from ragbot.chat.pipeline import ChatPipeline
from ragbot.chat.retriever import EngineRetriever, HttpRetriever, Retriever
from ragbot.chat.sessions import ChatStore, MessageRecord

__all__ = [
    "ChatEvent",
    "ChatPipeline",
    "ChatRequest",
    "ChatStore",
    "DoneEvent",
    "EngineRetriever",
    "ErrorEvent",
    "HistoryTurn",
    "HttpRetriever",
    "MessageRecord",
    "PromptOverrides",
    "Retriever",
    "SourcesEvent",
    "TokenEvent",
]
