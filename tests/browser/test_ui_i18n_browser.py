"""The web UI in Hebrew and in English, in a real browser against the real services (``support.ui_stack``):
each page in each language has the catalogue's strings, ``<html lang dir>`` and the layout's direction,
and the Hebrew pages keep no English UI string (checked against the English catalogue); the browser's
``Accept-Language`` picks the language until the page's switch is used, which is remembered; an answer
keeps its own direction inside a page of the other one.

``RAGBOT_UI_README_SCREENSHOT=1`` (or a missing file) writes docs/images/chat-he.png, chat-en.png,
documents-he.png and admin-he.png, and the README's docs/images/chat.png (the Hebrew chat page).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator
from typing import Any

import pytest
from selenium import webdriver
from support.browser import wait_script
from support.ui_stack import ROOT, UiStack

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.timeout(900), pytest.mark.usefixtures("shot")]

WAIT_S = 120.0
ANSWER_WAIT_S = 240.0
I18N = ROOT / "services" / "chat" / "ragbot_chat" / "static" / "i18n"
CATALOGUES: dict[str, dict[str, str]] = {
    lang: json.loads((I18N / f"{lang}.json").read_text(encoding="utf-8")) for lang in ("he", "en")
}
DOC_IMAGES = ROOT / "docs" / "images"
README_SCREENSHOT = DOC_IMAGES / "chat.png"
PAGES = {"/": "chat.title", "/documents": "documents.title", "/admin": "admin.title"}
# Once the page's scripts ran and its first loads ended: its language, direction and UI text. The text
# leaves out what came from data or the server in its own language (dir="auto" titles, questions and
# reasons; code; the other language's switch and example, marked lang="en"/"he") and adds the
# attributes a reader meets (aria-label, title, placeholder). One query, one read.
READ_PAGE = """
if (document.body.dataset.ready !== '1') return null;
const loading = arguments[0];
const busy = [...document.querySelectorAll('[role=status], #index-state, #config-status')]
  .some((node) => node.textContent.includes(loading));
if (busy) return null;
const clone = document.body.cloneNode(true);
const foreign = '[dir=auto], code, pre, .mono, [lang]:not([lang=' + arguments[1] + '])';
for (const node of clone.querySelectorAll(foreign)) node.remove();
const attrs = [...clone.querySelectorAll('[aria-label], [title], [placeholder]')].flatMap((node) =>
  ['aria-label', 'title', 'placeholder'].map((a) => node.getAttribute(a)).filter(Boolean));
return {
  lang: document.documentElement.lang,
  dir: document.documentElement.dir,
  direction: getComputedStyle(document.body).direction,
  title: document.title,
  text: clone.textContent.replace(/\\s+/g, ' '),
  attrs: attrs,
  cookie: document.cookie,
};
"""


def read_page(driver: webdriver.Chrome, lang: str, what: str) -> dict[str, Any]:
    found: dict[str, Any] = wait_script(
        driver, what, READ_PAGE, CATALOGUES[lang]["common.loading"], lang, timeout_s=WAIT_S
    )
    return found


def english_left(haystack: str) -> list[tuple[str, str]]:
    """The English catalogue's messages (different in Hebrew, with a word of 4+ letters) found in the text."""
    found = []
    for key, english in CATALOGUES["en"].items():
        if english == CATALOGUES["he"][key] or not re.search(r"[A-Za-z]{4}", re.sub(r"\{\w+\}", "", english)):
            continue
        parts = [re.escape(part) for part in re.split(r"\{\w+\}", english)]
        pattern = r"(?<![A-Za-z])" + ".+?".join(parts) + r"(?![A-Za-z])"
        if re.search(pattern, haystack):
            found.append((key, english))
    return found


