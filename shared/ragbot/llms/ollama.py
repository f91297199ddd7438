"""Ollama through its official ``ollama.AsyncClient``, streaming (newline-delimited JSON on the wire).

Every vendor error (``ollama.ResponseError``, ``ConnectionError``, httpx transport errors, a line that
is not JSON) becomes ``LLMError`` naming the host and the model, so the chat service can tell the
client that the LLM is down and still send the sources.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Sequence
from typing import TYPE_CHECKING, Any

import httpx

from ragbot.errors import LLMError
from ragbot.llms.base import as_openai_messages
from ragbot.ports import ChatMessage, TokenStream, Usage

if TYPE_CHECKING:
    from ollama import AsyncClient

DEFAULT_HOST = "http://127.0.0.1:11434"


class OllamaChatModel:
    """A model served by Ollama; ``warm_up`` builds the client, nothing connects at construction."""

    backend = "ollama"

    def __init__(
        self,
        *,
        model: str,
        host: str = "",
        connect_timeout_s: float = 5.0,
        read_timeout_s: float = 120.0,
        keep_alive: str | None = None,
    ) -> None:
        self.host = host or DEFAULT_HOST
        self._model = model
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self.keep_alive = keep_alive
        self._client: AsyncClient | None = None

    @property
    def model(self) -> str:
        """The Ollama model tag, e.g. ``qwen2.5:3b-instruct``."""
        return self._model

    def warm_up(self) -> None:
        """Build the client (idempotent); the model loads in Ollama on the first request."""
        if self._client is None:
            from ollama import AsyncClient

            timeout = httpx.Timeout(self.read_timeout_s, connect=self.connect_timeout_s)
            self._client = AsyncClient(host=self.host, timeout=timeout)

    def _require(self) -> AsyncClient:
        if self._client is None:
            self.warm_up()
        assert self._client is not None
        return self._client

    async def ping(self) -> bool:
        """True when Ollama answers its model list."""
        from ollama import ResponseError

        try:
            await self._require().list()
        except ResponseError:
            return True  # it answered, even if with an error
        except (httpx.HTTPError, ConnectionError, OSError, ValueError):
            return False
        return True

    def stream(
        self,
        *,
        messages: Sequence[ChatMessage],
        temperature: float | None = 0.0,
        max_tokens: int = 512,
        model: str | None = None,
    ) -> TokenStream:
        """Stream ``/api/chat``; usage comes from the final chunk's eval counts (no temperature: None)."""
        usage = Usage()
        return TokenStream(
            self._generate(
                messages=messages, temperature=temperature, max_tokens=max_tokens, model=model, usage=usage
            ),
            usage,
        )

    async def _generate(
        self,
        *,
        messages: Sequence[ChatMessage],
        temperature: float | None,
        max_tokens: int,
        model: str | None,
        usage: Usage,
    ) -> AsyncGenerator[str, None]:
        from ollama import ResponseError

        name = model or self._model
        options: dict[str, Any] = {"num_predict": max_tokens}
        if temperature is not None:
            options["temperature"] = temperature
        try:
            parts = await self._require().chat(
                model=name,
                messages=as_openai_messages(messages),
                stream=True,
                options=options,
                keep_alive=self.keep_alive,
            )
            async for part in parts:
                text = part.message.content if part.message is not None else None
                if part.done:
                    usage.prompt_tokens = part.prompt_eval_count
                    usage.completion_tokens = int(part.eval_count or usage.completion_tokens)
                    usage.finish_reason = part.done_reason
                    usage.reported = True
                if text:
                    if not usage.reported:
                        usage.completion_tokens += 1
                    yield text
        except ResponseError as exc:
            raise LLMError(
                f"Ollama at {self.host} refused model {name!r} (HTTP {exc.status_code}): {exc.error}"
            ) from None
        except (httpx.HTTPError, ConnectionError, OSError) as exc:
            raise LLMError(f"Ollama at {self.host} is unreachable: {exc or type(exc).__name__}") from None
        except (json.JSONDecodeError, ValueError) as exc:
            raise LLMError(f"Ollama at {self.host} sent a malformed stream: {exc}") from None

    async def close(self) -> None:
        """Close the HTTP connections."""
        client, self._client = self._client, None
        if client is not None:
            await client.close()  # type: ignore[no-untyped-call]
