"""Debian's Chromium and its chromedriver, which the web UI's browser tests drive headless."""

from __future__ import annotations

from ragbot.dev.services.base import Commands


def chromium() -> Commands:
    """Each browser test starts its own headless Chromium through chromedriver; nothing runs in between."""
    return Commands("browser", {"chromium": "chromium", "chromedriver": "chromium-driver"})
