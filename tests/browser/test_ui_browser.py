"""The web UI in a real browser against real services: a streamed English answer with source pills and
feedback, a Hebrew conversation laid out right to left (and at phone width), an upload indexed and
listed, a failed job retried, and the admin page's retrieval debug and config editor."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait
from support.ui_stack import FAILING_PAGE_ID, SCREENSHOTS, WINDOW, UiStack

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.timeout(600), pytest.mark.usefixtures("shot")]

ANSWER_TIMEOUT_S = 180.0
JOB_TIMEOUT_S = 180.0
QUESTION = "Who is exempt from income tax?"
HEBREW_QUESTION = "מי זכאי לפטור ממס הכנסה?"
_T = TypeVar("_T")


def wait_for(
    driver: webdriver.Chrome,
    condition: Callable[[webdriver.Chrome], _T | None],
    *,
    timeout_s: float,
    what: str,
) -> _T:
    """Poll ``condition`` until it is truthy; fail with what was awaited and the page's text."""
    waiter = WebDriverWait(
        driver, timeout_s, poll_frequency=0.2, ignored_exceptions=[StaleElementReferenceException]
    )
    try:
        return cast(_T, waiter.until(condition))
    except TimeoutException:
        pytest.fail(
            f"timed out after {timeout_s:.0f} s waiting for {what}; page text:\n{page_text(driver)[:2000]}"
        )


def wait_element(
    driver: webdriver.Chrome, css: str, *, timeout_s: float = 30.0, what: str = ""
) -> WebElement:
    """The first element matching ``css`` once there is one."""
    return wait_for(
        driver,
        lambda d: next(iter(d.find_elements(By.CSS_SELECTOR, css)), None),
        timeout_s=timeout_s,
        what=what or css,
    )


def page_text(driver: webdriver.Chrome) -> str:
    return str(driver.execute_script("return document.body.innerText"))


def computed(driver: webdriver.Chrome, element: WebElement, prop: str) -> str:
    return str(driver.execute_script("return getComputedStyle(arguments[0])[arguments[1]]", element, prop))


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


def ask(driver: webdriver.Chrome, question: str) -> WebElement:
    """Type a question, press Enter, and wait for the answer to finish; returns the answer's item."""
    before = len(driver.find_elements(By.CSS_SELECTOR, "li.msg-bot"))
    box = driver.find_element(By.ID, "question")
    box.click()
    box.send_keys(question)
    box.send_keys(Keys.ENTER)

    def finished(d: webdriver.Chrome) -> WebElement | None:
        items = d.find_elements(By.CSS_SELECTOR, "li.msg-bot")
        if len(items) <= before:
            return None
        state = items[-1].get_attribute("data-state")
        if state == "error":
            pytest.fail(f"the answer failed: {items[-1].text}")
        return items[-1] if state == "done" else None

    return wait_for(driver, finished, timeout_s=ANSWER_TIMEOUT_S, what="the streamed answer")


def test_an_english_question_streams_an_answer_with_source_pills_and_takes_feedback(
    driver: webdriver.Chrome, ui_stack: UiStack
) -> None:
    driver.get(ui_stack.chat_url + "/")
    wait_for(
        driver, lambda d: d.find_element(By.ID, "question").is_displayed(), timeout_s=30, what="the chat page"
    )
    driver.find_element(By.ID, "new-chat").click()
    assert driver.switch_to.active_element.get_attribute("id") == "question"
    watch_renders(driver)
    answer = ask(driver, QUESTION)

    bubble = answer.find_element(By.CSS_SELECTOR, ".bubble")
    assert bubble.text.strip(), "the answer is empty"
    renders: list[str] = driver.execute_script("return window.__renders")
    # "Searching…", "Reading N sources…", then the answer growing token by token.
    assert len(renders) >= 3, renders
    pills = answer.find_elements(By.CSS_SELECTOR, ".pills .pill")
    assert pills, f"no source pills under the answer: {answer.text}"
    for pill in pills:
        assert (pill.get_attribute("href") or "").startswith("https://www.kolzchut.org.il/")
        assert pill.get_attribute("target") == "_blank"
        assert pill.find_element(By.CSS_SELECTOR, ".pill-title").text.strip()
    confidences = [p.find_element(By.CSS_SELECTOR, ".pill-conf").text for p in pills]
    assert all(re.fullmatch(r"\d{1,3}%", c) for c in confidences), confidences
    assert computed(driver, answer, "direction") == "ltr"

    answer.find_element(By.CSS_SELECTOR, "button.thumb-up").click()
    status = answer.find_element(By.CSS_SELECTOR, ".feedback .status")
    wait_for(driver, lambda d: "Thanks" in status.text, timeout_s=20, what="the rating to be saved")
    assert answer.find_element(By.CSS_SELECTOR, "button.thumb-up").get_attribute("aria-pressed") == "true"
    comment = answer.find_element(By.CSS_SELECTOR, ".comment-form textarea")
    assert driver.switch_to.active_element == comment
    comment.send_keys("Clear and sourced.")
    answer.find_element(By.CSS_SELECTOR, ".comment-form button[type=submit]").click()
    wait_for(driver, lambda d: "comment saved" in status.text, timeout_s=20, what="the comment to be saved")


