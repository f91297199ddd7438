"""The chat service's own API over real HTTP, with real Redis and real retrieval (sample pages embedded
with multilingual-e5-small); the LLM is a scripted fake, so these test plumbing, not answer quality."""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from support.chat_fakes import ScriptedLLM, SSEEvent, parse_sse
from support.chat_stack import ChatServer, chat_server

from ragbot.cli import chat as cli_chat
from ragbot.ports import ChatMessage

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

QUESTION = "מי זכאי לפטור ממס הכנסה?"


def script(messages: Sequence[ChatMessage]) -> str:
    last = messages[-1].content
    if "שאילתה עצמאית" in last or "Standalone query" in last:
        return "פטור ממס הכנסה לעיוורים"
    return "התשובה במקורות [1] וגם [2]."


@pytest.fixture(scope="module")
def server(redis_url: str) -> Iterator[ChatServer]:
    with chat_server(llm=ScriptedLLM(script), redis_url=redis_url) as running:
        yield running


@pytest.fixture
def http(server: ChatServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=60) as client:
        yield client


def new_session(http: httpx.Client, **body: Any) -> dict[str, Any]:
    response = http.post("/v1/sessions", json=body)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


def ask(
    http: httpx.Client, session_id: str, question: str, **params: Any
) -> tuple[httpx.Response, list[SSEEvent]]:
    response = http.post(f"/v1/sessions/{session_id}/messages", json={"question": question}, params=params)
    return response, parse_sse(response.text)


def test_sessions_are_created_shown_and_unknown_ones_are_404(http: httpx.Client, server: ChatServer) -> None:
    created = new_session(http)
    assert created["mode"] == "grounded" and created["language"] == "auto"
    assert created["expires_in_s"] == server.settings.session_ttl_s
    shown = http.get(f"/v1/sessions/{created['session_id']}").json()
    assert shown["turns"] == [] and shown["session_id"] == created["session_id"]
    assert http.get("/v1/sessions/nope").status_code == 404
    assert http.post("/v1/sessions/nope/messages", json={"question": "hi"}).status_code == 404
    assert new_session(http, mode="strict", language="he")["mode"] == "strict"
    assert http.post("/v1/sessions", json={"mode": "yolo"}).status_code == 422


def test_a_streamed_answer_sends_sources_tokens_then_done(http: httpx.Client) -> None:
    session = new_session(http)
    response, events = ask(http, session["session_id"], QUESTION)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["x-accel-buffering"] == "no"
    assert response.headers["cache-control"] == "no-cache"
    names = [e.event for e in events]
    assert names[0] == "sources" and names[-1] == "done" and set(names[1:-1]) == {"token"}
    sources = events[0].data["sources"]
    assert sources and {"title", "url", "page_id", "paragraph", "score", "confidence_pct"} <= set(sources[0])
    assert all(s["url"].startswith("https://www.kolzchut.org.il/") for s in sources)
    done = events[-1].data
    assert "".join(e.data["text"] for e in events[1:-1]) == done["answer"]
    assert [c["index"] for c in done["citations"]] == [1, 2]
    assert done["citations"][0]["doc_id"] == sources[0]["doc_id"]
    assert [s["index"] for s in done["retrieved_not_cited"]] == [s["index"] for s in sources[2:]]
    assert done["usage"]["completion_tokens"] > 0 and done["timings_ms"]["ttft_ms"] > 0
    assert done["message_id"] == events[0].data["message_id"]
    turns = http.get(f"/v1/sessions/{session['session_id']}").json()["turns"]
    assert [t["message_id"] for t in turns] == [done["message_id"]] and turns[0]["answer"] == done["answer"]


def test_stream_false_returns_the_same_as_json(http: httpx.Client) -> None:
    session = new_session(http)
    response = http.post(
        f"/v1/sessions/{session['session_id']}/messages",
        json={"question": QUESTION},
        params={"stream": "false"},
    )
    assert response.status_code == 200 and response.headers["content-type"] == "application/json"
    body = response.json()
    assert body["answer"] == "התשובה במקורות [1] וגם [2]." and body["language"] == "he"
    assert [c["index"] for c in body["citations"]] == [1, 2] and body["sources"]
    assert body["error"] is None and body["abstained"] is False


def test_a_follow_up_is_rewritten_and_the_rewrite_is_in_the_debug_data(http: httpx.Client) -> None:
    session = new_session(http)
    ask(http, session["session_id"], QUESTION)
    _, events = ask(http, session["session_id"], "ומה לגבי עיוורים?", debug="true")
    sources = events[0].data
    assert sources["rewritten_question"] == "פטור ממס הכנסה לעיוורים"
    debug = sources["debug"]
    assert debug["rewrite"]["original"] == "ומה לגבי עיוורים?" and debug["rewrite"]["time_ms"] >= 0
    assert debug["retrieval"]["query"] == "פטור ממס הכנסה לעיוורים"
    assert "rewrite_ms" in events[-1].data["timings_ms"]
    turns = http.get(f"/v1/sessions/{session['session_id']}").json()["turns"]
    assert turns[-1]["rewritten_question"] == "פטור ממס הכנסה לעיוורים"


