"""``POST /v1/reconcile`` end to end on both stores: ingest's HTTP API, the real Redis queue, the worker.

Ingest runs in-process (its ASGI app in a ``TestClient``) with real job records, the real Celery
sender and its own store client, as a separate ingest process would. The commands it queues are read
back off the Redis list kombu wrote and run through the production ``TaskRunner`` over a second
store client, the way the worker runs them. Only the embedding model is a stand-in (hashed words).
"""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

import pytest
import redis as redis_sync
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry
from pydantic import BaseModel
from redis.asyncio import Redis
from support.chat_fakes import serve_app
from support.fake_wiki import FakeWiki
from support.fakes import FakeTask, HashEmbedder

from ragbot.cli import main as cli
from ragbot.definition import parse_definition
from ragbot.messaging.events import EventPublisher
from ragbot.messaging.jobs import JobStore
from ragbot.messaging.queue import TaskSender, create_celery_app, queue_keys
from ragbot.messaging.reconcile_trigger import ReconcileTrigger
from ragbot.messaging.reindex import WikiLister
from ragbot.observability.metrics import worker_metrics
from ragbot.ports import SearchStore
from ragbot.schemas.jobs import JobKind, JobState
from ragbot.schemas.messages import (
    DELETE_PAGE_TASK,
    INDEX_PAGES_TASK,
    RECONCILE_WIKI_TASK,
    DeletePage,
    IndexPages,
    PageRef,
    ReconcileWiki,
)
from ragbot.settings import IngestSettings, RedisSettings, StoreSettings, WorkerSettings
from ragbot.sources.wiki import WikiPageSource
from ragbot.stores import build_store
from ragbot.stores.elasticsearch import ElasticsearchStore
from ragbot_embedder import service
from ragbot_embedder.reconcile import reconcile_wiki
from ragbot_embedder.tasks import TaskRunner
from ragbot_ingest.app import create_app
from ragbot_ingest.deps import Resources

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
QUEUE = "ragbot.index"
HANDLERS: dict[str, tuple[type[BaseModel], Any]] = {
    INDEX_PAGES_TASK: (IndexPages, service.index_pages),
    DELETE_PAGE_TASK: (DeletePage, service.delete_page),
    RECONCILE_WIKI_TASK: (ReconcileWiki, reconcile_wiki),
}


def wiki_page(page_id: int, revision_id: int) -> dict[str, Any]:
    return {
        "page_id": page_id,
        "revision_id": revision_id,
        "revision_date": "20250101000000",
        "title": f"Page {page_id}",
        "url": f"https://wiki.example/{page_id}",
        "content": f"Page {page_id} revision {revision_id} talks about rights number {page_id}.",
    }


@dataclass
class Stack:
    """Ingest's API client, and a worker runtime (own store client, own event loop) over real Redis."""

    client: TestClient
    resources: Callable[[], AbstractAsyncContextManager[Resources]]
    ctx: service.IndexingContext
    store: SearchStore
    jobs: JobStore
    wiki: FakeWiki
    redis_settings: RedisSettings
    loop: asyncio.AbstractEventLoop
    settings: WorkerSettings
    ingest_settings: IngestSettings

    async def contexts_for(self, command: object) -> list[service.IndexingContext]:
        """The one context a command runs in (no index generations here), as the worker's ``Runtime``."""
        return [self.ctx]

    def run(self, awaitable: Awaitable[T]) -> T:
        async def wait() -> T:
            return await awaitable

        return self.loop.run_until_complete(wait())

    def queued(self) -> list[tuple[str, dict[str, Any]]]:
        """Every command waiting on the Redis queue, oldest first, taken off it (what the worker reads)."""
        found: list[tuple[str, dict[str, Any]]] = []
        client = redis_sync.Redis.from_url(self.redis_settings.url)
        try:
            for key in queue_keys(redis_settings=self.redis_settings, queue=QUEUE):
                while (raw := client.rpop(key)) is not None:
                    message = json.loads(cast(bytes, raw))
                    body = message["body"]
                    if message["properties"].get("body_encoding") == "base64":
                        body = base64.b64decode(body)
                    _, kwargs, _ = json.loads(body)
                    found.append((message["headers"]["task"], kwargs["message"]))
        finally:
            client.close()
        return found

    def work(self) -> list[str]:
        """Run every queued command through the production TaskRunner; the task names, in order."""
        names = []
        for name, message in self.queued():
            model, handler = HANDLERS[name]
            runner = TaskRunner(
                name=name,
                model=model,
                handler=handler,
                runtime=lambda: cast(Any, self),
                settings=self.settings,
            )
            assert runner(cast(Any, FakeTask(0)), message) in (JobState.done.value, JobState.skipped.value)
            names.append(name)
        return names

    def indexed(self) -> dict[int, int]:
        return self.run(self.store.page_revisions())

    def index(self, page_ids: range) -> None:
        """Pages put on the wiki and indexed through the worker's batch task."""
        for page_id in page_ids:
            self.wiki.put(wiki_page(page_id, 1))
        refs = [PageRef(page_id=p, callback_url=self.wiki.callback_url) for p in page_ids]
        command = IndexPages(job_id=uuid.uuid4().hex, refs=refs)
        self.run(self.jobs.create(kind=JobKind.index_pages, job_id=command.job_id))
        runner = TaskRunner(
            name=INDEX_PAGES_TASK,
            model=IndexPages,
            handler=service.index_pages,
            runtime=lambda: cast(Any, self),
            settings=self.settings,
        )
        assert runner(cast(Any, FakeTask(0)), command.model_dump(mode="json")) == "done"


