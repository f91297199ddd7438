"""The Kol-Zchut widget endpoints (what the KZChatbot React app calls directly) over real HTTP, with real
Redis and real retrieval over the sample store; the LLM is a scripted fake. Every error code, the
uuid lifecycle, the daily allowance and CORS."""

from __future__ import annotations

import json
import re
import uuid as uuidlib
from collections.abc import AsyncIterator, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
import pytest_asyncio
import redis
import redis.asyncio as aioredis
from support.chat_fakes import ScriptedLLM
from support.chat_stack import ChatServer, chat_server

from ragbot.chat.widget import WidgetUsers
from ragbot.ports import ChatMessage

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

QUESTION = "מי זכאי לפטור ממס הכנסה?"
ANSWER = "לפי המקורות [1]."
DAILY = 3
ORIGIN = "https://www.kolzchut.org.il"
REFERRER = "https://www.kolzchut.org.il/he/פטור_ממס_הכנסה"
HEBREW = re.compile("[\u05d0-\u05ea]")
RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")


def script(messages: Sequence[ChatMessage]) -> str:
    return ANSWER if '<document id="1"' in messages[-1].content else "אין לי תשובה."


@pytest.fixture(scope="module")
def server(redis_url: str) -> Iterator[ChatServer]:
    with chat_server(
        llm=ScriptedLLM(script),
        redis_url=redis_url,
        max_question_chars=200,
        widget_daily_questions=DAILY,
        widget_banned_words=["ספאם", "מילה אסורה", "Casino"],
        widget_feedback_chars=50,
        widget_cors_origins=[ORIGIN],
    ) as running:
        yield running


@pytest.fixture
def http(server: ChatServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=60) as client:
        yield client


def new_uuid(http: httpx.Client) -> str:
    response = http.get("/kzchatbot/v0/status")
    assert response.status_code == 200, response.text
    value: str = response.json()["uuid"]
    return value


def permitted(http: httpx.Client, uuid: str) -> int:
    body = http.get("/kzchatbot/v0/status", params={"uuid": uuid}).json()
    assert body["uuid"] == uuid
    value: int = body["questionsPermitted"]
    return value


def ask(http: httpx.Client, uuid: str, text: str = QUESTION, **extra: Any) -> httpx.Response:
    return http.post(
        "/kzchatbot/v0/question", json={"text": text, "uuid": uuid, "referrer": REFERRER, **extra}
    )


def stored(server: ChatServer, key: str) -> bytes | None:
    client = redis.Redis.from_url(server.redis_url)
    try:
        value = client.get(f"{server.prefix}:{key}")
    finally:
        client.close()
    return value if isinstance(value, bytes) else None


def assert_message(response: httpx.Response, status: int) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"message"} and HEBREW.search(body["message"]), body
    message: str = body["message"]
    return message


# -- status --------------------------------------------------------------------------------------------


def test_status_without_a_uuid_issues_one(http: httpx.Client, server: ChatServer) -> None:
    response = http.get("/kzchatbot/v0/status")
    assert response.status_code == 200
    assert response.headers["cache-control"] == "no-store"
    body = response.json()
    assert set(body) == {"uuid", "chatbotIsShown", "questionsPermitted", "cookieExpiry"}
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}", body["uuid"])
    assert body["chatbotIsShown"] is True and body["questionsPermitted"] == DAILY
    assert RFC3339.match(body["cookieExpiry"]), body["cookieExpiry"]
    expiry = datetime.fromisoformat(body["cookieExpiry"].replace("Z", "+00:00"))
    expected = datetime.now(UTC) + timedelta(days=server.settings.widget_cookie_days)
    assert abs((expiry - expected).total_seconds()) < 60
    client = redis.Redis.from_url(server.redis_url)
    try:
        ttl = client.ttl(f"{server.prefix}:chat:widget:user:{body['uuid']}")
    finally:
        client.close()
    assert abs(int(ttl) - server.settings.widget_cookie_days * 86400) < 60
    assert new_uuid(http) != body["uuid"]


