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
The open chat page's guests get exactly the calls that page makes (``GUEST_ROUTES``: open a
conversation, read it, ask in it, rate its answers), on their own conversations only.
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.routing import APIRoute

from ragbot.http.auth import RouteAuth
from ragbot_chat import feedback, kolzchut, native, openai_compat

ROUTERS: tuple[APIRouter, ...] = (native.router, openai_compat.router, kolzchut.router, feedback.router)
ADMIN_PATHS = frozenset({"/set_config", "/clean_redis_history", "/v1/feedback"})
ADMIN_PREFIX = "/ui/api/"
# What the chat page (static/js/chat.js) calls, and so all a guest of the open chat page may call.
GUEST_ROUTES = frozenset(
    {
        ("POST", "/v1/sessions"),
        ("GET", "/v1/sessions/{session_id}"),
        ("POST", "/v1/sessions/{session_id}/messages"),
        ("POST", "/v1/messages/{message_id}/feedback"),
    }
)


def route_auth(route: APIRoute) -> RouteAuth:
    """The scope a chat route needs, and whether the chat page's guests may use it."""
    if route.path in ADMIN_PATHS or route.path.startswith(ADMIN_PREFIX):
        return RouteAuth(scope="admin")
    methods = route.methods or set()
    guest = bool(methods) and all((m, route.path) in GUEST_ROUTES for m in methods)
    return RouteAuth(scope="chat", guest=guest)
