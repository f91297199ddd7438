"""HTTP routes of ingest: wiki pings, page pushes and deletes, page state, jobs and retries."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, Query, Request, Response, status
from pydantic import BaseModel

from ragbot.jobs import JobNotRetryable
from ragbot.schemas.jobs import JobRecord, JobState
from ragbot.schemas.pages import Page, PageChangedPing, PageState
from ragbot_ingest import service
from ragbot_ingest.deps import JobsDep, SenderDep, SettingsDep, StoreDep

router = APIRouter(prefix="/v1")

PageId = Annotated[int, Path(ge=1, description="MediaWiki page id")]


class Accepted(BaseModel):
    """A job was queued; poll ``status_url``."""

    job_id: str
    status: JobState
    status_url: str


class JobList(BaseModel):
    """Jobs in one state, most recent first."""

    state: JobState
    jobs: list[JobRecord]


def _accepted(request: Request, response: Response, record: JobRecord) -> Accepted:
    url = str(request.url_for("get_job", job_id=record.job_id))
    response.headers["Location"] = url
    return Accepted(job_id=record.job_id, status=record.state, status_url=url)


@router.post("/pages/changed", status_code=status.HTTP_202_ACCEPTED, response_model=Accepted, tags=["pages"])
async def page_changed(
    ping: PageChangedPing,
    request: Request,
    response: Response,
    jobs: JobsDep,
    sender: SenderDep,
    settings: SettingsDep,
) -> Accepted:
    """The wiki's change ping (ChatbotRagContent): fetch the page from callback_url and index it."""
    record = await service.accept_ping(
        ping=ping, allowed_hosts=settings.allowed_callback_hosts, jobs=jobs, sender=sender
    )
    return _accepted(request, response, record)


@router.post("/pages", status_code=status.HTTP_202_ACCEPTED, response_model=Accepted, tags=["pages"])
async def push_page(
    page: Page, request: Request, response: Response, jobs: JobsDep, sender: SenderDep
) -> Accepted:
    """Index a page whose content is in the body."""
    record = await service.accept_push(page=page, jobs=jobs, sender=sender)
    return _accepted(request, response, record)


@router.delete(
    "/pages/{page_id}", status_code=status.HTTP_202_ACCEPTED, response_model=Accepted, tags=["pages"]
)
async def delete_page(
    page_id: PageId, request: Request, response: Response, jobs: JobsDep, sender: SenderDep
) -> Accepted:
    """Remove a page from the index."""
    record = await service.accept_delete(page_id=page_id, jobs=jobs, sender=sender)
    return _accepted(request, response, record)


@router.get("/pages/{page_id}", response_model=PageState, tags=["pages"])
async def get_page(page_id: PageId, store: StoreDep) -> PageState:
    """The indexed revision, paragraphs per model and last update of a page."""
    state = await service.page_state(store=store, page_id=page_id)
    if state is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"page {page_id} is not indexed")
    return state


@router.get("/jobs/{job_id}", response_model=JobRecord, name="get_job", tags=["jobs"])
async def get_job(job_id: str, jobs: JobsDep) -> JobRecord:
    """A job's state, attempts and error."""
    record = await jobs.get(job_id=job_id)
    if record is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"job {job_id} not found")
    return record


@router.get("/jobs", response_model=JobList, tags=["jobs"])
async def list_jobs(
    jobs: JobsDep,
    state: Annotated[JobState, Query(description="failed lists the dead letters")] = JobState.failed,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> JobList:
    """Jobs in one state; ``state=failed`` (the default) lists the dead letters."""
    return JobList(state=state, jobs=await jobs.list_by_state(state=state, limit=limit, offset=offset))


@router.post(
    "/jobs/{job_id}/retry", status_code=status.HTTP_202_ACCEPTED, response_model=Accepted, tags=["jobs"]
)
async def retry_job(
    job_id: str, request: Request, response: Response, jobs: JobsDep, sender: SenderDep
) -> Accepted:
    """Re-queue a failed (dead-lettered) job."""
    try:
        record = await service.retry_job(job_id=job_id, jobs=jobs, sender=sender)
    except JobNotRetryable as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from None
    return _accepted(request, response, record)
