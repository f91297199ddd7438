"""KZChatbot's three framed pages in headless Chromium, served the way the wiki serves them: through a
proxy on another origin that plays ``RagUiHandler`` and ``RagProxyHandler`` (``support.wiki_proxy``),
over a chat service with keys, real Redis, real retrieval over the sample pages and the embedded
llama.cpp model. A config change saved and read back, a history cleanup, a tester question with debug
data (JSON and streamed), a batch of 5 questions with expected pages exported as CSV, the rights' CSS;
no console errors and no CSP violations on any page.

``RAGBOT_KZ_SCREENSHOTS=1`` (or a missing file) writes docs/images/kz-{admin,tester,batch}.png.
"""

from __future__ import annotations

import asyncio
import csv
import io
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
import redis
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait
from support.auth import KEYS, auth_settings
from support.browser import click, wait_read, wait_until
from support.chat_corpus import sample_pages
from support.chat_stack import ChatServer, chat_server
from support.ui_stack import CHROMEDRIVER, CHROMIUM, ROOT, SCREENSHOTS, WINDOW
from support.wiki_proxy import WikiProxy, wiki_proxy

from ragbot.llms import build_llm
from ragbot.ports import ChatModel
from ragbot.settings import ChatSettings

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(900)]

ANSWER_TIMEOUT_S = 180.0
BATCH_TIMEOUT_S = 400.0
DOC_IMAGES = ROOT / "docs" / "images"
ADMIN_KEY = KEYS["admin"][0]
LLM_SETTINGS: dict[str, Any] = {
    "llm_backend": "llamacpp",
    "llm_max_tokens": 16,
    "context_max_chars": 300,
    "paragraphs_per_page": [2, 1, 1],
    "llamacpp_parallel": 2,
    "llamacpp_context_tokens": 2048,
}
# Problems a page reports to itself: CSP violations, uncaught errors, console.error.
WATCH = """
window.__problems = [];
document.addEventListener("securitypolicyviolation", function (e) {
  window.__problems.push("CSP " + e.violatedDirective + " blocked " + (e.blockedURI || "inline"));
});
window.addEventListener("error", function (e) { window.__problems.push("error " + e.message); });
window.addEventListener("unhandledrejection", function (e) {
  window.__problems.push("rejection " + e.reason);
});
var consoleError = console.error;
console.error = function () {
  window.__problems.push("console.error " + Array.prototype.join.call(arguments, " "));
  return consoleError.apply(console, arguments);
};
"""
_T = TypeVar("_T")


@pytest.fixture(scope="module")
def llm() -> Iterator[ChatModel]:
    model = build_llm(settings=ChatSettings(**LLM_SETTINGS))
    model.warm_up()
    yield model
    asyncio.run(model.close())


@pytest.fixture(scope="module")
def backend(redis_url: str, llm: ChatModel) -> Iterator[ChatServer]:
    with chat_server(llm=llm, redis_url=redis_url, auth=auth_settings(), **LLM_SETTINGS) as server:
        yield server


@pytest.fixture(scope="module")
def wiki(backend: ChatServer) -> Iterator[WikiProxy]:
    titles = [p.title for p in sample_pages()]
    with wiki_proxy(backend_url=backend.url, backend_key=ADMIN_KEY, titles=titles) as proxy:
        yield proxy


