"""Job records, dead letters, events and the task sender against the real Redis (own key prefix each)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest
from redis.asyncio import Redis

from ragbot.errors import DependencyUnavailable, JobNotRetryable, NotFound
from ragbot.messaging.events import EventPublisher, events_key
from ragbot.messaging.jobs import JobStore
from ragbot.messaging.queue import TaskSender, create_celery_app, queue_keys
from ragbot.schemas.jobs import JobKind, JobState
from ragbot.schemas.messages import INDEX_PAGE_TASK, IndexPage, PageDeleted, PageIndexed
from ragbot.settings import RedisSettings

pytestmark = pytest.mark.integration


@pytest.fixture
def prefix() -> str:
    return f"test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def redis(redis_url: str, prefix: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_url)
    try:
        yield client
    finally:
        keys = [k async for k in client.scan_iter(match=f"{prefix}*", count=500)]
        if keys:
            await client.delete(*keys)
        await client.aclose()


@pytest.fixture
def jobs(redis: Redis, prefix: str) -> JobStore:
    return JobStore(redis=redis, key_prefix=prefix, ttl_s=3600)


async def members(redis: Redis, key: str) -> set[str]:
    raw: list[bytes] = await redis.zrange(key, 0, -1)  # type: ignore[assignment]
    return {m.decode() for m in raw}


async def test_lifecycle_moves_the_job_between_state_indexes(jobs: JobStore, redis: Redis) -> None:
    record = await jobs.create(kind=JobKind.index_page, payload={"page_id": 1}, page_id=1, revision_id=2)
    assert record.state is JobState.queued
    assert await jobs.get(job_id=record.job_id) == record
    assert await members(redis, jobs.state_key(JobState.queued)) == {record.job_id}

    running = await jobs.update(job_id=record.job_id, state=JobState.running, attempts=1)
    assert running.attempts == 1 and running.updated_at >= record.updated_at
    assert await members(redis, jobs.state_key(JobState.queued)) == set()
    assert [j.job_id for j in await jobs.list_by_state(state=JobState.running)] == [record.job_id]

    done = await jobs.update(
        job_id=record.job_id, state=JobState.done, detail="indexed 3 paragraphs", error=None
    )
    assert (await jobs.get(job_id=record.job_id)) == done
    assert done.payload == {"page_id": 1} and done.detail == "indexed 3 paragraphs"
    assert await members(redis, jobs.state_key(JobState.running)) == set()
    assert 0 < await redis.ttl(jobs.job_key(record.job_id)) <= 3600


async def test_unknown_job(jobs: JobStore) -> None:
    assert await jobs.get(job_id="nope") is None
    with pytest.raises(NotFound):
        await jobs.update(job_id="nope", state=JobState.done)
    with pytest.raises(NotFound):
        await jobs.requeue(job_id="nope")


async def test_dead_letters_keep_payload_error_attempts_and_can_be_retried(
    jobs: JobStore, redis: Redis
) -> None:
    first = await jobs.create(kind=JobKind.index_page, payload={"page_id": 1, "callback_url": "http://w/"})
    second = await jobs.create(kind=JobKind.delete_page, payload={"page_id": 2})
    await jobs.dead_letter(job_id=first.job_id, error="SourceError: 500", attempts=4)
    await jobs.dead_letter(job_id=second.job_id, error="StoreUnavailable: down", attempts=6)
    await jobs.dead_letter(job_id=second.job_id, error="StoreUnavailable: down", attempts=6)  # no duplicate

    dead = await jobs.dead_letters()
    assert [(j.job_id, j.state, j.error, j.attempts) for j in dead] == [
        (second.job_id, JobState.failed, "StoreUnavailable: down", 6),
        (first.job_id, JobState.failed, "SourceError: 500", 4),
    ]
    assert dead[1].payload == {"page_id": 1, "callback_url": "http://w/"}
    assert [j.job_id for j in await jobs.list_by_state(state=JobState.failed)] == [
        second.job_id,
        first.job_id,
    ]
    assert await jobs.dead_letter_count() == 2
    assert await redis.ttl(jobs.job_key(first.job_id)) == -1  # failed jobs never expire

    again = await jobs.requeue(job_id=first.job_id)
    assert again.state is JobState.queued and again.attempts == 0
    assert again.detail is not None and "SourceError: 500" in again.detail
    assert [j.job_id for j in await jobs.dead_letters()] == [second.job_id]
    with pytest.raises(JobNotRetryable):
        await jobs.requeue(job_id=first.job_id)


async def test_concurrent_updates_lose_nothing(jobs: JobStore) -> None:
    record = await jobs.create(kind=JobKind.reindex)
    await asyncio.gather(*(jobs.update(job_id=record.job_id, progress={f"k{i}": i}) for i in range(25)))
    final = await jobs.get(job_id=record.job_id)
    assert final is not None and final.progress == {f"k{i}": i for i in range(25)}


async def test_redis_down_is_dependency_unavailable() -> None:
    client = Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.5)
    down = JobStore(redis=client, key_prefix="x")
    try:
        with pytest.raises(DependencyUnavailable) as info:
            await down.create(kind=JobKind.index_page)
        assert info.value.dependency == "redis"
        with pytest.raises(DependencyUnavailable):
            await down.get(job_id="x")
    finally:
        await client.aclose()


async def test_events_go_to_a_capped_stream(redis: Redis, prefix: str) -> None:
    events = EventPublisher(redis=redis, key_prefix=prefix, maxlen=10)
    now = datetime.now(UTC)
    first = await events.publish(
        PageIndexed(page_id=1, revision_id=2, paragraphs=3, indexed_at=now, lag_s=0.5)
    )
    await events.publish(PageDeleted(page_id=1, deleted_at=now, reason="out_of_scope"))
    entries: Any = await redis.xrange(events_key(prefix))
    assert entries[0][0].decode() == first
    assert [e[1][b"type"] for e in entries] == [b"page.indexed", b"page.deleted"]
    assert PageIndexed.model_validate_json(entries[0][1][b"data"]).lag_s == 0.5
    assert PageDeleted.model_validate_json(entries[1][1][b"data"]).reason == "out_of_scope"
    for i in range(300):
        await events.publish(PageDeleted(page_id=i, deleted_at=now))
    assert await redis.xlen(events_key(prefix)) < 302


async def test_sender_puts_the_command_on_the_prefixed_queue_with_the_request_id(
    redis_url: str, redis: Redis, prefix: str
) -> None:
    settings = RedisSettings(url=redis_url, key_prefix=prefix)
    queue = f"q-{prefix}"
    sender = TaskSender(create_celery_app(redis_settings=settings, queue=queue), queue=queue)
    command = IndexPage(job_id="j1", page_id=5, revision_id=6, callback_url="http://wiki.test/p/")
    try:
        task_id = await sender.send(task=INDEX_PAGE_TASK, message=command, request_id="rid-7")
    finally:
        sender.close()
    [key, *_] = queue_keys(redis_settings=settings, queue=queue)
    assert key.startswith(f"{prefix}:celery:")
    assert await redis.llen(key) == 1
    raw = await redis.lindex(key, 0)
    assert raw is not None
    message = json.loads(raw)
    assert message["headers"]["task"] == INDEX_PAGE_TASK
    assert message["headers"]["id"] == task_id
    assert message["headers"]["request_id"] == "rid-7"
    assert message["content-type"] == "application/json"


async def test_sender_translates_a_dead_broker() -> None:
    settings = RedisSettings(url="redis://127.0.0.1:1/0", key_prefix="x", socket_timeout_s=0.5)
    sender = TaskSender(create_celery_app(redis_settings=settings, queue="q"), queue="q")
    command = IndexPage(job_id="j1", page_id=5, revision_id=6, callback_url="http://wiki.test/p/")
    try:
        with pytest.raises(DependencyUnavailable) as info:
            await asyncio.wait_for(sender.send(task=INDEX_PAGE_TASK, message=command), timeout=30)
        assert info.value.dependency == "redis"
    finally:
        sender.close()
