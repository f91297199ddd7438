"""The worker's indexing decisions against the real Redis, Elasticsearch and the embedded store.

Everything here is real except the embedding model (a hashed bag of words: these tests are about
what ends up in the index, not about vectors): the wiki is a local HTTP server fetched through the
production ``WikiPageSource``, job records, events and the context cache live in Redis under a
uuid prefix, and each test gets its own store (a temporary SQLite file, or a uuid index prefix on
Elasticsearch that is dropped afterwards). Tasks run through the production ``TaskRunner`` on a
private event loop, the way the worker runs them.
"""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from collections.abc import Awaitable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

import pytest
from celery.exceptions import Retry
from prometheus_client import CollectorRegistry
from pydantic import BaseModel
from redis.asyncio import Redis
from support.chat_fakes import FakeOpenAI
from support.fake_wiki import CAPTURED, FakeWiki, load_pages
from support.fakes import FakeSender, FakeTask, HashEmbedder

from ragbot.definition import parse_definition
from ragbot.indexing.contextual import Contextualizer, RedisContextCache
from ragbot.indexing.folder import Manifest, index_folder, plan_folder_index
from ragbot.llms.openai_compat import OpenAICompatChatModel
from ragbot.messaging.events import EventPublisher, events_key
from ragbot.messaging.jobs import JobStore
from ragbot.messaging.queue import create_celery_app
from ragbot.messaging.reindex import batch_job_id, refresh_parent
from ragbot.observability.metrics import worker_metrics
from ragbot.ports import SearchStore
from ragbot.schemas.jobs import JobKind, JobState
from ragbot.schemas.messages import (
    DELETE_PAGE_TASK,
    INDEX_PAGE_TASK,
    INDEX_PAGES_TASK,
    DeletePage,
    IndexPage,
    IndexPages,
    PageRef,
)
from ragbot.schemas.pages import Page
from ragbot.settings import RedisSettings, StoreSettings, WorkerSettings
from ragbot.sources.wiki import WikiPageSource
from ragbot.stores import build_store
from ragbot.stores.elasticsearch import ElasticsearchStore
from ragbot_embedder import service
from ragbot_embedder.collect import MessageQueue
from ragbot_embedder.ping_batch import PingBatchRunner
from ragbot_embedder.tasks import TaskRunner
from ragbot_ingest.service import SpooledPages, accept_reindex_pages

pytestmark = pytest.mark.integration
T = TypeVar("T")

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


def wiki_page(page_id: int, revision_id: int, paragraphs: int, word: str = "text") -> dict[str, Any]:
    """A content-API body whose paragraphs each fill a paragraph budget of 12 tokens on their own."""
    body = "\n\n".join(f"Paragraph {n} of revision {revision_id} {word} a b c" for n in range(paragraphs))
    return {
        "page_id": page_id,
        "revision_id": revision_id,
        "revision_date": "20250101000000",
        "title": f"Page {page_id}",
        "url": f"https://wiki.example/{page_id}",
        "content": body,
    }


@dataclass
class World:
    """A worker runtime over real adapters, on its own event loop."""

    ctx: service.IndexingContext
    store: SearchStore
    jobs: JobStore
    redis: Redis
    wiki: FakeWiki
    prefix: str
    loop: asyncio.AbstractEventLoop
    settings: WorkerSettings

    async def contexts_for(self, command: object) -> list[service.IndexingContext]:
        """The one context a command runs in (no index generations here), as the worker's ``Runtime``."""
        return [self.ctx]

    def run(self, awaitable: Awaitable[T]) -> T:
        async def wait() -> T:
            return await awaitable

        return self.loop.run_until_complete(wait())

    def task(
        self, name: str, model: type[BaseModel], handler: Any, message: BaseModel, retries: int = 0
    ) -> str:
        runner = TaskRunner(
            name=name, model=model, handler=handler, runtime=lambda: cast(Any, self), settings=self.settings
        )
        return runner(cast(Any, FakeTask(retries)), message.model_dump(mode="json"))

    def ping(self, page_id: int, revision_id: int | None = None) -> tuple[str, str]:
        """Send a ping through the index task; returns (outcome, job detail)."""
        job_id = uuid.uuid4().hex
        body = self.wiki.ping(page_id, revision_id=revision_id)
        command = IndexPage(
            job_id=job_id, page_id=page_id, revision_id=body["revision_id"], callback_url=body["callback_url"]
        )
        self.run(
            self.jobs.create(kind=JobKind.index_page, payload=command.model_dump(mode="json"), job_id=job_id)
        )
        outcome = self.task(INDEX_PAGE_TASK, IndexPage, service.index_page, command)
        record = self.run(self.jobs.get(job_id=job_id))
        assert record is not None
        return outcome, record.detail or record.error or ""

    def ids(self, page_id: int) -> list[str]:
        return [h.doc_id for h in self.run(self.store.page_paragraphs(page_id=page_id))]

    def events(self) -> list[dict[str, Any]]:
        raw: list[Any] = self.run(self.redis.xrange(events_key(self.prefix)))  # type: ignore[arg-type]
        return [json.loads(fields[b"data"]) for _, fields in raw]


