"""Answers in the web UI render GitHub-flavoured Markdown in a real browser: a table (with a citation and
bold text in its cells) becomes a <table>, strikethrough a <del>; raw HTML in an answer is shown as text
and never runs. The chat app is real (retrieval, Redis, the UI's JS); the LLM is scripted to answer so."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from selenium import webdriver
from selenium.webdriver.common.keys import Keys
from support.browser import type_into, wait_script
from support.chat_fakes import ScriptedLLM
from support.chat_stack import ChatServer, chat_server

from ragbot.ports import ChatMessage

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.timeout(600), pytest.mark.usefixtures("shot")]

ANSWER_TIMEOUT_S = 180.0

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


# The answer after the ``arguments[0]`` answers there were, read in one step once it has ended: its state
# and what its bubble rendered.
READ_ANSWER = """
const last = document.querySelectorAll('li.msg-bot')[arguments[0]];
if (!last || !['done', 'error'].includes(last.dataset.state)) return null;
const bubble = last.querySelector('.bubble');
const tables = bubble.querySelectorAll('.table-scroll > table');
const table = tables[0];
const text = (node) => (node ? node.innerText : null);
const rows = table ? [...table.querySelectorAll('tbody tr')] : [];
const cite = rows.length ? rows[0].querySelector('td a.cite') : null;
const centred = table ? table.querySelectorAll('tbody td')[1] : null;
return {
  state: last.dataset.state,
  text: last.innerText,
  html: bubble.innerHTML,
  tables: tables.length,
  headers: table ? [...table.querySelectorAll('thead th')].map(text) : [],
  rows: rows.map((row) => [...row.querySelectorAll('td')].map(text)),
  strong: rows.length ? text(rows[0].querySelector('td strong')) : null,
  cite: cite ? {text: cite.innerText, href: cite.getAttribute('href') || ''} : null,
  code: rows.length > 1 ? text(rows[1].querySelector('td code')) : null,
  align: centred ? getComputedStyle(centred).textAlign : null,
  centred: centred ? centred.outerHTML : null,
  del: text(bubble.querySelector('del')),
  raw_elements: bubble.querySelectorAll('img, b').length,
  bubble: bubble.innerText,
  injected: window.__injected !== undefined,
};
"""


def answer_of(driver: webdriver.Chrome, question: str) -> dict[str, Any]:
    """Ask on the chat page and read the answer in the step that sees it end."""
    before = wait_script(
        driver,
        "the chat page's script",
        "return document.body.dataset.ready === '1' && [document.querySelectorAll('li.msg-bot').length];",
    )[0]
    type_into(driver, "#question", question + Keys.ENTER)
    answer: dict[str, Any] = wait_script(
        driver, "the answer to end", READ_ANSWER, before, timeout_s=ANSWER_TIMEOUT_S
    )
    assert answer["state"] == "done", f"the answer failed: {answer['text']}"
    return answer


def test_an_answer_with_a_table_renders_a_table(driver: webdriver.Chrome, server: ChatServer) -> None:
    driver.get_log("browser")  # type: ignore[no-untyped-call]  # drop what earlier tests' pages logged
    driver.get(server.url + "/")
    answer = answer_of(driver, "מי זכאי לפטור ממס הכנסה?")
    assert answer["tables"] == 1, answer["html"]
    assert answer["headers"] == ["מצב", "פטור", "הערה"]
    assert answer["rows"] == [
        ["עיוור", "מלא [1]", "לפי אישור"],
        ["נכות 90%", "חלקי", "טופס 127"],
    ]
    assert answer["strong"] == "עיוור"
    cite = answer["cite"]
    assert cite is not None and cite["text"] == "[1]" and cite["href"].startswith("http"), cite
    assert answer["code"] == "טופס 127"
    assert answer["align"] == "center", answer["centred"]  # the :---: column
    assert answer["del"] == "ישן"
    # raw HTML stays text: no image, no handler run, no bold from <b>
    assert answer["raw_elements"] == 0, answer["html"]
    assert "<b>not bold</b>" in answer["bubble"] and "<img" in answer["bubble"]
    assert answer["injected"] is False
    logs: list[dict[str, Any]] = driver.get_log("browser")  # type: ignore[no-untyped-call]
    # the app has no favicon; anything else severe is a fault
    errors = [e for e in logs if e["level"] == "SEVERE" and "/favicon.ico" not in e["message"]]
    assert errors == [], errors
