"""Browser waits that find and read in one step, so a page that re-renders cannot fail a test.

The documents and admin pages redraw their tables on a timer, and the chat page redraws an answer as
it streams. A test that finds an element, then reads it after another step, reads a node the page may
have replaced (``StaleElementReferenceException``), which happens only when the machine is busy.
Every helper here finds and reads inside one ``execute_script`` (or one polling callable) and returns
plain values, never an element to read later; every wait has a timeout fit for a loaded machine and
fails naming what it waited for, with the page's text.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

import pytest
from selenium import webdriver
from selenium.common.exceptions import (
    ElementClickInterceptedException,
    ElementNotInteractableException,
    NoSuchElementException,
    StaleElementReferenceException,
    TimeoutException,
)
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

from support.waits import TIMEOUT_S

T = TypeVar("T")
_RETRIED = (StaleElementReferenceException, NoSuchElementException)


def page_text(driver: webdriver.Chrome) -> str:
    """The page's visible text, for failure messages."""
    try:
        return str(driver.execute_script("return document.body ? document.body.innerText : ''"))
    except Exception as exc:
        return f"(page text unavailable: {exc!r})"


def wait_until(
    driver: webdriver.Chrome,
    what: str,
    condition: Callable[[webdriver.Chrome], T | None],
    *,
    timeout_s: float = TIMEOUT_S,
) -> T:
    """Poll ``condition`` until it returns a truthy value (a stale or missing element is a retry)."""
    waiter = WebDriverWait(driver, timeout_s, poll_frequency=0.2, ignored_exceptions=list(_RETRIED))
    try:
        return cast(T, waiter.until(condition))
    except TimeoutException:
        pytest.fail(
            f"timed out after {timeout_s:.0f} s waiting for {what}; page text:\n{page_text(driver)[:2000]}",
            pytrace=False,
        )


def wait_script(
    driver: webdriver.Chrome, what: str, script: str, *args: Any, timeout_s: float = TIMEOUT_S
) -> Any:
    """Run one script that queries and reads until it returns something truthy; returns that value."""
    return wait_until(driver, what, lambda d: d.execute_script(script, *args), timeout_s=timeout_s)


def read_all(
    driver: webdriver.Chrome, css: str, fields: Mapping[str, str] | None = None, **more: str
) -> list[dict[str, Any]]:
    """Every element matching ``css`` read in one script: each field is a JS expression of ``e``.

    ``read_all(d, "#pages tr", id="e.dataset.pageId", cells="[...e.cells].map(c => c.innerText)")``
    """
    merged = {**(fields or {}), **more}
    body = ", ".join(f"{json.dumps(name)}: ({expression})" for name, expression in merged.items())
    script = f"return Array.from(document.querySelectorAll(arguments[0]), e => ({{{body}}}));"
    return cast(list[dict[str, Any]], driver.execute_script(script, css))


def wait_read(
    driver: webdriver.Chrome,
    what: str,
    css: str,
    *,
    until: Callable[[list[dict[str, Any]]], Any] = bool,
    timeout_s: float = TIMEOUT_S,
    fields: Mapping[str, str] | None = None,
    **more: str,
) -> list[dict[str, Any]]:
    """``read_all`` polled until ``until(rows)`` holds; returns the rows read in that same step."""

    def probe(d: webdriver.Chrome) -> tuple[list[dict[str, Any]]] | None:
        rows = read_all(d, css, fields, **more)
        return (rows,) if until(rows) else None  # a tuple: an empty list that satisfies ``until`` is falsy

    return wait_until(driver, what, probe, timeout_s=timeout_s)[0]


def wait_one(
    driver: webdriver.Chrome,
    what: str,
    css: str,
    *,
    until: Callable[[dict[str, Any]], Any] = lambda row: True,
    timeout_s: float = TIMEOUT_S,
    fields: Mapping[str, str] | None = None,
    **more: str,
) -> dict[str, Any]:
    """The first element matching ``css`` for which ``until`` holds, read in the step that found it."""

    def probe(d: webdriver.Chrome) -> dict[str, Any] | None:
        return next((row for row in read_all(d, css, fields, **more) if until(row)), None)

    return wait_until(driver, what, probe, timeout_s=timeout_s)


def click(driver: webdriver.Chrome, css: str, *, what: str = "", timeout_s: float = TIMEOUT_S) -> None:
    """Find the element and click it in one step, again if the page replaced or covered it meanwhile."""

    def clicked(d: webdriver.Chrome) -> bool:
        try:
            d.find_element(By.CSS_SELECTOR, css).click()
        except (ElementClickInterceptedException, ElementNotInteractableException):
            return False
        return True

    wait_until(driver, what or f"{css} to be clickable", clicked, timeout_s=timeout_s)


def type_into(
    driver: webdriver.Chrome, css: str, text: str, *, clear: bool = False, timeout_s: float = TIMEOUT_S
) -> None:
    """Find a field and type into it in one step (cleared first when asked)."""

    def typed(d: webdriver.Chrome) -> bool:
        field = d.find_element(By.CSS_SELECTOR, css)
        if clear:
            field.clear()
        field.send_keys(text)
        return True

    wait_until(driver, f"{css} to take typing", typed, timeout_s=timeout_s)


def set_value(driver: webdriver.Chrome, element_id: str, value: str) -> None:
    """Set a field's value and fire its ``input`` event, found and set in one script."""
    found = driver.execute_script(
        "const el = document.getElementById(arguments[0]); if (!el) return false; el.value = arguments[1];"
        "el.dispatchEvent(new Event('input', {bubbles: true})); return true;",
        element_id,
        value,
    )
    assert found, f"no #{element_id} on the page to set to {value!r}:\n{page_text(driver)[:2000]}"


def choose(driver: webdriver.Chrome, css: str, value: str, *, timeout_s: float = TIMEOUT_S) -> None:
    """Find a <select> and pick the option with ``value`` in one step (its change event fires)."""

    def chosen(d: webdriver.Chrome) -> bool:
        Select(d.find_element(By.CSS_SELECTOR, css)).select_by_value(value)
        return True

    wait_until(driver, f"{css} to take {value!r}", chosen, timeout_s=timeout_s)
