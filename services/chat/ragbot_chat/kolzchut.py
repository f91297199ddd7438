"""The Kol-Zchut contract: KZChatbot's ``/search`` and ``/rating``, and its admin page's config routes.

- ``POST /search``                    ``{gpt_result, docs, conversation_id}`` (plus debug fields when asked)
- ``POST /rating``                    like, dislike or withdraw on a conversation
- ``GET /get_config``, ``POST /set_config``   the live configuration, and replacing it
- ``GET /get_models_version``         the models behind the answers
- ``GET|POST /get_config_metadata``   what the admin page may choose
- ``POST /search/stream``             ``/search`` as SSE: ``sources``, ``token``s, ``done`` or ``error``
- ``POST /clean_redis_history``       the admin page's danger zone: every stored conversation deleted
- ``GET /ping/{redis,llm_manager,es_docker}``   the admin page's health lights (200 or 503): ``pings``

The pages that call them (``/admin.html``, ``/index.html``, ``/batch-runner.html``) are
``kolzchut_pages``.

Field names are KZChatbot's exactly; the widget (``widget.py``) answers through ``kolzchut_search`` too.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from ragbot.chat.admission import Slot
from ragbot.chat.citations import StreamedNumbers, number_by_page, unique_pages
from ragbot.chat.events import (
    ChatRequest,
    DoneEvent,
    ErrorEvent,
    PromptOverrides,
    SourcesEvent,
    TokenEvent,
)
from ragbot.chat.feedback import merge_feedback
from ragbot.chat.kolzchut import (
    SEARCH_STREAM_EVENTS,
    DocLink,
    HistoryCleaned,
    KolZchutConfig,
    KolZchutConfigIn,
    RatingRequest,
    SearchRequest,
    StreamDone,
    StreamError,
    StreamSources,
    StreamToken,
    page_plan,
    rating_from_query,
)
from ragbot.chat.sessions import new_id
from ragbot.errors import DependencyUnavailable, ValidationFailed
from ragbot.http.limits import rate_limit
from ragbot.http.responses import ErrorBody
from ragbot.http.streams import sse_frame
from ragbot.prompts import detect_language
from ragbot.schemas.limits import MAX_PAGE_ID
from ragbot_chat.deps import OwnerDep, Resources, ResourcesDep
from ragbot_chat.pings import add_ping_routes
from ragbot_chat.service import (
    LIMITED_RESPONSES,
    collect,
    error_status,
    record_feedback,
    run_and_store,
    sources_json,
)
from ragbot_chat.sse import CLIENT_GONE, event_stream, sse, unless_disconnected

logger = logging.getLogger(__name__)
router = APIRouter(tags=["kolzchut"])


def inline_refs(schema: Any, defs: dict[str, Any]) -> Any:
    """``schema`` with every ``#/$defs/...`` reference replaced by its definition (no components needed)."""
    if isinstance(schema, dict):
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            return inline_refs(defs[ref.removeprefix("#/$defs/")], defs)
        return {k: inline_refs(v, defs) for k, v in schema.items() if k != "$defs"}
    if isinstance(schema, list):
        return [inline_refs(v, defs) for v in schema]
    return schema


def stream_event_schemas() -> list[dict[str, Any]]:
    """Each ``/search/stream`` event as sent (its name, its JSON ``data``), self-contained, for OpenAPI."""
    schemas = []
    for model in SEARCH_STREAM_EVENTS:
        raw = model.model_json_schema()
        data = inline_refs(raw, raw.get("$defs", {}))
        schemas.append(sse_frame(data, event=str(model.model_fields["event"].default)))
    return schemas


# -- use cases ---------------------------------------------------------------------------------------


def _page_id(value: int | str | None) -> int | None:
    """The page the question was asked on, when it is a page id a store can hold (else no filter)."""
    if isinstance(value, str):
        text = value.strip()
        value = int(text) if text.isascii() and text.isdigit() and len(text) <= 10 else None
    return value if isinstance(value, int) and 1 <= value <= MAX_PAGE_ID else None


def first_forwarded(forwarded_for: str | None) -> str | None:
    """The client a proxy named first in ``X-Forwarded-For`` (clipped), kept with the answer."""
    return forwarded_for.split(",")[0].strip()[:64] if forwarded_for else None


