"""The embedded llama.cpp runtime with the packaged SmolLM2-135M GGUF: real generation, streamed.

The model answers poorly; these tests check streaming, usage, cancellation and concurrency. Prompts
stay short and English (Hebrew costs about one token per letter with this tokenizer).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from ragbot.llms import complete, with_timeouts
from ragbot.llms.llamacpp import LlamaCppChatModel
from ragbot.ports import ChatMessage

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(300)]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def llm() -> AsyncIterator[LlamaCppChatModel]:
    model = LlamaCppChatModel(parallel=4, context_tokens=1024)
    assert model.loaded is False
    await asyncio.to_thread(model.warm_up)
    assert model.loaded is True and await model.ping() is True
    yield model
    await model.close()
    assert await model.ping() is False


@pytest.mark.asyncio(loop_scope="module")
async def test_it_streams_real_tokens_and_reports_usage(llm: LlamaCppChatModel) -> None:
    stream = llm.stream(messages=[ChatMessage("user", "Say hello.")], max_tokens=8, temperature=0.0)
    pieces = [piece async for piece in stream]
    assert pieces and all(isinstance(p, str) for p in pieces)
    assert stream.usage.reported is True
    assert stream.usage.prompt_tokens is not None and stream.usage.prompt_tokens > 0
    assert 1 <= stream.usage.completion_tokens <= 8
    assert stream.usage.finish_reason in {"stop", "length"}


@pytest.mark.asyncio(loop_scope="module")
async def test_a_request_without_temperature_is_accepted(llm: LlamaCppChatModel) -> None:
    stream = llm.stream(messages=[ChatMessage("user", "Say hello.")], max_tokens=4, temperature=None)
    assert await complete(stream)
    assert stream.usage.reported is True and 1 <= stream.usage.completion_tokens <= 4


@pytest.mark.asyncio(loop_scope="module")
async def test_closing_the_stream_stops_generation(llm: LlamaCppChatModel) -> None:
    before = llm.server_metrics()["llamacpp:tokens_predicted_total"]
    stream = llm.stream(messages=[ChatMessage("user", "Count from 1 to 500, one per line.")], max_tokens=400)
    seen = 0
    async for _ in stream:
        seen += 1
        if seen == 3:
            break
    await stream.aclose()
    after = before
    # The slot releases at its next decode step and only then counts its tokens; on a loaded 2-core
    # machine that can take seconds, so poll against a generous deadline (never a fixed sleep).
    deadline = time.monotonic() + 60.0
    while time.monotonic() < deadline:
        await asyncio.sleep(0.05)
        metrics = llm.server_metrics()
        after = metrics["llamacpp:tokens_predicted_total"]
        if after > before and metrics["llamacpp:requests_processing"] == 0:
            break
    assert 3 <= after - before < 50


@pytest.mark.asyncio(loop_scope="module")
async def test_concurrent_streams_each_complete(llm: LlamaCppChatModel) -> None:
    async def one(n: int) -> str:
        stream = with_timeouts(
            llm.stream(messages=[ChatMessage("user", f"Repeat the number {n}.")], max_tokens=6),
            first_token_s=120,
            idle_s=60,
            total_s=240,
        )
        return await complete(stream)

    answers = await asyncio.gather(*(one(n) for n in range(6)))
    assert len(answers) == 6 and all(answers)


@pytest.mark.asyncio(loop_scope="module")
async def test_a_prompt_longer_than_the_context_is_an_llm_error(llm: LlamaCppChatModel) -> None:
    from ragbot.llms import LLMError

    with pytest.raises(LLMError, match="context"):
        await complete(llm.stream(messages=[ChatMessage("user", "word " * 1500)], max_tokens=4))


async def test_close_stops_running_requests_and_frees_the_model() -> None:
    model = LlamaCppChatModel(parallel=1, context_tokens=512)
    await asyncio.to_thread(model.warm_up)
    stream = model.stream(messages=[ChatMessage("user", "Count from 1 to 500.")], max_tokens=400)
    first = await anext(stream)
    assert first and model.in_flight == 1
    await asyncio.wait_for(model.close(), timeout=60)
    assert model.in_flight == 0 and model.loaded is False
    rest = [piece async for piece in stream]
    assert len(rest) < 50
