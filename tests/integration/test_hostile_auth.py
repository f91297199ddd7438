"""Issue 28's hostile callers against apps with keys configured and their sessions in the real Redis: the open
chat page's guest and what it is refused (``support.hostile_cases.GUEST_DENIED``), sessions that end when
signed out or ended by key, cookies another service (or port) refuses, and conversations only their
owner can see."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry
from support.auth import KEYS, auth_settings, chat_app, ingest_app
from support.hostile_cases import GUEST_DENIED, SESSION, GuestDenied

from ragbot.http.auth import CSRF_COOKIE, CSRF_HEADER, SESSION_COOKIE, install_auth
from ragbot.http.limits import RateLimiter
from ragbot.settings import HttpSettings, RateLimitSettings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

CHAT = "https://chat.test"
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}


def bearer(name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[name][0]}"}


@pytest.fixture
def chat(redis_url: str) -> Iterator[TestClient]:
    with TestClient(chat_app(auth_settings(), redis_url=redis_url), base_url=CHAT) as client:
        yield client


def guest(client: TestClient) -> dict[str, str]:
    """Become the open chat page's guest; the CSRF header its writes carry."""
    page = client.get("/")
    assert page.status_code == 200 and SESSION_COOKIE in client.cookies, page.text[:300]
    return {CSRF_HEADER: client.cookies[CSRF_COOKIE]}


def open_and_ask(client: TestClient, headers: dict[str, str]) -> tuple[str, str]:
    """A conversation with one answered question: (session id, message id)."""
    opened = client.post("/v1/sessions", json={}, headers=headers)
    assert opened.status_code == 201, opened.text
    session_id = opened.json()["session_id"]
    asked = client.post(
        f"/v1/sessions/{session_id}/messages?stream=false", json={"question": "leave?"}, headers=headers
    )
    assert asked.status_code == 200, asked.text
    return session_id, asked.json()["message_id"]


def send(client: TestClient, case: GuestDenied, headers: dict[str, str], session_id: str) -> Any:
    path = case.path.replace(SESSION, session_id)
    extra = MCP_HEADERS if case.path == "/mcp" else {}
    return client.request(case.method, path, json=case.body, headers={**headers, **extra})


# -- 1. guests -------------------------------------------------------------------------------------


def test_a_guest_asks_reads_and_rates_in_its_own_conversation(chat: TestClient) -> None:
    csrf = guest(chat)
    session_id, message_id = open_and_ask(chat, csrf)
    view = chat.get(f"/v1/sessions/{session_id}")
    assert view.status_code == 200 and view.json()["turns"][0]["message_id"] == message_id
    rated = chat.post(f"/v1/messages/{message_id}/feedback", json={"rating": "up"}, headers=csrf)
    assert rated.status_code == 200, rated.text
    streamed = chat.post(f"/v1/sessions/{session_id}/messages", json={"question": "more?"}, headers=csrf)
    assert streamed.status_code == 200 and "event: done" in streamed.text
    assert "debug" not in streamed.text.split("event: token", 1)[0], "no debug in a guest's sources"


def test_a_guest_that_comes_back_keeps_its_session_and_conversations(chat: TestClient) -> None:
    csrf = guest(chat)
    session_id, _ = open_and_ask(chat, csrf)
    cookie = chat.cookies[SESSION_COOKIE]
    assert chat.get("/").status_code == 200
    assert chat.cookies[SESSION_COOKIE] == cookie, "the page keeps a live guest session"
    assert chat.get(f"/v1/sessions/{session_id}").status_code == 200


@pytest.mark.parametrize("case", GUEST_DENIED, ids=[c.name for c in GUEST_DENIED])
def test_a_guest_is_refused_everything_else(chat: TestClient, case: GuestDenied) -> None:
    csrf = guest(chat)
    session_id, _ = open_and_ask(chat, csrf)
    response = send(chat, case, csrf, session_id)
    assert response.status_code == case.expect, (case.name, response.status_code, response.text[:300])
    if case.expect == 403 and "json" in response.headers.get("content-type", ""):
        assert "guest" in response.text or "debug" in response.text, response.text[:300]
    assert "system_prompt" not in response.text and "pwned" not in response.text


