"""The routes KZChatbot's framed pages call (``search/stream``, ``clean_redis_history``, the three pings,
``rating`` in its query-string form) over real HTTP with real Redis and real retrieval; the LLM is a
scripted fake."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Iterator, Sequence
from typing import Any

import httpx
import pytest
import redis
from fastapi.testclient import TestClient
from support.auth import KEYS, auth_settings, chat_app
from support.chat_fakes import ScriptedLLM, parse_sse
from support.chat_stack import ChatServer, chat_server
from support.processes import free_port

from ragbot.chat.retriever import HttpRetriever
from ragbot.ports import ChatMessage

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

QUERY = "מי זכאי לפטור ממס הכנסה?"
# The paths the wiki's fetch shim rewrites to its proxy (issue 15).
PROXIED = frozenset(
    [
        "get_config",
        "set_config",
        "clean_redis_history",
        "ping/redis",
        "ping/llm_manager",
        "ping/es_docker",
        "search/stream",
        "search",
        "rating",
    ]
)


def script(messages: Sequence[ChatMessage]) -> str:
    if "שאילתה עצמאית" in messages[-1].content:
        return "פטור ממס לעיוורים"
    return "לפי המקורות [1], יש פטור."


@pytest.fixture(scope="module")
def server(redis_url: str) -> Iterator[ChatServer]:
    with chat_server(llm=ScriptedLLM(script), redis_url=redis_url) as running:
        yield running


@pytest.fixture
def http(server: ChatServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=60) as client:
        yield client


def stored_message(server: ChatServer, conversation_id: str) -> dict[str, Any] | None:
    client = redis.Redis.from_url(server.redis_url)
    try:
        raw = client.get(f"{server.prefix}:chat:message:{conversation_id}")
    finally:
        client.close()
    return None if raw is None else dict(json.loads(raw))


def test_search_stream_sends_sources_tokens_then_done_with_the_search_body(http: httpx.Client) -> None:
    body = {"query": QUERY, "include_debug_data": True, "rephrase": True, "asked_from": "testing interface"}
    with http.stream("POST", "/search/stream", json=body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        text = response.read().decode()
    events = parse_sse(text)
    names = [e.event for e in events]
    assert names[0] == "sources" and names[-1] == "done" and "token" in names
    assert all(e.data["event"] == e.event for e in events)
    sources, done = events[0].data, events[-1].data
    assert sources["docs"] and sources["rephrased_question"] == "פטור ממס לעיוורים"
    assert sources["docs_before_filter"] and sources["conversation_id"] == done["conversation_id"]
    assert "".join(e.data["text"] for e in events if e.event == "token") == done["gpt_result"]
    assert done["gpt_result"] == "לפי המקורות [1], יש פטור."
    plain = http.post("/search", json=body).json()
    assert set(done) - {"event"} == set(plain)
    assert done["debug_data"]["sources"] and done["original_question"] == QUERY


def test_search_stream_without_debug_keeps_the_debug_fields_out(http: httpx.Client) -> None:
    response = http.post("/search/stream", json={"query": QUERY})
    events = parse_sse(response.text)
    assert events[0].data["docs_before_filter"] is None and events[0].data["rephrased_question"] is None
    assert set(events[-1].data) == {"event", "gpt_result", "docs", "conversation_id"}


def test_search_stream_with_the_llm_down_ends_with_an_error_event(
    http: httpx.Client, server: ChatServer
) -> None:
    assert isinstance(server.llm, ScriptedLLM)
    server.llm.state = "down"
    try:
        events = parse_sse(http.post("/search/stream", json={"query": QUERY}).text)
    finally:
        server.llm.state = "up"
    assert events[-1].event == "error"
    assert events[-1].data["status"] == 503 and events[-1].data["dependency"] == "llm"


def test_search_stream_refuses_an_empty_query_before_streaming(http: httpx.Client) -> None:
    response = http.post("/search/stream", json={"query": "  "})
    assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["body", "query"]


def test_the_stream_events_are_a_one_of_in_the_openapi(http: httpx.Client) -> None:
    operation = http.get("/openapi.json").json()["paths"]["/search/stream"]["post"]
    schema = operation["responses"]["200"]["content"]["text/event-stream"]["schema"]
    events = {s["properties"]["event"]["const"] for s in schema["oneOf"]}
    assert events == {"sources", "token", "done", "error"}
    assert "$ref" not in str(schema)


def test_rating_in_the_query_string_form_with_no_body(http: httpx.Client, server: ChatServer) -> None:
    conversation_id = http.post("/search", json={"query": QUERY}).json()["conversation_id"]
    for params, rating in (
        ({"thread_id": conversation_id, "score": "1"}, "up"),
        ({"conversation_id": conversation_id, "score": "0"}, "down"),
        ({"thread_id": conversation_id, "score": "-1", "free_text": "לא מדויק"}, "down"),
        ({"thread_id": conversation_id}, None),
    ):
        response = http.post("/rating", params=params)
        assert response.status_code == 200, response.text
        stored = stored_message(server, conversation_id)
        assert stored is not None and stored["rating"] == rating
    # no free_text never erases the comment; no score withdraws the rating
    assert stored is not None and stored["comment"] == "לא מדויק"
    headers = {"Content-Type": "application/json"}
    empty = http.post("/rating", params={"thread_id": conversation_id, "score": "2"}, headers=headers)
    assert empty.status_code == 200 and empty.json()["like"] is True
    assert http.post("/rating", params={"thread_id": "no-such-id", "score": "1"}).status_code == 404
    nothing = http.post("/rating")
    assert nothing.status_code == 422 and "thread_id" in str(nothing.json()["detail"])


def test_clean_redis_history_deletes_conversations_and_keeps_the_config(
    http: httpx.Client, server: ChatServer
) -> None:
    config = http.post("/set_config", json=http.get("/get_config").json()).json()
    conversation_id = http.post("/search", json={"query": QUERY}).json()["conversation_id"]
    assert http.post("/rating", params={"thread_id": conversation_id, "score": "-1"}).status_code == 200
    session_id = http.post("/v1/sessions", json={}).json()["session_id"]
    turn = http.post(f"/v1/sessions/{session_id}/messages?stream=false", json={"question": QUERY})
    assert turn.status_code == 200, turn.text
    written = server.keys()
    assert any(":chat:session:" in k for k in written)
    cleaned = http.post("/clean_redis_history")
    assert cleaned.status_code == 200, cleaned.text
    assert cleaned.json()["sessions"] >= 1 and cleaned.json()["messages"] >= 2
    left = server.keys()
    assert not [k for k in left if ":chat:session:" in k or ":chat:message:" in k]
    assert stored_message(server, conversation_id) is None
    assert f"{server.prefix}:feedback:entry:{conversation_id}" in left  # what editors review stays
    assert http.get("/get_config").json() == config
    again = http.post("/clean_redis_history", json={})
    assert again.status_code == 200 and again.json() == {"sessions": 0, "messages": 0}


def test_the_three_pings_answer_with_status_detail_and_time(http: httpx.Client) -> None:
    for service in ("redis", "llm_manager", "es_docker"):
        response = http.get(f"/ping/{service}")
        assert response.status_code == 200, response.text
        body = response.json()
        assert set(body) == {"service", "status", "detail", "elapsed_ms"}
        assert body["service"] == service and body["status"] == "ok" and body["elapsed_ms"] >= 0


def test_pings_are_503_when_their_dependency_is_down(http: httpx.Client, server: ChatServer) -> None:
    assert isinstance(server.llm, ScriptedLLM)
    server.llm.state = "down"
    try:
        response = http.get("/ping/llm_manager")
    finally:
        server.llm.state = "up"
    assert response.status_code == 503 and response.json()["status"] == "down"
    assert "not answering" in response.json()["detail"]


def test_a_dead_redis_is_a_503_and_the_store_still_answers() -> None:
    with (
        chat_server(llm=ScriptedLLM(script), redis_url="redis://127.0.0.1:9/0") as dead,
        httpx.Client(base_url=dead.url, timeout=30) as client,
    ):
        response = client.get("/ping/redis")
        assert response.status_code == 503 and response.json()["status"] == "down"
        assert client.get("/ping/es_docker").status_code == 200


@pytest.mark.asyncio
async def test_the_http_retriever_reports_an_unreachable_store_as_down() -> None:
    retriever = HttpRetriever(base_url=f"http://127.0.0.1:{free_port()}", timeout_s=2)
    try:
        assert await retriever.ping_store() is False
    finally:
        await retriever.close()


def test_clean_history_needs_the_admin_scope_and_pings_the_chat_scope() -> None:
    with TestClient(chat_app(auth_settings())) as client:
        chat_key = {"Authorization": f"Bearer {KEYS['kzchatbot'][0]}"}
        assert client.post("/clean_redis_history").status_code == 401
        assert client.post("/clean_redis_history", headers=chat_key).status_code == 403
        assert client.get("/ping/redis").status_code == 401
        assert client.get("/ping/llm_manager", headers=chat_key).status_code == 200
        assert client.get("/ping/es_docker", headers=chat_key).status_code == 200
        basic = ("wiki", KEYS["kzchatbot"][0])  # $wgKZChatbotLlmApiUrl = https://wiki:<key>@host/
        assert client.get("/ping/llm_manager", auth=basic).status_code == 200


@pytest.mark.parametrize("page", ["/admin.html", "/index.html", "/batch-runner.html"])
def test_the_pages_are_self_contained_hebrew_and_hash_their_inline_code(
    http: httpx.Client, page: str
) -> None:
    response = http.get(page)
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/html")
    text = response.text
    assert '<html lang="he" dir="rtl">' in text
    assert not re.search(r"""<(script|link|img)[^>]+(src|href)="(?!data:)""", text), "it loads nothing"
    csp = response.headers["content-security-policy"]
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
    for kind in ("script", "style"):
        bodies = re.findall(rf"<{kind}>(.*?)</{kind}>", text, re.S)
        assert bodies
        for body in bodies:
            digest = base64.b64encode(hashlib.sha256(body.encode()).digest()).decode()
            assert f"'sha256-{digest}'" in csp
    calls = set(re.findall(r"""(?:api|fetch)\(\s*["'](/[a-z_/]+)""", text))
    assert calls and calls <= {f"/{p}" for p in PROXIED} | {"/get_config_metadata", "/ping/"}


def test_the_pages_need_the_admin_scope_and_send_browsers_to_sign_in() -> None:
    with TestClient(chat_app(auth_settings())) as client:
        anonymous = client.get("/admin.html")
        assert anonymous.status_code == 401 and 'action="/ui/signin"' in anonymous.text
        assert 'value="/admin.html"' in anonymous.text
        chat_key = {"Authorization": f"Bearer {KEYS['kzchatbot'][0]}"}
        assert client.get("/index.html", headers=chat_key).status_code == 401
        wiki = client.get("/batch-runner.html", auth=("wiki", KEYS["admin"][0]))
        assert wiki.status_code == 200 and "בדיקת אצווה" in wiki.text
        signed = client.post("/ui/signin", data={"key": KEYS["admin"][0], "next": "/admin.html"})
        assert signed.status_code == 200 and "הגדרות RAG" in signed.text
