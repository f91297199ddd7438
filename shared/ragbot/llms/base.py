"""What every ``ChatModel`` adapter shares: the error, the timeouts, the OpenAI-style request and chunks.

An adapter's ``stream()`` returns the port's ``TokenStream``: an async iterator of text pieces whose
``usage`` is filled in as the server reports it. Closing the stream early (``aclose()``, or the
consumer being cancelled) stops generation at the adapter.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Sequence
from typing import Any

from ragbot.errors import LLMError
from ragbot.ports import ChatMessage, TokenStream, Usage


def with_timeouts(stream: TokenStream, *, first_token_s: float, idle_s: float, total_s: float) -> TokenStream:
    """The same stream, failing with ``LLMError`` when a piece takes too long or the whole answer does."""

    async def bounded() -> AsyncGenerator[str, None]:
        started = time.monotonic()
        first = True
        try:
            while True:
                left = total_s - (time.monotonic() - started)
                if left <= 0:
                    raise LLMError(f"the LLM did not finish within {total_s:g} s")
                limit = min(first_token_s if first else idle_s, left)
                try:
                    # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a cancellation
                    # that arrives as a piece completes, and the answer would go on for a gone client.
                    async with asyncio.timeout(limit):
                        piece = await stream.__anext__()
                except StopAsyncIteration:
                    return
                except TimeoutError:
                    what = "the first token" if first else "the next token"
                    raise LLMError(f"the LLM did not send {what} within {limit:g} s") from None
                first = False
                yield piece
        finally:
            await stream.aclose()

    return TokenStream(bounded(), stream.usage)


async def complete(stream: TokenStream) -> str:
    """Collect a whole answer (rewrites and non-streaming callers)."""
    pieces = [piece async for piece in stream]
    return "".join(pieces)


def as_openai_messages(messages: Sequence[ChatMessage]) -> list[dict[str, str]]:
    """Messages in the ``[{role, content}]`` shape every backend takes."""
    return [{"role": m.role, "content": m.content} for m in messages]


def openai_chat_body(
    *, messages: Sequence[ChatMessage], temperature: float | None, max_tokens: int, **extra: Any
) -> dict[str, Any]:
    """A streaming OpenAI-style ``/chat/completions`` body (no ``temperature`` when it is None)."""
    body: dict[str, Any] = {
        "messages": as_openai_messages(messages),
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": max_tokens,
        **extra,
    }
    if temperature is not None:
        body["temperature"] = temperature
    return body


def read_openai_chunk(chunk: Any, usage: Usage, *, where: str, refused: str) -> str:
    """The text of one streamed OpenAI-style chunk; records usage and finish reason; raises on an error.

    ``where`` names the server in messages; ``refused`` says what an error chunk means there.
    """
    if not isinstance(chunk, dict):
        raise LLMError(f"{where} sent an unexpected chunk: {str(chunk)[:200]}")
    error = chunk.get("error")
    if error is not None:
        message = error.get("message") if isinstance(error, dict) else error
        raise LLMError(f"{where} {refused}: {message}")
    reported = chunk.get("usage")
    if isinstance(reported, dict):
        usage.prompt_tokens = reported.get("prompt_tokens")
        usage.completion_tokens = int(reported.get("completion_tokens") or 0)
        usage.reported = True
    text = ""
    for choice in chunk.get("choices") or []:
        delta = choice.get("delta") or {}
        content = delta.get("content")
        if isinstance(content, str):
            text += content
        if choice.get("finish_reason"):
            usage.finish_reason = choice["finish_reason"]
    if text and not usage.reported:
        usage.completion_tokens += 1
    return text
