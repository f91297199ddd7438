"""Prometheus metrics of every ragbot process, created lazily per registry (tests pass a fresh one).

HTTP services expose the default registry on ``/metrics``. The embedder worker runs in multiprocess
mode: ``enable_multiprocess`` wipes ``PROMETHEUS_MULTIPROC_DIR`` and must run before any metric is
created; the worker's metrics server then aggregates every process's files and samples the queue
depth and the dead-letter count from Redis at scrape time. Every scrape also carries
``ragbot_build_info`` (version, Python, git sha when known).
"""

from __future__ import annotations

import json
import logging
import os
import platform
import shutil
import subprocess
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Generic, TypeVar

import redis
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
    values,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ragbot import __version__
from ragbot.messaging.redis import REDIS_ERRORS, build_sync_redis
from ragbot.settings import get_observability_settings

logger = logging.getLogger(__name__)

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
HTTP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
TASK_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0)
STAGE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
LAG_BUCKETS = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0, 21600.0, 86400.0, 604800.0)


@dataclass(frozen=True, slots=True)
class HttpMetrics:
    """Request count and latency of an HTTP service, labelled by route template (not raw path), and
    whether each dependency answered the readiness check of the last scrape."""

    requests: Counter
    duration: Histogram
    dependency_up: Gauge


@dataclass(frozen=True, slots=True)
class WorkerMetrics:
    """What the embedder worker records per task."""

    task_duration: Histogram
    paragraphs: Counter
    build_seconds: Histogram
    failures: Counter
    retries: Counter
    freshness_lag: Histogram
    dead_letters: Counter


@dataclass(frozen=True, slots=True)
class RetrievalMetrics:
    """How long each retrieval stage took (embed, dense, bm25, fusion, rerank, total), and whether the
    generation queried stores what the definition file says."""

    stage_seconds: Histogram
    definition_differs: Gauge

    def observe(self, timings_ms: dict[str, float]) -> None:
        """Record one retrieval's stage timings (the response's ``timings_ms``)."""
        for stage, ms in timings_ms.items():
            self.stage_seconds.labels(stage).observe(ms / 1000)


M = TypeVar("M")


class PerRegistry(Generic[M]):
    """One set of metrics per registry, made on first use and dropped with its registry.

    Keyed by the registry itself (weakly), not by ``id()``: a test's registry that is garbage
    collected may hand its id to the next one, which would then get metrics registered elsewhere.
    """

    def __init__(self, make: Callable[[CollectorRegistry], M]) -> None:
        self._make = make
        self._lock = threading.Lock()
        self._made: weakref.WeakKeyDictionary[CollectorRegistry, M] = weakref.WeakKeyDictionary()

    def __call__(self, registry: CollectorRegistry | None = None) -> M:
        """The metrics of ``registry`` (the default one unless given)."""
        registry = REGISTRY if registry is None else registry
        with self._lock:
            made = self._made.get(registry)
            if made is None:
                made = self._made[registry] = self._make(registry)
            return made


def _new_http_metrics(registry: CollectorRegistry) -> HttpMetrics:
    return HttpMetrics(
        requests=Counter(
            "ragbot_http_requests_total",
            "HTTP requests by service, route template, method and status code.",
            ["service", "route", "method", "status"],
            registry=registry,
        ),
        duration=Histogram(
            "ragbot_http_request_duration_seconds",
            "HTTP request latency by service and route template.",
            ["service", "route"],
            buckets=HTTP_BUCKETS,
            registry=registry,
        ),
        dependency_up=Gauge(
            "ragbot_dependency_up",
            "1 when the dependency (store, redis, llm, retriever) answered the service's readiness check"
            " at the last scrape.",
            ["service", "dependency"],
            registry=registry,
        ),
    )


