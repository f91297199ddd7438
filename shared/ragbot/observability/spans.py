"""Spans any layer may open, through the OpenTelemetry API when it is installed, else nothing at all.

Adapters (the embedded store) and the logs use this, never the SDK: with no tracer provider set
(tracing off, ``ragbot.observability.tracing``) the API hands out non-recording spans, and without the
``ragbot[tracing]`` extra ``span`` is an empty block and ``current_ids`` is None.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

try:
    from opentelemetry import trace
except ImportError:  # the optional extra is not installed: tracing is off
    trace = None  # type: ignore[assignment]

TRACER_NAME = "ragbot"
AttributeValue = str | bool | int | float


@contextmanager
def span(name: str, attributes: Mapping[str, AttributeValue] | None = None) -> Iterator[None]:
    """Run a block as a child span of the current one (records nothing while tracing is off)."""
    if trace is None:
        yield
        return
    with trace.get_tracer(TRACER_NAME).start_as_current_span(name, attributes=attributes):
        yield


def current_ids() -> tuple[str, str] | None:
    """The current span's (trace id, span id) in hex, as the logs carry them; None outside a span."""
    if trace is None:
        return None
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return format(context.trace_id, "032x"), format(context.span_id, "016x")
