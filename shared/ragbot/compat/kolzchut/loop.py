"""A private event loop on a daemon thread, so the synchronous kolzchut-ragbot API can drive async code."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

R = TypeVar("R")


class LoopThread:
    """One event loop on a daemon thread; sync callers submit coroutines and wait for them."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def _start(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name=self._name, daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    def run(self, coro: Coroutine[Any, Any, R]) -> R:
        """Run ``coro`` on the private loop and return its result (re-raising its error)."""
        loop = self._start()
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("the kolzchut compat Engine must not be called from its own loop thread")
        return asyncio.run_coroutine_threadsafe(coro, loop).result()

    def stop(self) -> None:
        """Stop the loop and join the thread (idempotent)."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()
