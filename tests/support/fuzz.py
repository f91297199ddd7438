"""Schemathesis against ingest, the retriever and chat as real processes, each on throwaway data, for a
fixed time budget per service: the fuzz tests and ``bench/security/fuzz.py`` share this setup.

Every service gets its own copy of the sample store and its own Redis key prefix and Celery queue (no
worker consumes it), so the fuzzer's deletes and config writes reach nothing another test reads; all is
removed afterwards. Chat runs the embedded llama.cpp model with a short answer cap, so LLM routes stay
fast. Schemathesis runs as its CLI (``schemathesis run``, the documented interface, with ``--max-time``)
and leaves a JSON run report and a HAR of every exchange, from which cases and 5xx are counted.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from support.chat_corpus import write_definition
from support.chat_stack import sample_store
from support.processes import (
    ServiceProcess,
    delete_redis_prefix,
    free_port,
    local_service,
    service_env,
)

SERVICES = ("ingest", "retriever", "chat")
CHECKS = ("not_a_server_error", "status_code_conformance", "response_schema_conformance")
# Seconds of fuzzing per service in `make test` (about 400 to 1,500 cases each on two cores): with the
# start (about 50 s on a loaded 2-core machine) and each run's spec loading, the fuzz stage stays within 2
# minutes, and the suite within its 20. The benchmark (bench/security/fuzz.py) hunts longer (45 s).
TEST_BUDGET_S = 15
START_TIMEOUT_S = 180.0
ANSWER_TOKENS = 8


def budget_s() -> int:
    """The per-service budget: ``RAGBOT_TEST_FUZZ_SECONDS`` when set (a longer local hunt), else 15."""
    return int(os.environ.get("RAGBOT_TEST_FUZZ_SECONDS", TEST_BUDGET_S))


def auth_headers() -> dict[str, str]:
    """Headers every fuzz request carries: ``RAGBOT_TEST_FUZZ_API_KEY`` as a bearer key when set.

    With no key configured the services trust loopback, so the default run needs none."""
    key = os.environ.get("RAGBOT_TEST_FUZZ_API_KEY", "")
    return {"Authorization": f"Bearer {key}"} if key else {}


@dataclass
class FuzzStack:
    """The three running services, their URLs and where their logs are."""

    urls: dict[str, str]
    processes: dict[str, ServiceProcess]
    root: Path

    def logs(self, name: str) -> str:
        return f"--- {name} ---\n{self.processes[name].log_tail(30)}"


@dataclass
class FuzzResult:
    """One service's Schemathesis run: its exit code, output, counts and failure groups."""

    service: str
    returncode: int
    output: str
    cases: int
    requests: int
    statuses: dict[int, int]
    failures: list[dict[str, object]] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def server_errors(self) -> int:
        """Responses with a status of 500 or more."""
        return sum(count for status, count in self.statuses.items() if status >= 500)


KEYS_ON = json.dumps(
    [
        {
            "name": "fuzz-admin",
            "scopes": ["admin", "chat", "ingest", "retrieve", "metrics"],
            "sha256": "0" * 64,
        },
    ]
)
"""A configured key nobody holds (its hash matches no key): auth is on and every caller is a stranger."""


@contextmanager
def fuzz_stack(*, redis_url: str, root: Path, keys: bool = False) -> Iterator[FuzzStack]:
    """Start ingest, the retriever and chat on their own store copies and Redis prefixes; stop them after.

    ``keys``: the services have a key configured (``KEYS_ON``), so loopback is no longer trusted."""
    root.mkdir(parents=True, exist_ok=True)
    definition = write_definition(root / "definition.json")
    ports = {name: free_port() for name in SERVICES}
    prefixes = {name: f"test-fuzz-{name}-{uuid.uuid4().hex[:10]}" for name in SERVICES}
    processes: dict[str, ServiceProcess] = {}
    for name in SERVICES:
        folder = root / name
        folder.mkdir(parents=True, exist_ok=True)
        store = folder / "store.sqlite3"
        shutil.copyfile(sample_store(), store)
        env = service_env(
            {
                "RAGBOT_DEVICE": "cpu",
                "RAGBOT_REDIS_URL": redis_url,
                "RAGBOT_REDIS_KEY_PREFIX": prefixes[name],
                "RAGBOT_WORKER_QUEUE": prefixes[name],
                "RAGBOT_STORE_BACKEND": "embedded",
                "RAGBOT_STORE_EMBEDDED_PATH": str(store),
                "RAGBOT_DOCUMENT_DEFINITION": str(definition),
                "RAGBOT_INGEST_HOST": "127.0.0.1",
                "RAGBOT_INGEST_PORT": str(ports["ingest"]),
                "RAGBOT_INGEST_ALLOWED_CALLBACK_HOSTS": '["127.0.0.1:*"]',
                "RAGBOT_RETRIEVER_HOST": "127.0.0.1",
                "RAGBOT_RETRIEVER_PORT": str(ports["retriever"]),
                "RAGBOT_CHAT_HOST": "127.0.0.1",
                "RAGBOT_CHAT_PORT": str(ports["chat"]),
                "RAGBOT_CHAT_RETRIEVER_URL": f"http://127.0.0.1:{ports['retriever']}",
                "RAGBOT_CHAT_LLM_BACKEND": "llamacpp",
                "RAGBOT_CHAT_LLM_MAX_TOKENS": str(ANSWER_TOKENS),
                "RAGBOT_CHAT_CONTEXT_MAX_CHARS": "300",
                "RAGBOT_CHAT_PARAGRAPHS_PER_PAGE": "[2, 1]",
                "RAGBOT_CHAT_LLAMACPP_PARALLEL": "2",
                "RAGBOT_CHAT_LLAMACPP_CONTEXT_TOKENS": "2048",
                "RAGBOT_PROMETHEUS_MULTIPROC_DIR": str(folder / "metrics"),
            }
        )
        for unset in ("RAGBOT_RETRIEVER_RERANKER_PATH", "RAGBOT_CHAT_PROMPTS_DIR"):
            env.pop(unset, None)
        if keys:
            env["RAGBOT_AUTH_KEYS"] = KEYS_ON
        processes[name] = local_service(
            name,
            module=f"ragbot_{name}",
            port=ports[name],
            env=env,
            log_dir=root,
            cwd=folder,
            health="readyz",
        )
    try:
        for proc in processes.values():
            proc.start()
        for proc in processes.values():
            proc.wait_healthy(timeout_s=START_TIMEOUT_S)
        urls = {name: f"http://127.0.0.1:{port}" for name, port in ports.items()}
        yield FuzzStack(urls=urls, processes=processes, root=root)
    finally:
        for proc in reversed(processes.values()):
            proc.stop()
        for prefix in prefixes.values():
            delete_redis_prefix(redis_url, prefix)


