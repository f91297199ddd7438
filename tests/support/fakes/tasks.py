"""The one test fake of a bound Celery task, as ``TaskRunner`` reads it: a retry count and ``retry``."""

from __future__ import annotations

from typing import Any

from celery.exceptions import Retry


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
