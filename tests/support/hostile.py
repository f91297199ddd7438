"""Ingest, the retriever and chat in process, to send the hostile catalogue (``support.hostile_cases``) to.

The apps run over the shared fakes (job records, sender, store,
embedder, LLM, retriever) with chat's sessions in real Redis. Used by
``tests/integration/test_hostile_api.py`` and ``bench/security/inputs.py``.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any, cast

import redis.asyncio as aioredis
from fastapi.testclient import TestClient
from fixtures.files.builders import make_docx, make_pdf

from ragbot.definition import parse_definition
from ragbot.ports import SearchStore, StoredParagraph
from ragbot.retrieval import RetrievalDefaults, RetrievalEngine
from ragbot.settings import ChatSettings, IngestSettings
from support.chat_fakes import ScriptedLLM, StaticRetriever, document
from support.fakes import FakeIds, FakeJobs, FakeSender, HashEmbedder, MemoryStore
from support.hostile_cases import HOSTILE_CALLBACKS, SESSION, BadInput, catalogue

DEFINITION = parse_definition(
    {
        "identifier_field": "page_id",
        "saved_fields": {"title": "text", "page_id": "integer", "content": "text"},
        "field_for_llm": "content",
        "models": {"mini": "content"},
    }
)


# -- the apps -----------------------------------------------------------------------------------------------


def _seeded_store() -> MemoryStore:
    embedder = HashEmbedder("mini", dimension=8, max_tokens=128)
    paragraphs = []
    for n, text in enumerate(["Paid leave is 12 days.", "Sick pay starts on the second day."]):
        fields: dict[str, Any] = {"page_id": 5, "title": "Leave", "content": text}
        [vector] = embedder.embed_passages([text])
        paragraphs.append(StoredParagraph(f"5-1-{n}", 5, 1, n, fields, {"content_mini_vectors": vector}))
    return MemoryStore(paragraphs)


@dataclass
class Apps:
    """The three apps' clients, and the fakes behind ingest (to check nothing accepted was lost)."""

    ingest: TestClient
    retriever: TestClient
    chat: TestClient
    jobs: FakeJobs
    store: MemoryStore
    session_id: str = ""
    clients: dict[str, TestClient] = field(default_factory=dict)

    def send(self, case: BadInput) -> Any:
        """Send one case to its app."""
        client = {"ingest": self.ingest, "retriever": self.retriever, "chat": self.chat}[case.service]
        path = case.path.replace(SESSION, self.session_id)
        if case.files:
            name, data = case.files[0]
            if case.name == "upload: entity bomb":
                data = _entity_bomb()
            keys = {"key": "a\x00b"} if "NUL" in case.name else None
            return client.post(path, files=[("file", (name, data, "application/pdf"))], data=keys)
        headers = {"content-type": case.content_type} if case.content_type else {}
        return client.request(case.method, path, content=case.body, headers=headers)


def _entity_bomb() -> bytes:
    import io
    import zipfile

    bomb = b'<?xml version="1.0"?>\n<!DOCTYPE l [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;">]>\n'
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(make_docx())) as src, zipfile.ZipFile(out, "w") as sink:
        for info in src.infolist():
            data = src.read(info)
            sink.writestr(
                info.filename,
                bomb + data.split(b"?>", 1)[-1] if info.filename == "word/document.xml" else data,
            )
    return out.getvalue()


@contextmanager
def hostile_apps(*, redis_url: str) -> Iterator[Apps]:
    """Ingest, retriever and chat in process; chat's Redis keys live under a fresh prefix, deleted after."""
    from ragbot_chat.app import assemble
    from ragbot_chat.app import create_app as chat_app
    from ragbot_chat.deps import Resources as ChatResources
    from ragbot_ingest.app import create_app as ingest_app
    from ragbot_ingest.deps import Resources as IngestResources
    from ragbot_retriever.app import create_app as retriever_app
    from ragbot_retriever.deps import Resources as RetrieverResources

    jobs, sender, ids, store = FakeJobs(), FakeSender(), FakeIds(), _seeded_store()
    retrieval_store = _seeded_store()
    embedder = HashEmbedder("mini", dimension=8, max_tokens=128)
    prefix = f"test-hostile-{uuid.uuid4().hex[:10]}"

    @asynccontextmanager
    async def ingest_resources() -> AsyncIterator[IngestResources]:
        yield IngestResources(
            settings=IngestSettings(allowed_callback_hosts=["wiki.test"], max_upload_bytes=5 * 1024 * 1024),
            jobs=jobs,
            sender=sender,
            store=cast(SearchStore, store),
            uploads=ids,
        )

    @asynccontextmanager
    async def retriever_resources() -> AsyncIterator[RetrieverResources]:
        engine = RetrievalEngine(
            store=retrieval_store,
            embedders={"mini": embedder},
            definition=DEFINITION,
            defaults=RetrievalDefaults(store_timeout_s=2.0, embed_timeout_s=2.0),
        )
        yield RetrieverResources(
            engine=engine, store=retrieval_store, embedders={"mini": embedder}, definition=DEFINITION
        )

    @asynccontextmanager
    async def chat_resources() -> AsyncIterator[ChatResources]:
        client = aioredis.Redis.from_url(redis_url, socket_timeout=5, socket_connect_timeout=5)
        try:
            yield assemble(
                settings=ChatSettings(),
                llm=ScriptedLLM(),
                retriever=StaticRetriever([document(5, 0, "Paid leave is 12 days.", title="Leave")]),
                redis_client=client,
                key_prefix=prefix,
            )
        finally:
            async for key in client.scan_iter(f"{prefix}:*"):
                await client.delete(key)
            await client.aclose()

    with (
        TestClient(ingest_app(resources=ingest_resources)) as ingest,
        TestClient(retriever_app(resources=retriever_resources)) as retriever,
        TestClient(chat_app(resources=chat_resources)) as chat,
    ):
        apps = Apps(ingest=ingest, retriever=retriever, chat=chat, jobs=jobs, store=store)
        created = chat.post("/v1/sessions", json={})
        assert created.status_code == 201, created.text
        apps.session_id = created.json()["session_id"]
        yield apps


def message_of(response: Any) -> str:
    """Every message a 4xx body holds, joined (FastAPI's list of errors, or one detail string)."""
    try:
        body = response.json()
    except ValueError:
        return str(response.text)
    detail = body.get("detail", body) if isinstance(body, dict) else body
    if isinstance(detail, list):
        return " | ".join(str(d.get("msg", d)) if isinstance(d, dict) else str(d) for d in detail)
    return str(detail)


__all__ = ["HOSTILE_CALLBACKS", "Apps", "BadInput", "catalogue", "hostile_apps", "make_pdf", "message_of"]
