"""HTTP routes of ingest: wiki pings, page pushes and deletes, uploads, bulk reindex, page state, jobs
and retries."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Path, Query, Request, Response, status
from fastapi.responses import JSONResponse
from pydantic import AfterValidator, BaseModel, Field, ValidationError

from ragbot.errors import (
    BodyTooLarge,
    PartTooLarge,
    ReconcileRefused,
    UploadsRefused,
    ValidationFailed,
)
from ragbot.http.app import public_url
from ragbot.http.limits import RATE_LIMITED, rate_limit
from ragbot.http.responses import ErrorBody
from ragbot.messaging.reconcile import ReconcileRequest, guard_refusal
from ragbot.messaging.reindex import ReindexRequest
from ragbot.schemas.jobs import JobRecord, JobState
from ragbot.schemas.limits import MAX_OFFSET, MAX_PAGE_ID, positive_page_id
from ragbot.schemas.pages import Page, PageChangedPing, PageState
from ragbot_ingest import service
from ragbot_ingest.deps import (
    JobsDep,
    ListerDep,
    ResourcesDep,
    SenderDep,
    SettingsDep,
    StoreDep,
    UploadIdsDep,
)
from ragbot_ingest.multipart import read_multipart

router = APIRouter(prefix="/v1")

# Below 1: 422 saying page ids start at 1 (the schema still says minimum 1).
PageId = Annotated[
    int,
    Path(le=MAX_PAGE_ID, description="MediaWiki page id (from 1)", json_schema_extra={"minimum": 1}),
    AfterValidator(positive_page_id),
]
JobId = Annotated[str, Path(min_length=1, max_length=128, description="a job id from a 202 answer")]
Offset = Annotated[
    int, Query(ge=0, le=MAX_OFFSET, description=f"where the window starts (at most {MAX_OFFSET})")
]


class Accepted(BaseModel):
    """A job was queued; poll ``status_url``."""

    job_id: str
    status: JobState
    status_url: str


def accepted(request: Request, response: Response, record: JobRecord) -> Accepted:
    """The 202 body of a queued job, with ``Location`` at its status."""
    url = public_url(request, "get_job", job_id=record.job_id)
    response.headers["Location"] = url
    return Accepted(job_id=record.job_id, status=record.state, status_url=url)


class DeletePingAccepted(BaseModel):
    """The extension's delete ping (page id 0) names no page: what ragbot does to find it."""

    action: Literal["reconcile", "nothing"] = Field(
        description="reconcile: the wiki's page list is compared with the index (unlisted pages removed)"
    )
    detail: str
    reconcile_in_s: float | None = Field(
        default=None, description="when the reconcile this ping scheduled runs (null: it joined one)"
    )
    job_id: str | None = None
    status: JobState | None = None
    status_url: str | None = None


@router.post(
    "/pages/changed",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=Accepted | DeletePingAccepted,
    tags=["pages"],
)
async def page_changed(
    ping: PageChangedPing,
    request: Request,
    response: Response,
    jobs: JobsDep,
    sender: SenderDep,
    settings: SettingsDep,
    resources: ResourcesDep,
) -> Accepted | DeletePingAccepted:
    """The wiki's change ping (ChatbotRagContent): fetch the page from callback_url and index it; its
    delete ping (``page_id: 0``) schedules a reconcile against the wiki's page list."""
    if ping.is_delete:
        outcome = await service.accept_delete_ping(
            ping=ping, settings=settings, trigger=resources.trigger, jobs=jobs, sender=sender
        )
        answer = DeletePingAccepted(
            action="reconcile" if outcome.action == "reconcile" else "nothing",
            detail=outcome.detail,
            reconcile_in_s=outcome.reconcile_in_s,
        )
        if outcome.job is not None:
            answer = answer.model_copy(update=accepted(request, response, outcome.job).model_dump())
        return answer
    record = await service.accept_ping(
        ping=ping, allowed_hosts=settings.allowed_callback_hosts, jobs=jobs, sender=sender
    )
    return accepted(request, response, record)


@router.post("/pages", status_code=status.HTTP_202_ACCEPTED, response_model=Accepted, tags=["pages"])
async def push_page(
    page: Page, request: Request, response: Response, jobs: JobsDep, sender: SenderDep
) -> Accepted:
    """Index a page whose content is in the body."""
    record = await service.accept_push(page=page, jobs=jobs, sender=sender)
    return accepted(request, response, record)


@router.delete(
    "/pages/{page_id}", status_code=status.HTTP_202_ACCEPTED, response_model=Accepted, tags=["pages"]
)
async def delete_page(
    page_id: PageId, request: Request, response: Response, jobs: JobsDep, sender: SenderDep
) -> Accepted:
    """Remove a page from the index."""
    record = await service.accept_delete(page_id=page_id, jobs=jobs, sender=sender)
    return accepted(request, response, record)


class UploadedDocument(BaseModel):
    """One uploaded file and the job indexing it."""

    filename: str
    key: str
    page_id: int
    revision_id: int
    title: str
    file_type: str | None = None
    job_id: str
    status: JobState
    status_url: str


