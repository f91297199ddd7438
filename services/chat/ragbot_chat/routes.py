"""Where a request enters the chat service, and which module answers each contract.

- ``native``         ``/v1/sessions``, ``/v1/messages``: ragbot's own API (SSE or one JSON body)
- ``openai_compat``  ``/v1/chat/completions``, ``/v1/models``: OpenAI's shapes, with citations
- ``kolzchut``       ``/search``, ``/rating``, ``/get_config`` ...: KZChatbot's contract
- ``widget``         ``/kzchatbot/v0/*``: the KZChatbot widget talking to ragbot directly (with its CORS)
- ``ui``             the browser pages and their static files

Every contract runs its turns through ``service`` (the pipeline's events, stored before ``done``);
the streaming ones frame them with ``sse``. The health routes come from ``ragbot.http.app``.
"""

from __future__ import annotations

from fastapi import APIRouter

from ragbot_chat import kolzchut, native, openai_compat

ROUTERS: tuple[APIRouter, ...] = (native.router, openai_compat.router, kolzchut.router)
