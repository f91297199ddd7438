"""Tracing end to end through real processes exporting OTLP/HTTP to a receiver in the test.

One wiki ping (``python -m ragbot_ingest`` -> Celery on Redis -> ``python -m ragbot_embedder`` ->
Elasticsearch) and one question (``python -m ragbot_chat`` with the embedded llama.cpp runtime ->
``python -m ragbot_retriever`` over the embedded store) must each arrive as one trace: every span
shares the trace id and hangs off a span of the same trace, across processes. The request id also
travels chat -> retriever, and the JSON logs carry the trace id.
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.chat_corpus import write_definition
from support.chat_fakes import parse_sse
from support.chat_stack import sample_store
from support.fake_wiki import FakeWiki, load_pages
from support.otlp_collector import CollectedSpan, OtlpCollector
from support.processes import (
    ServiceProcess,
    delete_es_prefix,
    delete_redis_prefix,
    free_port,
    local_service,
    service_env,
)
from support.waits import poll

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(600)]

START_TIMEOUT_S = 240.0
PING_DEFINITION = {
    "identifier_field": "page_id",
    "saved_fields": {"title": "text", "page_id": "integer", "url": "keyword", "content": "text"},
    "field_for_llm": "content",
    "models": {"all-MiniLM-L6-v2": "content"},
}


@pytest.fixture
def collector() -> Iterator[OtlpCollector]:
    with OtlpCollector() as running:
        yield running


def tracing_env(collector: OtlpCollector, overrides: dict[str, str]) -> dict[str, str]:
    """A service environment exporting every span to the collector."""
    env = service_env({"OTEL_EXPORTER_OTLP_ENDPOINT": collector.endpoint, **overrides})
    for name in ("OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_SERVICE_NAME", "OTEL_TRACES_SAMPLER_ARG"):
        env.pop(name, None)
    return env


def start_all(processes: list[ServiceProcess]) -> None:
    for proc in processes:
        proc.start()
    for proc in processes:
        proc.wait_healthy(timeout_s=START_TIMEOUT_S)


def describe(spans: list[CollectedSpan]) -> str:
    return "\n".join(f"{s.service} {s.kind} {s.name} {s.span_id}<-{s.parent_span_id}" for s in spans)


def assert_one_tree(spans: list[CollectedSpan]) -> None:
    """One trace id, one root, and every other span's parent is a span of the trace."""
    assert len({s.trace_id for s in spans}) == 1
    ids = {s.span_id for s in spans}
    roots = [s for s in spans if not s.parent_span_id]
    assert len(roots) == 1, describe(spans)
    orphans = [s for s in spans if s.parent_span_id and s.parent_span_id not in ids]
    assert not orphans, (
        f"spans whose parent is not in the trace:\n{describe(orphans)}\n---\n{describe(spans)}"
    )


def root_of(spans: list[CollectedSpan], *, service: str, route: str) -> CollectedSpan | None:
    for span in spans:
        if span.service == service and span.kind == "server" and span.attributes.get("http.route") == route:
            return span
    return None


def method(span: CollectedSpan) -> Any:
    """The HTTP method under the stable or the older semantic conventions."""
    return span.attributes.get("http.request.method", span.attributes.get("http.method"))


def log_trace_ids(path: Path) -> set[str]:
    ids = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            if record.get("trace_id"):
                ids.add(record["trace_id"])
    return ids


