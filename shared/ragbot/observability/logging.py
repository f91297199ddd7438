"""Structured JSON logs, one object per line, carrying the request id of the work in progress.

The request id lives in a ``ContextVar``: the HTTP middleware sets it from ``X-Request-ID`` (or makes
one), the queue sends it in the task headers, and the worker sets it again around each task, so one
grep follows a wiki ping from ingest into the embedder. With tracing on, each line also carries the
``trace_id`` and ``span_id`` of the span it was written in (``ragbot.observability.spans``).
"""

from __future__ import annotations

import json
import logging
import re
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token
from datetime import UTC, datetime
from typing import Any

from ragbot.observability.spans import current_ids

REQUEST_ID_HEADER = "X-Request-ID"
_VALID_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")
_request_id: ContextVar[str | None] = ContextVar("ragbot_request_id", default=None)

# Attributes every LogRecord has; anything else passed through ``extra=`` is logged as a field.
_STANDARD_ATTRS = frozenset(
    vars(logging.LogRecord("", 0, "", 0, "", None, None)).keys()
    | {"message", "asctime", "request_id", "trace_id", "span_id", "color_message"}
)


def new_request_id() -> str:
    """A fresh request id (uuid4 hex) for work that did not arrive with one."""
    return uuid.uuid4().hex


def clean_request_id(value: str | None) -> str | None:
    """Accept a caller's request id only when it is short and safe to log and echo back."""
    if value and _VALID_REQUEST_ID.match(value):
        return value
    return None


def get_request_id() -> str | None:
    """The request id of the current context, if any."""
    return _request_id.get()


def set_request_id(value: str | None) -> Token[str | None]:
    """Bind a request id to the current context; keep the token to reset it."""
    return _request_id.set(value)


def reset_request_id(token: Token[str | None]) -> None:
    """Restore the request id that was bound before ``set_request_id``."""
    _request_id.reset(token)


@contextmanager
def request_id_scope(value: str | None) -> Iterator[str]:
    """Run a block under a request id (a new one when ``value`` is missing or unsafe)."""
    rid = clean_request_id(value) or new_request_id()
    token = _request_id.set(rid)
    try:
        yield rid
    finally:
        _request_id.reset(token)


class RequestIdFilter(logging.Filter):
    """Stamp every record with the context's request id and the process's service name."""

    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def filter(self, record: logging.LogRecord) -> bool:
        """Add the fields; never drop a record."""
        record.request_id = _request_id.get()
        ids = current_ids()
        record.trace_id, record.span_id = ids if ids else (None, None)
        record.service = getattr(record, "service", None) or self.service
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, request id, extra fields, exception."""

    def format(self, record: logging.LogRecord) -> str:
        """Serialise a record; values JSON cannot hold are written with ``str``."""
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        rid = getattr(record, "request_id", None)
        if rid:
            out["request_id"] = rid
        trace_id = getattr(record, "trace_id", None)
        if trace_id:
            out["trace_id"] = trace_id
            out["span_id"] = getattr(record, "span_id", None)
        for key, value in vars(record).items():
            if key not in _STANDARD_ATTRS and not key.startswith("_"):
                out[key] = value
        if record.exc_info:
            out["exc_info"] = self.formatException(record.exc_info)
        if record.stack_info:
            out["stack_info"] = self.formatStack(record.stack_info)
        return json.dumps(out, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    """Human-readable lines for local development (``RAGBOT_LOG_JSON=false``)."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(service)s %(name)s [%(request_id)s] %(message)s")


def configure_logging(*, service: str, level: str = "INFO", json_lines: bool = True) -> None:
    """Send every logger's records to stderr in one format (idempotent: replaces earlier handlers)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if json_lines else TextFormatter())
    handler.addFilter(RequestIdFilter(service))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    # uvicorn and celery install their own handlers; route them through ours instead.
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "celery", "celery.task", "celery.worker"):
        lib = logging.getLogger(name)
        lib.handlers.clear()
        lib.propagate = True
    # Our middleware writes one access line per request with the route and request id.
    logging.getLogger("uvicorn.access").setLevel(logging.WARNING)
