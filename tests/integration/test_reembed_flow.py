"""A re-embed's whole flow in one process, on the embedded store with real Redis: the worker's
generations (double writes while building), the batches for the target only, the check before the
switch (a page changed meanwhile is queued again), the switch, the job's progress and the drop; and
an aborted build: its batches skipped, its job failed, its generation dropped, the live one untouched."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import pytest
import redis as sync_redis
from prometheus_client import CollectorRegistry
from redis.asyncio import Redis
from support.fakes.embedder import HashEmbedder
from support.fakes.messaging import FakeEvents, FakeSender
from support.fakes.source import FakeSource

from ragbot.cli.main import main
from ragbot.definition import DocumentDefinition, parse_definition
from ragbot.errors import ValidationFailed
from ragbot.messaging.events import EventPublisher
from ragbot.messaging.jobs import JobStore
from ragbot.messaging.queue import queue_keys
from ragbot.messaging.reembed import (
    ReembedStarted,
    ReembedState,
    ReembedStates,
    abort_reembed,
    finish_reembed,
    generation_of,
    split_options,
    start_reembed,
)
from ragbot.messaging.reindex import refresh_parent
from ragbot.observability.metrics import worker_metrics
from ragbot.ports import Embedder, Generation
from ragbot.schemas.jobs import JobKind, JobState
from ragbot.schemas.messages import DROP_GENERATION_TASK, DeletePage, DropGeneration, IndexPage, IndexPages
from ragbot.schemas.pages import Page
from ragbot.settings import StoreSettings, clear_settings_caches, get_redis_settings, get_worker_settings
from ragbot.stores.generations import LEGACY, build_generations, open_generation
from ragbot_embedder import service
from ragbot_embedder.generations import WorkerGenerations, adopt_live

pytestmark = pytest.mark.integration

OLD_RAW: dict[str, Any] = {
    "identifier_field": "page_id",
    "saved_fields": {"title": "text", "page_id": "integer", "content": "text"},
    "field_for_llm": "content",
    "models": {"hash-embedder": "content"},
}
NEW_RAW: dict[str, Any] = {**OLD_RAW, "models": {"wide": ["title", "content"]}}
OLD, NEW = parse_definition(OLD_RAW), parse_definition(NEW_RAW)
SPLIT = split_options(max_tokens=512, link_targets="drop")
CALLBACK = "http://127.0.0.1:1/page/"


def embedders_for(definition: DocumentDefinition) -> dict[str, Embedder]:
    """Deterministic embedders: the old model 16-d, the new one 24-d."""
    dims = {"hash-embedder": 16, "wide": 24}
    return {m: cast(Embedder, HashEmbedder(m, dimension=dims[m])) for m in definition.model_names}


def wiki_page(page_id: int, revision_id: int) -> Page:
    return Page(
        page_id=page_id,
        revision_id=revision_id,
        title=f"title {page_id}",
        content=f"word{page_id} r{revision_id}",
    )


@dataclass
class World:
    settings: StoreSettings
    workers: WorkerGenerations
    source: FakeSource
    jobs: JobStore
    states: ReembedStates


@pytest.fixture
async def world(tmp_path: Path, redis_url: str) -> AsyncIterator[World]:
    settings = StoreSettings(backend="embedded", embedded_path=tmp_path / "store.sqlite3")
    redis = Redis.from_url(redis_url)
    prefix = f"test-reembed-{uuid.uuid4().hex[:8]}"
    source = FakeSource(pages={p: wiki_page(p, 1) for p in range(1, 8)})
    old_models = embedders_for(OLD)
    dims = {v.name: old_models[v.model].dimension for v in OLD.vector_fields}
    configured = generation_of(OLD, dimensions=dims, split=SPLIT)
    opened = open_generation(
        settings=settings, generation=configured, configured=OLD, configured_dimensions=dims
    )
    generations = build_generations(settings)
    template = service.IndexingContext(
        definition=OLD,
        embedders=old_models,
        store=opened.store,
        source=source,
        jobs=JobStore(redis=redis, key_prefix=prefix),
        events=cast(EventPublisher, FakeEvents()),
        metrics=worker_metrics(CollectorRegistry()),
        max_tokens=512,
        generations=generations,
    )
    states = ReembedStates(redis=redis, key_prefix=prefix)
    workers = WorkerGenerations(
        template=template,
        configured=configured,
        generations=generations,
        states=states,
        store_settings=settings,
        embedders_for=embedders_for,
    )
    assert (await adopt_live(generations=generations, configured=configured)).generation_id == LEGACY
    try:
        yield World(settings, workers, source, template.jobs, states)
    finally:
        await workers.close()
        await opened.store.close()
        async for key in redis.scan_iter(match=f"{prefix}:*"):
            await redis.delete(key)
        await redis.aclose()


async def ping(world: World, page_id: int) -> None:
    """What the worker does for a ping: the page in every generation it writes."""
    page = world.source.pages[page_id]
    assert page is not None
    command = IndexPage(job_id="p", page_id=page_id, revision_id=page.revision_id, callback_url=CALLBACK)
    for ctx in await world.workers.contexts(generation=None):
        await service.index_page(ctx=ctx, command=command)


def new_target() -> Generation:
    """The generation NEW makes with its models' dimensions."""
    models = embedders_for(NEW)
    return generation_of(
        NEW, dimensions={v.name: models[v.model].dimension for v in NEW.vector_fields}, split=SPLIT
    )


