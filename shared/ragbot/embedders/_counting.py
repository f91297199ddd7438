"""Fast token counting for tokenizers that split on whitespace before they split words.

WordPiece (BERT, MiniLM) and SentencePiece-unigram (XLM-R, e5) never let a token cross a whitespace
boundary, so a text's length is the fixed overhead (special tokens, prefix) plus the sum of its
words' lengths. Counting word by word with a cache is much faster than tokenizing whole paragraphs
(Hebrew pages repeat their words heavily; figures in docs/benchmarks.md, "Design figures"). On the 39
Kol-Zchut pages it is exact for MiniLM; for e5 exact except words glued to a U+200F mark, where it
counts one token more (a safe over-estimate).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

# Pre-tokenizers (tokenizers library class names) that split on whitespace first: safe for word sums.
WHITESPACE_PRE_TOKENIZERS = frozenset({"BertPreTokenizer", "Whitespace", "WhitespaceSplit", "Metaspace"})


class WordSumCounter:
    """``count(text)`` as overhead + the sum of cached per-word counts; exact counts for blank text."""

    def __init__(self, count_exact: Callable[[str], int], *, max_chars: int = 8_000_000) -> None:
        self._count_exact = count_exact
        self._max_chars = max_chars
        self._chars = 0
        self._words: dict[str, int] = {}
        self._lock = threading.Lock()
        # Tokens every input pays once (specials and prefix): "a" costs one token in every tokenizer
        # we accept, so count("a a") - count("a") is one word and the rest of count("a") is overhead.
        one = count_exact("a")
        self.overhead = max(0, 2 * one - count_exact("a a"))
        # SentencePiece turns trailing whitespace into one more token ("▁"); WordPiece drops it.
        self.trailing = max(0, count_exact("a ") - one)

    def __call__(self, text: str) -> int:
        words = text.split()
        if not words:
            return self._count_exact(text)
        cache = self._words
        total = self.overhead
        missing: list[str] = []
        for word in words:
            n = cache.get(word)
            if n is None:
                missing.append(word)
            else:
                total += n
        if missing:
            total += self._count_missing(missing)
        if text[-1].isspace():
            total += self.trailing
        return total

    def _count_missing(self, words: list[str]) -> int:
        total = 0
        fresh: dict[str, int] = {}
        for word in words:
            n = fresh.get(word)
            if n is None:
                n = fresh[word] = max(0, self._count_exact(word) - self.overhead)
            total += n
        added = sum(len(w) for w in fresh)
        if added > self._max_chars:
            return total
        with self._lock:
            if self._chars + added > self._max_chars:
                self._words.clear()  # bounded memory (a few tens of MB); refills in one paragraph
                self._chars = 0
            self._words.update(fresh)
            self._chars += added
        return total

    def clear(self) -> None:
        """Forget cached words (when the model is closed)."""
        with self._lock:
            self._words.clear()
            self._chars = 0


def tokenizer_counter(tokenizer: Any, prefix: str) -> Callable[[str], int]:
    """Tokens fed for ``prefix + text`` (specials once, no truncation) by a ``tokenizers.Tokenizer``
    (a private copy: its truncation and padding are switched off), word by word where that is exact."""
    from tokenizers import Tokenizer

    private = Tokenizer.from_str(tokenizer.to_str())
    private.no_truncation()
    private.no_padding()

    def count_exact(text: str) -> int:
        return len(private.encode(prefix + text, add_special_tokens=True).ids)

    splits_on_space = type(private.pre_tokenizer).__name__ in WHITESPACE_PRE_TOKENIZERS
    if splits_on_space and (not prefix or prefix[-1].isspace()):
        return WordSumCounter(count_exact)
    return count_exact
