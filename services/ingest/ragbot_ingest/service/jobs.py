"""Retries of dead-lettered jobs: the stored command re-sent, or a reindex's failed batches."""

from __future__ import annotations

import logging

from pydantic import BaseModel, ValidationError

from ragbot.errors import JobNotRetryable, ValidationFailed
from ragbot.messaging.reindex import batch_job_id
from ragbot.observability.logging import get_request_id
from ragbot.schemas.jobs import JobKind, JobRecord, JobState
from ragbot.schemas.messages import (
    DELETE_PAGE_TASK,
    INDEX_PAGE_TASK,
    INDEX_PAGES_TASK,
    DeletePage,
    IndexPage,
    IndexPages,
)
from ragbot_ingest.service.ports import CommandSender, JobRepository
from ragbot_ingest.service.queueing import enqueue

logger = logging.getLogger(__name__)


async def retry_job(*, job_id: str, jobs: JobRepository, sender: CommandSender) -> JobRecord:
    """Re-send a dead-lettered job's stored command, under the current request id.

    A reindex or reconcile job is not itself on the dead letters: retrying it re-sends each of its
    failed batches.
    """
    current = await jobs.get(job_id=job_id)
    if current is not None and current.kind in (JobKind.reindex, JobKind.reconcile):
        return await _retry_reindex(record=current, jobs=jobs, sender=sender)
    record = await jobs.requeue(job_id=job_id)
    task, message = _command_of(record)
    await enqueue(jobs=jobs, sender=sender, record=record, task=task, message=message)
    logger.info("job re-queued", extra={"job_id": job_id, "kind": record.kind.value})
    return record


async def _retry_reindex(*, record: JobRecord, jobs: JobRepository, sender: CommandSender) -> JobRecord:
    count = int(record.payload.get("batches", 0))
    children = [await jobs.get(job_id=batch_job_id(record.job_id, n)) for n in range(count)]
    failed = [c for c in children if c is not None and c.state is JobState.failed]
    if not failed:
        raise JobNotRetryable(
            f"reindex job {record.job_id} has no failed batches to retry (it is {record.state.value})",
            field="state",
        )
    for child in failed:
        await retry_job(job_id=child.job_id, jobs=jobs, sender=sender)
    logger.info("reindex batches re-queued", extra={"job_id": record.job_id, "batches": len(failed)})
    return await jobs.update(job_id=record.job_id, state=JobState.running, error=None)


def _command_of(record: JobRecord) -> tuple[str, BaseModel]:
    payload = {**record.payload, "request_id": get_request_id()}
    try:
        if record.kind in (JobKind.index_page, JobKind.upload):
            return INDEX_PAGE_TASK, IndexPage.model_validate(payload)
        if record.kind is JobKind.index_pages:
            return INDEX_PAGES_TASK, IndexPages.model_validate(payload)
        if record.kind is JobKind.delete_page:
            return DELETE_PAGE_TASK, DeletePage.model_validate(payload)
    except ValidationError as exc:
        raise ValidationFailed(
            f"job {record.job_id} has an unreadable payload: {exc}", field="payload"
        ) from None
    raise ValidationFailed(f"jobs of kind {record.kind.value} cannot be retried here", field="kind")
