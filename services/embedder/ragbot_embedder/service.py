"""What the worker decides for one command: skip, index, delete. No Celery here, only ports.

Idempotent by construction: paragraph ids derive from (page, revision, paragraph) and
``replace_page`` is atomic, so a message delivered twice leaves the same paragraphs; a ping for an
older revision than the one indexed, or for the same one, is skipped.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from ragbot.definition import DocumentDefinition
from ragbot.errors import DependencyUnavailable, SourceRefused
from ragbot.events import EventPublisher
from ragbot.jobs import JobStore
from ragbot.observability.metrics import WorkerMetrics
from ragbot.ports import Embedder, PageSource, SearchStore
from ragbot.schemas.jobs import JobState
from ragbot.schemas.messages import DeletePage, IndexPage, PageDeleted, PageIndexed
from ragbot.schemas.pages import Page, PageState

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class IndexingContext:
    """The adapters a worker process holds (built once per process by the composition root)."""

    definition: DocumentDefinition
    embedders: Mapping[str, Embedder]
    store: SearchStore
    source: PageSource
    jobs: JobStore
    events: EventPublisher
    metrics: WorkerMetrics
    max_tokens: int
    store_ready: bool = field(default=False)

    async def ready_store(self) -> SearchStore:
        """The store, its indices/tables created on first use (retried like any store error)."""
        if not self.store_ready:
            await self.store.ensure_ready()
            self.store_ready = True
        return self.store


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a command ended when it did not fail."""

    state: JobState
    detail: str
    revision_id: int | None = None


def _skip_reason(*, revision_id: int, indexed: PageState | None, force: bool) -> str | None:
    if indexed is None or force:
        return None
    if revision_id < indexed.revision_id:
        return f"revision {revision_id} is older than indexed revision {indexed.revision_id}"
    if revision_id == indexed.revision_id:
        return f"revision {revision_id} is already indexed"
    return None


async def index_page(*, ctx: IndexingContext, command: IndexPage) -> Outcome:
    """Make the store hold exactly the page's newest revision (or nothing, when it left scope)."""
    store = await ctx.ready_store()
    indexed = await store.page_state(page_id=command.page_id)
    if indexed is not None and not command.force and command.revision_id < indexed.revision_id:
        reason = f"revision {command.revision_id} is older than indexed revision {indexed.revision_id}"
        return Outcome(JobState.skipped, reason, indexed.revision_id)
    # A ping for the indexed revision still fetches: delete and move pings carry the last revision,
    # and only the content API's 404 tells us the page left scope.
    page = await _page_of(ctx=ctx, command=command)
    if page is None:
        removed = await store.delete_page(page_id=command.page_id)
        await _publish(
            ctx,
            PageDeleted(
                page_id=command.page_id, deleted_at=_now(), reason="out_of_scope", job_id=command.job_id
            ),
        )
        return Outcome(JobState.done, f"page left scope; removed {removed} paragraphs")
    # The wiki answers with its current revision, which may differ from the ping's.
    skip = _skip_reason(revision_id=page.revision_id, indexed=indexed, force=command.force)
    if skip:
        return Outcome(JobState.skipped, skip, page.revision_id)
    from ragbot.indexing import build_stored_paragraphs

    started = time.perf_counter()
    paragraphs = build_stored_paragraphs(
        page, definition=ctx.definition, embedders=ctx.embedders, max_tokens=ctx.max_tokens
    )
    ctx.metrics.build_seconds.observe(time.perf_counter() - started)
    await store.replace_page(page_id=page.page_id, revision_id=page.revision_id, paragraphs=paragraphs)
    for model in ctx.definition.model_names:
        ctx.metrics.paragraphs.labels(model).inc(len(paragraphs))
    indexed_at = _now()
    revision_date = page.revision_date or command.revision_date
    lag = (indexed_at - revision_date).total_seconds() if revision_date else None
    if lag is not None and lag >= 0:
        ctx.metrics.freshness_lag.observe(lag)
    await _publish(
        ctx,
        PageIndexed(
            page_id=page.page_id,
            revision_id=page.revision_id,
            paragraphs=len(paragraphs),
            indexed_at=indexed_at,
            lag_s=lag,
            job_id=command.job_id,
        ),
    )
    return Outcome(JobState.done, f"indexed {len(paragraphs)} paragraphs", page.revision_id)


async def delete_page(*, ctx: IndexingContext, command: DeletePage) -> Outcome:
    """Remove a page from every shard."""
    store = await ctx.ready_store()
    removed = await store.delete_page(page_id=command.page_id)
    await _publish(
        ctx, PageDeleted(page_id=command.page_id, deleted_at=_now(), reason="deleted", job_id=command.job_id)
    )
    return Outcome(JobState.done, f"removed {removed} paragraphs")


async def _page_of(*, ctx: IndexingContext, command: IndexPage) -> Page | None:
    page: Page | None
    if command.page is not None:
        page = command.page
    elif command.callback_url:
        page = await ctx.source.fetch(page_id=command.page_id, callback_url=command.callback_url)
    else:
        raise SourceRefused("the command carries neither a page nor a callback_url")
    if page is not None and page.page_id != command.page_id:
        raise SourceRefused(f"command for page {command.page_id} carries page {page.page_id}")
    return page


async def _publish(ctx: IndexingContext, event: PageIndexed | PageDeleted) -> None:
    """Events are notifications: losing one must not undo or repeat the write it reports."""
    try:
        await ctx.events.publish(event)
    except DependencyUnavailable as exc:
        logger.warning(
            "event not published", extra={"event": event.type, "page_id": event.page_id, "error": str(exc)}
        )


def _now() -> datetime:
    return datetime.now(UTC)
