"""Answers in the web UI render GitHub-flavoured Markdown in a real browser: a table (with a citation and
bold text in its cells) becomes a <table>, strikethrough a <del>; raw HTML in an answer is shown as text
and never runs. The chat app is real (retrieval, Redis, the UI's JS); the LLM is scripted to answer so."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait
from support.chat_fakes import ScriptedLLM
from support.chat_stack import ChatServer, chat_server

from ragbot.ports import ChatMessage

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.timeout(300), pytest.mark.usefixtures("shot")]

TABLE_ANSWER = (
    "הזכויות לפי מצב:\n\n"
    "| מצב | פטור | הערה |\n"
    "|---|:---:|---|\n"
    "| **עיוור** | מלא [1] | לפי אישור |\n"
    "| נכות 90% | חלקי | `טופס 127` |\n\n"
    '~~ישן~~ <img src="/nothing.png" onerror="window.__injected = 1"> <b>not bold</b>'
)


def script(messages: Sequence[ChatMessage]) -> str:
    last = messages[-1].content
    if "שאילתה עצמאית" in last or "Standalone query" in last:
        return "פטור ממס הכנסה"
    return TABLE_ANSWER


@pytest.fixture(scope="module")
def server(redis_url: str) -> Iterator[ChatServer]:
    with chat_server(llm=ScriptedLLM(script), redis_url=redis_url) as running:
        yield running


def answer_of(driver: webdriver.Chrome, question: str) -> WebElement:
    box = WebDriverWait(driver, 30).until(lambda d: d.find_element(By.ID, "question"))
    box.click()
    box.send_keys(question)
    box.send_keys(Keys.ENTER)

    def done(d: webdriver.Chrome) -> WebElement | None:
        items = d.find_elements(By.CSS_SELECTOR, "li.msg-bot")
        if items and items[-1].get_attribute("data-state") == "error":
            pytest.fail(f"the answer failed: {items[-1].text}")
        return items[-1] if items and items[-1].get_attribute("data-state") == "done" else None

    found = WebDriverWait(driver, 120, poll_frequency=0.2).until(done)
    assert found is not None
    return found


def test_an_answer_with_a_table_renders_a_table(driver: webdriver.Chrome, server: ChatServer) -> None:
    driver.get_log("browser")  # type: ignore[no-untyped-call]  # drop what earlier tests' pages logged
    driver.get(server.url + "/")
    answer = answer_of(driver, "מי זכאי לפטור ממס הכנסה?")
    bubble = answer.find_element(By.CSS_SELECTOR, ".bubble")
    tables = bubble.find_elements(By.CSS_SELECTOR, ".table-scroll > table")
    assert len(tables) == 1, bubble.get_attribute("innerHTML")
    table = tables[0]
    assert [th.text for th in table.find_elements(By.CSS_SELECTOR, "thead th")] == ["מצב", "פטור", "הערה"]
    rows = table.find_elements(By.CSS_SELECTOR, "tbody tr")
    assert [[td.text for td in row.find_elements(By.CSS_SELECTOR, "td")] for row in rows] == [
        ["עיוור", "מלא [1]", "לפי אישור"],
        ["נכות 90%", "חלקי", "טופס 127"],
    ]
    assert rows[0].find_element(By.CSS_SELECTOR, "td strong").text == "עיוור"
    cite = rows[0].find_element(By.CSS_SELECTOR, "td a.cite")
    assert cite.text == "[1]" and (cite.get_attribute("href") or "").startswith("http")
    assert rows[1].find_element(By.CSS_SELECTOR, "td code").text == "טופס 127"
    centred = table.find_elements(By.CSS_SELECTOR, "tbody td")[1]
    align = driver.execute_script("return getComputedStyle(arguments[0]).textAlign", centred)
    assert align == "center", centred.get_attribute("outerHTML")  # the :---: column
    assert bubble.find_element(By.CSS_SELECTOR, "del").text == "ישן"
    # raw HTML stays text: no image, no handler run, no bold from <b>
    assert bubble.find_elements(By.CSS_SELECTOR, "img, b") == []
    assert "<b>not bold</b>" in bubble.text and "<img" in bubble.text
    assert driver.execute_script("return window.__injected === undefined") is True
    logs: list[dict[str, Any]] = driver.get_log("browser")  # type: ignore[no-untyped-call]
    # the app has no favicon; anything else severe is a fault
    errors = [e for e in logs if e["level"] == "SEVERE" and "/favicon.ico" not in e["message"]]
    assert errors == [], errors