def test_status_with_a_uuid_keeps_it_and_an_unknown_one_is_replaced(http: httpx.Client) -> None:
    first = http.get("/kzchatbot/v0/status").json()
    again = http.get("/kzchatbot/v0/status", params={"uuid": first["uuid"]}).json()
    assert again == first
    for unknown in ("00000000-0000-4000-8000-000000000000", "not a uuid: *"):
        replaced = http.get("/kzchatbot/v0/status", params={"uuid": unknown})
        assert replaced.status_code == 200
        assert replaced.json()["uuid"] not in (unknown, first["uuid"])
        assert replaced.json()["questionsPermitted"] == DAILY


# -- question ------------------------------------------------------------------------------------------


def test_question_answers_with_retrieval_and_a_unique_conversation_id(
    http: httpx.Client, server: ChatServer
) -> None:
    uuid = new_uuid(http)
    first = ask(http, uuid)
    assert first.status_code == 200, first.text
    body = first.json()
    assert set(body) == {"llmResult", "docs", "conversationId"}
    assert body["llmResult"] == ANSWER
    assert body["docs"] and all(set(d) == {"title", "url"} for d in body["docs"])
    assert all(d["title"] and d["url"] for d in body["docs"])
    assert len({d["url"] for d in body["docs"]}) == len(body["docs"])
    second = ask(http, uuid).json()
    assert second["conversationId"] != body["conversationId"]
    assert permitted(http, uuid) == DAILY - 2
    record = stored(server, f"chat:message:{body['conversationId']}")
    assert record is not None
    assert f'"asked_from":"{REFERRER}"'.encode() in record and b'"forwarded_for":"127.0.0.1"' in record
    # the model saw the retrieved paragraphs, numbered, as data
    assert isinstance(server.llm, ScriptedLLM)
    assert '<document id="1"' in server.llm.calls[-1].messages[-1].content


def test_question_passes_x_forwarded_for_on(http: httpx.Client, server: ChatServer) -> None:
    uuid = new_uuid(http)
    response = http.post(
        "/kzchatbot/v0/question",
        json={"text": QUESTION, "uuid": uuid},
        headers={"X-Forwarded-For": "203.0.113.7, 10.0.0.1"},
    )
    assert response.status_code == 200, response.text
    record = stored(server, f"chat:message:{response.json()['conversationId']}")
    assert record is not None and b'"forwarded_for":"203.0.113.7"' in record


def test_unknown_uuid_is_404(http: httpx.Client) -> None:
    assert_message(ask(http, "00000000-0000-4000-8000-000000000000"), 404)
    assert_message(ask(http, "../../etc"), 404)


def test_question_over_the_length_limit_is_413_and_costs_nothing(
    http: httpx.Client, server: ChatServer
) -> None:
    uuid = new_uuid(http)
    limit = server.settings.max_question_chars
    message = assert_message(ask(http, uuid, "א" * (limit + 1)), 413)
    assert str(limit) in message
    assert ask(http, uuid, "  " + "א" * (limit - 1) + "?  ").status_code == 200  # stripped, at the limit
    assert permitted(http, uuid) == DAILY - 1


@pytest.mark.parametrize(
    "text",
    ["מה זה ספאם?", "ובספאם יש זכויות?", "יש פה מילה אסורה אחת", "CASINO bonus", "מה זה סְפָּאם"],
)
def test_banned_words_are_403_and_cost_nothing(http: httpx.Client, text: str) -> None:
    uuid = new_uuid(http)
    assert_message(ask(http, uuid, text), 403)
    assert permitted(http, uuid) == DAILY


def test_words_that_only_contain_a_banned_word_pass(http: httpx.Client) -> None:
    uuid = new_uuid(http)
    response = ask(http, uuid, "מה עם ספאמר ומילה לא אסורה בקזינו casinos?")
    assert response.status_code == 200, response.text


def test_bad_bodies_are_400_in_hebrew(http: httpx.Client) -> None:
    uuid = new_uuid(http)
    assert_message(ask(http, uuid, "   "), 400)
    assert_message(http.post("/kzchatbot/v0/question", json={"uuid": uuid}), 400)
    assert_message(http.post("/kzchatbot/v0/question", json={"text": QUESTION}), 400)
    assert_message(
        http.post(
            "/kzchatbot/v0/question", content=b"{not json", headers={"Content-Type": "application/json"}
        ),
        400,
    )
    # Bytes that are not UTF-8: FastAPI's own 400 ("error parsing the body"), answered in the widget's body.
    invalid = {"content": b"\xff", "headers": {"Content-Type": "application/json"}}
    assert_message(http.post("/kzchatbot/v0/question", **invalid), 400)  # type: ignore[arg-type]
    assert_translated(http.post("/kzchatbot/v0/rate", **invalid), 400)  # type: ignore[arg-type]
    assert permitted(http, uuid) == DAILY