@pytest.fixture
def accept_hebrew(driver: webdriver.Chrome) -> Iterator[None]:
    """The browser asks for Hebrew first (Accept-Language), and no language was chosen yet."""
    driver.execute_cdp_cmd("Network.enable", {})
    driver.execute_cdp_cmd("Network.setExtraHTTPHeaders", {"headers": {"Accept-Language": "he-IL,he;q=0.9"}})
    driver.delete_all_cookies()
    try:
        yield
    finally:
        driver.execute_cdp_cmd("Network.setExtraHTTPHeaders", {"headers": {}})
        driver.delete_cookie("ragbot_lang")  # cookies ignore ports: later tests' servers share them


def save(driver: webdriver.Chrome, name: str) -> None:
    path = DOC_IMAGES / name
    if os.environ.get("RAGBOT_UI_README_SCREENSHOT") == "1" or not path.exists():
        DOC_IMAGES.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(path))


def ask(driver: webdriver.Chrome, question: str) -> dict[str, Any]:
    """Ask in quote mode (the sources' own sentences, as `make run` answers) and read the finished answer."""
    before = driver.execute_script("return document.querySelectorAll('li.msg-bot').length")
    driver.execute_script(
        "document.getElementById('mode').value = 'quote';"
        "document.getElementById('question').value = arguments[0];"
        "document.getElementById('ask').requestSubmit();",
        question,
    )
    answer: dict[str, Any] = wait_script(
        driver,
        f"the answer to {question!r}",
        "const items = document.querySelectorAll('li.msg-bot');"
        "const last = items[arguments[0]];"
        "if (!last || !['done', 'error'].includes(last.dataset.state)) return null;"
        "return {state: last.dataset.state, dir: last.getAttribute('dir'),"
        " direction: getComputedStyle(last.querySelector('.bubble')).direction,"
        " text: last.innerText,"
        " pills: [...last.querySelectorAll('.pill')].map((p) => p.getAttribute('aria-label')),"
        " label: (last.querySelector('.sources-label') || {}).textContent || '',"
        " blocks: [...last.querySelectorAll('.bubble p')].map((p) => [getComputedStyle(p).direction,"
        " p.textContent])};",
        before,
        timeout_s=ANSWER_WAIT_S,
    )
    assert answer["state"] == "done", answer
    # Each paragraph keeps its own direction, whatever the page's or the question's.
    for direction, text in answer["blocks"]:
        hebrew, latin = len(re.findall(r"[\u0590-\u05FF]", text)), len(re.findall(r"[A-Za-z]", text))
        if hebrew != latin:
            assert direction == ("rtl" if hebrew > latin else "ltr"), (direction, text)
    return answer


def test_the_hebrew_pages_are_right_to_left_with_no_english_ui_string(
    driver: webdriver.Chrome, ui_stack: UiStack, accept_hebrew: None
) -> None:
    he = CATALOGUES["he"]
    for path, title_key in PAGES.items():
        driver.get(ui_stack.chat_url + path)
        page = read_page(driver, "he", f"the Hebrew {path} page")
        assert (page["lang"], page["dir"], page["direction"]) == ("he", "rtl", "rtl"), path
        assert page["title"] == he[title_key]
        for key in ("nav.chat", "nav.documents", "nav.admin"):
            assert he[key] in page["text"], (path, key)
        haystack = " ".join([page["title"], page["text"], *page["attrs"]])
        assert english_left(haystack) == [], (path, english_left(haystack))
        assert "ragbot_lang" not in page["cookie"]  # Accept-Language chose it; nothing was remembered
        if path == "/documents":
            assert he["documents.pages"] in page["text"]
            save(driver, "documents-he.png")
        if path == "/admin":
            assert he["admin.state"] in page["text"] and he["admin.config"] in page["text"]
            save(driver, "admin-he.png")

    driver.get(ui_stack.chat_url + "/")
    read_page(driver, "he", "the Hebrew chat page")
    driver.execute_script("document.getElementById('new-chat').click()")  # one conversation per picture
    hebrew = ask(driver, "מי זכאי לפטור ממס הכנסה?")
    assert hebrew["dir"] == "rtl" and hebrew["direction"] == "rtl", hebrew
    assert hebrew["pills"] and all(p.startswith("מקור ") for p in hebrew["pills"]), hebrew["pills"]
    assert hebrew["label"] == he["chat.sources"]
    # An English question on the Hebrew page: its answer keeps its own direction.
    english = ask(driver, "Who can get a tax refund?")
    assert english["dir"] == "ltr" and english["direction"] == "ltr", english
    page = read_page(driver, "he", "the Hebrew chat page after two answers")
    haystack = " ".join([page["text"], *page["attrs"]])
    assert english_left(haystack) == [], english_left(haystack)
    save(driver, "chat-he.png")
    if os.environ.get("RAGBOT_UI_README_SCREENSHOT") == "1" or not README_SCREENSHOT.exists():
        shutil.copyfile(DOC_IMAGES / "chat-he.png", README_SCREENSHOT)


