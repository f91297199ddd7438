"""The web UI in a real browser against real services: a streamed English answer with source pills and
feedback, a Hebrew conversation laid out right to left (and at phone width), an upload indexed and
listed, a failed job retried, and the admin page's retrieval debug and config editor."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver
from selenium.webdriver.common.keys import Keys
from support.browser import click, read_all, type_into, wait_one, wait_read, wait_script, wait_until
from support.ui_stack import FAILING_PAGE_ID, SCREENSHOTS, WINDOW, UiStack
from support.waits import poll

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.timeout(600), pytest.mark.usefixtures("shot")]

ANSWER_TIMEOUT_S = 180.0
JOB_TIMEOUT_S = 180.0
QUESTION = "Who is exempt from income tax?"
HEBREW_QUESTION = "מי זכאי לפטור ממס הכנסה?"
# The answer's item read in one step: its state and text, its direction, its pills.
ANSWER_FIELDS = {
    "state": "e.dataset.state",
    "text": "e.innerText",
    "bubble": "(e.querySelector('.bubble') || {}).innerText || ''",
    "direction": "getComputedStyle(e).direction",
    "bubble_direction": "getComputedStyle(e.querySelector('.bubble')).direction",
    "pills": "[...e.querySelectorAll('.pills .pill')].map(p => ({href: p.getAttribute('href') || '', "
    "target: p.getAttribute('target'), title: (p.querySelector('.pill-title') || {}).innerText || '', "
    "conf: (p.querySelector('.pill-conf') || {}).innerText || ''}))",
    "status": "(e.querySelector('.feedback .status') || {}).innerText || ''",
    "thumb_up": "(e.querySelector('button.thumb-up') || {getAttribute: () => null})"
    ".getAttribute('aria-pressed')",
}
# After ``ask`` the answer is the conversation's last item.
LAST_ANSWER = "li.msg-bot:last-child"


def watch_renders(driver: webdriver.Chrome) -> None:
    """Record every distinct text the answer bubbles show, to tell a streamed answer from one block."""
    driver.execute_script(
        """
        window.__renders = [];
        new MutationObserver(() => {
          const bubbles = document.querySelectorAll('.msg-bot .bubble');
          const last = bubbles[bubbles.length - 1];
          if (last && window.__renders[window.__renders.length - 1] !== last.textContent) {
            window.__renders.push(last.textContent);
          }
        }).observe(document.getElementById('messages'),
                   {subtree: true, childList: true, characterData: true});
        """
    )


def ask(driver: webdriver.Chrome, question: str) -> dict[str, Any]:
    """Type a question, press Enter, and wait for the answer to finish; returns the answer as read then.

    The answer is the last one, and the message before it is this question: an earlier conversation
    the page was still restoring cannot pass for it."""
    before = len(read_all(driver, "li.msg-bot", id="1"))
    type_into(driver, "#question", question + Keys.ENTER)
    asked = "(p => p && p.classList.contains('msg-user') ? p.innerText : '')(e.previousElementSibling)"

    def finished(d: webdriver.Chrome) -> dict[str, Any] | None:
        items = read_all(d, "li.msg-bot", fields=ANSWER_FIELDS, asked=asked)
        if len(items) <= before or items[-1]["asked"].strip() != question:
            return None
        if items[-1]["state"] == "error":
            pytest.fail(f"the answer failed: {items[-1]['text']}")
        return items[-1] if items[-1]["state"] == "done" else None

    return wait_until(driver, "the streamed answer", finished, timeout_s=ANSWER_TIMEOUT_S)


def last_answer(
    driver: webdriver.Chrome, what: str, until: Callable[[dict[str, Any]], Any]
) -> dict[str, Any]:
    """The last answer, read in the step in which ``until`` holds for it."""
    return wait_one(driver, what, LAST_ANSWER, until=until, fields=ANSWER_FIELDS)


def test_an_english_question_streams_an_answer_with_source_pills_and_takes_feedback(
    driver: webdriver.Chrome, ui_stack: UiStack
) -> None:
    driver.get(ui_stack.chat_url + "/")
    wait_one(
        driver,
        "the chat page's question box",
        "#question",
        until=lambda r: r["shown"],
        shown="!!e.offsetParent",
    )
    click(driver, "#new-chat")
    assert driver.execute_script("return document.activeElement.id") == "question"
    watch_renders(driver)
    answer = ask(driver, QUESTION)

    assert answer["bubble"].strip(), "the answer is empty"
    renders: list[str] = driver.execute_script("return window.__renders")
    # "Searching…", "Reading N sources…", then the answer growing token by token.
    assert len(renders) >= 3, renders
    pills = answer["pills"]
    assert pills, f"no source pills under the answer: {answer['text']}"
    for pill in pills:
        assert pill["href"].startswith("https://www.kolzchut.org.il/")
        assert pill["target"] == "_blank"
        assert pill["title"].strip()
    confidences = [p["conf"] for p in pills]
    assert all(re.fullmatch(r"\d{1,3}%", c) for c in confidences), confidences
    assert answer["direction"] == "ltr"

    click(driver, f"{LAST_ANSWER} button.thumb-up")
    rated = last_answer(driver, "the rating to be saved", lambda a: "Thanks" in a["status"])
    assert rated["thumb_up"] == "true"
    assert driver.execute_script(
        "return document.activeElement === document.querySelector(arguments[0])",
        f"{LAST_ANSWER} .comment-form textarea",
    )
    type_into(driver, f"{LAST_ANSWER} .comment-form textarea", "Clear and sourced.")
    click(driver, f"{LAST_ANSWER} .comment-form button[type=submit]")
    last_answer(driver, "the comment to be saved", lambda a: "comment saved" in a["status"])


def test_a_hebrew_conversation_is_laid_out_right_to_left_also_at_phone_width(
    driver: webdriver.Chrome, ui_stack: UiStack
) -> None:
    driver.get(ui_stack.chat_url + "/")
    click(driver, "#new-chat")
    answer = ask(driver, HEBREW_QUESTION)
    *_, question = wait_read(
        driver,
        "the question in the conversation",
        "li.msg-user",
        text="e.innerText",
        direction="getComputedStyle(e).direction",
    )
    assert question["text"] == HEBREW_QUESTION
    assert question["direction"] == "rtl"
    assert answer["direction"] == "rtl" and answer["bubble_direction"] == "rtl"
    type_into(driver, "#question", "שלום")
    # dir="auto" follows what is typed
    assert (
        driver.execute_script("return getComputedStyle(document.getElementById('question')).direction")
        == "rtl"
    )
    type_into(driver, "#question", "", clear=True)

    driver.set_window_size(390, 844)
    try:
        wait_until(
            driver, "the phone-width window", lambda d: d.execute_script("return window.innerWidth") <= 400
        )
        overflow = driver.execute_script("return document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"the chat page scrolls sideways by {overflow}px at phone width"
        assert driver.execute_script("return !!document.getElementById('send').offsetParent")
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(SCREENSHOTS / "chat-phone-width.png"))
    finally:
        driver.set_window_size(*WINDOW)


# Runs in the page before its own scripts: the first GET of a conversation (the page restoring it) waits
# until the test releases it, so "New chat" can be pressed while the restore is still in flight.
HOLD_RESTORE = """
window.__restore = {pending: false, release: null};
const realFetch = window.fetch.bind(window);
window.fetch = (input, init) => {
  const url = (typeof input === 'string' ? input : input.url).split('?')[0];
  const method = ((init && init.method) || 'GET').toUpperCase();
  if (method === 'GET' && /\\/v1\\/sessions\\/[^/]+$/.test(url) && !window.__restore.pending) {
    window.__restore.pending = true;
    return new Promise((resolve) => { window.__restore.release = () => resolve(realFetch(input, init)); });
  }
  return realFetch(input, init);
};
"""


def test_new_chat_pressed_while_the_page_restores_a_conversation_stays_empty_of_it(
    driver: webdriver.Chrome, ui_stack: UiStack
) -> None:
    driver.get(ui_stack.chat_url + "/")
    click(driver, "#new-chat")
    ask(driver, QUESTION)  # the tab now remembers this conversation, and a reload restores it
    script = driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": HOLD_RESTORE})
    try:
        driver.refresh()
        wait_script(driver, "the page to start restoring the conversation", "return window.__restore.pending")
        click(driver, "#new-chat")
        driver.execute_script("window.__restore.release()")
        answer = ask(driver, HEBREW_QUESTION)
    finally:
        driver.execute_cdp_cmd(
            "Page.removeScriptToEvaluateOnNewDocument", {"identifier": script["identifier"]}
        )
    # The restore finished long before this answer (it was released first, and an answer takes several
    # round trips): the conversation on screen is the new one alone.
    questions = read_all(driver, "li.msg-user", text="e.innerText")
    assert [q["text"] for q in questions] == [HEBREW_QUESTION], questions
    assert len(read_all(driver, "li.msg-bot", id="1")) == 1, answer


def test_an_uploaded_file_is_indexed_and_listed(
    driver: webdriver.Chrome, ui_stack: UiStack, tmp_path: Path
) -> None:
    title = f"Browser upload {uuid.uuid4().hex[:8]}"
    document = tmp_path / f"{title.replace(' ', '-').lower()}.md"
    document.write_text(
        f"# {title}\n\nVolunteers in the reading club meet every Tuesday evening at the library.\n\n"
        "## Membership\n\nMembership is free for residents and costs ten shekels a year for others.\n",
        encoding="utf-8",
    )
    driver.get(ui_stack.chat_url + "/documents")
    wait_one(
        driver,
        "the page list",
        "#pages-summary",
        until=lambda r: "paragraphs indexed" in r["text"],
        text="e.innerText",
    )
    type_into(driver, "#file-input", str(document))

    def upload_done(row: dict[str, Any]) -> bool:
        if row["state"] == "failed":
            pytest.fail(f"the upload failed: {row['text']}\n{ui_stack.logs()}")
        return bool(row["state"] == "done")

    item = wait_one(
        driver,
        "the upload's job to finish",
        f'li.upload[data-file="{document.name}"]',
        until=upload_done,
        timeout_s=JOB_TIMEOUT_S,
        state="e.dataset.state",
        text="e.innerText",
        page_id="e.dataset.pageId",
    )
    assert re.search(r"revision \d+: [1-9]\d* paragraphs", item["text"]), item["text"]
    page_id = item["page_id"]
    # The page list redraws itself on a timer: its row is found and read in one step.
    row = wait_one(
        driver,
        f"page {page_id} in the list",
        f'#pages tr[data-page-id="{page_id}"]',
        until=lambda r: len(r["cells"]) > 3 and r["cells"][1] == title,
        cells="[...e.querySelectorAll('td')].map(c => c.innerText)",
    )
    cells = row["cells"]
    assert cells[1] == title and int(cells[3]) >= 1, cells
    listed = ui_stack.ingest.get(f"/v1/pages/{page_id}").json()
    assert listed["title"] == title and str(listed["paragraphs"]) == cells[3]


def test_a_failed_job_shows_its_reason_and_can_be_retried(
    driver: webdriver.Chrome, ui_stack: UiStack
) -> None:
    job_id = ui_stack.ingest.post("/v1/pages/changed", json=ui_stack.wiki.ping(FAILING_PAGE_ID)).json()[
        "job_id"
    ]

    def failed() -> dict[str, Any] | None:
        record: dict[str, Any] = ui_stack.ingest.get(f"/v1/jobs/{job_id}").json()
        assert record["state"] != "done", f"job {job_id} of the failing page succeeded: {record}"
        return record if record["state"] == "failed" else None

    poll(
        f"job {job_id} of page {FAILING_PAGE_ID} to fail",
        failed,
        timeout_s=JOB_TIMEOUT_S,
        detail=ui_stack.logs,
    )

    driver.get(ui_stack.chat_url + "/documents")
    failed_row = f'#failed tr[data-job-id="{job_id}"]'
    fields = {
        "text": "e.innerText",
        "reason": "(e.querySelector('td.reason') || {}).innerText || ''",
        "retried": "e.dataset.retried || ''",
        "status": "(e.querySelector('.retry-status') || {}).innerText || ''",
    }
    row = wait_one(driver, "the failed job in the list", failed_row, fields=fields)
    assert "500" in row["reason"], row["reason"]
    assert str(FAILING_PAGE_ID) in row["text"]
    click(driver, f"{failed_row} button.retry")
    wait_one(
        driver, "the retry to be accepted", failed_row, until=lambda r: r["retried"] == "true", fields=fields
    )
    wait_one(
        driver,
        "the retried job to end",
        failed_row,
        until=lambda r: "failed again" in r["status"],
        timeout_s=JOB_TIMEOUT_S,
        fields=fields,
    )
    assert ui_stack.wiki.hits[FAILING_PAGE_ID] >= 3  # two attempts, then one more after the retry


def test_the_admin_page_shows_retrieval_scores_timings_and_validates_the_config(
    driver: webdriver.Chrome, ui_stack: UiStack
) -> None:
    driver.get(ui_stack.chat_url + "/admin")
    [state] = wait_read(
        driver,
        "the index state",
        "#index-state",
        until=lambda rows: rows and rows[0]["paragraphs"],
        paragraphs="(e.querySelector('#state-paragraphs') || {}).innerText || ''",
        text="e.innerText",
    )
    assert int(state["paragraphs"]) > 0
    assert "multilingual-e5-small" in state["text"]

    type_into(driver, "#debug-query", "income tax exemption" + Keys.ENTER)
    # The debug view is read in the step that sees it complete.
    [debug] = wait_read(
        driver,
        "the debug view",
        "body",
        until=lambda rows: rows[-1]["documents"] and rows[-1]["timings"],
        documents="document.querySelectorAll('#debug-documents tbody tr').length",
        branches="Object.fromEntries([...document.querySelectorAll('.branch')].map(b => [b.dataset.branch, "
        "[...b.querySelectorAll('td.score')].map(c => parseFloat(c.innerText))]))",
        fused="document.querySelectorAll('#debug-fused tbody tr td.score').length",
        timings="(document.getElementById('debug-timings') || {}).innerText || ''",
        rerank="(document.getElementById('debug-rerank') || {}).innerText || ''",
    )
    branches = debug["branches"]
    assert set(branches) == {"content_multilingual-e5-small_vectors", "bm25"}, list(branches)
    for scores in branches.values():
        assert scores and scores == sorted(scores, reverse=True), scores
    assert all(0.0 < s <= 2.0 for s in branches["content_multilingual-e5-small_vectors"])  # cosine + 1
    assert debug["fused"]
    timings = debug["timings"]
    assert "total" in timings and "embed" in timings and re.search(r"\d+\.\d ms", timings)
    assert debug["rerank"]  # either the rerank table or why there is none

    config = {
        "version": "(document.getElementById('config-version') || {}).innerText || ''",
        "error": "(document.getElementById('cfg-temperature-error') || {}).innerText || ''",
        "invalid": "e.getAttribute('aria-invalid')",
        "status": "(document.getElementById('config-status') || {}).innerText || ''",
    }
    form = wait_one(driver, "the config form", "#cfg-temperature", fields=config)
    type_into(driver, "#cfg-temperature", "7", clear=True)
    click(driver, "#config-save")
    refused = wait_one(
        driver,
        "the temperature's validation message",
        "#cfg-temperature",
        until=lambda r: r["error"].strip(),
        fields=config,
    )
    assert "temperature" in refused["error"] and refused["invalid"] == "true"
    assert refused["version"] == form["version"]
    type_into(driver, "#cfg-temperature", "0.3", clear=True)
    click(driver, "#config-save")
    saved = wait_one(
        driver,
        "the config to be saved",
        "#cfg-temperature",
        until=lambda r: "Saved as version" in r["status"],
        fields=config,
    )
    assert not saved["error"] and saved["invalid"] is None
