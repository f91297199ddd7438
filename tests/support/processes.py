"""Start ragbot services as real child processes (the helpers live in ``ragbot.dev.servers``), with the
environment every test stack gives them and the clean-up of what a run left in Redis and Elasticsearch."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

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
    "stack_env",
    "stack_processes",
]

# The settings prefix that names each process's own host and port.
_PORT_SETTINGS = {"ingest": "INGEST", "retriever": "RETRIEVER", "chat": "CHAT", "worker": "WORKER_METRICS"}
# Each process's module and the probe that says it can serve: the worker is ready once its models are.
_PROCESSES = {
    "ingest": ("ragbot_ingest", "healthz"),
    "worker": ("ragbot_embedder", "readyz"),
    "retriever": ("ragbot_retriever", "healthz"),
    "chat": ("ragbot_chat", "readyz"),
}


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


def stack_env(
    *,
    definition: Path,
    redis_url: str,
    prefix: str,
    tmp: Path,
    ports: Mapping[str, int],
    store: str = "embedded",
    es_url: str = "",
    queue: str | None = None,
    overrides: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """What every test and bench stack gives ingest, the worker, the retriever and chat: one definition,
    one Redis prefix and queue, one store (the embedded file under ``tmp`` or Elasticsearch indices under
    ``prefix``), each process on its loopback port from ``ports`` (``ingest``, ``retriever``, ``chat``,
    ``worker`` for its metrics port), callbacks to loopback allowed; then ``overrides``."""
    env = {
        "RAGBOT_DOCUMENT_DEFINITION": str(definition),
        "RAGBOT_DEVICE": "cpu",
        "RAGBOT_REDIS_URL": redis_url,
        "RAGBOT_REDIS_KEY_PREFIX": prefix,
        "RAGBOT_STORE_BACKEND": store,
        "RAGBOT_WORKER_QUEUE": queue or prefix,
        "RAGBOT_INGEST_ALLOWED_CALLBACK_HOSTS": '["127.0.0.1:*"]',
        "RAGBOT_PROMETHEUS_MULTIPROC_DIR": str(tmp / "metrics"),
    }
    if store == "embedded":
        env["RAGBOT_STORE_EMBEDDED_PATH"] = str(tmp / "ragbot.sqlite3")
    else:
        env["RAGBOT_STORE_ES_URL"] = es_url
        env["RAGBOT_STORE_ES_INDEX_PREFIX"] = prefix
    for service, port in ports.items():
        setting = _PORT_SETTINGS[service]
        env[f"RAGBOT_{setting}_HOST"] = "127.0.0.1"
        env[f"RAGBOT_{setting}_PORT"] = str(port)
    return service_env({**env, **(overrides or {})})


def stack_processes(
    ports: Mapping[str, int], env: Mapping[str, str], *, log_dir: Path, cwd: Path | None = None
) -> list[ServiceProcess]:
    """One process per entry of ``ports`` (as ``stack_env`` names them), in that order, not yet started."""
    return [
        local_service(
            name,
            module=_PROCESSES[name][0],
            port=port,
            env=env,
            log_dir=log_dir,
            cwd=cwd,
            health=_PROCESSES[name][1],
        )
        for name, port in ports.items()
    ]


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
