"""Bulk reindex decided: a JSONL body validated as it streams in, or a wiki listing, queued as batches."""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field
from tempfile import SpooledTemporaryFile
from typing import IO, Any

from ragbot.errors import BodyTooLarge, DependencyUnavailable, SourceError, SourceRefused, ValidationFailed
from ragbot.messaging.reindex import ReindexRequest, WikiLister, batch_job_id, batches, page_from_line
from ragbot.observability.logging import get_request_id
from ragbot.schemas.jobs import JobKind, JobRecord, JobState
from ragbot.schemas.messages import INDEX_PAGES_TASK, IndexPages, PageRef
from ragbot.schemas.pages import Page
from ragbot_ingest.service.ports import CommandSender, JobRepository
from ragbot_ingest.service.queueing import enqueue, new_job_id

logger = logging.getLogger(__name__)


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
    job_id = new_job_id()
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
            await enqueue(jobs=jobs, sender=sender, record=record, task=INDEX_PAGES_TASK, message=command)
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
