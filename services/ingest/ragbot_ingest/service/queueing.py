"""A job recorded before its command is sent, so a retry can re-send it and a failed send shows on the job."""

from __future__ import annotations

import logging
import uuid

from pydantic import BaseModel

from ragbot.errors import DependencyUnavailable
from ragbot.observability.logging import get_request_id
from ragbot.schemas.jobs import JobKind, JobRecord, JobState
from ragbot.schemas.messages import INDEX_PAGE_TASK, IndexPage
from ragbot_ingest.service.ports import CommandSender, JobRepository

logger = logging.getLogger(__name__)


def new_job_id() -> str:
    """A fresh random id for a new job (a retried job keeps its own)."""
    return uuid.uuid4().hex


async def enqueue(
    *, jobs: JobRepository, sender: CommandSender, record: JobRecord, task: str, message: BaseModel
) -> None:
    """Send a job's command; when the broker is down, say so on the job too."""
    try:
        await sender.send(task=task, message=message, request_id=get_request_id())
    except DependencyUnavailable as exc:
        try:
            await jobs.update(job_id=record.job_id, state=JobState.failed, error=f"not queued: {exc}")
        except DependencyUnavailable:
            logger.warning("could not record the enqueue failure", extra={"job_id": record.job_id})
        raise


async def queue_index_page(
    *, command: IndexPage, kind: JobKind, jobs: JobRepository, sender: CommandSender
) -> JobRecord:
    """Record the job first, with its command as payload (so a retry can re-send it), then send it."""
    record = await jobs.create(
        kind=kind,
        payload=command.model_dump(mode="json"),
        page_id=command.page_id,
        revision_id=command.revision_id,
        job_id=command.job_id,
    )
    await enqueue(jobs=jobs, sender=sender, record=record, task=INDEX_PAGE_TASK, message=command)
    return record
