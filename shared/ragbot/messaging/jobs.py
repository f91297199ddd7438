"""Job records in Redis: what ``GET /v1/jobs/{id}`` shows, and the dead-letter list.

Keys (under ``RedisSettings.key_prefix``)::

    <prefix>:job:<id>          the JobRecord as JSON (expires ``ttl_s`` after it ends, unless failed)
    <prefix>:jobs:<state>      sorted set of job ids in that state, scored by last update
    <prefix>:jobs:dead         list of dead-lettered job ids, newest first

Updates are optimistic transactions (WATCH/MULTI), so the worker and an API retry never lose each
other's writes.
"""

from __future__ import annotations

import asyncio
import logging
import random
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final, TypeVar

from redis.asyncio import Redis
from redis.exceptions import WatchError

from ragbot.errors import DependencyUnavailable, JobNotRetryable, NotFound
from ragbot.messaging.redis import REDIS, redis_guard
from ragbot.schemas.jobs import JobKind, JobRecord, JobState

logger = logging.getLogger(__name__)

T = TypeVar("T")
DEFAULT_TTL_S = 7 * 24 * 3600
_ENDED = frozenset({JobState.done, JobState.skipped})
_UNSET: Final = object()
_MAX_WATCH_TRIES = 50


def _now() -> datetime:
    return datetime.now(UTC)