@pytest.fixture(scope="module")
def downloads(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("kz-downloads")


@pytest.fixture(scope="module")
def browser(downloads: Path) -> Iterator[webdriver.Chrome]:
    """Headless Chromium that keeps its console log, downloads into ``downloads`` and watches each page."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not Path(path).exists():
            pytest.fail(
                f"{path} is missing: `make deps` installs chromium and chromium-driver", pytrace=False
            )
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--disable-extensions",
        "--no-first-run",
        "--lang=he-IL",
        "--force-device-scale-factor=1",
        f"--window-size={WINDOW[0]},{WINDOW[1]}",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_window_size(*WINDOW)
    driver.set_page_load_timeout(60)
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": WATCH})
    driver.execute_cdp_cmd(
        "Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)}
    )
    try:
        yield driver
    finally:
        driver.quit()


def wait_for(
    driver: webdriver.Chrome, condition: Callable[[webdriver.Chrome], _T], *, timeout_s: float, what: str
) -> _T:
    waiter = WebDriverWait(
        driver, timeout_s, poll_frequency=0.2, ignored_exceptions=[StaleElementReferenceException]
    )
    try:
        return waiter.until(condition)
    except TimeoutException:
        text = driver.find_element(By.TAG_NAME, "body").text
        pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what}; page text:\n{text[:2000]}")


def text_with(element_id: str, needle: str) -> Callable[[webdriver.Chrome], str]:
    """A wait condition: the element's text once it contains ``needle`` (else empty)."""

    def condition(driver: webdriver.Chrome) -> str:
        text = by_id(driver, element_id).text
        return text if needle in text else ""

    return condition


def by_id(driver: webdriver.Chrome, element_id: str) -> WebElement:
    return driver.find_element(By.ID, element_id)


def open_page(driver: webdriver.Chrome, url: str) -> None:
    driver.get(url)
    wait_for(
        driver,
        lambda d: d.execute_script("return document.body.dataset.ready") == "1",
        timeout_s=30,
        what="the page's script",
    )


def assert_clean(driver: webdriver.Chrome) -> None:
    """No CSP violation, no uncaught error, nothing logged as an error by the browser."""
    problems = driver.execute_script("return window.__problems || []")
    log: list[dict[str, Any]] = driver.get_log("browser")  # type: ignore[no-untyped-call]
    severe = [e["message"] for e in log if e["level"] == "SEVERE"]
    assert problems == [] and severe == [], (problems, severe)


def shoot(driver: webdriver.Chrome, name: str, *, top: str | None = None) -> None:
    """Save the screen (scrolled to the element ``top``, else to the page's top)."""
    if top is None:
        driver.execute_script("window.scrollTo(0, 0)")
    else:
        driver.execute_script("document.getElementById(arguments[0]).scrollIntoView()", top)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(SCREENSHOTS / name))
    target = DOC_IMAGES / name
    if os.environ.get("RAGBOT_KZ_SCREENSHOTS") == "1" or not target.exists():
        DOC_IMAGES.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(target))


def backend_client(backend: ChatServer) -> httpx.Client:
    return httpx.Client(base_url=backend.url, auth=("wiki", ADMIN_KEY), timeout=ANSWER_TIMEOUT_S)


def set_value(driver: webdriver.Chrome, element_id: str, value: str) -> None:
    driver.execute_script(
        "const el = document.getElementById(arguments[0]); el.value = arguments[1];"
        "el.dispatchEvent(new Event('input', {bubbles: true}));",
        element_id,
        value,
    )


