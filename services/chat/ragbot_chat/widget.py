"""The Kol-Zchut widget endpoints: what the KZChatbot React app calls when it talks to ragbot directly,
without MediaWiki in between (same origin, or the origins CORS allows).

- ``GET  /kzchatbot/v0/status?uuid=``  the browser's uuid (a new one when none or an unknown one is
  given), whether to show the chatbot, questions left today and the cookie's expiry
- ``POST /kzchatbot/v0/question``      ``{text, uuid, referrer}`` -> ``{llmResult, docs, conversationId}``;
  answered by the same pipeline, configuration and storage as ``POST /search``
- ``POST /kzchatbot/v0/rate``          ``{answerId, like, text?}``; a second call replaces what it sends

Errors are for people: ``{message}`` in Hebrew (question, status) or ``{messageTranslations: {he}}``
(rate), from a route class that catches them before the service-wide JSON handlers do.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Coroutine
from typing import Annotated, Any, ClassVar

from fastapi import APIRouter, FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from pydantic import BaseModel
from starlette.exceptions import HTTPException
from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

from ragbot.chat.feedback import merge_feedback
from ragbot.chat.kolzchut import SearchRequest
from ragbot.chat.widget import (
    MESSAGES,
    DocLink,
    QuestionAnswer,
    QuestionRequest,
    RateRequest,
    RateResult,
    WidgetStatus,
    WidgetUsers,
    find_banned,
)
from ragbot.errors import (
    DependencyUnavailable,
    Forbidden,
    NotFound,
    RagbotError,
    RateLimited,
    Unauthenticated,
    ValidationFailed,
)
from ragbot.http.auth import authenticate_first, include_scoped
from ragbot.http.limits import rate_limit
from ragbot.observability.http import retry_after_headers
from ragbot_chat.deps import Resources, ResourcesDep
from ragbot_chat.kolzchut import first_forwarded, kolzchut_search
from ragbot_chat.service import record_feedback

logger = logging.getLogger(__name__)

PREFIX = "/kzchatbot/v0"


class WidgetError(Exception):
    """A refusal the widget shows its user: an HTTP status and a key of ``MESSAGES``."""

    def __init__(self, status: int, key: str, **values: Any) -> None:
        super().__init__(key)
        self.status = status
        self.message = MESSAGES[key].format(**values)


# -- use cases ---------------------------------------------------------------------------------------


def widget_users(res: Resources) -> WidgetUsers:
    """The widget's users in the chat service's Redis, under its key prefix."""
    settings = res.settings
    return WidgetUsers(
        client=res.store.client,
        prefix=res.store.prefix,
        daily_questions=settings.widget_daily_questions,
        cookie_days=settings.widget_cookie_days,
        shown_percent=settings.widget_shown_percent,
        timezone=settings.widget_timezone,
    )


async def widget_status(*, res: Resources, user_id: str | None) -> WidgetStatus:
    """The state the widget starts from; an expired or unknown uuid is replaced rather than refused."""
    users = widget_users(res)
    user = await users.get(user_id) if user_id else None
    if user is None:
        user = await users.create()
    return WidgetStatus(
        uuid=user.uuid,
        chatbotIsShown=user.shown,
        questionsPermitted=await users.questions_permitted(user.uuid),
        cookieExpiry=user.cookie_expiry,
    )


def check_widget_question(*, res: Resources, text: str) -> str:
    """Refuse before any allowance is used: empty (400), too long (413), banned words (403)."""
    question = text.strip()
    if not question:
        raise WidgetError(400, "empty")
    limit = res.settings.max_question_chars
    if len(question) > limit:
        raise WidgetError(413, "too_long", limit=limit)
    banned = find_banned(question, res.settings.widget_banned_words)
    if banned is not None:
        logger.info("widget question refused for a banned word", extra={"banned_word": banned})
        raise WidgetError(403, "banned")
    return question


async def widget_question(*, res: Resources, body: QuestionRequest, client_ip: str | None) -> QuestionAnswer:
    """Answer like ``/search`` does, counted against the uuid's daily allowance (returned on failure)."""
    users = widget_users(res)
    if await users.get(body.uuid) is None:
        raise WidgetError(404, "unknown_user")
    question = check_widget_question(res=res, text=body.text)
    day = await users.take_question(body.uuid)
    if day is None:
        raise WidgetError(429, "daily_limit")
    answered = False
    try:
        status, payload = await kolzchut_search(
            res=res,
            body=SearchRequest(query=question, asked_from=body.referrer),
            forwarded_for=client_ip,
        )
        if status != 200:
            logger.warning("widget question not answered", extra={"status": status, **payload})
            raise WidgetError(503, "unavailable") if status == 503 else WidgetError(400, "invalid")
        answered = True
    finally:
        if not answered:
            with contextlib.suppress(DependencyUnavailable):
                await users.give_back(body.uuid, day)
    return QuestionAnswer(
        llmResult=payload["gpt_result"],
        docs=[DocLink.model_validate(doc) for doc in payload["docs"]],
        conversationId=payload["conversation_id"],
    )


