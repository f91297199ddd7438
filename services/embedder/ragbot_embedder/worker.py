"""The embedder worker: its Celery app and the per-process composition root.

``create_worker_app`` registers the tasks and hooks ``worker_process_init`` (sent by both the solo
and prefork pools), which builds the ``Runtime`` once per process: settings, definition, embedders
(``warm_up``), store (``ensure_ready``), wiki source, job records and events, and one event loop
every task of the process runs on. Tests install their own runtime with ``install_runtime``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from celery import Celery, signals
from redis.asyncio import Redis

from ragbot.definition import load_definition
from ragbot.errors import RagbotError
from ragbot.indexing.contextual import Contextualizer, RedisContextCache
from ragbot.messaging.events import EventPublisher
from ragbot.messaging.jobs import JobStore
from ragbot.messaging.queue import create_celery_app
from ragbot.messaging.redis import build_redis
from ragbot.observability.metrics import mark_process_dead, worker_metrics
from ragbot.ports import Embedder
from ragbot.settings import (
    ChatSettings,
    IngestSettings,
    ModelSettings,
    RedisSettings,
    StoreSettings,
    WorkerSettings,
    get_chat_settings,
    get_ingest_settings,
    get_model_settings,
    get_redis_settings,
    get_store_settings,
    get_worker_settings,
)
from ragbot.sources.wiki import WikiPageSource
from ragbot_embedder.service import IndexingContext
from ragbot_embedder.tasks import register_tasks

logger = logging.getLogger(__name__)
SERVICE = "embedder"
T = TypeVar("T")


@dataclass(slots=True)
class Runtime:
    """One worker process's resources and the event loop its tasks run on."""

    ctx: IndexingContext
    settings: WorkerSettings
    loop: asyncio.AbstractEventLoop
    redis: Redis
    source: WikiPageSource | None = None

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine to completion on this process's loop (tasks are synchronous to Celery)."""
        return self.loop.run_until_complete(coro)

    def close(self) -> None:
        """Release the store, HTTP client, Redis and models."""
        try:
            self.run(self.ctx.store.close())
            if self.source is not None:
                self.run(self.source.aclose())
            self.run(self.redis.aclose())
        except Exception as exc:  # shutting down: report, never mask the shutdown
            logger.warning("error while closing the runtime: %s", exc)
        for embedder in self.ctx.embedders.values():
            embedder.close()
        self.loop.close()


def build_contextualizer(
    *, worker_settings: WorkerSettings, chat_settings: ChatSettings, redis: Redis, key_prefix: str
) -> Contextualizer:
    """Contextual retrieval with the chat LLM's settings and a Redis cache (the LLM is warmed here)."""
    from ragbot.llms import build_llm

    llm = build_llm(settings=chat_settings)
    llm.warm_up()
    return Contextualizer(
        llm=llm,
        cache=RedisContextCache(
            redis=redis, key_prefix=key_prefix, ttl_s=worker_settings.contextual_cache_ttl_s
        ),
        model_name=f"{llm.backend}:{llm.model}",
        max_tokens=worker_settings.contextual_max_tokens,
        document_chars=worker_settings.contextual_document_chars,
        concurrency=worker_settings.contextual_concurrency,
    )


