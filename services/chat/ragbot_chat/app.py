"""The chat service: the app factory and its composition root (the lifespan picks the adapters).

``create_app()`` builds the real resources from settings when the app starts: the LLM adapter chosen
by ``RAGBOT_CHAT_LLM_BACKEND`` (warmed up in a thread), the retriever's HTTP client, Redis for sessions
and the Kol-Zchut config. Tests pass their own ``resources`` factory through the same door.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import redis.asyncio as aioredis
from fastapi import FastAPI

from ragbot.chat.admission import AdmissionGate
from ragbot.chat.feedback import FeedbackLog
from ragbot.chat.kolzchut import ConfigStore, default_config
from ragbot.chat.pair_gate import configured_gate
from ragbot.chat.pipeline import ChatPipeline
from ragbot.chat.retriever import HttpRetriever, Retriever
from ragbot.chat.sessions import ChatStore
from ragbot.chat.streams import STREAM_MODELS
from ragbot.http.app import create_service_app, package_version
from ragbot.http.streams import document_stream_models
from ragbot.llms import build_llm
from ragbot.messaging.redis import build_redis
from ragbot.observability.tracing import traced_llm
from ragbot.ports import ChatModel
from ragbot.prompts import PromptLibrary
from ragbot.settings import (
    AuthSettings,
    ChatSettings,
    HttpSettings,
    RedisSettings,
    get_chat_settings,
    get_redis_settings,
)
from ragbot_chat import kolzchut_pages, widget
from ragbot_chat.deps import Resources
from ragbot_chat.mcp_server import ChatMcp
from ragbot_chat.routes import ROUTERS, route_auth
from ragbot_chat.ui import install_ui

logger = logging.getLogger(__name__)
SERVICE = "chat"

ResourcesFactory = Callable[[], AbstractAsyncContextManager[Resources]]


def assemble(
    *,
    settings: ChatSettings,
    llm: ChatModel,
    retriever: Retriever,
    redis_client: aioredis.Redis,
    key_prefix: str,
) -> Resources:
    """Wire the stores, the Kol-Zchut config and the pipeline around the given adapters."""
    prompts = PromptLibrary(settings.prompts_dir)
    prompts.check()
    configured_gate(settings)  # the abstention gate's file: a broken one stops the start, not a turn
    store = ChatStore(
        client=redis_client,
        prefix=key_prefix,
        session_ttl_s=settings.session_ttl_s,
        max_turns=settings.max_turns,
        message_ttl_s=settings.message_ttl_s,
    )
    models = settings.available_models or [llm.model]
    configs = ConfigStore(
        client=redis_client,
        prefix=key_prefix,
        defaults=default_config(
            prompts=prompts,
            model=llm.model if llm.model in models else models[0],
            num_of_pages=min(len(settings.paragraphs_per_page), settings.max_num_of_pages),
            temperature=settings.llm_temperature,
            mode_name=settings.kolzchut_mode,
        ),
        available_models=models,
        models_without_temperature=settings.models_without_temperature,
        max_num_of_pages=settings.max_num_of_pages,
    )
    pipeline = ChatPipeline(llm=llm, retriever=retriever, prompts=prompts, settings=settings)
    return Resources(
        settings=settings,
        llm=llm,
        retriever=retriever,
        store=store,
        feedback=FeedbackLog(client=redis_client, prefix=key_prefix, ttl_s=settings.feedback_ttl_s),
        configs=configs,
        prompts=prompts,
        pipeline=pipeline,
        admission=AdmissionGate.from_settings(settings),
    )


@asynccontextmanager
async def build_resources(
    *, settings: ChatSettings, redis_settings: RedisSettings
) -> AsyncIterator[Resources]:
    """The composition root: LLM (loaded in a thread), retriever client, Redis."""
    llm = traced_llm(build_llm(settings=settings))  # GenAI spans when tracing is on
    await asyncio.to_thread(llm.warm_up)
    key = settings.service_key.get_secret_value() if settings.service_key else None
    retriever = HttpRetriever(
        base_url=settings.retriever_url, timeout_s=settings.retriever_timeout_s, api_key=key
    )
    redis_client = build_redis(redis_settings)
    try:
        yield assemble(
            settings=settings,
            llm=llm,
            retriever=retriever,
            redis_client=redis_client,
            key_prefix=redis_settings.key_prefix,
        )
    finally:
        await retriever.close()
        await redis_client.aclose()
        await llm.close()


def default_resources() -> AbstractAsyncContextManager[Resources]:
    """Real resources from the cached settings factories."""
    return build_resources(settings=get_chat_settings(), redis_settings=get_redis_settings())


def create_app(
    *,
    resources: ResourcesFactory | None = None,
    auth: AuthSettings | None = None,
    http: HttpSettings | None = None,
) -> FastAPI:
    """The chat app; ``resources``, ``auth`` and ``http`` replace the composition root, the auth settings
    and the hosts and header limits."""
    mcp = ChatMcp(version=package_version(SERVICE))
    app = create_service_app(
        service=SERVICE,
        resources=resources or default_resources,
        checks={
            "redis": lambda res: res.store.ping(),
            "llm": lambda res: res.llm.ping(),
            "retriever": lambda res: res.retriever.ping(),
        },
        routers=ROUTERS,
        json_exempt_prefixes=(widget.PREFIX,),  # the widget answers bad bodies in Hebrew, its protocol
        route_auth=route_auth,
        auth=auth,
        http=http,
        lifespans=(mcp.running,),
    )
    mcp.mount(app)
    document_stream_models(app, STREAM_MODELS)
    widget.install(app)
    install_ui(app)
    app.include_router(kolzchut_pages.router)
    return app
