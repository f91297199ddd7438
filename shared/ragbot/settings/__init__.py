"""Typed settings, one class per concern, built by cached factories; nothing is read at import.

Every variable is documented in `.env.example`. Services receive settings through their composition
root (``app.py`` / ``runtime.py``) and FastAPI dependencies, never by reading the environment.

Two concerns are shared between processes and so are classes of their own, read under the prefix of
the service that owns them: ``SourceSettings`` (fetching wiki pages, ``RAGBOT_INGEST_*``; the base of
``IngestSettings``) and ``LLMSettings`` (the LLM, ``RAGBOT_CHAT_LLM_*``/``LLAMACPP_*``; the base of
``ChatSettings``). The embedder worker builds those two and its own ``WorkerSettings`` and
``ContextualSettings``, never the ingest or chat service's settings.
"""

from __future__ import annotations

from functools import lru_cache

# Re-exported: the services and tests import the auth vocabulary with the settings.
from ragbot.schemas.auth import AUTH_SCOPES as AUTH_SCOPES
from ragbot.schemas.auth import ApiKeyEntry as ApiKeyEntry
from ragbot.schemas.auth import AuthScope as AuthScope
from ragbot.schemas.auth import PingTokenEntry as PingTokenEntry
from ragbot.settings.chat import ChatSettings as ChatSettings
from ragbot.settings.chat import LLMSettings as LLMSettings
from ragbot.settings.common import Precision as Precision
from ragbot.settings.indexing import ContextualSettings as ContextualSettings
from ragbot.settings.indexing import IngestSettings as IngestSettings
from ragbot.settings.indexing import MediaWikiSettings as MediaWikiSettings
from ragbot.settings.indexing import SourceSettings as SourceSettings
from ragbot.settings.indexing import WorkerSettings as WorkerSettings
from ragbot.settings.models import ModelSettings as ModelSettings
from ragbot.settings.observability import ObservabilitySettings as ObservabilitySettings
from ragbot.settings.observability import TracingSettings as TracingSettings
from ragbot.settings.retrieval import RetrieverSettings as RetrieverSettings
from ragbot.settings.security import AuthSettings as AuthSettings
from ragbot.settings.security import ClientSettings as ClientSettings
from ragbot.settings.security import HttpSettings as HttpSettings
from ragbot.settings.security import RateLimitSettings as RateLimitSettings
from ragbot.settings.storage import RedisSettings as RedisSettings
from ragbot.settings.storage import StoreSettings as StoreSettings
from ragbot.settings.ui import UiLanguage as UiLanguage
from ragbot.settings.ui import UiSettings as UiSettings


@lru_cache
def get_redis_settings() -> RedisSettings:
    """Redis settings, read once per process."""
    return RedisSettings()


@lru_cache
def get_store_settings() -> StoreSettings:
    """Store settings, read once per process."""
    return StoreSettings()


@lru_cache
def get_model_settings() -> ModelSettings:
    """Model settings, read once per process."""
    return ModelSettings()


@lru_cache
def get_source_settings() -> SourceSettings:
    """Page-fetching settings, read once per process."""
    return SourceSettings()


@lru_cache
def get_mediawiki_settings() -> MediaWikiSettings:
    """Polled-MediaWiki settings (``RAGBOT_MEDIAWIKI_*``), read once per process."""
    return MediaWikiSettings()


@lru_cache
def get_ingest_settings() -> IngestSettings:
    """Ingest settings, read once per process."""
    return IngestSettings()


@lru_cache
def get_worker_settings() -> WorkerSettings:
    """Worker settings, read once per process."""
    return WorkerSettings()


@lru_cache
def get_contextual_settings() -> ContextualSettings:
    """Contextual retrieval settings, read once per process."""
    return ContextualSettings()


@lru_cache
def get_retriever_settings() -> RetrieverSettings:
    """Retriever settings, read once per process."""
    return RetrieverSettings()


@lru_cache
def get_llm_settings() -> LLMSettings:
    """LLM settings, read once per process."""
    return LLMSettings()


@lru_cache
def get_chat_settings() -> ChatSettings:
    """Chat settings, read once per process."""
    return ChatSettings()


@lru_cache
def get_rate_limit_settings() -> RateLimitSettings:
    """Rate limit settings, read once per process."""
    return RateLimitSettings()


@lru_cache
def get_client_settings() -> ClientSettings:
    """The CLI's outgoing key, read once per process."""
    return ClientSettings()


@lru_cache
def get_auth_settings() -> AuthSettings:
    """Authentication settings, read once per process."""
    return AuthSettings()


@lru_cache
def get_http_settings() -> HttpSettings:
    """What the HTTP services accept before routing (header limits, hosts, public URL), read once."""
    return HttpSettings()


@lru_cache
def get_observability_settings() -> ObservabilitySettings:
    """Observability settings, read once per process."""
    return ObservabilitySettings()


@lru_cache
def get_ui_settings() -> UiSettings:
    """The web UI's language settings (``RAGBOT_UI_*``), read once per process."""
    return UiSettings()


@lru_cache
def get_tracing_settings() -> TracingSettings:
    """Tracing settings (``OTEL_*``), read once per process."""
    return TracingSettings()


def clear_settings_caches() -> None:
    """Forget every cached settings object (tests change the environment between cases)."""
    for factory in (
        get_redis_settings,
        get_store_settings,
        get_model_settings,
        get_source_settings,
        get_mediawiki_settings,
        get_ingest_settings,
        get_worker_settings,
        get_contextual_settings,
        get_retriever_settings,
        get_llm_settings,
        get_chat_settings,
        get_rate_limit_settings,
        get_observability_settings,
        get_tracing_settings,
        get_auth_settings,
        get_http_settings,
        get_client_settings,
        get_ui_settings,
    ):
        factory.cache_clear()