class UploadsAccepted(BaseModel):
    """Every file of the upload was parsed and queued."""

    documents: list[UploadedDocument]


_JSONL_TYPES = ("application/x-ndjson", "application/jsonl", "application/json-lines", "text/plain")
_MULTIPART_OVERHEAD = 64 * 1024
_UPLOAD_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file"],
                    "properties": {
                        "file": {
                            "type": "array",
                            "items": {"type": "string", "format": "binary"},
                            "description": "pdf, docx, pptx, html, md or txt (detected by content)",
                        },
                        "key": {
                            "type": "array",
                            "items": {"type": "string"},
                            "description": "one per file, in order: the key (and url) it is indexed under; "
                            "default its file name. The same key again replaces that document.",
                        },
                    },
                }
            }
        },
    }
}
_REINDEX_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/x-ndjson": {
                "schema": {"type": "string", "description": "one content-API page (JSON) per line"}
            },
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "properties": {"file": {"type": "string", "format": "binary"}},
                }
            },
            "application/json": {"schema": ReindexRequest.model_json_schema()},
        },
    }
}


def _too_large(what: str) -> HTTPException:
    return HTTPException(413, what)


def _check_declared_length(request: Request, limit: int) -> None:
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise _too_large(f"the body is {declared} bytes, over the {limit}-byte limit")


@router.post(
    "/documents",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=UploadsAccepted,
    tags=["documents"],
    openapi_extra=_UPLOAD_BODY,
    responses={
        413: {"description": "a file is over the size cap"},
        415: {"description": "not multipart"},
        **RATE_LIMITED,
    },
    dependencies=[rate_limit("upload")],
)
async def upload_documents(
    request: Request,
    response: Response,
    jobs: JobsDep,
    sender: SenderDep,
    settings: SettingsDep,
    ids: UploadIdsDep,
) -> UploadsAccepted | JSONResponse:
    """Index uploaded files (multipart ``file`` parts): each becomes a page, one job per file."""
    content_type = request.headers.get("content-type", "")
    if not content_type.lower().startswith("multipart/form-data"):
        raise HTTPException(
            status.HTTP_415_UNSUPPORTED_MEDIA_TYPE, "send multipart/form-data with one or more 'file' parts"
        )
    cap = settings.max_upload_bytes
    _check_declared_length(request, cap * settings.max_upload_files + _MULTIPART_OVERHEAD)
    try:
        form = await read_multipart(
            request.stream(),
            content_type=content_type,
            max_file_bytes=cap,
            max_files=settings.max_upload_files,
        )
    except PartTooLarge as exc:
        raise _too_large(exc.what) from None
    try:
        keys = form.fields.get("key", [])
        if keys and len(keys) != len(form.files):
            raise ValidationFailed(
                f"{len(keys)} keys for {len(form.files)} files: send one per file", field="key"
            )
        uploads = [
            service.Upload(filename=f.filename, data=f.read(), key=keys[i] if keys else None)
            for i, f in enumerate(form.files)
        ]
    finally:
        form.close()
    try:
        accepted = await service.accept_uploads(
            uploads=uploads, max_bytes=cap, ids=ids, jobs=jobs, sender=sender
        )
    except UploadsRefused as exc:
        detail = [
            {"loc": ["body", "file", i], "msg": reason, "type": "value_error"} for i, reason in exc.reasons
        ]
        return JSONResponse({"detail": detail}, status_code=422)
    documents = []
    for item in accepted:
        url = public_url(request, "get_job", job_id=item.record.job_id)
        documents.append(
            UploadedDocument(
                filename=item.filename,
                key=item.key,
                page_id=item.page.page_id,
                revision_id=item.page.revision_id,
                title=item.page.title,
                file_type=item.page.extra.get("file_type"),
                job_id=item.record.job_id,
                status=item.record.state,
                status_url=url,
            )
        )
    if len(documents) == 1:
        response.headers["Location"] = documents[0].status_url
    return UploadsAccepted(documents=documents)


@router.post(
    "/reindex",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=Accepted,
    tags=["pages"],
    openapi_extra=_REINDEX_BODY,
    responses={413: {"description": "the body, a line or the page count is over its cap"}},
)
async def reindex(
    request: Request,
    response: Response,
    jobs: JobsDep,
    sender: SenderDep,
    settings: SettingsDep,
    lister: ListerDep,
    force: Annotated[bool, Query(description="re-embed pages whose revision is already indexed")] = False,
) -> Accepted:
    """Bulk reindex: a JSONL body (or file part) of content-API pages, or ``{"source": "wiki", ...}``."""
    content_type = request.headers.get("content-type", "").lower()
    if content_type.split(";")[0].strip() == "application/json":
        body = await _json_body(request)
        record = await service.accept_reindex_wiki(
            request=body, lister=lister, batch_pages=settings.reindex_batch_pages, jobs=jobs, sender=sender
        )
        return accepted(request, response, record)
    _check_declared_length(request, settings.max_reindex_bytes + _MULTIPART_OVERHEAD)
    limits: dict[str, Any] = {
        "max_bytes": settings.max_reindex_bytes,
        "max_line_bytes": settings.max_page_bytes,
        "max_pages": settings.max_reindex_pages,
    }
    try:
        if content_type.startswith("multipart/form-data"):
            pages = await _jsonl_from_multipart(request, content_type=content_type, limits=limits)
        elif content_type.startswith(_JSONL_TYPES) or not content_type:
            pages = await service.read_jsonl_pages(request.stream(), **limits)
        else:
            raise HTTPException(
                status.HTTP_415_UNSUPPORTED_MEDIA_TYPE,
                "send application/x-ndjson (one page per line), a multipart 'file', or application/json",
            )
    except (BodyTooLarge, PartTooLarge) as exc:
        raise _too_large(str(exc)) from None
    try:
        record = await service.accept_reindex_pages(
            pages=pages, batch_pages=settings.reindex_batch_pages, force=force, jobs=jobs, sender=sender
        )
    finally:
        pages.close()
    return accepted(request, response, record)