def test_a_hebrew_conversation_is_laid_out_right_to_left_also_at_phone_width(
    driver: webdriver.Chrome, ui_stack: UiStack
) -> None:
    driver.get(ui_stack.chat_url + "/")
    driver.find_element(By.ID, "new-chat").click()
    answer = ask(driver, HEBREW_QUESTION)
    question = driver.find_elements(By.CSS_SELECTOR, "li.msg-user")[-1]
    assert question.text == HEBREW_QUESTION
    assert computed(driver, question, "direction") == "rtl"
    assert computed(driver, answer, "direction") == "rtl"
    assert computed(driver, answer.find_element(By.CSS_SELECTOR, ".bubble"), "direction") == "rtl"
    box = driver.find_element(By.ID, "question")
    box.send_keys("שלום")
    assert computed(driver, box, "direction") == "rtl"  # dir="auto" follows what is typed
    box.clear()

    driver.set_window_size(390, 844)
    try:
        wait_for(
            driver,
            lambda d: d.execute_script("return window.innerWidth") <= 400,
            timeout_s=10,
            what="the phone-width window",
        )
        overflow = driver.execute_script("return document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"the chat page scrolls sideways by {overflow}px at phone width"
        assert driver.find_element(By.ID, "send").is_displayed()
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(SCREENSHOTS / "chat-phone-width.png"))
    finally:
        driver.set_window_size(*WINDOW)


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
    wait_for(
        driver,
        lambda d: "paragraphs indexed" in d.find_element(By.ID, "pages-summary").text,
        timeout_s=30,
        what="the page list",
    )
    driver.find_element(By.ID, "file-input").send_keys(str(document))

    def upload_done(d: webdriver.Chrome) -> WebElement | None:
        items = d.find_elements(By.CSS_SELECTOR, f'li.upload[data-file="{document.name}"]')
        if not items:
            return None
        state = items[0].get_attribute("data-state")
        if state == "failed":
            pytest.fail(f"the upload failed: {items[0].text}\n{ui_stack.logs()}")
        return items[0] if state == "done" else None

    item = wait_for(driver, upload_done, timeout_s=JOB_TIMEOUT_S, what="the upload's job to finish")
    assert re.search(r"revision \d+: [1-9]\d* paragraphs", item.text), item.text
    page_id = item.get_attribute("data-page-id")
    row = wait_element(driver, f'#pages tr[data-page-id="{page_id}"]', what=f"page {page_id} in the list")
    cells = [c.text for c in row.find_elements(By.TAG_NAME, "td")]
    assert cells[1] == title and int(cells[3]) >= 1, cells
    listed = ui_stack.ingest.get(f"/v1/pages/{page_id}").json()
    assert listed["title"] == title and str(listed["paragraphs"]) == cells[3]