def _new_worker_metrics(registry: CollectorRegistry) -> WorkerMetrics:
    return WorkerMetrics(
        task_duration=Histogram(
            "ragbot_task_duration_seconds",
            "Embedder task duration by task and outcome (done, skipped, retrying, failed).",
            ["task", "outcome"],
            buckets=TASK_BUCKETS,
            registry=registry,
        ),
        paragraphs=Counter(
            "ragbot_paragraphs_indexed_total",
            "Paragraphs embedded and written, per model (rate() gives paragraphs per second).",
            ["model"],
            registry=registry,
        ),
        build_seconds=Histogram(
            "ragbot_paragraph_build_seconds",
            "Time to split a page and embed its paragraphs with every model.",
            buckets=TASK_BUCKETS,
            registry=registry,
        ),
        failures=Counter(
            "ragbot_task_failures_total",
            "Tasks that ended failed, by task and reason.",
            ["task", "reason"],
            registry=registry,
        ),
        retries=Counter(
            "ragbot_task_retries_total",
            "Task retries scheduled, by task and reason.",
            ["task", "reason"],
            registry=registry,
        ),
        freshness_lag=Histogram(
            "ragbot_freshness_lag_seconds",
            "Time the page became searchable minus its revision time.",
            buckets=LAG_BUCKETS,
            registry=registry,
        ),
        dead_letters=Counter(
            "ragbot_dead_letters_total",
            "Jobs moved to the dead-letter list after their last attempt.",
            ["task"],
            registry=registry,
        ),
    )


def _new_retrieval_metrics(registry: CollectorRegistry) -> RetrievalMetrics:
    return RetrievalMetrics(
        stage_seconds=Histogram(
            "ragbot_retrieval_stage_seconds",
            "Time spent in each retrieval stage (embed, dense, bm25, fusion, rerank, total).",
            ["stage"],
            buckets=STAGE_BUCKETS,
            registry=registry,
        ),
        definition_differs=Gauge(
            "ragbot_definition_differs",
            "1 when the definition file stores other fields or models than the live index generation the"
            " retriever queries (queries use the generation's own definition; `ragbot reembed` is due).",
            registry=registry,
        ),
    )


# The retriever's stage timings, once per registry (the default one unless given).
retrieval_metrics = PerRegistry(_new_retrieval_metrics)
# The HTTP metrics (request count and latency), once per registry (the default one unless given).
http_metrics = PerRegistry(_new_http_metrics)
# The worker's metrics, once per registry (create after ``enable_multiprocess``).
worker_metrics = PerRegistry(_new_worker_metrics)


def enable_multiprocess(directory: Path) -> None:
    """Wipe and (re)create the multiprocess directory and switch prometheus_client to it.

    Call before any metric is created in this process: prometheus_client picks its value storage from
    the environment, so we set the variable and refresh its choice here rather than at import.
    """
    directory = Path(directory)
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True, exist_ok=True)
    os.environ[MULTIPROC_ENV] = str(directory)
    values.ValueClass = values.get_value_class()  # type: ignore[no-untyped-call]


def multiprocess_enabled() -> bool:
    """True when this process writes metrics to a multiprocess directory."""
    return bool(os.environ.get(MULTIPROC_ENV))


def mark_process_dead(pid: int) -> None:
    """Forget a dead child's live gauges (call from the worker's process-shutdown hook)."""
    if multiprocess_enabled():
        multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]


def git_sha() -> str:
    """The build's git sha: ``RAGBOT_GIT_SHA`` (images set it at build), else the checkout's, else ""."""
    configured = get_observability_settings().git_sha
    if configured:
        return configured
    try:
        result = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=2,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return result.stdout.strip() if result.returncode == 0 else ""


class BuildInfoCollector(Collector):
    """``ragbot_build_info{version, python, git_sha} 1``, the labels read once, at the first scrape."""

    def __init__(self) -> None:
        self._labels: tuple[str, str, str] | None = None

    def collect(self) -> Iterable[Metric]:
        """One gauge sample whose labels say what is running."""
        if self._labels is None:
            self._labels = (__version__, platform.python_version(), git_sha())
        info = GaugeMetricFamily(
            "ragbot_build_info",
            "The running build: ragbot version, Python version, git sha.",
            labels=BUILD_INFO_LABELS,
        )
        info.add_metric(list(self._labels), 1.0)
        yield info


BUILD_INFO_LABELS = ["version", "python", "git_sha"]
_build_info = BuildInfoCollector()


def scrape_registry(*extra: Collector) -> CollectorRegistry:
    """The registry to expose: every process's files in multiprocess mode, else the default one; both
    with ``ragbot_build_info`` and the ``extra`` collectors."""
    extra = (_build_info, *extra)
    if not multiprocess_enabled():
        for collector in extra:
            _register_once(REGISTRY, collector)
        return REGISTRY
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    for collector in extra:
        registry.register(collector)
    return registry


_registered: set[int] = set()


