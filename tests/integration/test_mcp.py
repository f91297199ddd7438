"""The chat service's MCP server (``/mcp``) driven by the official SDK's own client over real HTTP: tools
listed and each one called against real retrieval and real Redis; with keys configured, a caller
without one gets 401 and a chat key gets in."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import httpx
import httpx2
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from support.auth import KEYS, auth_settings, chat_app
from support.chat_fakes import ScriptedLLM, serve_app
from support.chat_stack import ChatServer, chat_server
from support.processes import delete_redis_prefix

from ragbot.ports import ChatMessage
from ragbot.settings import clear_settings_caches

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

QUESTION = "מי זכאי לפטור ממס הכנסה?"


def script(messages: Sequence[ChatMessage]) -> str:
    last = messages[-1].content
    if "שאילתה עצמאית" in last or "Standalone query" in last:
        return "פטור ממס הכנסה"
    return "התשובה במקורות [1]."


@pytest.fixture(scope="module")
def server(redis_url: str) -> Iterator[ChatServer]:
    with chat_server(llm=ScriptedLLM(script), redis_url=redis_url) as running:
        yield running


@asynccontextmanager
async def mcp_session(url: str, headers: dict[str, str] | None = None) -> AsyncIterator[ClientSession]:
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(60.0)) as client,
        streamable_http_client(f"{url}/mcp", http_client=client) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


async def call(url: str, name: str, arguments: dict[str, Any]) -> tuple[bool, Any]:
    async with mcp_session(url) as session:
        result = await session.call_tool(name, arguments)
        return bool(result.is_error), result.structured_content or result.content


def test_tools_are_listed_with_typed_inputs_and_outputs(server: ChatServer) -> None:
    async def listing() -> dict[str, Any]:
        async with mcp_session(server.url) as session:
            return {t.name: t for t in (await session.list_tools()).tools}

    tools = asyncio.run(listing())
    assert set(tools) == {"retrieve", "ask", "get_page"}
    assert set(tools["retrieve"].input_schema["properties"]) == {"query", "filters", "paragraphs_per_page"}
    assert tools["retrieve"].input_schema["required"] == ["query"]
    assert set(tools["ask"].input_schema["properties"]) == {"question", "mode"}
    assert tools["get_page"].input_schema["required"] == ["page_id"]
    for tool in tools.values():
        assert tool.output_schema is not None and tool.output_schema["type"] == "object"
    assert "paragraphs" in tools["retrieve"].output_schema["properties"]
    assert "citations" in tools["ask"].output_schema["properties"]


def test_retrieve_then_get_page_then_ask(server: ChatServer) -> None:
    error, found = asyncio.run(
        call(server.url, "retrieve", {"query": QUESTION, "paragraphs_per_page": [2, 1]})
    )
    assert not error, found
    paragraphs = found["paragraphs"]
    pages = list(dict.fromkeys(p["page_id"] for p in paragraphs))
    assert len(pages) == 2 and len(paragraphs) <= 3
    first = paragraphs[0]
    assert first["title"] and first["content"] and first["doc_id"]
    assert first["score"] > 0 and first["branch_scores"]
    assert found["timings_ms"]["total"] > 0

    error, filtered = asyncio.run(
        call(server.url, "retrieve", {"query": QUESTION, "filters": {"page_id": pages[1]}})
    )
    assert not error and {p["page_id"] for p in filtered["paragraphs"]} == {pages[1]}

    error, page = asyncio.run(call(server.url, "get_page", {"page_id": first["page_id"]}))
    assert not error, page
    assert page["page_id"] == first["page_id"] and page["title"] == first["title"]
    numbers = [p["paragraph"] for p in page["paragraphs"]]
    assert numbers == sorted(numbers) and len(numbers) >= 1
    assert first["doc_id"] in {p["doc_id"] for p in page["paragraphs"]}

    error, missing = asyncio.run(call(server.url, "get_page", {"page_id": 987654321}))
    assert error and "987654321" in str(missing)

    error, answer = asyncio.run(call(server.url, "ask", {"question": QUESTION, "mode": "strict"}))
    assert not error, answer
    assert answer["answer"] == "התשובה במקורות [1]." and answer["mode"] == "strict"
    assert [c["index"] for c in answer["citations"]] == [1]
    assert answer["citations"][0]["title"] and answer["citations"][0]["page_id"] in pages + [
        s["page_id"] for s in answer["retrieved_not_cited"]
    ]
    # the answer went through the chat pipeline and was stored for feedback like any other
    stored = server.keys()
    assert any(key.endswith(answer["message_id"]) for key in stored)

    error, refused = asyncio.run(call(server.url, "ask", {"question": "   "}))
    assert error and "must not be empty" in str(refused)


def test_with_keys_configured_a_caller_without_one_gets_401() -> None:
    with serve_app(chat_app(auth_settings())) as url:
        plain = httpx.post(
            f"{url}/mcp",
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            headers={"Accept": "application/json, text/event-stream"},
        )
        assert plain.status_code == 401, plain.text
        assert plain.headers["www-authenticate"].startswith("Bearer")
        assert "chat" in plain.json()["detail"]

        wrong = httpx.post(f"{url}/mcp", json={}, headers={"Authorization": "Bearer not-a-key-0123456789"})
        assert wrong.status_code == 401

        metrics_only = httpx.post(
            f"{url}/mcp", json={}, headers={"Authorization": f"Bearer {KEYS['prometheus'][0]}"}
        )
        assert metrics_only.status_code == 403

        async def with_key() -> set[str]:
            bearer = {"Authorization": f"Bearer {KEYS['kzchatbot'][0]}"}
            async with mcp_session(url, bearer) as session:
                return {t.name for t in (await session.list_tools()).tools}

        assert asyncio.run(with_key()) == {"retrieve", "ask", "get_page"}

        async def without_key() -> None:
            async with mcp_session(url) as session:
                await session.list_tools()

        with pytest.raises(BaseException):  # noqa: B017 (the SDK wraps the 401 in a task group)
            asyncio.run(without_key())


def test_tool_calls_count_against_the_callers_rate_limits(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """retrieve and get_page in the search group, ask in chat; a refusal is a tool error with its wait."""
    prefix = f"test-mcp-limits-{uuid.uuid4().hex[:12]}"
    monkeypatch.setenv("RAGBOT_RATE_LIMIT_ENABLED", "true")
    monkeypatch.setenv("RAGBOT_REDIS_URL", redis_url)
    monkeypatch.setenv("RAGBOT_REDIS_KEY_PREFIX", prefix)
    monkeypatch.setenv("RAGBOT_RATE_LIMIT_SEARCH_PER_ADDRESS", "2/minute")
    monkeypatch.setenv("RAGBOT_RATE_LIMIT_CHAT_PER_ADDRESS", "1/minute")
    clear_settings_caches()

    async def calls(url: str) -> list[tuple[bool, str]]:
        out = []
        plan: list[tuple[str, dict[str, Any]]] = [
            ("retrieve", {"query": QUESTION}),
            ("get_page", {"page_id": 100029}),
            ("retrieve", {"query": QUESTION}),
            ("ask", {"question": QUESTION, "mode": "quote"}),
            ("ask", {"question": QUESTION, "mode": "quote"}),
        ]
        async with mcp_session(url) as session:
            for name, arguments in plan:
                result = await session.call_tool(name, arguments)
                out.append((bool(result.is_error), str(result.content)))
        return out

    try:
        with chat_server(llm=ScriptedLLM(script), redis_url=redis_url) as running:
            results = asyncio.run(calls(running.url))
    finally:
        clear_settings_caches()
        delete_redis_prefix(redis_url, prefix)
    assert [error for error, _ in results] == [False, False, True, False, True], results
    for _, text in (results[2], results[4]):
        assert "rate limit of" in text and "retry in" in text
    assert "search requests" in results[2][1] and "chat requests" in results[4][1]
