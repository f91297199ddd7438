"""The web UI's language."""

from __future__ import annotations

from typing import Literal

from pydantic_settings import BaseSettings

from ragbot.settings.common import settings_config

UiLanguage = Literal["he", "en"]


class UiSettings(BaseSettings):
    """The web UI's language when the reader has not chosen one with the page's switch: ``language``
    (``auto``: the browser's ``Accept-Language``) and the one used when the browser asks for neither."""

    model_config = settings_config("RAGBOT_UI_")
    language: Literal["auto", "he", "en"] = "auto"
    fallback_language: UiLanguage = "en"
