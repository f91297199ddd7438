"""JSON bodies checked before any route parses them: UTF-8, depth, finite numbers, 64-bit integers.

FastAPI answers an unparseable body with an undocumented ``400 "There was an error parsing the body"``
and lets ``1e400`` (infinity), 40-digit integers, lone surrogates and 10,000-level nesting reach the
models and the stores. This ASGI middleware reads every body sent as ``application/json`` (or
``*/*+json``), refuses a bad one with the validation error shape every route already documents
(``422 {"detail": [{"loc": ["body"], "msg": ..., "type": "json_invalid"}]}``, the message saying what to
fix) or ``413`` over ``MAX_JSON_BODY_BYTES``, and hands a good one on unchanged. Routes with a protocol
of their own for bad bodies (the Kol-Zchut widget's Hebrew 400s) are exempted by path prefix.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from typing import Any

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ragbot.schemas.limits import MAX_INT64, MAX_JSON_BODY_BYTES, MAX_JSON_DEPTH

__all__ = ["JsonGuardMiddleware", "json_problem"]

_BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_SURROGATE = re.compile("[\ud800-\udfff]")
_INT64_DIGITS = len(str(MAX_INT64))


class _Refused(ValueError):
    """A number JSON allows but no store can hold."""


def _constant(name: str) -> Any:
    raise _Refused(f"{name} is not a JSON number: send a finite number or null")


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Refused(f"the number {text[:40]} is beyond the range of a 64-bit float: send a smaller one")
    return value


def _int(text: str) -> int:
    digits = text.lstrip("-")
    if len(digits) > _INT64_DIGITS or abs(int(text)) > MAX_INT64:
        shown = text if len(text) <= 40 else text[:40] + "..."
        raise _Refused(
            f"the integer {shown} is beyond the 64-bit range (at most {MAX_INT64}) that the stores hold"
        )
    return int(text)


def _too_deep(value: Any, *, max_depth: int) -> str | None:
    """Why ``value`` is refused after parsing: nesting past ``max_depth``, or a lone surrogate."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return "a string holds a lone UTF-16 surrogate (\\ud800-\\udfff escape): send real characters"
            continue
        if not isinstance(item, dict | list):
            continue
        if depth > max_depth:
            return f"the body nests arrays or objects deeper than {max_depth} levels: flatten it"
        children = [*item.keys(), *item.values()] if isinstance(item, dict) else item
        stack.extend((child, depth + 1) for child in children)
    return None


def json_problem(body: bytes, *, max_depth: int = MAX_JSON_DEPTH) -> str | None:
    """What is wrong with a JSON body, in words a client can act on; None when it is fine."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"the body is not valid UTF-8 (byte {exc.start}): send JSON encoded as UTF-8"
    try:
        value = json.loads(text, parse_constant=_constant, parse_float=_float, parse_int=_int)
    except _Refused as exc:
        return str(exc)
    except RecursionError:
        return f"the body nests arrays or objects deeper than {max_depth} levels: flatten it"
    except json.JSONDecodeError as exc:
        return f"the body is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
    except ValueError as exc:  # e.g. an integer over Python's digit limit
        return f"the body is not acceptable JSON: {exc}"
    return _too_deep(value, max_depth=max_depth)


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
    ) -> None:
        self.app = app
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
                response = JSONResponse(
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
            await JSONResponse({"detail": detail}, status_code=422)(scope, receive, send)
            return
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)
