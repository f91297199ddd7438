"""Build a question memory (``ragbot.retrieval.memory``) from the wiki's question files and one model.

Every answerable question of the files (eval-answers' shape) is remembered once, with its gold pages,
as the retriever's embedder of that model embeds a question; every unanswerable one (no gold page) is
remembered as a question the wiki did not answer.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from ragbot.errors import ValidationFailed
from ragbot.evaluation.answers import AnswerQuestion, load_questions
from ragbot.ports import Embedder
from ragbot.retrieval.memory import DEFAULT_NEIGHBOURS, DEFAULT_TEMPERATURE, QuestionMemory

BATCH = 64


def question_key(text: str) -> str:
    """What two question texts share when they are the same question (spaces and case aside)."""
    return " ".join(text.split()).casefold()


def distinct(questions: Iterable[AnswerQuestion], skip: Iterable[str] = ()) -> list[AnswerQuestion]:
    """``questions`` each text once (the first), none whose ``question_key`` is in ``skip``."""
    seen = set(skip)
    out: list[AnswerQuestion] = []
    for question in questions:
        key = question_key(question.question)
        if key not in seen:
            seen.add(key)
            out.append(question)
    return out


def answered(paths: Iterable[Path]) -> list[AnswerQuestion]:
    """The answerable questions of ``paths``, each text once (its first file's gold pages)."""
    return distinct(q for path in paths for q in load_questions(path) if q.gold_page_id is not None)


def unanswered(paths: Iterable[Path]) -> list[AnswerQuestion]:
    """The unanswerable questions of ``paths`` (no gold page), each text once and none that a file
    answers."""
    questions = [q for path in paths for q in load_questions(path)]
    answers = (question_key(q.question) for q in questions if q.gold_page_id is not None)
    return distinct((q for q in questions if q.gold_page_id is None), skip=answers)


def _embed(embedder: Embedder, texts: Sequence[str]) -> NDArray[np.float32]:
    """``texts`` embedded as queries, ``BATCH`` at a time (at least one text)."""
    rows = [embedder.embed_queries(list(texts[i : i + BATCH])) for i in range(0, len(texts), BATCH)]
    return np.asarray(np.concatenate(rows), dtype=np.float32)


def build_memory(
    questions: Sequence[AnswerQuestion],
    *,
    model: str,
    embedder: Embedder,
    neighbours: int = DEFAULT_NEIGHBOURS,
    temperature: float = DEFAULT_TEMPERATURE,
    about: dict[str, object] | None = None,
    not_answered: Sequence[AnswerQuestion] = (),
) -> QuestionMemory:
    """Embed ``questions`` with ``embedder`` (``model``'s) and remember each with its gold pages, and
    ``not_answered`` as questions the wiki did not answer."""
    if not questions:
        raise ValidationFailed("no answerable question to remember", field="questions")
    t0 = time.perf_counter()
    vectors = _embed(embedder, [q.question for q in questions])
    memory = remember(
        questions,
        vectors,
        model=model,
        neighbours=neighbours,
        temperature=temperature,
        not_answered=not_answered,
        not_answered_vectors=_embed(embedder, [q.question for q in not_answered]) if not_answered else None,
    )
    memory.about = {
        **(about or {}),
        "questions": len(questions),
        "languages": sorted({q.language for q in questions}),
        "pages": len({p for q in questions for p in q.gold_pages}),
        "unanswered": len(not_answered),
        "seconds": round(time.perf_counter() - t0, 1),
    }
    return memory


def remember(
    questions: Sequence[AnswerQuestion],
    vectors: NDArray[np.float32],
    *,
    model: str,
    neighbours: int = DEFAULT_NEIGHBOURS,
    temperature: float = DEFAULT_TEMPERATURE,
    not_answered: Sequence[AnswerQuestion] = (),
    not_answered_vectors: NDArray[np.float32] | None = None,
) -> QuestionMemory:
    """A memory of ``questions`` with their gold pages, ``vectors`` their ``model`` vectors, row for row;
    and of ``not_answered`` (with ``not_answered_vectors``) as questions the wiki did not answer."""
    return QuestionMemory(
        model=model,
        questions=[q.question for q in questions],
        pages=[sorted(q.gold_pages) for q in questions],
        vectors=vectors,
        neighbours=neighbours,
        temperature=temperature,
        unanswered=[q.question for q in not_answered],
        unanswered_vectors=not_answered_vectors,
    )
