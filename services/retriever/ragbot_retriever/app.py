"""The retriever service: the app factory and its composition root (the lifespan picks the adapters).

``create_app()`` builds the real resources from settings when the app starts; tests pass their own
``resources`` factory (fakes, or a real store on a test index) through the same door.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from fastapi import FastAPI

from ragbot.definition import DocumentDefinition, load_definition
from ragbot.http.app import create_service_app
from ragbot.ports import Embedder, Generation, Reranker
from ragbot.retrieval import RetrievalDefaults
from ragbot.settings import (
    AuthSettings,
    ModelSettings,
    RetrieverSettings,
    StoreSettings,
    get_model_settings,
    get_retriever_settings,
    get_store_settings,
)
from ragbot.stores.generations import build_generations
from ragbot_retriever.deps import Resources
from ragbot_retriever.generations import Serving, follow, install, live_or_legacy, serve, stop_translating
from ragbot_retriever.routes import router

logger = logging.getLogger(__name__)
SERVICE = "retriever"


ResourcesFactory = Callable[[], AbstractAsyncContextManager[Resources]]


@asynccontextmanager
async def build_resources(
    *,
    retriever_settings: RetrieverSettings,
    store_settings: StoreSettings,
    model_settings: ModelSettings,
    reranker: Reranker | None = None,
) -> AsyncIterator[Resources]:
    """The composition root: the live index generation with its definition's embedders (warmed in a
    thread) and store, followed when a re-embed switches it (``ragbot_retriever.generations``)."""
    from ragbot.embedders import build_embedders, cached_queries
    from ragbot.embedders.query_tuning import configured_tuned
    from ragbot.rerankers import configured_reranker
    from ragbot.retrieval.memory import QuestionMemory

    if reranker is None:  # RAGBOT_RETRIEVER_RERANKER_PATH set: rerank by default (default_rerank)
        reranker = configured_reranker(retriever_settings, model_settings)
    configured = load_definition(model_settings.document_definition)

    def embedders_for(definition: DocumentDefinition) -> Mapping[str, Embedder]:
        return cached_queries(
            # One query at a time: "auto" precision stays float32 on a CPU (ragbot.inference.precision).
            build_embedders(settings=model_settings, definition=definition, batched=False),
            max_size=model_settings.query_cache_size,
        )

    if reranker is not None:
        await asyncio.to_thread(reranker.warm_up)
    # RAGBOT_RETRIEVER_QUERY_TUNING_PATH: e5's query side tuned on the wiki's questions, for the
    # questions written in RAGBOT_RETRIEVER_QUERY_TUNING_SCRIPTS (Latin by default)
    tuned = configured_tuned(retriever_settings.query_tuning_path, retriever_settings.query_tuning_model)
    for model, encoder in tuned.items():
        await asyncio.to_thread(encoder.warm_up)
        logger.info(
            "questions in %s script search %s with the query encoder tuned in %s",
            "/".join(retriever_settings.query_tuning_scripts),
            model,
            encoder.path,
        )
    # RAGBOT_RETRIEVER_QUESTION_MEMORY_PATH: the wiki's answered questions vote for pages
    memory = None
    if retriever_settings.question_memory_path is not None:
        memory = await asyncio.to_thread(QuestionMemory.load, retriever_settings.question_memory_path)
        logger.info(
            "%d remembered questions in %s vote for pages (weight %s, +%s per cosine above %s); "
            "%d it holds unanswered are evidence for the chat's abstention",
            len(memory),
            retriever_settings.question_memory_path,
            retriever_settings.question_memory_weight,
            retriever_settings.question_memory_near_weight,
            retriever_settings.question_memory_near,
            len(memory.unanswered),
        )
    defaults = RetrievalDefaults.from_settings(retriever_settings)
    generations = build_generations(store_settings)

    async def load(generation: Generation, reuse: Serving | None = None) -> Serving:
        return await serve(
            generation=generation,
            configured=configured,
            store_settings=store_settings,
            embedders_for=embedders_for,
            reranker=reranker,
            defaults=defaults,
            store_timeout_s=retriever_settings.store_timeout_s,
            reuse=reuse,
            translate_to=retriever_settings.translate_queries_to,
            vocabulary=retriever_settings.translation_vocabulary,
            translation_poll_s=retriever_settings.translation_poll_s,
            tuned=tuned,
            memory=memory,
        )

    # The live generation, queried with its own definition (the file may already name the next one).
    serving = await load(await live_or_legacy(generations))
    resources = Resources(
        engine=serving.engine,
        store=serving.opened.store,
        embedders=serving.embedders,
        definition=serving.opened.definition,
        reranker=reranker,
    )
    install(resources, serving)
    follower = asyncio.create_task(
        follow(
            resources=resources,
            current=serving,
            generations=generations,
            poll_s=retriever_settings.generation_poll_s,
            load=load,
        )
    )
    try:
        yield resources
    finally:
        follower.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await follower
        await stop_translating(resources.extra.get("translating"))
        await resources.store.close()
        await generations.close()
        for embedder in resources.embedders.values():
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
