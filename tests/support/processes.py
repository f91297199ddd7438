"""Start ragbot services as real child processes (the helpers live in ``ragbot.dev.servers``), with the
environment every test stack gives them and the clean-up of what a run left in Redis and Elasticsearch."""

from __future__ import annotations

import os
from collections.abc import Mapping

import httpx
import redis

from ragbot.dev.servers import ServiceProcess, free_port, local_service

__all__ = [
    "ServiceProcess",
    "delete_es_prefix",
    "delete_redis_prefix",
    "free_port",
    "local_service",
    "service_env",
]


def service_env(overrides: Mapping[str, str]) -> dict[str, str]:
    """Ours, offline, with JSON logs and no inherited Prometheus directory, plus ``overrides``.

    A real process answers only the hosts a deployment's default does (loopback), not the in-process
    tests' any (tests/conftest.py), unless ``overrides`` say otherwise."""
    env = {
        **{k: v for k, v in os.environ.items() if k != "RAGBOT_HTTP_TRUSTED_HOSTS"},
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "RAGBOT_LOG_JSON": "true",
        **overrides,
    }
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    return env


def delete_redis_prefix(url: str, prefix: str) -> None:
    """Delete the run's keys: job records, events and every Celery key live under the prefix."""
    client = redis.Redis.from_url(url)
    try:
        keys = list(client.scan_iter(match=f"{prefix}:*", count=500))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


def delete_es_prefix(url: str, prefix: str) -> None:
    """Delete the run's indices and templates by name (wildcard deletes are refused by default)."""
    indices = httpx.get(f"{url}/_cat/indices/{prefix}*", params={"format": "json", "h": "index"}, timeout=30)
    names = [row["index"] for row in indices.json()] if indices.status_code == 200 else []
    if names:
        httpx.delete(f"{url}/{','.join(names)}", timeout=60).raise_for_status()
    templates = httpx.get(f"{url}/_index_template/{prefix}*", timeout=30)
    if templates.status_code == 200:
        for template in templates.json().get("index_templates", []):
            httpx.delete(f"{url}/_index_template/{template['name']}", timeout=30).raise_for_status()
