"""``POST /v1/chat/completions`` with the official ``openai`` package (stream and not), real retrieval."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import httpx
import openai
import pytest
from support.chat_fakes import ScriptedLLM
from support.chat_stack import ChatServer, chat_server
from support.processes import free_port

from ragbot.ports import ChatMessage

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

QUESTION = "מי זכאי לפטור ממס הכנסה?"


def script(messages: Sequence[ChatMessage]) -> str:
    if "שאילתה עצמאית" in messages[-1].content:
        return "פטור ממס הכנסה"
    return "לפי המקור [1]."


@pytest.fixture(scope="module")
def server(redis_url: str) -> Iterator[ChatServer]:
    with chat_server(llm=ScriptedLLM(script), redis_url=redis_url) as running:
        yield running


@pytest.fixture
def client(server: ChatServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=60) as sdk:
        yield sdk


def test_a_completion_answers_with_citations(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(
        model="ragbot", messages=[{"role": "user", "content": QUESTION}]
    )
    message = completion.choices[0].message
    assert message.role == "assistant" and message.content is not None
    assert message.content.startswith("לפי המקור [1].") and "מקורות:\n[1] " in message.content
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None and completion.usage.completion_tokens > 0
    extra = completion.model_extra or {}
    assert extra["citations"][0]["index"] == 1 and extra["sources"]


def test_a_streamed_completion_arrives_in_chunks(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model="ragbot", messages=[{"role": "user", "content": QUESTION}], stream=True
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.startswith("לפי המקור [1].") and len(chunks) > 3
    last = chunks[-1]
    assert last.choices[0].finish_reason == "stop"
    assert (last.model_extra or {})["citations"][0]["index"] == 1


def test_history_makes_a_follow_up(client: openai.OpenAI, server: ChatServer) -> None:
    assert isinstance(server.llm, ScriptedLLM)
    client.chat.completions.create(
        model="ragbot",
        messages=[
            {"role": "system", "content": "ignored: ragbot's own system prompt governs"},
            {"role": "user", "content": "מה זה פטור ממס?"},
            {"role": "assistant", "content": "פטור הוא..."},
            {"role": "user", "content": [{"type": "text", "text": "ולמי?"}]},
        ],
    )
    rewrite, answer = server.llm.calls[-2], server.llm.calls[-1]
    assert "מה זה פטור ממס?" in rewrite.messages[0].content
    assert [m.role for m in answer.messages] == ["system", "user", "assistant", "user"]
    assert "ignored" not in answer.messages[0].content and "ולמי?" in answer.messages[-1].content


def test_models_lists_ragbot(client: openai.OpenAI) -> None:
    assert [m.id for m in client.models.list()] == ["ragbot"]


def test_llm_down_is_an_api_error_for_the_sdk(client: openai.OpenAI, server: ChatServer) -> None:
    assert isinstance(server.llm, ScriptedLLM)
    server.llm.state = "down"
    try:
        with pytest.raises(openai.APIStatusError) as plain:
            client.chat.completions.create(model="ragbot", messages=[{"role": "user", "content": QUESTION}])
        with pytest.raises(openai.APIError, match="down"):
            list(
                client.chat.completions.create(
                    model="ragbot", messages=[{"role": "user", "content": QUESTION}], stream=True
                )
            )
    finally:
        server.llm.state = "up"
    assert plain.value.status_code == 503


def test_a_request_without_a_user_message_is_refused(client: openai.OpenAI) -> None:
    with pytest.raises(openai.UnprocessableEntityError):
        client.chat.completions.create(model="ragbot", messages=[{"role": "system", "content": "hi"}])


def test_with_redis_down_sessions_fail_clearly_but_stateless_answers_still_come() -> None:
    dead = f"redis://127.0.0.1:{free_port()}/0"
    with chat_server(llm=ScriptedLLM(script), redis_url=dead) as running:
        response = httpx.post(f"{running.url}/v1/sessions", json={}, timeout=30)
        assert response.status_code == 503 and response.json()["dependency"] == "redis"
        assert httpx.get(f"{running.url}/readyz", timeout=30).json()["checks"]["redis"] is False
        with openai.OpenAI(base_url=running.url + "/v1", api_key="unused", max_retries=0, timeout=60) as sdk:
            completion = sdk.chat.completions.create(
                model="ragbot", messages=[{"role": "user", "content": QUESTION}]
            )
    assert (completion.choices[0].message.content or "").startswith("לפי המקור [1].")
