"""The paragraph token budget: every model's own token count, its fixed overhead and the limit."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ragbot.errors import ConfigurationError

TokenCounter = Callable[[str], int]

# No paragraph longer than this many characters per token of budget: a guard against text that a
# tokenizer maps to a handful of [UNK] tokens (a megabyte without spaces is one "word" to BERT).
MAX_CHARS_PER_TOKEN = 24


def _count_words(text: str) -> int:
    return len(text.split())


class TokenBudget:
    """Per-counter overheads and the token limit; sizes are token counts without the overhead.

    ``reserved`` is room kept in every paragraph for a repeated table header.
    """

    def __init__(
        self,
        counters: Sequence[TokenCounter],
        max_tokens: int,
        *,
        overheads: tuple[int, ...] | None = None,
        reserved: tuple[int, ...] | None = None,
        max_chars: int | None = None,
    ) -> None:
        self.counters: tuple[TokenCounter, ...] = tuple(counters) or (_count_words,)
        self.limit = max_tokens
        self.max_chars = max_tokens * MAX_CHARS_PER_TOKEN if max_chars is None else max_chars
        self.overheads = (
            tuple(max(0, 2 * c("a") - c("a a")) for c in self.counters) if overheads is None else overheads
        )
        self.reserved = reserved or tuple(0 for _ in self.counters)
        self.room = min(max_tokens - o - r for o, r in zip(self.overheads, self.reserved, strict=True))
        if self.room <= 0 and reserved is None:
            raise ConfigurationError(
                f"max_tokens {max_tokens} leaves no room for text "
                f"(the models need {max(self.overheads)} special tokens)"
            )

    def sizes(self, text: str) -> tuple[int, ...]:
        """Tokens of ``text`` per counter, without the fixed overhead."""
        return tuple(max(0, c(text) - o) for c, o in zip(self.counters, self.overheads, strict=True))

    def fits(self, sizes: Sequence[int], chars: int) -> bool:
        """True when text of these sizes stays within the limit for every counter."""
        if chars > self.max_chars:
            return False
        return all(
            o + r + s <= self.limit for o, r, s in zip(self.overheads, self.reserved, sizes, strict=True)
        )

    def text_fits(self, text: str) -> bool:
        """Exact check of a whole text, counted afresh."""
        if len(text) > self.max_chars:
            return False
        return all(c(text) + r <= self.limit for c, r in zip(self.counters, self.reserved, strict=True))

    def keeping(self, sizes: Sequence[int], chars: int) -> TokenBudget:
        """The same counters with room kept for text repeated in every paragraph (a table header)."""
        return TokenBudget(
            self.counters,
            self.limit,
            overheads=self.overheads,
            reserved=tuple(r + s for r, s in zip(self.reserved, sizes, strict=True)),
            max_chars=self.max_chars - chars,
        )
