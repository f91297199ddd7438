"""Where a request enters the chat service, and which module answers each contract.

- ``native``         ``/v1/sessions``, ``/v1/messages``: ragbot's own API (SSE or one JSON body)
- ``openai_compat``  ``/v1/chat/completions``, ``/v1/models``: OpenAI's shapes, with citations
- ``kolzchut``       ``/search``, ``/rating``, ``/get_config`` ...: KZChatbot's contract
- ``feedback``       ``/v1/feedback``: rated answers for review and export (admin)
- ``widget``         ``/kzchatbot/v0/*``: the KZChatbot widget talking to ragbot directly (with its CORS)
- ``ui``             the browser pages and their static files
- ``kolzchut_pages`` ``/admin.html``, ``/index.html``, ``/batch-runner.html``: the pages KZChatbot frames

Every contract runs its turns through ``service`` (the pipeline's events, stored before ``done``);
the streaming ones frame them with ``sse``. The health routes come from ``ragbot.http.app``.

Scopes (``route_auth``): ``admin`` for ``/set_config``, ``/clean_redis_history``, ``/v1/feedback`` and
the UI's ``/ui/api/*`` proxies, ``chat`` for everything else (the Kol-Zchut reads ``/get_config``...
included: KZChatbot's server calls them with its chat key); the pages themselves sign in (``ui``).
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.routing import APIRoute

from ragbot.http.auth import RouteAuth
from ragbot_chat import feedback, kolzchut, native, openai_compat

ROUTERS: tuple[APIRouter, ...] = (native.router, openai_compat.router, kolzchut.router, feedback.router)
ADMIN_PATHS = frozenset({"/set_config", "/clean_redis_history", "/v1/feedback"})
ADMIN_PREFIX = "/ui/api/"


def route_auth(route: APIRoute) -> RouteAuth:
    """The scope a chat route needs."""
    if route.path in ADMIN_PATHS or route.path.startswith(ADMIN_PREFIX):
        return RouteAuth(scope="admin")
    return RouteAuth(scope="chat")
