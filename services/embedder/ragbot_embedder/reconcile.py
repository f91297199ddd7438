"""The worker's reconcile: the wiki's page list against the index, after delete pings and on a schedule.

ChatbotRagContent's delete ping names no page (``page_id: 0``), so ingest answers it by sending this
command (one per burst of pings, ``ragbot.messaging.reconcile_trigger``); Celery beat sends it too
(``ragbot.messaging.reconcile_schedule``), as the safety net for pings lost while ragbot was down.
The plan is ``ragbot.messaging.reconcile``'s: unlisted pages are removed, listed pages the index lacks
(or holds at an older revision) are fetched and indexed when a content API is known. The guard holds
as for ``POST /v1/reconcile``: over ``max_remove_share`` nothing is removed and the job says which
pages and how to confirm.
"""

from __future__ import annotations

import logging

from ragbot.messaging.reconcile import guard_refusal, plan_reconcile
from ragbot.messaging.reindex import batches
from ragbot.schemas.jobs import JobKind, JobState
from ragbot.schemas.messages import DeletePage, IndexPages, PageRef, ReconcileWiki
from ragbot_embedder.service import IndexingContext, Outcome, delete_page, index_pages

logger = logging.getLogger(__name__)

_BATCH_PAGES = 32
_NAMED = 20


async def reconcile_wiki(*, ctx: IndexingContext, command: ReconcileWiki, final: bool = True) -> Outcome:
    """Remove the pages the wiki's list no longer names; index listed pages the index lacks or holds older."""
    if await ctx.jobs.get(job_id=command.job_id) is None:  # the scheduled run has no record yet
        await ctx.jobs.create(
            kind=JobKind.reconcile, payload=command.model_dump(mode="json"), job_id=command.job_id
        )
    if ctx.lister is None:
        return Outcome(JobState.skipped, "this worker has no page-list reader")
    listed: dict[int, int] = {}
    async for page in ctx.lister.pages(list_url=command.list_url):
        listed[page.page_id] = max(page.revision_id, listed.get(page.page_id, 0))
    store = await ctx.ready_store()
    plan = plan_reconcile(listed=listed, indexed=await store.page_revisions())
    summary = {
        "listed": plan.listed,
        "indexed": plan.indexed,
        "remove": len(plan.remove),
        "queue": len(plan.queue),
    }
    refusal = guard_refusal(plan, max_remove_share=command.max_remove_share)
    if refusal is not None:
        logger.warning("reconcile refused by its guard", extra={"trigger": command.trigger, **summary})
        return Outcome(JobState.skipped, refusal, payload=summary)
    for page_id in plan.remove:
        await delete_page(ctx=ctx, command=DeletePage(job_id=command.job_id, page_id=page_id))
    indexed = 0
    failed: list[str] = []
    if plan.queue and command.callback_url:
        refs = [
            PageRef(page_id=p, revision_id=plan.revisions[p], callback_url=command.callback_url)
            for p in plan.queue
        ]
        for chunk in batches(refs, _BATCH_PAGES):
            outcome = await index_pages(
                ctx=ctx, command=IndexPages(job_id=command.job_id, refs=chunk), final=final
            )
            indexed += int((outcome.progress or {}).get("done", 0))
            failed.extend(x for x in (outcome.error, outcome.retry) if x)
    removed = ", ".join(str(p) for p in plan.remove[:_NAMED]) + (" ..." if len(plan.remove) > _NAMED else "")
    detail = (
        f"{command.trigger}: listed {plan.listed}, indexed {plan.indexed}; removed {len(plan.remove)}"
        f"{' (' + removed + ')' if plan.remove else ''}; indexed {indexed} of {len(plan.queue)} to index"
    )
    if plan.queue and not command.callback_url:
        detail += " (no content API known: set RAGBOT_INGEST_WIKI_CALLBACK_URL)"
    if failed:
        detail += "; failed: " + "; ".join(failed)
    logger.info("reconcile done", extra={"trigger": command.trigger, **summary})
    return Outcome(JobState.done, detail, payload=summary)
