"""Start ragbot services as real child processes (the helpers live in ``ragbot.dev.servers``), with the
environment every test stack gives them and the clean-up of what a run left in Redis and Elasticsearch."""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import tempfile
import warnings
from collections.abc import Mapping
from pathlib import Path

import httpx
import redis

from ragbot.dev.servers import ServiceProcess, free_port, local_service

__all__ = [
    "ServiceProcess",
    "delete_es_prefix",
    "delete_redis_prefix",
    "exported_models",
    "free_port",
    "local_service",
    "run_services_on_onnx",
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


# The sentence-transformers model of the shipped definition that child processes of the tests load from
# an ONNX export (``run_services_on_onnx``); e5 stays packaged.
ONNX_MODELS = ("all-MiniLM-L6-v2",)
_services_on_onnx = False


def run_services_on_onnx() -> None:
    """From now on, processes started with ``service_env`` load all-MiniLM-L6-v2 from an ONNX export
    (``exported_models``), as the CPU images do (deploy/Dockerfile), unless their environment names a
    ``RAGBOT_MODELS_LOCATION`` of its own. tests/conftest.py turns this on; the benches leave it off.

    Importing sentence-transformers costs a process about 14 s of CPU on two cores (torch, scipy,
    sklearn, sympy); ONNX Runtime about one. The retriever's queries run on ONNX either way
    (``query_runtime`` "auto"), so what changes is the worker's passages, which agree with torch's to a
    cosine of 0.9999 (tests/unit/test_onnx_folder.py); the in-process tests keep torch."""
    global _services_on_onnx
    _services_on_onnx = True


@functools.cache
def exported_models() -> Path:
    """A folder holding ``ONNX_MODELS`` exported by ``ragbot export-onnx``'s code, made once per test
    process (a few seconds) and removed when it exits."""
    from ragbot.embedders import resolve_model
    from ragbot.embedders.onnx_folder import export_sentence_transformer
    from ragbot.settings import ModelSettings

    folder = Path(tempfile.mkdtemp(prefix="ragbot-test-onnx-"))
    atexit.register(shutil.rmtree, folder, True)
    packaged = ModelSettings(models_location=None, device="cpu")
    for name in ONNX_MODELS:
        spec = resolve_model(name, settings=packaged)
        assert spec.path is not None, f"{name} is not a packaged sentence-transformers model"
        with warnings.catch_warnings():  # torch's tracer notes on transformers' code, as in `export-onnx`
            warnings.simplefilter("ignore")
            export_sentence_transformer(spec.path, folder / name)
    return folder


def service_env(overrides: Mapping[str, str]) -> dict[str, str]:
    """Ours, offline, with JSON logs and no inherited Prometheus directory, plus ``overrides``.

    A real process answers only the hosts a deployment's default does (loopback), not the in-process
    tests' any (tests/conftest.py), unless ``overrides`` say otherwise. Under ``run_services_on_onnx``
    it loads all-MiniLM-L6-v2 from ``exported_models``."""
    env = {
        **{k: v for k, v in os.environ.items() if k != "RAGBOT_HTTP_TRUSTED_HOSTS"},
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "RAGBOT_LOG_JSON": "true",
        **overrides,
    }
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    if _services_on_onnx and "RAGBOT_MODELS_LOCATION" not in env:
        env["RAGBOT_MODELS_LOCATION"] = str(exported_models())
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
