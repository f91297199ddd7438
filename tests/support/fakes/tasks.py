"""The test fakes of what ``TaskRunner`` runs with: a bound Celery task and a worker runtime."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from celery.exceptions import Retry

from ragbot_embedder.service import IndexingContext

T = TypeVar("T")


class FakeRequest:
    """The task's ``request``: how many retries came before, and the request id."""

    def __init__(self, retries: int, request_id: str | None = None) -> None:
        self.retries = retries
        self.request_id = request_id


class FakeTask:
    """Records every ``retry`` asked of it and returns Celery's ``Retry`` for the runner to raise."""

    def __init__(self, retries: int = 0, *, request_id: str | None = None) -> None:
        self.request = FakeRequest(retries, request_id)
        self.retried: list[dict[str, Any]] = []

    def retry(self, **kwargs: Any) -> Retry:
        """Celery's ``Task.retry`` without a broker."""
        self.retried.append(kwargs)
        return Retry("retry", when=kwargs.get("countdown"))


@dataclass
class FakeRuntime:
    """A worker's ``Runtime`` without a worker process: the context, each coroutine on a fresh loop."""

    ctx: IndexingContext
    generations: None = None

    async def contexts_for(self, command: object) -> list[IndexingContext]:
        """The one context (no index generations here)."""
        return [self.ctx]

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run the coroutine to completion."""
        return asyncio.run(coro)
