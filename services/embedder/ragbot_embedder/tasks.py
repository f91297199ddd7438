"""The Celery tasks ``embedder.index_page``, ``embedder.index_pages``, ``embedder.delete_page`` and
``embedder.drop_generation``: validation, retries, dead letters, and a re-embed's switch.

Each task validates its message, runs the service function on the process's event loop and maps the
result onto the job record. Source and dependency errors (wiki 5xx/timeouts, store or Redis down:
``ragbot.errors.is_retryable``) are retried with exponential backoff and jitter up to
``WorkerSettings.max_retries``; after the last retry, or at once for input we will never accept, the
job is dead-lettered with its error and attempt count. Nothing a message contains can crash the worker.

A batch (``index_pages``) may end partly done: its pages that failed for a retryable reason make the
task retry (the pages already written are skipped on the next attempt), pages that failed for good
dead-letter the batch job with the reasons. Every record of a batch is followed by a refresh of its
reindex parent's progress.
"""

from __future__ import annotations

import logging
import random
import re
import time
from collections.abc import Callable, Coroutine
from typing import Any, NoReturn, TypeVar

from celery import Celery, Task
from celery.exceptions import Retry
from pydantic import BaseModel, ValidationError

from ragbot.errors import DependencyUnavailable, NotFound, PagesFailed, SourceError, is_retryable
from ragbot.messaging.queue import TaskSender, task_request_id
from ragbot.messaging.reembed import finish_reembed, queue_drop
from ragbot.messaging.reindex import refresh_parent
from ragbot.observability.logging import request_id_scope
from ragbot.schemas.jobs import JobKind, JobRecord, JobState
from ragbot.schemas.messages import (
    DELETE_PAGE_TASK,
    DROP_GENERATION_TASK,
    INDEX_PAGE_TASK,
    INDEX_PAGES_TASK,
    POLL_MEDIAWIKI_TASK,
    RECONCILE_WIKI_TASK,
    DeletePage,
    DropGeneration,
    IndexPage,
    IndexPages,
    PollMediaWiki,
    ReconcileWiki,
)
from ragbot.settings import WorkerSettings
from ragbot_embedder import reconcile, service, wiki_poll
from ragbot_embedder.runtime import Runtime

logger = logging.getLogger(__name__)
C = TypeVar("C", bound=BaseModel)


def backoff_s(
    *, attempt: int, base_s: float, max_s: float, rng: Callable[[], float] = random.random
) -> float:
    """Exponential backoff capped at ``max_s``, with equal jitter (half fixed, half random)."""
    delay = min(max_s, base_s * (2.0**attempt))
    return delay / 2 + rng() * delay / 2


def failure_reason(exc: BaseException) -> str:
    """A short metric label for why a task failed (``source_error``, ``store_unavailable`` ...)."""
    if isinstance(exc, ValidationError):
        return "invalid_message"
    if isinstance(exc, DependencyUnavailable) and type(exc) is DependencyUnavailable:
        return f"{exc.dependency}_unavailable"
    name = type(exc).__name__
    if not type(exc).__module__.startswith("ragbot"):
        return "unexpected"
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