def test_admin_saves_a_config_reads_it_back_and_cleans_history(
    browser: webdriver.Chrome, wiki: WikiProxy, backend: ChatServer
) -> None:
    with backend_client(backend) as http:
        before = http.get("/get_config").json()
        conversation_id = http.post("/search", json={"query": "מי זכאי לפטור ממס הכנסה?"}).json()[
            "conversation_id"
        ]
    open_page(browser, wiki.page("admin.html"))
    assert browser.execute_script("return !!window.KZ_PROXY") is True
    wait_for(
        browser,
        lambda d: all(
            by_id(d, f"ping-{s}").get_attribute("data-status") == "ok"
            for s in ("redis", "llm_manager", "es_docker")
        ),
        timeout_s=30,
        what="three green health lights",
    )
    wait_for(
        browser, lambda d: by_id(d, "f-system_prompt").get_attribute("value"), timeout_s=30, what="the config"
    )
    # a local per-field error first: the user prompt must keep its slots
    set_value(browser, "f-user_prompt", "בלי משבצות")
    by_id(browser, "save").click()
    error = wait_for(
        browser,
        lambda d: d.find_element(By.CSS_SELECTOR, '.field-error[data-for="user_prompt"]').text,
        timeout_s=10,
        what="the field error",
    )
    assert "{documents}" in error
    by_id(browser, "reload").click()
    wait_for(
        browser,
        lambda d: "{documents}" in (by_id(d, "f-user_prompt").get_attribute("value") or ""),
        timeout_s=30,
        what="the reload",
    )
    set_value(browser, "f-temperature", "0.3")
    set_value(browser, "f-system_prompt", before["system_prompt"] + "\nבדיקה מהדפדפן")
    by_id(browser, "save").click()
    status = wait_for(
        browser,
        text_with("config-status", "נשמר"),
        timeout_s=30,
        what="saved",
    )
    assert f"גרסה {before['version'] + 1}" in status and "נקראה בחזרה" in status
    open_page(browser, wiki.page("admin.html"))
    wait_for(
        browser,
        lambda d: by_id(d, "f-temperature").get_attribute("value") == "0.3",
        timeout_s=30,
        what="the saved temperature",
    )
    assert (by_id(browser, "f-system_prompt").get_attribute("value") or "").endswith("בדיקה מהדפדפן")
    with backend_client(backend) as http:
        stored = http.get("/get_config").json()
    assert stored["temperature"] == 0.3 and stored["version"] == before["version"] + 1
    # the danger zone: only after the confirmation box
    clean = by_id(browser, "clean-history")
    assert clean.is_enabled() is False
    by_id(browser, "confirm-clean").click()
    clean.click()
    cleaned = wait_for(
        browser,
        text_with("clean-status", "נמחקו"),
        timeout_s=30,
        what="cleaned",
    )
    assert "תשובות" in cleaned
    client = redis.Redis.from_url(backend.redis_url)
    try:
        assert client.get(f"{backend.prefix}:chat:message:{conversation_id}") is None
    finally:
        client.close()
    assert ("POST", "set_config", 200) in wiki.relayed and (
        "POST",
        "clean_redis_history",
        200,
    ) in wiki.relayed
    shoot(browser, "kz-admin.png")
    assert_clean(browser)
    with backend_client(backend) as http:
        http.post("/set_config", json=before)


def test_the_wiki_rights_hide_save_and_the_danger_zone(
    browser: webdriver.Chrome, backend: ChatServer
) -> None:
    with wiki_proxy(
        backend_url=backend.url, backend_key=ADMIN_KEY, can_edit=False, can_clean_redis=False
    ) as reader:
        open_page(browser, reader.page("admin.html"))
        wait_for(
            browser,
            lambda d: by_id(d, "f-system_prompt").get_attribute("value"),
            timeout_s=30,
            what="the config",
        )
        assert not by_id(browser, "save").is_displayed()
        assert not by_id(browser, "danger-zone").is_displayed()
        assert all(
            not el.is_enabled()
            for el in browser.find_elements(By.CSS_SELECTOR, ".main-content textarea, .main-content select")
        )
        assert by_id(browser, "readonly-note").text
        assert_clean(browser)


def test_tester_answers_with_debug_data_then_streams(browser: webdriver.Chrome, wiki: WikiProxy) -> None:
    open_page(browser, wiki.page("index.html"))
    set_value(browser, "question", "מי זכאי לפטור ממס הכנסה לעיוורים?")
    assert by_id(browser, "o-include_debug_data").is_selected()
    by_id(browser, "o-rephrase").click()
    set_value(browser, "o-max_documents_from_same_page", "2")
    by_id(browser, "ask").click()
    wait_for(
        browser,
        lambda d: d.execute_script("return document.body.dataset.answered") == "1",
        timeout_s=ANSWER_TIMEOUT_S,
        what="the answer",
    )
    assert by_id(browser, "error").text == ""
    assert by_id(browser, "answer").text.strip()
    assert browser.find_elements(By.CSS_SELECTOR, "#docs li")
    assert '"sources"' in by_id(browser, "debug").text and '"timings_ms"' in by_id(browser, "debug").text
    assert browser.find_elements(By.CSS_SELECTOR, "#before-filter table tr")
    assert by_id(browser, "rephrased").text not in ("", "—")
    assert "זמן תגובה" in by_id(browser, "timings").text
    by_id(browser, "like").click()
    wait_for(
        browser, lambda d: by_id(d, "rating-status").text == "הדירוג נשמר", timeout_s=30, what="the rating"
    )
    shoot(browser, "kz-tester.png")
    by_id(browser, "o-rephrase").click()
    by_id(browser, "o-stream").click()
    by_id(browser, "ask").click()
    wait_for(
        browser,
        lambda d: d.execute_script("return document.body.dataset.answered") == "2",
        timeout_s=ANSWER_TIMEOUT_S,
        what="the streamed answer",
    )
    assert by_id(browser, "error").text == "" and by_id(browser, "answer").text.strip()
    assert '"sources"' in by_id(browser, "debug").text
    assert ("POST", "search", 200) in wiki.relayed and ("POST", "search/stream", 200) in wiki.relayed
    assert ("POST", "rating", 200) in wiki.relayed
    assert_clean(browser)