def schemathesis_command(
    *, base_url: str, max_time_s: int, report_dir: Path, headers: Mapping[str, str], seed: int | None
) -> list[str]:
    """The ``schemathesis run`` command line for one service's OpenAPI (only documented operations)."""
    command = [
        sys.executable,
        "-m",
        "schemathesis.cli",
        "run",
        f"{base_url}/openapi.json",
        "--checks",
        ",".join(CHECKS),
        "--max-time",
        str(max_time_s),
        "--workers",
        "1",
        "--request-timeout",
        "60",
        "--report",
        "json,har",
        "--report-json-path",
        str(report_dir / "run.json"),
        "--report-har-path",
        str(report_dir / "exchanges.har"),
        "--output-truncate",
        "false",
        "--no-color",
    ]
    if seed is not None:
        command += ["--seed", str(seed)]
    for name, value in headers.items():
        command += ["--header", f"{name}: {value}"]
    return command


def run_schemathesis(
    *,
    service: str,
    base_url: str,
    report_dir: Path,
    max_time_s: int | None = None,
    headers: Mapping[str, str] | None = None,
    seed: int | None = None,
) -> FuzzResult:
    """Fuzz one service for its time budget; counts come from the run's JSON report and HAR."""
    report_dir.mkdir(parents=True, exist_ok=True)
    budget = max_time_s or budget_s()
    command = schemathesis_command(
        base_url=base_url,
        max_time_s=budget,
        report_dir=report_dir,
        headers=auth_headers() if headers is None else headers,
        seed=seed,
    )
    started = time.monotonic()
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=budget + 120,
        env={**os.environ, "SCHEMATHESIS_TELEMETRY": "false", "NO_COLOR": "1"},
        check=False,
    )
    seconds = time.monotonic() - started
    report = _read_json(report_dir / "run.json")
    statuses = _har_statuses(report_dir / "exchanges.har")
    counts = report.get("test_cases")
    cases = int(counts.get("generated", 0)) if isinstance(counts, dict) else 0
    failures = report.get("failures")
    return FuzzResult(
        service=service,
        returncode=done.returncode,
        output=(done.stdout + done.stderr)[-20000:],
        cases=cases,
        requests=sum(statuses.values()),
        statuses=statuses,
        failures=list(failures) if isinstance(failures, list) else [],
        seconds=seconds,
    )


def fuzz_all(
    stack: FuzzStack, *, report_root: Path, services: Sequence[str] = SERVICES, seed: int | None = None
) -> list[FuzzResult]:
    """Fuzz each service in turn (one at a time, so none measures while another loads the machine)."""
    return [
        run_schemathesis(service=name, base_url=stack.urls[name], report_dir=report_root / name, seed=seed)
        for name in services
    ]


def _read_json(path: Path) -> dict[str, object]:
    if not path.is_file():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    return data if isinstance(data, dict) else {}


def har_exchanges(path: Path) -> list[tuple[str, str, int, str]]:
    """(method, path, status, response body) of every exchange the HAR recorded."""
    if not path.is_file():
        return []
    har = json.loads(path.read_text(encoding="utf-8"))
    return [
        (
            str(entry["request"]["method"]),
            httpx.URL(str(entry["request"]["url"])).path,
            int(entry.get("response", {}).get("status", 0)),
            str(entry.get("response", {}).get("content", {}).get("text", "")),
        )
        for entry in har.get("log", {}).get("entries", [])
    ]


def _har_statuses(path: Path) -> dict[int, int]:
    """How many responses of each status the HAR recorded (every request the fuzzer sent)."""
    counts: dict[int, int] = {}
    if not path.is_file():
        return counts
    har = json.loads(path.read_text(encoding="utf-8"))
    for entry in har.get("log", {}).get("entries", []):
        status = int(entry.get("response", {}).get("status", 0))
        counts[status] = counts.get(status, 0) + 1
    return counts
