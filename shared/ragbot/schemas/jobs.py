"""Job records: what the ingest API shows for each accepted request."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field


class JobState(StrEnum):
    """Lifecycle of a job."""

    queued = "queued"
    running = "running"
    retrying = "retrying"
    done = "done"
    skipped = "skipped"
    failed = "failed"


class JobKind(StrEnum):
    """What a job does."""

    index_page = "index_page"
    delete_page = "delete_page"
    reindex = "reindex"
    upload = "upload"
    index_pages = "index_pages"
    reembed = "reembed"
    drop_generation = "drop_generation"
    reconcile = "reconcile"


class JobRecord(BaseModel):
    """A job as stored in Redis and returned by ``GET /v1/jobs/{id}``."""

    job_id: str
    kind: JobKind
    state: JobState = JobState.queued
    page_id: int | None = None
    revision_id: int | None = None
    attempts: int = 0
    error: str | None = None
    detail: str | None = None
    created_at: datetime
    updated_at: datetime
    progress: dict[str, int] = Field(default_factory=dict)
    payload: dict[str, Any] = Field(default_factory=dict, description="the command, to retry it")
