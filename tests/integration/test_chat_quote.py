"""The ``quote`` answer mode over real HTTP: the native API (streamed and whole), the OpenAI-compatible
endpoint and the Kol-Zchut ``/search`` route, with real Redis and real retrieval (sample pages embedded
with multilingual-e5-small, which also scores the sentences). The LLM is a scripted fake that must
never be called: quote mode answers without one."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence

import httpx
import pytest
from support.chat_fakes import ScriptedLLM, parse_sse
from support.chat_stack import ChatServer, chat_server
from support.fake_wiki import load_pages

from ragbot.chat.citations import cited_numbers
from ragbot.chat.quote import clean_line
from ragbot.ports import ChatMessage

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

QUESTION = "באיזה גיל נערים עובדים זכאים לנקודת זיכוי?"
GOLD_PAGE = 100028
OFF_TOPIC = "מה מזג האוויר מחר בתל אביב?"
_CITED_SENTENCE = re.compile(r"(.+?) \[(\d+)\]")


def never(messages: Sequence[ChatMessage]) -> str:
    raise AssertionError("quote mode called the LLM")


@pytest.fixture(scope="module")
def server(redis_url: str) -> Iterator[ChatServer]:
    with chat_server(
        llm=ScriptedLLM(never), redis_url=redis_url, default_mode="quote", kolzchut_mode="quote"
    ) as running:
        yield running


@pytest.fixture
def http(server: ChatServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=60) as client:
        yield client


def page_text(page_id: int) -> str:
    """The page as a reader sees it (links as their text), one line per line."""
    [record] = [r for r in load_pages() if r["page_id"] == page_id]
    content = re.sub(r"!?\[([^\]]*)\]\((?:\\.|[^()\\\n]|\([^()\n]*\))*\)", r"\1", str(record["content"]))
    return " ".join(clean_line(line) for line in content.splitlines())


def assert_quoted_verbatim(answer: str, sources: Sequence[dict[str, object]]) -> None:
    """Every sentence ends with an [n] of the sources and stands word for word in that source's page."""
    by_index = {int(str(s["index"])): int(str(s["page_id"])) for s in sources}
    pairs = _CITED_SENTENCE.findall(answer)
    assert pairs, answer
    for sentence, number in pairs:
        page_id = by_index[int(number)]
        assert sentence.strip() in page_text(page_id), (sentence, page_id)


def test_a_streamed_quote_answer_is_cited_sentences_of_the_sources(
    http: httpx.Client, server: ChatServer
) -> None:
    session = http.post("/v1/sessions", json={}).json()
    assert session["mode"] == "quote"  # RAGBOT_CHAT_DEFAULT_MODE=quote
    response = http.post(
        f"/v1/sessions/{session['session_id']}/messages",
        params={"debug": "true"},
        json={"question": QUESTION},
    )
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
    events = parse_sse(response.text)
    names = [e.event for e in events]
    assert names[0] == "sources" and names[-1] == "done" and set(names[1:-1]) == {"token"}
    sources = events[0].data["sources"]
    done = events[-1].data
    assert "".join(e.data["text"] for e in events[1:-1]) == done["answer"]
    assert done["abstained"] is False and done["usage"]["completion_tokens"] == 0
    assert GOLD_PAGE in [c["page_id"] for c in done["citations"]]
    assert [c["index"] for c in done["citations"]] == cited_numbers(done["answer"])
    assert_quoted_verbatim(done["answer"], sources)
    assert "18-16" in done["answer"]
    assert events[0].data["debug"]["quote"]["scorer"] == "similarity:multilingual-e5-small"
    assert server.llm.calls == []  # type: ignore[attr-defined]
    stored = http.get(f"/v1/sessions/{session['session_id']}").json()["turns"][0]
    assert stored["mode"] == "quote" and stored["answer"] == done["answer"]
    assert GOLD_PAGE in stored["cited_page_ids"]


def test_a_whole_quote_answer_and_an_honest_abstention(http: httpx.Client) -> None:
    session = http.post("/v1/sessions", json={"mode": "grounded"}).json()
    url = f"/v1/sessions/{session['session_id']}/messages"
    whole = http.post(url, params={"stream": "false"}, json={"question": QUESTION, "mode": "quote"}).json()
    assert whole["mode"] == "quote" and whole["abstained"] is False and whole["error"] is None
    assert_quoted_verbatim(whole["answer"], whole["sources"])
    off = http.post(url, params={"stream": "false"}, json={"question": OFF_TOPIC, "mode": "quote"}).json()
    assert off["abstained"] is True and off["citations"] == []
    # it says it did not find it, and offers the closest pages as related, not as citations
    assert off["answer"].startswith("לא מצאתי תשובה לשאלה הזו במקורות שבידי.\n\nדפים קרובים שאולי יעזרו:\n- ")
    assert off["retrieved_not_cited"] and off["sources"]


def test_the_openai_endpoint_answers_in_quote_mode(http: httpx.Client) -> None:
    body = {"model": "ragbot", "mode": "quote", "messages": [{"role": "user", "content": QUESTION}]}
    whole = http.post("/v1/chat/completions", json=body).json()
    content = whole["choices"][0]["message"]["content"]
    assert whole["choices"][0]["finish_reason"] == "stop"
    assert GOLD_PAGE in [c["page_id"] for c in whole["citations"]]
    assert_quoted_verbatim(content.split("\n\nמקורות:")[0], whole["sources"])
    streamed = http.post("/v1/chat/completions", json={**body, "stream": True})
    chunks = [
        json.loads(line[len("data: ") :]) for line in streamed.text.splitlines() if line.startswith("data: {")
    ]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices"))
    assert text.startswith(content.split("\n\nמקורות:")[0])


def test_kolzchut_search_answers_in_quote_mode_and_abstains_without_docs(http: httpx.Client) -> None:
    response = http.post("/search", json={"query": QUESTION, "include_debug_data": True})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["debug_data"]["mode"] == "quote"
    assert cited_numbers(body["gpt_result"]) and "18-16" in body["gpt_result"]
    assert "נקודות זיכוי ממס הכנסה לנוער עובד (זכות)" in [d["title"] for d in body["docs"]]
    off = http.post("/search", json={"query": OFF_TOPIC}).json()
    assert off["docs"] == [] and cited_numbers(off["gpt_result"]) == []