def test_the_switch_chooses_english_and_remembers_it(
    driver: webdriver.Chrome, ui_stack: UiStack, accept_hebrew: None
) -> None:
    en, he = CATALOGUES["en"], CATALOGUES["he"]
    driver.get(ui_stack.chat_url + "/documents")
    assert read_page(driver, "he", "the Hebrew documents page")["lang"] == "he"
    driver.execute_script("document.querySelector('.lang-switch a[hreflang=en]').click()")
    page = wait_script(
        driver,
        "the English documents page after the switch",
        "return document.documentElement.lang === 'en' && location.search === '' && "
        "document.body.dataset.ready === '1' ? {path: location.pathname, dir: document.documentElement.dir, "
        "direction: getComputedStyle(document.body).direction, text: document.body.innerText} : null",
        timeout_s=WAIT_S,
    )
    assert page["path"] == "/documents" and (page["dir"], page["direction"]) == ("ltr", "ltr"), page
    assert en["documents.pages"] in page["text"] and he["documents.pages"] not in page["text"]
    # Remembered: every page now comes in English, though the browser still asks for Hebrew.
    for path, title_key in PAGES.items():
        driver.get(ui_stack.chat_url + path)
        found = read_page(driver, "en", f"the English {path} page")
        assert (found["lang"], found["dir"], found["direction"]) == ("en", "ltr", "ltr"), path
        assert found["title"] == en[title_key] and en["nav.documents"] in found["text"]
        hebrew_ui = [key for key in ("nav.chat", "nav.documents", "nav.admin") if he[key] in found["text"]]
        assert hebrew_ui == [], (path, hebrew_ui)

    driver.get(ui_stack.chat_url + "/")
    read_page(driver, "en", "the English chat page")
    driver.execute_script("document.getElementById('new-chat').click()")
    english = ask(driver, "Who can get a tax refund?")
    assert english["dir"] == "ltr" and english["label"] == en["chat.sources"], english
    assert english["pills"] and all(p.startswith("Source ") for p in english["pills"]), english["pills"]
    hebrew = ask(driver, "מי זכאי לנקודת זיכוי במס הכנסה?")
    assert hebrew["dir"] == "rtl" and hebrew["direction"] == "rtl", hebrew  # its own direction
    save(driver, "chat-en.png")

    driver.execute_script("document.querySelector('.lang-switch a[hreflang=he]').click()")
    wait_script(
        driver,
        "the Hebrew chat page after switching back",
        "return document.documentElement.lang === 'he' && document.documentElement.dir === 'rtl' "
        "&& document.body.dataset.ready === '1'",
        timeout_s=WAIT_S,
    )


def test_the_browsers_english_gets_english(driver: webdriver.Chrome, ui_stack: UiStack) -> None:
    driver.delete_all_cookies()  # the session's Chromium asks for en-US (--lang=en-US)
    driver.get(ui_stack.chat_url + "/admin")
    page = read_page(driver, "en", "the English admin page")
    assert (page["lang"], page["dir"], page["direction"]) == ("en", "ltr", "ltr")
    assert page["title"] == CATALOGUES["en"]["admin.title"]