def test_feedback_is_stored_replaced_and_withdrawn(http: httpx.Client, server: ChatServer) -> None:
    session = new_session(http)
    _, events = ask(http, session["session_id"], QUESTION)
    message_id = events[-1].data["message_id"]
    up = http.post(f"/v1/messages/{message_id}/feedback", json={"rating": "up", "comment": "clear"})
    assert up.status_code == 200 and up.json() == {
        "message_id": message_id,
        "rating": "up",
        "comment": "clear",
    }
    withdrawn = http.post(f"/v1/messages/{message_id}/feedback", json={"rating": None})
    assert withdrawn.json()["rating"] is None
    assert http.post("/v1/messages/unknown/feedback", json={"rating": "down"}).status_code == 404
    bad = http.post(f"/v1/messages/{message_id}/feedback", json={"rating": "meh"})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"][-1] == "rating"
    client = redis.Redis.from_url(server.redis_url)
    try:
        assert client.ttl(f"{server.prefix}:chat:message:{message_id}") > 0
    finally:
        client.close()


def test_bad_questions_are_refused_naming_the_field(http: httpx.Client, server: ChatServer) -> None:
    session = new_session(http)
    for question in ("", "   ", "x" * (server.settings.max_question_chars + 1)):
        response = http.post(f"/v1/sessions/{session['session_id']}/messages", json={"question": question})
        assert response.status_code == 422, response.text
        assert response.json()["detail"][0]["loc"] == ["body", "question"]
    missing = http.post(f"/v1/sessions/{session['session_id']}/messages", json={})
    assert missing.status_code == 422 and missing.json()["detail"][0]["loc"][-1] == "question"


def test_llm_down_still_sends_the_sources_then_an_error(http: httpx.Client, server: ChatServer) -> None:
    assert isinstance(server.llm, ScriptedLLM)
    session = new_session(http)
    server.llm.state = "down"
    try:
        _, events = ask(http, session["session_id"], QUESTION)
        as_json = http.post(
            f"/v1/sessions/{session['session_id']}/messages",
            json={"question": QUESTION},
            params={"stream": "false"},
        )
    finally:
        server.llm.state = "up"
    assert [e.event for e in events] == ["sources", "error"]
    assert events[0].data["sources"]
    assert events[1].data["dependency"] == "llm" and "down" in events[1].data["message"]
    assert as_json.status_code == 503
    body = as_json.json()
    assert body["sources"] and body["error"]["dependency"] == "llm" and "down" in body["detail"]
    assert http.get(f"/v1/sessions/{session['session_id']}").json()["turns"] == []


def test_metrics_count_answers_ttft_tokens_and_feedback(http: httpx.Client) -> None:
    session = new_session(http)
    _, events = ask(http, session["session_id"], QUESTION)
    http.post(f"/v1/messages/{events[-1].data['message_id']}/feedback", json={"rating": "down"})
    text = http.get("/metrics").text
    for name in (
        'ragbot_chat_time_to_first_token_seconds_count{channel="api",mode="grounded"}',
        'ragbot_llm_time_to_first_token_seconds_count{backend="fake"}',
        'ragbot_llm_tokens_per_second_count{backend="fake"}',
        'ragbot_chat_answers_total{channel="api",mode="grounded",outcome="answered"}',
        'ragbot_chat_feedback_total{channel="api",rating="down"}',
    ):
        assert name in text, name
    assert "ragbot_chat_abstentions_total" in text and "ragbot_llm_errors_total" in text


def test_health_and_readiness(http: httpx.Client) -> None:
    assert http.get("/healthz").json()["status"] == "ok"
    ready = http.get("/readyz")
    assert ready.status_code == 200 and ready.json()["checks"] == {
        "redis": True,
        "llm": True,
        "retriever": True,
    }


def test_strict_mode_refuses_without_calling_the_llm_when_nothing_is_relevant(redis_url: str) -> None:
    llm = ScriptedLLM(script)
    with (
        chat_server(llm=llm, redis_url=redis_url, relevance_threshold=0.99) as running,
        httpx.Client(base_url=running.url, timeout=60) as http,
    ):
        session = new_session(http, mode="strict")
        _, events = ask(http, session["session_id"], "What is the capital of France?")
    assert [e.event for e in events] == ["sources", "token", "done"]
    assert events[0].data["sources"] == [] and events[-1].data["abstained"] is True
    assert (
        events[-1].data["answer"] == "I could not find an answer to this question in the available sources."
    )
    assert llm.calls == []


