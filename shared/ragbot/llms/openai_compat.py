"""Any OpenAI-compatible server (vLLM, llama.cpp server, hosted APIs) over httpx, streaming SSE.

``POST {base_url}/chat/completions`` with ``stream: true``; the body is Server-Sent Events, one
``data: {chunk}`` per piece and ``data: [DONE]`` at the end. Usage comes from the last chunk when the
server honours ``stream_options.include_usage``. Transport errors, HTTP errors and error chunks all
become ``LLMError``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Sequence
from typing import Any

import httpx
from pydantic import SecretStr

from ragbot.errors import LLMError
from ragbot.llms.base import openai_chat_body, read_openai_chunk
from ragbot.ports import ChatMessage, TokenStream, Usage

DEFAULT_BASE_URL = "http://127.0.0.1:8080/v1"


class OpenAICompatChatModel:
    """A model behind an OpenAI-style ``/chat/completions``; ``warm_up`` builds the HTTP client."""

    backend = "openai"

    def __init__(
        self,
        *,
        model: str,
        base_url: str = "",
        api_key: SecretStr | None = None,
        connect_timeout_s: float = 5.0,
        read_timeout_s: float = 120.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = (base_url or DEFAULT_BASE_URL).rstrip("/")
        self._model = model
        self.api_key = api_key
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self._transport = transport
        self._client: httpx.AsyncClient | None = None

    @property
    def model(self) -> str:
        """The model name sent with every request."""
        return self._model

    def warm_up(self) -> None:
        """Build the HTTP client (idempotent)."""
        if self._client is None:
            headers = {"Accept": "text/event-stream"}
            if self.api_key is not None and self.api_key.get_secret_value():
                headers["Authorization"] = f"Bearer {self.api_key.get_secret_value()}"
            self._client = httpx.AsyncClient(
                base_url=self.base_url + "/",
                headers=headers,
                timeout=httpx.Timeout(self.read_timeout_s, connect=self.connect_timeout_s),
                transport=self._transport,
            )

    def _require(self) -> httpx.AsyncClient:
        if self._client is None:
            self.warm_up()
        assert self._client is not None
        return self._client

    async def ping(self) -> bool:
        """True when the server answers ``GET /models`` with anything below 500."""
        try:
            response = await self._require().get("models")
        except httpx.HTTPError:
            return False
        return response.status_code < 500

    def stream(
        self,
        *,
        messages: Sequence[ChatMessage],
        temperature: float | None = 0.0,
        max_tokens: int = 512,
        model: str | None = None,
    ) -> TokenStream:
        """Stream one chat completion (no ``temperature`` field when it is None)."""
        usage = Usage()
        body = openai_chat_body(
            messages=messages, temperature=temperature, max_tokens=max_tokens, model=model or self._model
        )
        return TokenStream(self._generate(body, usage), usage)

    async def _generate(self, body: dict[str, Any], usage: Usage) -> AsyncGenerator[str, None]:
        where = f"the LLM server at {self.base_url}"
        try:
            async with self._require().stream("POST", "chat/completions", json=body) as response:
                if response.status_code >= 400:
                    text = (await response.aread()).decode("utf-8", errors="replace")
                    raise LLMError(
                        f"{where} answered HTTP {response.status_code} for model {body['model']!r}: "
                        f"{_error_message(text)}"
                    )
                async for line in response.aiter_lines():
                    data = _sse_data(line)
                    if data is None:
                        continue
                    if data == "[DONE]":
                        return
                    chunk = json.loads(data)
                    text = read_openai_chunk(chunk, usage, where=where, refused="failed while streaming")
                    if text:
                        yield text
        except httpx.HTTPError as exc:
            raise LLMError(f"{where} is unreachable: {exc or type(exc).__name__}") from None
        except json.JSONDecodeError as exc:
            raise LLMError(f"{where} sent a chunk that is not JSON: {exc}") from None

    async def close(self) -> None:
        """Close the HTTP connections."""
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()


def _sse_data(line: str) -> str | None:
    """The payload of a ``data:`` line; None for comments, other fields and blank separators."""
    if not line.startswith("data:"):
        return None
    return line[5:].strip()


def _error_message(text: str) -> str:
    try:
        body = json.loads(text)
    except json.JSONDecodeError:
        return text[:300]
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and "message" in error:
        return str(error["message"])[:300]
    return text[:300]
