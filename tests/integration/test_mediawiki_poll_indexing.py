"""The worker's ``embedder.poll_mediawiki`` against the real test wiki, a real store and real Redis.

Each poll is the task's own handler (``ragbot_embedder.wiki_poll``), whose commands run through the
embedder's ``index_page``/``delete_page`` (its revision rule, the embedded store, a hash embedder):
create -> indexed, edit -> the new revision, move -> the new title, delete -> removed, restore -> back;
a poll with nothing new changes nothing. The Celery beat entry that sends the task is checked too.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from redis.asyncio import Redis
from support.fakes import HashEmbedder
from support.mediawiki import WikiSession

from ragbot.definition import parse_definition
from ragbot.messaging.events import EventPublisher
from ragbot.messaging.jobs import JobStore
from ragbot.messaging.wiki_poll import cursor_key, poll_beat_schedule
from ragbot.observability.metrics import worker_metrics
from ragbot.ports import SearchStore
from ragbot.schemas.jobs import JobState
from ragbot.schemas.messages import POLL_MEDIAWIKI_TASK, IndexPage, PollMediaWiki
from ragbot.schemas.pages import Page
from ragbot.settings import MediaWikiSettings, StoreSettings
from ragbot.sources.mediawiki import MediaWikiApi
from ragbot.sources.wiki import WikiPageSource
from ragbot.stores import build_store
from ragbot_embedder import service
from ragbot_embedder.wiki_poll import poll_mediawiki

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


@pytest.mark.asyncio
async def test_a_polled_wiki_keeps_the_store_in_step(
    wiki: WikiSession, redis_url: str, store: SearchStore
) -> None:
    prefix = f"test-{uuid.uuid4().hex[:12]}"
    redis = Redis.from_url(redis_url)
    source = WikiPageSource(allowed_hosts=["127.0.0.1:*"], max_bytes=5 * 1024 * 1024, timeout_s=5.0)
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
        wiki=api,
        wiki_namespaces=(0,),
        wiki_cursor_key=f"{prefix}:{cursor_key(wiki.api_url)}",
    )
    details: list[str] = []

    async def poll() -> None:
        outcome = await poll_mediawiki(ctx=ctx, command=PollMediaWiki(job_id=f"{prefix}-poll"))
        assert outcome.state == JobState.done, outcome.detail
        assert "failed" not in outcome.detail, outcome.detail
        details.append(outcome.detail)

    async def text_of(page_id: int) -> str:
        return " ".join(
            str(hit.source.get("content", "")) for hit in await store.page_paragraphs(page_id=page_id)
        )

    try:
        title = wiki.title("סנכרון")
        created = wiki.edit(title, "== זכאות ==\nגרסה ראשונה של הדף.")
        page_id = created["pageid"]
        pushed = Page(
            page_id=9_000_001, revision_id=5, title="נדחף", content="דף שנדחף ולא מהוויקי.", source="push"
        )
        pushed_command = IndexPage(job_id="push", page_id=pushed.page_id, revision_id=5, page=pushed)
        assert (await service.index_page(ctx=ctx, command=pushed_command)).state == JobState.done
        await poll()
        assert details[-1].startswith("full sync"), "the first poll (no cursor) is a full sync"
        assert await store.page_state(page_id=pushed.page_id) is not None, "a full sync removes nothing"
        state = await store.page_state(page_id=page_id)
        assert state is not None and state.revision_id == created["newrevid"]
        assert "גרסה ראשונה" in await text_of(page_id)

        edited = wiki.edit(title, "== זכאות ==\nגרסה שנייה של הדף.")
        await poll()
        state = await store.page_state(page_id=page_id)
        assert state is not None and state.revision_id == edited["newrevid"]
        assert "גרסה שנייה" in await text_of(page_id) and "גרסה ראשונה" not in await text_of(page_id)

        await poll()
        assert details[-1].startswith("recent changes: index 0, delete 0"), details[-1]

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


def test_celery_beat_sends_the_poll_every_interval_when_a_wiki_is_configured() -> None:
    assert poll_beat_schedule(settings=MediaWikiSettings(), queue="q") == {}
    schedule = poll_beat_schedule(
        settings=MediaWikiSettings(api_url="http://127.0.0.1:8480/api.php", poll_interval_s=30), queue="q"
    )
    entry = schedule["ragbot-poll-mediawiki"]
    assert entry["task"] == POLL_MEDIAWIKI_TASK and entry["schedule"] == 30
    assert entry["options"]["queue"] == "q"
    assert PollMediaWiki.model_validate(entry["kwargs"]["message"]).job_id == "mediawiki-poll"
