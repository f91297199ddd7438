"""What ingest decides: which requests become jobs and commands. No HTTP, no vendor types here."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from pydantic import BaseModel, ValidationError

from ragbot.errors import DependencyUnavailable, SourceRefused, ValidationFailed
from ragbot.observability.logging import get_request_id
from ragbot.ports import SearchStore
from ragbot.schemas.jobs import JobKind, JobRecord, JobState
from ragbot.schemas.messages import DELETE_PAGE_TASK, INDEX_PAGE_TASK, DeletePage, IndexPage
from ragbot.schemas.pages import Page, PageChangedPing, PageState
from ragbot.sources.wiki import check_callback_url

logger = logging.getLogger(__name__)


class JobRepository(Protocol):
    """The job records ingest reads and writes (``ragbot.jobs.JobStore`` in production)."""

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


class CommandSender(Protocol):
    """Sends commands to the embedder (``ragbot.queue.TaskSender`` in production)."""

    async def send(self, *, task: str, message: BaseModel, request_id: str | None = None) -> str:
        """Publish one command; returns the task id."""


def _new_job_id() -> str:
    return uuid.uuid4().hex


async def _enqueue(
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


async def accept_ping(
    *, ping: PageChangedPing, allowed_hosts: Sequence[str], jobs: JobRepository, sender: CommandSender
) -> JobRecord:
    """Queue a fetch-and-index for a wiki ping, refusing callback hosts we do not trust (no SSRF)."""
    try:
        check_callback_url(ping.callback_url, allowed_hosts)
    except SourceRefused as exc:
        raise ValidationFailed(str(exc), field="callback_url") from None
    job_id = _new_job_id()
    command = IndexPage(
        job_id=job_id,
        page_id=ping.page_id,
        revision_id=ping.revision_id,
        revision_date=ping.revision_date,
        callback_url=ping.callback_url,
        request_id=get_request_id(),
    )
    record = await jobs.create(
        kind=JobKind.index_page,
        payload=command.model_dump(mode="json"),
        page_id=ping.page_id,
        revision_id=ping.revision_id,
        job_id=job_id,
    )
    await _enqueue(jobs=jobs, sender=sender, record=record, task=INDEX_PAGE_TASK, message=command)
    logger.info(
        "ping accepted", extra={"job_id": job_id, "page_id": ping.page_id, "revision_id": ping.revision_id}
    )
    return record


async def accept_push(*, page: Page, jobs: JobRepository, sender: CommandSender) -> JobRecord:
    """Queue indexing of a page whose content came inline (wikis and CMSs without a content API)."""
    if "source" not in page.model_fields_set:
        page = page.model_copy(update={"source": "push"})
    job_id = _new_job_id()
    command = IndexPage(
        job_id=job_id,
        page_id=page.page_id,
        revision_id=page.revision_id,
        revision_date=page.revision_date,
        page=page,
        request_id=get_request_id(),
    )
    record = await jobs.create(
        kind=JobKind.index_page,
        payload=command.model_dump(mode="json"),
        page_id=page.page_id,
        revision_id=page.revision_id,
        job_id=job_id,
    )
    await _enqueue(jobs=jobs, sender=sender, record=record, task=INDEX_PAGE_TASK, message=command)
    return record


async def accept_delete(*, page_id: int, jobs: JobRepository, sender: CommandSender) -> JobRecord:
    """Queue removal of a page from every shard."""
    job_id = _new_job_id()
    command = DeletePage(job_id=job_id, page_id=page_id, request_id=get_request_id())
    record = await jobs.create(
        kind=JobKind.delete_page, payload=command.model_dump(mode="json"), page_id=page_id, job_id=job_id
    )
    await _enqueue(jobs=jobs, sender=sender, record=record, task=DELETE_PAGE_TASK, message=command)
    return record


async def retry_job(*, job_id: str, jobs: JobRepository, sender: CommandSender) -> JobRecord:
    """Re-send a dead-lettered job's stored command, under the current request id."""
    record = await jobs.requeue(job_id=job_id)
    task, message = _command_of(record)
    await _enqueue(jobs=jobs, sender=sender, record=record, task=task, message=message)
    logger.info("job re-queued", extra={"job_id": job_id, "kind": record.kind.value})
    return record


def _command_of(record: JobRecord) -> tuple[str, BaseModel]:
    payload = {**record.payload, "request_id": get_request_id()}
    try:
        if record.kind is JobKind.index_page:
            return INDEX_PAGE_TASK, IndexPage.model_validate(payload)
        if record.kind is JobKind.delete_page:
            return DELETE_PAGE_TASK, DeletePage.model_validate(payload)
    except ValidationError as exc:
        raise ValidationFailed(
            f"job {record.job_id} has an unreadable payload: {exc}", field="payload"
        ) from None
    raise ValidationFailed(f"jobs of kind {record.kind.value} cannot be retried here", field="kind")


async def page_state(*, store: SearchStore, page_id: int) -> PageState | None:
    """What the index holds for a page (revision, paragraphs per model, last update)."""
    return await store.page_state(page_id=page_id)
