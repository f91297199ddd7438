"""Server-Sent Events for every streaming contract: framing, keep-alive pings, and a client that left.

A stream is cancelled by the server when its client goes away; ``with_pings`` then closes the chunks it
was reading, which closes the LLM stream. A JSON answer has no stream to close, so
``unless_disconnected`` polls the connection and cancels the work itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, TypeVar

from fastapi.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

logger = logging.getLogger(__name__)
T = TypeVar("T")
# Status logged when a client left before its JSON answer was ready (nginx's "client closed request").
CLIENT_GONE = 499

SSE_HEADERS: Mapping[str, str] = {
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
    "Connection": "keep-alive",
}


def sse(event: str, data: Mapping[str, Any] | str) -> bytes:
    """One Server-Sent Event (JSON escapes newlines, so ``data`` stays on one line)."""
    body = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return f"event: {event}\ndata: {body}\n\n".encode()


class ClosingStream(StreamingResponse):
    """A streaming response that calls ``on_close`` once it is over: sent, failed, or its client gone."""

    def __init__(self, content: AsyncIterator[bytes], *, on_close: Callable[[], None], **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self.on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.on_close()


def event_stream(
    chunks: AsyncIterator[bytes], *, every_s: float, on_close: Callable[[], None] | None = None
) -> StreamingResponse:
    """The response carrying ``chunks`` as ``text/event-stream``, pinged when silent for ``every_s``;
    ``on_close`` runs when the stream is over (an admission slot goes back)."""
    content = with_pings(chunks, every_s=every_s)
    if on_close is None:
        return StreamingResponse(content, media_type="text/event-stream", headers=dict(SSE_HEADERS))
    return ClosingStream(
        content, on_close=on_close, media_type="text/event-stream", headers=dict(SSE_HEADERS)
    )


async def with_pings(chunks: AsyncIterator[bytes], *, every_s: float) -> AsyncGenerator[bytes, None]:
    """Pass chunks through, adding an SSE comment when none came for ``every_s`` (keeps proxies open).

    When the client goes away the server cancels this generator; the pending step of ``chunks`` is
    cancelled and ``chunks`` closed, which closes the LLM stream and stops generation.
    """
    iterator = aiter(chunks)
    pending: asyncio.Future[bytes] | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(anext(iterator))
            done, _ = await asyncio.wait({pending}, timeout=every_s)
            if not done:
                yield b": ping\n\n"
                continue
            step, pending = pending, None
            try:
                chunk = step.result()
            except StopAsyncIteration:
                return
            yield chunk
    finally:
        if pending is not None:
            pending.cancel()
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                await pending
        closer = getattr(iterator, "aclose", None)
        if closer is not None:
            await closer()


async def unless_disconnected(
    work: Awaitable[T], *, disconnected: Callable[[], Awaitable[bool]], every_s: float = 1.0
) -> T | None:
    """``work``'s result, or None once the client has gone: the work is cancelled, stopping the LLM.

    Non-streaming answers (``/search``, ``stream=false``) would otherwise keep generating for a client
    that gave up (KZChatbot's testing page waits 180 s) and slow every answer queued behind it. The
    embedded llama.cpp stops at its next token, so a prompt it is reading is still read to the end.
    """
    task = asyncio.ensure_future(work)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=every_s)
            if done:
                return task.result()
            if await disconnected():
                logger.info("client disconnected; answer cancelled")
                return None
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
