"""Ingest's job routes: a job's state, the dead letters, and retrying one (``/v1/jobs``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Request, Response, status
from pydantic import BaseModel

from ragbot.errors import JobNotRetryable
from ragbot.http.responses import ErrorBody
from ragbot.schemas.jobs import JobKind, JobRecord, JobState
from ragbot_ingest import service
from ragbot_ingest.deps import JobsDep, SenderDep
from ragbot_ingest.routes import Accepted, JobId, Offset, accepted

router = APIRouter(prefix="/v1")


class JobList(BaseModel):
    """Jobs in one state, most recent first."""

    state: JobState
    jobs: list[JobRecord]


@router.get("/jobs/{job_id}", response_model=JobRecord, name="get_job", tags=["jobs"])
async def get_job(job_id: JobId, jobs: JobsDep) -> JobRecord:
    """A job's state, attempts and error."""
    record = await jobs.get(job_id=job_id)
    if record is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"job {job_id} not found")
    if (
        record.kind in (JobKind.reindex, JobKind.reconcile) and not record.progress
    ):  # no batch has reported yet
        total, count = int(record.payload.get("total", 0)), int(record.payload.get("batches", 0))
        record = record.model_copy(
            update={"progress": {"total": total, "done": 0, "failed": 0, "batches": count}}
        )
    return record


@router.get("/jobs", response_model=JobList, tags=["jobs"])
async def list_jobs(
    jobs: JobsDep,
    state: Annotated[JobState, Query(description="failed lists the dead letters")] = JobState.failed,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Offset = 0,
) -> JobList:
    """Jobs in one state; ``state=failed`` (the default) lists the dead letters."""
    return JobList(state=state, jobs=await jobs.list_by_state(state=state, limit=limit, offset=offset))


@router.post(
    "/jobs/{job_id}/retry",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=Accepted,
    tags=["jobs"],
    responses={
        409: {"model": ErrorBody, "description": "the job is not failed: only dead letters can be retried"}
    },
)
async def retry_job(
    job_id: JobId, request: Request, response: Response, jobs: JobsDep, sender: SenderDep
) -> Accepted:
    """Re-queue a failed (dead-lettered) job."""
    try:
        record = await service.retry_job(job_id=job_id, jobs=jobs, sender=sender)
    except JobNotRetryable as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from None
    return accepted(request, response, record)
