"""Small fakes and real local servers for the chat tests.

- ``ScriptedLLM``: a ``ChatModel`` whose answer is a function of the messages; it records every call,
  can be slow, fail or hang, and notes when a stream was closed early (client disconnects).
- ``StaticRetriever``: a ``Retriever`` answering fixed documents (pipeline unit tests); its sentence
  similarity is the share of the query's analyzer tokens a text contains.
- ``FakeOllama`` / ``FakeOpenAI``: real HTTP servers on 127.0.0.1 replaying Ollama's NDJSON stream and
  an OpenAI-compatible SSE stream, so the adapters are tested with their real clients on the wire.
- ``serve_app``: run an ASGI app with uvicorn in a thread (real HTTP, real disconnects).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncGenerator, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

import uvicorn

from ragbot.errors import DependencyUnavailable, LLMError, NotFound
from ragbot.ports import ChatMessage, TokenStream, Usage
from ragbot.schemas.retrieval import PageDocuments, RetrieveRequest, RetrieveResponse
from ragbot.schemas.similarity import SimilarityRequest, SimilarityResponse
from ragbot.text import analyze
from support.fakes import HashEmbedder

# -- LLM ---------------------------------------------------------------------------------------------


def echo_citations(messages: Sequence[ChatMessage]) -> str:
    """Default script: a short answer citing the first document when there is one."""
    last = messages[-1].content
    if '<document id="1"' in last:
        return "The answer is in the sources [1]."
    return "A general answer."


@dataclass
class LLMCall:
    """One ``stream`` call as the fake saw it."""

    messages: list[ChatMessage]
    temperature: float | None
    max_tokens: int
    model: str | None
    closed_early: bool = False
    pieces_sent: int = 0


class ScriptedLLM:
    """An LLM that answers ``script(messages)`` word by word."""

    backend = "fake"

    def __init__(
        self,
        script: Callable[[Sequence[ChatMessage]], str] = echo_citations,
        *,
        delay_s: float = 0.0,
        first_delay_s: float = 0.0,
        model: str = "fake-model",
    ) -> None:
        self.script = script
        self.delay_s = delay_s
        self.first_delay_s = first_delay_s
        self._model = model
        self.calls: list[LLMCall] = []
        self.state = "up"  # "down": every call fails; "hang": never sends a token
        self.warmed = False

    @property
    def model(self) -> str:
        return self._model

    def warm_up(self) -> None:
        self.warmed = True

    async def ping(self) -> bool:
        return self.state == "up"

    def stream(
        self,
        *,
        messages: Sequence[ChatMessage],
        temperature: float | None = 0.0,
        max_tokens: int = 512,
        model: str | None = None,
    ) -> TokenStream:
        call = LLMCall(list(messages), temperature, max_tokens, model)
        self.calls.append(call)
        usage = Usage()
        return TokenStream(self._generate(call, usage), usage)

    async def _generate(self, call: LLMCall, usage: Usage) -> AsyncGenerator[str, None]:
        if self.state == "down":
            raise LLMError("the fake LLM is down")
        if self.state == "hang":
            await asyncio.sleep(3600)
        text = self.script(call.messages)
        words = text.split(" ")
        pieces = [w if i == 0 else " " + w for i, w in enumerate(words)][: call.max_tokens]
        finished = False
        try:
            if self.first_delay_s:
                await asyncio.sleep(self.first_delay_s)
            for piece in pieces:
                if self.delay_s:
                    await asyncio.sleep(self.delay_s)
                call.pieces_sent += 1
                usage.completion_tokens += 1
                yield piece
            usage.prompt_tokens = sum(len(m.content.split()) for m in call.messages)
            usage.finish_reason = "length" if len(words) > call.max_tokens else "stop"  # as servers say
            finished = True
        finally:
            if not finished:
                call.closed_early = True

    async def close(self) -> None:
        pass


# -- Retriever ---------------------------------------------------------------------------------------


def document(
    page_id: int, paragraph: int, text: str, *, title: str | None = None, score: float = 0.5
) -> dict[str, Any]:
    """A retrieved document shaped like the retriever's."""
    return {
        "_id": f"{page_id}-1-{paragraph}",
        "page_id": page_id,
        "paragraph": paragraph,
        "title": title if title is not None else f"Page {page_id}",
        "url": f"https://wiki.example/{page_id}",
        "content": text,
        "score": score,
    }


