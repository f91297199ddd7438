"""What ingest decides: which requests become jobs and commands. No HTTP, no vendor types here.

One module per kind of request: ``pages`` (pings, pushes, deletes, page state), ``delete_ping``
(the extension's page-id-0 delete ping), ``uploads``,
``reindex``, ``reconcile`` and ``jobs`` (retries); ``queueing`` records a job and sends its command,
and ``ports`` names what they need from outside (job records, upload ids, the command sender).
"""

from ragbot.errors import BodyTooLarge, UploadsRefused
from ragbot_ingest.service.delete_ping import DeletePingOutcome, accept_delete_ping
from ragbot_ingest.service.jobs import retry_job
from ragbot_ingest.service.pages import accept_delete, accept_ping, accept_push, list_pages, page_state
from ragbot_ingest.service.ports import CommandSender, JobRepository, UploadIds
from ragbot_ingest.service.reconcile import ReconcileOutcome, accept_reconcile
from ragbot_ingest.service.reindex import (
    SpooledPages,
    accept_reindex_pages,
    accept_reindex_wiki,
    read_jsonl_pages,
)
from ragbot_ingest.service.uploads import AcceptedUpload, Upload, accept_uploads

__all__ = [
    "AcceptedUpload",
    "BodyTooLarge",
    "CommandSender",
    "DeletePingOutcome",
    "JobRepository",
    "ReconcileOutcome",
    "SpooledPages",
    "Upload",
    "UploadIds",
    "UploadsRefused",
    "accept_delete",
    "accept_delete_ping",
    "accept_ping",
    "accept_push",
    "accept_reconcile",
    "accept_reindex_pages",
    "accept_reindex_wiki",
    "accept_uploads",
    "list_pages",
    "page_state",
    "read_jsonl_pages",
    "retry_job",
]
