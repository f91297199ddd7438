"""The web UI's languages: the Hebrew and English catalogues hold the same keys and placeholders, every
key the pages and scripts use exists (and none is left unused), and a page comes in the language the
reader chose, else ``RAGBOT_UI_LANGUAGE``, else the browser's ``Accept-Language``, else the fallback.
The Kol-Zchut pages get the shared link rule (``links.js``) inlined and hashed into their policy."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import cast

import pytest
import redis.asyncio as aioredis
from fastapi.testclient import TestClient
from starlette.requests import Request
from support.chat_fakes import ScriptedLLM, StaticRetriever

from ragbot.settings import ChatSettings, UiSettings, get_ui_settings
from ragbot_chat import i18n, kolzchut_pages
from ragbot_chat.app import assemble, create_app
from ragbot_chat.deps import Resources
from ragbot_chat.ui import STATIC_DIR

TEMPLATES = ("index.html", "documents.html", "admin.html", "signin.html")
PLACEHOLDER = re.compile(r"\{(\w+)\}")
# t("key", ...) and tn("key", n, ...) in the scripts; tn reads key.one and key.other.
T_CALL = re.compile(r"\bt\(\s*\"([a-z0-9_.-]+)\"")
TN_CALL = re.compile(r"\btn\(\s*\"([a-z0-9_.-]+)\"")
# Keys the server uses itself (ragbot_chat.signin).
SERVER_KEYS = {"signin.needs_key", "signin.wrong_key"}


def used_keys() -> set[str]:
    keys = set(SERVER_KEYS)
    for name in TEMPLATES:
        text = (STATIC_DIR / name).read_text(encoding="utf-8")
        keys |= {m.group(2) for m in i18n._PLACEHOLDER.finditer(text) if not m.group(1)}
    for script in (STATIC_DIR / "js").glob("*.js"):
        if script.name == "i18n.js":
            continue
        text = script.read_text(encoding="utf-8")
        keys |= set(T_CALL.findall(text))
        keys |= {f"{key}.{form}" for key in TN_CALL.findall(text) for form in ("one", "other")}
    return keys


def test_both_catalogues_have_the_same_keys_and_placeholders() -> None:
    he, en = i18n.catalogue("he"), i18n.catalogue("en")
    assert set(he) == set(en), sorted(set(he) ^ set(en))
    for key in en:
        assert he[key].strip() and en[key].strip(), key
        assert set(PLACEHOLDER.findall(he[key])) == set(PLACEHOLDER.findall(en[key])), key
    # Hebrew words, not English left behind (language names and units aside).
    english_only = [k for k in he if not re.search(r"[\u0590-\u05FF]", he[k]) and k != "language.en"]
    assert english_only == [], english_only


def test_every_key_the_pages_and_scripts_use_exists_and_none_is_unused() -> None:
    used, known = used_keys(), set(i18n.catalogue("en"))
    assert used - known == set(), sorted(used - known)
    assert known - used == set(), sorted(known - used)


@pytest.mark.parametrize("lang", ["he", "en"])
@pytest.mark.parametrize("name", TEMPLATES)
def test_every_page_renders_in_both_languages_with_its_direction(name: str, lang: i18n.UiLanguage) -> None:
    values = {"scope": "admin", "next": "/admin", "message": ""}
    text = i18n.page(STATIC_DIR / name, lang, values)
    assert f'<html lang="{lang}" dir="{i18n.DIRECTIONS[lang]}">' in text
    assert "{{" not in text and "}}" not in text
    assert f'hreflang="{lang}" aria-current="true"' in text
    if name != "signin.html":
        opening = '<script type="application/json" id="ragbot-messages">'
        embedded = re.search(rf"{opening}(.*?)</script>", text, re.S)
        assert embedded is not None and json.loads(embedded.group(1)) == i18n.catalogue(lang)


def test_a_message_cannot_close_the_embedded_catalogue_or_inject_markup() -> None:
    embedded = i18n._embedded_json({"x": "</script><script>alert(1)</script><!--"})
    assert "<" not in embedded and ">" not in embedded
    assert json.loads(embedded) == {"x": "</script><script>alert(1)</script><!--"}
    assert i18n.render("<p>{{=message}}</p>", "en", {"message": "<b>x</b>"}) == "<p>&lt;b&gt;x&lt;/b&gt;</p>"
    with pytest.raises(KeyError):
        i18n.render("{{no.such.key}}", "he")


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("he-IL,he;q=0.9,en-US;q=0.8,en;q=0.7", "he"),
        ("en-US,en;q=0.9,he;q=0.8", "en"),
        ("fr-FR,fr;q=0.9,he;q=0.5,en;q=0.4", "he"),
        ("en;q=0.2, he;q=0.3", "he"),
        ("iw", "he"),
        ("he;q=0, en;q=0.1", "en"),
        ("fr, de", None),
        ("", None),
        ("*;q=1, !!;q=x", None),
    ],
)
def test_accept_language_picks_the_preferred_supported_language(header: str, expected: str | None) -> None:
    assert i18n.from_accept_language(header) == expected


def request_with(*, cookie: str | None = None, accept: str | None = None) -> Request:
    headers: list[tuple[bytes, bytes]] = []
    if cookie is not None:
        headers.append((b"cookie", f"{i18n.COOKIE}={cookie}".encode()))
    if accept is not None:
        headers.append((b"accept-language", accept.encode()))
    return Request({"type": "http", "method": "GET", "path": "/", "headers": headers, "query_string": b""})


def test_the_readers_choice_beats_the_setting_which_beats_the_browser() -> None:
    auto, hebrew = UiSettings(language="auto"), UiSettings(language="he")
    assert i18n.choose_language(request_with(cookie="en", accept="he"), hebrew) == "en"
    assert i18n.choose_language(request_with(cookie="xx", accept="en"), hebrew) == "he"
    assert i18n.choose_language(request_with(accept="en-US"), hebrew) == "he"
    assert i18n.choose_language(request_with(accept="he-IL"), auto) == "he"
    assert i18n.choose_language(request_with(accept="fr"), auto) == "en"
    assert i18n.choose_language(request_with(), UiSettings(fallback_language="he")) == "he"


def test_the_setting_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGBOT_UI_LANGUAGE", "he")
    monkeypatch.setenv("RAGBOT_UI_FALLBACK_LANGUAGE", "he")
    get_ui_settings.cache_clear()
    try:
        assert get_ui_settings() == UiSettings(language="he", fallback_language="he")
    finally:
        get_ui_settings.cache_clear()


@pytest.fixture
def client() -> Iterator[TestClient]:
    @asynccontextmanager
    async def resources() -> AsyncIterator[Resources]:
        yield assemble(
            settings=ChatSettings(),
            llm=ScriptedLLM(),
            retriever=StaticRetriever(),
            redis_client=cast(aioredis.Redis, None),
            key_prefix="unit-ui-i18n",
        )

    app = create_app(resources=resources)
    with TestClient(app) as test_client:
        yield test_client
    app.dependency_overrides.clear()


def test_the_switch_remembers_the_language_and_the_pages_follow_it(client: TestClient) -> None:
    english = client.get("/documents", headers={"Accept-Language": "en-US,en"})
    assert '<html lang="en" dir="ltr">' in english.text and "Indexed pages" in english.text
    assert english.headers["vary"] == "Accept-Language, Cookie"
    hebrew = client.get("/documents", headers={"Accept-Language": "he-IL,he"})
    assert '<html lang="he" dir="rtl">' in hebrew.text and "דפים במאגר" in hebrew.text

    switched = client.get("/documents?lang=he", headers={"Accept-Language": "en"}, follow_redirects=False)
    assert switched.status_code == 303 and switched.headers["location"] == "/documents"
    cookie = switched.headers["set-cookie"]
    assert cookie.startswith(f"{i18n.COOKIE}=he;") and "samesite=lax" in cookie.lower()
    for path in ("/", "/documents", "/admin"):
        page = client.get(path, headers={"Accept-Language": "en"})
        assert page.status_code == 200 and '<html lang="he" dir="rtl">' in page.text, path
    assert client.get("/?lang=xx", headers={"Accept-Language": "en"}).status_code == 200  # ignored


def test_the_setting_decides_until_the_reader_chooses(client: TestClient) -> None:
    app = cast(object, client.app)
    overrides = app.dependency_overrides  # type: ignore[attr-defined]
    overrides[get_ui_settings] = lambda: UiSettings(language="he")
    page = client.get("/", headers={"Accept-Language": "en-US,en"})
    assert '<html lang="he" dir="rtl">' in page.text and "שיחה חדשה" in page.text
    client.cookies.set(i18n.COOKIE, "en")
    page = client.get("/", headers={"Accept-Language": "he"})
    assert '<html lang="en" dir="ltr">' in page.text and "New conversation" in page.text


def test_the_catalogues_are_served_as_static_files(client: TestClient) -> None:
    for lang in i18n.LANGUAGES:
        response = client.get(f"/ui/static/i18n/{lang}.json")
        assert response.status_code == 200 and response.json() == i18n.catalogue(lang)


@pytest.mark.parametrize("name", ["index.html", "batch-runner.html"])
def test_kolzchut_pages_inline_the_shared_link_rule_under_their_policy(name: str) -> None:
    text = kolzchut_pages.page_text(name)
    assert "@include" not in text and "function linkHref(url)" in text and "export function" not in text
    assert (STATIC_DIR / "js" / "links.js").read_text(encoding="utf-8").replace("export ", "") in text
    script = re.search(r"<script>(.*?)</script>", text, re.S)
    assert script is not None
    digest = base64.b64encode(hashlib.sha256(script.group(1).encode()).digest()).decode()
    assert f"'sha256-{digest}'" in kolzchut_pages.page_headers(name)["Content-Security-Policy"]
