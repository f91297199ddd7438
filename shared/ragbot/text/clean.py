"""Invisible characters that can only hurt removed from text a user or a page sends: NUL and other C0/C1
controls (tab, newline and carriage return stay) and the bidi embedding, override and isolate controls
(U+202A..U+202E, U+2066..U+2069) that reorder how text is displayed ("Trojan Source"). The marks that
Hebrew text needs (U+200E LRM, U+200F RLM, U+061C ALM) are kept."""

from __future__ import annotations

import re

__all__ = ["UNSAFE_CHARACTERS", "strip_unsafe"]

UNSAFE_CHARACTERS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def strip_unsafe(text: str) -> str:
    """``text`` without control and bidi-override characters (unchanged, and not copied, when it has none)."""
    return UNSAFE_CHARACTERS.sub("", text) if UNSAFE_CHARACTERS.search(text) else text