def dense_debug(docs: Sequence[dict[str, Any]], cosines: Sequence[float]) -> dict[str, Any]:
    """A retriever debug view with one dense branch giving each document a cosine."""
    return {
        "branches": {"content_m_vectors": {"kind": "dense"}, "bm25": {"kind": "bm25"}},
        "fused": [
            {
                "_id": d["_id"],
                "page_id": d["page_id"],
                "score": d.get("score", 0.0),
                "raw_scores": {"content_m_vectors": 1.0 + c, "bm25": 3.0},
            }
            for d, c in zip(docs, cosines, strict=True)
        ],
        "rerank": None,
    }


VECTOR_DIMENSION = 16  # the similarity vectors StaticRetriever sends when asked


class StaticRetriever:
    """Answers the same documents to every query (filtered by page_id when asked)."""

    def __init__(
        self, documents: Sequence[dict[str, Any]] = (), cosines: Sequence[float] | None = None
    ) -> None:
        self.documents = list(documents)
        self.cosines = list(cosines) if cosines is not None else [0.8] * len(self.documents)
        self.requests: list[RetrieveRequest] = []
        self.similarity_requests: list[SimilarityRequest] = []
        self.similarity_down = False  # an older retriever without /v1/similarity, or its model failing
        self.similarity_model = "m"  # the model its similarity answers name
        self.state = "up"

    async def retrieve(self, request: RetrieveRequest) -> RetrieveResponse:
        self.requests.append(request)
        if self.state == "down":
            raise DependencyUnavailable("the fake retriever is down", dependency="retriever")
        pairs = list(zip(self.documents, self.cosines, strict=True))
        if request.filters and "page_id" in request.filters:
            pairs = [(d, c) for d, c in pairs if d["page_id"] == request.filters["page_id"]]
        docs = [d for d, _ in pairs]
        return RetrieveResponse.model_validate(
            {
                "documents": docs,
                "debug": dense_debug(docs, [c for _, c in pairs]),
                "timings_ms": {"total": 1.0},
            }
        )

    async def similarity(self, request: SimilarityRequest) -> SimilarityResponse:
        self.similarity_requests.append(request)
        if self.state == "down" or self.similarity_down:
            raise DependencyUnavailable("the fake retriever is down", dependency="retriever")
        wanted = set(analyze(request.query))
        scores = [len(wanted & set(analyze(t))) / max(len(wanted), 1) for t in request.texts]
        if not request.vectors:
            return SimilarityResponse(model=self.similarity_model, scores=scores)
        embedder = HashEmbedder(self.similarity_model, dimension=VECTOR_DIMENSION)
        return SimilarityResponse(
            model=self.similarity_model,
            scores=scores,
            query_vector=[float(v) for v in embedder.embed_queries([request.query])[0]],
            vectors=[[float(v) for v in row] for row in embedder.embed_passages(list(request.texts))],
        )

    async def page(self, page_id: int) -> PageDocuments:
        if self.state == "down":
            raise DependencyUnavailable("the fake retriever is down", dependency="retriever")
        docs = [d for d in self.documents if d["page_id"] == page_id]
        if not docs:
            raise NotFound(f"page {page_id} is not indexed")
        return PageDocuments.model_validate({"page_id": page_id, "documents": docs})

    async def model_names(self) -> list[str]:
        return ["m"]

    async def ping(self) -> bool:
        return self.state == "up"

    async def ping_store(self) -> bool:
        return self.state == "up"

    async def close(self) -> None:
        pass


# -- LLM servers on the wire -------------------------------------------------------------------------


