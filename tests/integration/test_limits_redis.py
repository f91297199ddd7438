"""Fair limits against the real Redis, and LLM admission control through the real chat app.

Each test counts under its own Redis key prefix and deletes it afterwards.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis
from prometheus_client import CollectorRegistry
from support.chat_fakes import ScriptedLLM
from support.chat_stack import ChatServer, chat_server

from ragbot.chat.widget import MESSAGES
from ragbot.errors import RateLimited
from ragbot.http.limits import RateLimiter
from ragbot.settings import RateLimitSettings, clear_settings_caches

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


@pytest.fixture
def prefix(redis_url: str) -> Iterator[str]:
    name = f"test-limits-{uuid.uuid4().hex[:12]}"
    yield name
    client = redis.Redis.from_url(redis_url)
    try:
        keys = list(client.scan_iter(f"{name}:*"))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


async def test_the_n_plus_first_request_is_refused_and_the_window_frees(redis_url: str, prefix: str) -> None:
    settings = RateLimitSettings(enabled=True, chat_per_address="5 per 2 seconds")
    registry = CollectorRegistry()
    limiter = RateLimiter(settings=settings, redis_url=redis_url, key_prefix=prefix, registry=registry)
    try:
        started = time.monotonic()
        for _ in range(5):
            await limiter.hit(group="chat", kind="address", who="192.0.2.1")
        with pytest.raises(RateLimited) as refused:
            await limiter.hit(group="chat", kind="address", who="192.0.2.1")
        assert refused.value.limit == "5 per 2 second"
        assert 1 <= refused.value.retry_after_s <= 2
        await limiter.hit(group="chat", kind="address", who="192.0.2.2")  # another address has its own count
        deadline = started + 10.0
        while True:  # the window frees 2 s after the first hit: poll, bounded
            try:
                await limiter.hit(group="chat", kind="address", who="192.0.2.1")
                break
            except RateLimited:
                assert time.monotonic() < deadline, "the window never freed"
                await asyncio.sleep(0.1)
        assert time.monotonic() - started >= 1.9
        client = redis.Redis.from_url(redis_url)
        try:
            assert list(client.scan_iter(f"{prefix}:*")), "the counts live in Redis under the prefix"
        finally:
            client.close()
    finally:
        await limiter.close()


def _limits_env(monkeypatch: pytest.MonkeyPatch, redis_url: str, prefix: str, **limits: str) -> None:
    monkeypatch.setenv("RAGBOT_RATE_LIMIT_ENABLED", "true")
    monkeypatch.setenv("RAGBOT_REDIS_URL", redis_url)
    monkeypatch.setenv("RAGBOT_REDIS_KEY_PREFIX", prefix)
    for name, value in limits.items():
        monkeypatch.setenv(f"RAGBOT_RATE_LIMIT_{name.upper()}", value)
    clear_settings_caches()


def test_the_chat_app_limits_search_and_the_widget_from_its_settings(
    redis_url: str, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _limits_env(monkeypatch, redis_url, prefix, search_per_address="2/minute", widget_per_address="1/minute")
    try:
        with (
            chat_server(llm=ScriptedLLM(), redis_url=redis_url) as server,
            httpx.Client(base_url=server.url, timeout=30) as http,
        ):
            # Empty questions are refused by the route (422) but still count against the limit.
            statuses = [http.post("/search", json={"query": " "}).status_code for _ in range(2)]
            refused = http.post("/search", json={"query": " "})
            widget_first = http.get("/kzchatbot/v0/status")
            widget_refused = http.get("/kzchatbot/v0/status")
    finally:
        clear_settings_caches()
    assert statuses == [422, 422]
    assert refused.status_code == 429
    assert 1 <= int(refused.headers["Retry-After"]) <= 60
    assert refused.json()["limit"] == "2 per 1 minute"
    assert widget_first.status_code == 200
    assert widget_refused.status_code == 429  # the widget's own error shape, in Hebrew
    seconds = int(widget_refused.headers["Retry-After"])
    assert widget_refused.json() == {"message": MESSAGES["rate_limited"].format(seconds=seconds)}


# -- admission control -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def busy_server(redis_url: str) -> Iterator[ChatServer]:
    llm = ScriptedLLM()
    with chat_server(
        llm=llm,
        redis_url=redis_url,
        max_concurrent_generations=1,
        max_queued_generations=0,
        busy_retry_after_s=4,
        sse_ping_s=0.2,
    ) as running:
        yield running


def _active(server: ChatServer) -> int:
    return server.resources[0].admission.active


def _wait_for_idle(server: ChatServer, timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while _active(server) != 0:
        assert time.monotonic() < deadline, "the generation slot was never given back"
        time.sleep(0.05)


def _hold_the_slot(server: ChatServer, session_id: str) -> tuple[threading.Event, threading.Event]:
    """Stream an answer whose LLM never speaks until ``leave`` is set; ``holding`` once its sources came."""
    holding, leave = threading.Event(), threading.Event()

    def run() -> None:
        with (
            httpx.Client(base_url=server.url, timeout=60) as client,
            client.stream(
                "POST", f"/v1/sessions/{session_id}/messages", json={"question": "מי זכאי לפטור?"}
            ) as response,
        ):
            for line in response.iter_lines():
                if line.startswith("event: sources"):
                    holding.set()
                    leave.wait(30)
                    return  # closing the connection mid-stream: the client went away

    threading.Thread(target=run, daemon=True).start()
    return holding, leave


def _warm_up(http: httpx.Client, tries: int = 5) -> None:
    """One answer end to end first: the store and the embedder load lazily, slowly on a busy machine."""
    for _ in range(tries):
        warm = http.post("/search", json={"query": "מי זכאי לפטור?"}, timeout=120)
        if warm.status_code == 200:
            return
        assert warm.json().get("dependency") == "store", warm.text  # a slow first query, nothing else
    raise AssertionError(f"no answer after {tries} tries: {warm.text}")


def _busy(response: httpx.Response, elapsed_s: float) -> dict[str, Any]:
    assert response.status_code == 503, response.text
    assert response.headers["Retry-After"] == "4"
    assert elapsed_s < 2.0, f"the 503 took {elapsed_s:.2f} s: it must come at once"
    body: dict[str, Any] = response.json()
    return body


def test_past_the_queue_every_llm_route_is_refused_at_once_and_a_gone_stream_frees_its_slot(
    busy_server: ChatServer,
) -> None:
    llm = busy_server.llm
    assert isinstance(llm, ScriptedLLM)
    with httpx.Client(base_url=busy_server.url, timeout=30) as http:
        session_id = http.post("/v1/sessions", json={}).json()["session_id"]
        widget_uuid = http.get("/kzchatbot/v0/status").json()["uuid"]
        _warm_up(http)
        _wait_for_idle(busy_server)
        llm.state = "hang"
        holding, leave = _hold_the_slot(busy_server, session_id)
        try:
            assert holding.wait(60), "the first answer never started"
            assert _active(busy_server) == 1
            openai = {"messages": [{"role": "user", "content": "שאלה"}]}
            calls: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
                (f"/v1/sessions/{session_id}/messages", {"question": "שאלה"}, {}),
                (f"/v1/sessions/{session_id}/messages", {"question": "שאלה"}, {"stream": "false"}),
                ("/v1/chat/completions", openai, {}),
                ("/v1/chat/completions", {**openai, "stream": True}, {}),
                ("/search", {"query": "שאלה"}, {}),
            ]
            for path, body, params in calls:
                started = time.perf_counter()
                response = http.post(path, json=body, params=params)
                refused = _busy(response, time.perf_counter() - started)
                assert refused["dependency"] == "llm" and refused["retry_after_s"] == 4, path
                assert "the LLM is busy" in refused["detail"]
            started = time.perf_counter()
            widget = http.post("/kzchatbot/v0/question", json={"text": "שאלה", "uuid": widget_uuid})
            assert _busy(widget, time.perf_counter() - started) == {"message": MESSAGES["unavailable"]}
        finally:
            leave.set()
        _wait_for_idle(busy_server)  # the client left mid-stream: its slot came back

        llm.state = "up"
        streamed = http.post(f"/v1/sessions/{session_id}/messages", json={"question": "מי זכאי לפטור?"})
        assert streamed.status_code == 200 and "event: done" in streamed.text
        _wait_for_idle(busy_server)  # a stream that ended gives its slot back too
        answered = http.post("/search", json={"query": "מי זכאי לפטור?"})
        assert answered.status_code == 200, answered.text
        assert _active(busy_server) == 0
