"""The Celery app shared by ingest (sender) and the embedder (worker), and a by-name task sender.

Services never import each other's tasks: ingest sends ``embedder.index_page`` /
``embedder.delete_page`` by name with the command as JSON and the request id in the headers.
Reliability settings follow Celery's guide for idempotent tasks: acknowledged late, prefetch 1,
re-queued when a worker dies mid-task. Every Celery key in Redis sits under
``<RedisSettings.key_prefix>:celery:`` so parallel deployments (and test runs) never collide.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

import redis
from celery import Celery, Task
from kombu.exceptions import KombuError, OperationalError
from pydantic import BaseModel

from ragbot.errors import DependencyUnavailable
from ragbot.observability.logging import get_request_id
from ragbot.schemas.messages import DELETE_PAGE_TASK, INDEX_PAGE_TASK
from ragbot.settings import RedisSettings

logger = logging.getLogger(__name__)

REQUEST_ID_HEADER = "request_id"
# kombu's Redis transport keeps one list per priority step; priority 0 is the plain queue name.
_PRIORITY_SEP = "\x06\x16"
_PRIORITY_STEPS = (0, 3, 6, 9)
DEFAULT_VISIBILITY_TIMEOUT_S = 3600


def celery_key_prefix(redis_settings: RedisSettings) -> str:
    """The prefix of every Celery key in Redis."""
    return f"{redis_settings.key_prefix}:celery:"


def create_celery_app(
    *,
    redis_settings: RedisSettings,
    queue: str,
    name: str = "ragbot",
    visibility_timeout_s: int = DEFAULT_VISIBILITY_TIMEOUT_S,
) -> Celery:
    """A configured Celery app; connects lazily, so building it opens nothing."""
    prefix = celery_key_prefix(redis_settings)
    transport: dict[str, Any] = {
        "global_keyprefix": prefix,
        # An unacknowledged message returns to the queue after this long (worker killed mid-task).
        "visibility_timeout": visibility_timeout_s,
        "socket_timeout": redis_settings.socket_timeout_s,
        "socket_connect_timeout": redis_settings.socket_timeout_s,
    }
    app = Celery(name, set_as_current=False)
    app.conf.update(
        broker_url=redis_settings.url,
        result_backend=redis_settings.url,
        result_backend_transport_options={"global_keyprefix": prefix},
        # Job records in Redis carry the state; Celery's result objects would only duplicate it.
        task_ignore_result=True,
        task_default_queue=queue,
        task_routes={INDEX_PAGE_TASK: {"queue": queue}, DELETE_PAGE_TASK: {"queue": queue}},
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        enable_utc=True,
        broker_transport_options=transport,
        broker_connection_retry_on_startup=True,
        broker_connection_timeout=redis_settings.socket_timeout_s,
        task_publish_retry=True,
        task_publish_retry_policy={
            "max_retries": 3,
            "interval_start": 0.1,
            "interval_step": 0.5,
            "interval_max": 1.0,
        },
        worker_hijack_root_logger=False,
        worker_redirect_stdouts=False,
        worker_send_task_events=False,
    )
    return app


def queue_keys(*, redis_settings: RedisSettings, queue: str) -> list[str]:
    """The Redis lists holding a queue's waiting messages (for the queue-depth gauge)."""
    prefix = celery_key_prefix(redis_settings)
    return [f"{prefix}{queue}" if p == 0 else f"{prefix}{queue}{_PRIORITY_SEP}{p}" for p in _PRIORITY_STEPS]


def task_request_id(task: Task[Any, Any]) -> str | None:
    """The request id a task was sent with (from its headers), if any."""
    value = getattr(task.request, REQUEST_ID_HEADER, None)
    return value if isinstance(value, str) and value else None


def _summary(message: BaseModel) -> str:
    ids = {k: getattr(message, k) for k in ("job_id", "page_id", "revision_id") if hasattr(message, k)}
    return f"{{'message': {type(message).__name__}({', '.join(f'{k}={v!r}' for k, v in ids.items())})}}"


class TaskSender:
    """Sends commands to the embedder by task name, off the event loop, with the request id."""

    def __init__(self, app: Celery, *, queue: str) -> None:
        self.app = app
        self.queue = queue

    async def send(
        self, *, task: str, message: BaseModel, request_id: str | None = None, countdown: float | None = None
    ) -> str:
        """Publish one command (``countdown``: not before that many seconds); a broker failure becomes
        ``DependencyUnavailable('redis')``."""
        rid = request_id or get_request_id()
        kwargs: Mapping[str, Any] = {"message": message.model_dump(mode="json")}
        try:
            result = await asyncio.to_thread(
                self.app.send_task,
                task,
                kwargs=dict(kwargs),
                queue=self.queue,
                headers={REQUEST_ID_HEADER: rid} if rid else None,
                # Celery logs these instead of the arguments: an inline page can be megabytes.
                argsrepr="()",
                kwargsrepr=_summary(message),
                # Job records carry the outcome; never subscribe to a result we will not read.
                ignore_result=True,
                countdown=countdown,
            )
        except (OperationalError, KombuError, redis.RedisError, OSError) as exc:
            logger.error("could not enqueue task", extra={"task": task, "error": repr(exc)})
            raise DependencyUnavailable(f"could not enqueue {task}: {exc}", dependency="redis") from None
        return str(result.id)

    def close(self) -> None:
        """Release the broker connections."""
        self.app.close()
