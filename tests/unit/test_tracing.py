"""Tracing's switch (the standard OTEL_* variables), its absence without the extra, trace ids in logs,
and the request id the chat service forwards to the retriever."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import subprocess
import sys

import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider

from ragbot.chat.retriever import HttpRetriever
from ragbot.observability.logging import JsonFormatter, RequestIdFilter, request_id_scope
from ragbot.observability.tracing import configure_tracing, tracing_enabled
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
