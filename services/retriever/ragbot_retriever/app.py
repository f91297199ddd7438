"""The retriever service: the app factory and its composition root (the lifespan picks the adapters).

``create_app()`` builds the real resources from settings when the app starts; tests pass their own
``resources`` factory (fakes, or a real store on a test index) through the same door.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from fastapi import FastAPI

from ragbot.definition import load_definition
from ragbot.errors import RagbotError
from ragbot.http.app import create_service_app
from ragbot.ports import Embedder, Reranker
from ragbot.retrieval import RetrievalDefaults, RetrievalEngine
from ragbot.settings import (
    AuthSettings,
    ModelSettings,
    RetrieverSettings,
    StoreSettings,
    get_model_settings,
    get_retriever_settings,
    get_store_settings,
)
from ragbot_retriever.deps import Resources
from ragbot_retriever.routes import router

logger = logging.getLogger(__name__)
SERVICE = "retriever"


ResourcesFactory = Callable[[], AbstractAsyncContextManager[Resources]]


def _warm_up(embedders: Mapping[str, Embedder], reranker: Reranker | None) -> None:
    for embedder in embedders.values():
        embedder.warm_up()
    if reranker is not None:
        reranker.warm_up()


@asynccontextmanager
async def build_resources(
    *,
    retriever_settings: RetrieverSettings,
    store_settings: StoreSettings,
    model_settings: ModelSettings,
    reranker: Reranker | None = None,
) -> AsyncIterator[Resources]:
    """The composition root: definition, embedders (warmed in a thread), store sized by the models."""
    from ragbot.embedders import build_embedders, cached_queries
    from ragbot.rerankers import configured_reranker
    from ragbot.stores import build_store

    if reranker is None:  # RAGBOT_RETRIEVER_RERANKER_PATH set: rerank by default (default_rerank)
        reranker = configured_reranker(retriever_settings, model_settings)
    definition = load_definition(model_settings.document_definition)
    embedders = cached_queries(
        # One query at a time: "auto" precision stays float32 on a CPU (ragbot.inference.precision).
        build_embedders(settings=model_settings, definition=definition, batched=False),
        max_size=model_settings.query_cache_size,
    )
    await asyncio.to_thread(_warm_up, embedders, reranker)
    dimensions = {v.name: embedders[v.model].dimension for v in definition.vector_fields}
    store = build_store(settings=store_settings, definition=definition, dimensions=dimensions)
    try:
        await asyncio.wait_for(store.ensure_ready(), timeout=retriever_settings.store_timeout_s)
        # No timeout: the embedded store builds its matrices and BM25 index here (seconds at 100k
        # paragraphs), before uvicorn answers anything, instead of failing the first query.
        await store.warm_up()
    except (TimeoutError, RagbotError) as exc:  # start anyway: /readyz and every request say 503
        logger.warning("store not ready at start: %s", exc)
    engine = RetrievalEngine(
        store=store,
        embedders=embedders,
        definition=definition,
        reranker=reranker,
        defaults=RetrievalDefaults.from_settings(retriever_settings),
    )
    try:
        yield Resources(
            engine=engine, store=store, embedders=embedders, definition=definition, reranker=reranker
        )
    finally:
        await store.close()
        for embedder in embedders.values():
            embedder.close()
        if reranker is not None:
            reranker.close()


def default_resources() -> AbstractAsyncContextManager[Resources]:
    """Real resources from the cached settings factories."""
    return build_resources(
        retriever_settings=get_retriever_settings(),
        store_settings=get_store_settings(),
        model_settings=get_model_settings(),
    )


def create_app(*, resources: ResourcesFactory | None = None, auth: AuthSettings | None = None) -> FastAPI:
    """The retriever app (every route needs ``retrieve``); ``resources`` and ``auth`` replace the
    composition root and the auth settings (tests)."""
    return create_service_app(
        service=SERVICE,
        resources=resources or default_resources,
        checks={"store": lambda res: res.store.ping()},
        routers=[router],
        route_auth="retrieve",
        auth=auth,
    )
