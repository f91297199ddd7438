"""Bench support: the read Kol-Zchut question files dealt into folds, for benches that answer out of fold.

``read_folds`` loads the read files and e5, embeds every question once (for the question memories of
``question_memory.out_of_fold``) and readies the refit of e5's tuned query side on the other folds
(``query_tuning.py``'s five folds, ``fold_pairs``); ``bench/answers/memory_rule.py`` and
``bench/answers/memory_weight.py`` use it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.answers.query_tuning import E5, FOLDS, READ_FILES, fold_pairs

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Folds:
    """The read files dealt into ``FOLDS`` folds, with what refitting e5's tuned query side per fold
    needs (``query_tuning.py``'s folds) and every question's e5 vector for the memories."""

    files: dict[str, list[Any]]
    every: dict[str, list[Any]]  # each file's answerable questions, as ``remember`` takes them
    unanswered: dict[str, list[Any]]  # each file's unanswerable ones, remembered as not answered
    vectors: dict[str, np.ndarray]
    e5: Any
    start: dict[str, Any]
    encoder: Any  # the tuned encoder the engines use, refitted in place by ``refit``
    passages: Any
    page_ids: Any

    def held(self, fold: int) -> list[str]:
        """The files of one fold."""
        return list(self.files)[fold::FOLDS]

    def refit(self, fold: int) -> None:
        """Refit the tuned encoder on every other fold's answerable questions."""
        from ragbot.embedders.query_tuning import fit_biases

        self.e5._model.load_state_dict(self.start)
        fit_biases(self.e5, fold_pairs(self.files, set(self.held(fold))), self.passages, self.page_ids)


async def read_folds(index: Any, text_field: str) -> Folds:
    """Load the read files and e5, embed every question, and ready the per-fold refit."""
    from ragbot.embedders.query_tuning import TunedE5Queries, shipped_e5
    from ragbot.evaluation.answers import DEFAULT_PAGES, load_questions
    from ragbot.evaluation.query_tuning import passage_matrix
    from ragbot.evaluation.question_memory import answered, unanswered

    files = {path: load_questions(ROOT / path) for path in sorted(READ_FILES)}
    texts = sorted({q.question for qs in files.values() for q in qs})
    e5 = shipped_e5()
    probe = await index.engine_with({})
    passages, page_ids = await passage_matrix(probe.engine, e5, DEFAULT_PAGES, text_field)
    return Folds(
        files=files,
        every={path: answered([ROOT / path]) for path in files},
        unanswered={path: unanswered([ROOT / path]) for path in files},
        vectors=dict(zip(texts, index.queries[E5].embed_queries(texts), strict=True)),
        e5=e5,
        start={k: v.clone() for k, v in e5._model.state_dict().items()},
        encoder=TunedE5Queries.of(E5, e5),
        passages=passages,
        page_ids=page_ids,
    )