def search_request(*, res: Resources, body: SearchRequest, config: KolZchutConfig) -> ChatRequest:
    """The pipeline's request for a KZChatbot question under the live config (the question checked)."""
    question = res.pipeline.check_question(body.query, field_name="query")
    return ChatRequest(
        question=question,
        mode=res.settings.kolzchut_mode,
        language=detect_language(question),
        channel="kolzchut",
        rephrase=body.rephrase,
        page_id=_page_id(body.page_id) if config.add_current_page_to_search else None,
        retrieval_size=body.retrieval_size,
        paragraphs_per_page=page_plan(
            num_of_pages=config.num_of_pages,
            base=res.settings.paragraphs_per_page,
            max_per_page=body.max_documents_from_same_page,
        ),
        complete_pages=body.send_complete_pages_to_llm,
        temperature=config.temperature,  # the pipeline sends none for models_without_temperature
        model=config.model,
        prompts=PromptOverrides(
            system=config.system_prompt, user=config.user_prompt, rephrase=config.rephrase_prompt
        ),
        banned_fields=config.banned_fields,
    )


def doc_links(sources: SourcesEvent | None) -> list[dict[str, Any]]:
    """The pages of the sources, once each, as KZChatbot's ``docs``."""
    return [{"title": s.title, "url": s.url} for s in unique_pages(sources.sources if sources else [])]


def search_payload(
    *,
    res: Resources,
    body: SearchRequest,
    request: ChatRequest,
    config: KolZchutConfig,
    conversation_id: str,
    sources: SourcesEvent | None,
    done: DoneEvent | None,
    error: ErrorEvent | None,
    started: float,
) -> tuple[int, dict[str, Any]]:
    """``/search``'s (status code, body) for a finished turn, with exactly KZChatbot's field names."""
    docs = doc_links(sources)
    if error is not None:
        return error_status(error), {
            "detail": error.message,
            "dependency": error.dependency,
            "docs": docs,
            "conversation_id": None,
        }
    assert done is not None
    if done.abstained:
        docs = []
    # The client shows ``docs`` (one per page): each [n] is renumbered to its page's place there.
    answer = number_by_page(done.answer, sources.sources if sources else [])
    payload: dict[str, Any] = {"gpt_result": answer, "docs": docs, "conversation_id": conversation_id}
    if body.include_debug_data:
        debug = sources.debug if sources else {}
        rewrite = debug.get("rewrite") or {}
        payload.update(
            docs_before_filter=debug.get("docs_before_filter", []),
            debug_data={
                "mode": request.mode,
                "config_version": config.version,
                "model": config.model,
                "llm_backend": res.llm.backend,
                "sources": sources_json(sources.sources if sources else []),
                "citations": sources_json(done.citations),
                "retrieved_not_cited": sources_json(done.retrieved_not_cited),
                "abstained": done.abstained,
                "usage": done.usage,
                "timings_ms": done.timings_ms,
                "retrieval": debug.get("retrieval"),
            },
            original_question=request.question,
            rephrased_question=rewrite.get("rewritten"),
            response_time=round(time.perf_counter() - started, 3),
            rephrase_time=None if not rewrite else round(float(rewrite.get("time_ms", 0.0)) / 1000.0, 3),
        )
    return 200, payload


async def kolzchut_search(
    *, res: Resources, body: SearchRequest, forwarded_for: str | None = None, owner: str | None = None
) -> tuple[int, dict[str, Any]]:
    """Answer KZChatbot's ``/search``: (status code, body) with exactly its field names."""
    started = time.perf_counter()
    config = await res.configs.get()
    request = search_request(res=res, body=body, config=config)
    conversation_id = new_id()
    asked_from = None if body.asked_from is None else str(body.asked_from)
    # LLMBusy: 503 + Retry-After at once when the queue is full (a quote turn holds no slot)
    slot = await res.admission.acquire(needs_llm=request.mode != "quote")
    try:
        sources, done, error = await collect(
            run_and_store(
                res=res,
                request=request,
                message_id=conversation_id,
                session_id=None,
                asked_from=asked_from,
                forwarded_for=forwarded_for,
                owner=owner,
            )
        )
    finally:
        slot.release()
    return search_payload(
        res=res,
        body=body,
        request=request,
        config=config,
        conversation_id=conversation_id,
        sources=sources,
        done=done,
        error=error,
        started=started,
    )