def test_nothing_a_guest_reads_shows_prompts_or_settings(chat: TestClient) -> None:
    csrf = guest(chat)
    session_id, _ = open_and_ask(chat, csrf)
    config = chat.get("/get_config", headers=bearer("admin")).json()
    secrets = [config["system_prompt"][:60], config["user_prompt"][:60]]
    readable = [
        chat.get(f"/v1/sessions/{session_id}").text,
        chat.post(f"/v1/sessions/{session_id}/messages", json={"question": "x?"}, headers=csrf).text,
    ]
    for text in readable:
        assert all(s not in text for s in secrets), text[:500]
        assert all(f'"{key}"' not in text for key in ("debug", "retrieval", "temperature", "system_prompt"))


def test_guests_are_counted_per_address(redis_url: str) -> None:
    app = chat_app(auth_settings(), redis_url=redis_url)
    limits = RateLimitSettings(enabled=True, guest_per_address="2/minute")
    app.state.rate_limiter = RateLimiter(
        settings=limits, redis_url="memory://", key_prefix="t", registry=CollectorRegistry()
    )
    with TestClient(app, base_url=CHAT) as client:
        csrf = guest(client)
        statuses = [client.post("/v1/sessions", json={}, headers=csrf).status_code for _ in range(3)]
        assert statuses == [201, 201, 429]
        # A key is not a guest: the guest limit does not count it.
        keyed = [
            client.post("/v1/sessions", json={}, headers=bearer("kzchatbot")).status_code for _ in range(3)
        ]
        assert keyed == [201, 201, 201]


# -- 2. sessions end at once, and stay with the service that issued them ------------------------------


def sign_in(client: TestClient, name: str, next_path: str = "/admin") -> None:
    response = client.post(
        "/ui/signin",
        content=f"key={KEYS[name][0]}&next={next_path}",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
        follow_redirects=False,
    )
    assert response.status_code == 303, response.text


def replay(client: TestClient, cookies: dict[str, str]) -> tuple[int, int]:
    """(GET /documents, POST /set_config) with an old session's cookies and its CSRF token."""
    headers = {"Cookie": "; ".join(f"{k}={v}" for k, v in cookies.items()), CSRF_HEADER: cookies[CSRF_COOKIE]}
    client.cookies.clear()
    page = client.get("/documents", headers=headers)
    write = client.post("/set_config", json={"temperature": 0.5}, headers=headers)
    return page.status_code, write.status_code


def test_a_signed_out_session_is_refused_at_once(chat: TestClient) -> None:
    sign_in(chat, "admin")
    old = dict(chat.cookies)
    assert chat.get("/documents").status_code == 200
    assert (
        chat.post("/ui/signout", headers={CSRF_HEADER: old[CSRF_COOKIE]}, follow_redirects=False).status_code
        == 303
    )
    assert replay(chat, old) == (401, 401)