def test_turns_are_capped_and_sessions_expire(redis_url: str) -> None:
    with (
        chat_server(llm=ScriptedLLM(script), redis_url=redis_url, max_turns=2, session_ttl_s=60) as running,
        httpx.Client(base_url=running.url, timeout=60) as http,
    ):
        session_id = new_session(http)["session_id"]
        for n in range(3):
            ask(http, session_id, f"{QUESTION} {n}")
        turns = http.get(f"/v1/sessions/{session_id}").json()["turns"]
        assert [t["question"] for t in turns] == [f"{QUESTION} 1", f"{QUESTION} 2"]
        client = redis.Redis.from_url(redis_url)
        try:
            for key in (
                f"{running.prefix}:chat:session:{session_id}",
                f"{running.prefix}:chat:session:{session_id}:turns",
            ):
                assert 0 < client.ttl(key) <= 60
            client.delete(f"{running.prefix}:chat:session:{session_id}")
        finally:
            client.close()
        assert http.get(f"/v1/sessions/{session_id}").status_code == 404


def test_a_client_that_disconnects_stops_generation(redis_url: str) -> None:
    llm = ScriptedLLM(lambda _: " ".join(["word"] * 400), delay_s=0.02)
    with chat_server(llm=llm, redis_url=redis_url) as running:
        with httpx.Client(base_url=running.url, timeout=60) as http:
            session_id = new_session(http)["session_id"]
            with http.stream(
                "POST", f"/v1/sessions/{session_id}/messages", json={"question": QUESTION}
            ) as response:
                for line in response.iter_lines():
                    if line.startswith("event: token"):
                        break
        deadline = time.monotonic() + 10
        while not llm.calls[-1].closed_early and time.monotonic() < deadline:
            time.sleep(0.05)
        assert llm.calls[-1].closed_early is True
        assert llm.calls[-1].pieces_sent < 400
        with httpx.Client(base_url=running.url, timeout=60) as http:
            assert http.get(f"/v1/sessions/{session_id}").json()["turns"] == []


def test_twenty_concurrent_streams_complete_without_errors_or_interleaving(redis_url: str) -> None:
    def marker_script(messages: Sequence[ChatMessage]) -> str:
        marker = messages[-1].content.rsplit("#", 1)[-1].strip()
        return " ".join(f"{marker}-{i}" for i in range(25))

    llm = ScriptedLLM(marker_script, delay_s=0.005)
    results: dict[int, list[SSEEvent]] = {}
    failures: list[str] = []
    with chat_server(llm=llm, redis_url=redis_url) as running:

        def one(n: int) -> None:
            try:
                with httpx.Client(base_url=running.url, timeout=120) as http:
                    session_id = new_session(http)["session_id"]
                    results[n] = ask(http, session_id, f"{QUESTION} #s{n}")[1]
            except Exception as exc:  # collected and reported below
                failures.append(repr(exc))

        threads = [threading.Thread(target=one, args=(n,)) for n in range(20)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
    assert not failures
    assert len(results) == 20
    for n, events in results.items():
        assert [e.event for e in events if e.event != "token"] == ["sources", "done"], n
        tokens = "".join(e.data["text"] for e in events if e.event == "token")
        assert tokens == events[-1].data["answer"] == " ".join(f"s{n}-{i}" for i in range(25))


def test_the_cli_streams_answers_and_continues_its_session(server: ChatServer, tmp_path: Path) -> None:
    state = tmp_path / "sessions.json"
    out = io.StringIO()
    with httpx.Client(base_url=server.url, timeout=60) as http:
        session_id = cli_chat.open_session(
            client=http,
            url=server.url,
            state_file=state,
            session=None,
            new=False,
            mode="strict",
            language=None,
            out=out,
        )
        status = cli_chat.chat_loop(
            client=http,
            session_id=session_id,
            mode=None,
            lines=[QUESTION, "", "exit", "never asked"],
            out=out,
        )
        again = io.StringIO()
        same = cli_chat.open_session(
            client=http,
            url=server.url,
            state_file=state,
            session=None,
            new=False,
            mode=None,
            language=None,
            out=again,
        )
        turns = http.get(f"/v1/sessions/{session_id}").json()["turns"]
    text = out.getvalue()
    assert status == 0 and f"new session {session_id} (mode strict)" in text
    assert (
        "bot> התשובה במקורות [1] וגם [2]." in text and "Sources:\n  [1] " in text and text.endswith("bye\n")
    )
    assert same == session_id and "continuing session" in again.getvalue()
    assert [t["question"] for t in turns] == [QUESTION]