def store_settings(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path, es_prefix: str
) -> StoreSettings:
    if backend == "embedded":
        return StoreSettings(backend="embedded", embedded_path=tmp_path / "store.sqlite3")
    return StoreSettings(
        backend="elasticsearch",
        es_url=request.getfixturevalue("es_url"),
        es_index_prefix=es_prefix,
        es_timeout_s=30.0,
    )


@pytest.fixture(params=["embedded", "elasticsearch"])
def stack(request: pytest.FixtureRequest, redis_url: str, tmp_path: Path) -> Iterator[Stack]:
    prefix = f"test-{uuid.uuid4().hex[:12]}"
    settings = store_settings(request.param, request, tmp_path, f"test_{uuid.uuid4().hex[:12]}")
    redis_settings = RedisSettings(url=redis_url, key_prefix=prefix)
    wiki = FakeWiki()
    ingest_settings = IngestSettings(
        allowed_callback_hosts=["127.0.0.1:*"],
        reindex_batch_pages=2,
        reconcile_max_remove_share=0.25,
        wiki_list_url=wiki.list_url,
        delete_reconcile_delay_s=30.0,
    )

    @asynccontextmanager
    async def resources() -> AsyncIterator[Resources]:
        redis = Redis.from_url(redis_url)
        sender = TaskSender(create_celery_app(redis_settings=redis_settings, queue=QUEUE), queue=QUEUE)
        store = build_store(settings=settings, definition=DEFINITION, dimensions=DIMENSIONS)
        try:
            yield Resources(
                settings=ingest_settings,
                jobs=JobStore(redis=redis, key_prefix=prefix, ttl_s=3600),
                sender=sender,
                store=store,
                trigger=ReconcileTrigger(redis=redis, key_prefix=prefix),
            )
        finally:
            sender.close()
            await store.close()
            await redis.aclose()

    loop = asyncio.new_event_loop()
    store = build_store(settings=settings, definition=DEFINITION, dimensions=DIMENSIONS)
    redis = Redis.from_url(redis_url)
    source = WikiPageSource(allowed_hosts=["127.0.0.1:*"], max_bytes=5 * 1024 * 1024, timeout_s=5.0)
    jobs = JobStore(redis=redis, key_prefix=prefix, ttl_s=3600)
    ctx = service.IndexingContext(
        definition=DEFINITION,
        embedders={MODEL: HashEmbedder(MODEL, max_tokens=64)},
        store=store,
        source=source,
        jobs=jobs,
        events=EventPublisher(redis=redis, key_prefix=prefix),
        metrics=worker_metrics(CollectorRegistry()),
        max_tokens=512,
        batch_max_paragraphs=16,
        lister=WikiLister(allowed_hosts=["127.0.0.1:*"], timeout_s=5.0, max_pages=10_000),
    )
    wiki.start()
    loop.run_until_complete(store.ensure_ready())
    try:
        with TestClient(create_app(resources=resources)) as client:
            yield Stack(
                client=client,
                resources=resources,
                ctx=ctx,
                store=store,
                jobs=jobs,
                wiki=wiki,
                redis_settings=redis_settings,
                loop=loop,
                settings=WorkerSettings(max_retries=0),
                ingest_settings=ingest_settings,
            )
    finally:
        wiki.stop()

        async def cleanup() -> None:
            keys = [k async for k in redis.scan_iter(match=f"{prefix}*", count=500)]
            if keys:
                await redis.delete(*keys)
            await redis.aclose()
            await source.aclose()
            if isinstance(store, ElasticsearchStore):
                await store.drop_indices()
            await store.close()

        loop.run_until_complete(cleanup())
        loop.close()