async def start(world: World, sender: FakeSender, target: Generation, **options: Any) -> ReembedStarted:
    """``start_reembed`` from the live generation into ``target``, batches of 3 pages."""
    live_ctx = (await world.workers.contexts(generation=None))[0]  # the live one comes first
    return await start_reembed(
        target=target,
        generations=world.workers.generations,
        source_store=live_ctx.store,
        states=world.states,
        jobs=world.jobs,
        sender=cast(Any, sender),
        callback_url=CALLBACK,
        batch_pages=3,
        **options,
    )


async def test_a_reembed_builds_the_target_keeps_both_fresh_then_switches_and_drops(world: World) -> None:
    for page_id in range(1, 8):
        await ping(world, page_id)
    [live_ctx] = await world.workers.contexts(generation=None)
    assert live_ctx.definition == OLD and len(await live_ctx.store.list_pages()) == 7

    target = new_target()
    sender = FakeSender()
    started = await start(world, sender, target)
    assert (started.source, started.target, started.pages) == (LEGACY, target.generation_id, 7)
    assert len(sender.sent) == 3
    with pytest.raises(Exception, match="still building"):  # one build at a time
        await start(world, sender, target)

    # While building, a ping goes to both generations; a delete leaves both.
    both = await world.workers.contexts(generation=None)
    assert [c.definition for c in both] == [OLD, NEW]
    world.source.pages[2] = wiki_page(2, 2)
    await ping(world, 2)
    world.source.pages[7] = None  # the page left the wiki (its content API answers 404)
    for ctx in both:
        await service.delete_page(ctx=ctx, command=DeletePage(job_id="d", page_id=7))
    old_store, new_store = both[0].store, both[1].store
    assert (await old_store.page_state(page_id=2)).revision_id == 2  # type: ignore[union-attr]
    assert (await new_store.page_state(page_id=2)).revision_id == 2  # type: ignore[union-attr]
    assert await old_store.page_state(page_id=7) is None

    # The batches run (for the target only); a page edited after its batch ran is caught before the switch.
    parent_id = started.job.job_id
    for _, message, _ in sender.sent[:3]:
        assert isinstance(message, IndexPages) and message.generation == target.generation_id
        [ctx] = await world.workers.contexts(generation=message.generation)
        outcome = await service.index_pages(ctx=ctx, command=message)
        await world.jobs.update(job_id=message.job_id, state=outcome.state, progress=outcome.progress)
    world.source.pages[5] = wiki_page(5, 3)
    [old_only] = await world.workers.contexts(generation=LEGACY)
    await service.index_page(
        ctx=old_only, command=IndexPage(job_id="x", page_id=5, revision_id=3, callback_url=CALLBACK)
    )
    parent = await refresh_parent(jobs=world.jobs, parent_job_id=parent_id)
    assert parent.state is JobState.running and parent.progress["built"] == 1, parent
    assert parent.progress["total"] == 7 and parent.progress["done"] == 7
    finished = dict(
        generations=world.workers.generations,
        source_store=old_store,
        target_store=new_store,
        states=world.states,
        jobs=world.jobs,
        sender=cast(Any, sender),
    )
    assert await finish_reembed(parent=parent, **finished) is None  # page 5 is behind: queued again
    [(_, again, _)] = sender.sent[3:]
    assert isinstance(again, IndexPages) and [r.page_id for r in again.refs] == [5]
    assert (await world.workers.generations.live()).generation_id == LEGACY
    [ctx] = await world.workers.contexts(generation=target.generation_id)
    outcome = await service.index_pages(ctx=ctx, command=again)
    await world.jobs.update(job_id=again.job_id, state=outcome.state, progress=outcome.progress)
    parent = await refresh_parent(jobs=world.jobs, parent_job_id=parent_id)
    assert await finish_reembed(parent=parent, **finished) == LEGACY

    # Switched: the job is done, one generation is written again, the new one with every page.
    record = await world.jobs.get(job_id=parent_id)
    assert record is not None and record.state is JobState.done and "switched" in (record.detail or "")
    assert record.payload["source"] == LEGACY and record.payload["target"] == target.generation_id
    assert await world.states.get() is None
    [only] = await world.workers.contexts(generation=None)
    assert only.definition == NEW and only.store is new_store
    pages = {p.page_id: p.revision_id for p in await new_store.list_pages()}
    assert pages == {1: 1, 2: 2, 3: 1, 4: 1, 5: 3, 6: 1}
    state = await new_store.page_state(page_id=1)
    assert state is not None and state.paragraphs_per_model == {"wide": 1}
    assert (await refresh_parent(jobs=world.jobs, parent_job_id=parent_id)).state is JobState.done

    await world.workers.drop(generation_id=LEGACY)
    assert not world.settings.embedded_path.exists()
    assert await world.workers.contexts(generation=LEGACY) == []


