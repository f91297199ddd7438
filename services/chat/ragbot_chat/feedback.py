"""Feedback review (admin scope): ``GET /v1/feedback`` lists rated answers as JSON, CSV or JSON lines.

Filters: ``rating`` (up, down), ``since`` (ISO 8601, by time of the feedback), ``page`` (a cited page
id). The format is ``?format=json|csv|jsonl``, else read from ``Accept`` (``text/csv``,
``application/x-ndjson``), else JSON with the cited pages counted worst first.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response, StreamingResponse

from ragbot.chat.feedback import csv_rows, jsonl_rows, pages_of
from ragbot.chat.schemas import FeedbackList, Rating
from ragbot.schemas.limits import MAX_PAGE_ID
from ragbot_chat.deps import ResourcesDep

router = APIRouter(prefix="/v1", tags=["feedback"])

Format = Literal["json", "csv", "jsonl"]
_MEDIA: dict[str, str] = {"csv": "text/csv; charset=utf-8", "jsonl": "application/x-ndjson"}
_ACCEPTS: tuple[tuple[str, Format], ...] = (
    ("text/csv", "csv"),
    ("application/x-ndjson", "jsonl"),
    ("application/jsonl", "jsonl"),
)


def _format(requested: Format | None, accept: str) -> Format:
    if requested is not None:
        return requested
    for media, name in _ACCEPTS:
        if media in accept:
            return name
    return "json"


@router.get(
    "/feedback",
    response_model=FeedbackList,
    responses={
        200: {
            "content": {
                "text/csv": {"schema": {"type": "string"}},
                "application/x-ndjson": {"schema": {"type": "string"}},
            }
        }
    },
)
async def list_feedback(
    request: Request,
    res: ResourcesDep,
    rating: Annotated[Rating | None, Query(description="only up or only down")] = None,
    since: Annotated[datetime | None, Query(description="feedback at or after this ISO 8601 time")] = None,
    page: Annotated[
        int | None, Query(ge=1, le=MAX_PAGE_ID, description="answers citing this page id")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=100_000)] = 1000,
    format: Annotated[Format | None, Query(description="json (default), csv or jsonl; else Accept")] = None,
) -> Response | FeedbackList:
    """Rated and commented answers, newest feedback first: question, answer, cited pages, comment."""
    if since is not None and since.tzinfo is None:
        since = since.replace(tzinfo=UTC)
    entries, truncated = await res.feedback.entries(rating=rating, since=since, page_id=page, limit=limit)
    chosen = _format(format, request.headers.get("accept", ""))
    if chosen == "json":
        return FeedbackList(entries=entries, pages=pages_of(entries), truncated=truncated)
    rows = csv_rows(entries) if chosen == "csv" else jsonl_rows(entries)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    headers = {"Content-Disposition": f'attachment; filename="ragbot-feedback-{stamp}.{chosen}"'}
    if truncated:
        headers["X-Ragbot-Truncated"] = "true"
    return StreamingResponse(rows, media_type=_MEDIA[chosen], headers=headers)