class TaskRunner:
    """Runs one command type: parse, execute, record the outcome, retry or dead-letter."""

    def __init__(
        self,
        *,
        name: str,
        model: type[C],
        handler: Callable[..., Coroutine[Any, Any, service.Outcome]],
        runtime: Callable[[], Runtime],
        settings: WorkerSettings,
    ) -> None:
        self.name = name
        self.model: type[BaseModel] = model
        self.handler = handler
        self.runtime = runtime
        self.settings = settings

    def __call__(self, task: Task[Any, Any], message: Any) -> str:
        """The task body Celery calls; returns the final state's name."""
        rid = task_request_id(task) or (message.get("request_id") if isinstance(message, dict) else None)
        with request_id_scope(rid):
            started = time.perf_counter()
            outcome = JobState.failed.value
            try:
                outcome = self._run(task, message)
                return outcome
            except Retry:
                outcome = JobState.retrying.value
                raise
            finally:
                rt = self.runtime()
                rt.ctx.metrics.task_duration.labels(self.name, outcome).observe(time.perf_counter() - started)

    def _run(self, task: Task[Any, Any], message: Any) -> str:
        rt = self.runtime()
        job_id = message.get("job_id") if isinstance(message, dict) else None
        job_id = job_id if isinstance(job_id, str) else None
        attempt = int(task.request.retries or 0)
        try:
            command = self.model.model_validate(message)
        except ValidationError as exc:
            logger.error("invalid message dropped", extra={"task": self.name, "error": str(exc)})
            return self._fail(rt, job_id=job_id, exc=exc, attempts=attempt + 1)
        job_id = str(getattr(command, "job_id", job_id))
        parent = getattr(command, "parent_job_id", None)
        try:
            return self._execute(task, rt, command=command, job_id=job_id, attempt=attempt)
        finally:
            if isinstance(parent, str) and parent:
                self._refresh_parent(task, rt, parent)

    def _execute(
        self, task: Task[Any, Any], rt: Runtime, *, command: BaseModel, job_id: str, attempt: int
    ) -> str:
        self._record(rt, job_id=job_id, state=JobState.running, attempts=attempt + 1)
        final = attempt >= self.settings.max_retries
        try:
            result: service.Outcome | Exception = rt.run(
                self._in_generations(rt, command=command, final=final)
            )
        except Exception as exc:  # bad input or a bug is dead-lettered at once: the worker stays alive
            result = exc
        return self._conclude(task, rt, job_id=job_id, attempt=attempt, result=result)

    def _conclude(
        self,
        task: Task[Any, Any],
        rt: Runtime,
        *,
        job_id: str,
        attempt: int,
        result: service.Outcome | Exception,
    ) -> str:
        """Record how the command ended; retry (raises ``Retry``) or dead-letter when it failed."""
        final = attempt >= self.settings.max_retries
        if isinstance(result, Exception):
            if is_retryable(result) and not final:
                self._retry(
                    task, rt, job_id=job_id, attempt=attempt, reason=failure_reason(result), error=result
                )
            return self._fail(rt, job_id=job_id, exc=result, attempts=attempt + 1)
        extra: dict[str, Any] = {}
        if result.progress is not None:
            extra["progress"] = dict(result.progress)
        if result.retry is not None and not final:
            self._record(rt, job_id=job_id, **extra)
            self._retry(
                task,
                rt,
                job_id=job_id,
                attempt=attempt,
                reason="source_error",
                error=SourceError(result.retry),
            )
        if result.state is JobState.failed:
            self._record(rt, job_id=job_id, detail=result.detail, **extra)
            return self._fail(
                rt,
                job_id=job_id,
                exc=PagesFailed(result.error or result.detail),
                attempts=attempt + 1,
            )
        if result.payload is not None:
            extra["payload"] = dict(result.payload)
        self._record(
            rt,
            job_id=job_id,
            state=result.state,
            error=None,
            detail=result.detail,
            revision_id=result.revision_id,
            **extra,
        )
        logger.info(
            "task %s",
            result.state.value,
            extra={"task": self.name, "job_id": job_id, "detail": result.detail},
        )
        return result.state.value

    async def _in_generations(self, rt: Runtime, *, command: BaseModel, final: bool) -> service.Outcome:
        """Run the command in every index generation it writes; the first one's outcome is the job's
        (the live generation's, or a re-embed batch's target). A failure in any raises: the task is
        retried and every generation rewritten, which is idempotent."""
        contexts = await rt.contexts_for(command)
        if not contexts:
            return service.Outcome(
                JobState.skipped,
                "its index generation is gone, its re-embed was aborted, or it is being built again",
            )
        outcome = await self.handler(ctx=contexts[0], command=command, final=final)
        for ctx in contexts[1:]:
            await self.handler(ctx=ctx, command=command, final=final)
        return outcome

    def _retry(
        self, task: Task[Any, Any], rt: Runtime, *, job_id: str, attempt: int, reason: str, error: Exception
    ) -> NoReturn:
        """Record the failed attempt and schedule the next one with backoff (raises ``Retry``)."""
        delay = self._note_retry(rt, job_id=job_id, attempt=attempt, reason=reason, error=error)
        raise task.retry(countdown=delay, max_retries=self.settings.max_retries) from None

    def _note_retry(self, rt: Runtime, *, job_id: str, attempt: int, reason: str, error: Exception) -> float:
        """Count, log and record a failed attempt; the delay before the next one."""
        delay = backoff_s(
            attempt=attempt,
            base_s=self.settings.retry_backoff_s,
            max_s=self.settings.retry_backoff_max_s,
        )
        rt.ctx.metrics.retries.labels(self.name, reason).inc()
        logger.warning(
            "task failed, retrying",
            extra={
                "task": self.name,
                "job_id": job_id,
                "attempt": attempt + 1,
                "delay_s": round(delay, 3),
                "error": f"{type(error).__name__}: {error}",
            },
        )
        self._record(
            rt,
            job_id=job_id,
            state=JobState.retrying,
            attempts=attempt + 1,
            error=f"{type(error).__name__}: {error}",
            detail=f"attempt {attempt + 1} of {self.settings.max_retries + 1} failed; retry in {delay:.2f} s",
        )
        return delay

    def _refresh_parent(self, task: Task[Any, Any], rt: Runtime, parent_job_id: str) -> None:
        """Best effort: the next batch (or a status read) refreshes it again. A re-embed whose every
        page is built is switched here, and its old generation dropped after a delay."""
        try:
            record = rt.run(refresh_parent(jobs=rt.ctx.jobs, parent_job_id=parent_job_id))
            if record.kind is JobKind.reembed and rt.generations is not None:
                rt.run(self._finish_reembed(task, rt, record))
        except (DependencyUnavailable, NotFound) as exc:
            logger.warning(
                "could not refresh the reindex job", extra={"job_id": parent_job_id, "error": str(exc)}
            )

    async def _finish_reembed(self, task: Task[Any, Any], rt: Runtime, record: JobRecord) -> None:
        assert rt.generations is not None
        sender = TaskSender(task.app, queue=self.settings.queue)
        source = str(record.payload.get("source", ""))
        target = str(record.payload.get("target", ""))
        gens = rt.generations
        source_ctx = await gens.contexts(generation=source)
        target_ctx = await gens.contexts(generation=target)
        if not source_ctx or not target_ctx:
            return
        retired = await finish_reembed(
            parent=record,
            generations=gens.generations,
            source_store=source_ctx[0].store,
            target_store=target_ctx[0].store,
            states=gens.states,
            jobs=rt.ctx.jobs,
            sender=sender,
        )
        if retired is None:
            return
        await queue_drop(
            jobs=rt.ctx.jobs,
            sender=sender,
            job_id=record.job_id,
            generation=retired,
            delay_s=self.settings.reembed_drop_after_s,
        )

    def _fail(self, rt: Runtime, *, job_id: str | None, exc: BaseException, attempts: int) -> str:
        reason = failure_reason(exc)
        error = f"{type(exc).__name__}: {exc}"
        rt.ctx.metrics.failures.labels(self.name, reason).inc()
        logger.error(
            "task failed for good",
            extra={
                "task": self.name,
                "job_id": job_id,
                "reason": reason,
                "attempts": attempts,
                "error": error,
            },
            exc_info=reason == "unexpected",
        )
        if job_id is None:
            return JobState.failed.value
        try:
            rt.run(rt.ctx.jobs.dead_letter(job_id=job_id, error=error, attempts=attempts))
            rt.ctx.metrics.dead_letters.labels(self.name).inc()
        except (DependencyUnavailable, NotFound) as record_exc:
            logger.error("could not dead-letter job", extra={"job_id": job_id, "error": str(record_exc)})
        return JobState.failed.value

    def _record(self, rt: Runtime, *, job_id: str | None, **changes: Any) -> None:
        """Job bookkeeping is best effort: a missing record or a Redis hiccup never fails the page."""
        if job_id is None:
            return
        try:
            rt.run(rt.ctx.jobs.update(job_id=job_id, **changes))
        except (DependencyUnavailable, NotFound) as exc:
            logger.warning("could not update job", extra={"job_id": job_id, "error": str(exc)})


