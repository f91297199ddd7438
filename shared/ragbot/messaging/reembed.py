"""Blue/green re-embedding: start a build of a new index generation, and switch to it once it is full.

``start_reembed`` records the new generation (the configured definition's) beside the live one,
marks "building <target> from <source>" in Redis (``ReembedStates``, one build at a time), then
queues every page of the live generation as ``index_pages`` batches for the target only, under one
parent job of kind ``reembed`` whose progress is its batches' sum (``reindex.refresh_parent``). While
the mark is set, workers write every ping to both generations (each with its own definition), so
the target misses nothing and the source stays fresh. ``finish_reembed`` runs when the parent ends
``done``: it checks that every page of the source is in the target at the same or a newer revision
(pages that are not are queued again, and the switch waits for them), switches the pointer
atomically, clears the mark and says which generation to drop. ``abort_reembed`` stops a build:
it clears the mark (workers stop writing to the target and skip its queued batches), marks the job
failed as aborted, and queues the target's drop after a delay (batches already running end first).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from pydantic import BaseModel, ValidationError
from redis.asyncio import Redis

from ragbot.definition import DocumentDefinition, definition_to_json, fingerprint
from ragbot.errors import ConfigurationError, ValidationFailed
from ragbot.messaging.jobs import JobStore
from ragbot.messaging.redis import redis_guard
from ragbot.messaging.reindex import batch_job_id, batches
from ragbot.ports import Generation, Generations, SearchStore
from ragbot.schemas.jobs import JobKind, JobRecord, JobState
from ragbot.schemas.messages import (
    DROP_GENERATION_TASK,
    INDEX_PAGES_TASK,
    DropGeneration,
    IndexPages,
    PageRef,
)
from ragbot.schemas.pages import PageState
from ragbot.settings import ContextualSettings, WorkerSettings
from ragbot.stores import MAX_K
from ragbot.stores.generations import generation_id

logger = logging.getLogger(__name__)


class ReembedState(BaseModel):
    """The Redis mark of a running re-embed: which generation is built from which, under which job."""

    job_id: str
    source: str
    target: str
    started_at: datetime


class CommandSender(Protocol):
    """Sends a command by task name (``ragbot.messaging.queue.TaskSender``)."""

    async def send(
        self, *, task: str, message: BaseModel, request_id: str | None = None, countdown: float | None = None
    ) -> str:
        """Publish one command (``countdown``: not before that many seconds); returns the task id."""


class ReembedStates:
    """The ``<prefix>:reembed`` key: set when a build starts (if none runs), cleared at the switch."""

    def __init__(self, *, redis: Redis, key_prefix: str) -> None:
        self.redis = redis
        self.key = f"{key_prefix}:reembed"

    async def get(self) -> ReembedState | None:
        """The running build, if any."""
        with redis_guard("re-embed state"):
            raw = await self.redis.get(self.key)
        if not raw:
            return None
        try:
            return ReembedState.model_validate_json(raw)
        except ValidationError:
            logger.error("unreadable re-embed state in %s; ignoring it", self.key)
            return None

    async def begin(self, state: ReembedState) -> bool:
        """Set the mark unless a build already runs; False when one does."""
        with redis_guard("re-embed state"):
            return bool(await self.redis.set(self.key, state.model_dump_json(), nx=True))

    async def clear(self, *, job_id: str) -> None:
        """Remove the mark of this job (another job's mark is left alone)."""
        current = await self.get()
        if current is not None and current.job_id == job_id:
            with redis_guard("re-embed state"):
                await self.redis.delete(self.key)


def split_options(*, max_tokens: int, link_targets: str) -> dict[str, Any]:
    """The paragraph options that are part of a generation's fingerprint."""
    return {"max_tokens": int(max_tokens), "link_targets": str(link_targets)}


def worker_max_tokens(*, worker: WorkerSettings, contextual: ContextualSettings) -> int:
    """The paragraph token budget the worker splits with (room left for a contextual text)."""
    if contextual.contextual_retrieval:
        return max(16, worker.paragraph_tokens - contextual.contextual_max_tokens)
    return worker.paragraph_tokens


def generation_of(
    definition: DocumentDefinition, *, dimensions: Mapping[str, int], split: Mapping[str, Any]
) -> Generation:
    """The generation a definition, its models' dimensions and the paragraph options make."""
    fp = fingerprint(definition, dimensions=dimensions, split=split)
    return Generation(
        generation_id=generation_id(fp),
        fingerprint=fp,
        definition=definition_to_json(definition),
        dimensions={k: int(v) for k, v in dimensions.items()},
        split=dict(split),
    )


async def all_pages(store: SearchStore) -> list[PageState]:
    """Every page a store holds, by ascending id."""
    found: list[PageState] = []
    while True:
        window = await store.list_pages(limit=MAX_K, offset=len(found))
        found.extend(window)
        if len(window) < MAX_K:
            return found


@dataclass(frozen=True, slots=True)
class ReembedStarted:
    """What ``start_reembed`` queued."""

    job: JobRecord
    source: str
    target: str
    pages: int


async def start_reembed(
    *,
    target: Generation,
    generations: Generations,
    source_store: SearchStore,
    states: ReembedStates,
    jobs: JobStore,
    sender: CommandSender,
    callback_url: str,
    batch_pages: int,
    request_id: str | None = None,
    drop_after_s: float = 60.0,
) -> ReembedStarted:
    """Record ``target``, mark the build, queue every live page for it; refuses when nothing changed.

    With no page to build (an empty index) it switches at once, and drops the old generation after
    ``drop_after_s``: any page indexed since the mark was set has gone to both."""
    live = await generations.live()
    if live.fingerprint is not None and live.fingerprint == target.fingerprint:
        raise ValidationFailed(
            f"generation {live.generation_id} is live and already has this definition", field="definition"
        )
    if live.generation_id == target.generation_id:
        raise ConfigurationError(f"generation {target.generation_id} is live but recorded another definition")
    await generations.record(target)
    parent = await jobs.create(
        kind=JobKind.reembed,
        payload={"source": live.generation_id, "target": target.generation_id, "batches": 0, "total": 0},
    )
    state = ReembedState(
        job_id=parent.job_id,
        source=live.generation_id,
        target=target.generation_id,
        started_at=datetime.now(UTC),
    )
    if not await states.begin(state):
        running = await states.get()
        await jobs.update(job_id=parent.job_id, state=JobState.failed, error="another re-embed is running")
        raise ValidationFailed(
            f"re-embed job {running.job_id if running else '?'} is still building; wait for it to switch",
            field="definition",
        )
    # Listed after the mark is set: a page indexed from now on reaches the target through the
    # workers' double writes, one indexed before is in this list (and finish_reembed checks both).
    pages = await all_pages(source_store)
    if not pages:
        return await _switch_empty(
            parent=parent,
            state=state,
            generations=generations,
            states=states,
            jobs=jobs,
            sender=sender,
            drop_after_s=drop_after_s,
        )
    groups = list(batches([p.page_id for p in pages], batch_pages))
    parent = await jobs.update(
        job_id=parent.job_id,
        state=JobState.running,
        detail=f"building generation {target.generation_id} from {live.generation_id}",
        payload={**parent.payload, "batches": len(groups), "total": len(pages), "callback_url": callback_url},
        progress={"total": len(pages), "done": 0, "failed": 0, "batches": len(groups), "built": 0},
    )
    for n, ids in enumerate(groups):
        await _queue_batch(
            jobs=jobs,
            sender=sender,
            parent_job_id=parent.job_id,
            batch=n,
            page_ids=ids,
            callback_url=callback_url,
            target=target.generation_id,
            request_id=request_id,
        )
    return ReembedStarted(
        job=parent, source=live.generation_id, target=target.generation_id, pages=len(pages)
    )


async def _switch_empty(
    *,
    parent: JobRecord,
    state: ReembedState,
    generations: Generations,
    states: ReembedStates,
    jobs: JobStore,
    sender: CommandSender,
    drop_after_s: float,
) -> ReembedStarted:
    """An empty source: nothing to build, so the target is complete now; switch and drop the source."""
    await generations.switch(to=state.target)
    await states.clear(job_id=parent.job_id)
    record = await jobs.update(
        job_id=parent.job_id,
        state=JobState.done,
        detail=f"no pages to build: switched to generation {state.target}; {state.source} is dropped shortly",
        payload={**parent.payload, "switched_at": datetime.now(UTC).isoformat()},
        progress={"total": 0, "done": 0, "failed": 0, "batches": 0, "built": 1},
    )
    await queue_drop(
        jobs=jobs, sender=sender, job_id=parent.job_id, generation=state.source, delay_s=drop_after_s
    )
    logger.info("re-embed of an empty index switched at once", extra={"to": state.target})
    return ReembedStarted(job=record, source=state.source, target=state.target, pages=0)


async def queue_drop(
    *, jobs: JobStore, sender: CommandSender, job_id: str, generation: str, delay_s: float
) -> DropGeneration:
    """Record and send the drop of ``generation`` (job ``<job_id>-drop``), not before ``delay_s``."""
    drop = DropGeneration(job_id=f"{job_id}-drop", generation=generation)
    await jobs.create(kind=JobKind.drop_generation, job_id=drop.job_id, payload=drop.model_dump())
    await sender.send(task=DROP_GENERATION_TASK, message=drop, countdown=delay_s)
    return drop


async def _queue_batch(
    *,
    jobs: JobStore,
    sender: CommandSender,
    parent_job_id: str,
    batch: int,
    page_ids: Sequence[int],
    callback_url: str,
    target: str,
    request_id: str | None,
) -> None:
    message = IndexPages(
        job_id=batch_job_id(parent_job_id, batch),
        parent_job_id=parent_job_id,
        batch=batch,
        refs=[PageRef(page_id=p, callback_url=callback_url) for p in page_ids],
        request_id=request_id,
        generation=target,
    )
    await jobs.create(
        kind=JobKind.index_pages,
        job_id=message.job_id,
        payload=message.model_dump(mode="json"),
    )
    await sender.send(task=INDEX_PAGES_TASK, message=message, request_id=request_id)


def missing_pages(source: Sequence[PageState], target: Sequence[PageState]) -> list[int]:
    """Pages of the source that the target lacks, or holds at an older revision."""
    have = {p.page_id: p.revision_id for p in target}
    return [p.page_id for p in source if have.get(p.page_id, -1) < p.revision_id]


async def finish_reembed(
    *,
    parent: JobRecord,
    generations: Generations,
    source_store: SearchStore,
    target_store: SearchStore,
    states: ReembedStates,
    jobs: JobStore,
    sender: CommandSender,
) -> str | None:
    """Switch to the target once the parent is done and the target holds every page; returns the
    generation to drop (None when nothing switched: not done yet, pages queued again, or done before)."""
    state = await states.get()
    built = parent.state is JobState.running and parent.progress.get("built") == 1
    if not built or state is None or state.job_id != parent.job_id:
        return None
    missing = missing_pages(await all_pages(source_store), await all_pages(target_store))
    if missing:
        count = int(parent.payload.get("batches", 0))
        callback_url = str(parent.payload.get("callback_url", ""))
        logger.warning(
            "re-embed target lacks pages; queueing them again before the switch",
            extra={"job_id": parent.job_id, "pages": missing[:20], "count": len(missing)},
        )
        await jobs.update(
            job_id=parent.job_id,
            payload={**parent.payload, "batches": count + 1},
            progress={"built": 0},
            detail=f"{len(missing)} pages changed during the build; queued again",
        )
        await _queue_batch(
            jobs=jobs,
            sender=sender,
            parent_job_id=parent.job_id,
            batch=count,
            page_ids=missing,
            callback_url=callback_url,
            target=state.target,
            request_id=None,
        )
        return None
    await generations.switch(to=state.target)
    await states.clear(job_id=parent.job_id)
    await jobs.update(
        job_id=parent.job_id,
        state=JobState.done,
        detail=f"switched to generation {state.target}; {state.source} is dropped shortly",
        payload={**parent.payload, "switched_at": datetime.now(UTC).isoformat()},
    )
    logger.info(
        "re-embed switched", extra={"job_id": parent.job_id, "from": state.source, "to": state.target}
    )
    return state.source


async def abort_reembed(
    *,
    states: ReembedStates,
    jobs: JobStore,
    sender: CommandSender,
    drop_after_s: float,
    reason: str = "aborted by an operator",
) -> ReembedState:
    """Stop the running build: clear its mark, fail its job as aborted, drop its target generation
    after ``drop_after_s`` (the live generation is never touched). ``ValidationFailed`` when none runs."""
    state = await states.get()
    if state is None:
        raise ValidationFailed("no re-embed is building; nothing to abort", field="reembed")
    await states.clear(job_id=state.job_id)
    parent = await jobs.get(job_id=state.job_id)
    if parent is not None:
        await jobs.update(
            job_id=state.job_id,
            state=JobState.failed,
            error=f"re-embed aborted: {reason}",
            detail=f"generation {state.target} is dropped; {state.source} stays live",
            payload={**parent.payload, "aborted_at": datetime.now(UTC).isoformat()},
        )
    await queue_drop(
        jobs=jobs, sender=sender, job_id=state.job_id, generation=state.target, delay_s=drop_after_s
    )
    logger.warning(
        "re-embed aborted",
        extra={"job_id": state.job_id, "target": state.target, "source": state.source, "reason": reason},
    )
    return state