def test_the_daily_limit_is_429(http: httpx.Client, server: ChatServer) -> None:
    uuid = new_uuid(http)
    for left in range(DAILY, 0, -1):
        assert permitted(http, uuid) == left
        assert ask(http, uuid).status_code == 200
    assert permitted(http, uuid) == 0
    message = assert_message(ask(http, uuid), 429)
    assert "היום" in message
    assert_message(ask(http, uuid), 429)
    assert permitted(http, uuid) == 0
    assert ask(http, new_uuid(http)).status_code == 200  # other users keep theirs


def test_llm_down_is_503_and_gives_the_question_back(http: httpx.Client, server: ChatServer) -> None:
    uuid = new_uuid(http)
    assert isinstance(server.llm, ScriptedLLM)
    server.llm.state = "down"
    try:
        response = ask(http, uuid)
    finally:
        server.llm.state = "up"
    assert_message(response, 503)
    assert permitted(http, uuid) == DAILY


# -- rate ----------------------------------------------------------------------------------------------


def assert_translated(response: httpx.Response, status: int) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"messageTranslations"} and set(body["messageTranslations"]) == {"he"}
    assert HEBREW.search(body["messageTranslations"]["he"])


def record(server: ChatServer, answer_id: str) -> dict[str, Any]:
    raw = stored(server, f"chat:message:{answer_id}")
    assert raw is not None
    value: dict[str, Any] = json.loads(raw)
    return value


def test_rate_then_rate_again_with_text_last_write_wins(http: httpx.Client, server: ChatServer) -> None:
    answer_id = ask(http, new_uuid(http)).json()["conversationId"]
    liked = http.post("/kzchatbot/v0/rate", json={"answerId": answer_id, "like": True})
    assert liked.status_code == 200, liked.text
    assert liked.json() == {"answerId": answer_id, "like": True, "text": None}
    assert record(server, answer_id)["rating"] == "up"
    again = http.post("/kzchatbot/v0/rate", json={"answerId": answer_id, "like": False, "text": "לא עזר"})
    assert again.json() == {"answerId": answer_id, "like": False, "text": "לא עזר"}
    saved = record(server, answer_id)
    assert saved["rating"] == "down" and saved["comment"] == "לא עזר" and saved["answer"] == ANSWER
    [entry] = [e for e in http.get("/v1/feedback").json()["entries"] if e["message_id"] == answer_id]
    assert (entry["rating"], entry["comment"], entry["answer"]) == ("down", "לא עזר", ANSWER)
    # a field left out keeps its value; one sent replaces it
    text_only = http.post("/kzchatbot/v0/rate", json={"answerId": answer_id, "text": "התשובה לא ברורה"})
    assert text_only.json() == {"answerId": answer_id, "like": False, "text": "התשובה לא ברורה"}
    # a follow-up text whose like is null (the widget lost its state) keeps the like; a null text
    # keeps the text
    follow_up = http.post("/kzchatbot/v0/rate", json={"answerId": answer_id, "like": None, "text": "עוד"})
    assert follow_up.json() == {"answerId": answer_id, "like": False, "text": "עוד"}
    kept = http.post("/kzchatbot/v0/rate", json={"answerId": answer_id, "like": False, "text": None})
    assert kept.json() == {"answerId": answer_id, "like": False, "text": "עוד"}
    # the widget's own withdraw (Rate.tsx un-press): {like: null, answerId}
    withdrawn = http.post("/kzchatbot/v0/rate", json={"conversation_id": answer_id, "like": None})
    assert withdrawn.json() == {"answerId": answer_id, "like": None, "text": "עוד"}
    assert record(server, answer_id)["rating"] is None


