"""What the worker decides for one command: skip, index, delete. No Celery here, only ports.

Idempotent by construction: paragraph ids derive from (page, revision, paragraph) and
``replace_page`` is atomic, so a message delivered twice leaves the same paragraphs; a ping for an
older revision than the one indexed, or for the same one, is skipped.

Revision order: wiki and pushed pages carry real revision ids, so an older one is ignored. Uploaded
files and folder files carry a hash of their content as revision (``UNORDERED_SOURCES``): there the
same revision is a no-op and any other revision replaces the page (the last upload wins).

Batching: ``index_page`` handles one ping; ``ragbot_embedder.pings`` handles the pings a worker
takes together (``ragbot_embedder.ping_batch``: those waiting in the queue behind the delivered one).
``index_pages`` handles a batch of pages that arrived together (a bulk reindex). All hand their
pages to the one indexing pipeline (``ragbot.indexing.pipeline``: split, contextual text, shared
embedding batches, ``replace_pages``), with hooks for the worker's metrics and events. A page that
fails is counted and reported; the rest of the batch is still written.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from ragbot.definition import DocumentDefinition
from ragbot.errors import DependencyUnavailable, SourceError, SourceRefused
from ragbot.indexing.contextual import Contextualizer
from ragbot.indexing.paragraphs import DEFAULT_LINK_TARGETS, LinkTargets
from ragbot.indexing.pipeline import DEFAULT_BATCH_PARAGRAPHS, IndexingHooks, IndexingPipeline, SplitOptions
from ragbot.messaging.events import EventPublisher
from ragbot.messaging.jobs import JobStore
from ragbot.messaging.reindex import WikiLister
from ragbot.observability.metrics import WorkerMetrics
from ragbot.ports import Embedder, Generations, PageSource, SearchStore, WikiApi
from ragbot.schemas.jobs import JobState
from ragbot.schemas.messages import (
    DeletePage,
    DropGeneration,
    IndexPage,
    IndexPages,
    PageDeleted,
    PageIndexed,
    PageRef,
)
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
    link_targets: LinkTargets = DEFAULT_LINK_TARGETS
    batch_max_paragraphs: int = DEFAULT_BATCH_PARAGRAPHS
    fetch_concurrency: int = 4
    contextualizer: Contextualizer | None = None
    store_ready: bool = field(default=False)
    generations: Generations | None = None
    lister: WikiLister | None = None  # the wiki's page list, for reconcile (ragbot_embedder.reconcile)
    # A MediaWiki polled through its core API (ragbot_embedder.wiki_poll); None: no polling.
    wiki: WikiApi | None = None
    wiki_namespaces: tuple[int, ...] = (0,)
    wiki_cursor_key: str = ""

    @property
    def pipeline(self) -> IndexingPipeline:
        """The indexing pipeline these adapters and options make (cheap: built per command)."""
        return IndexingPipeline(
            definition=self.definition,
            embedders=self.embedders,
            split=SplitOptions(max_tokens=self.max_tokens, link_targets=self.link_targets),
            contextualizer=self.contextualizer,
            batch_max_paragraphs=self.batch_max_paragraphs,
        )

    async def ready_store(self) -> SearchStore:
        """The store, its indices/tables created on first use (retried like any store error)."""
        if not self.store_ready:
            await self.store.ensure_ready()
            self.store_ready = True
        return self.store


# Sources whose revision ids are content hashes, not an order (uploads, folder files).
UNORDERED_SOURCES = frozenset({"upload", "file"})


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a command ended when it did not raise.

    Batches also say how their pages fared: ``progress`` ({total, done, failed, pending}), ``error``
    (pages that failed for good) and ``retry`` (pages that failed in a way worth retrying; the task is
    retried while attempts remain, and those pages count as failed on the last one).
    """

    state: JobState
    detail: str
    revision_id: int | None = None
    progress: Mapping[str, int] | None = None
    error: str | None = None
    retry: str | None = None
    payload: Mapping[str, object] | None = None


def _skip_reason(
    *, revision_id: int, indexed: PageState | None, force: bool, ordered: bool = True
) -> str | None:
    if indexed is None or force:
        return None
    if revision_id == indexed.revision_id:
        return f"revision {revision_id} is already indexed"
    if ordered and revision_id < indexed.revision_id:
        return f"revision {revision_id} is older than indexed revision {indexed.revision_id}"
    return None


def _ordered(page: Page | None) -> bool:
    return page is None or page.source not in UNORDERED_SOURCES


async def index_page(*, ctx: IndexingContext, command: IndexPage, final: bool = True) -> Outcome:
    """Make the store hold exactly the page's newest revision (or nothing, when it left scope)."""
    from ragbot_embedder.pings import index_pings  # the one path for pings, alone or many; it uses ours

    [result] = await index_pings(ctx=ctx, commands=[command])
    if isinstance(result, Exception):
        raise result
    return result


