"""Degenerate answers: a detector for an answer that repeats itself, and the mark of one that ran out.

Small models (the embedded 135M one above all) fall into loops: one word again and again, or the
same phrase or sentence over and over, until the token cap cuts them mid-word. ``LoopDetector`` reads
the answer as it streams and says when its tail is the same unit (a run of up to ``max_unit_words``
words, or a block of up to ``max_unit_chars`` characters for text without spaces) repeated at least
``min_repeats`` times; ``kept`` is then the answer with the unit once. An answer the token cap cut
ends with ``CUT_MARK``, streamed as its last piece, so it is never cut mid-word without saying so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["CUT_MARK", "LoopDetector"]

# What ends an answer the token cap cut (streamed as its last piece, so the text shown says so).
CUT_MARK = " …"

_WORD = re.compile(r"\S+")


@dataclass(slots=True)
class LoopDetector:
    """Fed the answer piece by piece; ``feed`` returns True once the tail is a loop."""

    min_repeats: int = 4
    max_unit_words: int = 12
    max_unit_chars: int = 40
    min_loop_chars: int = 24
    text: str = ""
    loop_start: int | None = field(default=None)

    def feed(self, piece: str) -> bool:
        """Add ``piece``; True when the answer now ends in a loop (``kept`` drops the repeats)."""
        self.text += piece
        if self.loop_start is None:
            self.loop_start = self._word_loop()
            if self.loop_start is None:
                self.loop_start = self._char_loop()
        return self.loop_start is not None

    @property
    def looping(self) -> bool:
        """Whether a loop was found."""
        return self.loop_start is not None

    @property
    def kept(self) -> str:
        """The answer up to and including the loop's first unit (the whole answer when no loop)."""
        return self.text if self.loop_start is None else self.text[: self.loop_start].rstrip()

    def _word_loop(self) -> int | None:
        """Where the repeats begin when the last words are one unit of words repeated."""
        spans = [(m.start(), m.end()) for m in _WORD.finditer(self.text[-4000:])]
        if spans and not self.text[-1:].isspace():
            spans.pop()  # the last word may still be arriving
        offset = max(0, len(self.text) - 4000)
        words = [self.text[offset + a : offset + b].casefold().strip(".,;:!?\"'()") for a, b in spans]
        for size in range(1, self.max_unit_words + 1):
            need = size * self.min_repeats
            if len(words) < need:
                break
            unit = words[-size:]
            if not any(unit):
                continue
            repeats = 1
            while (
                len(words) >= (repeats + 1) * size and words[-(repeats + 1) * size : -repeats * size] == unit
            ):
                repeats += 1
            chars = sum(len(w) for w in unit) * repeats
            if repeats >= self.min_repeats and chars >= self.min_loop_chars:
                first_repeat = len(words) - (repeats - 1) * size  # the second copy's first word
                return offset + spans[first_repeat][0]
        return None

    def _char_loop(self) -> int | None:
        """Where the repeats begin when the text ends in one block of characters repeated."""
        tail = self.text[-(self.max_unit_chars * (self.min_repeats + 1)) :]
        for size in range(2, self.max_unit_chars + 1):
            if size * self.min_repeats > len(tail) or size * self.min_repeats < self.min_loop_chars:
                continue
            unit = tail[-size:]
            if not unit.strip():
                continue
            if all(tail[-(i + 1) * size : len(tail) - i * size] == unit for i in range(self.min_repeats)):
                return len(self.text) - (self.min_repeats - 1) * size
        return None
