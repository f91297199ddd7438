"""The MCP server on the chat service: tools ``retrieve``, ``ask`` and ``get_page`` over streamable HTTP
at ``/mcp``, behind the same credentials as the HTTP API (the ``chat`` scope).

It uses the official SDK's ``MCPServer`` in stateless JSON mode (every POST stands alone, so any
replica can answer it). The endpoint is a plain ASGI route added to the chat app, wrapped by
``ScopeGuard``, which runs ``ragbot.http.auth.authenticate`` exactly as ``require("chat")`` does for
the HTTP routes; the SDK's session manager runs inside the app's lifespan (``ChatMcp.running``).
Each tool call counts against the caller's rate limits like the HTTP route it mirrors (``retrieve``
and ``get_page`` in the ``search`` group, ``ask`` in ``chat``); a refusal is a tool error saying when
to retry.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from ragbot.chat.events import ChatRequest
from ragbot.chat.schemas import Mode
from ragbot.chat.sessions import new_id
from ragbot.chat.tools import AskToolResult, PageToolResult, RetrieveToolResult, tool_paragraphs
from ragbot.errors import Forbidden, RagbotError, RateLimited, Unauthenticated
from ragbot.http.auth import RouteAuth, authenticate
from ragbot.http.auth.dependency import api_key_scheme, basic_scheme, bearer_scheme
from ragbot.http.limits import RateLimiter, RouteGroup
from ragbot.prompts import detect_language
from ragbot.schemas.retrieval import FilterValue, RetrieveRequest
from ragbot.settings import AuthScope
from ragbot_chat.deps import Resources
from ragbot_chat.service import collect, run_and_store

PATH = "/mcp"
INSTRUCTIONS = (
    "Search and ask the wiki ragbot indexes. `retrieve` returns paragraphs with their page title, url and "
    "scores; `ask` answers a question with numbered citations [n] (citations[].index); `get_page` "
    "returns every paragraph of a page by its id."
)


class ScopeGuard:
    """An ASGI wrapper letting a request through only when it may use ``scope`` (else 401/403 JSON)."""

    def __init__(self, app: ASGIApp, *, scope: AuthScope) -> None:
        self.app = app
        self.need = RouteAuth(scope=scope)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        try:
            await authenticate(
                request,
                need=self.need,
                bearer=await bearer_scheme(request),
                api_key=await api_key_scheme(request),
                basic=await basic_scheme(request),
                token=None,
            )
        except (Unauthenticated, Forbidden) as exc:
            status = 401 if isinstance(exc, Unauthenticated) else 403
            headers = {"WWW-Authenticate": 'Bearer realm="ragbot"'} if status == 401 else None
            await JSONResponse({"detail": str(exc)}, status_code=status, headers=headers)(
                scope, receive, send
            )
            return
        await self.app(scope, receive, send)


class ChatMcp:
    """The chat service's MCP server; its tools read the app's resources while the app runs."""

    def __init__(self, *, version: str = "") -> None:
        self.app: FastAPI | None = None
        self.server: MCPServer[Any] = MCPServer(name="ragbot", version=version, instructions=INSTRUCTIONS)
        self.server.tool(name="retrieve", structured_output=True)(self.retrieve)
        self.server.tool(name="ask", structured_output=True)(self.ask)
        self.server.tool(name="get_page", structured_output=True)(self.get_page)

    def mount(self, app: FastAPI) -> None:
        """Add ``/mcp`` to ``app``, guarded by the ``chat`` scope (outside the OpenAPI: it speaks MCP)."""
        self.app = app
        app.router.routes.append(
            Route(PATH, endpoint=ScopeGuard(self.endpoint, scope="chat"), methods=["GET", "POST", "DELETE"])
        )

    async def endpoint(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The SDK's streamable HTTP transport of the session manager ``running`` started."""
        await self.server.session_manager.handle_request(scope, receive, send)

    @asynccontextmanager
    async def running(self, app: FastAPI) -> AsyncIterator[None]:
        """The SDK's session manager for one run of the app (a fresh one each time the app starts)."""
        self.app = app
        # Host/Origin checks are off: callers are authenticated by key, or by a trusted network.
        self.server.streamable_http_app(
            streamable_http_path=PATH,
            stateless_http=True,
            json_response=True,
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        async with self.server.session_manager.run():
            yield

    def _resources(self) -> Resources:
        resources: Resources | None = getattr(self.app.state, "resources", None) if self.app else None
        if resources is None:
            raise ToolError("the chat service is still starting")
        return resources

    async def _count(self, ctx: Context, group: RouteGroup) -> None:
        """Count the call against its caller's limits of ``group`` (the HTTP request ``ScopeGuard``
        authenticated carries who the caller is)."""
        limiter: RateLimiter | None = getattr(self.app.state, "rate_limiter", None) if self.app else None
        request = ctx.request_context.request
        if limiter is None or not isinstance(request, Request):
            return
        try:
            await limiter.check(request, group)
        except RateLimited as exc:
            raise ToolError(str(exc)) from exc

    async def retrieve(
        self,
        ctx: Context,
        query: str,
        filters: dict[str, FilterValue] | None = None,
        paragraphs_per_page: list[int] | None = None,
    ) -> RetrieveToolResult:
        """Search the wiki: paragraphs grouped by page in rank order, with page title, url and scores.

        Args:
            query: what to search for, in the wiki's language (Hebrew or English).
            filters: stored field -> value (or list of values), e.g. {"page_id": 42}.
            paragraphs_per_page: pages back, and at most this many paragraphs from each, e.g. [3, 2, 1].
        """
        res = self._resources()
        await self._count(ctx, "search")
        try:
            request = RetrieveRequest.model_validate(
                {
                    "query": query,
                    "filters": filters,
                    "paragraphs_per_page": paragraphs_per_page or list(res.settings.paragraphs_per_page),
                    "retrieval_size": res.settings.retrieval_size,
                }
            )
            response = await res.retriever.retrieve(request)
        except (RagbotError, ValueError) as exc:
            raise ToolError(str(exc)) from exc
        return RetrieveToolResult(
            query=request.query,
            paragraphs=tool_paragraphs(
                [d.model_dump() for d in response.documents], response.debug.model_dump()
            ),
            timings_ms=response.timings_ms,
        )

    async def ask(self, ctx: Context, question: str, mode: Mode | None = None) -> AskToolResult:
        """Answer a question from the wiki with numbered citations ([n] is citations[].index).

        Args:
            question: the question, in Hebrew or English (the answer follows its language).
            mode: strict (only the wiki), grounded (the wiki first; the default), open (no retrieval) or
                quote (the wiki's sentences that answer, word for word, no LLM).
        """
        res = self._resources()
        await self._count(ctx, "chat")
        try:
            text = res.pipeline.check_question(question)
            request = ChatRequest(
                question=text,
                mode=mode or res.settings.default_mode,
                language=detect_language(text),
                channel="mcp",
            )
            message_id = new_id()
            slot = await res.admission.acquire(needs_llm=request.mode != "quote")
            try:
                sources, done, error = await collect(
                    run_and_store(res=res, request=request, message_id=message_id, session_id=None)
                )
            finally:
                slot.release()
        except RagbotError as exc:
            raise ToolError(str(exc)) from exc
        if error is not None or done is None:
            raise ToolError(error.message if error is not None else "no answer")
        return AskToolResult(
            message_id=message_id,
            question=text,
            mode=request.mode,
            answer=done.answer,
            abstained=done.abstained,
            citations=done.citations,
            retrieved_not_cited=done.retrieved_not_cited,
            rewritten_question=sources.rewritten_question if sources else None,
        )

    async def get_page(self, ctx: Context, page_id: int) -> PageToolResult:
        """Every indexed paragraph of one wiki page, in order (its id is a paragraph's page_id).

        Args:
            page_id: the wiki's page id.
        """
        res = self._resources()
        await self._count(ctx, "search")
        try:
            page = await res.retriever.page(page_id)
        except RagbotError as exc:
            raise ToolError(str(exc)) from exc
        documents = [d.model_dump(by_alias=True) for d in page.documents]
        paragraphs = tool_paragraphs(documents, {})
        first = paragraphs[0] if paragraphs else None
        return PageToolResult(
            page_id=page.page_id,
            title=first.title if first else None,
            url=first.url if first else None,
            paragraphs=paragraphs,
        )
