"""LLM adapters with their real clients on the wire: the official ``ollama`` AsyncClient against a local
server replaying Ollama's NDJSON stream, and httpx against an OpenAI-compatible SSE server."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest
from pydantic import SecretStr
from support.chat_fakes import FakeOllama, FakeOpenAI, ScriptedLLM
from support.processes import free_port

from ragbot.llms import LLMError, build_llm, complete, with_timeouts
from ragbot.llms.llamacpp import LlamaCppChatModel, chat_body, default_threads, packaged_model_path
from ragbot.llms.ollama import OllamaChatModel
from ragbot.llms.openai_compat import OpenAICompatChatModel
from ragbot.ports import ChatMessage, ChatModel
from ragbot.settings import ChatSettings

MESSAGES = [ChatMessage("system", "Be brief."), ChatMessage("user", "Hi?")]


# -- Ollama ------------------------------------------------------------------------------------------


async def test_ollama_streams_pieces_and_reports_usage() -> None:
    with FakeOllama(["Hel", "lo", " [1]"]) as server:
        llm = OllamaChatModel(model="qwen2.5:3b-instruct", host=server.url)
        llm.warm_up()
        stream = llm.stream(messages=MESSAGES, temperature=0.3, max_tokens=42)
        pieces = [piece async for piece in stream]
        await llm.close()
    assert pieces == ["Hel", "lo", " [1]"]
    assert stream.usage.prompt_tokens == 26 and stream.usage.completion_tokens == 3
    assert stream.usage.finish_reason == "stop"
    method, path, body, _ = server.requests[-1]
    assert (method, path) == ("POST", "/api/chat")
    assert body["stream"] is True and body["model"] == "qwen2.5:3b-instruct"
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi?"},
    ]
    assert body["options"] == {"temperature": 0.3, "num_predict": 42}


async def test_ollama_sends_no_temperature_when_the_model_takes_none() -> None:
    with FakeOllama() as server:
        llm = OllamaChatModel(model="qwen2.5:3b-instruct", host=server.url)
        assert await complete(llm.stream(messages=MESSAGES, temperature=None, max_tokens=9)) == "Hello [1]"
        await llm.close()
    assert server.requests[-1][2]["options"] == {"num_predict": 9}


async def test_ollama_unknown_model_is_an_llm_error_naming_it() -> None:
    with FakeOllama() as server:
        llm = OllamaChatModel(model="nope:1b", host=server.url)
        with pytest.raises(LLMError) as error:
            await complete(llm.stream(messages=MESSAGES))
        await llm.close()
    assert "nope:1b" in str(error.value) and "404" in str(error.value) and error.value.dependency == "llm"


async def test_ollama_server_error_and_ollama_down_are_llm_errors() -> None:
    with FakeOllama() as server:
        server.status = 500
        llm = OllamaChatModel(model="qwen2.5:3b-instruct", host=server.url)
        with pytest.raises(LLMError, match="500"):
            await complete(llm.stream(messages=MESSAGES))
        assert await llm.ping() is True
        await llm.close()
    down = OllamaChatModel(model="m", host=f"http://127.0.0.1:{free_port()}", connect_timeout_s=1)
    with pytest.raises(LLMError, match="unreachable"):
        await complete(down.stream(messages=MESSAGES))
    assert await down.ping() is False
    await down.close()


async def test_ollama_per_request_model_override() -> None:
    with FakeOllama() as server:
        server.known_models.add("llama3:8b")
        llm = OllamaChatModel(model="qwen2.5:3b-instruct", host=server.url)
        assert await complete(llm.stream(messages=MESSAGES, model="llama3:8b")) == "Hello [1]"
        await llm.close()
    assert server.requests[-1][2]["model"] == "llama3:8b"


# -- OpenAI-compatible -------------------------------------------------------------------------------


async def test_openai_compat_streams_sse_with_usage_and_auth() -> None:
    with FakeOpenAI(["Hel", "lo", " [1]"]) as server:
        llm = OpenAICompatChatModel(model="m", base_url=server.url + "/v1", api_key=SecretStr("sk-test"))
        stream = llm.stream(messages=MESSAGES, temperature=0.1, max_tokens=7)
        pieces = [piece async for piece in stream]
        assert await llm.ping() is True
        await llm.close()
    assert pieces == ["Hel", "lo", " [1]"]
    assert stream.usage.prompt_tokens == 12 and stream.usage.completion_tokens == 3
    assert stream.usage.finish_reason == "stop"
    method, path, body, headers = server.requests[0]
    assert (method, path) == ("POST", "/v1/chat/completions")
    assert body["stream"] is True and body["max_tokens"] == 7 and body["temperature"] == 0.1
    assert headers["Authorization"] == "Bearer sk-test"


async def test_openai_compat_sends_no_temperature_when_the_model_takes_none() -> None:
    with FakeOpenAI() as server:
        llm = OpenAICompatChatModel(model="o1", base_url=server.url + "/v1")
        assert await complete(llm.stream(messages=MESSAGES, temperature=None, max_tokens=5)) == "Hello [1]"
        assert await complete(llm.stream(messages=MESSAGES, temperature=0.0)) == "Hello [1]"
        await llm.close()
    without, with_zero = server.requests[0][2], server.requests[1][2]
    assert "temperature" not in without and without["max_tokens"] == 5 and without["model"] == "o1"
    assert with_zero["temperature"] == 0.0


async def test_openai_compat_errors_become_llm_errors() -> None:
    with FakeOpenAI() as server:
        server.status = 503
        llm = OpenAICompatChatModel(model="m", base_url=server.url + "/v1")
        with pytest.raises(LLMError, match=r"HTTP 503.*model overloaded"):
            await complete(llm.stream(messages=MESSAGES))
        server.status = 200
        server.error_midway = True
        with pytest.raises(LLMError, match="out of memory"):
            await complete(llm.stream(messages=MESSAGES))
        await llm.close()
    down = OpenAICompatChatModel(
        model="m", base_url=f"http://127.0.0.1:{free_port()}/v1", connect_timeout_s=1
    )
    with pytest.raises(LLMError, match="unreachable"):
        await complete(down.stream(messages=MESSAGES))
    assert await down.ping() is False
    await down.close()


async def test_a_slow_server_hits_the_first_token_timeout() -> None:
    with FakeOllama(["a", "b"]) as server:
        server.chunk_delay_s = 1.0
        llm = OllamaChatModel(model="qwen2.5:3b-instruct", host=server.url)
        stream = with_timeouts(llm.stream(messages=MESSAGES), first_token_s=0.2, idle_s=5, total_s=10)
        with pytest.raises(LLMError, match=r"first token within 0\.2 s"):
            await complete(stream)
        await llm.close()


# -- the factory and the embedded runtime's lifecycle ------------------------------------------------


def test_the_factory_picks_the_configured_backend_and_loads_nothing() -> None:
    ollama = build_llm(settings=ChatSettings(llm_backend="ollama", llm_model="m", llm_url="http://h:1"))
    assert isinstance(ollama, OllamaChatModel) and ollama.host == "http://h:1" and ollama.model == "m"
    openai = build_llm(settings=ChatSettings(llm_backend="openai", llm_model="x", llm_url="http://h:2/v1/"))
    assert isinstance(openai, OpenAICompatChatModel) and openai.base_url == "http://h:2/v1"
    embedded = build_llm(settings=ChatSettings())
    assert isinstance(embedded, LlamaCppChatModel) and embedded.loaded is False
    assert embedded.model == "SmolLM2-135M-Instruct.Q4_1"
    for llm in (ollama, openai, embedded, ScriptedLLM()):
        assert isinstance(llm, ChatModel)


def test_the_llamacpp_request_carries_a_temperature_only_when_given() -> None:
    body = chat_body(messages=MESSAGES, temperature=None, max_tokens=3, cache_prompt=True)
    assert "temperature" not in body and body["max_tokens"] == 3 and body["stream"] is True
    assert body["messages"][-1] == {"role": "user", "content": "Hi?"}
    assert (
        chat_body(messages=MESSAGES, temperature=0.0, max_tokens=3, cache_prompt=False)["temperature"] == 0.0
    )


def test_llamacpp_threads_leave_cpus_to_the_other_processes() -> None:
    available = len(os.sched_getaffinity(0))
    assert default_threads() == max(1, available // 2)
    configured = build_llm(settings=ChatSettings(llamacpp_threads=3))
    assert isinstance(configured, LlamaCppChatModel) and configured.threads == 3


def test_the_packaged_gguf_is_found_without_importing_its_package() -> None:
    path = packaged_model_path()
    assert path.is_file() and path.suffix == ".gguf" and path.stat().st_size > 50_000_000


async def test_an_unloaded_or_missing_model_is_an_error(tmp_path: Path) -> None:
    llm = LlamaCppChatModel()
    with pytest.raises(LLMError, match="not loaded"):
        await complete(llm.stream(messages=MESSAGES))
    assert await llm.ping() is False
    missing = LlamaCppChatModel(model_path=tmp_path / "missing.gguf")
    with pytest.raises(Exception, match="does not exist"):
        await asyncio.to_thread(missing.warm_up)
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + json.dumps({"not": "a model"}).encode())
    with pytest.raises(LLMError, match="could not load"):
        await asyncio.to_thread(LlamaCppChatModel(model_path=broken).warm_up)


def test_the_llamacpp_request_carries_the_configured_repetition_controls() -> None:
    body = chat_body(messages=MESSAGES, temperature=0.0, max_tokens=3, cache_prompt=True)
    assert (body["repeat_penalty"], body["repeat_last_n"], body["dry_multiplier"]) == (1.1, 128, 0.8)
    configured = build_llm(
        settings=ChatSettings(
            llamacpp_repeat_penalty=1.3, llamacpp_repeat_last_n=64, llamacpp_dry_multiplier=0
        )
    )
    assert isinstance(configured, LlamaCppChatModel)
    assert configured.repetition.body() == {"repeat_penalty": 1.3, "repeat_last_n": 64, "dry_multiplier": 0}
