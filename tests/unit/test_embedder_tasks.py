"""The worker's decisions without Celery or services: skips, scope exits, retries and dead letters."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import pytest
from celery.exceptions import Retry
from prometheus_client import CollectorRegistry
from support.fakes import FakeEvents, FakeJobs, FakeRuntime, FakeSource, FakeTask, MemoryStore

from ragbot.errors import DependencyUnavailable, SourceError, SourceRefused, StoreUnavailable
from ragbot.messaging.events import EventPublisher
from ragbot.messaging.jobs import JobStore
from ragbot.observability.metrics import worker_metrics
from ragbot.ports import SearchStore
from ragbot.schemas.jobs import JobState
from ragbot.schemas.messages import INDEX_PAGE_TASK, DeletePage, IndexPage, PageDeleted, PageIndexed
from ragbot.schemas.pages import Page, PageState
from ragbot.settings import WorkerSettings
from ragbot_embedder import service
from ragbot_embedder.tasks import TaskRunner, backoff_s, failure_reason

CALLBACK = "http://wiki.test/p/"


@dataclass
class World:
    ctx: service.IndexingContext
    store: MemoryStore
    source: FakeSource
    jobs: FakeJobs
    events: FakeEvents
    registry: CollectorRegistry


@pytest.fixture
def world() -> World:
    store, source, jobs, events = MemoryStore(), FakeSource(), FakeJobs(), FakeEvents()
    jobs.seed(job_id="j1")
    registry = CollectorRegistry()
    ctx = service.IndexingContext(
        definition=cast(Any, None),
        embedders={},
        store=cast(SearchStore, store),
        source=source,
        jobs=cast(JobStore, jobs),
        events=cast(EventPublisher, events),
        metrics=worker_metrics(registry),
        max_tokens=512,
    )
    return World(ctx=ctx, store=store, source=source, jobs=jobs, events=events, registry=registry)


def page(page_id: int = 7, revision_id: int = 3) -> Page:
    return Page(page_id=page_id, revision_id=revision_id, title="t", content="c")


def command(revision_id: int = 3, **kwargs: Any) -> IndexPage:
    return IndexPage(job_id="j1", page_id=7, revision_id=revision_id, callback_url=CALLBACK, **kwargs)


# --- service decisions ------------------------------------------------------------------------------


async def test_older_revision_is_skipped_without_fetching(world: World) -> None:
    world.store.states[7] = PageState(page_id=7, revision_id=5, paragraphs=2)
    outcome = await service.index_page(ctx=world.ctx, command=command(revision_id=4))
    assert outcome.state is JobState.skipped and "older" in outcome.detail
    assert world.source.calls == 0


async def test_same_revision_fetches_then_skips(world: World) -> None:
    world.store.states[7] = PageState(page_id=7, revision_id=3, paragraphs=2)
    world.source.pages[7] = page(revision_id=3)
    outcome = await service.index_page(ctx=world.ctx, command=command(revision_id=3))
    assert outcome.state is JobState.skipped and "already indexed" in outcome.detail
    assert world.source.calls == 1 and world.store.deleted == []


async def test_same_revision_that_left_scope_is_removed(world: World) -> None:
    world.store.states[7] = PageState(page_id=7, revision_id=3, paragraphs=2)
    outcome = await service.index_page(ctx=world.ctx, command=command(revision_id=3))
    assert outcome.state is JobState.done and "left scope" in outcome.detail
    assert world.store.deleted == [7]
    [event] = world.events.published
    assert isinstance(event, PageDeleted) and event.reason == "out_of_scope" and event.job_id == "j1"


async def test_a_different_page_is_refused(world: World) -> None:
    world.source.pages[7] = page(page_id=8)
    with pytest.raises(SourceRefused, match="carries page 8"):
        await service.index_page(ctx=world.ctx, command=command())


async def test_no_page_and_no_callback_is_refused(world: World) -> None:
    bare = IndexPage(job_id="j1", page_id=7, revision_id=3)
    with pytest.raises(SourceRefused, match="neither"):
        await service.index_page(ctx=world.ctx, command=bare)


async def test_store_is_prepared_once(world: World) -> None:
    world.store.states[7] = PageState(page_id=7, revision_id=9, paragraphs=1)
    for _ in range(3):
        await service.index_page(ctx=world.ctx, command=command(revision_id=1))
    assert world.store.ready_calls == 1


async def test_event_failure_does_not_fail_the_delete(world: World) -> None:
    async def broken(event: PageIndexed | PageDeleted) -> str:
        raise DependencyUnavailable("down", dependency="redis")

    world.events.publish = broken  # type: ignore[method-assign]
    outcome = await service.delete_page(ctx=world.ctx, command=DeletePage(page_id=7, job_id="j"))
    assert outcome.state is JobState.done


# --- retries and dead letters -------------------------------------------------------------------------


def test_backoff_is_exponential_capped_and_jittered() -> None:
    assert [backoff_s(attempt=a, base_s=1, max_s=60, rng=lambda: 1.0) for a in range(8)] == [
        1,
        2,
        4,
        8,
        16,
        32,
        60,
        60,
    ]
    assert [backoff_s(attempt=a, base_s=1, max_s=60, rng=lambda: 0.0) for a in range(3)] == [0.5, 1, 2]


@pytest.mark.parametrize(
    ("exc", "reason"),
    [
        (SourceError("x"), "source_error"),
        (SourceRefused("x"), "source_refused"),
        (StoreUnavailable("x"), "store_unavailable"),
        (DependencyUnavailable("x", dependency="redis"), "redis_unavailable"),
        (KeyError("x"), "unexpected"),
    ],
)
def test_failure_reasons(exc: Exception, reason: str) -> None:
    assert failure_reason(exc) == reason


def runner(world: World, handler: Any, *, max_retries: int = 2) -> TaskRunner:
    settings = WorkerSettings(max_retries=max_retries, retry_backoff_s=0.5, retry_backoff_max_s=1.0)
    rt = cast(Any, FakeRuntime(world.ctx))
    return TaskRunner(
        name=INDEX_PAGE_TASK, model=IndexPage, handler=handler, runtime=lambda: rt, settings=settings
    )


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    value = registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


MESSAGE = command().model_dump(mode="json")


def test_retryable_error_schedules_a_retry_with_backoff(world: World) -> None:
    async def failing(**_: Any) -> service.Outcome:
        raise SourceError("the wiki answered 503")

    task = FakeTask(retries=1, request_id="rid-1")
    with pytest.raises(Retry):
        runner(world, failing)(cast(Any, task), MESSAGE)
    [retry] = task.retried
    assert retry["max_retries"] == 2 and 0.5 <= retry["countdown"] <= 1.0
    last = world.jobs.updates[-1]
    assert last["state"] is JobState.retrying and last["attempts"] == 2 and "503" in last["error"]
    assert world.jobs.dead == []
    assert (
        sample(world.registry, "ragbot_task_retries_total", task=INDEX_PAGE_TASK, reason="source_error") == 1
    )
    assert (
        sample(world.registry, "ragbot_task_duration_seconds_count", task=INDEX_PAGE_TASK, outcome="retrying")
        == 1
    )


def test_last_retry_dead_letters_with_attempts(world: World) -> None:
    async def failing(**_: Any) -> service.Outcome:
        raise StoreUnavailable("elasticsearch timed out")

    task = FakeTask(retries=2, request_id="rid-1")
    assert runner(world, failing)(cast(Any, task), MESSAGE) == "failed"
    assert task.retried == []
    assert world.jobs.dead == [
        {"job_id": "j1", "error": "StoreUnavailable: elasticsearch timed out", "attempts": 3}
    ]
    assert sample(world.registry, "ragbot_dead_letters_total", task=INDEX_PAGE_TASK) == 1
    assert (
        sample(world.registry, "ragbot_task_failures_total", task=INDEX_PAGE_TASK, reason="store_unavailable")
        == 1
    )


def test_refused_input_dead_letters_at_once(world: World) -> None:
    async def refusing(**_: Any) -> service.Outcome:
        raise SourceRefused("page is over the cap")

    task = FakeTask(retries=0, request_id="rid-1")
    assert runner(world, refusing)(cast(Any, task), MESSAGE) == "failed"
    assert task.retried == [] and world.jobs.dead[0]["attempts"] == 1


def test_a_bug_is_dead_lettered_not_raised(world: World) -> None:
    async def buggy(**_: Any) -> service.Outcome:
        raise ZeroDivisionError("oops")

    assert runner(world, buggy)(cast(Any, FakeTask(retries=0, request_id="rid-1")), MESSAGE) == "failed"
    assert world.jobs.dead[0]["error"] == "ZeroDivisionError: oops"


@pytest.mark.parametrize("message", [{"job_id": "j9", "page_id": "x"}, ["not", "a", "dict"], None])
def test_invalid_messages_never_crash(world: World, message: Any) -> None:
    async def never(**_: Any) -> service.Outcome:
        raise AssertionError("must not run")

    assert runner(world, never)(cast(Any, FakeTask(retries=0, request_id="rid-1")), message) == "failed"
    if isinstance(message, dict):
        [dead] = world.jobs.dead
        assert (
            dead["job_id"] == "j9" and dead["error"].startswith("ValidationError") and dead["attempts"] == 1
        )
    else:
        assert world.jobs.dead == []
    assert (
        sample(world.registry, "ragbot_task_failures_total", task=INDEX_PAGE_TASK, reason="invalid_message")
        == 1
    )


def test_success_records_the_outcome(world: World) -> None:
    async def ok(**kwargs: Any) -> service.Outcome:
        assert kwargs["command"].job_id == "j1"
        return service.Outcome(JobState.done, "indexed 4 paragraphs", 3)

    assert runner(world, ok)(cast(Any, FakeTask(retries=0, request_id="rid-1")), MESSAGE) == "done"
    first, last = world.jobs.updates[0], world.jobs.updates[-1]
    assert first["state"] is JobState.running and first["attempts"] == 1
    assert last == {
        "job_id": "j1",
        "state": JobState.done,
        "error": None,
        "detail": "indexed 4 paragraphs",
        "revision_id": 3,
    }


def test_the_worker_app_runs_its_tasks_on_the_installed_runtime(world: World) -> None:
    from ragbot.schemas.messages import DELETE_PAGE_TASK, INDEX_PAGES_TASK
    from ragbot.settings import RedisSettings
    from ragbot_embedder.runtime import RuntimeHolder
    from ragbot_embedder.worker import create_worker_app

    def never_built() -> Any:
        raise AssertionError("the installed runtime is used, none is built")

    holder = RuntimeHolder(never_built)
    holder.install(cast(Any, FakeRuntime(world.ctx)))
    app = create_worker_app(
        redis_settings=RedisSettings(url="redis://127.0.0.1:1/0"),
        worker_settings=WorkerSettings(max_retries=0),
        runtime=holder,
    )
    assert {INDEX_PAGE_TASK, INDEX_PAGES_TASK, DELETE_PAGE_TASK} <= set(app.tasks)
    assert holder.get().ctx is world.ctx
    holder.install(None)
    with pytest.raises(AssertionError, match="none is built"):
        holder.get()
