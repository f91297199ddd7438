"""How much of a sentence's wording one paragraph holds: the word-overlap test of support.

A sentence is supported by a paragraph when the paragraph holds at least a given share of the
sentence's distinct words, a Hebrew word counting in any of its analyzer forms (with or without a
prefix letter). The chat's strict-mode check (``ragbot.chat.grounding``) and the answers benchmark
(``ragbot.evaluation.answers``) read support this way; ``[n]`` citation marks are not words.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ragbot.text.analyzer import analyze

CITATION_MARK = re.compile(r"\[\s*\d{1,4}(?:\s*[,;]\s*\d{1,4})*\s*\]")


def paragraph_tokens(text: str) -> set[str]:
    """Every analyzer token of two letters or more in ``text`` (citation marks left out)."""
    return {t for t in analyze(CITATION_MARK.sub(" ", text)) if len(t) > 1}


def sentence_words(text: str) -> dict[str, set[str]]:
    """Each distinct word of ``text`` (two letters or more) and its analyzer forms."""
    out: dict[str, set[str]] = {}
    for word in CITATION_MARK.sub(" ", text).split():
        tokens = [t for t in analyze(word) if len(t) > 1]
        if tokens:
            out.setdefault(tokens[0], set()).update(tokens)
    return out


def support_share(words: dict[str, set[str]], tokens: set[str]) -> float:
    """The share of ``words`` (``sentence_words``) that ``tokens`` (``paragraph_tokens``) hold; 0 for none."""
    if not words:
        return 0.0
    return sum(bool(forms & tokens) for forms in words.values()) / len(words)


def best_support(sentence: str, paragraphs: Sequence[str]) -> tuple[float, int | None]:
    """The best share any paragraph holds of the sentence's words, and that paragraph's position."""
    words = sentence_words(sentence)
    best, where = 0.0, None
    for i, paragraph in enumerate(paragraphs):
        share = support_share(words, paragraph_tokens(paragraph))
        if share > best:
            best, where = share, i
    return best, where