class TunedRetriever(StaticRetriever):
    """The fake retriever, as if it had also searched its dense list with a tuned query encoder."""

    async def retrieve(self, request: RetrieveRequest) -> RetrieveResponse:
        response = await super().retrieve(request)
        debug = response.debug.model_dump()
        debug["branches"]["content_m_vectors@tuned"] = {"kind": "dense", "tuned": True}
        for row, cosine in zip(debug["fused"], (0.55, 0.35), strict=False):
            row["raw_scores"]["content_m_vectors@tuned"] = 1.0 + cosine
        return response.model_copy(update={"debug": type(response.debug).model_validate(debug)})


class RememberingRetriever(TunedRetriever):
    """The tuned fake, as if its question memory had found a remembered question of ``page`` at
    ``cosine`` (``debug.memory``), and, with ``unanswered``, a question the wiki did not answer at that
    cosine."""

    def __init__(
        self,
        documents: Sequence[dict[str, Any]],
        cosines: Sequence[float],
        *,
        page: int,
        cosine: float,
        unanswered: float | None = None,
    ) -> None:
        super().__init__(documents, cosines)
        self.remembered = {"question": "remembered", "pages": [page], "cosine": cosine}
        self.unanswered = None if unanswered is None else {"question": "unanswered", "cosine": unanswered}

    async def retrieve(self, request: RetrieveRequest) -> RetrieveResponse:
        response = await super().retrieve(request)
        debug = response.debug.model_dump()
        debug["memory"] = {"neighbours": [self.remembered], "shares": {}, "unanswered": self.unanswered}
        return response.model_copy(update={"debug": type(response.debug).model_validate(debug)})


class _RecordingServer:
    """A threaded HTTP server on 127.0.0.1 that records request bodies."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, dict[str, Any], dict[str, str]]] = []
        self.status = 200
        self.chunk_delay_s = 0.0
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def respond(self, handler: BaseHTTPRequestHandler, method: str, path: str, body: dict[str, Any]) -> None:
        raise NotImplementedError

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _dispatch(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else {}
                outer.requests.append((method, self.path, body, dict(self.headers.items())))
                outer.respond(self, method, self.path, body)

            def do_GET(self) -> None:
                self._dispatch("GET")

            def do_POST(self) -> None:
                self._dispatch("POST")

            def log_message(self, format: str, *args: object) -> None:
                pass

        return Handler


def _send(handler: BaseHTTPRequestHandler, status: int, body: bytes, content_type: str) -> None:
    handler.send_response(status)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def _send_chunked(
    handler: BaseHTTPRequestHandler, content_type: str, parts: Sequence[bytes], delay_s: float
) -> None:
    handler.send_response(200)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Transfer-Encoding", "chunked")
    handler.end_headers()
    for part in parts:
        if delay_s:
            time.sleep(delay_s)
        handler.wfile.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
        handler.wfile.flush()
    handler.wfile.write(b"0\r\n\r\n")
    handler.wfile.flush()


class FakeOllama(_RecordingServer):
    """Replays Ollama's ``/api/chat`` stream: one JSON object per line, the last with ``done: true``."""

    def __init__(self, pieces: Sequence[str] = ("Hel", "lo", " [1]")) -> None:
        super().__init__()
        self.pieces = list(pieces)
        self.known_models = {"qwen2.5:3b-instruct"}

    def respond(self, handler: BaseHTTPRequestHandler, method: str, path: str, body: dict[str, Any]) -> None:
        if path == "/api/tags":
            models = [{"name": m, "model": m} for m in sorted(self.known_models)]
            _send(handler, 200, json.dumps({"models": models}).encode(), "application/json")
            return
        if path != "/api/chat":
            _send(handler, 404, b"404 page not found", "text/plain")
            return
        if self.status != 200:
            _send(handler, self.status, json.dumps({"error": "server exploded"}).encode(), "application/json")
            return
        model = body.get("model")
        if model not in self.known_models:
            error = {"error": f"model '{model}' not found, try pulling it first"}
            _send(handler, 404, json.dumps(error).encode(), "application/json")
            return
        stamp = "2025-01-01T00:00:00.000000Z"
        lines = [
            {
                "model": model,
                "created_at": stamp,
                "message": {"role": "assistant", "content": p},
                "done": False,
            }
            for p in self.pieces
        ]
        lines.append(
            {
                "model": model,
                "created_at": stamp,
                "message": {"role": "assistant", "content": ""},
                "done_reason": "stop",
                "done": True,
                "total_duration": 1_000_000,
                "load_duration": 1000,
                "prompt_eval_count": 26,
                "prompt_eval_duration": 1000,
                "eval_count": len(self.pieces),
                "eval_duration": 1000,
            }
        )
        parts = [(json.dumps(line) + "\n").encode() for line in lines]
        _send_chunked(handler, "application/x-ndjson", parts, self.chunk_delay_s)


