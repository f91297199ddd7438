"""A page whose URL is ``javascript:`` never becomes a live link in the web UI (issue 28 item 8): not in
the chat page's source pills and citations, not in the admin page's feedback review, not in the
Kol-Zchut tester (``/index.html``) or batch tester (``/batch-runner.html``). The chat app, retrieval
(over the sample pages indexed with hostile URLs), Redis and Chromium are real; the LLM is scripted to
cite [1]."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver
from support.browser import wait_script
from support.chat_corpus import build_sample_store, sample_pages
from support.chat_fakes import ScriptedLLM
from support.chat_stack import ChatServer, chat_server

from ragbot.ports import ChatMessage

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.timeout(600), pytest.mark.usefixtures("shot")]

WAIT_S = 120.0
QUESTION = "מי זכאי לפטור ממס הכנסה?"
# The URLs a hostile or broken page may carry; each page of the store gets one of them.
HOSTILE_URLS = (
    "javascript:window.__pwned=1",
    " JavaScript:window.__pwned=2",
    "data:text/html,<script>window.__pwned=3</script>",
    "vbscript:msgbox(1)",
    "/relative/path",
)
# Every link (a, area) whose href is not http(s) or this site's own root-relative path, and how many
# data-driven items (pills, citations, document entries) the page shows: one read, one step.
LINK_AUDIT = """
const bad = [...document.querySelectorAll('a[href], area[href]')]
  .map((node) => node.getAttribute('href'))
  .filter((href) => !/^(https?:\\/\\/|\\/(?!\\/)|#|\\?)/i.test(href.trim()));
const items = document.querySelectorAll(arguments[0]).length;
return items ? {bad, items, pwned: window.__pwned === undefined ? null : window.__pwned} : null;
"""


def script(messages: Sequence[ChatMessage]) -> str:
    last = messages[-1].content
    if "שאילתה עצמאית" in last or "Standalone query" in last:
        return "פטור ממס הכנסה"
    return "עיוורים פטורים ממס הכנסה [1]."


@pytest.fixture(scope="module")
def hostile_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pages = [
        page.model_copy(update={"url": HOSTILE_URLS[i % len(HOSTILE_URLS)]})
        for i, page in enumerate(sample_pages())
    ]
    path = tmp_path_factory.mktemp("hostile-urls") / "store.sqlite3"
    asyncio.run(build_sample_store(path, pages=pages))
    return path


@pytest.fixture(scope="module")
def server(redis_url: str, hostile_store: Path) -> Iterator[ChatServer]:
    with chat_server(llm=ScriptedLLM(script), redis_url=redis_url, store=hostile_store) as running:
        yield running


def audit(driver: webdriver.Chrome, items_css: str, *, what: str) -> dict[str, Any]:
    """The page's link audit once it shows at least one of ``items_css``."""
    found: dict[str, Any] = wait_script(driver, what, LINK_AUDIT, items_css, timeout_s=WAIT_S)
    return found


def test_chat_source_pills_and_citations_of_javascript_urls_are_not_links(
    driver: webdriver.Chrome, server: ChatServer
) -> None:
    driver.get(server.url + "/")
    wait_script(
        driver, "the chat page's script", "return document.body.dataset.ready === '1'", timeout_s=WAIT_S
    )
    driver.execute_script(
        "document.getElementById('mode').value = 'grounded';"
        "document.getElementById('question').value = arguments[0];"
        "document.getElementById('ask').requestSubmit();",
        QUESTION,
    )
    state = wait_script(
        driver,
        "the streamed answer to finish",
        "const items = document.querySelectorAll('li.msg-bot');"
        "const last = items[items.length - 1];"
        "return last && ['done', 'error'].includes(last.dataset.state) ? last.dataset.state : null;",
        timeout_s=WAIT_S,
    )
    assert state == "done", driver.execute_script("return document.body.innerText")
    found = audit(driver, "li.msg-bot .pill", what="the answer's source pills")
    assert found["bad"] == [] and found["pwned"] is None, found
    pills = driver.execute_script(
        "return [...document.querySelectorAll('li.msg-bot .pill')].map((p) => [p.tagName, p.textContent])"
    )
    assert pills and all(tag == "SPAN" and text.strip() for tag, text in pills), pills
    cites = driver.execute_script(
        "return [...document.querySelectorAll('li.msg-bot .cite')].map((c) => [c.tagName, c.textContent])"
    )
    assert cites == [["SPAN", "[1]"]], cites

    # The answer rated down shows up in the admin page's feedback review with its sources as text.
    driver.execute_script("document.querySelector('li.msg-bot button.thumb-down').click()")
    wait_script(
        driver,
        "the rating to be saved",
        "const s = document.querySelector('li.msg-bot .feedback .status'); return s && s.textContent.trim();",
        timeout_s=WAIT_S,
    )
    driver.get(server.url + "/admin")
    found = audit(driver, "#feedback-table .feedback-source", what="the feedback review's sources")
    assert found["bad"] == [] and found["pwned"] is None, found
    tags = driver.execute_script(
        "return [...document.querySelectorAll('.feedback-source')].map((s) => s.tagName)"
    )
    assert tags and set(tags) == {"SPAN"}, tags


def test_kolzchut_tester_lists_javascript_urls_as_text(driver: webdriver.Chrome, server: ChatServer) -> None:
    driver.get(server.url + "/index.html")
    wait_script(
        driver, "the tester page's script", "return document.body.dataset.ready === '1'", timeout_s=WAIT_S
    )
    answered = driver.execute_script("return Number(document.body.dataset.answered || 0)")
    driver.execute_script(
        "document.getElementById('question').value = arguments[0];"
        "document.getElementById('ask-form').requestSubmit();",
        QUESTION,
    )
    wait_script(
        driver,
        "the tester's answer",
        "const e = document.getElementById('error').textContent;"
        "if (e) return 'error: ' + e;"
        "return Number(document.body.dataset.answered || 0) > arguments[0];",
        answered,
        timeout_s=WAIT_S,
    )
    found = audit(driver, "#docs li", what="the tester's documents")
    assert found["bad"] == [] and found["pwned"] is None, found
    docs = driver.execute_script(
        "return [...document.querySelectorAll('#docs li > *')].map((d) => [d.tagName, d.textContent])"
    )
    assert docs and all(tag == "SPAN" and text.strip() for tag, text in docs), docs


def test_kolzchut_batch_runner_lists_javascript_urls_as_text(
    driver: webdriver.Chrome, server: ChatServer
) -> None:
    driver.get(server.url + "/batch-runner.html")
    wait_script(
        driver, "the batch page's script", "return document.body.dataset.ready === '1'", timeout_s=WAIT_S
    )
    driver.execute_script(
        "document.getElementById('input').value = arguments[0];document.getElementById('run').click();",
        f"{QUESTION}\nWho is exempt from income tax?",
    )
    wait_script(
        driver, "the batch to finish", "return document.body.dataset.finished === '1'", timeout_s=WAIT_S
    )
    found = audit(driver, "#results tbody ol li", what="the batch's documents")
    assert found["bad"] == [] and found["pwned"] is None, found
    docs = driver.execute_script(
        "return [...document.querySelectorAll('#results tbody ol li > *')].map((d) => d.tagName)"
    )
    assert docs and set(docs) == {"SPAN"}, docs
