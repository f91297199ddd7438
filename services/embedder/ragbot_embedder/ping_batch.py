"""``embedder.index_page`` for a storm of pings: the delivered ping and those waiting behind it, in one
pipeline call, each message settled and acknowledged on its own after its page is written."""

from __future__ import annotations

import logging
import time
from typing import Any

from celery import Celery, Task
from pydantic import BaseModel, ValidationError

from ragbot.errors import DependencyUnavailable, is_retryable
from ragbot.messaging.queue import REQUEST_ID_HEADER
from ragbot.observability.logging import request_id_scope
from ragbot.schemas.jobs import JobState
from ragbot.schemas.messages import IndexPage
from ragbot_embedder import service
from ragbot_embedder.collect import Claimed, MessageQueue
from ragbot_embedder.pings import index_pings
from ragbot_embedder.runtime import Runtime
from ragbot_embedder.tasks import TaskRunner, failure_reason

__all__ = ["PingBatchRunner"]

logger = logging.getLogger(__name__)


class PingBatchRunner(TaskRunner):
    """``embedder.index_page`` with the pings waiting behind it: one pipeline call for all their pages.

    The delivered message is handled as ``TaskRunner`` handles it (Celery acknowledges it when the
    task returns, or retries it). Up to ``WorkerSettings.ping_batch_max - 1`` further ``index_page``
    messages waiting at the head of the queue are claimed (``ragbot_embedder.collect``: they stay
    unacknowledged, so a killed worker's claims come back), their pages are decided and written with
    the delivered one's (``index_pings``), and each claimed message is settled on its own:
    its job record, a retry sent with its attempt count and backoff, or a dead letter, then its
    acknowledgement, always after its page is written.
    """

    def __init__(self, *, app: Celery, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.app = app
        options = app.conf.broker_transport_options or {}
        self.key_prefix = str(options.get("global_keyprefix", ""))
        self._queues: dict[int, MessageQueue] = {}

    def _execute(
        self, task: Task[Any, Any], rt: Runtime, *, command: BaseModel, job_id: str, attempt: int
    ) -> str:
        started = time.perf_counter()
        queue = self._queue(rt)
        claimed = self._claim(rt, queue)
        others: list[tuple[Claimed, IndexPage]] = []
        for message in claimed:
            try:
                others.append((message, IndexPage.model_validate(message.kwargs.get("message"))))
            except ValidationError as exc:
                logger.error("invalid message dropped", extra={"task": self.name, "error": str(exc)})
                raw = message.kwargs.get("message")
                found = raw.get("job_id") if isinstance(raw, dict) else None
                self._fail(rt, job_id=found if isinstance(found, str) else None, exc=exc, attempts=1)
                self._ack(rt, queue, message)
        assert isinstance(command, IndexPage)
        commands = [command, *(c for _, c in others)]
        attempts = [attempt, *(m.retries for m, _ in others)]
        for cmd, tried in zip(commands, attempts, strict=True):
            self._record(rt, job_id=cmd.job_id, state=JobState.running, attempts=tried + 1)
        if others:
            logger.info("pings taken together", extra={"task": self.name, "pages": len(commands)})
        try:
            results = rt.run(self._pings_in_generations(rt, commands))
        except Exception as exc:  # e.g. Redis down while reading the generations: every ping retries
            results = [exc] * len(commands)
        for (message, cmd), result in zip(others, results[1:], strict=True):
            with request_id_scope(_request_id(message)):
                outcome = self._settle_claimed(rt, queue, message=message, job_id=cmd.job_id, result=result)
            # Each ping taken along is a task done in this batch's time, as the delivered one is.
            rt.ctx.metrics.task_duration.labels(self.name, outcome).observe(time.perf_counter() - started)
        return self._conclude(task, rt, job_id=job_id, attempt=attempt, result=results[0])

    async def _pings_in_generations(
        self, rt: Runtime, commands: list[IndexPage]
    ) -> list[service.Outcome | Exception]:
        """Every generation's pipeline call for the pings; a failure in any generation is the ping's."""
        contexts = await rt.contexts_for(commands[0])
        if not contexts:
            skipped = service.Outcome(
                JobState.skipped,
                "its index generation is gone, its re-embed was aborted, or it is being built again",
            )
            return [skipped] * len(commands)
        results = await index_pings(ctx=contexts[0], commands=commands)
        for ctx in contexts[1:]:
            more = await index_pings(ctx=ctx, commands=commands)
            results = [m if isinstance(m, Exception) else r for r, m in zip(results, more, strict=True)]
        return results

    def _settle_claimed(
        self, rt: Runtime, queue: MessageQueue, *, message: Claimed, job_id: str, result: Any
    ) -> str:
        """A claimed ping's outcome: recorded, retried (a new message) or dead-lettered, then acked; its
        state's name (``retrying`` for a retry)."""
        attempt = message.retries
        outcome = JobState.retrying.value
        if isinstance(result, Exception) and is_retryable(result) and attempt < self.settings.max_retries:
            reason = failure_reason(result)
            delay = self._note_retry(rt, job_id=job_id, attempt=attempt, reason=reason, error=result)
            try:
                self.app.send_task(
                    self.name,
                    kwargs=message.kwargs,
                    queue=self.settings.queue,
                    task_id=message.task_id or None,
                    retries=attempt + 1,
                    countdown=delay,
                    headers={REQUEST_ID_HEADER: _request_id(message)} if _request_id(message) else None,
                    argsrepr="()",
                    kwargsrepr=f"{{'job_id': {job_id!r}}}",
                    ignore_result=True,
                )
            except Exception as exc:  # the broker is away: leave the claim, the restore sweep returns it
                logger.error("could not send a ping's retry", extra={"job_id": job_id, "error": repr(exc)})
                return outcome
        elif isinstance(result, Exception):
            self._fail(rt, job_id=job_id, exc=result, attempts=attempt + 1)
            outcome = JobState.failed.value
        else:
            outcome = result.state.value
            self._record(
                rt,
                job_id=job_id,
                state=result.state,
                error=None,
                detail=result.detail,
                revision_id=result.revision_id,
            )
            logger.info("task %s", result.state.value, extra={"task": self.name, "job_id": job_id})
        self._ack(rt, queue, message)
        return outcome

    def _queue(self, rt: Runtime) -> MessageQueue:
        queue = self._queues.get(id(rt))
        if queue is None:
            queue = MessageQueue(redis=rt.redis, key_prefix=self.key_prefix, queue=self.settings.queue)
            self._queues = {id(rt): queue}
        return queue

    def _claim(self, rt: Runtime, queue: MessageQueue) -> list[Claimed]:
        """Best effort: without Redis the delivered ping runs alone."""
        try:
            return rt.run(queue.claim_waiting(task=self.name, limit=self.settings.ping_batch_max - 1))
        except DependencyUnavailable as exc:
            logger.warning("could not claim waiting pings", extra={"error": str(exc)})
            return []

    def _ack(self, rt: Runtime, queue: MessageQueue, message: Claimed) -> None:
        """Best effort: an ack that fails leaves the claim, restored later; the ping is idempotent."""
        try:
            rt.run(queue.ack(message))
        except DependencyUnavailable as exc:
            logger.warning(
                "could not acknowledge a ping", extra={"task_id": message.task_id, "error": str(exc)}
            )


def _request_id(message: Claimed) -> str | None:
    value = message.headers.get(REQUEST_ID_HEADER)
    return value if isinstance(value, str) and value else None
