"""Where ragbot keeps things: Redis (queue, jobs, sessions) and the search store (ES or embedded)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings

from ragbot.settings.common import settings_config


class RedisSettings(BaseSettings):
    """Redis: Celery broker, job records, events, sessions, caches."""

    model_config = settings_config("RAGBOT_REDIS_")
    url: str = "redis://127.0.0.1:6379/0"
    key_prefix: str = "ragbot"
    socket_timeout_s: float = 5.0


class StoreSettings(BaseSettings):
    """Which search store holds paragraphs, and how to reach it."""

    model_config = settings_config("RAGBOT_STORE_")
    backend: Literal["embedded", "elasticsearch"] = "embedded"
    embedded_path: Path = Path("var/ragbot.sqlite3")
    es_url: str = "http://127.0.0.1:9200"  # or several nodes of one cluster, comma-separated
    es_username: str | None = None
    es_password: SecretStr | None = None
    es_index_prefix: str = "ragbot"
    es_timeout_s: float = 10.0
    es_shards: int = 1
    es_replicas: int = 0
    # Elasticsearch kNN. quantized (default): brute force over int8 copies, the best k x oversample per
    # shard rescored on the float vectors (exact scores; faster than exact with the same top 50:
    # docs/benchmarks.md); exact: brute-force cosine over every float
    # vector (kolzchut-ragbot's semantics); approximate: HNSW. The embedded store is always exact.
    vector_search: Literal["exact", "quantized", "approximate"] = "quantized"
    hnsw_num_candidates_factor: int = 10
    quantized_oversample: float = Field(default=3.0, ge=1.0, le=10.0)

    @field_validator("es_index_prefix")
    @classmethod
    def _prefix_is_lowercase(cls, v: str) -> str:
        if not v or v != v.lower() or v[0] in "_-+" or any(c in v for c in ' "*\\<|,>/?#:'):
            raise ValueError("RAGBOT_STORE_ES_INDEX_PREFIX must be a non-empty lowercase index name")
        return v
