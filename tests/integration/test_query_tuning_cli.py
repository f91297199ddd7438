"""Tuning e5's query side end to end: real pages indexed with the real models, e5's biases fitted on a
question file (what ``ragbot tune-queries`` runs) and written; the eval index and the retriever's
composition root load the file, and an English question then searches e5's vectors with it (the
untuned list kept for the rule)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.question_files import FIRST_PAGES, first_pages, question_file

from ragbot.cli.main import main
from ragbot.embedders.query_tuning import (
    TunedE5Queries,
    TuningOptions,
    apply_biases,
    load_biases,
    save_biases,
    shipped_e5,
)
from ragbot.errors import ConfigurationError
from ragbot.evaluation.query_tuning import tune
from ragbot.evaluation.sample_index import SampleIndex
from ragbot.schemas.retrieval import RetrieveRequest
from ragbot.settings import ModelSettings, RetrieverSettings, StoreSettings
from ragbot_retriever.app import build_resources

E5 = "multilingual-e5-small"
GOLD = FIRST_PAGES
QUESTIONS = [
    ("How do I get an income tax refund?", 100005),
    ("Do teenagers who work get tax credit points?", 100028),
    ("Are there extra tax credit points for women?", 100029),
    ("What is the weather in Haifa?", None),
]


def _sample(tmp_path: Path) -> tuple[Path, Path]:
    """The first three sample pages and four English questions about them."""
    return first_pages(tmp_path), question_file(tmp_path, QUESTIONS)


async def test_tuning_writes_a_file_the_retriever_searches_english_questions_with(tmp_path: Path) -> None:
    pages, questions = _sample(tmp_path)
    out = tmp_path / "e5-queries.npz"
    index = await SampleIndex.build([pages], work_dir=tmp_path)
    try:
        # what ``ragbot tune-queries`` runs, over an index this test reads afterwards
        fitted = await tune(
            [questions], [pages], text_field="content", options=TuningOptions(epochs=10), index=index
        )
        save_biases(out, *fitted)
        await _check_the_file_and_the_engine(index, out)
    finally:
        await index.close()

    async with build_resources(
        retriever_settings=RetrieverSettings(query_tuning_path=out),
        store_settings=StoreSettings(backend="embedded", embedded_path=tmp_path / "retriever.sqlite3"),
        model_settings=ModelSettings(query_runtime="torch"),  # no ONNX export here
    ) as resources:
        loaded = resources.engine.tuned[E5]
        assert isinstance(loaded, TunedE5Queries) and loaded.dimension == 384


async def _check_the_file_and_the_engine(index: SampleIndex, out: Path) -> None:
    biases, about = load_biases(out)
    assert about["pairs"] == 3 and about["questions"] == ["questions.json"] and about["paragraphs"] > 3
    assert all(name.endswith("bias") for name in biases)
    assert 30_000 < sum(b.size for b in biases.values()) < 60_000  # BitFit: the biases, not the weights
    encoder = TunedE5Queries(E5, out)
    encoder.warm_up()
    shipped = shipped_e5()
    with pytest.raises(ConfigurationError, match="does not fit"):
        apply_biases(shipped, {next(iter(biases)): np.zeros(3, dtype=np.float32)})

    index.tuned[out] = encoder  # what engine_with would load from the file
    engine = (await index.engine_with({"query_tuning_path": out})).engine
    english = await engine.retrieve(RetrieveRequest(query="tax refund for employees"))
    twins = {n: b for n, b in english.debug.branches.items() if b.tuned}
    assert twins and all(n.endswith("@tuned") and b.model == E5 for n, b in twins.items())
    assert all(english.debug.branches[n.removesuffix("@tuned")].weight == 0.0 for n in twins)
    hebrew = await engine.retrieve(RetrieveRequest(query="החזר מס הכנסה לשכירים"))
    assert not any(b.tuned for b in hebrew.debug.branches.values())

    # what the fit maximises: each training question's softmax weight (temperature 0.02) on its gold
    # page's paragraphs among every indexed paragraph, higher with the file's encoder than shipped
    documents = {p: await engine.page_documents(p) for p in GOLD}
    owners = [p for p in GOLD for _ in documents[p]]
    passages = shipped.encode([str(d["content"]) for p in GOLD for d in documents[p]], is_query=False)
    asked = [(q, gold) for q, gold in QUESTIONS if gold is not None]
    gold = np.array([[owner == g for owner in owners] for _, g in asked])

    def gold_weight(vectors: np.ndarray[Any, Any]) -> float:
        logits = vectors @ passages.T / 0.02
        weights = np.exp(logits - logits.max(axis=1, keepdims=True))
        return float(np.mean((weights * gold).sum(axis=1) / weights.sum(axis=1)))

    questions = [q for q, _ in asked]
    assert gold_weight(encoder.embed_queries(questions)) > gold_weight(
        shipped.encode(questions, is_query=True)
    )


def test_tune_queries_refuses_a_missing_question_file(tmp_path: Path) -> None:
    assert (
        main(["tune-queries", "--questions", str(tmp_path / "none.json"), "--out", str(tmp_path / "x")]) == 1
    )