async def kolzchut_search_stream(
    *, res: Resources, body: SearchRequest, forwarded_for: str | None = None, owner: str | None = None
) -> tuple[AsyncIterator[bytes], Slot]:
    """``/search/stream``: the same turn as ``/search`` as typed SSE events, and the LLM slot it holds."""
    started = time.perf_counter()
    config = await res.configs.get()
    request = search_request(res=res, body=body, config=config)
    conversation_id = new_id()
    asked_from = None if body.asked_from is None else str(body.asked_from)
    slot = await res.admission.acquire(needs_llm=request.mode != "quote")
    events = run_and_store(
        res=res,
        request=request,
        message_id=conversation_id,
        session_id=None,
        asked_from=asked_from,
        forwarded_for=forwarded_for,
        owner=owner,
    )

    async def chunks() -> AsyncIterator[bytes]:
        sources: SourcesEvent | None = None
        numbers = StreamedNumbers([])
        async for event in events:
            if isinstance(event, SourcesEvent):
                sources = event
                numbers = StreamedNumbers(event.sources)
                debug = event.debug if body.include_debug_data else {}
                rewrite = debug.get("rewrite") or {}
                first = StreamSources(
                    conversation_id=conversation_id,
                    docs=[DocLink.model_validate(d) for d in doc_links(event)],
                    rephrased_question=rewrite.get("rewritten") if body.include_debug_data else None,
                    docs_before_filter=debug.get("docs_before_filter") if body.include_debug_data else None,
                )
                yield sse("sources", first.model_dump(mode="json"))
            elif isinstance(event, TokenEvent):
                text = numbers.feed(event.text)  # [n] numbers docs, as in the done event
                if text:
                    yield sse("token", StreamToken(text=text).model_dump(mode="json"))
            else:
                if rest := numbers.flush():
                    yield sse("token", StreamToken(text=rest).model_dump(mode="json"))
                status, payload = search_payload(
                    res=res,
                    body=body,
                    request=request,
                    config=config,
                    conversation_id=conversation_id,
                    sources=sources,
                    done=event if isinstance(event, DoneEvent) else None,
                    error=event if isinstance(event, ErrorEvent) else None,
                    started=started,
                )
                if status == 200:
                    yield sse("done", StreamDone(**payload).model_dump(mode="json"))
                else:
                    failed = StreamError(
                        detail=payload["detail"],
                        dependency=payload["dependency"],
                        status=status,
                        docs=payload["docs"],
                    )
                    yield sse("error", failed.model_dump(mode="json"))

    return chunks(), slot


async def kolzchut_rate(*, res: Resources, body: RatingRequest, owner: str | None = None) -> dict[str, Any]:
    """Record a like/dislike on a conversation of ``owner`` (404 for unknown ids and other callers'
    conversations: the extension shows the status).

    A ``null`` the PHP sends for a field the user did not give keeps the stored value
    (``ragbot.chat.feedback.merge_feedback``); ``like: null`` with no text is the widget's withdraw."""
    stored = await res.store.message(body.conversation_id, owner=owner)
    rating, comment = merge_feedback(
        stored_rating=stored.rating,
        stored_comment=stored.comment,
        like_sent="like" in body.model_fields_set,
        like=body.like,
        text=body.free_text,
    )
    record = await record_feedback(
        res=res,
        message_id=body.conversation_id,
        rating=rating,
        comment=comment,
        channel="kolzchut",
        owner=owner,
    )
    like = None if record.rating is None else record.rating == "up"
    return {"conversation_id": body.conversation_id, "like": like, "free_text": record.comment}


async def kolzchut_get_config(*, res: Resources) -> KolZchutConfig:
    """The live configuration (defaults until the first ``set_config``)."""
    return await res.configs.get()


async def kolzchut_set_config(*, res: Resources, body: KolZchutConfigIn) -> KolZchutConfig:
    """Validate and store a new configuration version; the next search uses it."""
    return await res.configs.set(body)


async def clean_history(*, res: Resources) -> HistoryCleaned:
    """The danger zone: every stored conversation and answer goes (ratings on them can no longer come)."""
    sessions, messages = await res.store.clear_history()
    logger.warning("conversation history cleaned", extra={"sessions": sessions, "messages": messages})
    return HistoryCleaned(sessions=sessions, messages=messages)


