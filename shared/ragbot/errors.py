"""The one exception hierarchy of ragbot: every error raised on purpose, its HTTP status and retry policy.

Adapters translate vendor errors (Elasticsearch, Redis, httpx, Ollama, llama.cpp) into these. The
HTTP status is what ``ragbot.observability.http.add_error_handlers`` answers when the error reaches
it; a route that catches one itself says so. "Retried" is the embedder worker's policy
(``RagbotError.retryable``, read by ``is_retryable``): retried with backoff up to
``WorkerSettings.max_retries``, then dead-lettered; the others are dead-lettered at once.

    RagbotError                     500 "internal error"                     not retried
    ├── ConfigurationError          500 with the message                     not retried
    ├── ValidationFailed            422 (``field`` in ``loc``)               not retried
    │   ├── JobNotRetryable         409 (ingest: POST /v1/jobs/{id}/retry)   not retried
    │   ├── ReconcileRefused        409 (ingest: removes past the guard)     not retried
    │   ├── UploadsRefused          422, one detail per file (ingest)        not retried
    │   └── BodyTooLarge            413 (ingest: a reindex body or line)     not retried
    ├── NotFound                    404                                      not retried
    ├── Unauthenticated             401 with ``WWW-Authenticate``            not retried
    ├── Forbidden                   403 (a credential without the scope)     not retried
    ├── DependencyUnavailable       503 (``dependency`` in the body)         retried
    │   ├── StoreUnavailable        503, dependency "store"                  retried
    │   ├── LLMError                503, dependency "llm"                    retried
    │   └── LLMBusy                 503 + Retry-After: no generation slot    retried
    ├── RateLimited                 429 + Retry-After (a client's limit)     not retried
    ├── SourceError                 500                                      retried
    ├── SourceRefused               422                                      not retried
    ├── EmbeddingError              500                                      not retried
    │   └── RerankError             500                                      not retried
    ├── PartTooLarge                413 (ingest: uploads and reindex)        not retried
    └── PagesFailed                 worker only: the batch is dead-lettered  not retried

The Kol-Zchut widget's refusals (``ragbot_chat.widget.WidgetError``) are not in this tree: each
carries the status and Hebrew message of the widget's own protocol and never leaves its routes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar


class RagbotError(Exception):
    """Base of every error ragbot raises on purpose."""

    retryable: ClassVar[bool] = False
    """Whether the embedder worker retries a task that failed with this error (with backoff)."""


def is_retryable(exc: BaseException) -> bool:
    """The worker's retry policy: only errors of the tree that say so (a dependency or source hiccup)."""
    return isinstance(exc, RagbotError) and exc.retryable


class ConfigurationError(RagbotError):
    """Settings or the document definition file are invalid; the message names the bad key."""


class ValidationFailed(RagbotError):
    """Input was understood but refused; ``field`` names what to fix."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class JobNotRetryable(ValidationFailed):
    """Only failed jobs can be re-queued."""


class ReconcileRefused(ValidationFailed):
    """A reconcile would remove more of the index than the guard allows (a truncated list?)."""


class UploadsRefused(ValidationFailed):
    """Some files of an upload cannot be indexed; ``reasons`` has one message per refused file."""

    def __init__(self, reasons: Sequence[tuple[int, str]]) -> None:
        super().__init__("; ".join(r for _, r in reasons), field="file")
        self.reasons = list(reasons)


class BodyTooLarge(ValidationFailed):
    """A body (or one of its lines) is over its cap: a 413."""


class NotFound(RagbotError):
    """The thing asked for does not exist."""


class Unauthenticated(RagbotError):
    """No credential, or one that matches no key: the message says what to send."""


class Forbidden(RagbotError):
    """The credential is valid but lacks the scope the route needs; the message names the scope."""


class DependencyUnavailable(RagbotError):
    """A dependency (store, Redis, model, LLM, wiki) did not answer; ``dependency`` names it."""

    retryable: ClassVar[bool] = True

    def __init__(self, message: str, *, dependency: str) -> None:
        super().__init__(message)
        self.dependency = dependency


class StoreUnavailable(DependencyUnavailable):
    """The search store (Elasticsearch or the embedded store) failed or timed out."""

    def __init__(self, message: str, *, dependency: str = "store") -> None:
        super().__init__(message, dependency=dependency)


class LLMError(DependencyUnavailable):
    """The LLM failed, timed out or refused the request; the message says which and why."""

    def __init__(self, message: str, *, dependency: str = "llm") -> None:
        super().__init__(message, dependency=dependency)


class LLMBusy(DependencyUnavailable):
    """Every generation slot is taken and the wait queue is full (or the wait ran out): retry later."""

    def __init__(self, message: str, *, retry_after_s: int, dependency: str = "llm") -> None:
        super().__init__(message, dependency=dependency)
        self.retry_after_s = retry_after_s


class RateLimited(RagbotError):
    """A client used up a limit (``limit``: "30 per 1 minute"); it may retry after ``retry_after_s``."""

    def __init__(self, message: str, *, limit: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.limit = limit
        self.retry_after_s = retry_after_s


class SourceError(RagbotError):
    """Fetching a page from its source failed in a way worth retrying (timeout, 5xx)."""

    retryable: ClassVar[bool] = True


class SourceRefused(RagbotError):
    """The source answered with something we will never accept (not allow-listed, too big, bad body)."""


class EmbeddingError(RagbotError):
    """An embedding model failed to load or encode."""


class RerankError(EmbeddingError):
    """The reranker failed to load or score (a model error, like an embedder's)."""


class PartTooLarge(RagbotError):
    """A file (or the whole body) is over its cap; ``what`` says which, for a 413."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


class PagesFailed(RagbotError):
    """Some pages of a batch failed for good (the message lists them)."""