class JobStore:
    """Create, read, update and list job records; keep the dead-letter list."""

    def __init__(self, *, redis: Redis, key_prefix: str, ttl_s: int = DEFAULT_TTL_S) -> None:
        self.redis = redis
        self.prefix = key_prefix
        self.ttl_s = ttl_s

    def job_key(self, job_id: str) -> str:
        """Where one record lives."""
        return f"{self.prefix}:job:{job_id}"

    def state_key(self, state: JobState) -> str:
        """The index of jobs in one state."""
        return f"{self.prefix}:jobs:{state.value}"

    @property
    def dead_letter_key(self) -> str:
        """The list of dead-lettered job ids."""
        return self.dead_letter_key_for(self.prefix)

    @staticmethod
    def dead_letter_key_for(key_prefix: str) -> str:
        """The dead-letter list under a key prefix (for readers without a JobStore, e.g. metrics)."""
        return f"{key_prefix}:jobs:dead"

    async def ping(self) -> bool:
        """True when Redis answers (for /readyz)."""
        return bool(await self.redis.ping())

    async def create(
        self,
        *,
        kind: JobKind,
        payload: Mapping[str, Any] | None = None,
        page_id: int | None = None,
        revision_id: int | None = None,
        job_id: str | None = None,
    ) -> JobRecord:
        """Record a queued job before its command is sent, so the worker always finds it."""
        now = _now()
        record = JobRecord(
            job_id=job_id or uuid.uuid4().hex,
            kind=kind,
            state=JobState.queued,
            page_id=page_id,
            revision_id=revision_id,
            created_at=now,
            updated_at=now,
            payload=dict(payload or {}),
        )
        await self._guard(self._write(record, previous=None))
        return record

    async def get(self, *, job_id: str) -> JobRecord | None:
        """A record, or None when unknown or expired."""
        raw = await self._guard(self.redis.get(self.job_key(job_id)))
        return JobRecord.model_validate_json(raw) if raw else None

    async def update(
        self,
        *,
        job_id: str,
        state: JobState | None = None,
        attempts: int | None = None,
        error: str | object | None = _UNSET,
        detail: str | object | None = _UNSET,
        revision_id: int | None = None,
        progress: Mapping[str, int] | None = None,
        payload: Mapping[str, Any] | None = None,
    ) -> JobRecord:
        """Change a record atomically; raises NotFound for an unknown job."""

        def change(record: JobRecord) -> JobRecord:
            data: dict[str, Any] = {"updated_at": _now()}
            if state is not None:
                data["state"] = state
            if attempts is not None:
                data["attempts"] = attempts
            if error is not _UNSET:
                data["error"] = error
            if detail is not _UNSET:
                data["detail"] = detail
            if revision_id is not None:
                data["revision_id"] = revision_id
            if progress is not None:
                data["progress"] = {**record.progress, **progress}
            if payload is not None:
                data["payload"] = dict(payload)
            return record.model_copy(update=data)

        return await self._mutate(job_id, change)

    async def dead_letter(self, *, job_id: str, error: str, attempts: int) -> JobRecord:
        """Mark a job failed for good and push it onto the dead-letter list."""
        record = await self.update(job_id=job_id, state=JobState.failed, error=error, attempts=attempts)
        pipe = self.redis.pipeline(transaction=True)
        pipe.lrem(self.dead_letter_key, 0, job_id)
        pipe.lpush(self.dead_letter_key, job_id)
        await self._guard(pipe.execute())
        return record

    async def dead_letters(self, *, limit: int = 100, offset: int = 0) -> list[JobRecord]:
        """Dead-lettered jobs, newest first (payload, error and attempts included)."""
        ids = await self._guard(self.redis.lrange(self.dead_letter_key, offset, offset + limit - 1))
        return await self._load([i.decode() if isinstance(i, bytes) else str(i) for i in ids])

    async def dead_letter_count(self) -> int:
        """How many jobs wait in the dead-letter list."""
        return int(await self._guard(self.redis.llen(self.dead_letter_key)))

    async def list_by_state(self, *, state: JobState, limit: int = 100, offset: int = 0) -> list[JobRecord]:
        """Jobs in one state, most recently updated first; failed jobs come from the dead letters."""
        if state is JobState.failed:
            return await self.dead_letters(limit=limit, offset=offset)
        ids = await self._guard(self.redis.zrevrange(self.state_key(state), offset, offset + limit - 1))
        return await self._load([i.decode() if isinstance(i, bytes) else str(i) for i in ids])

    async def requeue(self, *, job_id: str) -> JobRecord:
        """Take a failed job off the dead-letter list and mark it queued again (the caller re-sends it)."""

        def change(record: JobRecord) -> JobRecord:
            if record.state is not JobState.failed:
                raise JobNotRetryable(
                    f"job {job_id} is {record.state.value}; only failed jobs can be retried", field="state"
                )
            return record.model_copy(
                update={
                    "state": JobState.queued,
                    "attempts": 0,
                    "updated_at": _now(),
                    "detail": f"retried after: {record.error}" if record.error else "retried",
                }
            )

        record = await self._mutate(job_id, change)
        await self._guard(self.redis.lrem(self.dead_letter_key, 0, job_id))
        return record

    async def get_many(self, *, job_ids: Sequence[str]) -> list[JobRecord | None]:
        """Records by id, in the order asked (None for unknown or expired ones)."""
        if not job_ids:
            return []
        raws = await self._guard(self.redis.mget([self.job_key(i) for i in job_ids]))
        return [JobRecord.model_validate_json(r) if r else None for r in raws]

    async def aggregate(
        self,
        *,
        job_id: str,
        children: Sequence[str],
        combine: Callable[[JobRecord, list[JobRecord | None]], JobRecord],
    ) -> JobRecord:
        """Rewrite a parent record from its children's, atomically: a child that changes meanwhile
        makes the whole read-and-write start again, so concurrent refreshes never write a stale sum.
        With no children it is the plain optimistic update every other change goes through."""
        key = self.job_key(job_id)
        child_keys = [self.job_key(c) for c in children]
        for attempt in range(_MAX_WATCH_TRIES):
            try:
                with redis_guard(f"job {job_id}"):
                    async with self.redis.pipeline(transaction=True) as pipe:
                        await pipe.watch(key, *child_keys)
                        raw = await pipe.get(key)
                        if not raw:
                            raise NotFound(f"job {job_id} not found")
                        previous = JobRecord.model_validate_json(raw)
                        raws = await pipe.mget(child_keys) if child_keys else []
                        kids = [JobRecord.model_validate_json(r) if r else None for r in raws]
                        record = combine(previous, kids)
                        pipe.multi()  # type: ignore[no-untyped-call]
                        self._queue_write(pipe, record, previous=previous)
                        await pipe.execute()
                        return record
            except WatchError:
                # Another writer won the race: back off a little (jittered) and read again.
                await asyncio.sleep(random.uniform(0, 0.002 * (attempt + 1)))
                continue
        raise DependencyUnavailable(f"job {job_id}: too many concurrent updates", dependency=REDIS)

    async def _load(self, ids: list[str]) -> list[JobRecord]:
        return [r for r in await self.get_many(job_ids=ids) if r is not None]

    async def _mutate(self, job_id: str, change: Callable[[JobRecord], JobRecord]) -> JobRecord:
        return await self.aggregate(job_id=job_id, children=(), combine=lambda record, _: change(record))

    async def _write(self, record: JobRecord, *, previous: JobRecord | None) -> None:
        pipe = self.redis.pipeline(transaction=True)
        self._queue_write(pipe, record, previous=previous)
        await pipe.execute()

    def _queue_write(self, pipe: Any, record: JobRecord, *, previous: JobRecord | None) -> None:
        key = self.job_key(record.job_id)
        score = record.updated_at.timestamp()
        ttl = self.ttl_s if record.state in _ENDED else None
        pipe.set(key, record.model_dump_json(), ex=ttl)
        if previous is not None and previous.state is not record.state:
            pipe.zrem(self.state_key(previous.state), record.job_id)
        pipe.zadd(self.state_key(record.state), {record.job_id: score})
        if record.state in _ENDED:
            # Records of ended jobs expire; drop their index entries once they are older than the TTL.
            pipe.zremrangebyscore(self.state_key(record.state), "-inf", score - self.ttl_s)

    async def _guard(self, awaitable: Awaitable[T]) -> T:
        with redis_guard("job records"):
            return await awaitable