async def test_an_aborted_reembed_skips_its_batches_fails_its_job_and_drops_only_its_target(
    world: World,
) -> None:
    for page_id in range(1, 8):
        await ping(world, page_id)
    [live_ctx] = await world.workers.contexts(generation=None)
    target = new_target()
    sender = FakeSender()
    started = await start(world, sender, target)
    first = sender.sent[0][1]
    assert isinstance(first, IndexPages)
    [ctx] = await world.workers.batch_contexts(generation=target.generation_id)  # building: written
    outcome = await service.index_pages(ctx=ctx, command=first)
    await world.jobs.update(job_id=first.job_id, state=outcome.state, progress=outcome.progress)

    aborted = await abort_reembed(
        states=world.states, jobs=world.jobs, sender=cast(Any, sender), drop_after_s=5.0
    )
    assert (aborted.job_id, aborted.target) == (started.job.job_id, target.generation_id)
    assert await world.states.get() is None
    # The queued batches are skipped; pings write the live generation only.
    assert await world.workers.batch_contexts(generation=target.generation_id) == []
    assert [c.definition for c in await world.workers.contexts(generation=None)] == [OLD]
    # The job stays failed as aborted whatever its batches do.
    for _, message, _ in sender.sent[1:3]:
        assert isinstance(message, IndexPages)
        await world.jobs.update(job_id=message.job_id, state=JobState.skipped)
    parent = await refresh_parent(jobs=world.jobs, parent_job_id=started.job.job_id)
    assert parent.state is JobState.failed and "aborted" in (parent.error or ""), parent
    assert "stays live" in (parent.detail or "")
    # The drop of the target is queued with its delay, and drops the target only.
    task, drop, _ = sender.sent[3]
    assert task == DROP_GENERATION_TASK and isinstance(drop, DropGeneration)
    assert drop.generation == target.generation_id and sender.countdowns == {3: 5.0}
    assert await world.jobs.get(job_id=drop.job_id) is not None
    outcome = await service.drop_generation(ctx=live_ctx, command=drop)
    assert outcome.state is JobState.done
    assert await world.workers.generations.get(generation_id=target.generation_id) is None
    assert (await world.workers.generations.live()).generation_id == LEGACY
    assert len(await live_ctx.store.list_pages()) == 7

    with pytest.raises(ValidationFailed, match="nothing to abort"):
        await abort_reembed(states=world.states, jobs=world.jobs, sender=cast(Any, sender), drop_after_s=5.0)
    again = await start(world, sender, target)  # the mark is free: a new build may start
    assert again.pages == 7 and again.job.job_id != started.job.job_id
    # A delayed drop of the aborted build must not delete this one (same definition, same id).
    assert await world.workers.drop_contexts(generation=target.generation_id) == []
    assert await world.workers.batch_contexts(generation=target.generation_id) != []


