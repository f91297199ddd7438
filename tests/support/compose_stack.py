"""The compose stack that scripts/compose_stack.py booted: its command line, keys and loopback URLs."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
import pytest

T = TypeVar("T")
WIKI_PORT = 18080
URLS = {
    "ingest": "http://127.0.0.1:18001",
    "retriever": "http://127.0.0.1:18002",
    "chat": "http://127.0.0.1:18003",
    "prometheus": "http://127.0.0.1:19090",
}


@dataclass(frozen=True)
class ComposeStack:
    """How to reach and drive the running stack."""

    command: list[str]
    env: dict[str, str]
    results: str

    def key(self, name: str) -> dict[str, str]:
        """The Authorization header of one of compose's keys (WIKI_API_KEY, SERVICE_API_KEY, ...)."""
        return {"Authorization": f"Bearer {self.env[name]}"}

    def compose(self, *args: str, timeout: float = 900) -> str:
        """Run ``docker compose`` on the stack; a failure shows compose's own output."""
        result = subprocess.run(
            [*self.command, *args], env=self.env, capture_output=True, text=True, timeout=timeout, check=False
        )
        assert result.returncode == 0, f"compose {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
        return result.stdout

    def record(self, **figures: float) -> None:
        """Add figures to bench/results/containers.json."""
        current: dict[str, Any] = {}
        if os.path.exists(self.results):
            with open(self.results, encoding="utf-8") as handle:
                current = json.load(handle)
        current.update(figures)
        with open(self.results, "w", encoding="utf-8") as handle:
            json.dump(current, handle, indent=2, sort_keys=True)
            handle.write("\n")


def wait_for(what: str, probe: Callable[[], T | None], *, timeout: float = 180.0, every: float = 0.5) -> T:
    """Poll ``probe`` until it returns a value; fail naming ``what`` and the last error after ``timeout``."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            value = probe()
        except (httpx.HTTPError, AssertionError, KeyError, ValueError) as exc:
            last, value = exc, None
        if value is not None:
            return value
        time.sleep(every)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what} (last error: {last!r})", pytrace=False)
