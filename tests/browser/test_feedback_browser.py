"""The admin page's feedback review in a real browser: a down-rated answer shows with its question, the
editor's comment and a link to the page it cited, and the cited page leads the worst-pages table.

The chat app runs in-process over real HTTP and real Redis, with real retrieval over the sample pages
and a scripted LLM (this is about the page, not the answer)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import httpx
import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait
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


def wait_rows(driver: webdriver.Chrome, css: str) -> list[WebElement]:
    waiter = WebDriverWait(
        driver, 30, poll_frequency=0.2, ignored_exceptions=[StaleElementReferenceException]
    )
    try:
        rows: list[WebElement] = waiter.until(lambda d: d.find_elements(By.CSS_SELECTOR, css) or False)
    except TimeoutException:
        text = driver.execute_script("return document.body.innerText")
        pytest.fail(f"no {css} on the admin page; its text:\n{str(text)[:2000]}")
    return rows


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
    [row] = [
        r
        for r in wait_rows(driver, "#feedback-table tr.feedback-entry")
        if r.get_attribute("data-message-id") == answer["message_id"]
    ]
    assert row.get_attribute("data-rating") == "down"
    assert QUESTION in row.text and COMMENT in row.find_element(By.CSS_SELECTOR, ".feedback-comment").text
    links = row.find_elements(By.CSS_SELECTOR, "a.feedback-source")
    assert links, row.text
    assert links[0].get_attribute("href") == cited["url"] and links[0].text == cited["title"]
    assert links[0].get_attribute("rel") == "noopener noreferrer"

    worst = wait_rows(driver, "#feedback-pages-table tbody tr")[0]
    assert cited["title"] in worst.text
    csv = driver.find_element(By.ID, "feedback-csv").get_attribute("href") or ""
    assert "/v1/feedback?" in csv and "format=csv" in csv and "rating=down" in csv

    # Up-rated only: the down-rated answer leaves the list.
    driver.find_element(By.CSS_SELECTOR, "#feedback-rating option[value='up']").click()
    driver.find_element(By.ID, "feedback-refresh").click()
    WebDriverWait(driver, 30).until(
        lambda d: (
            not any(
                r.get_attribute("data-message-id") == answer["message_id"]
                for r in d.find_elements(By.CSS_SELECTOR, "#feedback-table tr.feedback-entry")
            )
        )
    )