def test_ragbot_reembed_abort_stops_the_build_and_queues_the_drop(
    redis_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The command against real Redis: nothing to abort is exit 2; a build is stopped (exit 0)."""
    prefix = f"test-reembed-cli-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("RAGBOT_REDIS_URL", redis_url)
    monkeypatch.setenv("RAGBOT_REDIS_KEY_PREFIX", prefix)
    clear_settings_caches()

    async def begin() -> str:
        client = Redis.from_url(redis_url)
        try:
            jobs = JobStore(redis=client, key_prefix=prefix)
            parent = await jobs.create(kind=JobKind.reembed, payload={"source": "g-old", "target": "g-new"})
            state = ReembedState(
                job_id=parent.job_id, source="g-old", target="g-new", started_at=datetime.now(UTC)
            )
            assert await ReembedStates(redis=client, key_prefix=prefix).begin(state)
            return parent.job_id
        finally:
            await client.aclose()

    async def read(job_id: str) -> tuple[Any, Any, Any]:
        client = Redis.from_url(redis_url)
        try:
            jobs = JobStore(redis=client, key_prefix=prefix)
            return (
                await ReembedStates(redis=client, key_prefix=prefix).get(),
                await jobs.get(job_id=job_id),
                await jobs.get(job_id=f"{job_id}-drop"),
            )
        finally:
            await client.aclose()

    try:
        assert main(["reembed", "--abort"]) == 2
        assert "nothing to abort" in capsys.readouterr().err
        job_id = asyncio.run(begin())
        assert main(["reembed", "--abort"]) == 0
        assert f"re-embed job {job_id} aborted: g-old stays live, g-new is dropped" in capsys.readouterr().out
        state, parent, drop = asyncio.run(read(job_id))
        assert state is None
        assert parent.state is JobState.failed and "aborted" in parent.error
        assert drop is not None and drop.payload["generation"] == "g-new"
        client = sync_redis.Redis.from_url(redis_url)
        try:
            keys = queue_keys(redis_settings=get_redis_settings(), queue=get_worker_settings().queue)
            assert sum(int(client.llen(k)) for k in keys) == 1  # the drop, sent with its delay
            for key in client.scan_iter(match=f"{prefix}:*"):
                client.delete(key)
        finally:
            client.close()
    finally:
        clear_settings_caches()


async def test_a_reembed_of_an_empty_index_switches_at_once_and_drops_the_old_generation(
    world: World,
) -> None:
    [live_ctx] = await world.workers.contexts(generation=None)
    assert await live_ctx.store.list_pages() == []
    target = new_target()
    sender = FakeSender()
    started = await start(world, sender, target, drop_after_s=7.0)
    assert started.pages == 0 and started.job.state is JobState.done
    assert (await world.workers.generations.live()).generation_id == target.generation_id
    assert await world.states.get() is None
    [(task, drop, _)] = sender.sent
    assert task == DROP_GENERATION_TASK and isinstance(drop, DropGeneration)
    assert drop.generation == LEGACY and sender.countdowns == {0: 7.0}
    record = await refresh_parent(jobs=world.jobs, parent_job_id=started.job.job_id)
    assert record.state is JobState.done and "no pages to build" in (record.detail or "")
    [only] = await world.workers.contexts(generation=None)
    assert only.definition == NEW
    await service.index_page(  # the new generation takes pings at once
        ctx=only, command=IndexPage(job_id="p", page_id=1, revision_id=1, callback_url=CALLBACK)
    )
    assert [p.page_id for p in await only.store.list_pages()] == [1]