async def kolzchut_models_version(*, res: Resources) -> list[str]:
    """Human-readable versions of the models behind the answers; element 0 is the summary shown."""
    config = await res.configs.get()
    try:
        embedders = await res.retriever.model_names()
    except (DependencyUnavailable, ValidationFailed):
        embedders = []
    retrieval = ", ".join(embedders) if embedders else "unavailable"
    summary = f"{config.model} ({res.llm.backend}); retrieval: {retrieval}; config v{config.version}"
    return [summary, f"llm: {config.model}", *(f"embedding: {name}" for name in embedders)]


# -- routes ------------------------------------------------------------------------------------------


@router.post("/search", responses=LIMITED_RESPONSES, dependencies=[rate_limit("search")])
async def search(
    body: SearchRequest,
    res: ResourcesDep,
    http_request: Request,
    owner: OwnerDep,
    forwarded_for: Annotated[str | None, Header(alias="X-Forwarded-For")] = None,
) -> Response:
    """KZChatbot's question: ``{gpt_result, docs, conversation_id}`` (plus debug fields when asked)."""
    answered = await unless_disconnected(
        kolzchut_search(res=res, body=body, forwarded_for=first_forwarded(forwarded_for), owner=owner),
        disconnected=http_request.is_disconnected,
    )
    if answered is None:
        return Response(status_code=CLIENT_GONE)
    status, payload = answered
    return JSONResponse(payload, status_code=status)


@router.post(
    "/search/stream",
    response_class=StreamingResponse,
    responses={
        200: {
            "description": "Server-Sent Events: `sources`, `token`s, then `done` or `error`",
            "content": {"text/event-stream": {"schema": {"oneOf": stream_event_schemas()}}},
        },
        **LIMITED_RESPONSES,
    },
    dependencies=[rate_limit("search")],
)
async def search_stream(
    body: SearchRequest,
    res: ResourcesDep,
    owner: OwnerDep,
    forwarded_for: Annotated[str | None, Header(alias="X-Forwarded-For")] = None,
) -> StreamingResponse:
    """The testing page's streamed question: ``/search``'s turn as typed events (``done`` is its body)."""
    chunks, slot = await kolzchut_search_stream(
        res=res, body=body, forwarded_for=first_forwarded(forwarded_for), owner=owner
    )
    return event_stream(chunks, every_s=res.settings.sse_ping_s, on_close=slot.release)


@router.post("/rating", responses={404: {"model": ErrorBody, "description": "no such conversation_id"}})
async def rating(
    res: ResourcesDep,
    owner: OwnerDep,
    body: RatingRequest | None = None,
    thread_id: str | None = Query(default=None, max_length=200, description="the conversation (query form)"),
    conversation_id: str | None = Query(default=None, max_length=200, description="thread_id's other name"),
    score: float | None = Query(default=None, description="> 0 like, <= 0 dislike, none withdraws"),
    free_text: str | None = Query(default=None, max_length=5000),
) -> dict[str, Any]:
    """Like, dislike or withdraw on a conversation, as a JSON body or ``?thread_id=…&score=…`` (a body
    wins); unknown ids are 404."""
    if body is None:
        body = rating_from_query(
            thread_id=thread_id, conversation_id=conversation_id, score=score, free_text=free_text
        )
    return await kolzchut_rate(res=res, body=body, owner=owner)


@router.post("/clean_redis_history", response_model=HistoryCleaned)
async def clean_redis_history(res: ResourcesDep) -> HistoryCleaned:
    """Delete every stored conversation and answer (admin; any body is ignored)."""
    return await clean_history(res=res)


add_ping_routes(router)


@router.get("/get_config", response_model=KolZchutConfig)
async def get_config(res: ResourcesDep) -> KolZchutConfig:
    """The live configuration."""
    return await kolzchut_get_config(res=res)


@router.post("/set_config", response_model=KolZchutConfig)
async def set_config(body: KolZchutConfigIn, res: ResourcesDep) -> KolZchutConfig:
    """Replace the configuration (validated, versioned, applied without a restart)."""
    return await kolzchut_set_config(res=res, body=body)


@router.get("/get_models_version")
async def get_models_version(res: ResourcesDep) -> list[str]:
    """Versions of the models in use; the extension shows element 0."""
    return await kolzchut_models_version(res=res)


@router.get("/get_config_metadata", operation_id="get_config_metadata")
@router.post("/get_config_metadata", operation_id="post_config_metadata")  # KZChatbot POSTs it too
async def get_config_metadata(res: ResourcesDep) -> dict[str, Any]:
    """What the admin page may choose: models, temperature and page-count options, field types."""
    return res.configs.metadata()
