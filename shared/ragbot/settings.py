"""Typed settings, one class per concern, built by cached factories; nothing is read at import.

Every variable is documented in `.env.example`. Services receive settings through their composition
root (``app.py`` / ``worker.py``) and FastAPI dependencies, never by reading the environment.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


def _config(prefix: str) -> SettingsConfigDict:
    return SettingsConfigDict(env_prefix=prefix, env_file=".env", extra="ignore", env_nested_delimiter="__")


class RedisSettings(BaseSettings):
    """Redis: Celery broker, job records, events, sessions, caches."""

    model_config = _config("RAGBOT_REDIS_")
    url: str = "redis://127.0.0.1:6379/0"
    key_prefix: str = "ragbot"
    socket_timeout_s: float = 5.0


class StoreSettings(BaseSettings):
    """Which search store holds paragraphs, and how to reach it."""

    model_config = _config("RAGBOT_STORE_")
    backend: Literal["embedded", "elasticsearch"] = "embedded"
    embedded_path: Path = Path("var/ragbot.sqlite3")
    es_url: str = "http://127.0.0.1:9200"
    es_username: str | None = None
    es_password: SecretStr | None = None
    es_index_prefix: str = "ragbot"
    es_timeout_s: float = 10.0
    es_shards: int = 1
    es_replicas: int = 0
    # exact: brute-force cosine over every vector (the seed's semantics); approximate: HNSW kNN.
    vector_search: Literal["exact", "approximate"] = "exact"
    hnsw_num_candidates_factor: int = 10

    @field_validator("es_index_prefix")
    @classmethod
    def _prefix_is_lowercase(cls, v: str) -> str:
        if not v or v != v.lower() or v[0] in "_-+" or any(c in v for c in ' "*\\<|,>/?#:'):
            raise ValueError("RAGBOT_STORE_ES_INDEX_PREFIX must be a non-empty lowercase index name")
        return v


class ModelSettings(BaseSettings):
    """The document definition file and where embedding models come from."""

    model_config = _config("RAGBOT_")
    document_definition: Path = Path("config/definition.json")
    models_location: Path | None = None
    device: Literal["auto", "cpu", "cuda"] = "auto"
    embed_batch_size: int = Field(default=32, ge=1, le=4096)
    query_cache_size: int = Field(default=4096, ge=0)


class IngestSettings(BaseSettings):
    """The ingest service: wiki pings, pushes, uploads, jobs."""

    model_config = _config("RAGBOT_INGEST_")
    host: str = "127.0.0.1"
    port: int = 8001
    # Hosts a ping's callback_url may point at (no SSRF). "*" allows any (development only).
    allowed_callback_hosts: list[str] = Field(default_factory=lambda: ["127.0.0.1", "localhost"])
    max_page_bytes: int = 5 * 1024 * 1024
    fetch_timeout_s: float = 10.0
    max_upload_bytes: int = 20 * 1024 * 1024


class WorkerSettings(BaseSettings):
    """The embedder worker: retries, batching, metrics port."""

    model_config = _config("RAGBOT_WORKER_")
    max_retries: int = Field(default=5, ge=0, le=50)
    retry_backoff_s: float = 1.0
    retry_backoff_max_s: float = 60.0
    concurrency: int = 1
    metrics_port: int = 9101
    paragraph_tokens: int = Field(default=512, ge=16, le=8192)
    queue: str = "ragbot.index"


class RetrieverSettings(BaseSettings):
    """The retriever service."""

    model_config = _config("RAGBOT_RETRIEVER_")
    host: str = "127.0.0.1"
    port: int = 8002
    default_retrieval_size: int = 50
    max_query_chars: int = 2000


class ChatSettings(BaseSettings):
    """The chat service."""

    model_config = _config("RAGBOT_CHAT_")
    host: str = "127.0.0.1"
    port: int = 8003
    retriever_url: str = "http://127.0.0.1:8002"


class ObservabilitySettings(BaseSettings):
    """Logging and metrics shared by every process."""

    model_config = _config("RAGBOT_")
    log_level: str = "INFO"
    log_json: bool = True
    prometheus_multiproc_dir: Path | None = None


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
def get_ingest_settings() -> IngestSettings:
    """Ingest settings, read once per process."""
    return IngestSettings()


@lru_cache
def get_worker_settings() -> WorkerSettings:
    """Worker settings, read once per process."""
    return WorkerSettings()


@lru_cache
def get_retriever_settings() -> RetrieverSettings:
    """Retriever settings, read once per process."""
    return RetrieverSettings()


@lru_cache
def get_chat_settings() -> ChatSettings:
    """Chat settings, read once per process."""
    return ChatSettings()


@lru_cache
def get_observability_settings() -> ObservabilitySettings:
    """Observability settings, read once per process."""
    return ObservabilitySettings()


def clear_settings_caches() -> None:
    """Forget every cached settings object (tests change the environment between cases)."""
    for factory in (
        get_redis_settings,
        get_store_settings,
        get_model_settings,
        get_ingest_settings,
        get_worker_settings,
        get_retriever_settings,
        get_chat_settings,
        get_observability_settings,
    ):
        factory.cache_clear()
