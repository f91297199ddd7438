"""The ingest service: the app factory and its composition root (the lifespan picks the adapters).

``create_app()`` builds the real resources from settings when the app starts; tests pass their own
``resources`` factory (fakes, or real Redis under a test key prefix) through the same door.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from fastapi import FastAPI
from fastapi.routing import APIRoute

from ragbot.definition import load_definition
from ragbot.errors import RagbotError
from ragbot.http.app import create_service_app
from ragbot.http.auth import RouteAuth
from ragbot.messaging.jobs import JobStore
from ragbot.messaging.queue import TaskSender, create_celery_app
from ragbot.messaging.reconcile_trigger import ReconcileTrigger
from ragbot.messaging.redis import build_redis
from ragbot.ports import SearchStore
from ragbot.settings import (
    AuthSettings,
    HttpSettings,
    IngestSettings,
    ModelSettings,
    RedisSettings,
    StoreSettings,
    WorkerSettings,
    get_ingest_settings,
    get_model_settings,
    get_redis_settings,
    get_store_settings,
    get_worker_settings,
)
from ragbot_ingest import job_routes, routes
from ragbot_ingest.deps import Resources
from ragbot_ingest.upload_ids import RedisUploadIds

logger = logging.getLogger(__name__)
SERVICE = "ingest"

ResourcesFactory = Callable[[], AbstractAsyncContextManager[Resources]]


def _open_store(*, store_settings: StoreSettings, model_settings: ModelSettings) -> SearchStore | None:
    """The live index generation's store, opened only to read page state: no models, no index creation
    (the worker owns that); it follows a re-embed's switch."""
    from ragbot.stores.generations import build_generations
    from ragbot.stores.live import LiveStore

    try:
        definition = load_definition(model_settings.document_definition)
        return LiveStore(
            settings=store_settings, generations=build_generations(store_settings), configured=definition
        )
    except RagbotError as exc:
        logger.warning("page state unavailable: could not open the store: %s", exc)
        return None


@asynccontextmanager
async def build_resources(
    *,
    ingest_settings: IngestSettings,
    redis_settings: RedisSettings,
    worker_settings: WorkerSettings,
    store_settings: StoreSettings,
    model_settings: ModelSettings,
) -> AsyncIterator[Resources]:
    """The composition root: Redis job records and upload ids, the Celery sender, the store for page state."""
    redis = build_redis(redis_settings)
    celery = create_celery_app(
        redis_settings=redis_settings, queue=worker_settings.queue, name="ragbot-ingest"
    )
    sender = TaskSender(celery, queue=worker_settings.queue)
    store = _open_store(store_settings=store_settings, model_settings=model_settings)
    try:
        yield Resources(
            settings=ingest_settings,
            jobs=JobStore(redis=redis, key_prefix=redis_settings.key_prefix),
            sender=sender,
            store=store,
            uploads=RedisUploadIds(redis=redis, key_prefix=redis_settings.key_prefix),
            trigger=ReconcileTrigger(redis=redis, key_prefix=redis_settings.key_prefix),
        )
    finally:
        if store is not None:
            await store.close()
        sender.close()
        await redis.aclose()


def default_resources() -> AbstractAsyncContextManager[Resources]:
    """Real resources from the cached settings factories."""
    return build_resources(
        ingest_settings=get_ingest_settings(),
        redis_settings=get_redis_settings(),
        worker_settings=get_worker_settings(),
        store_settings=get_store_settings(),
        model_settings=get_model_settings(),
    )


PING_PATH = "/v1/pages/changed"


def route_auth(route: APIRoute) -> RouteAuth:
    """Every ingest route, reads included, needs ``ingest``; the wiki's ping also takes its ping token."""
    return RouteAuth(scope="ingest", ping_token=route.path == PING_PATH)


def create_app(
    *,
    resources: ResourcesFactory | None = None,
    auth: AuthSettings | None = None,
    http: HttpSettings | None = None,
) -> FastAPI:
    """The ingest app; ``resources`` replaces the composition root, ``auth`` the auth settings and ``http``
    the hosts and header limits (tests)."""
    return create_service_app(
        service=SERVICE,
        resources=resources or default_resources,
        checks={"redis": lambda res: res.jobs.ping()},
        routers=[routes.router, job_routes.router],
        route_auth=route_auth,
        auth=auth,
        http=http,
    )
