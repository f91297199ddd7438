"""The one exception hierarchy of ragbot. Adapters translate vendor errors into these."""

from __future__ import annotations


class RagbotError(Exception):
    """Base of every error ragbot raises on purpose."""


class ConfigurationError(RagbotError):
    """Settings or the document definition file are invalid; the message names the bad key."""


class ValidationFailed(RagbotError):
    """Input was understood but refused; ``field`` names what to fix."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class NotFound(RagbotError):
    """The thing asked for does not exist."""


class DependencyUnavailable(RagbotError):
    """A dependency (store, Redis, model, LLM, wiki) did not answer; ``dependency`` names it."""

    def __init__(self, message: str, *, dependency: str) -> None:
        super().__init__(message)
        self.dependency = dependency


class StoreUnavailable(DependencyUnavailable):
    """The search store (Elasticsearch or the embedded store) failed or timed out."""

    def __init__(self, message: str, *, dependency: str = "store") -> None:
        super().__init__(message, dependency=dependency)


class SourceError(RagbotError):
    """Fetching a page from its source failed in a way worth retrying (timeout, 5xx)."""


class SourceRefused(RagbotError):
    """The source answered with something we will never accept (not allow-listed, too big, bad body)."""


class EmbeddingError(RagbotError):
    """An embedding model failed to load or encode."""
