"""Reconcile decided: the wiki's list against the index, missing pages queued, unlisted ones removed."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from ragbot.errors import DependencyUnavailable, SourceError, SourceRefused, ValidationFailed
from ragbot.messaging.reconcile import (
    ReconcilePlan,
    ReconcileRequest,
    check_guard,
    parse_listing,
    plan_reconcile,
)
from ragbot.messaging.reindex import WikiLister, batch_job_id, batches
from ragbot.observability.logging import get_request_id
from ragbot.ports import SearchStore
from ragbot.schemas.jobs import JobKind, JobRecord, JobState
from ragbot.schemas.messages import DELETE_PAGE_TASK, INDEX_PAGES_TASK, DeletePage, IndexPages, PageRef
from ragbot.sources.wiki import check_callback_url
from ragbot_ingest.service.ports import CommandSender, JobRepository
from ragbot_ingest.service.queueing import enqueue, new_job_id

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class ReconcileOutcome:
    """The plan, and the job carrying it out (None for a dry run)."""

    plan: ReconcilePlan
    job: JobRecord | None


async def accept_reconcile(
    *,
    request: ReconcileRequest,
    store: SearchStore,
    lister: WikiLister,
    allowed_hosts: Sequence[str],
    max_remove_share: float,
    batch_pages: int,
    max_pages: int,
    jobs: JobRepository,
    sender: CommandSender,
) -> ReconcileOutcome:
    """Plan a reconcile and, unless a dry run, queue it under one job; the guard runs first either way."""
    listed = await _listed(request=request, lister=lister, max_pages=max_pages)
    plan = plan_reconcile(listed=listed, indexed=await store.page_revisions())
    if not request.dry_run:  # a dry run shows the plan, and the guard's word on it, whatever it holds
        check_guard(plan, max_remove_share=max_remove_share, force=request.force)
    if plan.queue and not request.dry_run:
        if request.callback_url is None:
            raise ValidationFailed(
                f"{len(plan.queue)} pages are to be indexed: give the callback_url they are fetched from",
                field="callback_url",
            )
        try:
            check_callback_url(request.callback_url, allowed_hosts)
        except SourceRefused as exc:
            raise ValidationFailed(str(exc), field="callback_url") from None
    summary = {
        "listed": plan.listed,
        "indexed": plan.indexed,
        "missing": len(plan.missing),
        "stale": len(plan.stale),
        "remove": len(plan.remove),
    }
    logger.info("reconcile planned", extra={"dry_run": request.dry_run, **summary})
    if request.dry_run:
        return ReconcileOutcome(plan=plan, job=None)
    job = await _start(
        plan=plan, request=request, summary=summary, batch_pages=batch_pages, jobs=jobs, sender=sender
    )
    return ReconcileOutcome(plan=plan, job=job)


async def _listed(*, request: ReconcileRequest, lister: WikiLister, max_pages: int) -> dict[int, int]:
    if request.list_url is None:
        listed = parse_listing(request.listing)
    else:
        listed = {}
        try:
            async for page in lister.pages(list_url=request.list_url):
                listed[page.page_id] = max(page.revision_id, listed.get(page.page_id, 0))
                if len(listed) > max_pages:
                    raise ValidationFailed(f"the listing names more than {max_pages} pages", field="list_url")
        except SourceRefused as exc:
            raise ValidationFailed(str(exc), field="list_url") from None
        except SourceError as exc:
            raise DependencyUnavailable(f"the wiki listing failed: {exc}", dependency="wiki") from None
    if len(listed) > max_pages:
        raise ValidationFailed(f"the list names more than {max_pages} pages", field="listing")
    return listed


async def _start(
    *,
    plan: ReconcilePlan,
    request: ReconcileRequest,
    summary: dict[str, int],
    batch_pages: int,
    jobs: JobRepository,
    sender: CommandSender,
) -> JobRecord:
    """One parent job; index batches ``-b0..`` first, then one delete per removed page, all its batches."""
    job_id = new_job_id()
    rid = get_request_id()
    callback = request.callback_url or ""
    index_batches = list(batches(plan.queue, batch_pages))
    count = len(index_batches) + len(plan.remove)
    total = len(plan.queue) + len(plan.remove)
    payload = {
        **summary,
        "total": total,
        "batches": count,
        "source": "list_url" if request.list_url else "listing",
    }
    await jobs.create(kind=JobKind.reconcile, payload=payload, job_id=job_id)
    parent = await jobs.update(
        job_id=job_id,
        state=JobState.running if count else JobState.done,
        error=None,
    )
    number = 0
    try:
        for chunk in index_batches:
            refs = [PageRef(page_id=p, revision_id=plan.revisions[p], callback_url=callback) for p in chunk]
            command = IndexPages(
                job_id=batch_job_id(job_id, number),
                parent_job_id=job_id,
                batch=number,
                refs=refs,
                request_id=rid,
            )
            record = await jobs.create(
                kind=JobKind.index_pages, payload=command.model_dump(mode="json"), job_id=command.job_id
            )
            await enqueue(jobs=jobs, sender=sender, record=record, task=INDEX_PAGES_TASK, message=command)
            number += 1
        for page_id in plan.remove:
            delete = DeletePage(
                job_id=batch_job_id(job_id, number), page_id=page_id, parent_job_id=job_id, request_id=rid
            )
            record = await jobs.create(
                kind=JobKind.delete_page,
                payload=delete.model_dump(mode="json"),
                page_id=page_id,
                job_id=delete.job_id,
            )
            await enqueue(jobs=jobs, sender=sender, record=record, task=DELETE_PAGE_TASK, message=delete)
            number += 1
    except DependencyUnavailable as exc:
        try:
            await jobs.update(
                job_id=job_id, state=JobState.failed, error=f"batch {number} of {count} not queued: {exc}"
            )
        except DependencyUnavailable:
            logger.warning("could not record the reconcile failure", extra={"job_id": job_id})
        raise
    logger.info("reconcile queued", extra={"job_id": job_id, "batches": count, **summary})
    return parent
