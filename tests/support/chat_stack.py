"""The chat app served over real HTTP, with real Redis (own key prefix, cleaned up) and real retrieval
over the sample store; the LLM is whatever the test passes (a fake for plumbing, llama.cpp for real)."""

from __future__ import annotations

import asyncio
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
import redis.asyncio as aioredis

from ragbot.chat.retriever import EngineRetriever
from ragbot.ports import ChatModel
from ragbot.settings import AuthSettings, ChatSettings
from ragbot_chat.app import assemble, create_app
from ragbot_chat.deps import Resources
from support.chat_corpus import build_sample_store, open_engine
from support.chat_fakes import serve_app

_store: Path | None = None


def sample_store() -> Path:
    """The sample store file, built once per test process."""
    global _store
    if _store is None:
        path = Path(tempfile.mkdtemp(prefix="ragbot-chat-tests-")) / "store.sqlite3"
        asyncio.run(build_sample_store(path))
        _store = path
    return _store


@dataclass
class ChatServer:
    """A running chat app and what it was built with."""

    url: str
    prefix: str
    redis_url: str
    settings: ChatSettings
    llm: ChatModel
    resources: list[Resources]

    def keys(self) -> list[str]:
        """Every Redis key this app wrote."""
        client = redis.Redis.from_url(self.redis_url, decode_responses=True)
        try:
            return sorted(str(k) for k in client.scan_iter(f"{self.prefix}:*"))
        finally:
            client.close()


@contextmanager
def chat_server(
    *,
    llm: ChatModel,
    redis_url: str,
    store: Path | None = None,
    auth: AuthSettings | None = None,
    **settings: Any,
) -> Iterator[ChatServer]:
    """Serve the chat app on a free port (``auth``: its keys); its Redis keys are deleted afterwards.

    Strict mode's sentence check is off unless ``strict_support_min`` is given: these servers answer with
    scripted LLMs whose text is about the contract under test, not the pages."""
    prefix = f"test-chat-{uuid.uuid4().hex[:12]}"
    chat_settings = ChatSettings(**{"strict_support_min": 0.0, **settings})
    built: list[Resources] = []
    store_path = store or sample_store()

    @asynccontextmanager
    async def resources() -> AsyncIterator[Resources]:
        client = aioredis.Redis.from_url(redis_url, socket_timeout=5, socket_connect_timeout=5)
        async with open_engine(store_path) as engine:
            res = assemble(
                settings=chat_settings,
                llm=llm,
                retriever=EngineRetriever(engine),
                redis_client=client,
                key_prefix=prefix,
            )
            built.append(res)
            try:
                yield res
            finally:
                await client.aclose()

    try:
        with serve_app(create_app(resources=resources, auth=auth)) as url:
            yield ChatServer(url, prefix, redis_url, chat_settings, llm, built)
    finally:
        client = redis.Redis.from_url(redis_url, socket_connect_timeout=2)
        try:
            keys = list(client.scan_iter(f"{prefix}:*"))
            if keys:
                client.delete(*keys)
        except redis.ConnectionError:
            pass  # a test that points the app at a dead Redis left nothing behind
        finally:
            client.close()