@pytest.fixture(params=["embedded", "elasticsearch"])
def world(request: pytest.FixtureRequest, redis_url: str, tmp_path: Path) -> Iterator[World]:
    loop = asyncio.new_event_loop()
    prefix = f"test-{uuid.uuid4().hex[:12]}"
    if request.param == "embedded":
        settings = StoreSettings(backend="embedded", embedded_path=tmp_path / "store.sqlite3")
    else:
        settings = StoreSettings(
            backend="elasticsearch",
            es_url=request.getfixturevalue("es_url"),
            es_index_prefix=f"test_{uuid.uuid4().hex[:12]}",
            es_timeout_s=30.0,
        )
    store = build_store(settings=settings, definition=DEFINITION, dimensions=DIMENSIONS)
    redis = Redis.from_url(redis_url)
    wiki = FakeWiki().start()
    source = WikiPageSource(allowed_hosts=["127.0.0.1:*"], max_bytes=5 * 1024 * 1024, timeout_s=5.0)
    jobs = JobStore(redis=redis, key_prefix=prefix, ttl_s=3600)
    ctx = service.IndexingContext(
        definition=DEFINITION,
        embedders={MODEL: HashEmbedder(MODEL, max_tokens=12)},
        store=store,
        source=source,
        jobs=jobs,
        events=EventPublisher(redis=redis, key_prefix=prefix),
        metrics=worker_metrics(CollectorRegistry()),
        max_tokens=512,
        batch_max_paragraphs=16,
    )
    world = World(
        ctx=ctx,
        store=store,
        jobs=jobs,
        redis=redis,
        wiki=wiki,
        prefix=prefix,
        loop=loop,
        settings=WorkerSettings(max_retries=1, retry_backoff_s=0.01, retry_backoff_max_s=0.01),
    )
    try:
        yield world
    finally:
        wiki.stop()

        async def cleanup() -> None:
            keys = [k async for k in redis.scan_iter(match=f"{prefix}:*", count=500)]
            if keys:
                await redis.delete(*keys)
            await redis.aclose()
            await source.aclose()
            if isinstance(store, ElasticsearchStore):
                await store.drop_indices()
            await store.close()

        loop.run_until_complete(cleanup())
        loop.close()


def test_an_edit_replaces_every_paragraph_of_the_old_revision(world: World) -> None:
    world.wiki.put(wiki_page(10, 1, 5, word="old"))
    assert world.ping(10) == ("done", "indexed 5 paragraphs")
    world.wiki.put(wiki_page(10, 2, 6, word="new"))
    assert world.ping(10)[0] == "done"
    assert world.ids(10) == [f"10-2-{n}" for n in range(6)]
    hits = world.run(world.store.page_paragraphs(page_id=10))
    assert all("new" in h.source["content"] and "old" not in h.source["content"] for h in hits)
    state = world.run(world.store.page_state(page_id=10))
    assert state is not None and state.revision_id == 2 and state.paragraphs_per_model == {MODEL: 6}


def test_a_page_shrinking_from_30_to_3_paragraphs_keeps_exactly_the_newest_3(world: World) -> None:
    world.wiki.put(wiki_page(11, 1, 30))
    world.ping(11)
    assert len(world.ids(11)) == 30
    world.wiki.put(wiki_page(11, 2, 3))
    world.ping(11)
    assert world.ids(11) == ["11-2-0", "11-2-1", "11-2-2"]
    assert world.run(world.store.count()) == 3


