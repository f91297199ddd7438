"""Pings (``IndexPage`` commands) decided one by one and written together: one pipeline call per round.

Each command gets the outcome ``service.index_page`` gives it alone: skipped when older or already
indexed, removed when it left scope, or its page written. The pages to write go through one
``write_pages`` call (shared embedding batches); a page the store refuses, a fetch that fails or a
bad page is that command's error only. A page named by several commands is handled in rounds, in
arrival order, so a later ping sees the earlier one's write, as it would one after the other.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from ragbot.errors import DependencyUnavailable
from ragbot.schemas.jobs import JobState
from ragbot.schemas.messages import IndexPage
from ragbot.schemas.pages import Page
from ragbot_embedder.service import (
    IndexingContext,
    Outcome,
    _ordered,
    _page_of,
    _remove,
    _skip_reason,
    write_pages,
)

__all__ = ["index_pings"]

logger = logging.getLogger(__name__)


async def index_pings(*, ctx: IndexingContext, commands: Sequence[IndexPage]) -> list[Outcome | Exception]:
    """Each command's outcome (or error) as ``index_page`` alone would give it, the pages written together.

    A page named twice is handled in arrival order: a later command waits for a later round, which
    sees the earlier one's write, exactly as one command after the other would.
    """
    results: list[Outcome | Exception | None] = [None] * len(commands)
    for members in _rounds(commands):
        await _index_round(ctx=ctx, commands=commands, members=members, results=results)
    return [r if r is not None else RuntimeError("command not handled") for r in results]


def _rounds(commands: Sequence[IndexPage]) -> list[list[int]]:
    """Command indices in rounds that name each page at most once, in arrival order."""
    rounds: list[list[int]] = []
    seen: list[set[int]] = []
    for i, command in enumerate(commands):
        n = sum(1 for pages in seen if command.page_id in pages)
        if n == len(rounds):
            rounds.append([])
            seen.append(set())
        rounds[n].append(i)
        seen[n].add(command.page_id)
    return rounds


async def _index_round(
    *,
    ctx: IndexingContext,
    commands: Sequence[IndexPage],
    members: Sequence[int],
    results: list[Outcome | Exception | None],
) -> None:
    """Decide each command (skip, remove or write), then write the pages in one pipeline call."""
    limit = asyncio.Semaphore(ctx.fetch_concurrency)
    to_write: dict[int, Page] = {}  # command index -> page

    async def decide(i: int) -> None:
        try:
            async with limit:
                decided = await _decide(ctx=ctx, command=commands[i])
        except Exception as exc:  # this command's error alone; the others go on
            results[i] = exc
            return
        if isinstance(decided, Outcome):
            results[i] = decided
        else:
            to_write[i] = decided

    await asyncio.gather(*(decide(i) for i in members))
    order = [i for i in members if i in to_write]
    if not order:
        return
    pages = [to_write[i] for i in order]
    store = await ctx.ready_store()
    refused: dict[int, Exception] = {}
    try:
        counts = await write_pages(
            ctx=ctx,
            store=store,
            pages=pages,
            job_id={commands[i].page_id: commands[i].job_id for i in order},
            failed=refused,
        )
    except DependencyUnavailable as exc:  # the store or Redis: every page of the round retries
        for i in order:
            results[i] = exc
        return
    except Exception as exc:  # one bad page must not sink the others: find it page by page
        if len(order) == 1:
            results[order[0]] = exc
            return
        logger.warning("pings failed as a batch, indexing page by page", extra={"error": repr(exc)})
        for i in order:
            await _index_round(ctx=ctx, commands=commands, members=[i], results=results)
        return
    for i, page, count in zip(order, pages, counts, strict=True):
        error = refused.get(page.page_id)
        results[i] = (
            error
            if error is not None
            else Outcome(JobState.done, f"indexed {count} paragraphs", page.revision_id)
        )


async def _decide(*, ctx: IndexingContext, command: IndexPage) -> Outcome | Page:
    """What one ping needs: an outcome already (skipped, removed) or the page to write."""
    store = await ctx.ready_store()
    indexed = await store.page_state(page_id=command.page_id)
    if (
        indexed is not None
        and not command.force
        and _ordered(command.page)
        and command.revision_id < indexed.revision_id
    ):
        reason = f"revision {command.revision_id} is older than indexed revision {indexed.revision_id}"
        return Outcome(JobState.skipped, reason, indexed.revision_id)
    # A ping for the indexed revision still fetches: delete and move pings carry the last revision,
    # and only the content API's 404 tells us the page left scope.
    page = await _page_of(ctx=ctx, command=command)
    if page is None:
        removed = await _remove(
            ctx=ctx, store=store, page_id=command.page_id, reason="out_of_scope", job_id=command.job_id
        )
        return Outcome(JobState.done, f"page left scope; removed {removed} paragraphs")
    # The wiki answers with its current revision, which may differ from the ping's.
    skip = _skip_reason(
        revision_id=page.revision_id, indexed=indexed, force=command.force, ordered=_ordered(page)
    )
    if skip:
        return Outcome(JobState.skipped, skip, page.revision_id)
    if command.revision_date is not None and page.revision_date is None:
        page = page.model_copy(update={"revision_date": command.revision_date})
    return page
