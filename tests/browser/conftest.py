"""Fixtures of the browser tests: one real stack for the session (``support.ui_stack``) and a headless
Chromium driving it (Debian's binary and chromedriver through Selenium: nothing is downloaded).
Screenshots go to ``test-artifacts/screenshots/``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from support.ui_stack import CHROMEDRIVER, CHROMIUM, SCREENSHOTS, WINDOW, UiStack, running_ui_stack


@pytest.fixture(scope="session")
def ui_stack(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[UiStack]:
    with running_ui_stack(redis_url=redis_url, tmp=tmp_path_factory.mktemp("ui-stack")) as stack:
        yield stack


@pytest.fixture(scope="session")
def driver() -> Iterator[webdriver.Chrome]:
    """Headless Chromium at a fixed window size (Debian's binary and driver: nothing downloaded)."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not Path(path).exists():
            pytest.fail(
                f"{path} is missing: `make deps` installs chromium and chromium-driver (apt-get)",
                pytrace=False,
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
        "--lang=en-US",
        "--force-device-scale-factor=1",
        f"--window-size={WINDOW[0]},{WINDOW[1]}",
    ):
        options.add_argument(arg)
    browser = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    browser.set_window_size(*WINDOW)
    browser.set_page_load_timeout(60)
    try:
        yield browser
    finally:
        browser.quit()


@pytest.fixture
def shot(driver: webdriver.Chrome, request: pytest.FixtureRequest) -> Iterator[None]:
    """After each test, its final screen in test-artifacts/screenshots/<test>.png (pass or fail)."""
    yield
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(SCREENSHOTS / f"{request.node.name}.png"))
