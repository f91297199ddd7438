"""How much of a sentence's wording one paragraph holds: the word-overlap test of support.

A sentence is supported by a paragraph when the paragraph holds at least a given share of the
sentence's distinct words, a Hebrew word counting in any of its analyzer forms (with or without a
prefix letter), and at least a given share of the sentence's neighbouring word pairs in the same
order, a few words apart at most (``order_share``): a sentence made of a paragraph's words shuffled
holds the first but not the second. The chat's strict-mode check (``ragbot.chat.grounding``) and
the answers benchmark (``ragbot.evaluation.answers``) read support this way; ``[n]`` citation marks
are not words.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from itertools import pairwise
from typing import Final

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


# A sentence's word pair is held in order when the paragraph has its second word at most this many
# words after its first (so a paraphrase may drop or add a word or two between them).
PAIR_WINDOW: Final = 3


def word_forms(text: str) -> list[set[str]]:
    """The analyzer forms (two letters or more) of each word of ``text`` in order, words with none
    (stop words, marks) left out."""
    out: list[set[str]] = []
    for word in CITATION_MARK.sub(" ", text).split():
        forms = {t for t in analyze(word) if len(t) > 1}
        if forms:
            out.append(forms)
    return out


def paragraph_pairs(text: str) -> set[tuple[str, str]]:
    """Every (form, later form) pair of ``text``'s words at most ``PAIR_WINDOW`` words apart."""
    forms = word_forms(text)
    pairs: set[tuple[str, str]] = set()
    for i, first in enumerate(forms):
        for later in forms[i + 1 : i + 1 + PAIR_WINDOW]:
            pairs.update((a, b) for a in first for b in later)
    return pairs


def order_share(sequence: Sequence[set[str]], pairs: set[tuple[str, str]]) -> float:
    """The share of the neighbouring word pairs of ``sequence`` (``word_forms`` of a sentence) that
    ``pairs`` (``paragraph_pairs``) holds in that order; 1 for a sentence of fewer than two words."""
    if len(sequence) < 2:
        return 1.0
    held = sum(any((a, b) in pairs for a in first for b in second) for first, second in pairwise(sequence))
    return held / (len(sequence) - 1)


def best_support(sentence: str, paragraphs: Sequence[str]) -> tuple[float, int | None]:
    """The best share any paragraph holds of the sentence's words, and that paragraph's position."""
    words = sentence_words(sentence)
    best, where = 0.0, None
    for i, paragraph in enumerate(paragraphs):
        share = support_share(words, paragraph_tokens(paragraph))
        if share > best:
            best, where = share, i
    return best, where


def supported_by(sentence: str, paragraphs: Sequence[str], min_share: float, min_order: float) -> list[int]:
    """The positions of the paragraphs that hold at least ``min_share`` of the sentence's words and
    ``min_order`` of its word pairs in order."""
    words, sequence = sentence_words(sentence), word_forms(sentence)
    return [
        i
        for i, paragraph in enumerate(paragraphs)
        if support_share(words, paragraph_tokens(paragraph)) >= min_share
        and order_share(sequence, paragraph_pairs(paragraph)) >= min_order
    ]
