"""e5's query side tuned on a wiki's questions: which lists the retriever searches with it, the rule still
reading the untuned cosines, and the file ``ragbot tune-queries`` writes (the real e5 fitted and loaded)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.fakes import HashEmbedder, MemoryStore

from ragbot.chat.answerability import dense_branches, evidence
from ragbot.chat.citations import confidences
from ragbot.definition import parse_definition
from ragbot.embedders.query_tuning import (
    TunedE5Queries,
    apply_biases,
    fit_biases,
    load_biases,
    save_biases,
    shipped_e5,
)
from ragbot.errors import ConfigurationError
from ragbot.ports import StoredParagraph
from ragbot.retrieval import RetrievalDefaults, RetrievalEngine
from ragbot.retrieval.results import Branch
from ragbot.retrieval.tuned import query_model, with_tuned
from ragbot.schemas.retrieval import RetrieveRequest

PAGES = {
    1: "דמי אבטלה משולמים למי שפוטר מעבודתו",
    2: "חופשת לידה נמשכת 26 שבועות",
    3: "unemployment benefits are paid to people who lost their job",
}


def _engine(tuned: dict[str, Any]) -> tuple[RetrievalEngine, MemoryStore]:
    definition = parse_definition(
        {
            "identifier_field": "page_id",
            "saved_fields": {"title": "text", "page_id": "integer", "content": "text"},
            "field_for_llm": "content",
            "models": {"e5": "content"},
        }
    )
    e5 = HashEmbedder("e5", dimension=64)
    paragraphs = [
        StoredParagraph(
            f"{page}-1-0",
            page,
            1,
            0,
            {"title": str(page), "content": text, "page_id": page},
            {"content_e5_vectors": e5.embed_passages([text])[0]},
        )
        for page, text in PAGES.items()
    ]
    store = MemoryStore(paragraphs)
    engine = RetrievalEngine(
        store=store, embedders={"e5": e5}, definition=definition, defaults=RetrievalDefaults(), tuned=tuned
    )
    return engine, store


def test_only_a_latin_script_question_doubles_a_tuned_model_s_dense_branches() -> None:
    dense = Branch(name="content_e5_vectors", kind="dense", weight=2.0, model="e5", field="content")
    other = Branch(name="content_m_vectors", kind="dense", weight=1.0, model="m", field="content")
    bm25 = Branch(name="bm25", kind="bm25", weight=1.0)
    doubled = with_tuned("How long is maternity leave?", [dense, other, bm25], {"e5"})
    assert [(b.name, b.weight, b.tuned) for b in doubled] == [
        ("content_e5_vectors", 0.0, False),
        ("content_e5_vectors@tuned", 2.0, True),
        ("content_m_vectors", 1.0, False),
        ("bm25", 1.0, False),
    ]
    assert [query_model(b) for b in doubled[:2]] == ["e5", "e5@tuned"]
    assert with_tuned("כמה זמן נמשכת חופשת לידה?", [dense, bm25], {"e5"}) == [dense, bm25]
    assert with_tuned("How long is maternity leave?", [dense], set()) == [dense]


async def test_the_tuned_encoder_embeds_an_english_question_for_the_twin_list_of_the_same_vectors() -> None:
    tuned = HashEmbedder("e5-tuned", dimension=64)
    engine, store = _engine({"e5": tuned})
    response = await engine.retrieve(RetrieveRequest(query="who gets unemployment benefits"))
    assert tuned.query_calls == [["who gets unemployment benefits"]]
    assert store.calls.count("knn:content_e5_vectors") == 2  # the same stored field, two query vectors
    branches = response.debug.branches
    assert branches["content_e5_vectors"].weight == 0.0 and not branches["content_e5_vectors"].tuned
    assert branches["content_e5_vectors@tuned"].tuned and branches["content_e5_vectors@tuned"].weight == 1.0

    hebrew = await engine.retrieve(RetrieveRequest(query="מי זכאי לדמי אבטלה"))
    assert len(tuned.query_calls) == 1 and "content_e5_vectors@tuned" not in hebrew.debug.branches


def test_the_rule_and_the_confidences_read_the_untuned_cosines_only() -> None:
    debug: dict[str, Any] = {
        "branches": {
            "e5": {"kind": "dense", "weight": 0.0},
            "e5@tuned": {"kind": "dense", "weight": 1.0, "tuned": True},
            "bm25": {"kind": "bm25"},
        },
        "fused": [
            {"_id": "1-1-0", "page_id": 1, "score": 0.1, "raw_scores": {"e5": 1.80, "e5@tuned": 1.97}},
            {"_id": "2-1-0", "page_id": 2, "score": 0.05, "raw_scores": {"e5": 1.78, "bm25": 3.0}},
        ],
    }
    ev = evidence(question="who gets unemployment benefits", debug=debug, paragraphs=["a", "b"])
    assert ev is not None and round(ev.dense_top, 3) == 0.8 and round(ev.dense_gap, 3) == 0.02
    assert dense_branches(debug) == {"e5"}
    assert {k: round(v, 3) for k, v in confidences(debug).items()} == {"1-1-0": 0.8, "2-1-0": 0.78}


@pytest.fixture(scope="module")
def fitted() -> tuple[Any, dict[str, np.ndarray[Any, Any]], np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """The real multilingual-e5-small, its biases fitted on three English questions over Hebrew pages."""
    e5 = shipped_e5()
    texts = list(PAGES.values())
    passages, pages = e5.encode(texts, is_query=False), np.array(list(PAGES))
    pairs = [
        ("How many weeks is maternity leave?", {2}),
        ("maternity leave length", {2}),
        ("How long can a new mother stay home from work?", {2}),
    ]
    before = e5.encode(["How long is maternity leave?"], is_query=True)
    biases = fit_biases(e5, pairs * 4, passages, pages)
    return e5, biases, passages, before


def test_fitting_moves_an_unseen_question_towards_its_page(fitted: Any) -> None:
    e5, biases, passages, before = fitted
    after = e5.encode(["How long is maternity leave?"], is_query=True)
    assert float((after @ passages.T)[0, 1]) > float((before @ passages.T)[0, 1])
    assert all(name.endswith("bias") for name in biases)
    assert 30_000 < sum(b.size for b in biases.values()) < 60_000  # BitFit: the biases, not the weights


def test_the_file_round_trips_into_a_fresh_model_and_a_wrong_one_is_refused(
    fitted: Any, tmp_path: Path
) -> None:
    e5, biases, _, _ = fitted
    path = tmp_path / "e5-queries.npz"
    save_biases(path, biases, {"pairs": 12})
    loaded, about = load_biases(path)
    assert about == {"pairs": 12} and set(loaded) == set(biases)
    encoder = TunedE5Queries("multilingual-e5-small", path)
    encoder.warm_up()
    question = ["How long is maternity leave?"]
    assert np.allclose(encoder.embed_queries(question), e5.encode(question, is_query=True), atol=1e-5)
    assert encoder.dimension == 384
    name = next(iter(biases))
    with pytest.raises(ConfigurationError, match="does not fit"):
        apply_biases(e5, {name: np.zeros(3, dtype=np.float32)})
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(ConfigurationError, match="cannot read"):
        load_biases(tmp_path / "bad.npz")
    with pytest.raises(ConfigurationError, match="no \\(question, page\\) pair"):
        fit_biases(e5, [], np.zeros((1, 384), dtype=np.float32), np.array([1]))
