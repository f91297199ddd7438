"""Handing freed memory back to the operating system (glibc ``malloc_trim``; a no-op elsewhere)."""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable

__all__ = ["release_memory"]


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        trim: Callable[[int], int] = ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc (macOS, musl): nothing to do
        return None
    return trim


def release_memory() -> None:
    """Give memory Python and torch freed back to the OS (glibc ``malloc_trim``; a no-op elsewhere)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