def test_one_ping_is_one_trace_from_ingest_through_the_worker_to_the_store(
    collector: OtlpCollector, redis_url: str, es_url: str, tmp_path: Path
) -> None:
    run_id = uuid.uuid4().hex[:10]
    prefix = index_prefix = queue = f"e2e-trace-{run_id}"
    definition = tmp_path / "definition.json"
    definition.write_text(json.dumps(PING_DEFINITION), encoding="utf-8")
    ingest_port, worker_port = free_port(), free_port()
    env = tracing_env(
        collector,
        {
            "RAGBOT_DOCUMENT_DEFINITION": str(definition),
            "RAGBOT_DEVICE": "cpu",
            "RAGBOT_REDIS_URL": redis_url,
            "RAGBOT_REDIS_KEY_PREFIX": prefix,
            "RAGBOT_STORE_BACKEND": "elasticsearch",
            "RAGBOT_STORE_ES_URL": es_url,
            "RAGBOT_STORE_ES_INDEX_PREFIX": index_prefix,
            "RAGBOT_INGEST_HOST": "127.0.0.1",
            "RAGBOT_INGEST_PORT": str(ingest_port),
            "RAGBOT_INGEST_ALLOWED_CALLBACK_HOSTS": '["127.0.0.1:*"]',
            "RAGBOT_WORKER_QUEUE": queue,
            "RAGBOT_WORKER_METRICS_HOST": "127.0.0.1",
            "RAGBOT_WORKER_METRICS_PORT": str(worker_port),
            "RAGBOT_PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "metrics"),
        },
    )
    ingest = local_service(
        "ingest", module="ragbot_ingest", port=ingest_port, env=env, log_dir=tmp_path, cwd=tmp_path
    )
    worker = local_service(
        "worker",
        module="ragbot_embedder",
        port=worker_port,
        env=env,
        log_dir=tmp_path,
        cwd=tmp_path,
        health="readyz",
    )
    page = next(p for p in load_pages() if p["page_id"] == 100029)
    with (
        FakeWiki([page]) as wiki,
        httpx.Client(base_url=f"http://127.0.0.1:{ingest_port}", timeout=30) as http,
    ):
        try:
            start_all([ingest, worker])
            response = http.post("/v1/pages/changed", json=wiki.ping(100029))
            assert response.status_code == 202, response.text
            job_id = response.json()["job_id"]

            def ended() -> dict[str, Any] | None:
                record: dict[str, Any] = http.get(f"/v1/jobs/{job_id}").json()
                return record if record["state"] in ("done", "skipped", "failed") else None

            record = poll(
                f"job {job_id} to end",
                ended,
                timeout_s=120,
                detail=lambda: f"{ingest.log_tail()}\n{worker.log_tail()}",
            )
            assert record["state"] == "done", record

            def complete(spans: list[CollectedSpan]) -> bool:
                root = root_of(spans, service="ragbot-ingest", route="/v1/pages/changed")
                if root is None:
                    return False
                trace = [s for s in spans if s.trace_id == root.trace_id]
                return any(s.service == "ragbot-embedder" and s.kind == "consumer" for s in trace) and any(
                    s.attributes.get("db.system") == "elasticsearch" and s.name == "bulk" for s in trace
                )

            spans = collector.wait_for(complete)
            root = root_of(spans, service="ragbot-ingest", route="/v1/pages/changed")
            assert root is not None, describe(spans)
            trace = collector.trace(root.trace_id)
        finally:
            worker.stop()
            ingest.stop()
            delete_redis_prefix(redis_url, prefix)
            delete_es_prefix(es_url, index_prefix)

    assert_one_tree(trace)
    assert [s for s in trace if not s.parent_span_id] == [root]
    by_service = {s.service for s in trace}
    assert by_service == {"ragbot-ingest", "ragbot-embedder"}, describe(trace)
    publish = [s for s in trace if s.kind == "producer" and "embedder.index_page" in s.name]
    run = [s for s in trace if s.kind == "consumer" and "embedder.index_page" in s.name]
    assert publish and run and run[0].parent_span_id == publish[0].span_id, describe(trace)
    worker_spans = [s for s in trace if s.service == "ragbot-embedder"]
    # The page fetch (httpx), the job record (Redis) and the write (Elasticsearch's own spans).
    fetches = [s for s in worker_spans if s.kind == "client" and method(s) == "GET"]
    assert fetches, describe(worker_spans)
    assert any(s.attributes.get("db.system") == "redis" for s in worker_spans), describe(worker_spans)
    assert any(s.attributes.get("db.system") == "elasticsearch" for s in worker_spans), describe(worker_spans)
    # The ingest side recorded its own Redis writes (the job record) under the request span.
    assert any(s.service == "ragbot-ingest" and s.attributes.get("db.system") == "redis" for s in trace)
    assert root.trace_id in log_trace_ids(worker.log_path) & log_trace_ids(ingest.log_path)


