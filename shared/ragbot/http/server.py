"""How every HTTP service is served: uvicorn on h11 with a bounded request head, answering 431 (not
uvicorn's generic 400) when the head is over ``RAGBOT_HTTP_MAX_HEADER_BYTES``.

h11 keeps at most that many bytes of an unfinished head and then stops reading, so an 8 MB header is
refused after 32 KiB, not read in full. The header *count* is checked once the head is parsed
(``ragbot.http.head_guard``). uvicorn's httptools parser has no such bound, so h11 is chosen here.
"""

from __future__ import annotations

from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from ragbot.settings import HttpSettings

TOO_LARGE = 431


class _BoundedConnection(h11.Connection):
    """h11's connection, remembering the status h11 suggests for the last protocol error it raised."""

    refused_status: int | None = None

    def next_event(self) -> Any:
        try:
            return super().next_event()
        except h11.RemoteProtocolError as exc:
            self.refused_status = exc.error_status_hint
            raise


class BoundedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol answering 431 with a sentence when the request head is too large."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.bounded = _BoundedConnection(h11.SERVER, self.config.h11_max_incomplete_event_size or 16 * 1024)
        self.conn = self.bounded

    def send_400_response(self, msg: str) -> None:
        if self.bounded.refused_status != TOO_LARGE:
            super().send_400_response(msg)
            return
        limit = self.config.h11_max_incomplete_event_size
        body = (
            f'{{"detail": "the request line and headers are over {limit} bytes; send fewer or shorter '
            'headers (RAGBOT_HTTP_MAX_HEADER_BYTES)"}'
        ).encode()
        headers = [(b"content-type", b"application/json"), (b"connection", b"close")]
        self.transport.write(
            self.conn.send(
                h11.Response(
                    status_code=TOO_LARGE, headers=headers, reason=b"Request Header Fields Too Large"
                )
            )
        )
        self.transport.write(self.conn.send(h11.Data(data=body)))
        self.transport.close()


def serve(app: Any, *, host: str, port: int, settings: HttpSettings) -> None:
    """Run ``app`` until interrupted, with a bounded request head.

    ``proxy_headers=False``: X-Forwarded-For is trusted by ``ragbot.http.auth``
    (``RAGBOT_AUTH_TRUSTED_PROXIES``) alone, never rewritten into the peer address by uvicorn.
    """
    uvicorn.run(
        app,
        host=host,
        port=port,
        log_config=None,
        proxy_headers=False,
        http=BoundedH11Protocol,
        h11_max_incomplete_event_size=settings.max_header_bytes,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
    )


GRACEFUL_SHUTDOWN_S = 10
"""Seconds a stopping service gives open requests (a streamed answer) before it closes them, well inside
compose's and Kubernetes' grace periods, so SIGTERM never needs a SIGKILL."""
