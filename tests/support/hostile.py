"""The catalogue of hostile inputs sent to ingest, the retriever and chat, and the three apps in process.

Each ``BadInput`` is one case: the request, the status it must get (a 4xx, or 202 where the input is
cleaned and accepted, e.g. NUL and bidi overrides stripped from page text) and words its message must
hold, so a refusal says what to fix. The apps run over the shared fakes (job records, sender, store,
embedder, LLM, retriever) with chat's sessions in real Redis. Used by
``tests/integration/test_hostile_api.py`` and ``bench/security_inputs.py``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import redis.asyncio as aioredis
from fastapi.testclient import TestClient
from fixtures.files.builders import make_docx, make_pdf

from ragbot.definition import parse_definition
from ragbot.ports import SearchStore, StoredParagraph
from ragbot.retrieval import RetrievalDefaults, RetrievalEngine
from ragbot.settings import ChatSettings, IngestSettings
from support.chat_fakes import ScriptedLLM, StaticRetriever, document
from support.fakes import FakeIds, FakeJobs, FakeSender, HashEmbedder, MemoryStore

Service = Literal["ingest", "retriever", "chat"]
CALLBACK = "http://wiki.test/w/rest.php/cbragcontent/v0/page_id/"
PING = {"page_id": 1, "revision_id": 1, "revision_date": "20250101000000", "callback_url": CALLBACK}
PAGE = {"page_id": 5, "revision_id": 1, "title": "Leave", "content": "== Leave ==\nPaid leave is 12 days."}
SESSION = "{session}"  # replaced by a real session id when the case is sent

DEFINITION = parse_definition(
    {
        "identifier_field": "page_id",
        "saved_fields": {"title": "text", "page_id": "integer", "content": "text"},
        "field_for_llm": "content",
        "models": {"mini": "content"},
    }
)


@dataclass(frozen=True)
class BadInput:
    """One hostile request and what it must get back."""

    name: str
    service: Service
    method: str
    path: str
    body: bytes | None = None
    content_type: str | None = "application/json"
    expect: int = 422
    words: str = ""
    files: tuple[tuple[str, bytes], ...] = ()


def _json(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False).encode()


def _nested(levels: int) -> str:
    return "[" * levels + "]" * levels


def _page(**fields: Any) -> bytes:
    return _json({**PAGE, **fields})


HOSTILE_CALLBACKS = [
    ("decimal IPv4", "http://2130706433/x/", "dotted-decimal"),
    ("octal IPv4", "http://0177.0.0.1/x/", "valid URL"),
    ("hex IPv4", "http://0x7f.0.0.1/x/", "dotted-decimal"),
    ("short IPv4", "http://127.1/x/", "dotted-decimal"),
    ("IPv4-mapped IPv6", "http://[::ffff:127.0.0.1]/x/", "IPv4 address itself"),
    ("unspecified", "http://0.0.0.0/x/", "unspecified"),
    ("metadata", "http://169.254.169.254/latest/meta-data/", "link-local"),
    ("IPv6 loopback", "http://[::1]/x/", "loopback"),
    ("file scheme", "file:///etc/passwd", "http(s)"),
    ("gopher scheme", "gopher://wiki.test:70/_x", "http(s)"),
    ("ftp scheme", "ftp://wiki.test/x/", "http(s)"),
    ("userinfo trick", "http://wiki.test@evil.test/x/", "credentials"),
    ("unlisted host", "http://evil.test/x/", "not allowed"),
]


def catalogue() -> list[BadInput]:
    """Every case, in a fixed order."""
    cases = [
        BadInput(
            f"ping: {name}",
            "ingest",
            "POST",
            "/v1/pages/changed",
            _json({**PING, "callback_url": url}),
            words=w,
        )
        for name, url, w in HOSTILE_CALLBACKS
    ]
    long_title = "t" * 1001
    cases += [
        # -- JSON on ingest
        BadInput(
            "push: invalid UTF-8",
            "ingest",
            "POST",
            "/v1/pages",
            b'{"page_id": 5, "title": "\xff\xfe"}',
            words="UTF-8",
        ),
        BadInput("push: not JSON", "ingest", "POST", "/v1/pages", b'{"page_id": 5,', words="not valid JSON"),
        BadInput(
            "push: 10k levels",
            "ingest",
            "POST",
            "/v1/pages",
            f'{{"page_id": 5, "extra": {{"a": {_nested(10_000)}}}}}'.encode(),
            words="deeper",
        ),
        BadInput(
            "push: 40 levels",
            "ingest",
            "POST",
            "/v1/pages",
            f'{{"page_id": 5, "extra": {{"a": {_nested(40)}}}}}'.encode(),
            words="deeper than 32",
        ),
        BadInput(
            "push: 1e400",
            "ingest",
            "POST",
            "/v1/pages",
            b'{"page_id": 1e400, "revision_id": 1}',
            words="64-bit float",
        ),
        BadInput(
            "push: NaN",
            "ingest",
            "POST",
            "/v1/pages",
            b'{"page_id": 5, "revision_id": NaN}',
            words="not a JSON number",
        ),
        BadInput(
            "push: 40-digit page id",
            "ingest",
            "POST",
            "/v1/pages",
            b'{"page_id": 1234567890123456789012345678901234567890, "revision_id": 1}',
            words="64-bit range",
        ),
        BadInput(
            "push: page id over the store's integer",
            "ingest",
            "POST",
            "/v1/pages",
            _page(page_id=2**40),
            words="less than or equal",
        ),
        BadInput(
            "push: negative revision",
            "ingest",
            "POST",
            "/v1/pages",
            _page(revision_id=-1),
            words="greater than or equal",
        ),
        BadInput(
            "push: lone surrogate",
            "ingest",
            "POST",
            "/v1/pages",
            b'{"page_id": 5, "revision_id": 1, "title": "\\ud800"}',
            words="surrogate",
        ),
        BadInput(
            "push: title over the cap",
            "ingest",
            "POST",
            "/v1/pages",
            _page(title=long_title),
            words="at most 1000",
        ),
        BadInput(
            "push: too many categories",
            "ingest",
            "POST",
            "/v1/pages",
            _page(categories=["c"] * 1001),
            words="at most 1000",
        ),
        BadInput(
            "push: NUL and bidi override stripped",
            "ingest",
            "POST",
            "/v1/pages",
            _page(title="Le\x00ave\u202e", content="Paid\x00 leave\u202e is 12 days."),
            expect=202,
        ),
        BadInput(
            "ping: 40-digit revision",
            "ingest",
            "POST",
            "/v1/pages/changed",
            _json({**PING, "revision_id": 0}).replace(b'"revision_id": 0', b'"revision_id": ' + b"9" * 41),
            words="64-bit range",
        ),
        BadInput(
            "pages: huge offset",
            "ingest",
            "GET",
            "/v1/pages?limit=10&offset=93703195830844571648",
            None,
            None,
            words="less than or equal",
        ),
        BadInput(
            "pages: offset past the max",
            "ingest",
            "GET",
            "/v1/pages?offset=1000001",
            None,
            None,
            words="less than or equal to 1000000",
        ),
        BadInput(
            "pages: huge page id",
            "ingest",
            "GET",
            "/v1/pages/61073729117035818959289450496",
            None,
            None,
            words="less than or equal",
        ),
        BadInput(
            "delete: huge page id",
            "ingest",
            "DELETE",
            "/v1/pages/99999999999",
            None,
            None,
            words="less than or equal",
        ),
        BadInput(
            "jobs: huge offset",
            "ingest",
            "GET",
            "/v1/jobs?state=queued&offset=1872478787701512317099889917952",
            None,
            None,
            words="less than or equal",
        ),
        BadInput(
            "jobs: over-long job id",
            "ingest",
            "GET",
            "/v1/jobs/" + "j" * 200,
            None,
            None,
            words="at most 128",
        ),
        BadInput(
            "reindex: deep JSON", "ingest", "POST", "/v1/reindex", _nested(10_000).encode(), words="deeper"
        ),
        # -- JSONL reindex lines (not JSON bodies: each line is checked as strictly)
        BadInput(
            "reindex line: 10k levels",
            "ingest",
            "POST",
            "/v1/reindex",
            _page().replace(b'"title"', b'"x": ' + _nested(10_000).encode() + b', "title"') + b"\n",
            "application/x-ndjson",
            words="line 1",
        ),
        BadInput(
            "reindex line: 1e400 page id",
            "ingest",
            "POST",
            "/v1/reindex",
            _page() + b"\n" + b'{"page_id": 1e400, "title": "x"}\n',
            "application/x-ndjson",
            words="line 2",
        ),
        BadInput(
            "reindex line: 40-digit page id",
            "ingest",
            "POST",
            "/v1/reindex",
            b'{"page_id": ' + b"9" * 40 + b"}\n",
            "application/x-ndjson",
            words="64-bit range",
        ),
        # -- uploads
        BadInput(
            "upload: entity bomb",
            "ingest",
            "POST",
            "/v1/documents",
            None,
            None,
            words="DTD",
            files=(("lol.docx", b""),),
        ),
        BadInput(
            "upload: executable named pdf",
            "ingest",
            "POST",
            "/v1/documents",
            None,
            None,
            words="executable",
            files=(("a.pdf", b"MZ\x90\x00" + b"\x00" * 60 + b"PE\x00\x00" + b"\x00" * 64),),
        ),
        BadInput(
            "upload: key with NUL",
            "ingest",
            "POST",
            "/v1/documents",
            None,
            None,
            words="control characters",
            files=(("a.txt", b"text\n"),),
        ),
        BadInput(
            "upload: traversal name stored as a label",
            "ingest",
            "POST",
            "/v1/documents",
            None,
            None,
            expect=202,
            files=(("../../etc/passwd", b"text\n"),),
        ),
        # -- JSON on the retriever
        BadInput(
            "retrieve: invalid UTF-8",
            "retriever",
            "POST",
            "/v1/retrieve",
            b'{"query": "\xc3\x28"}',
            words="UTF-8",
        ),
        BadInput(
            "retrieve: 10k levels",
            "retriever",
            "POST",
            "/v1/retrieve",
            f'{{"query": "x", "filters": {_nested(10_000)}}}'.encode(),
            words="deeper",
        ),
        BadInput(
            "retrieve: 1e400",
            "retriever",
            "POST",
            "/v1/retrieve",
            b'{"query": "x", "bm25_weight": 1e400}',
            words="64-bit float",
        ),
        BadInput(
            "retrieve: 40-digit size",
            "retriever",
            "POST",
            "/v1/retrieve",
            b'{"query": "x", "retrieval_size": 1000000000000000000000000000000000000000}',
            words="64-bit range",
        ),
        BadInput(
            "retrieve: over-long query",
            "retriever",
            "POST",
            "/v1/retrieve",
            _json({"query": "q" * 2001}),
            words="at most 2000",
        ),
        BadInput(
            "retrieve: only controls and overrides",
            "retriever",
            "POST",
            "/v1/retrieve",
            _json({"query": "\x00\u202e\u2066"}),
            words="query",
        ),
        # -- JSON on chat, and its text fields
        BadInput(
            "message: NUL and overrides only",
            "chat",
            "POST",
            f"/v1/sessions/{SESSION}/messages?stream=false",
            _json({"question": "\x00\u202e \u2067"}),
            words="must not be empty",
        ),
        BadInput(
            "message: over-long question",
            "chat",
            "POST",
            f"/v1/sessions/{SESSION}/messages?stream=false",
            _json({"question": "q" * 1001}),
            words="the limit is 1000",
        ),
        BadInput(
            "message: invalid UTF-8",
            "chat",
            "POST",
            f"/v1/sessions/{SESSION}/messages?stream=false",
            b'{"question": "\xed\xa0\x80"}',
            words="UTF-8",
        ),
        BadInput(
            "message: question with NUL answered clean",
            "chat",
            "POST",
            f"/v1/sessions/{SESSION}/messages?stream=false",
            _json({"question": "What is\x00 the leave\u202e?"}),
            expect=200,
        ),
        BadInput(
            "search: 10k levels",
            "chat",
            "POST",
            "/search",
            f'{{"query": {_nested(10_000)}}}'.encode(),
            words="deeper",
        ),
        BadInput(
            "search: 40-digit page id",
            "chat",
            "POST",
            "/search",
            b'{"query": "x", "page_id": 99999999999999999999999999999999999999}',
            words="64-bit range",
        ),
        BadInput(
            "search: over-long query",
            "chat",
            "POST",
            "/search",
            _json({"query": "q" * 1001}),
            words="the limit is 1000",
        ),
        BadInput(
            "rating: over-long free text",
            "chat",
            "POST",
            "/rating",
            _json({"conversation_id": "x", "free_text": "f" * 5001}),
            words="at most 5000",
        ),
        BadInput(
            "completions: 1e400",
            "chat",
            "POST",
            "/v1/chat/completions",
            b'{"messages": [{"role": "user", "content": "x"}], "temperature": 1e400}',
            words="64-bit float",
        ),
        BadInput(
            "completions: 10k levels",
            "chat",
            "POST",
            "/v1/chat/completions",
            f'{{"messages": {_nested(10_000)}}}'.encode(),
            words="deeper",
        ),
        BadInput(
            "completions: NaN",
            "chat",
            "POST",
            "/v1/chat/completions",
            b'{"messages": [], "top_p": NaN}',
            words="not a JSON number",
        ),
        # -- the widget keeps its own protocol for bad bodies: 400 with a Hebrew message
        BadInput(
            "widget: 10k levels",
            "chat",
            "POST",
            "/kzchatbot/v0/question",
            f'{{"text": {_nested(10_000)}, "uuid": "u"}}'.encode(),
            expect=400,
        ),
        BadInput(
            "widget: invalid UTF-8",
            "chat",
            "POST",
            "/kzchatbot/v0/question",
            b'{"text": "\xff", "uuid": "u"}',
            expect=400,
        ),
    ]
    return cases


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