async def _json_body(request: Request) -> ReindexRequest:
    raw = await request.body()
    try:
        return ReindexRequest.model_validate_json(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = str(first["loc"][0]) if first["loc"] else "body"
        raise ValidationFailed(f"{where}: {first['msg']}", field=where) from None


async def _jsonl_from_multipart(
    request: Request, *, content_type: str, limits: dict[str, Any]
) -> service.SpooledPages:
    form = await read_multipart(
        request.stream(), content_type=content_type, max_file_bytes=limits["max_bytes"], max_files=1
    )
    try:
        if not form.files:
            raise ValidationFailed("send the JSONL file in a 'file' part", field="file")
        part = form.files[0]
        part.file.seek(0)

        async def chunks() -> Any:
            while block := part.file.read(1024 * 1024):
                yield block

        return await service.read_jsonl_pages(chunks(), **limits)
    finally:
        form.close()


class ReconcileResult(BaseModel):
    """What a reconcile changes (or would, on a dry run) and the job doing it."""

    dry_run: bool
    listed: int
    indexed: int
    unchanged: int
    missing: list[int]
    stale: list[int]
    remove: list[int]
    remove_share: float
    guard: str | None = Field(
        default=None,
        description="on a dry run, why the guard would refuse this plan (naming the pages); else null",
    )
    job_id: str | None = None
    status: JobState | None = None
    status_url: str | None = None


@router.post(
    "/reconcile",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=ReconcileResult,
    tags=["pages"],
    responses={
        200: {"model": ReconcileResult, "description": "a dry run: what would change; nothing changed"},
        409: {"model": ErrorBody, "description": "the guard: it would remove too much of the index"},
    },
)
async def reconcile(
    body: ReconcileRequest,
    request: Request,
    response: Response,
    store: StoreDep,
    jobs: JobsDep,
    sender: SenderDep,
    settings: SettingsDep,
    lister: ListerDep,
) -> ReconcileResult:
    """Make the index hold exactly the wiki's relevant pages: queue missing or older ones, remove the rest."""
    try:
        outcome = await service.accept_reconcile(
            request=body,
            store=store,
            lister=lister,
            allowed_hosts=settings.allowed_callback_hosts,
            max_remove_share=settings.reconcile_max_remove_share,
            batch_pages=settings.reindex_batch_pages,
            max_pages=settings.max_reindex_pages,
            jobs=jobs,
            sender=sender,
        )
    except ReconcileRefused as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from None
    plan = outcome.plan
    result = ReconcileResult(
        dry_run=body.dry_run,
        listed=plan.listed,
        indexed=plan.indexed,
        unchanged=plan.unchanged,
        missing=plan.missing,
        stale=plan.stale,
        remove=plan.remove,
        remove_share=round(plan.remove_share, 4),
        guard=None
        if body.force
        else guard_refusal(plan, max_remove_share=settings.reconcile_max_remove_share),
    )
    if outcome.job is None:
        response.status_code = status.HTTP_200_OK
        return result
    queued = accepted(request, response, outcome.job)
    return result.model_copy(update=queued.model_dump())


class PageList(BaseModel):
    """A window of the indexed pages by ascending page id, and how many paragraphs the index holds."""

    pages: list[PageState]
    limit: int
    offset: int
    indexed_paragraphs: int


@router.get("/pages", response_model=PageList, tags=["pages"])
async def list_pages(
    store: StoreDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Offset = 0,
) -> PageList:
    """Indexed pages (newest revision, paragraphs, title, last update); page on with ``offset``."""
    pages, paragraphs = await service.list_pages(store=store, limit=limit, offset=offset)
    return PageList(pages=pages, limit=limit, offset=offset, indexed_paragraphs=paragraphs)


@router.get("/pages/{page_id}", response_model=PageState, tags=["pages"])
async def get_page(page_id: PageId, store: StoreDep) -> PageState:
    """The indexed revision, paragraphs per model and last update of a page."""
    state = await service.page_state(store=store, page_id=page_id)
    if state is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"page {page_id} is not indexed")
    return state
