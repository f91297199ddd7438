"""The error responses every operation can return, with the bodies the services really send, added to
each service's OpenAPI in one place so clients (and Schemathesis) see every status a route may answer.

FastAPI documents only the success response and, for routes with parameters, a 422 shaped as a list of
validation issues. The services also answer 400 (a body that cannot be parsed, an unknown Host), 401/403
(credentials, where keys are configured), 404 (an unknown id in the path), 413 (over a size cap), 431
(too many or too large headers: ``ragbot.http.head_guard``, ``ragbot.http.server``), 422 (a field named
in a list, or one message) and 503 (a dependency down, named in ``dependency``; 429 comes from the rate-
limited routes themselves): ``document_error_responses`` adds those an operation does not declare
itself, with the operation's own error body where it declares one (the Kol-Zchut widget's
``{message}``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict, Field


class ErrorBody(BaseModel):
    """What went wrong and what to change, as one sentence."""

    model_config = ConfigDict(extra="allow")

    detail: str = Field(description="what went wrong and what to fix")


class UnavailableBody(ErrorBody):
    """A dependency did not answer; try again later."""

    dependency: str | None = Field(default=None, description="the dependency that did not answer")


class ValidationIssue(BaseModel):
    """One field that failed validation: where, why, and the kind of error."""

    model_config = ConfigDict(extra="allow")

    loc: list[str | int] = Field(description="where: body, query, path or header, then the field")
    msg: str
    type: str


class ValidationErrorBody(BaseModel):
    """The request was understood but a field is wrong: each issue names it, or one message says why."""

    detail: list[ValidationIssue] | str


_RETRY_AFTER = {
    "Retry-After": {"description": "seconds to wait before trying again", "schema": {"type": "integer"}}
}
COMMON_RESPONSES: dict[int, tuple[str, type[BaseModel], dict[str, Any]]] = {
    400: (
        "the body could not be parsed (send what the operation's content type says), or the Host header "
        "is not one this service answers to",
        ErrorBody,
        {},
    ),
    401: ("no credentials, or a key that is not configured (when keys are configured)", ErrorBody, {}),
    403: ("the key or network is not granted this operation's scope", ErrorBody, {}),
    413: ("the body or a part is over its size cap", ErrorBody, {}),
    431: ("too many headers, or a request line and headers over their size cap", ErrorBody, {}),
    422: ("a field is missing or invalid: the detail names it", ValidationErrorBody, {}),
    503: ("a dependency is unavailable or busy: try again later", UnavailableBody, _RETRY_AFTER),
}
# 429 is documented only by the routes a rate limit guards (``ragbot.http.limits.RATE_LIMITED``).
NOT_FOUND: tuple[str, type[BaseModel], dict[str, Any]] = ("nothing has the id in the path", ErrorBody, {})
MODELS: tuple[type[BaseModel], ...] = (ErrorBody, UnavailableBody, ValidationIssue, ValidationErrorBody)
_METHODS = frozenset({"get", "put", "post", "delete", "patch", "options", "head", "trace"})
_REF = "#/components/schemas/{model}"


def _response(description: str, ref: str, headers: dict[str, Any]) -> dict[str, Any]:
    body: dict[str, Any] = {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": ref}}},
    }
    if headers:
        body["headers"] = headers
    return body


def add_error_responses(schema: dict[str, Any]) -> dict[str, Any]:
    """Add the common error responses each operation lacks (in place; idempotent) and their models.

    FastAPI's own 422 (validation issues only) is widened to ``ValidationErrorBody``, because the
    services also answer 422 with one message (a refused source, an unknown conversation field)."""
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    for model in MODELS:
        definition = model.model_json_schema(ref_template=_REF)
        for name, nested in definition.pop("$defs", {}).items():
            components.setdefault(name, nested)
        components[model.__name__] = definition
    for path, item in schema.get("paths", {}).items():
        for method, operation in item.items():
            if method not in _METHODS or not isinstance(operation, dict):
                continue
            responses: dict[str, Any] = operation.setdefault("responses", {})
            own = _own_error_ref(responses)
            wanted = dict(COMMON_RESPONSES)
            if "{" in path:
                wanted[404] = NOT_FOUND
            for status, (description, model, headers) in wanted.items():
                ref = own or _REF.format(model=model.__name__)
                current = responses.get(str(status))
                if current is None:
                    responses[str(status)] = _response(description, ref, headers)
                elif status == 422 and _ref(current) == _REF.format(model="HTTPValidationError"):
                    responses["422"] = _response(description, ref, headers)
    return schema


def _ref(response: dict[str, Any]) -> str:
    return str(response.get("content", {}).get("application/json", {}).get("schema", {}).get("$ref", ""))


def _own_error_ref(responses: dict[str, Any]) -> str | None:
    """The error body an operation declares for itself on a 4xx (the widget's ``{message}``), if any: the
    statuses added to it are answered with that body too. A 5xx of its own (the ``/ping/*`` routes'
    ``PingResult``) says nothing about how the auth layer refuses."""
    ours = {_REF.format(model=m.__name__) for m in MODELS} | {_REF.format(model="HTTPValidationError")}
    for status, response in responses.items():
        ref = _ref(response)
        if status[:1] == "4" and ref and ref not in ours:
            return ref
    return None


def document_error_responses(app: FastAPI) -> None:
    """Make ``app.openapi()`` carry the common error responses on every operation."""
    generate: Callable[[], dict[str, Any]] = app.openapi

    def openapi() -> dict[str, Any]:
        return add_error_responses(generate())

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented way to extend the schema
