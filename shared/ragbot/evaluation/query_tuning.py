"""Tune e5's query side on a wiki's question files over its pages (what ``ragbot tune-queries`` runs).

The pages are indexed as ``make run`` indexes them (``ragbot.evaluation.sample_index``), so the
paragraphs the questions are tuned against are the index's own; every answerable question of the
files (a gold page) is a training pair (``ragbot.embedders.query_tuning.fit_biases``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from ragbot.embedders.e5_torch import TorchE5
from ragbot.embedders.query_tuning import TuningOptions, fit_biases, shipped_e5
from ragbot.evaluation.answers import load_questions
from ragbot.evaluation.sample_index import SampleIndex, load_pages
from ragbot.retrieval import RetrievalEngine


async def passage_matrix(
    engine: RetrievalEngine, e5: TorchE5, pages_paths: Sequence[Path], text_field: str
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """The e5 passage vectors of every indexed paragraph of the pages, and each one's page id."""
    texts: list[str] = []
    pages: list[int] = []
    for page in sorted({int(r["page_id"]) for path in pages_paths for r in load_pages(path)}):
        for doc in await engine.page_documents(page):
            texts.append(str(doc.get(text_field) or ""))
            pages.append(page)
    return e5.encode(texts, is_query=False), np.array(pages)


async def tune(
    questions_paths: Sequence[Path],
    pages_paths: Sequence[Path],
    *,
    text_field: str,
    options: TuningOptions | None = None,
    index: SampleIndex | None = None,
) -> tuple[dict[str, np.ndarray[Any, Any]], dict[str, Any]]:
    """The fitted biases and what they were fitted on (the file's ``about``); ``index``: the pages
    already indexed (else they are indexed here, and the index closed after)."""
    started = time.perf_counter()
    pairs = [
        (q.question, q.gold_pages)
        for path in questions_paths
        for q in load_questions(path)
        if q.gold_page_id is not None
    ]
    own = index is None
    built = index or await SampleIndex.build(list(pages_paths))
    try:
        engine = (await built.engine_with({"translate_queries_to": None})).engine  # no lexicon needed
        e5 = shipped_e5()
        passages, pages = await passage_matrix(engine, e5, pages_paths, text_field)
    finally:
        if own:
            await built.close()
    o = options or TuningOptions()
    biases = fit_biases(e5, pairs, passages, pages, o)
    about = {
        "model": "multilingual-e5-small",
        "questions": [p.name for p in questions_paths],
        "pages": [p.name for p in pages_paths],
        "pairs": len(pairs),
        "paragraphs": len(pages),
        "options": asdict(o),
        "seconds": round(time.perf_counter() - started, 1),
    }
    return biases, about