def test_a_duplicate_ping_is_a_no_op(world: World) -> None:
    world.wiki.put(wiki_page(12, 4, 3))
    world.ping(12)
    before = world.run(world.store.page_paragraphs(page_id=12))
    outcome, detail = world.ping(12)
    assert outcome == "skipped" and "already indexed" in detail
    after = world.run(world.store.page_paragraphs(page_id=12))
    assert [(h.doc_id, h.source["last_update"]) for h in after] == [
        (h.doc_id, h.source["last_update"]) for h in before
    ]
    assert [e["type"] for e in world.events()] == ["page.indexed"]


def test_out_of_order_revisions_never_go_back(world: World) -> None:
    world.wiki.put(wiki_page(13, 3, 4))
    world.ping(13)
    outcome, detail = world.ping(13, revision_id=2)  # a late ping for an older revision
    assert outcome == "skipped" and "older" in detail and world.wiki.hits[13] == 1
    outcome, detail = world.ping(13, revision_id=5)  # the wiki still serves revision 3
    assert outcome == "skipped" and "already indexed" in detail
    assert world.ids(13) == [f"13-3-{n}" for n in range(4)]


def test_a_page_that_left_scope_and_a_delete_remove_it(world: World) -> None:
    for page_id in (14, 15):
        world.wiki.put(wiki_page(page_id, 1, 3))
        world.ping(page_id)
    world.wiki.remove(14)
    outcome, detail = world.ping(14, revision_id=1)
    assert outcome == "done" and "left scope; removed 3" in detail
    command = DeletePage(job_id=uuid.uuid4().hex, page_id=15)
    assert world.task(DELETE_PAGE_TASK, DeletePage, service.delete_page, command) == "done"
    assert world.ids(14) == [] and world.ids(15) == [] and world.run(world.store.count()) == 0
    assert world.run(world.store.page_state(page_id=14)) is None
    assert [(e["type"], e["page_id"], e.get("reason")) for e in world.events()][-2:] == [
        ("page.deleted", 14, "out_of_scope"),
        ("page.deleted", 15, "deleted"),
    ]


def test_real_extension_bodies_keep_their_headings_and_lose_their_link_targets(world: World) -> None:
    bodies = load_pages(CAPTURED)
    for body in bodies:
        world.wiki.put(body)
        outcome, detail = world.ping(int(body["page_id"]))
        assert outcome == "done", detail
    stored = {b["page_id"]: world.run(world.store.page_paragraphs(page_id=b["page_id"])) for b in bodies}
    texts = [h.source["content"] for hits in stored.values() for h in hits]
    assert texts and not [t for t in texts if "/index.php" in t or "http" in t or "redlink" in t]
    headings = {h.source.get("heading") for h in stored[2]}
    assert {"מי זכאי?", "גובה ומשך התשלום", "ראו גם"} <= headings, headings
    world.wiki.remove(2)  # the wiki now answers the extension's 404 body
    outcome, detail = world.ping(2, revision_id=99)
    assert outcome == "done" and "left scope" in detail
    assert world.ids(2) == []


