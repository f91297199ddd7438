"""The Kol-Zchut contract: KZChatbot's ``/search`` and ``/rating``, and its admin page's config routes.

- ``POST /search``                    ``{gpt_result, docs, conversation_id}`` (plus debug fields when asked)
- ``POST /rating``                    like, dislike or withdraw on a conversation
- ``GET /get_config``, ``POST /set_config``   the live configuration, and replacing it
- ``GET /get_models_version``         the models behind the answers
- ``GET|POST /get_config_metadata``   what the admin page may choose

Field names are KZChatbot's exactly; the widget (``widget.py``) answers through ``kolzchut_search`` too.
"""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, Header, Request
from fastapi.responses import JSONResponse, Response

from ragbot.chat.citations import unique_pages
from ragbot.chat.events import ChatRequest, PromptOverrides
from ragbot.chat.kolzchut import KolZchutConfig, KolZchutConfigIn, RatingRequest, SearchRequest, page_plan
from ragbot.chat.schemas import Rating
from ragbot.chat.sessions import new_id
from ragbot.errors import DependencyUnavailable, ValidationFailed
from ragbot.http.limits import rate_limit
from ragbot.http.responses import ErrorBody
from ragbot.prompts import detect_language
from ragbot.schemas.limits import MAX_PAGE_ID
from ragbot_chat.deps import Resources, ResourcesDep
from ragbot_chat.service import LIMITED_RESPONSES, collect, error_status, run_and_store, sources_json
from ragbot_chat.sse import CLIENT_GONE, unless_disconnected

router = APIRouter(tags=["kolzchut"])


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


async def kolzchut_search(
    *, res: Resources, body: SearchRequest, forwarded_for: str | None = None
) -> tuple[int, dict[str, Any]]:
    """Answer KZChatbot's ``/search``: (status code, body) with exactly its field names."""
    started = time.perf_counter()
    config = await res.configs.get()
    question = res.pipeline.check_question(body.query, field_name="query")
    request = ChatRequest(
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
    conversation_id = new_id()
    asked_from = None if body.asked_from is None else str(body.asked_from)
    slot = await res.admission.acquire(
        needs_llm=request.mode != "quote"
    )  # LLMBusy: 503 + Retry-After at once when the queue is full
    try:
        sources, done, error = await collect(
            run_and_store(
                res=res,
                request=request,
                message_id=conversation_id,
                session_id=None,
                asked_from=asked_from,
                forwarded_for=forwarded_for,
            )
        )
    finally:
        slot.release()
    docs = [{"title": s.title, "url": s.url} for s in unique_pages(sources.sources if sources else [])]
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
    payload: dict[str, Any] = {"gpt_result": done.answer, "docs": docs, "conversation_id": conversation_id}
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
            original_question=question,
            rephrased_question=rewrite.get("rewritten"),
            response_time=round(time.perf_counter() - started, 3),
            rephrase_time=None if not rewrite else round(float(rewrite.get("time_ms", 0.0)) / 1000.0, 3),
        )
    return 200, payload


async def kolzchut_rate(*, res: Resources, body: RatingRequest) -> dict[str, Any]:
    """Record a like/dislike on a conversation (404 for unknown ids: the extension shows the status)."""
    rating: Rating | None = None if body.like is None else ("up" if body.like else "down")
    await res.store.set_feedback(body.conversation_id, rating=rating, comment=body.free_text)
    res.pipeline.metrics.feedback.labels("kolzchut", rating or "none").inc()
    return {"conversation_id": body.conversation_id, "like": body.like, "free_text": body.free_text}


async def kolzchut_get_config(*, res: Resources) -> KolZchutConfig:
    """The live configuration (defaults until the first ``set_config``)."""
    return await res.configs.get()


async def kolzchut_set_config(*, res: Resources, body: KolZchutConfigIn) -> KolZchutConfig:
    """Validate and store a new configuration version; the next search uses it."""
    return await res.configs.set(body)


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
    forwarded_for: Annotated[str | None, Header(alias="X-Forwarded-For")] = None,
) -> Response:
    """KZChatbot's question: ``{gpt_result, docs, conversation_id}`` (plus debug fields when asked)."""
    answered = await unless_disconnected(
        kolzchut_search(res=res, body=body, forwarded_for=first_forwarded(forwarded_for)),
        disconnected=http_request.is_disconnected,
    )
    if answered is None:
        return Response(status_code=CLIENT_GONE)
    status, payload = answered
    return JSONResponse(payload, status_code=status)


@router.post("/rating", responses={404: {"model": ErrorBody, "description": "no such conversation_id"}})
async def rating(body: RatingRequest, res: ResourcesDep) -> dict[str, Any]:
    """Like, dislike or withdraw on a conversation; unknown ids are 404."""
    return await kolzchut_rate(res=res, body=body)


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


@router.api_route("/get_config_metadata", methods=["GET", "POST"])
async def get_config_metadata(res: ResourcesDep) -> dict[str, Any]:
    """What the admin page may choose: models, temperature and page-count options, field types."""
    return res.configs.metadata()
