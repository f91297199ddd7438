"""Fixtures for tests/compose: the stack scripts/compose_stack.py booted, and the wiki it calls back.

These tests run only under ``make test-compose`` (tests/conftest.py leaves this folder out otherwise):
the stack must already be up. Nothing here starts or mocks a ragbot service.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import pytest
from support.compose_stack import WIKI_PORT, ComposeStack
from support.fake_wiki import FakeWiki, load_pages


@pytest.fixture(scope="session")
def stack() -> ComposeStack:
    for name in ("RAGBOT_COMPOSE_COMMAND", "RAGBOT_COMPOSE_ENV", "RAGBOT_COMPOSE_RESULTS"):
        if name not in os.environ:
            pytest.fail(f"{name} is not set: run these tests with `make test-compose`", pytrace=False)
    return ComposeStack(
        command=json.loads(os.environ["RAGBOT_COMPOSE_COMMAND"]),
        env=json.loads(os.environ["RAGBOT_COMPOSE_ENV"]),
        results=os.environ["RAGBOT_COMPOSE_RESULTS"],
    )


@pytest.fixture(scope="session")
def wiki() -> Iterator[FakeWiki]:
    """The content API the ingest and embedder containers call back (host network, loopback)."""
    server = FakeWiki(load_pages(), port=WIKI_PORT)
    server.start()
    try:
        yield server
    finally:
        server.stop()
