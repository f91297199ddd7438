"""Bounded waits on a condition, for tests that watch jobs, processes and servers instead of sleeping.

A fixed sleep is too short on a busy machine and wasted on a quiet one; a wait here polls a condition
until it holds and fails, after a timeout long enough for a loaded machine, with a message that names
what it waited for, what it saw last and (through ``detail``) the services' logs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
# Long enough for load 15 on two cores; a quiet machine needs a few seconds. The browser waits use it too.
TIMEOUT_S = 90.0


class WaitTimeout(AssertionError):
    """A condition did not hold in time; the message names what was awaited and what was seen last."""


def poll(
    what: str,
    probe: Callable[[], T | None],
    *,
    timeout_s: float = TIMEOUT_S,
    every_s: float = 0.2,
    retry_on: tuple[type[Exception], ...] = (),
    detail: Callable[[], str] | None = None,
) -> T:
    """Call ``probe`` until it returns a truthy value and return that value (the read that saw it hold).

    ``probe`` reads and decides in one step; an exception in ``retry_on`` counts as "not yet" (a server
    that is restarting), anything else fails at once. ``detail`` adds context (logs) to the failure.
    """
    deadline = time.monotonic() + timeout_s
    last: object = "nothing read yet"
    while True:
        try:
            value = probe()
        except retry_on as exc:
            value, last = None, f"{type(exc).__name__}: {exc}"
        else:
            if value:
                return value
            last = value
        if time.monotonic() >= deadline:
            extra = f"\n{detail()}" if detail is not None else ""
            raise WaitTimeout(
                f"timed out after {timeout_s:.0f} s waiting for {what}; last seen: {last!r}{extra}"
            )
        time.sleep(every_s)


def holds_within(probe: Callable[[], object], *, timeout_s: float = TIMEOUT_S, every_s: float = 0.2) -> bool:
    """Whether ``probe`` turns truthy within ``timeout_s``: for scenarios that report what they saw
    (a benchmark's figures) instead of failing at the first miss; the caller asserts on the figures."""
    try:
        poll("a scenario's condition", probe, timeout_s=timeout_s, every_s=every_s)
    except WaitTimeout:
        return False
    return True