async def write_pages(
    *,
    ctx: IndexingContext,
    store: SearchStore,
    pages: Sequence[Page],
    job_id: str | Mapping[int, str] | None,
    failed: dict[int, Exception] | None = None,
) -> list[int]:
    """Run pages through the indexing pipeline; each written page is counted and announced (with its
    job: one for all, or one per page id)."""
    return await ctx.pipeline.index(pages, store=store, hooks=_WorkerHooks(ctx, job_id), failed=failed)


class _WorkerHooks(IndexingHooks):
    """The worker's part after each pipeline stage: metrics, and a ``page.indexed`` event."""

    def __init__(self, ctx: IndexingContext, job_id: str | Mapping[int, str] | None) -> None:
        self.ctx = ctx
        self.job_id = job_id

    def embedded(self, seconds: float) -> None:
        self.ctx.metrics.build_seconds.observe(seconds)  # split (first group) + embed

    async def written(self, page: Page, paragraphs: int) -> None:
        job_id = self.job_id.get(page.page_id) if isinstance(self.job_id, Mapping) else self.job_id
        await _indexed(ctx=self.ctx, page=page, paragraphs=paragraphs, job_id=job_id)


async def _indexed(*, ctx: IndexingContext, page: Page, paragraphs: int, job_id: str | None) -> None:
    """Count a written page and announce it."""
    for model in ctx.definition.model_names:
        ctx.metrics.paragraphs.labels(model).inc(paragraphs)
    indexed_at = _now()
    lag = (indexed_at - page.revision_date).total_seconds() if page.revision_date else None
    if lag is not None and lag >= 0:
        ctx.metrics.freshness_lag.observe(lag)
    await _publish(
        ctx,
        PageIndexed(
            page_id=page.page_id,
            revision_id=page.revision_id,
            paragraphs=paragraphs,
            indexed_at=indexed_at,
            lag_s=lag,
            job_id=job_id,
        ),
    )


@dataclass(slots=True)
class _BatchTally:
    """How the pages of one batch fared."""

    total: int
    done: int = 0
    failed: dict[int, str] = field(default_factory=dict)
    pending: dict[int, str] = field(default_factory=dict)
    skipped: int = 0
    removed: int = 0

    def skip(self) -> None:
        """A page that needs no write (unchanged, or an older copy) is done too."""
        self.done += 1
        self.skipped += 1

    def progress(self) -> dict[str, int]:
        return {
            "total": self.total,
            "done": self.done,
            "failed": len(self.failed),
            "pending": len(self.pending),
        }


async def index_pages(*, ctx: IndexingContext, command: IndexPages, final: bool = True) -> Outcome:
    """Index a batch of pages together; each page ends done (indexed, skipped, removed) or failed."""
    store = await ctx.ready_store()
    tally = _BatchTally(total=len(command.pages) + len(command.refs))
    candidates: dict[int, Page] = {}
    for page in command.pages:
        await _consider(ctx=ctx, store=store, page=page, force=command.force, tally=tally, into=candidates)
    fetched = await _fetch_refs(ctx=ctx, store=store, refs=command.refs, force=command.force, tally=tally)
    for page in fetched:
        await _consider(ctx=ctx, store=store, page=page, force=command.force, tally=tally, into=candidates)
    pages = list(candidates.values())
    refused: dict[int, Exception] = {}
    try:
        counts = await write_pages(ctx=ctx, store=store, pages=pages, job_id=command.job_id, failed=refused)
    except DependencyUnavailable:
        raise  # the store or Redis: retry the batch (pages already written are skipped next time)
    except Exception as exc:  # one bad page must not sink the batch: find it page by page
        logger.warning("batch failed as a whole, indexing page by page", extra={"error": repr(exc)})
        counts = await _write_one_by_one(
            ctx=ctx, store=store, pages=pages, job_id=command.job_id, tally=tally
        )
    else:
        for page_id, error in refused.items():  # the store refused these pages, the rest are written
            _page_failed(tally, page_id, error)
        counts = [n for p, n in zip(pages, counts, strict=True) if p.page_id not in refused]
        tally.done += len(counts)
    if final and tally.pending:
        tally.failed.update(tally.pending)
        tally.pending.clear()
    detail = (
        f"{tally.done} of {tally.total} pages done ({len(counts)} indexed, {sum(counts)} paragraphs; "
        f"{tally.skipped} unchanged; {tally.removed} out of scope)"
    )
    state = JobState.failed if tally.failed else JobState.done
    return Outcome(
        state=state,
        detail=detail,
        progress=tally.progress(),
        error=_reasons(tally.failed) if tally.failed else None,
        retry=_reasons(tally.pending) if tally.pending else None,
        payload=None
        if tally.failed or tally.pending
        else {
            "job_id": command.job_id,
            "parent_job_id": command.parent_job_id,
            "batch": command.batch,
            "page_ids": [p.page_id for p in command.pages] + [r.page_id for r in command.refs],
        },
    )