async def widget_rate(*, res: Resources, body: RateRequest) -> RateResult:
    """Store the rating merged into what is stored (``merge_feedback``): a null never erases a value,
    except ``like: null`` with no text, the widget's withdraw."""
    limit = res.settings.widget_feedback_chars
    if body.text is not None and len(body.text) > limit:
        raise WidgetError(400, "too_long", limit=limit)
    stored = await res.store.message(body.answerId)
    rating, comment = merge_feedback(
        stored_rating=stored.rating,
        stored_comment=stored.comment,
        like_sent="like" in body.model_fields_set,
        like=body.like,
        text=body.text,
    )
    record = await record_feedback(
        res=res, message_id=body.answerId, rating=rating, comment=comment, channel="widget"
    )
    return RateResult(
        answerId=record.message_id,
        like=None if record.rating is None else record.rating == "up",
        text=record.comment,
    )


# -- error shapes ------------------------------------------------------------------------------------


class MessageError(BaseModel):
    """Error body of ``/question`` and ``/status``."""

    message: str


class Translations(BaseModel):
    """Messages per language."""

    he: str


class TranslatedError(BaseModel):
    """Error body of ``/rate``."""

    messageTranslations: Translations  # the React app's field name


def _refusal(exc: Exception, *, not_found: str) -> tuple[int, str]:
    if isinstance(exc, WidgetError):
        return exc.status, exc.message
    if isinstance(exc, Unauthenticated | Forbidden):  # ragbot.http.auth: says what to send
        return (401 if isinstance(exc, Unauthenticated) else 403), str(exc)
    if isinstance(exc, RequestValidationError | ValidationFailed | HTTPException):
        return 400, MESSAGES["invalid"]  # HTTPException: FastAPI's 400 for a body it cannot parse
    if isinstance(exc, NotFound):
        return 404, MESSAGES[not_found]
    if isinstance(exc, RateLimited):
        return 429, MESSAGES["rate_limited"].format(seconds=exc.retry_after_s)
    if isinstance(exc, DependencyUnavailable):
        return 503, MESSAGES["unavailable"]
    return 500, MESSAGES["failed"]


class _WidgetRoute(APIRoute):
    """Turns refusals and failures into the widget's error body, in Hebrew."""

    not_found: ClassVar[str] = "unknown_user"

    @staticmethod
    def body(message: str) -> dict[str, Any]:
        return {"message": message}

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def handle(request: Request) -> Response:
            try:
                return await handler(request)
            except (WidgetError, RequestValidationError, RagbotError, HTTPException) as exc:
                if isinstance(exc, HTTPException) and exc.status_code != 400:
                    raise
                if isinstance(exc, RequestValidationError | HTTPException):
                    try:  # a body refused before the credentials were read: those come first
                        await authenticate_first(request)
                    except (Unauthenticated, Forbidden) as refused:
                        exc = refused
                status, message = _refusal(exc, not_found=self.not_found)
                log = logger.error if status >= 500 else logger.info
                log(
                    "widget request refused: %s",
                    exc,
                    extra={"status": status, "error_type": type(exc).__name__, "path": request.url.path},
                )
                headers = retry_after_headers(exc) or {}
                if status == 401:
                    headers = {**headers, "WWW-Authenticate": 'Bearer realm="ragbot"'}
                return JSONResponse(self.body(message), status_code=status, headers=headers or None)

        return handle


