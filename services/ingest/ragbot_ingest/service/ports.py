"""What ingest's decisions need from outside: job records, upload ids and a command sender, as Protocols."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from pydantic import BaseModel

from ragbot.schemas.jobs import JobKind, JobRecord, JobState


class JobRepository(Protocol):
    """The job records ingest reads and writes (``ragbot.messaging.jobs.JobStore`` in production)."""

    async def ping(self) -> bool:
        """True when the repository answers."""

    async def create(
        self,
        *,
        kind: JobKind,
        payload: Mapping[str, Any] | None = None,
        page_id: int | None = None,
        revision_id: int | None = None,
        job_id: str | None = None,
    ) -> JobRecord:
        """Record a queued job."""

    async def get(self, *, job_id: str) -> JobRecord | None:
        """A job, or None."""

    async def update(
        self, *, job_id: str, state: JobState | None = None, error: str | None = None
    ) -> JobRecord:
        """Change a job's state."""

    async def list_by_state(self, *, state: JobState, limit: int = 100, offset: int = 0) -> list[JobRecord]:
        """Jobs in one state (failed: the dead letters)."""

    async def requeue(self, *, job_id: str) -> JobRecord:
        """Take a failed job off the dead letters, queued again."""


class UploadIds(Protocol):
    """Hands out one stable page id per upload key (``ragbot_ingest.upload_ids.RedisUploadIds``)."""

    async def page_id(self, *, key: str) -> int:
        """The key's page id, a new one the first time."""


class CommandSender(Protocol):
    """Sends commands to the embedder (``ragbot.messaging.queue.TaskSender`` in production)."""

    async def send(
        self, *, task: str, message: BaseModel, request_id: str | None = None, countdown: float | None = None
    ) -> str:
        """Publish one command (``countdown``: not before that many seconds); returns the task id."""