class FakeOpenAI(_RecordingServer):
    """An OpenAI-compatible ``/v1/chat/completions`` streaming SSE (``data: {chunk}``, ``data: [DONE]``)."""

    def __init__(self, pieces: Sequence[str] = ("Hel", "lo", " [1]")) -> None:
        super().__init__()
        self.pieces = list(pieces)
        self.error_midway = False

    def respond(self, handler: BaseHTTPRequestHandler, method: str, path: str, body: dict[str, Any]) -> None:
        if path == "/v1/models":
            _send(
                handler,
                200,
                json.dumps({"object": "list", "data": [{"id": "m"}]}).encode(),
                "application/json",
            )
            return
        if path != "/v1/chat/completions":
            _send(handler, 404, b'{"error": {"message": "not found"}}', "application/json")
            return
        if self.status != 200:
            error = {"error": {"message": "model overloaded", "type": "server_error"}}
            _send(handler, self.status, json.dumps(error).encode(), "application/json")
            return

        def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
            obj = {
                "id": "chatcmpl-1",
                "object": "chat.completion.chunk",
                "created": 1,
                "model": body.get("model"),
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                **extra,
            }
            return f"data: {json.dumps(obj)}\n\n".encode()

        parts = [b": keep-alive\n\n", chunk({"role": "assistant", "content": ""})]
        parts += [chunk({"content": p}) for p in self.pieces]
        if self.error_midway:
            parts.append(b'data: {"error": {"message": "out of memory"}}\n\n')
        parts.append(chunk({}, "stop"))
        usage = {
            "prompt_tokens": 12,
            "completion_tokens": len(self.pieces),
            "total_tokens": 12 + len(self.pieces),
        }
        parts.append(f"data: {json.dumps({'id': 'chatcmpl-1', 'choices': [], 'usage': usage})}\n\n".encode())
        parts.append(b"data: [DONE]\n\n")
        _send_chunked(handler, "text/event-stream", parts, self.chunk_delay_s)


# -- serving an app ----------------------------------------------------------------------------------


@contextmanager
def serve_app(app: Any, *, start_timeout_s: float = 60.0) -> Iterator[str]:
    """Run ``app`` (with its lifespan) on a free port in a thread; yields its base URL."""
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=0,
        log_config=None,
        lifespan="on",
        timeout_graceful_shutdown=5,
        proxy_headers=False,  # as the services run: X-Forwarded-For is ragbot.http.auth's to trust
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + start_timeout_s
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError("the app failed to start (see the log above)")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the app did not start within {start_timeout_s} s")
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


@dataclass
class SSEEvent:
    """One parsed Server-Sent Event."""

    event: str
    data: Any
    raw: str = field(repr=False, default="")


def parse_sse(text: str) -> list[SSEEvent]:
    """Events of an SSE body (comments and pings skipped; ``data`` parsed as JSON when it is)."""
    events: list[SSEEvent] = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        name, data_lines = "message", []
        for line in block.split("\n"):
            if line.startswith(":") or not line:
                continue
            key, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if key == "event":
                name = value
            elif key == "data":
                data_lines.append(value)
        if not data_lines:
            continue
        raw = "\n".join(data_lines)
        try:
            data: Any = json.loads(raw)
        except json.JSONDecodeError:
            data = raw
        events.append(SSEEvent(name, data, raw))
    return events
