"""ChatbotRagContent's delete ping, which names no page: a reconcile against the wiki's page list.

The extension's delete job runs after the page row is gone, so it pings ``page_id: 0``. The deleted
page is found by comparing the wiki's page list (``RAGBOT_INGEST_WIKI_LIST_URL``) with the index:
the first delete ping opens a window of ``delete_reconcile_delay_s`` and sends one ``ReconcileWiki``
to run when it closes; pings inside the window join that reconcile. The page is gone within the
window plus one reconcile.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ragbot.errors import SourceRefused, ValidationFailed
from ragbot.messaging.reconcile_trigger import ReconcileTrigger
from ragbot.observability.logging import get_request_id
from ragbot.schemas.jobs import JobKind, JobRecord
from ragbot.schemas.messages import RECONCILE_WIKI_TASK, ReconcileWiki
from ragbot.schemas.pages import PageChangedPing
from ragbot.settings import IngestSettings
from ragbot.sources.wiki import check_callback_url
from ragbot_ingest.service.ports import CommandSender, JobRepository
from ragbot_ingest.service.queueing import new_job_id

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class DeletePingOutcome:
    """What ragbot does about a delete ping: ``reconcile`` (new or joined) or ``nothing``, and why."""

    action: str
    detail: str
    job: JobRecord | None = None
    reconcile_in_s: float | None = None


async def accept_delete_ping(
    *,
    ping: PageChangedPing,
    settings: IngestSettings,
    trigger: ReconcileTrigger | None,
    jobs: JobRepository,
    sender: CommandSender,
) -> DeletePingOutcome:
    """Schedule (or join) the reconcile that finds the deleted page; say so when none can run."""
    try:
        check_callback_url(ping.callback_url, settings.allowed_callback_hosts)
    except SourceRefused as exc:
        raise ValidationFailed(str(exc), field="callback_url") from None
    if not settings.wiki_list_url or trigger is None:
        return DeletePingOutcome(
            action="nothing",
            detail="a page was deleted, but the ping does not say which and no page list is configured "
            "(RAGBOT_INGEST_WIKI_LIST_URL): the page stays searchable until POST /v1/reconcile runs",
        )
    delay = settings.delete_reconcile_delay_s
    job_id = new_job_id()
    scheduled = await trigger.claim(job_id=job_id, window_s=delay)
    if scheduled is not None:
        record = await jobs.get(job_id=scheduled)
        return DeletePingOutcome(
            action="reconcile",
            detail=f"a reconcile against {settings.wiki_list_url} is already scheduled for this burst "
            "of deletes: it removes every indexed page the list no longer names",
            job=record,
        )
    command = ReconcileWiki(
        job_id=job_id,
        list_url=settings.wiki_list_url,
        callback_url=settings.wiki_callback_url or ping.callback_url,
        max_remove_share=settings.reconcile_max_remove_share,
        trigger="delete_ping",
        request_id=get_request_id(),
    )
    record = await jobs.create(kind=JobKind.reconcile, payload=command.model_dump(mode="json"), job_id=job_id)
    await sender.send(task=RECONCILE_WIKI_TASK, message=command, countdown=delay)
    logger.info("delete ping: reconcile scheduled", extra={"job_id": job_id, "delay_s": delay})
    return DeletePingOutcome(
        action="reconcile",
        detail=f"in {delay:g} s ragbot reads the wiki's page list ({settings.wiki_list_url}) and removes "
        "every indexed page it no longer names; delete pings until then join this reconcile",
        job=record,
        reconcile_in_s=delay,
    )