def test_rate_errors_are_message_translations(http: httpx.Client, server: ChatServer) -> None:
    assert_translated(http.post("/kzchatbot/v0/rate", json={"answerId": "no-such-answer", "like": True}), 404)
    assert_translated(http.post("/kzchatbot/v0/rate", json={"answerId": "no-such-answer"}), 404)
    assert_translated(http.post("/kzchatbot/v0/rate", json={"like": True}), 400)
    assert_translated(http.post("/kzchatbot/v0/rate", json={"answerId": "x", "like": "maybe"}), 400)
    answer_id = ask(http, new_uuid(http)).json()["conversationId"]
    too_long = "א" * (server.settings.widget_feedback_chars + 1)
    assert_translated(http.post("/kzchatbot/v0/rate", json={"answerId": answer_id, "text": too_long}), 400)
    assert record(server, answer_id)["comment"] is None


# -- CORS ----------------------------------------------------------------------------------------------


def test_cors_allows_the_configured_origin_on_the_widget_routes_only(http: httpx.Client) -> None:
    preflight = http.options(
        "/kzchatbot/v0/question",
        headers={
            "Origin": ORIGIN,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type",
        },
    )
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == ORIGIN
    assert "POST" in preflight.headers["access-control-allow-methods"]
    status = http.get("/kzchatbot/v0/status", headers={"Origin": ORIGIN})
    assert status.headers["access-control-allow-origin"] == ORIGIN
    refused = http.options(
        "/kzchatbot/v0/question",
        headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"},
    )
    assert refused.status_code == 400 and "access-control-allow-origin" not in refused.headers
    other = http.get("/kzchatbot/v0/status", headers={"Origin": "https://evil.example"})
    assert other.status_code == 200 and "access-control-allow-origin" not in other.headers
    elsewhere = http.get("/v1/models", headers={"Origin": ORIGIN})
    assert "access-control-allow-origin" not in elsewhere.headers


# -- the user store on its own (real Redis, a clock we move) -----------------------------------------


@pytest_asyncio.fixture
async def users_client(redis_url: str) -> AsyncIterator[tuple[aioredis.Redis, str]]:
    prefix = f"test-widget-{uuidlib.uuid4().hex[:12]}"
    client = aioredis.Redis.from_url(redis_url)
    try:
        yield client, prefix
    finally:
        keys = [k async for k in client.scan_iter(f"{prefix}:*")]
        if keys:
            await client.delete(*keys)
        await client.aclose()


async def test_the_allowance_resets_at_midnight_in_the_configured_zone(
    users_client: tuple[aioredis.Redis, str],
) -> None:
    client, prefix = users_client
    # 21:30 UTC on 1 March is 23:30 in Jerusalem; 22:30 UTC is already 2 March there.
    now = [datetime(2026, 3, 1, 21, 30, tzinfo=UTC)]
    users = WidgetUsers(
        client=client,
        prefix=prefix,
        daily_questions=2,
        cookie_days=30,
        shown_percent=100,
        timezone="Asia/Jerusalem",
        clock=lambda: now[0],
    )
    user = await users.create()
    assert user.cookie_expiry == "2026-03-31T21:30:00Z"
    assert await users.take_question(user.uuid) is not None
    day = await users.take_question(user.uuid)
    assert day is not None and day.isoformat() == "2026-03-01"
    assert await users.take_question(user.uuid) is None
    assert await users.questions_permitted(user.uuid) == 0
    await users.give_back(user.uuid, day)
    assert await users.questions_permitted(user.uuid) == 1
    now[0] = datetime(2026, 3, 1, 22, 30, tzinfo=UTC)
    assert users.today().isoformat() == "2026-03-02"
    assert await users.questions_permitted(user.uuid) == 2


async def test_the_rollout_percentage_decides_who_sees_the_chatbot(
    users_client: tuple[aioredis.Redis, str],
) -> None:
    client, prefix = users_client

    def users(percent: int) -> WidgetUsers:
        return WidgetUsers(
            client=client,
            prefix=prefix,
            daily_questions=5,
            cookie_days=1,
            shown_percent=percent,
            timezone="UTC",
        )

    hidden = [(await users(0).create()).shown for _ in range(20)]
    shown = [(await users(100).create()).shown for _ in range(20)]
    half = [(await users(50).create()).shown for _ in range(200)]
    assert not any(hidden) and all(shown)
    assert 40 < sum(half) < 160
    first = await users(0).create()
    kept = await users(100).get(first.uuid)
    assert kept is not None and kept.shown is False  # drawn once, at creation
