"""What ingest decides: which requests become jobs and commands. No HTTP, no vendor types here."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from tempfile import SpooledTemporaryFile
from typing import IO, Any, Protocol

from pydantic import BaseModel, ValidationError

from ragbot.errors import (
    BodyTooLarge,
    DependencyUnavailable,
    JobNotRetryable,
    SourceError,
    SourceRefused,
    UploadsRefused,
    ValidationFailed,
)
from ragbot.indexing.folder import content_revision
from ragbot.messaging.reindex import ReindexRequest, WikiLister, batch_job_id, batches, page_from_line
from ragbot.observability.logging import get_request_id
from ragbot.ports import SearchStore
from ragbot.schemas.jobs import JobKind, JobRecord, JobState
from ragbot.schemas.messages import (
    DELETE_PAGE_TASK,
    INDEX_PAGE_TASK,
    INDEX_PAGES_TASK,
    DeletePage,
    IndexPage,
    IndexPages,
    PageRef,
)
from ragbot.schemas.pages import Page, PageChangedPing, PageState
from ragbot.sources.files import parse_upload
from ragbot.sources.wiki import check_callback_url

logger = logging.getLogger(__name__)


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
    """Hands out one stable page id per upload key (``ragbot_ingest.uploads.RedisUploadIds``)."""

    async def page_id(self, *, key: str) -> int:
        """The key's page id, a new one the first time."""


class CommandSender(Protocol):
    """Sends commands to the embedder (``ragbot.messaging.queue.TaskSender`` in production)."""

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