def build_runtime(
    *,
    worker_settings: WorkerSettings,
    redis_settings: RedisSettings,
    store_settings: StoreSettings,
    model_settings: ModelSettings,
    ingest_settings: IngestSettings,
    chat_settings: ChatSettings | None = None,
) -> Runtime:
    """The composition root: load and warm the models, size and prepare the store, wire the rest."""
    from ragbot.embedders import build_embedders
    from ragbot.stores import build_store

    definition = load_definition(model_settings.document_definition)
    embedders: Mapping[str, Embedder] = build_embedders(settings=model_settings, definition=definition)
    for embedder in embedders.values():
        embedder.warm_up()
    dimensions = {v.name: embedders[v.model].dimension for v in definition.vector_fields}
    store = build_store(settings=store_settings, definition=definition, dimensions=dimensions)
    loop = asyncio.new_event_loop()
    redis = build_redis(redis_settings)
    source = WikiPageSource(
        allowed_hosts=ingest_settings.allowed_callback_hosts,
        max_bytes=ingest_settings.max_page_bytes,
        timeout_s=ingest_settings.fetch_timeout_s,
    )
    contextualizer = (
        build_contextualizer(
            worker_settings=worker_settings,
            chat_settings=chat_settings or get_chat_settings(),
            redis=redis,
            key_prefix=redis_settings.key_prefix,
        )
        if worker_settings.contextual_retrieval
        else None
    )
    max_tokens = worker_settings.paragraph_tokens
    if contextualizer is not None:  # room for the context in the model's input
        max_tokens = max(16, max_tokens - worker_settings.contextual_max_tokens)
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
    )
    runtime = Runtime(ctx=ctx, settings=worker_settings, loop=loop, redis=redis, source=source)
    try:
        runtime.run(ctx.ready_store())
    except RagbotError as exc:  # start anyway: every task retries store errors with backoff
        logger.warning("store not ready at start: %s", exc)
    logger.info(
        "worker process ready",
        extra={"models": list(embedders), "store": store_settings.backend, "queue": worker_settings.queue},
    )
    return runtime


_runtime: Runtime | None = None
_runtime_lock = threading.Lock()


def default_runtime() -> Runtime:
    """A runtime from the cached settings factories."""
    return build_runtime(
        worker_settings=get_worker_settings(),
        redis_settings=get_redis_settings(),
        store_settings=get_store_settings(),
        model_settings=get_model_settings(),
        ingest_settings=get_ingest_settings(),
    )


def get_runtime() -> Runtime:
    """This process's runtime, built on first use if the process-init signal did not build it."""
    global _runtime
    with _runtime_lock:
        if _runtime is None:
            _runtime = default_runtime()
        return _runtime


def install_runtime(runtime: Runtime | None) -> None:
    """Replace this process's runtime (tests); None forgets it."""
    global _runtime
    with _runtime_lock:
        _runtime = runtime


def _on_process_init(**_: Any) -> None:
    try:
        get_runtime()
    except Exception:
        logger.critical("worker process could not start", exc_info=True)
        raise


def _on_process_shutdown(**_: Any) -> None:
    global _runtime
    with _runtime_lock:
        runtime, _runtime = _runtime, None
    if runtime is not None:
        runtime.close()
    mark_process_dead(os.getpid())


def _keep_our_logging(**_: Any) -> None:
    """Connected to ``setup_logging`` so Celery leaves the JSON logging configuration alone."""


def create_worker_app(*, redis_settings: RedisSettings, worker_settings: WorkerSettings) -> Celery:
    """The worker's Celery app with both tasks registered and the process hooks connected."""
    app = create_celery_app(
        redis_settings=redis_settings,
        queue=worker_settings.queue,
        name="ragbot-embedder",
        visibility_timeout_s=worker_settings.visibility_timeout_s,
    )
    # A message a killed worker never acknowledged is restored once its visibility timeout passed;
    # sweep for such messages every ``unacked_restore_interval_s`` (kombu's default is ~100 s).
    app.conf.broker_transport_options = {
        **app.conf.broker_transport_options,
        "unacked_restore_interval": worker_settings.unacked_restore_interval_s,
        "unacked_restore_throttle": 1,
    }
    register_tasks(app, worker_settings=worker_settings, runtime=get_runtime)
    signals.worker_process_init.connect(_on_process_init, weak=False, dispatch_uid="ragbot-process-init")
    signals.worker_process_shutdown.connect(
        _on_process_shutdown, weak=False, dispatch_uid="ragbot-process-shutdown"
    )
    signals.setup_logging.connect(_keep_our_logging, weak=False, dispatch_uid="ragbot-logging")
    return app
