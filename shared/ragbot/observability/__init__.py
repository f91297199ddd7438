"""Observability shared by every process: JSON logs with a request id, Prometheus metrics, HTTP glue."""

from ragbot.observability.logging import (
    REQUEST_ID_HEADER,
    configure_logging,
    get_request_id,
    new_request_id,
    request_id_scope,
    set_request_id,
)

__all__ = [
    "REQUEST_ID_HEADER",
    "configure_logging",
    "get_request_id",
    "new_request_id",
    "request_id_scope",
    "set_request_id",
]
