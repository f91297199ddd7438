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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from support.auth import KEYS, auth_settings
from support.browser import click, set_value, type_into, wait_read, wait_script, wait_until
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
# The tester's answer, read in one step once the page has answered ``arguments[0]`` times.
READ_ANSWER = """
if (document.body.dataset.answered !== arguments[0]) return null;
const text = (id) => { const el = document.getElementById(id); return el ? el.innerText : ''; };
return {
  error: text('error'),
  answer: text('answer'),
  docs: document.querySelectorAll('#docs li').length,
  debug: text('debug'),
  before_filter: document.querySelectorAll('#before-filter table tr').length,
  rephrased: text('rephrased'),
  timings: text('timings'),
};
"""


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


def open_page(driver: webdriver.Chrome, url: str) -> None:
    driver.get(url)
    wait_script(driver, "the page's script", "return document.body.dataset.ready === '1'")


def value_of(element_id: str) -> str:
    """A script that reads a field's value (empty while the page has no such field)."""
    return f"const el = document.getElementById({element_id!r}); return el ? el.value : '';"


def text_with(element_id: str, needle: str) -> str:
    """A script that reads an element's text once it contains ``needle`` (else nothing)."""
    return (
        f"const el = document.getElementById({element_id!r}); const t = el ? el.innerText : '';"
        f"return t.includes({needle!r}) ? t : null;"
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
    wait_script(
        browser,
        "three green health lights",
        "return ['redis', 'llm_manager', 'es_docker'].every((s) => {"
        " const light = document.getElementById('ping-' + s);"
        " return light && light.dataset.status === 'ok'; });",
    )
    wait_script(browser, "the config", value_of("f-system_prompt"))
    # a local per-field error first: the user prompt must keep its slots
    set_value(browser, "f-user_prompt", "בלי משבצות")
    click(browser, "#save")
    error = wait_script(
        browser,
        "the user prompt's field error",
        "const e = document.querySelector('.field-error[data-for=\"user_prompt\"]');return e && e.innerText;",
    )
    assert "{documents}" in error
    click(browser, "#reload")
    wait_script(
        browser,
        "the reloaded user prompt with its {documents} slot",
        "const el = document.getElementById('f-user_prompt');"
        "return !!el && el.value.includes('{documents}');",
    )
    set_value(browser, "f-temperature", "0.3")
    set_value(browser, "f-system_prompt", before["system_prompt"] + "\nבדיקה מהדפדפן")
    click(browser, "#save")
    status = wait_script(browser, "the config to be saved", text_with("config-status", "נשמר"))
    assert f"גרסה {before['version'] + 1}" in status and "נקראה בחזרה" in status
    open_page(browser, wiki.page("admin.html"))
    saved = wait_script(
        browser,
        "the saved temperature",
        "const t = document.getElementById('f-temperature'), p = document.getElementById('f-system_prompt');"
        "return t && p && t.value === '0.3' ? {system_prompt: p.value} : null;",
    )
    assert saved["system_prompt"].endswith("בדיקה מהדפדפן"), saved
    with backend_client(backend) as http:
        stored = http.get("/get_config").json()
    assert stored["temperature"] == 0.3 and stored["version"] == before["version"] + 1
    # the danger zone: only after the confirmation box
    assert browser.execute_script("return document.getElementById('clean-history').disabled") is True
    click(browser, "#confirm-clean")
    wait_script(
        browser,
        "the cleanup button to be enabled",
        "return !document.getElementById('clean-history').disabled",
    )
    click(browser, "#clean-history")
    cleaned = wait_script(browser, "the history to be cleaned", text_with("clean-status", "נמחקו"))
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
        # Read in the step that sees the config: what a reader without rights is shown.
        page = wait_script(
            browser,
            "the config, read only",
            "const prompt = document.getElementById('f-system_prompt');"
            "if (!prompt || !prompt.value) return null;"
            "const shown = (id) => { const el = document.getElementById(id);"
            " return !!el && el.getClientRects().length > 0"
            "  && getComputedStyle(el).visibility !== 'hidden'; };"
            "return {save: shown('save'), danger: shown('danger-zone'),"
            " enabled: [...document.querySelectorAll('.main-content textarea, .main-content select')]"
            "   .filter((el) => !el.disabled).map((el) => el.id),"
            " fields: document.querySelectorAll('.main-content textarea, .main-content select').length,"
            " note: document.getElementById('readonly-note').innerText};",
        )
        assert not page["save"] and not page["danger"], page
        assert page["fields"] and page["enabled"] == [], page
        assert page["note"], page
        assert_clean(browser)


def test_tester_answers_with_debug_data_then_streams(browser: webdriver.Chrome, wiki: WikiProxy) -> None:
    open_page(browser, wiki.page("index.html"))
    set_value(browser, "question", "מי זכאי לפטור ממס הכנסה לעיוורים?")
    assert browser.execute_script("return document.getElementById('o-include_debug_data').checked") is True
    click(browser, "#o-rephrase")
    set_value(browser, "o-max_documents_from_same_page", "2")
    click(browser, "#ask")
    answer = wait_script(browser, "the answer", READ_ANSWER, "1", timeout_s=ANSWER_TIMEOUT_S)
    assert answer["error"] == "" and answer["answer"].strip(), answer
    assert answer["docs"], answer
    assert '"sources"' in answer["debug"] and '"timings_ms"' in answer["debug"], answer["debug"][:2000]
    assert answer["before_filter"], answer
    assert answer["rephrased"] not in ("", "—"), answer
    assert "זמן תגובה" in answer["timings"], answer
    click(browser, "#like")
    wait_script(
        browser,
        "the rating to be saved",
        "return document.getElementById('rating-status').innerText === 'הדירוג נשמר';",
    )
    shoot(browser, "kz-tester.png")
    click(browser, "#o-rephrase")
    click(browser, "#o-stream")
    click(browser, "#ask")
    streamed = wait_script(browser, "the streamed answer", READ_ANSWER, "2", timeout_s=ANSWER_TIMEOUT_S)
    assert streamed["error"] == "" and streamed["answer"].strip(), streamed
    assert '"sources"' in streamed["debug"], streamed["debug"][:2000]
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
    type_into(browser, "#add-expected", "פטור")
    wait_script(
        browser,
        "two title suggestions or more",
        "return document.querySelectorAll('#titles option').length >= 2",
    )
    set_value(browser, "add-expected", "")
    text = "question,expected\n" + "\n".join(f'"{q}",{e}' for q, e in rows)
    set_value(browser, "input", text)
    set_value(browser, "concurrency", "2")
    click(browser, "#run")
    wait_script(
        browser,
        "the batch to finish",
        "return document.body.dataset.finished === '1'",
        timeout_s=BATCH_TIMEOUT_S,
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