async def _queue_index_page(
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
    await _enqueue(jobs=jobs, sender=sender, record=record, task=INDEX_PAGE_TASK, message=command)
    return record


async def accept_ping(
    *, ping: PageChangedPing, allowed_hosts: Sequence[str], jobs: JobRepository, sender: CommandSender
) -> JobRecord:
    """Queue a fetch-and-index for a wiki ping, refusing callback hosts we do not trust (no SSRF)."""
    try:
        check_callback_url(ping.callback_url, allowed_hosts)
    except SourceRefused as exc:
        raise ValidationFailed(str(exc), field="callback_url") from None
    command = IndexPage(
        job_id=_new_job_id(),
        page_id=ping.page_id,
        revision_id=ping.revision_id,
        revision_date=ping.revision_date,
        callback_url=ping.callback_url,
        request_id=get_request_id(),
    )
    record = await _queue_index_page(command=command, kind=JobKind.index_page, jobs=jobs, sender=sender)
    logger.info(
        "ping accepted",
        extra={"job_id": record.job_id, "page_id": ping.page_id, "revision_id": ping.revision_id},
    )
    return record


async def accept_push(*, page: Page, jobs: JobRepository, sender: CommandSender) -> JobRecord:
    """Queue indexing of a page whose content came inline (wikis and CMSs without a content API)."""
    if "source" not in page.model_fields_set:
        page = page.model_copy(update={"source": "push"})
    command = IndexPage(
        job_id=_new_job_id(),
        page_id=page.page_id,
        revision_id=page.revision_id,
        revision_date=page.revision_date,
        page=page,
        request_id=get_request_id(),
    )
    return await _queue_index_page(command=command, kind=JobKind.index_page, jobs=jobs, sender=sender)


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
    """Re-send a dead-lettered job's stored command, under the current request id.

    A reindex job is not itself on the dead letters: retrying it re-sends each of its failed batches.
    """
    current = await jobs.get(job_id=job_id)
    if current is not None and current.kind is JobKind.reindex:
        return await _retry_reindex(record=current, jobs=jobs, sender=sender)
    record = await jobs.requeue(job_id=job_id)
    task, message = _command_of(record)
    await _enqueue(jobs=jobs, sender=sender, record=record, task=task, message=message)
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


# --- uploads ----------------------------------------------------------------------------------------


@dataclass(slots=True)
class Upload:
    """One uploaded file and the key it is indexed under (its file name unless given)."""

    filename: str
    data: bytes
    key: str | None = None


@dataclass(slots=True)
class AcceptedUpload:
    """An upload that became a job."""

    filename: str
    key: str
    page: Page
    record: JobRecord


async def accept_uploads(
    *,
    uploads: Sequence[Upload],
    max_bytes: int,
    ids: UploadIds,
    jobs: JobRepository,
    sender: CommandSender,
) -> list[AcceptedUpload]:
    """Parse every file (refusing all with the reasons when one cannot be indexed), then queue each.

    Files are parsed here, off the event loop, so a corrupt file, an empty one or a zip bomb gets a
    clear 4xx now rather than a failed job later. The revision id is a hash of the bytes: the same
    file again is a no-op, a changed file under the same key replaces the old one.
    """
    if not uploads:
        raise ValidationFailed("send one or more files in 'file' parts", field="file")
    parsed: list[tuple[Upload, Page]] = []
    refused: list[tuple[int, str]] = []
    for index, upload in enumerate(uploads):
        try:
            page = await asyncio.to_thread(_parse_one, upload, max_bytes=max_bytes)
        except ValidationFailed as exc:
            refused.append((index, str(exc)))
            continue
        parsed.append((upload, page))
    if refused:
        raise UploadsRefused(refused)
    accepted: list[AcceptedUpload] = []
    for upload, page in parsed:
        key = page.url or upload.filename
        page_id = await ids.page_id(key=key)
        page = page.model_copy(update={"page_id": page_id})
        command = IndexPage(
            job_id=_new_job_id(),
            page_id=page_id,
            revision_id=page.revision_id,
            revision_date=page.revision_date,
            page=page,
            request_id=get_request_id(),
        )
        record = await _queue_index_page(command=command, kind=JobKind.upload, jobs=jobs, sender=sender)
        accepted.append(AcceptedUpload(filename=upload.filename, key=key, page=page, record=record))
        logger.info("upload accepted", extra={"job_id": record.job_id, "page_id": page_id, "key": key})
    return accepted


def _parse_one(upload: Upload, *, max_bytes: int) -> Page:
    from ragbot_ingest.uploads import clean_key

    key = clean_key(upload.key if upload.key is not None else upload.filename or "upload")
    digest = hashlib.sha256(upload.data).hexdigest()
    return parse_upload(
        upload.data,
        filename=upload.filename or key,
        max_bytes=max_bytes,
        page_id=0,
        revision_id=content_revision(digest),
        url=key,
        source="upload",
    )


# --- bulk reindex -----------------------------------------------------------------------------------


@dataclass(slots=True)
class SpooledPages:
    """Validated pages of a JSONL body, one JSON line each, spooled to disk past a few MB."""

    file: IO[bytes] = field(
        default_factory=lambda: SpooledTemporaryFile(max_size=8 * 1024 * 1024)  # noqa: SIM115
    )
    count: int = 0

    def add(self, page: Page) -> None:
        self.file.write(page.model_dump_json().encode("utf-8") + b"\n")
        self.count += 1

    def __iter__(self) -> Iterator[Page]:
        self.file.seek(0)
        for line in self.file:
            yield Page.model_validate_json(line)

    def close(self) -> None:
        self.file.close()


async def read_jsonl_pages(
    chunks: AsyncIterator[bytes], *, max_bytes: int, max_line_bytes: int, max_pages: int, max_errors: int = 20
) -> SpooledPages:
    """Validate a JSONL body line by line while it streams in; refuse it whole, naming the bad lines."""
    pages = SpooledPages()
    errors: list[str] = []
    buffer = b""
    received = 0
    line_number = 0

    def take(line: bytes) -> None:
        nonlocal line_number
        line_number += 1
        if len(line) > max_line_bytes:
            raise BodyTooLarge(
                f"line {line_number} is over the {max_line_bytes}-byte limit of a page", field="body"
            )
        if not line.strip() or len(errors) >= max_errors:
            return
        try:
            pages.add(page_from_line(line, line_number=line_number))
        except ValidationFailed as exc:
            errors.append(str(exc))
        if pages.count > max_pages:
            raise BodyTooLarge(f"more than {max_pages} pages in one reindex", field="body")

    try:
        async for chunk in chunks:
            received += len(chunk)
            if received > max_bytes:
                raise BodyTooLarge(f"the body is over the {max_bytes}-byte limit", field="body")
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                take(line)
            if len(buffer) > max_line_bytes:
                raise BodyTooLarge(
                    f"line {line_number + 1} is over the {max_line_bytes}-byte limit of a page", field="body"
                )
        take(buffer)
    except BaseException:
        pages.close()
        raise
    if errors:
        pages.close()
        more = " (and maybe more)" if len(errors) >= max_errors else ""
        raise ValidationFailed("; ".join(errors) + more, field="body")
    if pages.count == 0:
        pages.close()
        raise ValidationFailed("the body holds no pages (one content-API JSON object per line)", field="body")
    return pages


async def accept_reindex_pages(
    *, pages: SpooledPages, batch_pages: int, force: bool, jobs: JobRepository, sender: CommandSender
) -> JobRecord:
    """Queue a reindex of inline pages: one parent job, one batch message per ``batch_pages`` pages."""
    return await _start_reindex(
        items=iter(pages),
        total=pages.count,
        batch_pages=batch_pages,
        force=force,
        summary={"source": "jsonl"},
        jobs=jobs,
        sender=sender,
    )


async def accept_reindex_wiki(
    *,
    request: ReindexRequest,
    lister: WikiLister,
    batch_pages: int,
    jobs: JobRepository,
    sender: CommandSender,
) -> JobRecord:
    """List the wiki now, then queue a reindex of every listed page (fetched by the worker)."""
    try:
        refs = await lister.refs(list_url=request.list_url, callback_url=request.callback_url)
    except SourceRefused as exc:
        raise ValidationFailed(str(exc), field="list_url") from None
    except SourceError as exc:
        raise DependencyUnavailable(f"the wiki listing failed: {exc}", dependency="wiki") from None
    if not refs:
        raise ValidationFailed("the listing names no pages", field="list_url")
    return await _start_reindex(
        items=iter(refs),
        total=len(refs),
        batch_pages=batch_pages,
        force=request.force,
        summary={"source": "wiki", "list_url": request.list_url, "callback_url": request.callback_url},
        jobs=jobs,
        sender=sender,
    )


async def _start_reindex(
    *,
    items: Iterator[Page | PageRef],
    total: int,
    batch_pages: int,
    force: bool,
    summary: Mapping[str, Any],
    jobs: JobRepository,
    sender: CommandSender,
) -> JobRecord:
    job_id = _new_job_id()
    count = math.ceil(total / batch_pages)
    payload = {**summary, "total": total, "batches": count, "force": force}
    parent = await jobs.create(kind=JobKind.reindex, payload=payload, job_id=job_id)
    parent = await jobs.update(job_id=job_id, state=JobState.running)
    rid = get_request_id()
    for number, chunk in enumerate(batches(items, batch_pages)):
        command = IndexPages(
            job_id=batch_job_id(job_id, number),
            parent_job_id=job_id,
            batch=number,
            pages=[i for i in chunk if isinstance(i, Page)],
            refs=[i for i in chunk if isinstance(i, PageRef)],
            force=force,
            request_id=rid,
        )
        record = await jobs.create(
            kind=JobKind.index_pages, payload=command.model_dump(mode="json"), job_id=command.job_id
        )
        try:
            await _enqueue(jobs=jobs, sender=sender, record=record, task=INDEX_PAGES_TASK, message=command)
        except DependencyUnavailable as exc:
            try:
                await jobs.update(
                    job_id=job_id, state=JobState.failed, error=f"batch {number} of {count} not queued: {exc}"
                )
            except DependencyUnavailable:
                logger.warning("could not record the reindex failure", extra={"job_id": job_id})
            raise
    logger.info("reindex queued", extra={"job_id": job_id, "pages": total, "batches": count, **summary})
    return parent


async def page_state(*, store: SearchStore, page_id: int) -> PageState | None:
    """What the index holds for a page (revision, paragraphs per model, last update)."""
    return await store.page_state(page_id=page_id)


async def list_pages(*, store: SearchStore, limit: int, offset: int) -> tuple[list[PageState], int]:
    """A window of the indexed pages and the index's paragraph count, for the documents page."""
    pages = await store.list_pages(limit=limit, offset=offset)
    return pages, await store.count()