def test_batch_of_five_with_expected_pages_exports_csv(
    browser: webdriver.Chrome, wiki: WikiProxy, downloads: Path
) -> None:
    pages = {p.page_id: p.title for p in sample_pages()}
    rows = [
        ("פטור ממס הכנסה לעיוורים ולקויי ראייה", pages[100035]),
        ("נקודות זיכוי לנוער עובד", "100028"),
        ("פטור ממס על מלגות לסטודנטים", pages[100037]),
        ("נקודות זיכוי ממס הכנסה לנשים", pages[100029].replace(" ", "_")),
        ("מה מגיע לעיוורים במס הכנסה?", "100035"),
    ]
    open_page(browser, wiki.page("batch-runner.html"))
    # the wiki's api.php behind the literal kolzchut.org.il URL: titles offered while typing
    by_id(browser, "add-expected").send_keys("פטור")
    wait_for(
        browser,
        lambda d: len(d.find_elements(By.CSS_SELECTOR, "#titles option")) >= 2,
        timeout_s=30,
        what="title suggestions",
    )
    set_value(browser, "add-expected", "")
    text = "question,expected\n" + "\n".join(f'"{q}",{e}' for q, e in rows)
    set_value(browser, "input", text)
    set_value(browser, "concurrency", "2")
    by_id(browser, "run").click()
    wait_for(
        browser,
        lambda d: d.execute_script("return document.body.dataset.finished") == "1",
        timeout_s=BATCH_TIMEOUT_S,
        what="the batch",
    )
    # The results and summary are read in one step, after the page says it has finished.
    [results] = wait_read(
        browser,
        "the batch's results",
        "#results",
        states="[...e.querySelectorAll('tbody tr')].map(tr => tr.dataset.state)",
        hits="e.querySelectorAll('tbody tr.hit').length",
        text="e.innerText",
        summary="document.getElementById('summary').innerText",
    )
    assert results["states"] == ["done"] * 5
    hits = results["hits"]
    assert hits, results["text"]  # the sample pages answer most of these
    summary = results["summary"]
    assert "hit@1" in summary and "MRR" in summary
    click(browser, "#export-csv")
    target = downloads / "batch-results.csv"
    wait_until(browser, f"{target.name} to be downloaded", lambda d: target.exists() or None, timeout_s=60)
    exported = list(csv.DictReader(io.StringIO(target.read_text(encoding="utf-8-sig"))))
    assert [r["question"] for r in exported] == [q for q, _ in rows]
    assert sum(r["found"] == "yes" for r in exported) == hits
    for row in exported:  # found and rank agree with the documents the page listed for that question
        expected = row["expected"].replace("_", " ")
        title = pages[int(expected)] if expected.isdigit() else expected
        docs = row["docs"].split(" | ")
        assert row["found"] == ("yes" if title in docs else "no"), row
        assert row["rank"] == (str(docs.index(title) + 1) if title in docs else ""), row
    assert f"{round(100 * hits / 5)}%" in summary
    assert all(r["answer"] and r["docs"] and r["conversation_id"] for r in exported)
    assert sum(1 for m, p, s in wiki.relayed if (m, p, s) == ("POST", "search", 200)) >= 5
    shoot(browser, "kz-batch.png", top="summary")
    assert_clean(browser)
