"""OpenAPI for Server-Sent Event streams: a ``text/event-stream`` response whose schema is ``oneOf`` the
models of its events, and those models added to the document's components.

OpenAPI 3.1 has no way to say "a sequence of these"; the convention here is that the ``oneOf`` lists
what one event may be (a model with the event's name as a ``const`` and its ``data``), in the order
the description gives. On the wire ``data`` is a line of JSON text, so the document says so the way
JSON Schema does (``type: string``, ``contentMediaType: application/json``, ``contentSchema``: the
payload's model): Schemathesis and other SSE-aware validators decode and check it. Routes declare
``responses=event_stream_response(...)``; the app factory's caller registers the same models with
``document_stream_models`` so the ``$ref``s resolve.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

_REF = "#/components/schemas/{model}"


def event_stream_response(
    events: Sequence[type[BaseModel]], *, description: str
) -> dict[int | str, dict[str, Any]]:
    """The 200 response of a streaming route: ``text/event-stream``, one of ``events`` per event (a
    route's ``response_model`` still adds its ``application/json`` beside it)."""
    content: dict[str, Any] = {
        "text/event-stream": {
            "schema": {"oneOf": [{"$ref": _REF.format(model=m.__name__)} for m in events]},
        }
    }
    return {200: {"description": description, "content": content}}


def json_data(schema: dict[str, Any]) -> dict[str, Any]:
    """An SSE ``data`` field carrying ``schema`` as JSON text."""
    return {"type": "string", "contentMediaType": "application/json", "contentSchema": schema}


def sse_frame(data_schema: dict[str, Any], *, event: str | None = None) -> dict[str, Any]:
    """One SSE event (its ``event`` name when given, its JSON ``data``) as a JSON Schema."""
    properties: dict[str, Any] = {"data": json_data(data_schema)}
    if event is not None:
        properties = {"event": {"const": event, "type": "string"}, **properties}
    return {"type": "object", "properties": properties, "required": list(properties)}


def _as_wire(definition: dict[str, Any]) -> dict[str, Any]:
    """An event model's schema with a JSON payload in ``data`` declared as the JSON text it is sent as."""
    data = definition.get("properties", {}).get("data")
    if not isinstance(data, dict) or data.get("type") == "string":
        return definition  # a plain-text payload (``[DONE]``) is sent as it is
    return {**definition, "properties": {**definition["properties"], "data": json_data(data)}}


def stream_components(models: Sequence[type[BaseModel]]) -> dict[str, Any]:
    """The JSON schemas of ``models`` and every model they use, keyed by name, as components."""
    _, top = models_json_schema([(m, "serialization") for m in models], ref_template=_REF)
    defs: dict[str, Any] = top.get("$defs", {})
    return defs


def document_stream_models(app: FastAPI, models: Sequence[type[BaseModel]]) -> None:
    """Make ``app.openapi()`` carry ``models`` (the stream events) among its components.

    A component the routes already put there under the same name is kept (same model, same name).
    """
    generate: Callable[[], dict[str, Any]] = app.openapi

    def openapi() -> dict[str, Any]:
        schema = generate()
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        names = {m.__name__ for m in models}
        for name, definition in stream_components(models).items():
            components.setdefault(name, _as_wire(definition) if name in names else definition)
        return schema

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented way to extend the schema
