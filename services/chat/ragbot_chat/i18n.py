"""The web UI's languages: the message catalogues, the language a request gets, and pages rendered in it.

Every string of the chat, documents, admin and sign-in pages comes from ``static/i18n/<lang>.json``
(one flat catalogue per language, the same keys in each). A page template names a message as
``{{key}}`` and a value of the request as ``{{=name}}``; its scripts read the same catalogue, embedded in
the page (``{{=messages}}``), through ``static/js/i18n.js``.

A request's language is, first, the one the reader chose with the page's switch (``?lang=`` sets the
``ragbot_lang`` cookie), then ``RAGBOT_UI_LANGUAGE``, then the browser's ``Accept-Language``, then
``RAGBOT_UI_FALLBACK_LANGUAGE``.
"""

from __future__ import annotations

import html
import json
import re
from functools import cache
from pathlib import Path
from typing import Literal, cast, get_args

from fastapi import Request

from ragbot.settings import UiLanguage as UiLanguage
from ragbot.settings import UiSettings

I18N_DIR = Path(__file__).parent / "static" / "i18n"
LANGUAGES: tuple[UiLanguage, ...] = get_args(UiLanguage)
DIRECTIONS: dict[UiLanguage, Literal["rtl", "ltr"]] = {"he": "rtl", "en": "ltr"}
COOKIE = "ragbot_lang"
COOKIE_MAX_AGE_S = 365 * 24 * 3600
_PLACEHOLDER = re.compile(r"\{\{(=?)([a-z0-9_.-]+)\}\}")
_RANGE = re.compile(r"^\s*([A-Za-z]{1,8})(?:-[A-Za-z0-9]{1,8})*\s*(?:;\s*q\s*=\s*([0-9.]{1,5}))?\s*$")


@cache
def catalogue(lang: UiLanguage) -> dict[str, str]:
    """The messages of one language (read once)."""
    data = json.loads((I18N_DIR / f"{lang}.json").read_text(encoding="utf-8"))
    return cast(dict[str, str], data)


def supported(value: str | None) -> UiLanguage | None:
    """``value`` when it names a language of the UI, else None."""
    return "he" if value == "he" else "en" if value == "en" else None


def from_accept_language(header: str) -> UiLanguage | None:
    """The UI language the browser prefers most (``Accept-Language``, by q), or None."""
    ranked: list[tuple[float, int, UiLanguage]] = []
    for position, part in enumerate(header.split(",")[:32]):
        match = _RANGE.match(part)
        if not match:
            continue
        try:
            weight = float(match.group(2)) if match.group(2) else 1.0
        except ValueError:
            continue
        lang = supported(match.group(1).lower())
        if lang is None and match.group(1).lower() == "iw":  # Hebrew's old code
            lang = "he"
        if lang is not None and weight > 0:
            ranked.append((-weight, position, lang))
    return min(ranked)[2] if ranked else None


def choose_language(request: Request, settings: UiSettings) -> UiLanguage:
    """The reader's choice, else the setting, else the browser's, else the fallback."""
    chosen = supported(request.cookies.get(COOKIE))
    if chosen is not None:
        return chosen
    if settings.language != "auto":
        return settings.language
    return from_accept_language(request.headers.get("accept-language", "")) or settings.fallback_language


def _embedded_json(messages: dict[str, str]) -> str:
    # Inside <script type="application/json">: no "</script>" or "<!--" can end or open anything.
    return json.dumps(messages, ensure_ascii=False).replace("<", "\\u003c").replace(">", "\\u003e")


def render(template: str, lang: UiLanguage, values: dict[str, str] | None = None) -> str:
    """A page template in ``lang``: messages and values HTML-escaped; an unknown key is an error."""
    messages = catalogue(lang)
    given = {
        "lang": lang,
        "dir": DIRECTIONS[lang],
        **{f"current_{code}": 'aria-current="true"' if code == lang else "" for code in LANGUAGES},
        **(values or {}),
    }
    # Markup the server writes itself: the catalogue as JSON and the switch's aria-current attributes.
    raw = {"messages": _embedded_json(messages)} | {k: v for k, v in given.items() if k.startswith("cur")}

    def substitute(match: re.Match[str]) -> str:
        is_value, name = match.group(1) == "=", match.group(2)
        if not is_value:
            return html.escape(messages[name])
        return raw[name] if name in raw else html.escape(given[name])

    return _PLACEHOLDER.sub(substitute, template)


@cache
def template(path: Path) -> str:
    """A page template's text (read once)."""
    return path.read_text(encoding="utf-8")


def page(path: Path, lang: UiLanguage, values: dict[str, str] | None = None) -> str:
    """The page at ``path`` rendered in ``lang``."""
    return render(template(path), lang, values)