def _register_once(registry: CollectorRegistry, collector: Collector) -> None:
    key = id(collector)
    if key not in _registered:
        registry.register(collector)
        _registered.add(key)


def render(registry: CollectorRegistry) -> tuple[bytes, str]:
    """The exposition text and its content type."""
    return generate_latest(registry), CONTENT_TYPE_LATEST


class RedisDepthCollector(Collector):
    """Samples queue depth (LLEN of the Celery queue keys) and dead letters from Redis at scrape time."""

    def __init__(
        self,
        *,
        redis_url: str,
        queue: str,
        queue_keys: Sequence[str],
        dead_letter_key: str,
        timeout_s: float = 2.0,
    ) -> None:
        self.redis_url = redis_url
        self.queue = queue
        self.queue_keys = tuple(queue_keys)
        self.dead_letter_key = dead_letter_key
        self.timeout_s = timeout_s
        self._client: redis.Redis | None = None

    def _redis(self) -> redis.Redis:
        if self._client is None:
            self._client = build_sync_redis(url=self.redis_url, timeout_s=self.timeout_s)
        return self._client

    def collect(self) -> Iterable[Metric]:
        """Two gauges; when Redis does not answer, ``ragbot_redis_up`` says so and depths are absent."""
        up = GaugeMetricFamily("ragbot_redis_up", "1 when Redis answered the last scrape.")
        try:
            pipe = self._redis().pipeline(transaction=False)
            for key in self.queue_keys:
                pipe.llen(key)
            pipe.llen(self.dead_letter_key)
            counts = [int(c) for c in pipe.execute()]
        except REDIS_ERRORS as exc:
            logger.warning("metrics: redis unavailable for queue depth", extra={"error": str(exc)})
            up.add_metric([], 0.0)
            yield up
            return
        up.add_metric([], 1.0)
        yield up
        depth = GaugeMetricFamily("ragbot_queue_depth", "Messages waiting in the queue.", labels=["queue"])
        depth.add_metric([self.queue], float(sum(counts[:-1])))
        yield depth
        # Not ``ragbot_dead_letters``: that name is the ``ragbot_dead_letters_total`` counter's family.
        dead = GaugeMetricFamily("ragbot_dead_letter_jobs", "Jobs in the dead-letter list now.")
        dead.add_metric([], float(counts[-1]))
        yield dead


MetricsGuard = Callable[[Mapping[str, str], "str | None"], "tuple[int, str] | None"]
"""Given a scrape's headers and peer address: None to serve it, or (401/403, why) to refuse it."""


class _MetricsHandler(BaseHTTPRequestHandler):
    registry: CollectorRegistry
    ready: Callable[[], bool]
    guard: MetricsGuard | None

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            refused = self.guard(dict(self.headers.items()), self.client_address[0]) if self.guard else None
            if refused is not None:
                status, reason = refused
                body = json.dumps({"detail": reason}).encode()
                self._reply(status, body, "application/json", auth=status == 401)
                return
            body, ctype = render(self.registry)
            self._reply(200, body, ctype)
        elif path == "/healthz":
            self._reply(200, b'{"status":"ok"}', "application/json")
        elif path == "/readyz":
            ok = self.ready()
            body = b'{"ready":true}' if ok else b'{"ready":false}'
            self._reply(200 if ok else 503, body, "application/json")
        else:
            self._reply(404, b'{"detail":"Not Found"}', "application/json")

    def _reply(self, status: int, body: bytes, ctype: str, *, auth: bool = False) -> None:
        self.send_response(status)
        if auth:
            self.send_header("WWW-Authenticate", 'Bearer realm="ragbot"')
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Scrapes are frequent; keep them out of the logs."""


def start_metrics_server(
    *,
    host: str,
    port: int,
    registry: CollectorRegistry,
    ready: Callable[[], bool],
    guard: MetricsGuard | None = None,
) -> ThreadingHTTPServer:
    """Serve /metrics (to whom ``guard`` lets through: the ``metrics`` scope), /healthz and /readyz from a
    daemon thread (processes without an HTTP app)."""
    attributes = {
        "registry": registry,
        "ready": staticmethod(ready),
        "guard": staticmethod(guard) if guard else None,
    }
    handler = type("MetricsHandler", (_MetricsHandler,), attributes)
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="ragbot-metrics", daemon=True)
    thread.start()
    return server