def test_one_question_is_one_trace_from_chat_through_the_retriever_to_the_store_and_the_llm(
    collector: OtlpCollector, redis_url: str, tmp_path: Path
) -> None:
    store = tmp_path / "store.sqlite3"
    shutil.copyfile(sample_store(), store)
    retriever_port, chat_port = free_port(), free_port()
    prefix = f"test-trace-chat-{uuid.uuid4().hex[:10]}"
    env = tracing_env(
        collector,
        {
            "RAGBOT_REDIS_URL": redis_url,
            "RAGBOT_REDIS_KEY_PREFIX": prefix,
            "RAGBOT_STORE_BACKEND": "embedded",
            "RAGBOT_STORE_EMBEDDED_PATH": str(store),
            "RAGBOT_DOCUMENT_DEFINITION": str(write_definition(tmp_path / "definition.json")),
            "RAGBOT_RETRIEVER_PORT": str(retriever_port),
            "RAGBOT_CHAT_PORT": str(chat_port),
            "RAGBOT_CHAT_RETRIEVER_URL": f"http://127.0.0.1:{retriever_port}",
            "RAGBOT_CHAT_LLM_BACKEND": "llamacpp",
            "RAGBOT_CHAT_LLM_MAX_TOKENS": "6",
            "RAGBOT_CHAT_CONTEXT_MAX_CHARS": "300",
            "RAGBOT_CHAT_PARAGRAPHS_PER_PAGE": "[2, 1]",
            "RAGBOT_CHAT_LLAMACPP_CONTEXT_TOKENS": "2048",
        },
    )
    for name in ("RAGBOT_RETRIEVER_RERANKER_PATH", "RAGBOT_CHAT_PROMPTS_DIR"):
        env.pop(name, None)
    retriever = local_service(
        "retriever",
        module="ragbot_retriever",
        port=retriever_port,
        env=env,
        log_dir=tmp_path,
        cwd=tmp_path,
        health="readyz",
    )
    chat = local_service(
        "chat", module="ragbot_chat", port=chat_port, env=env, log_dir=tmp_path, cwd=tmp_path
    )
    rid = f"trace-rid-{uuid.uuid4().hex[:8]}"
    route = "/v1/sessions/{session_id}/messages"
    with httpx.Client(base_url=f"http://127.0.0.1:{chat_port}", timeout=300) as http:
        try:
            start_all([retriever, chat])
            session_id = http.post("/v1/sessions", json={"mode": "grounded"}).json()["session_id"]
            response = http.post(
                f"/v1/sessions/{session_id}/messages",
                json={"question": "Who is exempt from income tax?"},
                headers={"X-Request-ID": rid},
            )
            assert response.status_code == 200, response.text
            events = parse_sse(response.text)
            assert events[-1].event == "done", f"{events}\n{chat.log_tail()}"

            def complete(spans: list[CollectedSpan]) -> bool:
                root = root_of(spans, service="ragbot-chat", route=route)
                if root is None:
                    return False
                trace = [s for s in spans if s.trace_id == root.trace_id]
                services = {s.service for s in trace}
                return "ragbot-retriever" in services and any(s.name.startswith("chat ") for s in trace)

            spans = collector.wait_for(complete)
            root = root_of(spans, service="ragbot-chat", route=route)
            assert root is not None, describe(spans)
            trace = collector.trace(root.trace_id)
        finally:
            chat.stop()
            retriever.stop()
            delete_redis_prefix(redis_url, prefix)

    assert_one_tree(trace)
    assert [s for s in trace if not s.parent_span_id] == [root]
    spans_by_id = {s.span_id: s for s in trace}
    served = [s for s in trace if s.service == "ragbot-retriever" and s.kind == "server"]
    assert served and served[0].attributes.get("http.route") == "/v1/retrieve", describe(trace)
    caller = spans_by_id[served[0].parent_span_id]
    assert caller.service == "ragbot-chat" and caller.kind == "client", describe(trace)
    store_spans = [s for s in trace if s.attributes.get("db.system.name") == "sqlite"]
    assert {s.attributes["db.operation.name"] for s in store_spans} >= {"knn", "bm25"}, describe(trace)
    assert all(s.service == "ragbot-retriever" for s in store_spans)
    assert any(s.name == "retrieval embed" and s.service == "ragbot-retriever" for s in trace)
    assert any(s.service == "ragbot-chat" and s.attributes.get("db.system") == "redis" for s in trace)

    [llm] = [s for s in trace if s.name.startswith("chat ")]
    attributes: dict[str, Any] = llm.attributes
    assert llm.kind == "client" and llm.service == "ragbot-chat"
    assert attributes["gen_ai.operation.name"] == "chat"
    assert attributes["gen_ai.request.model"] == "SmolLM2-135M-Instruct.Q4_1"
    assert attributes["gen_ai.usage.input_tokens"] > 0
    assert 1 <= attributes["gen_ai.usage.output_tokens"] <= 6
    assert attributes["gen_ai.response.time_to_first_token"] > 0
    assert "gen_ai.first_token" in llm.events

    # The request id went from chat to the retriever; both processes logged the trace id.
    assert rid in retriever.log_path.read_text(encoding="utf-8")
    assert root.trace_id in log_trace_ids(chat.log_path) & log_trace_ids(retriever.log_path)
