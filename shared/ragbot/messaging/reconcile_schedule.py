"""The scheduled reconcile's Celery beat entry: the safety net behind the wiki's pings."""

from __future__ import annotations

from typing import Any

from ragbot.schemas.messages import RECONCILE_WIKI_TASK, ReconcileWiki
from ragbot.settings import SourceSettings

SCHEDULED_RECONCILE_JOB = "reconcile-scheduled"


def reconcile_beat_schedule(*, settings: SourceSettings, queue: str) -> dict[str, dict[str, Any]]:
    """``{name: entry}`` for ``app.conf.beat_schedule``; empty without a page list or an interval."""
    if not settings.wiki_list_url or settings.reconcile_interval_s <= 0:
        return {}
    message = ReconcileWiki(
        job_id=SCHEDULED_RECONCILE_JOB,
        list_url=settings.wiki_list_url,
        callback_url=settings.wiki_callback_url,
        max_remove_share=settings.reconcile_max_remove_share,
        trigger="schedule",
    )
    return {
        "ragbot-reconcile-wiki": {
            "task": RECONCILE_WIKI_TASK,
            "schedule": settings.reconcile_interval_s,
            "kwargs": {"message": message.model_dump(mode="json")},
            # A run not started within one interval is superseded by the next one.
            "options": {"queue": queue, "expires": settings.reconcile_interval_s},
        }
    }
