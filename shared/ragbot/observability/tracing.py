"""OpenTelemetry tracing of every process: off by default, on by the standard ``OTEL_*`` variables.

``configure_tracing`` runs once per process at start (a service's ``__main__``, a worker process's
init): with ``TracingSettings.enabled`` it sets the global tracer provider (OTLP/HTTP or console, a
batch processor, parent-based sampling) and instruments httpx (every client: chat -> retriever, the
worker's page fetches, LLM servers) and Celery (the trace context rides in the task headers from
ingest to the worker). The helpers then attach what needs an object: ``instrument_app`` (each FastAPI
app, from ``ragbot.http.app``), ``instrument_redis`` (each client ``ragbot.messaging.redis`` builds;
kombu's broker polling stays untraced) and ``traced_llm`` (a ``ChatModel`` whose streams are GenAI
spans). Elasticsearch needs nothing: elasticsearch-py 8 makes its own spans through the global
provider. With tracing off every helper returns at once, and nothing here imports the SDK, so the
module imports without the ``ragbot[tracing]`` extra.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ragbot.errors import ConfigurationError
from ragbot.observability.spans import TRACER_NAME
from ragbot.ports import ChatMessage, ChatModel, TokenStream
from ragbot.settings import TracingSettings

if TYPE_CHECKING:
    from fastapi import FastAPI
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter

logger = logging.getLogger(__name__)

# Probes and scrapes are frequent and say nothing about a request: no spans for them.
EXCLUDED_URLS = "healthz,readyz,metrics"
FIRST_TOKEN_EVENT = "gen_ai.first_token"
TTFT_ATTRIBUTE = "gen_ai.response.time_to_first_token"


@dataclass
class _State:
    provider: TracerProvider | None = None
    pid: int | None = None


_state = _State()


def tracing_enabled() -> bool:
    """True when this process exports spans (``configure_tracing`` turned it on here)."""
    return _state.provider is not None and _state.pid == os.getpid()


def _exporter(settings: TracingSettings) -> SpanExporter:
    if settings.exporter == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(endpoint=settings.traces_endpoint)


def configure_tracing(*, service: str, settings: TracingSettings) -> bool:
    """Turn tracing on for this process when the settings say so (idempotent); True when it is on.

    The worker calls it in each worker process's init, never in a prefork parent: a provider's export
    thread does not survive a fork.
    """
    if not settings.enabled:
        return False
    if tracing_enabled():
        return True
    try:
        from opentelemetry import trace
        from opentelemetry.instrumentation.celery import CeleryInstrumentor
        from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
    except ImportError as exc:
        raise ConfigurationError(
            f"OTEL_* variables turn tracing on but the ragbot[tracing] extra is not installed ({exc.name})"
        ) from None
    from ragbot import __version__

    resource = Resource.create(
        {"service.name": settings.service_name or f"ragbot-{service}", "service.version": __version__}
    )
    provider = TracerProvider(
        resource=resource, sampler=ParentBased(TraceIdRatioBased(settings.traces_sampler_arg))
    )
    provider.add_span_processor(BatchSpanProcessor(_exporter(settings), schedule_delay_millis=1000))
    trace.set_tracer_provider(provider)
    for instrumentor in (HTTPXClientInstrumentor(), CeleryInstrumentor()):  # type: ignore[no-untyped-call]
        if instrumentor.is_instrumented_by_opentelemetry:
            instrumentor.uninstrument()
        instrumentor.instrument(tracer_provider=provider)
    _state.provider, _state.pid = provider, os.getpid()
    logger.info(
        "tracing on",
        extra={"exporter": settings.exporter, "endpoint": settings.traces_endpoint, "service": service},
    )
    return True


def shutdown_tracing() -> None:
    """Export what is buffered and stop (a worker process's shutdown; the SDK also does it at exit)."""
    if tracing_enabled() and _state.provider is not None:
        _state.provider.shutdown()
    _state.provider = None


def instrument_app(app: FastAPI) -> None:
    """Server spans for every request of ``app`` (not the probes), joined to a caller's trace."""
    if not tracing_enabled():
        return
    from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

    # No span per ASGI message: a streamed answer sends one per token, which says nothing and costs.
    FastAPIInstrumentor.instrument_app(
        app, excluded_urls=EXCLUDED_URLS, tracer_provider=_state.provider, exclude_spans=["receive", "send"]
    )


def instrument_redis(client: Any) -> None:
    """Client spans for every command of one of our Redis clients (sync or asyncio)."""
    if not tracing_enabled():
        return
    from opentelemetry.instrumentation.redis import RedisInstrumentor

    RedisInstrumentor.instrument_client(client, tracer_provider=_state.provider)


def traced_llm(llm: ChatModel) -> ChatModel:
    """``llm`` whose every stream is a GenAI client span; ``llm`` itself while tracing is off."""
    return TracedChatModel(llm) if tracing_enabled() else llm


class TracedChatModel:
    """A ``ChatModel`` wrapper: one ``chat <model>`` span per generation, GenAI semantic conventions.

    The span starts when the stream is created, under the caller's current span, and ends when the
    stream ends or is closed; the adapter's own calls (an httpx request to an LLM server) run inside
    it. It carries the model, the request parameters, the token usage, the finish reason, and the
    time to the first token (an event and an attribute, seconds).
    """

    def __init__(self, inner: ChatModel, *, provider: TracerProvider | None = None) -> None:
        self.inner = inner
        self.backend = inner.backend
        self._provider = provider  # None: the process's (``configure_tracing``)

    @property
    def model(self) -> str:
        """The wrapped adapter's model."""
        return self.inner.model

    def warm_up(self) -> None:
        """Warm the wrapped adapter."""
        self.inner.warm_up()

    async def ping(self) -> bool:
        """Ping the wrapped adapter."""
        return await self.inner.ping()

    async def close(self) -> None:
        """Close the wrapped adapter."""
        await self.inner.close()

    def __getattr__(self, name: str) -> Any:
        # Adapter-specific extras (slots, queue depth) stay reachable through the wrapper.
        return getattr(self.inner, name)

    def stream(
        self,
        *,
        messages: Sequence[ChatMessage],
        temperature: float | None = 0.0,
        max_tokens: int = 512,
        model: str | None = None,
    ) -> TokenStream:
        """The wrapped adapter's stream inside a span."""
        from opentelemetry import trace

        name = model or self.inner.model
        attributes: dict[str, str | int | float] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.system": self.backend,
            "gen_ai.provider.name": self.backend,
            "gen_ai.request.model": name,
            "gen_ai.request.max_tokens": max_tokens,
        }
        if temperature is not None:
            attributes["gen_ai.request.temperature"] = temperature
        tracer = trace.get_tracer(TRACER_NAME, tracer_provider=self._provider or _state.provider)
        span = tracer.start_span(f"chat {name}", kind=trace.SpanKind.CLIENT, attributes=attributes)
        started = time.perf_counter()
        with trace.use_span(span, end_on_exit=False, record_exception=False, set_status_on_exception=False):
            try:
                inner = self.inner.stream(
                    messages=messages, temperature=temperature, max_tokens=max_tokens, model=model
                )
            except BaseException as exc:  # an adapter that refuses at once: the span says so and ends
                span.record_exception(exc)
                span.set_status(trace.Status(trace.StatusCode.ERROR, str(exc)[:200]))
                span.end()
                raise

        async def pieces() -> AsyncGenerator[str, None]:
            first = True
            try:
                while True:
                    # Current only while the adapter works, so its calls are children of the LLM span.
                    with trace.use_span(span, end_on_exit=False, record_exception=False):
                        try:
                            piece = await inner.__anext__()
                        except StopAsyncIteration:
                            return
                    if first:
                        first = False
                        ttft = time.perf_counter() - started
                        span.add_event(FIRST_TOKEN_EVENT, {TTFT_ATTRIBUTE: ttft})
                        span.set_attribute(TTFT_ATTRIBUTE, ttft)
                    yield piece
            except (GeneratorExit, asyncio.CancelledError):
                span.set_attribute("ragbot.llm.cancelled", True)  # the consumer stopped: not an error
                raise
            except BaseException as exc:
                span.record_exception(exc)
                span.set_status(trace.Status(trace.StatusCode.ERROR, str(exc)[:200]))
                span.set_attribute("error.type", type(exc).__name__)
                raise
            finally:
                try:
                    await inner.aclose()
                finally:
                    usage = inner.usage
                    span.set_attribute("gen_ai.response.model", name)
                    if usage.prompt_tokens is not None:
                        span.set_attribute("gen_ai.usage.input_tokens", usage.prompt_tokens)
                    span.set_attribute("gen_ai.usage.output_tokens", usage.completion_tokens)
                    if usage.finish_reason:
                        span.set_attribute("gen_ai.response.finish_reasons", [usage.finish_reason])
                    span.end()

        return TokenStream(pieces(), inner.usage)
