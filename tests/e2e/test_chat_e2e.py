"""The chat service end to end through real processes: ``python -m ragbot_retriever`` over an embedded
store of sample pages, ``python -m ragbot_chat`` with the embedded llama.cpp runtime (SmolLM2-135M) and
real Redis; the own API, the Kol-Zchut contract, the OpenAI SDK and the ``ragbot chat`` CLI.

Answers from a 135M model are poor: the assertions are about the contract and the plumbing. Questions
are English and contexts short, so each generation stays within seconds on two cores.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from support.chat_corpus import write_definition
from support.chat_fakes import SSEEvent, parse_sse
from support.chat_stack import sample_store
from support.processes import (
    ServiceProcess,
    delete_redis_prefix,
    free_port,
    local_service,
    service_env,
)

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(600)]

START_TIMEOUT_S = 180.0
QUESTION = "Who is exempt from income tax?"
# Above the services' 10 s shutdown grace (ragbot.http.server), well inside compose's and Kubernetes'.
GRACE_S = 15.0


@dataclass
class Stack:
    """The running retriever and chat processes."""

    retriever: ServiceProcess
    chat: ServiceProcess
    chat_url: str

    def logs(self) -> str:
        return f"--- retriever ---\n{self.retriever.log_tail()}\n--- chat ---\n{self.chat.log_tail()}"


@pytest.fixture(scope="module")
def stack(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("chat-e2e")
    store = root / "store.sqlite3"
    shutil.copyfile(sample_store(), store)
    definition = write_definition(root / "definition.json")
    retriever_port, chat_port = free_port(), free_port()
    prefix = f"test-chat-e2e-{uuid.uuid4().hex[:10]}"
    env = service_env(
        {
            "RAGBOT_REDIS_URL": redis_url,
            "RAGBOT_REDIS_KEY_PREFIX": prefix,
            "RAGBOT_STORE_BACKEND": "embedded",
            "RAGBOT_STORE_EMBEDDED_PATH": str(store),
            "RAGBOT_DOCUMENT_DEFINITION": str(definition),
            "RAGBOT_RETRIEVER_PORT": str(retriever_port),
            "RAGBOT_CHAT_PORT": str(chat_port),
            "RAGBOT_CHAT_RETRIEVER_URL": f"http://127.0.0.1:{retriever_port}",
            "RAGBOT_CHAT_LLM_BACKEND": "llamacpp",
            "RAGBOT_CHAT_LLM_MAX_TOKENS": "8",
            # the real model's eight tokens stream as written (strict's sentence check: test_grounding)
            "RAGBOT_CHAT_STRICT_SUPPORT_MIN": "0",
            "RAGBOT_CHAT_CONTEXT_MAX_CHARS": "300",
            "RAGBOT_CHAT_PARAGRAPHS_PER_PAGE": "[2, 1]",
            "RAGBOT_CHAT_LLAMACPP_PARALLEL": "2",
            "RAGBOT_CHAT_LLAMACPP_CONTEXT_TOKENS": "2048",
        }
    )
    for name in ("RAGBOT_RETRIEVER_RERANKER_PATH", "RAGBOT_CHAT_PROMPTS_DIR"):
        env.pop(name, None)
    retriever = local_service(
        "retriever",
        module="ragbot_retriever",
        port=retriever_port,
        env=env,
        log_dir=root,
        cwd=root,
        health="readyz",
    )
    chat = local_service("chat", module="ragbot_chat", port=chat_port, env=env, log_dir=root, cwd=root)
    running = Stack(retriever, chat, f"http://127.0.0.1:{chat_port}")
    try:
        retriever.start()
        chat.start()
        retriever.wait_healthy(timeout_s=START_TIMEOUT_S)
        chat.wait_healthy(timeout_s=START_TIMEOUT_S)
        yield running
    finally:
        chat.stop()
        retriever.stop()
        delete_redis_prefix(redis_url, prefix)


@pytest.fixture
def http(stack: Stack) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=stack.chat_url, timeout=300) as client:
        yield client


def ask(http: httpx.Client, session_id: str, question: str, **body: Any) -> list[SSEEvent]:
    response = http.post(f"/v1/sessions/{session_id}/messages", json={"question": question, **body})
    assert response.status_code == 200, response.text
    assert response.headers["x-accel-buffering"] == "no" and response.headers["cache-control"] == "no-cache"
    return parse_sse(response.text)


def test_the_chat_service_is_ready_with_its_dependencies(http: httpx.Client, stack: Stack) -> None:
    ready = http.get("/readyz")
    assert ready.status_code == 200, f"{ready.text}\n{stack.logs()}"
    assert ready.json()["checks"] == {"redis": True, "llm": True, "retriever": True}


def test_a_streamed_answer_from_real_retrieval_and_the_embedded_llm(http: httpx.Client, stack: Stack) -> None:
    session_id = http.post("/v1/sessions", json={"mode": "grounded"}).json()["session_id"]
    events = ask(http, session_id, QUESTION)
    names = [e.event for e in events]
    assert names[0] == "sources" and names[-1] == "done", f"{names}\n{stack.logs()}"
    assert set(names[1:-1]) == {"token"}
    sources = events[0].data["sources"]
    assert sources and all(s["url"].startswith("https://www.kolzchut.org.il/") for s in sources)
    done = events[-1].data
    assert done["answer"] == "".join(e.data["text"] for e in events if e.event == "token") and done["answer"]
    assert done["usage"]["prompt_tokens"] > 0 and 1 <= done["usage"]["completion_tokens"] <= 8
    assert done["timings_ms"]["llm_ttft_ms"] > 0 and done["timings_ms"]["retrieval_ms"] > 0
    feedback = http.post(f"/v1/messages/{done['message_id']}/feedback", json={"rating": "up"})
    assert feedback.status_code == 200


def test_the_kolzchut_contract_answers_and_rates(http: httpx.Client) -> None:
    config = http.get("/get_config").json()
    assert config["model"] == "SmolLM2-135M-Instruct.Q4_1"
    short = {**config, "system_prompt": "Answer briefly from the documents; cite [n]."}
    assert http.post("/set_config", json=short).json()["version"] == config["version"] + 1
    response = http.post(
        "/search",
        json={"query": QUESTION, "asked_from": "100035", "page_id": 100035},
        headers={"X-Forwarded-For": "203.0.113.9"},
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == {"gpt_result", "docs", "conversation_id"} and body["gpt_result"]
    assert all(set(d) == {"title", "url"} for d in body["docs"])
    rated = http.post(
        "/rating", json={"conversation_id": body["conversation_id"], "like": False, "free_text": "x"}
    )
    assert rated.status_code == 200
    assert http.post("/rating", json={"conversation_id": "nope", "like": True}).status_code == 404
    versions = http.get("/get_models_version").json()
    assert "SmolLM2" in versions[0] and "multilingual-e5-small" in versions[0]


def test_the_openai_sdk_streams_from_ragbot(stack: Stack) -> None:
    with openai.OpenAI(
        base_url=stack.chat_url + "/v1", api_key="unused", max_retries=0, timeout=300
    ) as client:
        chunks = list(
            client.chat.completions.create(
                model="ragbot", messages=[{"role": "user", "content": QUESTION}], stream=True
            )
        )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text and chunks[-1].choices[0].finish_reason in {"stop", "length"}
    assert "sources" in (chunks[-1].model_extra or {})


def test_the_ragbot_chat_cli_streams_and_continues_its_session(stack: Stack, tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    command = [
        sys.executable,
        "-m",
        "ragbot.cli.main",
        "chat",
        "--url",
        stack.chat_url,
        "--state-file",
        str(state),
    ]
    first = subprocess.run(
        [*command, "--mode", "open"],
        input="What is two plus two?\nexit\n",
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert first.returncode == 0, first.stderr
    assert "new session" in first.stdout and "bot> " in first.stdout and first.stdout.endswith("bye\n")
    second = subprocess.run(
        command, input="And three plus three?\n", capture_output=True, text=True, timeout=300
    )
    assert second.returncode == 0, second.stderr
    assert "continuing session" in second.stdout and "(1 earlier turns)" in second.stdout
    session_id = next(iter(__import__("json").loads(state.read_text()).values()))
    turns = httpx.get(f"{stack.chat_url}/v1/sessions/{session_id}", timeout=30).json()["turns"]
    assert [t["mode"] for t in turns] == ["open", "open"]


def test_metrics_show_time_to_first_token_and_tokens_per_second(http: httpx.Client) -> None:
    text = http.get("/metrics").text
    assert 'ragbot_llm_time_to_first_token_seconds_count{backend="llamacpp"}' in text
    assert 'ragbot_llm_tokens_per_second_count{backend="llamacpp"}' in text
    assert 'ragbot_chat_answers_total{channel="kolzchut",mode="strict",outcome="answered"}' in text
    assert 'ragbot_chat_feedback_total{channel="kolzchut",rating="down"}' in text


def test_with_the_retriever_down_the_client_is_told_so(http: httpx.Client, stack: Stack) -> None:
    stack.retriever.stop()
    session_id = http.post("/v1/sessions", json={"mode": "strict"}).json()["session_id"]
    events = ask(http, session_id, QUESTION)
    assert [e.event for e in events] == ["sources", "error"]
    assert events[1].data["dependency"] == "retriever"
    assert http.get("/readyz").status_code == 503
    assert stack.chat.alive()


def test_chat_stops_within_its_grace_period_on_sigterm_with_a_stream_open(
    stack: Stack, tmp_path: Path
) -> None:
    port = free_port()
    env = {**stack.chat.env, "RAGBOT_CHAT_PORT": str(port), "RAGBOT_CHAT_LLM_MAX_TOKENS": "512"}
    chat = local_service("chat", module="ragbot_chat", port=port, env=env, log_dir=tmp_path, cwd=tmp_path)
    chat.start()
    try:
        chat.wait_healthy(timeout_s=START_TIMEOUT_S)
        base = f"http://127.0.0.1:{port}"
        session_id = httpx.post(f"{base}/v1/sessions", json={"mode": "grounded"}, timeout=60).json()
        url = f"{base}/v1/sessions/{session_id['session_id']}/messages"
        with httpx.stream("POST", url, json={"question": QUESTION}, timeout=300) as streaming:
            first = next(streaming.iter_lines())  # the answer has started streaming
            assert first.startswith("event:"), first
            started = time.monotonic()
            code = chat.stop(grace_s=GRACE_S)
            took = time.monotonic() - started
    finally:
        chat.stop()
    # uvicorn finishes its shutdown, then re-raises the SIGTERM it caught: -15 is a clean stop, -9 is not.
    assert code in (0, -signal.SIGTERM) and took < GRACE_S, f"exit {code} after {took:.1f} s"
    assert "Application shutdown complete" in chat.log_tail(80), chat.log_tail(80)