def test_ending_a_keys_sessions_refuses_them_at_once(chat: TestClient, redis_url: str) -> None:
    sign_in(chat, "admin")
    old = dict(chat.cookies)
    assert chat.get("/documents").status_code == 200
    app: Any = chat.app
    env = {
        **os.environ,
        "RAGBOT_REDIS_URL": redis_url,
        "RAGBOT_REDIS_KEY_PREFIX": app.state.auth.registry.prefix,
    }
    ended = subprocess.run(
        [sys.executable, "-m", "ragbot.cli.main", "auth", "end-sessions", "--name", "admin"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ended.returncode == 0 and "ended 1 signed-in session(s) of the key 'admin'" in ended.stdout, ended
    assert replay(chat, old) == (401, 401)


def test_a_removed_key_ends_its_sessions(redis_url: str) -> None:
    app = chat_app(auth_settings(), redis_url=redis_url)
    with TestClient(app, base_url=CHAT) as client:
        sign_in(client, "admin")
        old = dict(client.cookies)
        # The same deployment restarted without the admin key (same secret, same Redis).
        without = auth_settings(keys=[k for k in auth_settings().keys if k.name != "admin"])
        install_auth(app, without, service="chat", redis=app.state.auth.registry.settings)
        assert replay(client, old) == (401, 401)


def test_chats_cookie_opens_nothing_on_ingest(chat: TestClient) -> None:
    sign_in(chat, "admin")
    cookies = dict(chat.cookies)
    header = {"Cookie": "; ".join(f"{k}={v}" for k, v in cookies.items()), CSRF_HEADER: cookies[CSRF_COOKIE]}
    with TestClient(ingest_app(auth_settings()), base_url="https://chat.test") as ingest:
        assert ingest.get("/v1/pages", headers=header).status_code == 401
        assert ingest.delete("/v1/pages/5", headers=header).status_code == 401
        assert ingest.get("/v1/pages", headers=bearer("wiki")).status_code == 200


def test_a_cookie_from_another_port_of_the_same_host_is_refused(redis_url: str) -> None:
    first_app = chat_app(auth_settings(), redis_url=redis_url)
    shared = first_app.state.auth.registry.settings  # one deployment: the same secret and Redis

    def twin() -> Any:
        app = chat_app(auth_settings(), redis_url=redis_url)
        install_auth(app, auth_settings(), service="chat", redis=shared)
        return app

    with TestClient(first_app, base_url=CHAT) as first:
        sign_in(first, "admin")
        cookies = dict(first.cookies)
    header = {"Cookie": "; ".join(f"{k}={v}" for k, v in cookies.items())}
    with TestClient(twin(), base_url=CHAT) as same_port:
        assert same_port.get("/documents", headers=header).status_code == 200, "the control: same port"
    with TestClient(twin(), base_url=f"{CHAT}:8443") as other_port:
        assert other_port.get("/documents", headers=header).status_code == 401


# -- 5. conversations belong to who opened them -----------------------------------------------------


def test_another_callers_conversation_is_404(chat: TestClient) -> None:
    session_id, message_id = open_and_ask(chat, bearer("kzchatbot"))
    assert chat.get(f"/v1/sessions/{session_id}", headers=bearer("kzchatbot")).status_code == 200
    csrf = guest(chat)
    for headers in (csrf, bearer("admin")):
        assert chat.get(f"/v1/sessions/{session_id}", headers=headers).status_code == 404
        posted = chat.post(
            f"/v1/sessions/{session_id}/messages?stream=false", json={"question": "x?"}, headers=headers
        )
        assert posted.status_code == 404, posted.text
        rated = chat.post(f"/v1/messages/{message_id}/feedback", json={"rating": "down"}, headers=headers)
        assert rated.status_code == 404, rated.text
    # ...and one guest cannot read another's.
    mine, _ = open_and_ask(chat, csrf)
    chat.cookies.clear()
    other = guest(chat)
    assert chat.get(f"/v1/sessions/{mine}", headers=other).status_code == 404


def test_a_kolzchut_conversation_is_rated_only_by_its_owner(chat: TestClient) -> None:
    found = chat.post("/search", json={"query": "leave?"}, headers=bearer("kzchatbot"))
    assert found.status_code == 200, found.text
    conversation = found.json()["conversation_id"]
    other = chat.post(
        "/rating", json={"conversation_id": conversation, "like": True}, headers=bearer("admin")
    )
    assert other.status_code == 404
    own = chat.post(
        "/rating", json={"conversation_id": conversation, "like": True}, headers=bearer("kzchatbot")
    )
    assert own.status_code == 200 and own.json()["like"] is True


# -- 7. header limits (the size is the server's: tests/e2e/test_auth_e2e.py) ----------------------------

PING = {
    "page_id": 7,
    "revision_id": 70,
    "revision_date": "20250101120000",
    "callback_url": "http://wiki.test/w/rest.php/cbragcontent/v0/page_id/",
}


def test_too_many_headers_are_refused_with_431_naming_the_limit() -> None:
    with TestClient(ingest_app(auth_settings(), http=HttpSettings(max_headers=100))) as ingest:
        many = {f"X-Filler-{n}": "x" for n in range(150)}
        refused = ingest.get("/healthz", headers=many)
        assert refused.status_code == 431 and "RAGBOT_HTTP_MAX_HEADERS" in refused.json()["detail"]
        few = {f"X-Filler-{n}": "x" for n in range(50)}
        assert ingest.get("/healthz", headers=few).status_code == 200
        # A head over the size cap that reaches the app whole (one read) is refused there too.
        big = ingest.get("/healthz", headers={"X-Bomb": "x" * 40_000})
        assert big.status_code == 431 and "RAGBOT_HTTP_MAX_HEADER_BYTES" in big.json()["detail"]


# -- 10. hosts: a trusted list, and absolute URLs from configuration only ----------------------------


def ping(client: TestClient, host: str) -> Any:
    return client.post("/v1/pages/changed", json=PING, headers={**bearer("wiki"), "Host": host})


def test_an_untrusted_host_is_refused_and_never_echoed() -> None:
    with TestClient(
        ingest_app(auth_settings(), http=HttpSettings(trusted_hosts=[])), base_url="http://127.0.0.1"
    ) as ingest:
        refused = ping(ingest, "evil.example")
        assert refused.status_code == 400 and "RAGBOT_HTTP_TRUSTED_HOSTS" in refused.json()["detail"]
        assert "evil" not in refused.text and "evil" not in str(refused.headers)
        assert ingest.get("/healthz", headers={"Host": "10.1.2.3:8001"}).status_code == 200, "probes by IP"
        for host in ("127.0.0.1:8001", "localhost", "[::1]:8001"):
            accepted = ping(ingest, host)
            assert accepted.status_code == 202, (host, accepted.text)
            job = accepted.json()["job_id"]
            assert accepted.headers["Location"] == accepted.json()["status_url"] == f"/v1/jobs/{job}"


def test_absolute_urls_are_built_from_the_public_url() -> None:
    http = HttpSettings(public_url="https://ragbot.example.org:8001", trusted_hosts=["*.internal"])
    with TestClient(ingest_app(auth_settings(), http=http), base_url="http://127.0.0.1") as ingest:
        for host in ("ragbot.example.org:8001", "ingest.internal", "127.0.0.1"):
            accepted = ping(ingest, host)
            assert accepted.status_code == 202, (host, accepted.text)
            expected = f"https://ragbot.example.org:8001/v1/jobs/{accepted.json()['job_id']}"
            assert accepted.headers["Location"] == accepted.json()["status_url"] == expected
        assert ping(ingest, "internal").status_code == 400
        assert ping(ingest, "ragbot.example.org.evil.example").status_code == 400


# -- credentials before bodies: a stranger learns nothing about what a route accepts --------------------


def test_an_invalid_body_without_a_credential_is_401_not_422() -> None:
    with TestClient(ingest_app(auth_settings())) as ingest:
        for body in (b'{"page_id": "x"}', b"[]", b"{not json", b"\xff\xfe", b"[" * 5000):
            headers = {"Content-Type": "application/json"}
            stranger = ingest.post("/v1/pages", content=body, headers=headers)
            assert stranger.status_code == 401, stranger.text
            wrong = ingest.post("/v1/pages", content=body, headers={**headers, **bearer("kzchatbot")})
            assert wrong.status_code == 403, wrong.text
            allowed = ingest.post("/v1/pages", content=body, headers={**headers, **bearer("wiki")})
            assert allowed.status_code in (400, 422), allowed.text


def test_the_widget_answers_a_stranger_401_before_judging_its_body(chat: TestClient) -> None:
    chat.cookies.clear()
    for body in (b"", b"{}", b'{"uuid": 7}'):
        headers = {"Content-Type": "application/json"}
        stranger = chat.post("/kzchatbot/v0/rate", content=body, headers=headers)
        assert stranger.status_code == 401, stranger.text
        keyed = chat.post("/kzchatbot/v0/rate", content=body, headers={**headers, **bearer("kzchatbot")})
        assert keyed.status_code == 400, keyed.text
