"""Uploaded files decided: every file parsed and refused together, or each queued under its stable page id."""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from ragbot.errors import UploadsRefused, ValidationFailed
from ragbot.indexing.folder import content_revision
from ragbot.observability.logging import get_request_id
from ragbot.schemas.jobs import JobKind, JobRecord
from ragbot.schemas.messages import IndexPage
from ragbot.schemas.pages import Page
from ragbot.sources.detect import safe_filename
from ragbot.sources.files import parse_upload
from ragbot_ingest.service.ports import CommandSender, JobRepository, UploadIds
from ragbot_ingest.service.queueing import new_job_id, queue_index_page

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class Upload:
    """One uploaded file and the key it is indexed under (its file name unless given)."""

    filename: str
    data: bytes
    key: str | None = None


@dataclass(slots=True)
class AcceptedUpload:
    """An upload that became a job."""

    filename: str
    key: str
    page: Page
    record: JobRecord


async def accept_uploads(
    *,
    uploads: Sequence[Upload],
    max_bytes: int,
    ids: UploadIds,
    jobs: JobRepository,
    sender: CommandSender,
) -> list[AcceptedUpload]:
    """Parse every file (refusing all with the reasons when one cannot be indexed), then queue each.

    Files are parsed here, off the event loop, so a corrupt file, an empty one or a zip bomb gets a
    clear 4xx now rather than a failed job later. The revision id is a hash of the bytes: the same
    file again is a no-op, a changed file under the same key replaces the old one.
    """
    if not uploads:
        raise ValidationFailed("send one or more files in 'file' parts", field="file")
    parsed: list[tuple[Upload, Page]] = []
    refused: list[tuple[int, str]] = []
    for index, upload in enumerate(uploads):
        try:
            page = await asyncio.to_thread(_parse_one, upload, max_bytes=max_bytes)
        except ValidationFailed as exc:
            refused.append((index, str(exc)))
            continue
        parsed.append((upload, page))
    if refused:
        raise UploadsRefused(refused)
    accepted: list[AcceptedUpload] = []
    for upload, page in parsed:
        key = page.url or upload.filename
        page_id = await ids.page_id(key=key)
        page = page.model_copy(update={"page_id": page_id})
        command = IndexPage(
            job_id=new_job_id(),
            page_id=page_id,
            revision_id=page.revision_id,
            revision_date=page.revision_date,
            page=page,
            request_id=get_request_id(),
        )
        record = await queue_index_page(command=command, kind=JobKind.upload, jobs=jobs, sender=sender)
        accepted.append(
            AcceptedUpload(filename=safe_filename(upload.filename), key=key, page=page, record=record)
        )
        logger.info("upload accepted", extra={"job_id": record.job_id, "page_id": page_id, "key": key})
    return accepted


def _parse_one(upload: Upload, *, max_bytes: int) -> Page:
    from ragbot_ingest.upload_ids import clean_key

    # The file name is a label only (its last component, no controls): never a path.
    key = clean_key(upload.key if upload.key is not None else safe_filename(upload.filename or "upload"))
    digest = hashlib.sha256(upload.data).hexdigest()
    return parse_upload(
        upload.data,
        filename=upload.filename or key,
        max_bytes=max_bytes,
        page_id=1,  # a stand-in: the key's own id replaces it once every file of the request parsed
        revision_id=content_revision(digest),
        url=key,
        source="upload",
    )