def test_a_bulk_reindex_reports_exact_progress_and_retries_what_failed(world: World) -> None:
    pages = SpooledPages()
    for page_id in range(20, 27):
        pages.add(Page.from_wiki_content(wiki_page(page_id, 1, 2)))
    sender = FakeSender()
    parent = world.run(
        accept_reindex_pages(
            pages=pages, batch_pages=3, force=False, jobs=cast(Any, world.jobs), sender=sender
        )
    )
    pages.close()
    assert all(task == INDEX_PAGES_TASK and isinstance(m, IndexPages) for task, m, _ in sender.sent)
    commands = [cast(IndexPages, m) for _, m, _ in sender.sent]
    # A third batch that references pages: one fine, one the wiki keeps failing.
    world.wiki.put(wiki_page(30, 1, 2))
    world.wiki.put(wiki_page(31, 1, 2))
    world.wiki.fail(31, 503)
    assert [len(c.pages) for c in commands] == [3, 3, 1]
    refs = [PageRef(page_id=p, callback_url=world.wiki.callback_url) for p in (30, 31)]
    commands[2] = commands[2].model_copy(update={"refs": refs})
    world.run(world.jobs.update(job_id=parent.job_id, payload={**parent.payload, "total": 9}))

    for command in commands[:2]:
        assert world.task(INDEX_PAGES_TASK, IndexPages, service.index_pages, command) == "done"
    record = world.run(world.jobs.get(job_id=parent.job_id))
    assert record is not None and record.state is JobState.running
    assert record.progress == {"total": 9, "done": 6, "failed": 0, "batches": 3}

    third = commands[2]
    with pytest.raises(Retry):
        world.task(INDEX_PAGES_TASK, IndexPages, service.index_pages, third, retries=0)
    assert world.task(INDEX_PAGES_TASK, IndexPages, service.index_pages, third, retries=1) == "failed"
    record = world.run(world.jobs.get(job_id=parent.job_id))
    assert record is not None and record.state is JobState.failed
    assert record.progress == {"total": 9, "done": 8, "failed": 1, "batches": 3}
    assert record.error is not None and batch_job_id(parent.job_id, 2) in record.error
    dead = world.run(world.jobs.dead_letters())
    assert [d.job_id for d in dead] == [third.job_id] and "page 31" in (dead[0].error or "")
    assert sorted(p for p in range(20, 32) if world.ids(p)) == [20, 21, 22, 23, 24, 25, 26, 30]

    # The wiki recovers; the batch is re-queued and retried: already indexed pages are skipped.
    world.wiki.fail(31, None)
    world.run(world.jobs.requeue(job_id=third.job_id))
    assert world.task(INDEX_PAGES_TASK, IndexPages, service.index_pages, third) == "done"
    record = world.run(world.jobs.get(job_id=parent.job_id))
    assert record is not None and record.state is JobState.done and record.error is None
    assert record.progress == {"total": 9, "done": 9, "failed": 0, "batches": 3}
    child = world.run(world.jobs.get(job_id=third.job_id))
    assert child is not None and "pages" not in child.payload and child.payload["page_ids"] == [26, 30, 31]
    assert world.ids(31) == ["31-1-0", "31-1-1"]


def test_parent_progress_is_exact_under_concurrent_batch_updates(world: World) -> None:
    parent = world.run(world.jobs.create(kind=JobKind.reindex, payload={"total": 40, "batches": 20}))
    for n in range(20):
        world.run(world.jobs.create(kind=JobKind.index_pages, job_id=batch_job_id(parent.job_id, n)))

    async def finish(n: int) -> None:
        await world.jobs.update(
            job_id=batch_job_id(parent.job_id, n), state=JobState.done, progress={"total": 2, "done": 2}
        )
        await refresh_parent(jobs=world.jobs, parent_job_id=parent.job_id)

    async def all_at_once() -> None:
        await asyncio.gather(*(finish(n) for n in range(20)))

    world.run(all_at_once())
    record = world.run(world.jobs.get(job_id=parent.job_id))
    assert record is not None and record.state is JobState.done
    assert record.progress == {"total": 40, "done": 40, "failed": 0, "batches": 20}


def test_contexts_are_cached_in_redis_so_an_edit_pays_only_for_what_changed(world: World) -> None:
    with FakeOpenAI(pieces=("Situated context.",)) as server:
        llm = OpenAICompatChatModel(model="m", base_url=f"{server.url}/v1")
        llm.warm_up()
        cache = RedisContextCache(redis=world.redis, key_prefix=world.prefix, ttl_s=600)
        world.ctx.contextualizer = Contextualizer(llm=llm, cache=cache, model_name="openai:m")
        first = wiki_page(40, 1, 3)
        world.wiki.put(first)
        assert world.ping(40)[0] == "done"
        assert len(server.requests) == 3
        second = {**first, "revision_id": 2, "content": first["content"] + " changed"}
        world.wiki.put(second)
        assert world.ping(40)[0] == "done"
        assert len(server.requests) == 4
        keys: list[bytes] = world.run(world.redis.keys(f"{world.prefix}:ctx:*"))  # type: ignore[arg-type]
        assert len(keys) == 4 and 0 < world.run(world.redis.ttl(keys[0])) <= 600
        world.run(llm.close())
    hits = world.run(world.store.page_paragraphs(page_id=40))
    assert all("Situated" not in h.source["content"] for h in hits)


