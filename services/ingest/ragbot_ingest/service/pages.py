"""Single-page requests decided: wiki pings (callback hosts checked), pushes, deletes, page state."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from ragbot.errors import SourceRefused, ValidationFailed
from ragbot.observability.logging import get_request_id
from ragbot.ports import SearchStore
from ragbot.schemas.jobs import JobKind, JobRecord
from ragbot.schemas.messages import DELETE_PAGE_TASK, DeletePage, IndexPage
from ragbot.schemas.pages import Page, PageChangedPing, PageState
from ragbot.sources.wiki import check_callback_url
from ragbot_ingest.service.ports import CommandSender, JobRepository
from ragbot_ingest.service.queueing import enqueue, new_job_id, queue_index_page

logger = logging.getLogger(__name__)


async def accept_ping(
    *, ping: PageChangedPing, allowed_hosts: Sequence[str], jobs: JobRepository, sender: CommandSender
) -> JobRecord:
    """Queue a fetch-and-index for a wiki ping, refusing callback hosts we do not trust (no SSRF)."""
    try:
        check_callback_url(ping.callback_url, allowed_hosts)
    except SourceRefused as exc:
        raise ValidationFailed(str(exc), field="callback_url") from None
    command = IndexPage(
        job_id=new_job_id(),
        page_id=ping.page_id,
        revision_id=ping.revision_id,
        revision_date=ping.revision_date,
        callback_url=ping.callback_url,
        request_id=get_request_id(),
    )
    record = await queue_index_page(command=command, kind=JobKind.index_page, jobs=jobs, sender=sender)
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
        job_id=new_job_id(),
        page_id=page.page_id,
        revision_id=page.revision_id,
        revision_date=page.revision_date,
        page=page,
        request_id=get_request_id(),
    )
    return await queue_index_page(command=command, kind=JobKind.index_page, jobs=jobs, sender=sender)


async def accept_delete(*, page_id: int, jobs: JobRepository, sender: CommandSender) -> JobRecord:
    """Queue removal of a page from every shard."""
    job_id = new_job_id()
    command = DeletePage(job_id=job_id, page_id=page_id, request_id=get_request_id())
    record = await jobs.create(
        kind=JobKind.delete_page, payload=command.model_dump(mode="json"), page_id=page_id, job_id=job_id
    )
    await enqueue(jobs=jobs, sender=sender, record=record, task=DELETE_PAGE_TASK, message=command)
    return record


async def page_state(*, store: SearchStore, page_id: int) -> PageState | None:
    """What the index holds for a page (revision, paragraphs per model, last update)."""
    return await store.page_state(page_id=page_id)


async def list_pages(*, store: SearchStore, limit: int, offset: int) -> tuple[list[PageState], int]:
    """A window of the indexed pages and the index's paragraph count, for the documents page."""
    pages = await store.list_pages(limit=limit, offset=offset)
    return pages, await store.count()
