"""The admin page's feedback review in a real browser: a down-rated answer shows with its question, the
editor's comment and a link to the page it cited, and the cited page leads the worst-pages table.

The chat app runs in-process over real HTTP and real Redis, with real retrieval over the sample pages
and a scripted LLM (this is about the page, not the answer)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import httpx
import pytest
from selenium import webdriver
from support.browser import choose, click, wait_one, wait_read
from support.chat_fakes import ScriptedLLM
from support.chat_stack import ChatServer, chat_server

from ragbot.ports import ChatMessage

pytestmark = [pytest.mark.browser, pytest.mark.timeout(600), pytest.mark.usefixtures("shot")]

QUESTION = "מי זכאי לפטור ממס הכנסה?"
COMMENT = "the answer is outdated since 2024"


def script(messages: Sequence[ChatMessage]) -> str:
    return "התשובה במקורות [1]."


@pytest.fixture(scope="module")
def server(redis_url: str) -> Iterator[ChatServer]:
    with chat_server(llm=ScriptedLLM(script), redis_url=redis_url) as running:
        yield running


def test_the_admin_page_lists_a_down_rated_answer_with_its_source_link(
    server: ChatServer, driver: webdriver.Chrome
) -> None:
    with httpx.Client(base_url=server.url, timeout=120) as http:
        session = http.post("/v1/sessions", json={}).json()
        answer = http.post(
            f"/v1/sessions/{session['session_id']}/messages",
            json={"question": QUESTION},
            params={"stream": "false"},
        ).json()
        cited = answer["citations"][0]
        rated = http.post(
            f"/v1/messages/{answer['message_id']}/feedback", json={"rating": "down", "comment": COMMENT}
        )
        assert rated.status_code == 200, rated.text

    driver.get(server.url + "/admin")
    # Found and read in one step: the admin page redraws this table while it loads.
    row = wait_one(
        driver,
        f"answer {answer['message_id']} in the feedback table",
        "#feedback-table tr.feedback-entry",
        until=lambda r: r["id"] == answer["message_id"],
        id="e.dataset.messageId",
        rating="e.dataset.rating",
        text="e.innerText",
        comment="(e.querySelector('.feedback-comment') || {}).innerText || ''",
        links="[...e.querySelectorAll('a.feedback-source')].map(a => ["
        "a.getAttribute('href'), a.innerText, a.getAttribute('rel')])",
    )
    assert row["rating"] == "down"
    assert QUESTION in row["text"] and COMMENT in row["comment"]
    assert row["links"], row["text"]
    assert row["links"][0] == [cited["url"], cited["title"], "noopener noreferrer"]

    [worst, *_] = wait_read(
        driver, "the worst-pages table", "#feedback-pages-table tbody tr", text="e.innerText"
    )
    assert cited["title"] in worst["text"]
    [csv] = wait_read(driver, "the CSV link", "#feedback-csv", href="e.href")
    assert "/v1/feedback?" in csv["href"] and "format=csv" in csv["href"] and "rating=down" in csv["href"]

    # Up-rated only: the down-rated answer leaves the list.
    choose(driver, "#feedback-rating", "up")
    click(driver, "#feedback-refresh")
    wait_read(
        driver,
        "the down-rated answer to leave the up-rated list",
        "#feedback-table tr.feedback-entry",
        until=lambda rows: all(r["id"] != answer["message_id"] for r in rows),
        id="e.dataset.messageId",
    )
