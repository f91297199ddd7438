"""The worker's MediaWiki poll: beat's ``embedder.poll_mediawiki`` runs ``ragbot.messaging.wiki_poll`` once.

The poll's index and delete commands run here at once through this worker's own ``index_page`` and
``delete_page`` (so the embedder's revision rule holds for pings and polls alike), not through the broker.
"""

from __future__ import annotations

import logging

from pydantic import BaseModel

from ragbot.messaging.wiki_poll import poll_wiki
from ragbot.schemas.jobs import JobKind, JobState
from ragbot.schemas.messages import DELETE_PAGE_TASK, INDEX_PAGE_TASK, DeletePage, IndexPage, PollMediaWiki
from ragbot_embedder.service import IndexingContext, Outcome, delete_page, index_page

logger = logging.getLogger(__name__)


class InProcessSender:
    """A command sender that carries each command out in this process and counts what failed."""

    def __init__(self, ctx: IndexingContext) -> None:
        self.ctx = ctx
        self.failed: list[str] = []

    async def send(
        self, *, task: str, message: BaseModel, request_id: str | None = None, countdown: float | None = None
    ) -> str:
        if task == INDEX_PAGE_TASK and isinstance(message, IndexPage):
            outcome = await index_page(ctx=self.ctx, command=message)
        elif task == DELETE_PAGE_TASK and isinstance(message, DeletePage):
            outcome = await delete_page(ctx=self.ctx, command=message)
        else:
            raise ValueError(f"the poll sends index and delete commands only, not {task}")
        if outcome.state == JobState.failed:
            self.failed.append(f"{task} {getattr(message, 'page_id', '?')}: {outcome.detail}")
        return str(getattr(message, "job_id", ""))


async def poll_mediawiki(*, ctx: IndexingContext, command: PollMediaWiki, final: bool = True) -> Outcome:
    """Poll the configured MediaWiki once and index or delete what changed since the stored cursor."""
    if ctx.wiki is None:
        return Outcome(JobState.skipped, "no MediaWiki configured (RAGBOT_MEDIAWIKI_API_URL)")
    if await ctx.jobs.get(job_id=command.job_id) is None:  # the scheduled poll has no record yet
        await ctx.jobs.create(
            kind=JobKind.reconcile, payload=command.model_dump(mode="json"), job_id=command.job_id
        )
    store = await ctx.ready_store()
    sender = InProcessSender(ctx)
    plan = await poll_wiki(
        api=ctx.wiki,
        sender=sender,
        redis_client=ctx.jobs.redis,
        key=ctx.wiki_cursor_key,
        indexed=await store.page_revisions(),
        namespaces=ctx.wiki_namespaces,
    )
    detail = (
        f"{'full sync' if plan.full_sync else 'recent changes'}: index {len(plan.index)}, "
        f"delete {len(plan.delete)}; cursor rcid {plan.cursor.rcid}"
    )
    if sender.failed:
        detail += "; failed: " + "; ".join(sender.failed)
    return Outcome(JobState.done, detail)
