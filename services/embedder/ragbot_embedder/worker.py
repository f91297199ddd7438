"""The embedder worker's Celery app: its tasks registered and its process signals connected.

``create_worker_app`` registers the tasks (``tasks.py``) against a ``RuntimeHolder`` (``runtime.py``)
and hooks ``worker_process_init`` (sent by both the solo and prefork pools), which builds the
``Runtime`` once per process (after turning tracing on there when ``OTEL_*`` say so: a span per task,
joined to the sender's trace), and ``worker_process_shutdown``, which closes it. Tests pass their own
holder, with a runtime installed.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from celery import Celery, signals

from ragbot.messaging.queue import create_celery_app
from ragbot.messaging.reconcile_schedule import reconcile_beat_schedule
from ragbot.observability.metrics import mark_process_dead
from ragbot.observability.tracing import configure_tracing, shutdown_tracing
from ragbot.settings import RedisSettings, WorkerSettings, get_source_settings, get_tracing_settings
from ragbot_embedder.runtime import RuntimeHolder
from ragbot_embedder.tasks import register_tasks

logger = logging.getLogger(__name__)


def _keep_our_logging(**_: Any) -> None:
    """Connected to ``setup_logging`` so Celery leaves the JSON logging configuration alone."""


def connect_process_signals(holder: RuntimeHolder) -> None:
    """Build the holder's runtime when a worker process starts, close it when the process ends."""

    def on_process_init(**_: Any) -> None:
        try:
            configure_tracing(service="embedder", settings=get_tracing_settings())
            holder.get()
        except Exception:
            logger.critical("worker process could not start", exc_info=True)
            raise

    def on_process_shutdown(**_: Any) -> None:
        holder.release()
        shutdown_tracing()
        mark_process_dead(os.getpid())

    uid = id(holder)
    signals.worker_process_init.connect(on_process_init, weak=False, dispatch_uid=f"ragbot-init-{uid}")
    signals.worker_process_shutdown.connect(
        on_process_shutdown, weak=False, dispatch_uid=f"ragbot-shutdown-{uid}"
    )


def create_worker_app(
    *, redis_settings: RedisSettings, worker_settings: WorkerSettings, runtime: RuntimeHolder | None = None
) -> Celery:
    """The worker's Celery app with its tasks registered and the process hooks connected."""
    holder = runtime or RuntimeHolder()
    app = create_celery_app(
        redis_settings=redis_settings,
        queue=worker_settings.queue,
        name="ragbot-embedder",
        visibility_timeout_s=worker_settings.visibility_timeout_s,
    )
    # A message a killed worker never acknowledged is restored once its visibility timeout passed;
    # sweep for such messages every ``unacked_restore_interval_s`` (kombu's default is ~100 s).
    app.conf.broker_transport_options = {
        **app.conf.broker_transport_options,
        "unacked_restore_interval": worker_settings.unacked_restore_interval_s,
        "unacked_restore_throttle": 1,
    }
    app.conf.beat_schedule = {
        **(app.conf.beat_schedule or {}),
        **reconcile_beat_schedule(settings=get_source_settings(), queue=worker_settings.queue),
    }
    register_tasks(app, worker_settings=worker_settings, runtime=holder)
    connect_process_signals(holder)
    signals.setup_logging.connect(_keep_our_logging, weak=False, dispatch_uid="ragbot-logging")
    return app
