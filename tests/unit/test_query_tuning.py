"""e5's query side tuned on a wiki's questions: which lists the retriever searches with it, and the rule
still reading the untuned cosines (the real model fitted and loaded:
tests/integration/test_query_tuning_cli.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest
from pydantic import ValidationError
from support.fakes import HashEmbedder, MemoryStore

from ragbot.chat.answerability import dense_branches, evidence
from ragbot.chat.citations import confidences
from ragbot.definition import parse_definition
from ragbot.embedders.e5_torch import TorchE5
from ragbot.embedders.query_tuning import fit_biases, load_biases
from ragbot.errors import ConfigurationError
from ragbot.ports import StoredParagraph
from ragbot.retrieval import RetrievalDefaults, RetrievalEngine
from ragbot.retrieval.results import Branch
from ragbot.retrieval.tuned import query_model, with_tuned
from ragbot.schemas.retrieval import RetrieveRequest
from ragbot.settings.retrieval import RetrieverSettings

PAGES = {
    1: "דמי אבטלה משולמים למי שפוטר מעבודתו",
    2: "חופשת לידה נמשכת 26 שבועות",
    3: "unemployment benefits are paid to people who lost their job",
}


def _engine(
    tuned: dict[str, Any], defaults: RetrievalDefaults | None = None
) -> tuple[RetrievalEngine, MemoryStore]:
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
        store=store,
        embedders={"e5": e5},
        definition=definition,
        defaults=defaults or RetrievalDefaults(),
        tuned=tuned,
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


def test_the_configured_scripts_decide_which_questions_search_with_the_tuned_encoder() -> None:
    dense = Branch(name="content_e5_vectors", kind="dense", weight=2.0, model="e5", field="content")
    hebrew = with_tuned("כמה זמן נמשכת חופשת לידה?", [dense], {"e5"}, {"latin", "hebrew"})
    assert [(b.name, b.weight, b.tuned) for b in hebrew] == [
        ("content_e5_vectors", 0.0, False),
        ("content_e5_vectors@tuned", 2.0, True),
    ]
    assert with_tuned("How long is maternity leave?", [dense], {"e5"}, {"hebrew"}) == [dense]


async def test_the_engine_reads_the_scripts_from_its_defaults() -> None:
    tuned = HashEmbedder("e5-tuned", dimension=64)
    engine, _ = _engine({"e5": tuned}, RetrievalDefaults(tuning_scripts=("hebrew",)))
    hebrew = await engine.retrieve(RetrieveRequest(query="מי זכאי לדמי אבטלה"))
    assert tuned.query_calls == [["מי זכאי לדמי אבטלה"]]
    assert hebrew.debug.branches["content_e5_vectors@tuned"].weight == 1.0
    english = await engine.retrieve(RetrieveRequest(query="who gets unemployment benefits"))
    assert len(tuned.query_calls) == 1 and "content_e5_vectors@tuned" not in english.debug.branches


def test_the_scripts_setting_is_read_from_the_environment_and_an_unknown_script_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert RetrieverSettings(_env_file=None).query_tuning_scripts == ["latin"]
    monkeypatch.setenv("RAGBOT_RETRIEVER_QUERY_TUNING_SCRIPTS", '["latin", "hebrew"]')
    settings = RetrieverSettings(_env_file=None)
    assert RetrievalDefaults.from_settings(settings).tuning_scripts == ("latin", "hebrew")
    monkeypatch.setenv("RAGBOT_RETRIEVER_QUERY_TUNING_SCRIPTS", '["hebrew", "klingon"]')
    with pytest.raises(ValidationError, match=r"unknown script.*klingon.*use any of"):
        RetrieverSettings(_env_file=None)


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


def test_a_file_that_is_not_a_biases_file_is_refused_and_fitting_needs_pairs(tmp_path: Path) -> None:
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(ConfigurationError, match="cannot read"):
        load_biases(tmp_path / "bad.npz")
    with pytest.raises(ConfigurationError, match="no \\(question, page\\) pair"):
        fit_biases(cast(TorchE5, None), [], np.zeros((1, 384), dtype=np.float32), np.array([1]))
