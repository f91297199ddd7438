"""KZChatbot's ``/ping/redis``, ``/ping/llm_manager`` and ``/ping/es_docker``: whether one dependency of
chat answers, and how long it took (200, or 503 with the same ``PingResult`` when it does not).

Their 401/403 are the auth layer's ``{detail}`` (``ragbot.http.responses``), and a 503 may also be the
service's own "still starting" body: both are in their OpenAPI.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from ragbot.chat.kolzchut import PingResult, PingService
from ragbot.errors import RagbotError
from ragbot_chat.deps import Resources, ResourcesDep

PING_TIMEOUT_S = 5.0
# A ping's 503: the dependency's PingResult, or the service's own "still starting" body.
PING_DOWN: dict[str, Any] = {
    "description": "the dependency is not answering (PingResult), or chat itself is still starting",
    "content": {
        "application/json": {
            "schema": {
                "anyOf": [
                    {"$ref": "#/components/schemas/PingResult"},
                    {"$ref": "#/components/schemas/UnavailableBody"},
                ]
            }
        }
    },
}
PINGS: dict[PingService, tuple[str, Callable[[Resources], Awaitable[bool]]]] = {
    "redis": ("Redis (conversations and the config)", lambda res: res.store.ping()),
    "llm_manager": ("the LLM", lambda res: res.llm.ping()),
    "es_docker": ("the search store, through the retriever", lambda res: res.retriever.ping_store()),
}


async def ping_service(*, res: Resources, service: PingService) -> PingResult:
    """Whether one dependency answers within ``PING_TIMEOUT_S``, and how long it took."""
    what, check = PINGS[service]
    started = time.perf_counter()
    try:
        alive = await asyncio.wait_for(check(res), timeout=PING_TIMEOUT_S)
        detail = f"{what} answered" if alive else f"{what} is not answering"
    except TimeoutError:
        alive, detail = False, f"{what} did not answer within {PING_TIMEOUT_S:g} s"
    except RagbotError as exc:
        alive, detail = False, f"{what}: {exc}"
    if service == "llm_manager":
        detail = f"{detail} ({res.llm.backend}, {res.llm.model})"
    elapsed = round((time.perf_counter() - started) * 1000.0, 2)
    return PingResult(service=service, status="ok" if alive else "down", detail=detail, elapsed_ms=elapsed)


def _ping_route(service: PingService) -> Callable[[Resources], Awaitable[JSONResponse]]:
    async def ping(res: ResourcesDep) -> JSONResponse:
        result = await ping_service(res=res, service=service)
        return JSONResponse(result.model_dump(mode="json"), status_code=200 if result.status == "ok" else 503)

    ping.__doc__ = f"Whether {PINGS[service][0]} answers: 200, or 503 when it does not."
    return ping


def add_ping_routes(router: APIRouter) -> None:
    """Add the three ping routes to KZChatbot's router."""
    for service in PINGS:
        router.add_api_route(
            f"/ping/{service}",
            _ping_route(service),
            methods=["GET"],
            response_model=PingResult,
            responses={503: PING_DOWN},
            name=f"ping_{service}",
        )
