"""``python -m ragbot_embedder``: the Celery worker plus its metrics server (multiprocess mode).

Order matters: logging first, then the Prometheus multiprocess directory is wiped and enabled
before any metric exists, then the metrics server starts (its ``/metrics`` needs the ``metrics`` scope,
as on the HTTP services) (queue depth and dead letters sampled from
Redis at scrape time), then Celery runs the worker on the configured queue: the solo pool for
``concurrency == 1`` (models load once, in this process), prefork with that many children otherwise.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
from pathlib import Path
from typing import Any

from celery import signals

from ragbot.http.auth import Authenticator, refusal
from ragbot.messaging.jobs import JobStore
from ragbot.messaging.queue import queue_keys
from ragbot.observability.logging import configure_logging
from ragbot.observability.metrics import (
    RedisDepthCollector,
    enable_multiprocess,
    scrape_registry,
    start_metrics_server,
)
from ragbot.settings import (
    get_auth_settings,
    get_observability_settings,
    get_redis_settings,
    get_worker_settings,
)

logger = logging.getLogger("ragbot_embedder")


def worker_argv(
    *, queue: str, concurrency: int, log_level: str, beat_schedule_file: Path | None = None
) -> list[str]:
    """The ``celery worker`` command line for the configured queue and pool (with the beat embedded
    when ``beat_schedule_file`` is given: run it in exactly one worker)."""
    pool = ["--pool=solo"] if concurrency <= 1 else ["--pool=prefork", f"--concurrency={concurrency}"]
    beat = [] if beat_schedule_file is None else ["--beat", f"--schedule={beat_schedule_file}"]
    return [
        "--quiet",  # celery's global option: no banner on stdout, our JSON logs say it all
        "worker",
        f"--queues={queue}",
        *pool,
        f"--loglevel={log_level.upper()}",
        f"--hostname=embedder-{os.getpid()}@%h",
        "--without-gossip",
        "--without-mingle",
        *beat,
    ]


def main() -> None:
    """Start metrics, then run the worker until it is stopped (SIGTERM finishes the current task)."""
    observability = get_observability_settings()
    configure_logging(service="embedder", level=observability.log_level, json_lines=observability.log_json)
    worker_settings = get_worker_settings()
    redis_settings = get_redis_settings()
    multiproc_dir = observability.prometheus_multiproc_dir or Path(
        tempfile.mkdtemp(prefix="ragbot-embedder-metrics-")
    )
    enable_multiprocess(multiproc_dir)

    ready = threading.Event()

    def on_ready(**_: Any) -> None:
        ready.set()

    signals.worker_ready.connect(on_ready, weak=False, dispatch_uid="ragbot-worker-ready")
    collector = RedisDepthCollector(
        redis_url=redis_settings.url,
        queue=worker_settings.queue,
        queue_keys=queue_keys(redis_settings=redis_settings, queue=worker_settings.queue),
        dead_letter_key=JobStore.dead_letter_key_for(redis_settings.key_prefix),
        timeout_s=redis_settings.socket_timeout_s,
    )
    # /metrics needs the metrics scope, as on the HTTP services (RAGBOT_AUTH_*).
    authn = Authenticator(get_auth_settings())
    server = start_metrics_server(
        host=worker_settings.metrics_host,
        port=worker_settings.metrics_port,
        registry=scrape_registry(collector),
        ready=ready.is_set,
        guard=lambda headers, peer: refusal(authn, scope="metrics", headers=headers, peer=peer),
    )
    logger.info(
        "metrics on http://%s:%s/metrics",
        worker_settings.metrics_host,
        worker_settings.metrics_port,
        extra={"multiproc_dir": str(multiproc_dir)},
    )

    # Imported here so no metric is created before multiprocess mode is on.
    from ragbot_embedder.worker import create_worker_app

    app = create_worker_app(redis_settings=redis_settings, worker_settings=worker_settings)
    try:
        app.worker_main(
            argv=worker_argv(
                queue=worker_settings.queue,
                concurrency=worker_settings.concurrency,
                log_level=observability.log_level,
                beat_schedule_file=multiproc_dir.parent / "ragbot-celerybeat-schedule"
                if worker_settings.beat and app.conf.beat_schedule
                else None,
            )
        )
    finally:
        server.shutdown()


if __name__ == "__main__":
    main()
