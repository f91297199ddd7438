"""The catalogue of hostile inputs for ingest, the retriever and chat: one ``BadInput`` per case.

Each case is the request, the status it must get (a 4xx, or 202/200 where the input is cleaned and
accepted, e.g. NUL and bidi overrides stripped from page text) and words its message must hold, so a
refusal says what to fix. Sent by ``support.hostile.Apps.send``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

Service = Literal["ingest", "retriever", "chat"]
CALLBACK = "http://wiki.test/w/rest.php/cbragcontent/v0/page_id/"
PING = {"page_id": 1, "revision_id": 1, "revision_date": "20250101000000", "callback_url": CALLBACK}
PAGE = {"page_id": 5, "revision_id": 1, "title": "Leave", "content": "== Leave ==\nPaid leave is 12 days."}
SESSION = "{session}"  # replaced by a real session id when the case is sent


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
        # -- issue 28 item 4: a page id below 1 is refused everywhere a page is named
        BadInput(
            "push: page id 0", "ingest", "POST", "/v1/pages", _page(page_id=0), words="page ids start at 1"
        ),
        BadInput(
            "push: negative page id",
            "ingest",
            "POST",
            "/v1/pages",
            _page(page_id=-7),
            words="page ids start at 1",
        ),
        BadInput("page: id 0", "ingest", "GET", "/v1/pages/0", None, None, words="page ids start at 1"),
        BadInput("delete: id 0", "ingest", "DELETE", "/v1/pages/0", None, None, words="page ids start at 1"),
        BadInput(
            "delete: negative id", "ingest", "DELETE", "/v1/pages/-1", None, None, words="page ids start at 1"
        ),
        BadInput(
            "reindex line: page id 0",
            "ingest",
            "POST",
            "/v1/reindex",
            _page() + b"\n" + _page(page_id=0) + b"\n",
            "application/x-ndjson",
            words="page ids start at 1",
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


# -- issue 28: what a guest of the open chat page (its cookie and CSRF token from GET /) is refused.
# The chat page calls only POST /v1/sessions, GET /v1/sessions/{id}, POST /v1/sessions/{id}/messages and
# POST /v1/messages/{id}/feedback (static/js/chat.js); everything else a chat key could reach is refused,
# the API with 403 (a guest may not) and the pages with the sign-in form (401).


@dataclass(frozen=True)
class GuestDenied:
    """A route a guest must not use, and the status it gets."""

    method: str
    path: str
    body: Any = None
    expect: int = 403

    @property
    def name(self) -> str:
        return f"{self.method} {self.path}"


MCP_TOOLS_LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
GUEST_DENIED: tuple[GuestDenied, ...] = (
    GuestDenied("POST", "/search", {"query": "leave"}),
    GuestDenied("POST", "/search/stream", {"query": "leave"}),
    GuestDenied("POST", "/rating", {"conversation_id": "x", "like": True}),
    GuestDenied("GET", "/get_config"),
    GuestDenied("POST", "/set_config", {"system_prompt": "pwned"}),
    GuestDenied("GET", "/get_models_version"),
    GuestDenied("GET", "/get_config_metadata"),
    GuestDenied("POST", "/clean_redis_history"),
    GuestDenied("GET", "/ping/redis"),
    GuestDenied("GET", "/ping/llm_manager"),
    GuestDenied("GET", "/ping/es_docker"),
    GuestDenied("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "leave"}]}),
    GuestDenied("GET", "/v1/models"),
    GuestDenied("GET", "/v1/feedback"),
    GuestDenied("POST", "/mcp", MCP_TOOLS_LIST),
    GuestDenied("POST", "/ui/api/retrieve", {"query": "leave"}),
    GuestDenied("GET", "/ui/api/models"),
    GuestDenied("GET", "/ui/api/ingest/v1/pages"),
    GuestDenied("GET", "/kzchatbot/v0/status"),
    GuestDenied("POST", "/kzchatbot/v0/question", {"text": "leave", "uuid": "u"}),
    GuestDenied("POST", f"/v1/sessions/{SESSION}/messages?stream=false&debug=true", {"question": "leave"}),
    GuestDenied("GET", "/admin", expect=401),
    GuestDenied("GET", "/documents", expect=401),
    GuestDenied("GET", "/admin.html", expect=401),
    GuestDenied("GET", "/index.html", expect=401),
    GuestDenied("GET", "/batch-runner.html", expect=401),
    GuestDenied("GET", "/metrics"),
)
