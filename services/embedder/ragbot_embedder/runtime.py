"""The embedder worker's composition root: one process's resources (``Runtime``) and how they are built.

``build_runtime`` loads and warms the embedders, sizes and prepares the store, and wires the wiki
source, job records, events and (when configured) contextual retrieval, with one event loop every task
of the process runs on. It reads only the worker's settings and the shared ``SourceSettings`` and
``LLMSettings``, never the ingest or chat service's. ``RuntimeHolder`` keeps a process's runtime:
``worker.py`` fills and empties it from Celery's process signals, the tasks read it, tests ``install``
their own.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from redis.asyncio import Redis

from ragbot.definition import load_definition
from ragbot.errors import RagbotError
from ragbot.indexing.contextual import Contextualizer, RedisContextCache
from ragbot.messaging.events import EventPublisher
from ragbot.messaging.jobs import JobStore
from ragbot.messaging.redis import build_redis
from ragbot.messaging.reembed import ReembedStates, generation_of, split_options, worker_max_tokens
from ragbot.messaging.reindex import WikiLister
from ragbot.observability.metrics import worker_metrics
from ragbot.observability.tracing import traced_llm
from ragbot.ports import Embedder
from ragbot.schemas.messages import DropGeneration, IndexPages
from ragbot.settings import (
    ContextualSettings,
    LLMSettings,
    ModelSettings,
    RedisSettings,
    SourceSettings,
    StoreSettings,
    WorkerSettings,
    get_contextual_settings,
    get_llm_settings,
    get_model_settings,
    get_redis_settings,
    get_source_settings,
    get_store_settings,
    get_worker_settings,
)
from ragbot.sources.wiki import WikiPageSource
from ragbot.stores.generations import build_generations
from ragbot_embedder.generations import WorkerGenerations, adopt_live
from ragbot_embedder.service import IndexingContext

logger = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(slots=True)
class Runtime:
    """One worker process's resources and the event loop its tasks run on."""

    ctx: IndexingContext
    settings: WorkerSettings
    loop: asyncio.AbstractEventLoop
    redis: Redis
    source: WikiPageSource | None = None
    generations: WorkerGenerations | None = None

    async def contexts_for(self, command: object) -> list[IndexingContext]:
        """The contexts (one per index generation) a command runs in; ``ctx`` alone without generations."""
        if self.generations is None:
            return [self.ctx]
        target = getattr(command, "generation", None)
        if isinstance(command, IndexPages) and isinstance(target, str):
            return await self.generations.batch_contexts(generation=target)
        if isinstance(command, DropGeneration):
            return await self.generations.drop_contexts(generation=command.generation)
        return await self.generations.contexts(generation=target if isinstance(target, str) else None)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine to completion on this process's loop (tasks are synchronous to Celery)."""
        return self.loop.run_until_complete(coro)

    def close(self) -> None:
        """Release the store, HTTP client, Redis and models."""
        try:
            self.run(self.ctx.store.close())
            if self.generations is not None:
                self.run(self.generations.close())
            if self.source is not None:
                self.run(self.source.aclose())
            self.run(self.redis.aclose())
        except Exception as exc:  # shutting down: report, never mask the shutdown
            logger.warning("error while closing the runtime: %s", exc)
        for embedder in self.ctx.embedders.values():
            embedder.close()
        self.loop.close()


def build_contextualizer(
    *, contextual: ContextualSettings, llm_settings: LLMSettings, redis: Redis, key_prefix: str
) -> Contextualizer:
    """Contextual retrieval with the LLM settings and a Redis cache (the LLM is warmed here)."""
    from ragbot.llms import build_llm

    llm = traced_llm(build_llm(settings=llm_settings))
    llm.warm_up()
    return Contextualizer(
        llm=llm,
        cache=RedisContextCache(redis=redis, key_prefix=key_prefix, ttl_s=contextual.contextual_cache_ttl_s),
        model_name=f"{llm.backend}:{llm.model}",
        max_tokens=contextual.contextual_max_tokens,
        document_chars=contextual.contextual_document_chars,
        concurrency=contextual.contextual_concurrency,
    )


