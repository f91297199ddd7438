"""Every event the chat service streams validates against the schema its committed OpenAPI document
gives (docs/openapi/chat.json): the native SSE events and the OpenAI-compatible chunks, over real HTTP
with real retrieval and Redis, an answered turn and a failed one."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
from jsonschema import Draft202012Validator, ValidationError, validators  # type: ignore[import-untyped]  # no stubs installed
from support.chat_fakes import ScriptedLLM, SSEEvent, parse_sse
from support.chat_stack import ChatServer, chat_server

from ragbot.ports import ChatMessage

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

SPEC = json.loads((Path(__file__).resolve().parents[2] / "docs/openapi/chat.json").read_text("utf-8"))
QUESTION = "מי זכאי לפטור ממס הכנסה?"


def script(messages: Sequence[ChatMessage]) -> str:
    return "התשובה במקורות [1]."


def _json_content(
    validator: Any, content_schema: Any, instance: Any, schema: dict[str, Any]
) -> Iterator[Any]:
    """``contentSchema`` checked, not only noted: JSON text in ``data`` must decode to a valid payload."""
    if schema.get("contentMediaType") == "application/json" and isinstance(instance, str):
        try:
            decoded = json.loads(instance)
        except ValueError:
            yield ValidationError(f"data is not JSON: {instance[:40]!r}")
            return
        yield from validator.descend(decoded, content_schema)


SseValidator = validators.extend(Draft202012Validator, {"contentSchema": _json_content})


def stream_validator(path: str) -> Draft202012Validator:
    """The documented ``text/event-stream`` schema of ``POST path``, its components alongside."""
    schema = SPEC["paths"][path]["post"]["responses"]["200"]["content"]["text/event-stream"]["schema"]
    assert len(schema["oneOf"]) >= 3
    return SseValidator({**schema, "components": SPEC["components"]})


def wire(data: Any) -> str:
    """An event's ``data`` as it is sent: JSON text (a plain string such as ``[DONE]`` as it is)."""
    return data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)


def check(validator: Draft202012Validator, frames: list[dict[str, Any]]) -> None:
    for frame in frames:
        errors = [e.message for e in validator.iter_errors(frame)]
        assert not errors, (frame, errors)


@pytest.fixture(scope="module")
def server(redis_url: str) -> Iterator[ChatServer]:
    with chat_server(llm=ScriptedLLM(script), redis_url=redis_url) as running:
        yield running


def native(http: httpx.Client, *, debug: bool) -> list[SSEEvent]:
    session = http.post("/v1/sessions", json={}).json()["session_id"]
    response = http.post(
        f"/v1/sessions/{session}/messages", json={"question": QUESTION}, params={"debug": debug}
    )
    assert response.status_code == 200
    return parse_sse(response.text)


def test_native_events_match_their_documented_schemas(server: ChatServer) -> None:
    validator = stream_validator("/v1/sessions/{session_id}/messages")
    with httpx.Client(base_url=server.url, timeout=60) as http:
        for debug in (False, True):
            events = native(http, debug=debug)
            assert events[0].event == "sources" and events[-1].event == "done"
            assert ("debug" in events[0].data) is debug
            check(validator, [{"event": e.event, "data": wire(e.data)} for e in events])
        # a frame the schema must refuse: proves the check can fail
        assert list(validator.iter_errors({"event": "done", "data": wire({"answer": 1})}))

        server.llm.state = "down"  # type: ignore[attr-defined]
        try:
            failed = native(http, debug=False)
        finally:
            server.llm.state = "up"  # type: ignore[attr-defined]
    assert failed[-1].event == "error"
    check(validator, [{"event": e.event, "data": wire(e.data)} for e in failed])


def test_openai_chunks_match_their_documented_schemas(server: ChatServer) -> None:
    validator = stream_validator("/v1/chat/completions")
    body = {"messages": [{"role": "user", "content": QUESTION}], "stream": True}
    with httpx.Client(base_url=server.url, timeout=60) as http:
        events = parse_sse(http.post("/v1/chat/completions", json=body).text)
        assert events[-1].data == "[DONE]" and len(events) >= 4
        last_chunk = events[-2].data
        assert last_chunk["choices"][0]["finish_reason"] == "stop" and last_chunk["citations"]
        check(validator, [{"data": wire(e.data)} for e in events])
        assert list(validator.iter_errors({"data": wire({"id": "x", "choices": "no"})}))

        server.llm.state = "down"  # type: ignore[attr-defined]
        try:
            failed = parse_sse(http.post("/v1/chat/completions", json=body).text)
        finally:
            server.llm.state = "up"  # type: ignore[attr-defined]
    assert "error" in failed[-2].data
    check(validator, [{"data": wire(e.data)} for e in failed])
