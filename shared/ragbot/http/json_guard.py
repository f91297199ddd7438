"""JSON bodies checked before any route parses them: UTF-8, depth, finite numbers, 64-bit integers.

FastAPI answers an unparseable body with an undocumented ``400 "There was an error parsing the body"``
and lets ``1e400`` (infinity), 40-digit integers, lone surrogates and 10,000-level nesting reach the
models and the stores. This ASGI middleware reads every body sent as ``application/json`` (or
``*/*+json``), refuses a bad one with the validation error shape every route already documents
(``422 {"detail": [{"loc": ["body"], "msg": ..., "type": "json_invalid"}]}``, the message saying what to
fix) or ``413`` over ``MAX_JSON_BODY_BYTES``, and hands a good one on unchanged. Routes with a protocol
of their own for bad bodies (the Kol-Zchut widget's Hebrew 400s) are exempted by path prefix. A caller
the route would refuse gets that refusal (401/403) instead of the body's problem (``credentials_first``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ragbot.schemas.limits import MAX_JSON_BODY_BYTES, MAX_JSON_DEPTH
from ragbot.schemas.strict_json import json_problem

__all__ = ["JsonGuardMiddleware", "json_problem"]

_BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def _is_json(scope: Scope) -> bool:
    for name, value in scope.get("headers", []):
        if name == b"content-type":
            media = bytes(value).split(b";", 1)[0].strip().lower()
            return media == b"application/json" or media.endswith(b"+json")
    return False


class JsonGuardMiddleware:
    """Refuses bad JSON bodies with a 422 (or 413) naming the problem; passes good ones on as they came."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        max_depth: int = MAX_JSON_DEPTH,
        max_bytes: int = MAX_JSON_BODY_BYTES,
        exempt_prefixes: Sequence[str] = (),
        credentials_first: Callable[[Scope], Awaitable[Response | None]] | None = None,
    ) -> None:
        self.app = app
        self.credentials_first = credentials_first
        self.exempt_prefixes = tuple(exempt_prefixes)
        self.max_depth = max_depth
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Check one request's JSON body; other requests pass through untouched."""
        if (
            scope["type"] != "http"
            or scope.get("method") not in _BODY_METHODS
            or not _is_json(scope)
            or str(scope.get("path", "")).startswith(self.exempt_prefixes)
        ):
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                response = await self._refusal(scope) or JSONResponse(
                    {"detail": f"the JSON body is over the {self.max_bytes}-byte limit: send less"},
                    status_code=413,
                )
                await response(scope, receive, send)
                return
            chunks.append(chunk)
            more = bool(message.get("more_body", False))
        body = b"".join(chunks)
        problem = json_problem(body, max_depth=self.max_depth) if body else None
        if problem is not None:
            detail = [{"loc": ["body"], "msg": problem, "type": "json_invalid"}]
            response = await self._refusal(scope) or JSONResponse({"detail": detail}, status_code=422)
            await response(scope, receive, send)
            return
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _refusal(self, scope: Scope) -> Response | None:
        """The 401/403 the route gives this caller, if it would refuse them (None: it would not)."""
        return await self.credentials_first(scope) if self.credentials_first else None