# Each task's shared name, the command it takes and the service function that carries it out.
_TASKS: tuple[tuple[str, type[BaseModel], Callable[..., Coroutine[Any, Any, service.Outcome]]], ...] = (
    (INDEX_PAGE_TASK, IndexPage, service.index_page),
    (INDEX_PAGES_TASK, IndexPages, service.index_pages),
    (DELETE_PAGE_TASK, DeletePage, service.delete_page),
    (DROP_GENERATION_TASK, DropGeneration, service.drop_generation),
    (RECONCILE_WIKI_TASK, ReconcileWiki, reconcile.reconcile_wiki),
    (POLL_MEDIAWIKI_TASK, PollMediaWiki, wiki_poll.poll_mediawiki),
)


def register_tasks(app: Celery, *, worker_settings: WorkerSettings, runtime: Callable[[], Runtime]) -> None:
    """Register the tasks on ``app`` by their shared names (pings through ``PingBatchRunner``)."""
    from ragbot_embedder.ping_batch import PingBatchRunner

    for name, model, handler in _TASKS:
        runner = (
            PingBatchRunner(
                app=app, name=name, model=model, handler=handler, runtime=runtime, settings=worker_settings
            )
            if name == INDEX_PAGE_TASK and worker_settings.ping_batch_max > 1
            else TaskRunner(
                name=name, model=model, handler=handler, runtime=runtime, settings=worker_settings
            )
        )
        app.task(name=name, bind=True, max_retries=worker_settings.max_retries)(_task_body(runner))


def _task_body(runner: TaskRunner) -> Callable[[Task[Any, Any], Any], str]:
    """A plain function for Celery to bind (``bind=True`` passes the task as ``self``), named and
    described after the service function it runs."""

    def body(self: Task[Any, Any], message: Any) -> str:
        return runner(self, message)

    body.__name__ = body.__qualname__ = runner.handler.__name__
    body.__doc__ = runner.handler.__doc__
    return body
