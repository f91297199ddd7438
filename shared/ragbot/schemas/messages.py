"""Queue commands (imperative) and events (past tense). Versioned with ``v``."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from ragbot.schemas.pages import Page

INDEX_PAGE_TASK = "embedder.index_page"
DELETE_PAGE_TASK = "embedder.delete_page"
INDEX_PAGES_TASK = "embedder.index_pages"
DROP_GENERATION_TASK = "embedder.drop_generation"
RECONCILE_WIKI_TASK = "embedder.reconcile_wiki"


class IndexPage(BaseModel):
    """Index one page: fetch it from ``callback_url`` unless ``page`` carries it inline."""

    v: Literal[1] = 1
    job_id: str
    page_id: int
    revision_id: int
    revision_date: datetime | None = None
    callback_url: str | None = None
    page: Page | None = None
    request_id: str | None = None
    force: bool = Field(default=False, description="re-embed even when this revision is indexed")


class PageRef(BaseModel):
    """A page to fetch from the wiki's content API (``callback_url + page_id``) in a batch."""

    page_id: int = Field(ge=1)
    revision_id: int = Field(default=0, ge=0, description="0: unknown, always fetched")
    callback_url: str


class IndexPages(BaseModel):
    """Index a batch of pages together (bulk reindex, folders): embedded in shared batches.

    Pages come inline (``pages``) or as references the worker fetches (``refs``). ``parent_job_id``
    names the reindex job whose progress this batch adds to.
    """

    v: Literal[1] = 1
    job_id: str
    parent_job_id: str | None = None
    batch: int = Field(default=0, ge=0)
    pages: list[Page] = Field(default_factory=list)
    refs: list[PageRef] = Field(default_factory=list)
    request_id: str | None = None
    force: bool = Field(default=False, description="re-embed even when a revision is indexed")
    generation: str | None = Field(
        default=None,
        description="write only this index generation (a re-embed's batches); None: the live one, "
        "and the one being built while a re-embed runs",
    )


class DropGeneration(BaseModel):
    """Delete an index generation a re-embed switched away from (sent with a delay)."""

    v: Literal[1] = 1
    job_id: str
    generation: str
    request_id: str | None = None


class ReconcileWiki(BaseModel):
    """Make the index hold the wiki's listed pages (after delete pings, and on a schedule)."""

    v: Literal[1] = 1
    job_id: str
    list_url: str
    callback_url: str | None = None
    max_remove_share: float = Field(default=0.2, ge=0.0, le=1.0)
    trigger: Literal["delete_ping", "schedule"] = "schedule"
    request_id: str | None = None


class DeletePage(BaseModel):
    """Remove a page from every shard; ``parent_job_id`` names the reconcile it is part of."""

    v: Literal[1] = 1
    job_id: str
    page_id: int
    parent_job_id: str | None = None
    request_id: str | None = None


class PageIndexed(BaseModel):
    """Event: a page's revision is searchable."""

    type: Literal["page.indexed"] = "page.indexed"
    page_id: int
    revision_id: int
    paragraphs: int
    indexed_at: datetime
    lag_s: float | None = None
    job_id: str | None = None


class PageDeleted(BaseModel):
    """Event: a page is gone from the index."""

    type: Literal["page.deleted"] = "page.deleted"
    page_id: int
    deleted_at: datetime
    reason: str = "deleted"
    job_id: str | None = None