def build_runtime(
    *,
    worker_settings: WorkerSettings,
    redis_settings: RedisSettings,
    store_settings: StoreSettings,
    model_settings: ModelSettings,
    source_settings: SourceSettings,
    contextual_settings: ContextualSettings | None = None,
    llm_settings: LLMSettings | None = None,
) -> Runtime:
    """The composition root: load and warm the models, size and prepare the store, wire the rest."""
    from ragbot.embedders import build_embedders
    from ragbot.stores import build_store

    contextual = contextual_settings or get_contextual_settings()
    definition = load_definition(model_settings.document_definition)
    embedders: Mapping[str, Embedder] = build_embedders(settings=model_settings, definition=definition)
    for embedder in embedders.values():
        embedder.warm_up()
    dimensions = {v.name: embedders[v.model].dimension for v in definition.vector_fields}
    store = build_store(settings=store_settings, definition=definition, dimensions=dimensions)
    loop = asyncio.new_event_loop()
    redis = build_redis(redis_settings)
    source = WikiPageSource(
        allowed_hosts=source_settings.allowed_callback_hosts,
        max_bytes=source_settings.max_page_bytes,
        timeout_s=source_settings.fetch_timeout_s,
    )
    contextualizer = (
        build_contextualizer(
            contextual=contextual,
            llm_settings=llm_settings or get_llm_settings(),
            redis=redis,
            key_prefix=redis_settings.key_prefix,
        )
        if contextual.contextual_retrieval
        else None
    )
    # Room for the context in the model's input when contextual retrieval is on.
    max_tokens = worker_max_tokens(worker=worker_settings, contextual=contextual)
    ctx = IndexingContext(
        definition=definition,
        embedders=embedders,
        store=store,
        source=source,
        jobs=JobStore(redis=redis, key_prefix=redis_settings.key_prefix),
        events=EventPublisher(redis=redis, key_prefix=redis_settings.key_prefix),
        metrics=worker_metrics(),
        max_tokens=max_tokens,
        link_targets=worker_settings.link_targets,
        batch_max_paragraphs=worker_settings.micro_batch_max_paragraphs,
        contextualizer=contextualizer,
        lister=WikiLister(
            allowed_hosts=source_settings.allowed_callback_hosts,
            timeout_s=source_settings.fetch_timeout_s,
            max_pages=1_000_000,
        ),
    )
    runtime = Runtime(ctx=ctx, settings=worker_settings, loop=loop, redis=redis, source=source)
    configured = generation_of(
        definition,
        dimensions=dimensions,
        split=split_options(max_tokens=max_tokens, link_targets=worker_settings.link_targets),
    )
    generations = build_generations(store_settings)
    ctx.generations = generations
    runtime.generations = WorkerGenerations(
        template=ctx,
        configured=configured,
        generations=generations,
        states=ReembedStates(redis=redis, key_prefix=redis_settings.key_prefix),
        store_settings=store_settings,
        embedders_for=lambda d: build_embedders(settings=model_settings, definition=d),
    )
    try:
        runtime.run(adopt_live(generations=generations, configured=configured))
        [runtime.ctx, *_] = runtime.run(runtime.generations.contexts(generation=None))
        runtime.run(runtime.ctx.ready_store())
    except RagbotError as exc:  # start anyway: every task retries store errors with backoff
        logger.warning("store not ready at start: %s", exc)
    logger.info(
        "worker process ready",
        extra={"models": list(embedders), "store": store_settings.backend, "queue": worker_settings.queue},
    )
    return runtime


def default_runtime() -> Runtime:
    """A runtime from the cached settings factories."""
    return build_runtime(
        worker_settings=get_worker_settings(),
        redis_settings=get_redis_settings(),
        store_settings=get_store_settings(),
        model_settings=get_model_settings(),
        source_settings=get_source_settings(),
        contextual_settings=get_contextual_settings(),
    )


class RuntimeHolder:
    """A process's runtime, built on first use (or by the process-init signal); tests install theirs."""

    def __init__(self, build: Callable[[], Runtime] = default_runtime) -> None:
        self._build = build
        self._runtime: Runtime | None = None
        self._lock = threading.Lock()

    def get(self) -> Runtime:
        """This process's runtime, built now if nothing built or installed one yet."""
        with self._lock:
            if self._runtime is None:
                self._runtime = self._build()
            return self._runtime

    __call__ = get  # the ``runtime`` callable ``register_tasks`` takes

    def install(self, runtime: Runtime | None) -> None:
        """Replace this process's runtime (tests); None forgets it."""
        with self._lock:
            self._runtime = runtime

    def release(self) -> None:
        """Forget the runtime and close it (process shutdown)."""
        with self._lock:
            runtime, self._runtime = self._runtime, None
        if runtime is not None:
            runtime.close()