def test_the_worker_and_ragbot_index_store_the_same_paragraphs(world: World, tmp_path: Path) -> None:
    """One pipeline: a file indexed by ``ragbot index`` and the same page through the worker's task
    give the same paragraph ids and stored fields (link targets handled alike, same split)."""
    folder = tmp_path / "docs"
    folder.mkdir()
    body = "\n\n".join(
        f"## Part {n}\n\nSee [the rules](https://wiki.example/rules_{n}) for part {n} a b c d e f."
        for n in range(6)
    )
    (folder / "guide.md").write_text(f"# Guide\n\n{body}\n", encoding="utf-8")
    [page] = plan_folder_index([folder], manifest=Manifest()).to_index

    folder_store = build_store(
        settings=StoreSettings(backend="embedded", embedded_path=tmp_path / "folder.sqlite3"),
        definition=DEFINITION,
        dimensions=DIMENSIONS,
    )

    async def by_ragbot_index() -> list[tuple[str, dict[str, Any]]]:
        await folder_store.ensure_ready()
        try:
            await index_folder(
                [folder],
                store=folder_store,
                definition=DEFINITION,
                embedders={MODEL: HashEmbedder(MODEL, max_tokens=12)},
                manifest_path=tmp_path / "manifest.json",
                max_tokens=512,
            )
            return _comparable(await folder_store.page_paragraphs(page_id=page.page_id))
        finally:
            await folder_store.close()

    from_folder = world.run(by_ragbot_index())
    job_id = uuid.uuid4().hex
    command = IndexPage(job_id=job_id, page_id=page.page_id, revision_id=page.revision_id, page=page)
    world.run(
        world.jobs.create(kind=JobKind.index_page, payload=command.model_dump(mode="json"), job_id=job_id)
    )
    assert world.task(INDEX_PAGE_TASK, IndexPage, service.index_page, command) == "done"
    from_worker = _comparable(world.run(world.store.page_paragraphs(page_id=page.page_id)))

    assert len(from_folder) > 3
    assert [doc_id for doc_id, _ in from_worker] == [doc_id for doc_id, _ in from_folder]
    assert from_worker == from_folder
    assert all("https://wiki.example" not in fields["content"] for _, fields in from_worker)


def _comparable(hits: list[Any]) -> list[tuple[str, dict[str, Any]]]:
    """Doc ids and stored fields, without the write time."""
    return [(h.doc_id, {k: v for k, v in h.source.items() if k != "last_update"}) for h in hits]


# --- pings waiting in the queue are taken together (ragbot_embedder.collect) -------------------------------


def _queued_ping(world: World, app: Any, page_id: int) -> str:
    """Put a ping for the wiki's page on the real queue, as ingest does; its job id."""
    job_id = uuid.uuid4().hex
    body = world.wiki.ping(page_id)
    command = IndexPage(
        job_id=job_id, page_id=page_id, revision_id=body["revision_id"], callback_url=body["callback_url"]
    )
    world.run(
        world.jobs.create(kind=JobKind.index_page, payload=command.model_dump(mode="json"), job_id=job_id)
    )
    app.send_task(
        INDEX_PAGE_TASK, kwargs={"message": command.model_dump(mode="json")}, queue=world.settings.queue
    )
    return job_id


def _deliver(world: World, app: Any, retries: int = 0) -> str:
    """What Celery does with the message at the head of the queue: hand it to the ping runner."""
    queue = f"{world.prefix}:celery:{world.settings.queue}"
    raw = world.run(world.redis.rpop(queue))
    assert isinstance(raw, bytes), "a message is waiting"
    message = json.loads(raw)
    kwargs = json.loads(base64.b64decode(message["body"]))[1]
    runner = PingBatchRunner(
        app=app,
        name=INDEX_PAGE_TASK,
        model=IndexPage,
        handler=service.index_page,
        runtime=lambda: cast(Any, world),
        settings=world.settings,
    )
    return runner(cast(Any, FakeTask(retries)), kwargs["message"])


@pytest.fixture
def celery_app(world: World, redis_url: str) -> Iterator[Any]:
    app = create_celery_app(
        redis_settings=RedisSettings(url=redis_url, key_prefix=world.prefix), queue=world.settings.queue
    )
    yield app
    app.close()


