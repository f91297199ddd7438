"""Tracing's switch (the standard OTEL_* variables), its absence without the extra, trace ids in logs,
the request id the chat service forwards to the retriever, and the LLM's GenAI span (SDK in memory)."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import subprocess
import sys
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from support.chat_fakes import ScriptedLLM

from ragbot.chat.retriever import HttpRetriever
from ragbot.errors import LLMError
from ragbot.observability.logging import JsonFormatter, RequestIdFilter, request_id_scope
from ragbot.observability.tracing import TracedChatModel, configure_tracing, tracing_enabled
from ragbot.ports import ChatMessage
from ragbot.settings import TracingSettings, clear_settings_caches, get_tracing_settings

OTEL_VARIABLES = (
    "OTEL_SDK_DISABLED",
    "OTEL_TRACES_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_SERVICE_NAME",
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in OTEL_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    clear_settings_caches()


def test_tracing_is_off_unless_the_variables_say_so(monkeypatch: pytest.MonkeyPatch) -> None:
    assert get_tracing_settings().enabled is False
    assert configure_tracing(service="test", settings=get_tracing_settings()) is False
    assert not tracing_enabled()

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/")
    clear_settings_caches()
    on = get_tracing_settings()
    assert on.exporter == "otlp" and on.traces_endpoint == "http://collector:4318/v1/traces"


@pytest.mark.parametrize(
    ("variables", "exporter", "endpoint"),
    [
        ({"OTEL_TRACES_EXPORTER": "otlp"}, "otlp", "http://localhost:4318/v1/traces"),
        ({"OTEL_TRACES_EXPORTER": "console"}, "console", "http://localhost:4318/v1/traces"),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, None, None),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, None, None),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/custom"}, "otlp", "http://c:4318/custom"),
    ],
)
def test_the_standard_variables_pick_the_exporter(
    monkeypatch: pytest.MonkeyPatch, variables: dict[str, str], exporter: str | None, endpoint: str | None
) -> None:
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    settings = TracingSettings()
    assert settings.exporter == exporter
    if endpoint is not None:
        assert settings.traces_endpoint == endpoint


_WITHOUT_EXTRA = """
import sys
BLOCKED = tuple(sys.argv[1].split(","))
class Block:
    def find_spec(self, name, path=None, target=None):
        if name in BLOCKED or name.startswith(tuple(b + "." for b in BLOCKED)):
            raise ImportError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Block())
import importlib
from ragbot.errors import ConfigurationError
from ragbot.observability import tracing, spans
from ragbot.observability.logging import configure_logging
from ragbot.settings import TracingSettings
for module in sys.argv[2].split(","):
    importlib.import_module(module)
configure_logging(service="x")
with spans.span("nothing"):
    assert spans.current_ids() is None
assert tracing.configure_tracing(service="x", settings=TracingSettings()) is False
try:
    tracing.configure_tracing(service="x", settings=TracingSettings(traces_exporter="otlp"))
except ConfigurationError as exc:
    print("refused:", exc)
"""


@pytest.mark.parametrize(
    ("blocked", "modules"),
    [
        # What the extra adds (FastAPI itself depends on the API): every service module imports.
        (
            "opentelemetry.sdk,opentelemetry.instrumentation,opentelemetry.exporter",
            "ragbot.http.app,ragbot.messaging.redis,ragbot_chat.app,ragbot_embedder.worker,ragbot_retriever.app",
        ),
        # Not even the API: the library's own modules still import.
        ("opentelemetry", "ragbot.messaging.redis,ragbot.stores.embedded.store,ragbot.messaging.queue"),
    ],
)
def test_without_the_extra_everything_imports_and_asking_for_tracing_is_a_clear_error(
    blocked: str, modules: str
) -> None:
    result = subprocess.run(
        [sys.executable, "-c", _WITHOUT_EXTRA, blocked, modules],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "refused:" in result.stdout and "ragbot[tracing]" in result.stdout


def test_every_json_line_written_in_a_span_carries_its_trace_and_span_id() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(RequestIdFilter("test"))
    log = logging.getLogger("test.tracing.lines")
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
    tracer = TracerProvider().get_tracer("test")
    try:
        with tracer.start_as_current_span("work") as span:
            log.info("inside")
        log.info("outside")
    finally:
        log.removeHandler(handler)
    inside, outside = (json.loads(line) for line in stream.getvalue().splitlines())
    context = span.get_span_context()
    assert inside["trace_id"] == format(context.trace_id, "032x")
    assert inside["span_id"] == format(context.span_id, "016x")
    assert "trace_id" not in outside and "span_id" not in outside


def test_the_chat_service_forwards_its_request_id_to_the_retriever() -> None:
    seen: list[str | None] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("X-Request-ID"))
        return httpx.Response(200, json={"models": [{"name": "m"}]})

    async def run() -> None:
        retriever = HttpRetriever(base_url="http://retriever", transport=httpx.MockTransport(answer))
        try:
            with request_id_scope("question-42"):
                assert await retriever.model_names() == ["m"]
            await retriever.model_names()
        finally:
            await retriever.close()

    asyncio.run(run())
    assert seen == ["question-42", None]


def _traced(llm: ScriptedLLM) -> tuple[TracedChatModel, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return TracedChatModel(llm, provider=provider), exporter


async def _answer(model: TracedChatModel, **kwargs: Any) -> str:
    stream = model.stream(messages=[ChatMessage("user", "hello there")], **kwargs)
    return "".join([piece async for piece in stream])


def test_an_llm_stream_is_one_genai_span_with_usage_and_time_to_first_token() -> None:
    model, exporter = _traced(ScriptedLLM(lambda _: "one two three", first_delay_s=0.02))
    answer = asyncio.run(_answer(model, max_tokens=64, temperature=0.2))
    [span] = exporter.get_finished_spans()
    attributes = dict(span.attributes or {})
    assert span.name == "chat fake-model" and span.kind.name == "CLIENT"
    assert attributes["gen_ai.operation.name"] == "chat"
    assert attributes["gen_ai.request.model"] == "fake-model"
    assert attributes["gen_ai.request.max_tokens"] == 64
    assert attributes["gen_ai.request.temperature"] == 0.2
    assert attributes["gen_ai.usage.output_tokens"] == len(answer.split()) == 3
    ttft = attributes["gen_ai.response.time_to_first_token"]
    assert isinstance(ttft, float) and ttft >= 0.02
    assert [e.name for e in span.events] == ["gen_ai.first_token"]
    assert span.status.status_code.name == "UNSET"


def test_a_failing_llm_ends_its_span_as_an_error_and_an_early_close_is_not_one() -> None:
    llm = ScriptedLLM()
    llm.state = "down"
    model, exporter = _traced(llm)
    with pytest.raises(LLMError):
        asyncio.run(_answer(model))
    [failed] = exporter.get_finished_spans()
    assert failed.status.status_code.name == "ERROR"
    assert dict(failed.attributes or {})["error.type"] == "LLMError"

    exporter.clear()
    llm.state = "up"

    async def first_piece_only() -> None:
        stream = model.stream(messages=[ChatMessage("user", "hello there")])
        await stream.__anext__()
        await stream.aclose()

    asyncio.run(first_piece_only())
    [closed] = exporter.get_finished_spans()
    assert closed.status.status_code.name == "UNSET"
    assert dict(closed.attributes or {})["ragbot.llm.cancelled"] is True