def reconcile(stack: Stack, **body: Any) -> Any:
    return stack.client.post("/v1/reconcile", json={"callback_url": stack.wiki.callback_url, **body})


def test_reconcile_removes_unlisted_pages_and_queues_missing_ones(stack: Stack) -> None:
    stack.index(range(1, 11))
    assert stack.indexed() == {p: 1 for p in range(1, 11)}
    stack.wiki.put(wiki_page(11, 4))
    listing = [*range(1, 9), 11]  # GetRelevantPageIds.php --output=json

    dry = reconcile(stack, listing=listing, dry_run=True)
    assert dry.status_code == 200, dry.text
    body = dry.json()
    assert (body["missing"], body["stale"], body["remove"]) == ([11], [], [9, 10])
    assert (body["listed"], body["indexed"], body["unchanged"], body["job_id"]) == (9, 10, 8, None)
    assert stack.queued() == [] and stack.indexed() == {p: 1 for p in range(1, 11)}

    response = reconcile(stack, listing=listing)
    assert response.status_code == 202, response.text
    accepted = response.json()
    assert accepted["status"] == "running" and response.headers["Location"] == accepted["status_url"]
    job = stack.client.get(accepted["status_url"]).json()
    assert job["kind"] == "reconcile" and job["progress"] == {
        "total": 3,
        "done": 0,
        "failed": 0,
        "batches": 3,
    }

    assert stack.work() == [INDEX_PAGES_TASK, DELETE_PAGE_TASK, DELETE_PAGE_TASK]
    assert stack.indexed() == {**{p: 1 for p in range(1, 9)}, 11: 4}
    job = stack.client.get(accepted["status_url"]).json()
    assert job["state"] == "done", job
    assert job["progress"] == {"total": 3, "done": 3, "failed": 0, "batches": 3}

    again = reconcile(stack, listing="\n".join(str(p) for p in listing), dry_run=True)
    assert again.json()["missing"] == [] and again.json()["remove"] == []


def test_newer_revisions_in_a_mediawiki_listing_are_queued(stack: Stack) -> None:
    stack.index(range(1, 5))
    stack.wiki.put(wiki_page(2, 9))
    pages = {
        str(p): {"pageid": p, "ns": 0, "title": f"Page {p}", "lastrevid": 9 if p == 2 else 1}
        for p in range(1, 5)
    }
    response = reconcile(stack, listing={"batchcomplete": "", "query": {"pages": pages}})
    assert response.status_code == 202, response.text
    assert (response.json()["stale"], response.json()["remove"]) == ([2], [])
    assert stack.work() == [INDEX_PAGES_TASK]
    assert stack.indexed() == {1: 1, 2: 9, 3: 1, 4: 1}


def test_a_truncated_list_trips_the_guard_and_changes_nothing(stack: Stack) -> None:
    stack.index(range(1, 11))
    response = reconcile(stack, listing=[1, 2, 3])
    assert response.status_code == 409, response.text
    detail = response.json()["detail"]
    assert "7 of 10" in detail and "page ids 4, 5, 6, 7, 8, 9, 10." in detail and '"force": true' in detail
    dry = reconcile(stack, listing=[1, 2, 3], dry_run=True)
    assert dry.status_code == 200  # a dry run shows the plan and the guard's word on it
    assert dry.json()["remove"] == list(range(4, 11)) and dry.json()["guard"] == detail
    assert stack.queued() == [] and len(stack.indexed()) == 10
    assert stack.run(stack.jobs.list_by_state(state=JobState.running)) == []

    forced = reconcile(stack, listing=[1, 2, 3], force=True)
    assert forced.status_code == 202 and forced.json()["remove"] == list(range(4, 11))
    stack.work()
    assert stack.indexed() == {1: 1, 2: 1, 3: 1}


def test_pages_to_queue_need_an_allowed_callback_url(stack: Stack) -> None:
    response = stack.client.post("/v1/reconcile", json={"listing": [1]})
    assert response.status_code == 422 and "callback_url" in response.text
    response = stack.client.post(
        "/v1/reconcile", json={"listing": [1], "callback_url": "https://evil.example/p/"}
    )
    assert response.status_code == 422
    assert stack.client.post("/v1/reconcile", json={"listing": [1], "dry_run": True}).status_code == 200
    assert stack.queued() == []


