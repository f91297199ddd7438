"""Polling the real test wiki into a real store through the embedder's own index and delete functions.

The poll's commands go to ``ragbot_embedder.service`` in process (the embedder's revision rule, the
real embedded store, a hash embedder): create -> indexed, edit -> the new revision, move -> the new
title, delete -> removed, restore -> back; a poll with nothing new changes nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from pydantic import BaseModel
from redis.asyncio import Redis
from support.fakes import HashEmbedder
from support.mediawiki import WikiSession

from ragbot.definition import parse_definition
from ragbot.messaging.events import EventPublisher
from ragbot.messaging.jobs import JobStore
from ragbot.messaging.wiki_poll import cursor_key, poll_wiki
from ragbot.observability.metrics import worker_metrics
from ragbot.ports import SearchStore
from ragbot.schemas.jobs import JobState
from ragbot.schemas.messages import DELETE_PAGE_TASK, INDEX_PAGE_TASK, DeletePage, IndexPage
from ragbot.settings import MediaWikiSettings, StoreSettings
from ragbot.sources.mediawiki import MediaWikiApi
from ragbot.sources.wiki import WikiPageSource
from ragbot.stores import build_store
from ragbot_embedder import service

pytestmark = pytest.mark.asyncio

MODEL = "hash-embedder"
DEFINITION = parse_definition(
    {
        "identifier_field": "page_id",
        "saved_fields": {"title": "text", "page_id": "integer", "content": "text", "url": "keyword"},
        "field_for_llm": "content",
        "models": {MODEL: ["content", "title"]},
    }
)
DIMENSIONS = {v.name: 32 for v in DEFINITION.vector_fields}


class EmbedderInProcess:
    """A command sender that runs the embedder's service function at once and keeps each outcome."""

    def __init__(self, ctx: service.IndexingContext) -> None:
        self.ctx = ctx
        self.outcomes: list[tuple[str, int, JobState]] = []

    async def send(
        self, *, task: str, message: BaseModel, request_id: str | None = None, countdown: float | None = None
    ) -> str:
        if task == INDEX_PAGE_TASK:
            assert isinstance(message, IndexPage)
            outcome = await service.index_page(ctx=self.ctx, command=message)
        else:
            assert task == DELETE_PAGE_TASK and isinstance(message, DeletePage)
            outcome = await service.delete_page(ctx=self.ctx, command=message)
        self.outcomes.append((task, message.page_id, outcome.state))
        return uuid.uuid4().hex


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SearchStore]:
    built = build_store(
        settings=StoreSettings(backend="embedded", embedded_path=tmp_path / "store.sqlite3"),
        definition=DEFINITION,
        dimensions=DIMENSIONS,
    )
    await built.ensure_ready()
    try:
        yield built
    finally:
        await built.close()


async def test_a_polled_wiki_keeps_the_store_in_step(
    wiki: WikiSession, redis_url: str, store: SearchStore
) -> None:
    prefix = f"test-{uuid.uuid4().hex[:12]}"
    redis = Redis.from_url(redis_url)
    source = WikiPageSource(allowed_hosts=["127.0.0.1"], max_bytes=5 * 1024 * 1024, timeout_s=5.0)
    api = MediaWikiApi(MediaWikiSettings(api_url=wiki.api_url, namespaces=[0]))
    await api.start()
    ctx = service.IndexingContext(
        definition=DEFINITION,
        embedders={MODEL: HashEmbedder(MODEL, max_tokens=64)},
        store=store,
        source=source,
        jobs=JobStore(redis=redis, key_prefix=prefix, ttl_s=3600),
        events=EventPublisher(redis=redis, key_prefix=prefix),
        metrics=worker_metrics(CollectorRegistry()),
        max_tokens=512,
    )
    sender = EmbedderInProcess(ctx)
    key = f"{prefix}:{cursor_key(wiki.api_url)}"

    async def poll() -> None:
        await poll_wiki(
            api=api,
            sender=sender,
            redis_client=redis,
            key=key,
            indexed=await store.page_revisions(),
            namespaces=[0],
        )

    async def text_of(page_id: int) -> str:
        return " ".join(
            str(hit.source.get("content", "")) for hit in await store.page_paragraphs(page_id=page_id)
        )

    try:
        title = wiki.title("סנכרון")
        created = wiki.edit(title, "== זכאות ==\nגרסה ראשונה של הדף.")
        page_id = created["pageid"]
        await poll()  # the first poll is a full sync
        state = await store.page_state(page_id=page_id)
        assert state is not None and state.revision_id == created["newrevid"]
        assert "גרסה ראשונה" in await text_of(page_id)

        edited = wiki.edit(title, "== זכאות ==\nגרסה שנייה של הדף.")
        await poll()
        state = await store.page_state(page_id=page_id)
        assert state is not None and state.revision_id == edited["newrevid"]
        assert "גרסה שנייה" in await text_of(page_id) and "גרסה ראשונה" not in await text_of(page_id)

        before = len(sender.outcomes)
        await poll()
        assert sender.outcomes[before:] == [], "a poll with nothing new sends nothing"

        moved_to = wiki.title("סנכרון הועבר")
        wiki.move(title, moved_to, redirect=False)
        await poll()
        state = await store.page_state(page_id=page_id)
        assert state is not None and state.title == moved_to

        wiki.delete(moved_to)
        await poll()
        assert await store.page_state(page_id=page_id) is None

        wiki.undelete(moved_to)
        await poll()
        state = await store.page_state(page_id=page_id)
        assert state is not None and "גרסה שנייה" in await text_of(page_id)
    finally:
        await api.close()
        await source.aclose()
        keys = [k async for k in redis.scan_iter(match=f"{prefix}*", count=500)]
        if keys:
            await redis.delete(*keys)
        await redis.aclose()
