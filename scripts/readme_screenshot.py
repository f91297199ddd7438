"""Refresh the README's screenshot (docs/images/chat.png) from a running ``make run``, in headless Chromium.

Usage, with ``make run`` up in another terminal::

    uv run python scripts/readme_screenshot.py [--chat http://127.0.0.1:8003] [--out docs/images/chat.png]

It opens the chat page in Hebrew (``/?lang=he``, the README shows the Hebrew UI), asks one Hebrew and
one English question in one conversation, waits for each streamed answer to finish, prints each
answer's text and seconds, and saves the screen. The browser tests write the same picture from their
own stack with ``RAGBOT_UI_README_SCREENSHOT=1`` (tests/browser/test_ui_i18n_browser.py).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

ROOT = Path(__file__).resolve().parents[1]
QUESTIONS = ("מי זכאי לנקודת זיכוי במס הכנסה?", "Who can get a tax refund?")
ANSWER_TIMEOUT_S = 240.0


def ask(driver: webdriver.Chrome, question: str) -> tuple[str, float]:
    """Type a question, wait for its answer to finish; the answer's text and the seconds it took."""
    before = len(driver.find_elements(By.CSS_SELECTOR, "li.msg-bot"))
    box = driver.find_element(By.ID, "question")
    box.click()
    box.send_keys(question)
    started = time.perf_counter()
    box.send_keys(Keys.ENTER)

    def finished(d: webdriver.Chrome) -> bool:
        items = d.find_elements(By.CSS_SELECTOR, "li.msg-bot")
        return len(items) > before and items[-1].get_attribute("data-state") in ("done", "error")

    WebDriverWait(driver, ANSWER_TIMEOUT_S).until(finished)
    answer = driver.find_elements(By.CSS_SELECTOR, "li.msg-bot")[-1]
    return answer.text, time.perf_counter() - started


def main() -> None:
    """Ask, print, save."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chat", default="http://127.0.0.1:8003", help="the chat service's URL")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images" / "chat.png")
    args = parser.parse_args()
    options = webdriver.ChromeOptions()
    options.binary_location = os.environ.get("RAGBOT_TEST_CHROMIUM", "/usr/bin/chromium")
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,900"):
        options.add_argument(flag)
    service = Service(os.environ.get("RAGBOT_TEST_CHROMEDRIVER", "/usr/bin/chromedriver"))
    driver = webdriver.Chrome(options=options, service=service)
    try:
        driver.get(args.chat.rstrip("/") + "/?lang=he")  # the switch: a cookie, then the page again
        WebDriverWait(driver, 30).until(lambda d: d.find_element(By.ID, "question").is_displayed())
        for question in QUESTIONS:
            text, seconds = ask(driver, question)
            sys.stdout.write(f"--- {question} ({seconds:.1f} s)\n{text}\n\n")
            sys.stdout.flush()
        args.out.parent.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(args.out))
        sys.stdout.write(f"wrote {args.out}\n")
    finally:
        driver.quit()


if __name__ == "__main__":
    main()