class QuestionRoute(_WidgetRoute):
    """``{message}`` errors."""


class RateRoute(_WidgetRoute):
    """``{messageTranslations: {he}}`` errors."""

    not_found: ClassVar[str] = "unknown_answer"

    @staticmethod
    def body(message: str) -> dict[str, Any]:
        return {"messageTranslations": {"he": message}}


def _errors(model: type[BaseModel], *codes: int) -> dict[int | str, dict[str, Any]]:
    return {code: {"model": model} for code in codes}


# -- routes ------------------------------------------------------------------------------------------

question_router = APIRouter(prefix=PREFIX, tags=["kolzchut widget"], route_class=QuestionRoute)
rate_router = APIRouter(prefix=PREFIX, tags=["kolzchut widget"], route_class=RateRoute)


@question_router.get(
    "/status",
    response_model=WidgetStatus,
    responses=_errors(MessageError, 429, 503),
    dependencies=[rate_limit("widget")],
)
async def status(
    res: ResourcesDep,
    response: Response,
    uuid: Annotated[str | None, Query(description="the uuid from the cookie; none: a new one")] = None,
) -> WidgetStatus:
    """The widget's uuid (new when none is given or it expired), visibility and questions left today."""
    response.headers["Cache-Control"] = "no-store"
    return await widget_status(res=res, user_id=uuid)


@question_router.post(
    "/question",
    response_model=QuestionAnswer,
    responses=_errors(MessageError, 400, 403, 404, 413, 429, 503),
    dependencies=[rate_limit("widget")],
)
async def question(
    body: QuestionRequest,
    request: Request,
    res: ResourcesDep,
    forwarded_for: Annotated[str | None, Header(alias="X-Forwarded-For")] = None,
) -> QuestionAnswer:
    """Answer a question from the widget: Markdown, the pages it rests on, and its id for ``/rate``."""
    # The client a proxy reported, kept with the answer as sent (KZChatbot's contract); the auth layer's
    # trusted-proxy view of the client is request.state.client_ip (what rate limits key on).
    client_ip = first_forwarded(forwarded_for)
    if client_ip is None and request.client is not None:
        client_ip = request.client.host
    return await widget_question(res=res, body=body, client_ip=client_ip)


@rate_router.post(
    "/rate",
    response_model=RateResult,
    responses=_errors(TranslatedError, 400, 404, 429, 503),
    dependencies=[rate_limit("widget")],
)
async def rate(body: RateRequest, res: ResourcesDep) -> RateResult:
    """Like, dislike or withdraw on an answer, with optional text; called again, the last write wins."""
    return await widget_rate(res=res, body=body)


router = APIRouter()
router.include_router(question_router)
router.include_router(rate_router)


# -- CORS --------------------------------------------------------------------------------------------


class WidgetCORS:
    """Starlette's ``CORSMiddleware`` on the widget's paths only, with the origins from the settings the
    lifespan loaded (``widget_cors_origins``; none: no CORS headers, so browsers keep same origin)."""

    def __init__(self, app: ASGIApp, *, prefix: str = PREFIX) -> None:
        self.app = app
        self.prefix = prefix
        self._cors: dict[tuple[str, ...], ASGIApp] = {}

    def _origins(self, scope: Scope) -> tuple[str, ...]:
        app = scope.get("app")
        resources: Resources | None = getattr(getattr(app, "state", None), "resources", None)
        return tuple(resources.settings.widget_cors_origins) if resources is not None else ()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not str(scope.get("path", "")).startswith(self.prefix):
            await self.app(scope, receive, send)
            return
        origins = self._origins(scope)
        if not origins:
            await self.app(scope, receive, send)
            return
        cors = self._cors.get(origins)
        if cors is None:
            cors = CORSMiddleware(
                self.app,
                allow_origins=origins,
                allow_methods=["GET", "POST"],
                allow_headers=["Content-Type"],
                allow_credentials=False,
                max_age=600,
            )
            self._cors[origins] = cors
        await cors(scope, receive, send)


def install(app: FastAPI) -> None:
    """Add the widget's routes and its CORS to the chat app."""
    for part in (question_router, rate_router):
        include_scoped(app, part, "chat")
    app.add_middleware(WidgetCORS)
