"""The one test fake of ``ragbot.messaging.jobs.JobStore``: job records in a dict, every change recorded."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from ragbot.errors import JobNotRetryable, NotFound
from ragbot.schemas.jobs import JobKind, JobRecord, JobState

_UNSET: Any = object()


class FakeJobs:
    """Job records in ``records``, with the state rules of ``JobStore`` (``up`` drives ping).

    Every ``update`` and ``dead_letter`` is also logged (``updates``, ``dead``), and every ``get``
    (``gets``), before a job nobody created raises ``NotFound`` as in ``JobStore``; ``seed`` puts
    a record in place for tests that never go through ``create``.
    """

    def __init__(self) -> None:
        self.records: dict[str, JobRecord] = {}
        self.up = True
        self.updates: list[dict[str, Any]] = []
        self.dead: list[dict[str, Any]] = []
        self.gets: list[str] = []

    async def ping(self) -> bool:
        """Whether the fake Redis is up."""
        return self.up

    def seed(self, *, job_id: str, kind: JobKind = JobKind.index_page, **fields: Any) -> JobRecord:
        """Put a record in place without awaiting (for synchronous fixtures)."""
        now = datetime.now(UTC)
        record = JobRecord(job_id=job_id, kind=kind, created_at=now, updated_at=now, **fields)
        self.records[job_id] = record
        return record

    async def create(
        self,
        *,
        kind: JobKind,
        payload: Mapping[str, Any] | None = None,
        page_id: int | None = None,
        revision_id: int | None = None,
        job_id: str | None = None,
    ) -> JobRecord:
        """A queued record, ``j<n>`` unless ``job_id`` is given."""
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
        """A record, or None when unknown."""
        self.gets.append(job_id)
        return self.records.get(job_id)

    async def get_many(self, *, job_ids: Sequence[str]) -> list[JobRecord | None]:
        """Records by id, in the order asked."""
        return [self.records.get(i) for i in job_ids]

    async def update(
        self,
        *,
        job_id: str,
        state: JobState | None = None,
        attempts: int | None = None,
        error: str | None = _UNSET,
        detail: str | None = _UNSET,
        revision_id: int | None = None,
        progress: Mapping[str, int] | None = None,
        payload: Mapping[str, Any] | None = None,
    ) -> JobRecord:
        """Log the change, then apply it as ``JobStore.update`` does; NotFound for an unknown job."""
        given = {
            "state": state,
            "attempts": attempts,
            "error": error,
            "detail": detail,
            "revision_id": revision_id,
            "progress": progress,
            "payload": payload,
        }
        unset = {"error", "detail"}
        changes = {k: v for k, v in given.items() if (v is not _UNSET if k in unset else v is not None)}
        self.updates.append({"job_id": job_id, **changes})
        record = self._known(job_id)
        data: dict[str, Any] = {**changes, "updated_at": datetime.now(UTC)}
        if progress is not None:
            data["progress"] = {**record.progress, **progress}
        if payload is not None:
            data["payload"] = dict(payload)
        self.records[job_id] = record.model_copy(update=data)
        return self.records[job_id]

    async def dead_letter(self, *, job_id: str, error: str, attempts: int) -> JobRecord:
        """Log the dead letter and mark the job failed for good; NotFound for an unknown job."""
        self.dead.append({"job_id": job_id, "error": error, "attempts": attempts})
        record = self._known(job_id)
        self.records[job_id] = record.model_copy(
            update={"state": JobState.failed, "error": error, "attempts": attempts}
        )
        return self.records[job_id]

    async def list_by_state(self, *, state: JobState, limit: int = 100, offset: int = 0) -> list[JobRecord]:
        """Records in ``state``, in creation order."""
        return [r for r in self.records.values() if r.state is state][offset : offset + limit]

    async def requeue(self, *, job_id: str) -> JobRecord:
        """A failed job queued again; NotFound or JobNotRetryable otherwise."""
        record = self.records.get(job_id)
        if record is None:
            raise NotFound(f"job {job_id} not found")
        if record.state is not JobState.failed:
            raise JobNotRetryable(f"job {job_id} is {record.state.value}", field="state")
        record = record.model_copy(update={"state": JobState.queued, "attempts": 0})
        self.records[job_id] = record
        return record

    async def aggregate(
        self,
        *,
        job_id: str,
        children: Sequence[str],
        combine: Callable[[JobRecord, list[JobRecord | None]], JobRecord],
    ) -> JobRecord:
        """Rewrite a parent record from its children's; NotFound for an unknown parent."""
        self.records[job_id] = combine(self._known(job_id), [self.records.get(c) for c in children])
        return self.records[job_id]

    def _known(self, job_id: str) -> JobRecord:
        record = self.records.get(job_id)
        if record is None:
            raise NotFound(f"job {job_id} not found")
        return record
