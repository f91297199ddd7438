"""What ragbot reads from a MediaWiki's core Action API: page states, changes and the poll cursor."""

from __future__ import annotations

from pydantic import BaseModel, Field


class WikiPageState(BaseModel):
    """A page as the wiki has it now: gone pages have ``exists`` False, redirects are never indexed."""

    page_id: int = Field(ge=1)
    title: str = ""
    namespace: int = 0
    revision_id: int = Field(default=0, ge=0)
    exists: bool = True
    redirect: bool = False


class WikiCursor(BaseModel):
    """Where polling recent changes resumes: the last change read (its id and timestamp)."""

    rcid: int = Field(default=0, ge=0)
    timestamp: str = Field(default="", description="ISO 8601 UTC, as the wiki writes it")


class WikiChanges(BaseModel):
    """Page ids that recent changes touched since a cursor, and the cursor after them."""

    page_ids: list[int] = Field(default_factory=list)
    cursor: WikiCursor
