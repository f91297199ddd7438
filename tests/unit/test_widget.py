"""The Kol-Zchut widget's pure parts: banned-word matching, its settings, and CORS limited to its routes."""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic import ValidationError

from ragbot.chat.widget import find_banned, rfc3339
from ragbot.settings import ChatSettings
from ragbot_chat.widget import WidgetCORS

BANNED = ["ספאם", "מילה אסורה", "Casino"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("מה זה ספאם?", "ספאם"),
        ("והספאם הזה", "ספאם"),  # two prefix letters
        ("ובספאם", "ספאם"),
        ("סְפָּאם", "ספאם"),  # niqqud
        ("יש כאן מילה אסורה!", "מילה אסורה"),
        ("יש כאן מילה  \n אסורה", "מילה אסורה"),  # any whitespace between the phrase's words
        ("casino", "Casino"),
        ("CASINO night", "Casino"),
        ("ספאמר", None),  # a longer word is not the banned one
        ("casinos", None),
        ("מילה לא אסורה", None),  # a phrase needs its words in a row
        ("אסורה מילה", None),
        ("", None),
    ],
)
def test_find_banned(text: str, expected: str | None) -> None:
    assert find_banned(text, BANNED) == expected


@pytest.mark.parametrize("banned", [[], [""], ["  "], ["?!"]])
def test_empty_banned_entries_refuse_nothing(banned: Sequence[str]) -> None:
    assert find_banned("כל שאלה שהיא?", banned) is None


def test_short_hebrew_words_do_not_match_inside_prefixed_words() -> None:
    # a stem must keep three letters, so banning "מס" leaves "במס"'s neighbours like "ומסמך" alone
    assert find_banned("ומסמך", ["מסמ"]) is None
    assert find_banned("במס", ["מס"]) is None
    assert find_banned("מס", ["מס"]) == "מס"


def test_rfc3339_is_utc_with_z() -> None:
    from datetime import datetime, timedelta, timezone

    moment = datetime(2026, 3, 1, 23, 30, 15, 999, tzinfo=timezone(timedelta(hours=2)))
    assert rfc3339(moment) == "2026-03-01T21:30:15Z"


def test_widget_settings_defaults_and_time_zone_check() -> None:
    settings = ChatSettings()
    assert settings.widget_cors_origins == [] and settings.widget_banned_words == []
    assert settings.widget_shown_percent == 100 and settings.widget_timezone == "UTC"
    assert ChatSettings(widget_timezone="Asia/Jerusalem").widget_timezone == "Asia/Jerusalem"
    with pytest.raises(ValidationError, match="widget_timezone"):
        ChatSettings(widget_timezone="Mars/Olympus")
    with pytest.raises(ValidationError, match="widget_shown_percent"):
        ChatSettings(widget_shown_percent=101)


def cors_app(origins: list[str]) -> TestClient:
    app = FastAPI()

    @app.get("/kzchatbot/v0/status")
    def status() -> dict[str, str]:
        return {"ok": "yes"}

    @app.post("/kzchatbot/v0/question")
    def question() -> dict[str, str]:
        return {"ok": "yes"}

    @app.get("/v1/models")
    def models() -> dict[str, str]:
        return {"ok": "yes"}

    app.add_middleware(WidgetCORS)
    app.state.resources = SimpleNamespace(settings=ChatSettings(widget_cors_origins=origins))
    return TestClient(app)


def test_without_origins_there_is_no_cors_so_browsers_keep_same_origin() -> None:
    client = cors_app([])
    response = client.get("/kzchatbot/v0/status", headers={"Origin": "https://www.kolzchut.org.il"})
    assert response.status_code == 200 and "access-control-allow-origin" not in response.headers
    preflight = client.options(
        "/kzchatbot/v0/question",
        headers={"Origin": "https://www.kolzchut.org.il", "Access-Control-Request-Method": "POST"},
    )
    assert preflight.status_code == 405 and "access-control-allow-origin" not in preflight.headers


def test_configured_origins_get_cors_on_the_widget_paths_only() -> None:
    client = cors_app(["https://a.example", "https://b.example"])
    for origin in ("https://a.example", "https://b.example"):
        response = client.get("/kzchatbot/v0/status", headers={"Origin": origin})
        assert response.headers["access-control-allow-origin"] == origin
        assert "access-control-allow-credentials" not in response.headers
    preflight = client.options(
        "/kzchatbot/v0/question",
        headers={
            "Origin": "https://a.example",
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "Content-Type",
        },
    )
    assert (
        preflight.status_code == 200
        and preflight.headers["access-control-allow-origin"] == "https://a.example"
    )
    refused = client.options(
        "/kzchatbot/v0/question",
        headers={"Origin": "https://c.example", "Access-Control-Request-Method": "POST"},
    )
    assert refused.status_code == 400
    outside = client.get("/v1/models", headers={"Origin": "https://a.example"})
    assert "access-control-allow-origin" not in outside.headers


def test_cors_before_the_lifespan_built_resources_passes_through() -> None:
    client = cors_app(["https://a.example"])
    client.app.state.resources = None  # type: ignore[attr-defined]
    response = client.get("/kzchatbot/v0/status", headers={"Origin": "https://a.example"})
    assert response.status_code == 200 and "access-control-allow-origin" not in response.headers
