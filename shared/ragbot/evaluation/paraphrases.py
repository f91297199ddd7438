"""Near-paraphrases: questions of a new question set whose wording repeats a question already read.

A blind set written after many others repeats earlier questions in other words, and such a question
flatters anything fitted on the earlier ones (the question memory above all). Two questions' overlap is
the Jaccard share of their distinct words (two letters or more), a Hebrew word matching another when
their analyzer forms meet, with or without a prefix letter (``ragbot.text.support.sentence_words``).
``ragbot eval-answers --unlike FILES`` leaves out every question whose overlap with a question of those
files reaches ``--unlike-overlap``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ragbot.text.support import sentence_words

DEFAULT_OVERLAP = 0.5


@dataclass(frozen=True, slots=True)
class Words:
    """A question's distinct words (each with its analyzer forms) and every form of them together."""

    forms: tuple[frozenset[str], ...]
    every: frozenset[str]


def words(text: str) -> Words:
    """A question's distinct words and their analyzer forms."""
    forms = tuple(frozenset(f) for f in sentence_words(text).values())
    return Words(forms, frozenset().union(*forms))


def overlap(a: Words, b: Words) -> float:
    """The Jaccard share of two questions' words (``a``'s words with a form among ``b``'s count as
    shared); 0 when both have none."""
    shared = min(sum(bool(f & b.every) for f in a.forms), len(b.forms))
    union = len(a.forms) + len(b.forms) - shared
    return shared / union if union else 0.0


@dataclass(frozen=True, slots=True)
class Nearest:
    """A new question's closest earlier question and their overlap."""

    question: str
    earlier: str
    overlap: float


def nearest(questions: Sequence[str], earlier: Iterable[str]) -> list[Nearest]:
    """For each of ``questions``, its earlier question with the highest overlap (ties: the first)."""
    known = [(text, words(text)) for text in dict.fromkeys(earlier)]
    out: list[Nearest] = []
    for text in questions:
        mine = words(text)
        best, best_overlap = "", 0.0
        for other, theirs in known:
            share = overlap(mine, theirs)
            if share > best_overlap:
                best, best_overlap = other, share
        out.append(Nearest(text, best, best_overlap))
    return out


def novel(questions: Sequence[str], earlier: Iterable[str], threshold: float = DEFAULT_OVERLAP) -> list[bool]:
    """Whether each of ``questions`` stays below ``threshold`` overlap with every earlier question."""
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"overlap threshold must be in (0, 1], got {threshold}")
    return [n.overlap < threshold for n in nearest(questions, earlier)]