async def _consider(
    *,
    ctx: IndexingContext,
    store: SearchStore,
    page: Page,
    force: bool,
    tally: _BatchTally,
    into: dict[int, Page],
) -> None:
    """Queue a page for writing unless its revision is already there (the newest copy wins)."""
    earlier = into.get(page.page_id)
    if earlier is not None:
        tally.skip()  # one of the two copies is never written
        if _ordered(page) and page.revision_id < earlier.revision_id:
            return
    indexed = await store.page_state(page_id=page.page_id)
    skip = _skip_reason(revision_id=page.revision_id, indexed=indexed, force=force, ordered=_ordered(page))
    if skip:
        into.pop(page.page_id, None)
        tally.skip()
        return
    into[page.page_id] = page


async def _fetch_refs(
    *, ctx: IndexingContext, store: SearchStore, refs: Sequence[PageRef], force: bool, tally: _BatchTally
) -> list[Page]:
    """Fetch the referenced pages (a few at a time); remove those that left scope."""
    limit = asyncio.Semaphore(ctx.fetch_concurrency)

    async def one(ref: PageRef) -> Page | None:
        if ref.revision_id and not force:
            indexed = await store.page_state(page_id=ref.page_id)
            if indexed is not None and indexed.revision_id >= ref.revision_id:
                tally.skip()
                return None
        try:
            async with limit:
                page = await ctx.source.fetch(page_id=ref.page_id, callback_url=ref.callback_url)
        except SourceError as exc:
            tally.pending[ref.page_id] = f"{type(exc).__name__}: {exc}"
            return None
        except SourceRefused as exc:
            tally.failed[ref.page_id] = f"{type(exc).__name__}: {exc}"
            return None
        if page is None:
            await _remove(ctx=ctx, store=store, page_id=ref.page_id, reason="out_of_scope", job_id=None)
            tally.done += 1
            tally.removed += 1
            return None
        return page

    results = await asyncio.gather(*(one(r) for r in refs))
    return [p for p in results if p is not None]


async def _write_one_by_one(
    *, ctx: IndexingContext, store: SearchStore, pages: Sequence[Page], job_id: str, tally: _BatchTally
) -> list[int]:
    counts: list[int] = []
    for page in pages:
        try:
            counts.extend(await write_pages(ctx=ctx, store=store, pages=[page], job_id=job_id))
            tally.done += 1
        except DependencyUnavailable:
            raise
        except Exception as exc:  # reported on the batch job, the worker carries on
            _page_failed(tally, page.page_id, exc)
    return counts


def _page_failed(tally: _BatchTally, page_id: int, exc: Exception) -> None:
    """A page that failed for good: logged, and reported on the batch job."""
    logger.error("page failed", extra={"page_id": page_id, "error": repr(exc)}, exc_info=exc)
    tally.failed[page_id] = f"{type(exc).__name__}: {exc}"


def _reasons(by_page: Mapping[int, str], *, limit: int = 20) -> str:
    items = [f"page {page_id}: {reason}" for page_id, reason in sorted(by_page.items())]
    more = f"; and {len(items) - limit} more" if len(items) > limit else ""
    return "; ".join(items[:limit]) + more


async def delete_page(*, ctx: IndexingContext, command: DeletePage, final: bool = True) -> Outcome:
    """Remove a page from every shard."""
    store = await ctx.ready_store()
    removed = await _remove(
        ctx=ctx, store=store, page_id=command.page_id, reason="deleted", job_id=command.job_id
    )
    progress = {"total": 1, "done": 1, "failed": 0} if command.parent_job_id else None
    return Outcome(JobState.done, f"removed {removed} paragraphs", progress=progress)


async def drop_generation(*, ctx: IndexingContext, command: DropGeneration, final: bool = True) -> Outcome:
    """Delete an index generation a re-embed switched away from (refused while it is live)."""
    if ctx.generations is None:
        return Outcome(JobState.skipped, "this worker has no index generations")
    await ctx.generations.drop(generation_id=command.generation)
    return Outcome(JobState.done, f"dropped generation {command.generation}")


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


async def _remove(
    *, ctx: IndexingContext, store: SearchStore, page_id: int, reason: str, job_id: str | None
) -> int:
    """Delete a page from every shard and announce it; the number of paragraphs removed."""
    removed = await store.delete_page(page_id=page_id)
    await _publish(ctx, PageDeleted(page_id=page_id, deleted_at=_now(), reason=reason, job_id=job_id))
    return removed


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
