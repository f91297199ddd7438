"""The Kol-Zchut chatbot contract (what the MediaWiki extension KZChatbot calls), field names exactly,
over real HTTP with real Redis and real retrieval; the LLM is a scripted fake."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator, Sequence
from typing import Any

import httpx
import pytest
import redis
from support.chat_fakes import ScriptedLLM
from support.chat_stack import ChatServer, chat_server
from support.kolzchut_contract import CONFIG_FIELDS

from ragbot.ports import ChatMessage

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

QUERY = "מי זכאי לפטור ממס הכנסה?"
CITING = "מה הפטור ממס הכנסה לעיוורים ולנכים?"
# What a real model wrote: paragraph numbers, several on one page, one that is no document at all.
CITING_ANSWER = "זכאים [2] וגם [3], ראו [4][2] או [99]."


def script(messages: Sequence[ChatMessage]) -> str:
    if "שאילתה עצמאית" in messages[-1].content:
        return "פטור ממס לעיוורים"
    if CITING in messages[-1].content:
        return CITING_ANSWER
    return "לפי המקורות [1]."


@pytest.fixture(scope="module")
def server(redis_url: str) -> Iterator[ChatServer]:
    with chat_server(llm=ScriptedLLM(script), redis_url=redis_url) as running:
        yield running


@pytest.fixture
def http(server: ChatServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=60, headers={"X-Forwarded-For": "203.0.113.7"}) as client:
        yield client


def search(http: httpx.Client, **body: Any) -> dict[str, Any]:
    response = http.post("/search", json={"query": QUERY, "asked_from": "testing interface", **body})
    assert response.status_code == 200, response.text
    payload: dict[str, Any] = response.json()
    return payload


def test_search_answers_exactly_gpt_result_docs_and_conversation_id(http: httpx.Client) -> None:
    body = search(http, page_id=100035)
    assert set(body) == {"gpt_result", "docs", "conversation_id"}
    assert body["gpt_result"] == "לפי המקורות [1]."
    assert body["docs"] and all(set(d) == {"title", "url"} for d in body["docs"])
    assert len({d["url"] for d in body["docs"]}) == len(body["docs"])
    assert isinstance(body["conversation_id"], str) and body["conversation_id"]


def test_search_with_debug_data_adds_the_testing_page_fields(http: httpx.Client) -> None:
    body = search(http, include_debug_data=True, rephrase=True)
    assert set(body) == {
        "gpt_result",
        "docs",
        "conversation_id",
        "docs_before_filter",
        "debug_data",
        "original_question",
        "rephrased_question",
        "response_time",
        "rephrase_time",
    }
    assert body["original_question"] == QUERY and body["rephrased_question"] == "פטור ממס לעיוורים"
    assert body["rephrase_time"] >= 0 and body["response_time"] >= body["rephrase_time"]
    assert body["docs_before_filter"] and body["debug_data"]["retrieval"]["query"] == "פטור ממס לעיוורים"
    assert body["debug_data"]["config_version"] >= 0
    plain = search(http, include_debug_data=True)
    assert plain["rephrased_question"] is None and plain["rephrase_time"] is None


def test_retrieval_knobs_from_the_testing_page(http: httpx.Client, server: ChatServer) -> None:
    body = search(http, include_debug_data=True, retrieval_size=5, max_documents_from_same_page=1)
    pages = [s["page_id"] for s in body["debug_data"]["sources"]]
    assert len(pages) == len(set(pages))
    whole = search(http, include_debug_data=True, send_complete_pages_to_llm=True)
    sources = whole["debug_data"]["sources"]
    first_page = sources[0]["page_id"]
    paragraphs = [s["paragraph"] for s in sources if s["page_id"] == first_page]
    assert paragraphs == sorted(paragraphs) and len(paragraphs) > 3


def test_each_citation_numbers_the_docs_the_client_receives(http: httpx.Client) -> None:
    body = {"query": CITING, "include_debug_data": True, "send_complete_pages_to_llm": True}
    response = http.post("/search", json=body)
    assert response.status_code == 200, response.text
    body = response.json()
    urls = [d["url"] for d in body["docs"]]
    by_index = {s["index"]: s for s in body["debug_data"]["sources"]}
    # (the page's generated block and site footer are furniture, never numbered: ragbot.chat.boilerplate)
    assert {2, 3, 4} <= set(by_index), "the retriever should hand the model at least four paragraphs"
    expected = CITING_ANSWER
    for n in (2, 3, 4):
        expected = expected.replace(f"[{n}]", f"<{urls.index(by_index[n]['url']) + 1}>")
    expected = re.sub(r"<(\d+)>(?:<\1>)+", r"<\1>", expected).replace("<", "[").replace(">", "]")
    assert body["gpt_result"] == expected
    cited = [int(n) for n in re.findall(r"\[(\d+)\]", body["gpt_result"]) if n != "99"]
    assert cited and all(1 <= n <= len(body["docs"]) for n in cited), (cited, len(body["docs"]))


def test_a_null_the_php_forwards_never_erases_an_earlier_rating(http: httpx.Client) -> None:
    conversation_id = search(http)["conversation_id"]

    def rate(like: bool | None, free_text: str | None) -> dict[str, Any]:
        # KZChatbot's ApiKZChatbotRateAnswer forwards all three fields, null for what the user left out.
        body = {"free_text": free_text, "conversation_id": conversation_id, "like": like}
        response = http.post("/rating", json=body)
        assert response.status_code == 200, response.text
        return {k: response.json()[k] for k in ("like", "free_text")}

    assert rate(False, None) == {"like": False, "free_text": None}
    assert rate(None, "התשובה לא ברורה") == {"like": False, "free_text": "התשובה לא ברורה"}
    answer_id_only = http.post("/rating", json={"conversation_id": conversation_id})
    assert answer_id_only.json()["like"] is False and answer_id_only.json()["free_text"] == "התשובה לא ברורה"
    # the widget's un-press sends {answerId, like: null}: the PHP forwards it with free_text null
    assert rate(None, None) == {"like": None, "free_text": "התשובה לא ברורה"}
    assert rate(True, None) == {"like": True, "free_text": "התשובה לא ברורה"}


def test_rating_records_likes_and_unknown_conversations_are_404(
    http: httpx.Client, server: ChatServer
) -> None:
    conversation_id = search(http)["conversation_id"]
    liked = http.post("/rating", json={"conversation_id": conversation_id, "like": True, "free_text": "תודה"})
    assert liked.status_code == 200 and liked.json()["like"] is True
    assert http.post("/rating", json={"conversation_id": conversation_id, "like": None}).status_code == 200
    missing = http.post("/rating", json={"conversation_id": "no-such-id", "like": False, "free_text": ""})
    assert missing.status_code == 404
    client = redis.Redis.from_url(server.redis_url)
    try:
        stored = client.get(f"{server.prefix}:chat:message:{conversation_id}")
    finally:
        client.close()
    assert (
        stored is not None
        and b'"channel":"kolzchut"' in stored
        and b'"asked_from":"testing interface"' in stored
    )


def test_get_config_has_the_contract_fields(http: httpx.Client) -> None:
    config = http.get("/get_config").json()
    assert set(config) == CONFIG_FIELDS
    assert config["model"] == "fake-model" and config["version"] >= 0
    assert "{question}" in config["user_prompt"] and "{documents}" in config["user_prompt"]


def test_set_config_versions_and_applies_without_a_restart(http: httpx.Client, server: ChatServer) -> None:
    assert isinstance(server.llm, ScriptedLLM)
    before = http.get("/get_config").json()
    wanted = {
        **before,
        "temperature": 0.7,
        "system_prompt": "מערכת חדשה לבדיקה",
        "num_of_pages": 1,
        "add_current_page_to_search": True,
        "banned_fields": ["title"],
    }
    stored = http.post("/set_config", json=wanted)
    assert stored.status_code == 200, stored.text
    assert stored.json()["version"] == before["version"] + 1
    assert http.get("/get_config").json() == stored.json()
    body = search(http, include_debug_data=True, page_id="100028")
    call = server.llm.calls[-1]
    assert call.temperature == 0.7 and call.messages[0].content == "מערכת חדשה לבדיקה"
    assert 'title=""' in call.messages[-1].content
    assert 100028 in {s["page_id"] for s in body["debug_data"]["sources"]}
    assert body["debug_data"]["config_version"] == before["version"] + 1
    again = http.post("/set_config", json={**wanted, "version": 999, "temperature": 0.1})
    assert again.json()["version"] == before["version"] + 2
    http.post("/set_config", json=before)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"temperature": "warm"}, "temperature"),
        ({"num_of_pages": "3"}, "num_of_pages"),
        ({"banned_fields": "title"}, "banned_fields"),
        ({"model": "gpt-99"}, "model"),
        ({"temperature": 2.5}, "temperature"),
        ({"num_of_pages": 0}, "num_of_pages"),
        ({"user_prompt": "no slots"}, "user_prompt"),
        # Lengths are bounded (issue 28 item 9): a 10 MB prompt is refused naming its field.
        ({"system_prompt": "x" * 10 * 1024 * 1024}, "system_prompt"),
        ({"rephrase_prompt": "{question}" + "x" * 20_000}, "rephrase_prompt"),
        ({"banned_fields": ["title"] * 201}, "banned_fields"),
        ({"model": "m" * 201}, "model"),
    ],
)
def test_invalid_configs_are_refused_naming_the_field_and_change_nothing(
    http: httpx.Client, change: dict[str, Any], field: str
) -> None:
    before = http.get("/get_config").json()
    response = http.post("/set_config", json={**before, **change})
    assert response.status_code == 422, response.text
    assert field in response.json()["detail"][0]["loc"]
    assert http.get("/get_config").json() == before


def test_models_version_is_an_array_whose_first_element_is_shown(http: httpx.Client) -> None:
    versions = http.get("/get_models_version").json()
    assert isinstance(versions, list) and isinstance(versions[0], str)
    assert "fake-model" in versions[0] and "multilingual-e5-small" in versions[0]


def test_config_metadata_answers_get_and_post(http: httpx.Client) -> None:
    got = http.get("/get_config_metadata").json()
    assert http.post("/get_config_metadata").json() == got
    assert set(got) == {
        "available_models",
        "temperature_options",
        "num_of_pages_options",
        "config_field_types",
    }
    assert got["available_models"] == {"fake-model": {"supports_temperature": True}}
    assert set(got["config_field_types"]) == CONFIG_FIELDS


def test_bad_search_input_is_a_4xx_naming_the_field(http: httpx.Client, server: ChatServer) -> None:
    for query in ("", "   ", "x" * (server.settings.max_question_chars + 1)):
        response = http.post("/search", json={"query": query, "asked_from": "1"})
        assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["body", "query"]
    missing = http.post("/search", json={"asked_from": "1"})
    assert missing.status_code == 422 and "query" in missing.json()["detail"][0]["loc"]


def test_search_with_the_llm_down_is_a_503_that_says_so(http: httpx.Client, server: ChatServer) -> None:
    assert isinstance(server.llm, ScriptedLLM)
    server.llm.state = "down"
    try:
        response = http.post("/search", json={"query": QUERY, "asked_from": "1"})
    finally:
        server.llm.state = "up"
    assert response.status_code == 503
    assert response.json()["dependency"] == "llm" and "down" in response.json()["detail"]


def test_a_model_without_temperature_gets_none_sent(redis_url: str) -> None:
    llm = ScriptedLLM(script)
    with (
        chat_server(
            llm=llm,
            redis_url=redis_url,
            available_models=["fake-model", "o1"],
            models_without_temperature=["o1"],
        ) as running,
        httpx.Client(base_url=running.url, timeout=60) as http,
    ):
        meta = http.get("/get_config_metadata").json()["available_models"]
        assert meta == {"fake-model": {"supports_temperature": True}, "o1": {"supports_temperature": False}}
        search(http, rephrase=True)
        assert [(c.model, c.temperature) for c in llm.calls] == [("fake-model", 0.0), ("fake-model", 0.2)]
        config = http.get("/get_config").json()
        assert http.post("/set_config", json={**config, "model": "o1", "temperature": 0.9}).status_code == 200
        llm.calls.clear()
        search(http, rephrase=True)
        assert [(c.model, c.temperature) for c in llm.calls] == [("o1", None), ("o1", None)]


def test_a_search_whose_client_gave_up_stops_generating(redis_url: str) -> None:
    # 400 different words: a long answer that is not a loop (the loop detector would end that one)
    llm = ScriptedLLM(lambda _: " ".join(f"מילה{n}" for n in range(400)), delay_s=0.02)
    with chat_server(llm=llm, redis_url=redis_url) as running:
        with httpx.Client(base_url=running.url, timeout=1.5) as http, pytest.raises(httpx.ReadTimeout):
            http.post("/search", json={"query": QUERY, "asked_from": "testing interface"})
        deadline = time.monotonic() + 15
        while not (llm.calls and llm.calls[-1].closed_early) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert llm.calls[-1].closed_early is True and llm.calls[-1].pieces_sent < 400


def grounded_script(messages: Sequence[ChatMessage]) -> str:
    """The first sentence of document 1, as written, then one that no document says."""
    return f"{first_sentence(messages[-1].content)}. [1] {INVENTED} [1]."


def first_sentence(prompt: str) -> str:
    """Document 1's first sentence in the prompt, without its end mark."""
    found = re.search(r'<document id="1"[^>]*>\n(.*?)\n</document>', prompt, re.DOTALL)
    assert found is not None
    return re.split(r"(?<=[.!?])\s|\n", found.group(1).strip())[0].rstrip(".!?")


INVENTED = "בנוסף, כל תושב מקבל מהמדינה רכב חדש בחינם."


def test_strict_sends_only_the_sentences_a_document_holds(redis_url: str) -> None:
    llm = ScriptedLLM(grounded_script)
    with (
        chat_server(llm=llm, redis_url=redis_url, strict_support_min=0.6) as running,
        httpx.Client(base_url=running.url, timeout=60) as http,
    ):
        body = search(http)
    kept = first_sentence(llm.calls[-1].messages[-1].content)
    assert body["gpt_result"] == f"{kept}. [1]"  # the invented sentence never reached the client
