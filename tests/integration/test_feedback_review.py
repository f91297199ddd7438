"""Feedback review over real HTTP and real Redis: ratings from the native API and Kol-Zchut's /rating
kept with their question, answer and cited pages, filtered, exported, and kept when chat history goes."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
import redis
from support.chat_fakes import ScriptedLLM
from support.chat_stack import ChatServer, chat_server

from ragbot.ports import ChatMessage

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

QUESTION = "מי זכאי לפטור ממס הכנסה?"


def script(messages: Sequence[ChatMessage]) -> str:
    return '=HYPERLINK("x") התשובה במקורות [1] וגם [2].'


@pytest.fixture(scope="module")
def server(redis_url: str) -> Iterator[ChatServer]:
    with chat_server(llm=ScriptedLLM(script), redis_url=redis_url, feedback_ttl_s=3600) as running:
        yield running


@pytest.fixture
def http(server: ChatServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=60) as client:
        yield client


def answer(http: httpx.Client, question: str = QUESTION) -> dict[str, Any]:
    session = http.post("/v1/sessions", json={}).json()
    response = http.post(
        f"/v1/sessions/{session['session_id']}/messages",
        json={"question": question},
        params={"stream": "false"},
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def test_ratings_are_listed_with_question_answer_and_cited_pages(
    http: httpx.Client, server: ChatServer
) -> None:
    started = datetime.now(UTC) - timedelta(seconds=1)
    down = answer(http)
    up = answer(http, "מה זה פטור ממס?")
    silent = answer(http, "שאלה בלי דירוג")
    assert (
        http.post(
            f"/v1/messages/{down['message_id']}/feedback", json={"rating": "down", "comment": "outdated"}
        ).status_code
        == 200
    )
    assert http.post(f"/v1/messages/{up['message_id']}/feedback", json={"rating": "up"}).status_code == 200
    kz = http.post("/search", json={"query": "פטור ממס לעיוורים"}).json()
    rated = http.post(
        "/rating", json={"conversation_id": kz["conversation_id"], "like": False, "free_text": "חסר"}
    )
    assert rated.status_code == 200

    listed = http.get("/v1/feedback", params={"since": started.isoformat()})
    assert listed.status_code == 200, listed.text
    body = listed.json()
    ids = [e["message_id"] for e in body["entries"]]
    assert ids == [kz["conversation_id"], up["message_id"], down["message_id"]]  # newest feedback first
    assert silent["message_id"] not in ids and body["truncated"] is False
    entry = body["entries"][2]
    assert (entry["rating"], entry["comment"], entry["question"], entry["channel"]) == (
        "down",
        "outdated",
        QUESTION,
        "api",
    )
    assert entry["answer"] == down["answer"]
    cited = [c["page_id"] for c in down["citations"]]
    assert [s["page_id"] for s in entry["sources"]] == list(dict.fromkeys(cited))
    first = next(c for c in down["citations"] if c["page_id"] == cited[0])
    assert entry["sources"][0]["title"] == first["title"] and entry["sources"][0]["url"] == first["url"]
    assert body["entries"][0]["channel"] == "kolzchut" and body["entries"][0]["comment"] == "חסר"
    worst = body["pages"][0]
    assert worst["down"] >= 1 and all(p["down"] <= worst["down"] for p in body["pages"])

    downs = http.get("/v1/feedback", params={"rating": "down", "since": started.isoformat()}).json()[
        "entries"
    ]
    assert {e["message_id"] for e in downs} == {down["message_id"], kz["conversation_id"]}
    by_page = http.get("/v1/feedback", params={"page": cited[0], "since": started.isoformat()}).json()[
        "entries"
    ]
    assert down["message_id"] in {e["message_id"] for e in by_page}
    assert all(cited[0] in [s["page_id"] for s in e["sources"]] for e in by_page)
    later = (datetime.now(UTC) + timedelta(minutes=1)).isoformat()
    assert http.get("/v1/feedback", params={"since": later}).json()["entries"] == []
    one = http.get("/v1/feedback", params={"since": started.isoformat(), "limit": 1}).json()
    assert len(one["entries"]) == 1 and one["truncated"] is True
    assert http.get("/v1/feedback", params={"rating": "meh"}).status_code == 422


def test_exports_as_csv_and_jsonl(http: httpx.Client) -> None:
    started = datetime.now(UTC) - timedelta(seconds=1)
    down = answer(http)
    http.post(f"/v1/messages/{down['message_id']}/feedback", json={"rating": "down", "comment": "-1 wrong"})
    params = {"since": started.isoformat()}

    exported = http.get("/v1/feedback", params={**params, "format": "csv"})
    assert exported.status_code == 200 and exported.headers["content-type"].startswith("text/csv")
    assert "attachment" in exported.headers["content-disposition"]
    rows = list(csv.DictReader(io.StringIO(exported.text.removeprefix("\ufeff"))))
    [row] = [r for r in rows if r["message_id"] == down["message_id"]]
    assert row["rating"] == "down" and row["question"] == QUESTION
    assert row["comment"] == "'-1 wrong" and row["answer"].startswith("'=HYPERLINK")  # no formulas
    assert row["source_page_ids"].split(" | ")[0] == str(down["citations"][0]["page_id"])
    assert row["source_urls"].startswith("https://www.kolzchut.org.il/")

    by_accept = http.get("/v1/feedback", params=params, headers={"Accept": "application/x-ndjson"})
    assert by_accept.headers["content-type"].startswith("application/x-ndjson")
    lines = [json.loads(line) for line in by_accept.text.splitlines()]
    assert down["message_id"] in {e["message_id"] for e in lines}
    assert http.get("/v1/feedback", params={**params, "format": "jsonl"}).text == by_accept.text


def test_feedback_outlives_chat_history_and_a_withdrawn_rating_leaves(
    http: httpx.Client, server: ChatServer
) -> None:
    started = datetime.now(UTC) - timedelta(seconds=1)
    kept = answer(http)
    gone = answer(http, "עוד שאלה")
    http.post(f"/v1/messages/{kept['message_id']}/feedback", json={"rating": "down"})
    http.post(f"/v1/messages/{gone['message_id']}/feedback", json={"rating": "up"})
    http.post(f"/v1/messages/{gone['message_id']}/feedback", json={"rating": None})
    client = redis.Redis.from_url(server.redis_url)
    try:  # what /clean_redis_history deletes: every session and message
        history = [
            *client.scan_iter(f"{server.prefix}:chat:session:*"),
            *client.scan_iter(f"{server.prefix}:chat:message:*"),
        ]
        assert history
        client.delete(*history)
        ttl = client.ttl(f"{server.prefix}:feedback:entry:{kept['message_id']}")
        assert 3500 < int(ttl) <= 3600  # feedback_ttl_s, not the message's
    finally:
        client.close()
    ids = [
        e["message_id"]
        for e in http.get("/v1/feedback", params={"since": started.isoformat()}).json()["entries"]
    ]
    assert kept["message_id"] in ids and gone["message_id"] not in ids
