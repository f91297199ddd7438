"""In-memory stand-ins for ingest's job records and command sender (unit tests of the HTTP API)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel

from ragbot.errors import DependencyUnavailable, JobNotRetryable, NotFound
from ragbot.schemas.jobs import JobKind, JobRecord, JobState


class FakeJobs:
    """Job records in a dict, with the state rules of ragbot.messaging.jobs.JobStore (``up`` drives ping)."""

    def __init__(self) -> None:
        self.records: dict[str, JobRecord] = {}
        self.up = True

    async def ping(self) -> bool:
        return self.up

    async def create(
        self,
        *,
        kind: JobKind,
        payload: Mapping[str, Any] | None = None,
        page_id: int | None = None,
        revision_id: int | None = None,
        job_id: str | None = None,
    ) -> JobRecord:
        now = datetime.now(UTC)
        record = JobRecord(
            job_id=job_id or f"j{len(self.records)}",
            kind=kind,
            page_id=page_id,
            revision_id=revision_id,
            created_at=now,
            updated_at=now,
            payload=dict(payload or {}),
        )
        self.records[record.job_id] = record
        return record

    async def get(self, *, job_id: str) -> JobRecord | None:
        return self.records.get(job_id)

    async def update(
        self, *, job_id: str, state: JobState | None = None, error: str | None = None
    ) -> JobRecord:
        record = self.records[job_id].model_copy(
            update={"state": state or self.records[job_id].state, "error": error}
        )
        self.records[job_id] = record
        return record

    async def list_by_state(self, *, state: JobState, limit: int = 100, offset: int = 0) -> list[JobRecord]:
        return [r for r in self.records.values() if r.state is state][offset : offset + limit]

    async def requeue(self, *, job_id: str) -> JobRecord:
        record = self.records.get(job_id)
        if record is None:
            raise NotFound(f"job {job_id} not found")
        if record.state is not JobState.failed:
            raise JobNotRetryable(f"job {job_id} is {record.state.value}", field="state")
        record = record.model_copy(update={"state": JobState.queued, "attempts": 0})
        self.records[job_id] = record
        return record


@dataclass
class FakeSender:
    """Records what would have gone to the queue (task, message, request id); ``broken`` refuses."""

    sent: list[tuple[str, BaseModel, str | None]] = field(default_factory=list)
    broken: bool = False

    async def send(self, *, task: str, message: BaseModel, request_id: str | None = None) -> str:
        if self.broken:
            raise DependencyUnavailable("could not enqueue: connection refused", dependency="redis")
        self.sent.append((task, message, request_id))
        return f"t{len(self.sent)}"
