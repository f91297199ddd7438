"""Pieces of the chat service that need no Redis: SSE framing and keep-alives, OpenAI message parsing,
the CLI's SSE reader, and the app refusing to start on a bad prompts folder."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import cast

import pytest
import redis.asyncio as aioredis
from support.chat_fakes import ScriptedLLM, StaticRetriever, parse_sse

from ragbot.chat.schemas import Source
from ragbot.cli.chat import iter_sse
from ragbot.errors import ConfigurationError, ValidationFailed
from ragbot.settings import ChatSettings
from ragbot_chat.app import assemble
from ragbot_chat.deps import Resources
from ragbot_chat.openai_compat import openai_turn, openai_usage, sources_footer
from ragbot_chat.sse import sse, unless_disconnected, with_pings

NO_REDIS = cast(aioredis.Redis, None)


def resources(**settings: object) -> Resources:
    return assemble(
        settings=ChatSettings(**settings),  # type: ignore[arg-type]
        llm=ScriptedLLM(),
        retriever=StaticRetriever(),
        redis_client=NO_REDIS,
        key_prefix="unit",
    )


def test_sse_events_are_one_json_line_each() -> None:
    frame = sse("token", {"text": "שורה\nשנייה"})
    assert frame == 'event: token\ndata: {"text": "שורה\\nשנייה"}\n\n'.encode()
    assert parse_sse(frame.decode())[0].data == {"text": "שורה\nשנייה"}


async def test_pings_fill_silences_and_closing_closes_the_source() -> None:
    closed = asyncio.Event()

    async def slow() -> AsyncIterator[bytes]:
        try:
            yield b"event: sources\ndata: {}\n\n"
            await asyncio.sleep(0.35)
            yield b"event: done\ndata: {}\n\n"
            await asyncio.sleep(3600)
            yield b"never"
        finally:
            closed.set()

    chunks: list[bytes] = []
    stream = with_pings(slow(), every_s=0.1)
    async for chunk in stream:
        chunks.append(chunk)
        if chunk.startswith(b"event: done"):
            break
    await stream.aclose()
    assert chunks[0].startswith(b"event: sources") and chunks[-1].startswith(b"event: done")
    assert chunks.count(b": ping\n\n") >= 2
    await asyncio.wait_for(closed.wait(), timeout=2)


async def test_a_json_answer_is_cancelled_when_its_client_leaves() -> None:
    cancelled = asyncio.Event()
    polls = 0

    async def answer(value: str, delay_s: float) -> str:
        try:
            await asyncio.sleep(delay_s)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return value

    async def gone_on_second_poll() -> bool:
        nonlocal polls
        polls += 1
        return polls >= 2

    async def never_gone() -> bool:
        return False

    quick = await unless_disconnected(answer("ok", 0.0), disconnected=gone_on_second_poll)
    assert quick == "ok" and polls == 0 and not cancelled.is_set()
    slow = answer("late", 3600)
    assert await unless_disconnected(slow, disconnected=gone_on_second_poll, every_s=0.01) is None
    assert cancelled.is_set() and polls == 2
    with pytest.raises(ValidationFailed):
        await unless_disconnected(_refuse(), disconnected=never_gone, every_s=0.01)


async def _refuse() -> str:
    raise ValidationFailed("query must not be empty", field="query")


def test_openai_messages_become_a_question_and_history() -> None:
    res = resources()
    request = openai_turn(
        res=res,
        messages=[
            {"role": "system", "content": "be nice"},
            {"role": "user", "content": "first?"},
            {"role": "assistant", "content": "first answer"},
            {"role": "user", "content": [{"type": "text", "text": "second?"}, {"type": "image_url"}]},
        ],
        mode=None,
    )
    assert request.question == "second?" and request.mode == "grounded" and request.channel == "openai"
    assert [(t.question, t.answer) for t in request.history] == [("first?", "first answer")]
    with pytest.raises(ValidationFailed) as error:
        openai_turn(res=res, messages=[{"role": "assistant", "content": "hi"}], mode="open")
    assert error.value.field == "messages"


def test_sources_footer_lists_cited_sources_in_the_answer_language() -> None:
    source = Source(
        index=2, title="גמלה", url="https://x/1", page_id=1, paragraph=0, score=1.0, doc_id="1-1-0"
    )
    assert sources_footer([source], "he") == "\n\nמקורות:\n[2] גמלה — https://x/1"
    assert sources_footer([], "en") == ""
    assert openai_usage({"prompt_tokens": None, "completion_tokens": 3}) == {
        "prompt_tokens": 0,
        "completion_tokens": 3,
        "total_tokens": 3,
    }


def test_the_cli_reads_sse_lines() -> None:
    lines = [
        "event: sources",
        'data: {"sources": []}',
        "",
        ": ping",
        "",
        "event: token",
        'data: {"text": "hi"}',
        "",
    ]
    assert list(iter_sse(lines)) == [("sources", {"sources": []}), ("token", {"text": "hi"})]


def test_the_kolzchut_defaults_come_from_the_prompt_files_and_settings() -> None:
    res = resources(paragraphs_per_page=[2, 2], llm_temperature=0.4)
    defaults = res.configs.defaults
    assert defaults.model == "fake-model" and defaults.num_of_pages == 2 and defaults.temperature == 0.4
    assert defaults.version == 0 and "{mode_instructions}" not in defaults.system_prompt
    assert res.configs.available_models == ["fake-model"]


def test_a_bad_prompts_folder_stops_the_app_from_starting(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError):
        resources(prompts_dir=tmp_path / "missing")


def test_context_budget_depends_on_the_backend() -> None:
    assert ChatSettings().context_budget_chars == 1000
    assert ChatSettings(llm_backend="ollama").context_budget_chars == 8000
    assert ChatSettings(llm_backend="ollama", context_max_chars=500).context_budget_chars == 500
