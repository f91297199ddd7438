"""A real OTLP/HTTP trace receiver for tests: ``POST /v1/traces`` (protobuf, gzip or not) from a thread.

The services under test export to it exactly as they would to an OpenTelemetry Collector; the test
reads back flat ``CollectedSpan`` records and waits, bounded, for the spans it expects.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from support.waits import TIMEOUT_S, holds_within

KINDS = {0: "unspecified", 1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}


@dataclass(frozen=True)
class CollectedSpan:
    """One received span, ids in hex."""

    service: str
    name: str
    kind: str
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, Any]
    events: tuple[str, ...]
    status_code: int


def _value(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    if which == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, which) if which else None


@dataclass
class OtlpCollector:
    """Collects every span posted to it; ``endpoint`` is what ``OTEL_EXPORTER_OTLP_ENDPOINT`` takes."""

    spans: list[CollectedSpan] = field(default_factory=list)
    requests: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:<port>``."""
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> OtlpCollector:
        """Listen on a free port in a daemon thread."""
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="otlp-collector", daemon=True).start()
        return self

    def stop(self) -> None:
        """Stop listening."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def __enter__(self) -> OtlpCollector:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def snapshot(self) -> list[CollectedSpan]:
        """The spans received so far."""
        with self._lock:
            return list(self.spans)

    def trace(self, trace_id: str) -> list[CollectedSpan]:
        """Every span received for one trace."""
        return [s for s in self.snapshot() if s.trace_id == trace_id]

    def wait_for(
        self, done: Callable[[list[CollectedSpan]], bool], *, timeout_s: float = TIMEOUT_S
    ) -> list[CollectedSpan]:
        """Poll until ``done(spans)`` holds; return the spans either way (the caller asserts)."""
        holds_within(lambda: done(self.snapshot()), timeout_s=timeout_s)
        return self.snapshot()

    def _receive(self, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        received: list[CollectedSpan] = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            service = str(resource.get("service.name", ""))
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    received.append(
                        CollectedSpan(
                            service=service,
                            name=span.name,
                            kind=KINDS.get(span.kind, str(span.kind)),
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_span_id=span.parent_span_id.hex(),
                            attributes={a.key: _value(a.value) for a in span.attributes},
                            events=tuple(e.name for e in span.events),
                            status_code=span.status.code,
                        )
                    )
        with self._lock:
            self.spans.extend(received)
            self.requests += 1

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path != "/v1/traces":
                    self.send_response(404)
                    self.end_headers()
                    return
                collector._receive(body)
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: object) -> None:
                """Quiet."""

        return Handler
