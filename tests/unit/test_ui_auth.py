"""The web UI's sign-in: the admin and documents pages ask for a key, the session cookie's flags, CSRF on
every write, the chat page's policy, and chat's own key (not the browser's) on the proxied calls."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from support.auth import KEYS, auth_settings, chat_app

from ragbot.http.auth import CSRF_COOKIE, CSRF_HEADER, SESSION_COOKIE
from ragbot.settings import AuthSettings, ChatSettings

RETRIEVER = "http://retriever.test:8002"
SERVICE_KEY = KEYS["chat-service"][0]


class Upstream:
    """The retriever behind the UI proxy: records what it was sent."""

    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return httpx.Response(200, json={"documents": [], "debug": {}, "timings_ms": {"total": 1.0}})


def client_for(auth: AuthSettings, upstream: Upstream) -> TestClient:
    settings = ChatSettings(retriever_url=RETRIEVER, service_key=SERVICE_KEY)
    app = chat_app(auth, settings=settings)
    app.state.ui_transport = httpx.MockTransport(upstream.handle)
    return TestClient(app, base_url="https://chat.test")


@pytest.fixture
def upstream() -> Upstream:
    return Upstream()


@pytest.fixture
def ui(upstream: Upstream) -> Iterator[TestClient]:
    with client_for(auth_settings(cookie_secure=True), upstream) as client:
        yield client


def sign_in(client: TestClient, key: str, next_path: str = "/admin") -> Any:
    return client.post(
        "/ui/signin",
        content=f"key={key}&next={next_path}",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
        follow_redirects=False,
    )


@pytest.mark.parametrize("path", ["/admin", "/documents"])
def test_admin_pages_answer_the_sign_in_form_until_signed_in(ui: TestClient, path: str) -> None:
    response = ui.get(path)
    assert response.status_code == 401 and '<form method="post" action="/ui/signin">' in response.text
    assert f'value="{path}"' in response.text and "admin" in response.text
    assert "script" not in response.text, "the form works without JavaScript (and under the CSP)"


def test_a_wrong_key_sets_no_cookie(ui: TestClient) -> None:
    response = sign_in(ui, "n" * 30)
    assert response.status_code == 401 and "matches no configured key" in response.text
    assert SESSION_COOKIE not in response.cookies


def test_signing_in_sets_an_httponly_strict_session_and_a_readable_csrf_cookie(ui: TestClient) -> None:
    response = sign_in(ui, KEYS["admin"][0])
    assert response.status_code == 303 and response.headers["location"] == "/admin"
    cookies = {c.split("=", 1)[0]: c.lower() for c in response.headers.get_list("set-cookie")}
    session, csrf = cookies[SESSION_COOKIE], cookies[CSRF_COOKIE]
    assert "httponly" in session and "samesite=strict" in session and "secure" in session
    assert "httponly" not in csrf and "samesite=strict" in csrf
    assert KEYS["admin"][0].lower() not in session, "the cookie names the key, never carries it"
    page = ui.get("/admin")
    assert page.status_code == 200 and "admin.js" in page.text


def test_writes_with_the_session_need_the_csrf_token(ui: TestClient, upstream: Upstream) -> None:
    sign_in(ui, KEYS["admin"][0])
    body = {"query": "x"}
    refused = ui.post("/ui/api/retrieve", json=body)
    assert refused.status_code == 403 and CSRF_HEADER in refused.json()["detail"]
    wrong = ui.post("/ui/api/retrieve", json=body, headers={CSRF_HEADER: "forged"})
    assert wrong.status_code == 403
    assert not upstream.requests
    token = ui.cookies[CSRF_COOKIE]
    accepted = ui.post("/ui/api/retrieve", json=body, headers={CSRF_HEADER: token})
    assert accepted.status_code == 200, accepted.text
    [sent] = upstream.requests
    assert sent.headers["authorization"] == f"Bearer {SERVICE_KEY}", "chat calls on with its own key"
    assert "cookie" not in sent.headers


def test_a_key_without_admin_signs_in_but_gets_no_admin_page(ui: TestClient) -> None:
    assert sign_in(ui, KEYS["kzchatbot"][0]).status_code == 303
    response = ui.get("/admin")
    assert response.status_code == 401 and "lacks the &#x27;admin&#x27; scope" in response.text


def test_signing_out_ends_the_session(ui: TestClient) -> None:
    sign_in(ui, KEYS["admin"][0])
    out = ui.post("/ui/signout", follow_redirects=False)
    assert out.status_code == 303
    assert ui.get("/admin").status_code == 401


def test_the_open_chat_page_hands_out_a_chat_only_guest_session(ui: TestClient) -> None:
    page = ui.get("/")
    assert page.status_code == 200 and "chat.js" in page.text
    assert SESSION_COOKIE in ui.cookies
    assert ui.get("/admin").status_code == 401
    token = ui.cookies[CSRF_COOKIE]
    assert ui.post("/set_config", json={}, headers={CSRF_HEADER: token}).status_code == 403


def test_under_the_chat_policy_the_chat_page_asks_for_a_key(upstream: Upstream) -> None:
    with client_for(auth_settings(chat_page="chat"), upstream) as client:
        response = client.get("/")
        assert response.status_code == 401 and "<form" in response.text
        assert sign_in(client, KEYS["kzchatbot"][0], "/").headers["location"] == "/"
        assert client.get("/").status_code == 200


def test_sign_in_never_redirects_off_site(ui: TestClient) -> None:
    for target in ("//evil.test/x", "https://evil.test/", "/\\evil.test"):
        assert sign_in(ui, KEYS["admin"][0], target).headers["location"] == "/"