def test_the_cli_prints_the_plan_follows_the_job_and_exits_3_on_the_guard(
    stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stack.index(range(1, 11))
    stack.wiki.put(wiki_page(11, 2))
    relevant = tmp_path / "relevant.txt"  # GetRelevantPageIds.php --with-titles, default output
    relevant.write_text("".join(f"{p}\tPage {p}\n" for p in [*range(1, 9), 11]), encoding="utf-8")
    truncated = tmp_path / "truncated.json"
    truncated.write_text("[1,2]", encoding="utf-8")
    with serve_app(create_app(resources=stack.resources)) as url:
        base = ["reconcile", "--ingest-url", url, "--callback-url", stack.wiki.callback_url]
        assert cli.main([*base, str(relevant), "--dry-run"]) == 0
        out = capsys.readouterr().out
        assert "would index (missing): 1: 11" in out and "would remove: 2: 9 10" in out
        assert stack.queued() == []
        assert cli.main([*base, str(truncated)]) == 3
        assert "8 of 10" in capsys.readouterr().err
        assert cli.main([*base, str(relevant), "--no-wait"]) == 0
        assert "will remove: 2: 9 10" in capsys.readouterr().out
    stack.work()
    assert stack.indexed() == {**{p: 1 for p in range(1, 9)}, 11: 2}


def delete_ping(stack: Stack) -> Any:
    """ChatbotRagContent's delete ping, as the real extension sends it (no page named)."""
    body = {"page_id": 0, "revision_id": 0, "revision_date": False, "callback_url": stack.wiki.callback_url}
    return stack.client.post("/v1/pages/changed", json=body)


def test_a_burst_of_delete_pings_runs_one_reconcile_that_removes_the_deleted_pages(stack: Stack) -> None:
    stack.index(range(1, 11))
    stack.wiki.remove(3)
    stack.wiki.remove(7)
    first = delete_ping(stack)
    assert first.status_code == 202, first.text
    answer = first.json()
    assert answer["action"] == "reconcile" and answer["reconcile_in_s"] == 30.0 and answer["job_id"]
    assert stack.wiki.list_url in answer["detail"]
    later = [delete_ping(stack).json() for _ in range(4)]
    assert {a["job_id"] for a in later} == {answer["job_id"]} and {a["reconcile_in_s"] for a in later} == {
        None
    }
    assert stack.work() == [RECONCILE_WIKI_TASK]  # one reconcile for the burst
    assert stack.indexed() == {p: 1 for p in range(1, 11) if p not in (3, 7)}
    record = stack.run(stack.jobs.get(job_id=answer["job_id"]))
    assert record is not None and record.state is JobState.done
    assert record.detail is not None and "removed 2 (3, 7)" in record.detail


def test_a_reconcile_after_a_delete_ping_that_would_remove_too_much_names_the_pages(stack: Stack) -> None:
    stack.index(range(1, 11))
    for page_id in range(4, 11):  # the list now names 3 of 10: truncated, or a mass delete?
        stack.wiki.remove(page_id)
    job_id = delete_ping(stack).json()["job_id"]
    assert stack.work() == [RECONCILE_WIKI_TASK]
    assert len(stack.indexed()) == 10
    record = stack.run(stack.jobs.get(job_id=job_id))
    assert record is not None and record.state is JobState.skipped and record.detail is not None
    assert "page ids 4, 5, 6, 7, 8, 9, 10." in record.detail and '"force": true' in record.detail


def test_the_delete_ping_needs_page_id_0_with_revision_0_and_says_so_without_a_page_list(
    stack: Stack,
) -> None:
    bad = {"page_id": 0, "revision_id": 5, "revision_date": False, "callback_url": stack.wiki.callback_url}
    refused = stack.client.post("/v1/pages/changed", json=bad)
    assert refused.status_code == 422 and "page ids start at 1" in refused.text
    undated = {
        "page_id": 4,
        "revision_id": 5,
        "revision_date": False,
        "callback_url": stack.wiki.callback_url,
    }
    assert stack.client.post("/v1/pages/changed", json=undated).status_code == 422
    stack.ingest_settings.wiki_list_url = None
    answer = delete_ping(stack)
    assert answer.status_code == 202 and answer.json()["action"] == "nothing"
    assert "RAGBOT_INGEST_WIKI_LIST_URL" in answer.json()["detail"] and stack.queued() == []