def test_a_failed_job_shows_its_reason_and_can_be_retried(
    driver: webdriver.Chrome, ui_stack: UiStack
) -> None:
    job_id = ui_stack.ingest.post("/v1/pages/changed", json=ui_stack.wiki.ping(FAILING_PAGE_ID)).json()[
        "job_id"
    ]
    deadline = time.monotonic() + JOB_TIMEOUT_S
    record: dict[str, Any] = {}
    while time.monotonic() < deadline:
        record = ui_stack.ingest.get(f"/v1/jobs/{job_id}").json()
        if record["state"] == "failed":
            break
        time.sleep(0.25)
    assert record.get("state") == "failed", f"{record}\n{ui_stack.logs()}"

    driver.get(ui_stack.chat_url + "/documents")
    row = wait_element(driver, f'#failed tr[data-job-id="{job_id}"]', what="the failed job in the list")
    reason = row.find_element(By.CSS_SELECTOR, "td.reason").text
    assert "500" in reason, reason
    assert str(FAILING_PAGE_ID) in row.text
    row.find_element(By.CSS_SELECTOR, "button.retry").click()
    wait_for(
        driver,
        lambda d: row.get_attribute("data-retried") == "true",
        timeout_s=20,
        what="the retry to be accepted",
    )
    status = row.find_element(By.CSS_SELECTOR, ".retry-status")
    wait_for(
        driver,
        lambda d: "failed again" in status.text,
        timeout_s=JOB_TIMEOUT_S,
        what="the retried job to end",
    )
    assert ui_stack.wiki.hits[FAILING_PAGE_ID] >= 3  # two attempts, then one more after the retry


def test_the_admin_page_shows_retrieval_scores_timings_and_validates_the_config(
    driver: webdriver.Chrome, ui_stack: UiStack
) -> None:
    driver.get(ui_stack.chat_url + "/admin")
    paragraphs = wait_element(driver, "#state-paragraphs", what="the index state")
    assert int(paragraphs.text) > 0
    assert "multilingual-e5-small" in driver.find_element(By.ID, "index-state").text

    query = driver.find_element(By.ID, "debug-query")
    query.send_keys("income tax exemption")
    query.send_keys(Keys.ENTER)
    wait_for(
        driver,
        lambda d: d.find_elements(By.CSS_SELECTOR, "#debug-documents tbody tr"),
        timeout_s=60,
        what="the debug view",
    )
    branches = {b.get_attribute("data-branch"): b for b in driver.find_elements(By.CSS_SELECTOR, ".branch")}
    assert set(branches) == {"content_multilingual-e5-small_vectors", "bm25"}, list(branches)
    for branch in branches.values():
        scores = [float(c.text) for c in branch.find_elements(By.CSS_SELECTOR, "td.score")]
        assert scores and scores == sorted(scores, reverse=True), scores
    dense = [
        float(c.text)
        for c in branches["content_multilingual-e5-small_vectors"].find_elements(By.CSS_SELECTOR, "td.score")
    ]
    assert all(0.0 < s <= 2.0 for s in dense)  # cosine + 1
    assert driver.find_elements(By.CSS_SELECTOR, "#debug-fused tbody tr td.score")
    timings = driver.find_element(By.ID, "debug-timings").text
    assert "total" in timings and "embed" in timings and re.search(r"\d+\.\d ms", timings)
    assert driver.find_element(By.ID, "debug-rerank").text  # either the rerank table or why there is none

    temperature = wait_element(driver, "#cfg-temperature", what="the config form")
    version = driver.find_element(By.ID, "config-version").text
    temperature.clear()
    temperature.send_keys("7")
    driver.find_element(By.ID, "config-save").click()
    error = driver.find_element(By.ID, "cfg-temperature-error")
    wait_for(driver, lambda d: error.text.strip(), timeout_s=20, what="the temperature's validation message")
    assert "temperature" in error.text and temperature.get_attribute("aria-invalid") == "true"
    assert driver.find_element(By.ID, "config-version").text == version
    temperature.clear()
    temperature.send_keys("0.3")
    driver.find_element(By.ID, "config-save").click()
    status = driver.find_element(By.ID, "config-status")
    wait_for(driver, lambda d: "Saved as version" in status.text, timeout_s=20, what="the config to be saved")
    assert not error.text and temperature.get_attribute("aria-invalid") is None