def test_waiting_pings_share_one_pipeline_call_and_each_is_acknowledged(
    world: World, celery_app: Any
) -> None:
    for page_id in range(20, 25):
        world.wiki.put(wiki_page(page_id, 3, 3, word=f"w{page_id}"))
    jobs = [_queued_ping(world, celery_app, page_id) for page_id in range(20, 25)]
    again = _queued_ping(world, celery_app, 20)  # the same page twice: handled after the first, skipped
    celery_app.send_task(
        DELETE_PAGE_TASK,
        kwargs={"message": DeletePage(job_id="other", page_id=99).model_dump(mode="json")},
        queue=world.settings.queue,
    )
    embedder = cast(HashEmbedder, world.ctx.embedders[MODEL])
    before = len(embedder.passage_calls)

    assert _deliver(world, celery_app) == "done"

    records = [world.run(world.jobs.get(job_id=j)) for j in [*jobs, again]]
    assert [r.state if r else None for r in records] == [JobState.done] * 5 + [JobState.skipped], [
        (r.state, r.error) if r else None for r in records
    ]
    assert all(r is not None and r.detail == "indexed 3 paragraphs" for r in records[:5])
    # 15 paragraphs, two vector fields: one call each for the five pages (the skipped ping embeds nothing)
    assert len(embedder.passage_calls) - before == 2
    for page_id in range(20, 25):
        assert world.ids(page_id) == [f"{page_id}-3-{n}" for n in range(3)]
    indexed = [e for e in world.events() if e["type"] == "page.indexed"]
    assert sorted((e["page_id"], e["job_id"]) for e in indexed) == sorted(
        zip(range(20, 25), jobs, strict=True)
    )
    queue = f"{world.prefix}:celery:{world.settings.queue}"
    waiting = [json.loads(m)["headers"]["task"] for m in world.run(world.redis.lrange(queue, 0, -1))]
    assert waiting == [DELETE_PAGE_TASK], "every ping is taken, the other task keeps its place"
    assert world.run(world.redis.hlen(f"{world.prefix}:celery:unacked")) == 0, "every claim is acknowledged"


def test_a_claimed_ping_that_fails_is_retried_on_its_own_and_the_claim_survives_a_crash(
    world: World, celery_app: Any
) -> None:
    for page_id in (30, 31, 32):
        world.wiki.put(wiki_page(page_id, 1, 2))
    world.wiki.fail(31, 503)
    jobs = [_queued_ping(world, celery_app, page_id) for page_id in (30, 31, 32)]

    assert _deliver(world, celery_app) == "done"

    records = [world.run(world.jobs.get(job_id=j)) for j in jobs]
    assert [r.state if r else None for r in records] == [JobState.done, JobState.retrying, JobState.done]
    queue = f"{world.prefix}:celery:{world.settings.queue}"
    [retry] = [json.loads(m) for m in world.run(world.redis.lrange(queue, 0, -1))]
    assert retry["headers"]["retries"] == 1 and retry["headers"]["eta"] is not None
    assert json.loads(base64.b64decode(retry["body"]))[1]["message"]["job_id"] == jobs[1]
    assert world.run(world.redis.hlen(f"{world.prefix}:celery:unacked")) == 0

    # A worker that dies after claiming: its claims sit in kombu's unacknowledged set, where the
    # restore sweep of any worker puts them back on the queue once the visibility timeout passed.
    world.run(world.redis.delete(queue))
    _queued_ping(world, celery_app, 30)
    _queued_ping(world, celery_app, 32)
    claims = MessageQueue(redis=world.redis, key_prefix=f"{world.prefix}:celery:", queue=world.settings.queue)
    claimed = world.run(claims.claim_waiting(task=INDEX_PAGE_TASK, limit=10))
    assert len(claimed) == 2 and world.run(world.redis.llen(queue)) == 0
    with celery_app.connection_for_write() as conn:
        channel = conn.default_channel
        channel.visibility_timeout = 0
        channel.qos.restore_visible(num=10, interval=1)
    assert world.run(world.redis.llen(queue)) == 2, "the dead worker's claims are back on the queue"
    assert world.run(world.redis.hlen(f"{world.prefix}:celery:unacked")) == 0
