"""Pydantic models for pages, queue messages, events and API bodies (versioned, shared by services)."""

from ragbot.schemas.jobs import JobKind, JobRecord, JobState
from ragbot.schemas.messages import DeletePage, IndexPage, PageDeleted, PageIndexed
from ragbot.schemas.pages import Block, Page, PageChangedPing, PageState, parse_wiki_timestamp
from ragbot.schemas.retrieval import RetrievedDocument, RetrieveRequest, RetrieveResponse, SearchMode

__all__ = [
    "Block",
    "DeletePage",
    "IndexPage",
    "JobKind",
    "JobRecord",
    "JobState",
    "Page",
    "PageChangedPing",
    "PageDeleted",
    "PageIndexed",
    "PageState",
    "RetrieveRequest",
    "RetrieveResponse",
    "RetrievedDocument",
    "SearchMode",
    "parse_wiki_timestamp",
]
