"""The reranker adapter's lifecycle and the training pieces that need no model (pairs, BM25 mining).

Training a real cross-encoder and scoring with it run in tests/integration/test_eval_cli.py.
"""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

import pytest

from ragbot.errors import ConfigurationError, ValidationFailed
from ragbot.ports import Reranker
from ragbot.rerankers import CrossEncoderReranker, RerankError, build_reranker
from ragbot.rerankers.training import (
    BM25Index,
    TrainingConfig,
    TrainingPair,
    _groups,
    load_pairs,
    mine_negative_pools,
    parse_pair,
    write_pairs,
)

CORPUS = [
    "The mitochondria is the powerhouse of the cell and makes ATP.",
    "Insulin regulates blood glucose levels in the body.",
    "Vitamin D deficiency is common in northern countries during winter.",
    "The cell membrane controls what enters and leaves the cell.",
    "Glucose is stored in the liver as glycogen.",
    "Winter sunlight is too weak for the skin to make vitamin D.",
]


# -- the adapter ----------------------------------------------------------------------------------


def test_construction_loads_nothing(tmp_path: Path) -> None:
    reranker = CrossEncoderReranker(tmp_path / "model")
    assert not reranker.loaded
    assert isinstance(reranker, Reranker)
    assert reranker.name == "model"


def test_score_before_warm_up_is_refused(tmp_path: Path) -> None:
    with pytest.raises(RerankError, match="warm_up"):
        CrossEncoderReranker(tmp_path).score("q", ["p"])


def test_warm_up_names_a_folder_without_a_model(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="train-reranker"):
        CrossEncoderReranker(tmp_path / "missing").warm_up()


def test_close_without_warm_up_is_harmless(tmp_path: Path) -> None:
    reranker = CrossEncoderReranker(tmp_path)
    reranker.close()
    assert not reranker.loaded


def test_build_reranker_follows_the_setting(tmp_path: Path) -> None:
    assert build_reranker(None) is None
    built = build_reranker(tmp_path, device="cpu", batch_size=8, max_length=128, quantize=True)
    assert isinstance(built, CrossEncoderReranker)
    assert (built.path, built.device, built.batch_size, built.max_length) == (tmp_path, "cpu", 8, 128)
    assert built.quantize
    assert not built.loaded


def test_reranker_path_setting_is_optional(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from ragbot.settings import RetrieverSettings

    monkeypatch.delenv("RAGBOT_RETRIEVER_RERANKER_PATH", raising=False)
    assert RetrieverSettings(_env_file=None).reranker_path is None
    monkeypatch.setenv("RAGBOT_RETRIEVER_RERANKER_PATH", str(tmp_path))
    assert RetrieverSettings(_env_file=None).reranker_path == tmp_path


# -- pairs ----------------------------------------------------------------------------------------


def test_parse_pair_accepts_the_documented_key_names() -> None:
    assert parse_pair({"query": " q ", "positive": "p"}) == TrainingPair("q", "p")
    assert parse_pair({"question": "q", "paragraph": "p", "negatives": ["n"]}) == TrainingPair(
        "q", "p", ("n",)
    )
    assert parse_pair({"question": "q", "passage": "p"}).positive == "p"


@pytest.mark.parametrize(
    ("obj", "field"),
    [
        ({"positive": "p"}, "query"),
        ({"query": "  ", "positive": "p"}, "query"),
        ({"query": "q"}, "positive"),
        ({"query": "q", "positive": "p", "negatives": "n"}, "negatives"),
    ],
)
def test_parse_pair_names_what_is_wrong(obj: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationFailed) as info:
        parse_pair(obj)
    assert info.value.field == field


def test_pairs_round_trip_through_jsonl(tmp_path: Path) -> None:
    pairs = [TrainingPair("q1", "p1"), TrainingPair("שאלה", "פסקה", ("אחרת",))]
    path = tmp_path / "pairs.jsonl"
    assert write_pairs(pairs, path) == 2
    assert load_pairs(path) == pairs
    assert json.loads(path.read_text(encoding="utf-8").splitlines()[1])["query"] == "שאלה"


def test_load_pairs_names_the_bad_line(tmp_path: Path) -> None:
    path = tmp_path / "pairs.jsonl"
    path.write_text('{"query": "q", "positive": "p"}\n\nnot json\n', encoding="utf-8")
    with pytest.raises(ValidationFailed, match=r"pairs.jsonl:3"):
        load_pairs(path)


def test_load_pairs_refuses_an_empty_or_missing_file(tmp_path: Path) -> None:
    (tmp_path / "empty.jsonl").write_text("\n", encoding="utf-8")
    with pytest.raises(ValidationFailed, match="no pairs"):
        load_pairs(tmp_path / "empty.jsonl")
    with pytest.raises(ConfigurationError, match="not found"):
        load_pairs(tmp_path / "missing.jsonl")


# -- BM25 hard negatives ------------------------------------------------------------------------------


def test_bm25_ranks_the_matching_document_first() -> None:
    index = BM25Index(CORPUS)
    hits = index.search("vitamin D in winter", 3)
    assert [i for i, _ in hits[:2]] == [2, 5] or [i for i, _ in hits[:2]] == [5, 2]
    assert all(a[1] >= b[1] for a, b in itertools.pairwise(hits))
    assert index.search("zebra quantum", 5) == []


def test_bm25_uses_the_stores_analyzer_for_hebrew_prefixes() -> None:
    index = BM25Index(["הזכויות של עובדים", "מידע על מס הכנסה"])
    assert index.search("לעובדים", 1)[0][0] == 0


def test_negative_pools_never_hold_a_positive_of_the_query() -> None:
    pairs = [
        TrainingPair("how is glucose stored", CORPUS[4]),
        TrainingPair("how is glucose stored", CORPUS[1]),
        TrainingPair("what makes ATP in the cell", CORPUS[0]),
    ]
    pools = mine_negative_pools(pairs, corpus=CORPUS, pool_size=3)
    assert len(pools) == 3
    for pool in pools[:2]:
        assert CORPUS[4] not in pool
        assert CORPUS[1] not in pool
    assert CORPUS[0] not in pools[2]
    assert CORPUS[3] in pools[2]  # "cell": the hard negative BM25 finds
    assert all(len(p) <= 3 for p in pools)


def test_negative_pools_default_to_the_other_positives_and_keep_given_negatives() -> None:
    pairs = [
        TrainingPair("insulin glucose", CORPUS[1], ("given negative",)),
        TrainingPair("liver", CORPUS[4]),
    ]
    pools = mine_negative_pools(pairs, pool_size=5)
    assert pools[0][0] == "given negative"
    assert CORPUS[4] in pools[0]  # shares "glucose"
    assert CORPUS[1] not in pools[0]


def test_each_epoch_puts_the_positive_first_with_fresh_negatives() -> None:
    pairs = [TrainingPair(f"q{i}", f"p{i}") for i in range(4)]
    pools = [[f"n{i}-{j}" for j in range(10)] for i in range(4)]
    groups = _groups(pairs, pools, 3, random.Random(1))
    assert sorted(q for q, _ in groups) == ["q0", "q1", "q2", "q3"]
    for query, texts in groups:
        i = query[1:]
        assert texts[0] == f"p{i}"
        assert len(texts) == 4
        assert all(t.startswith(f"n{i}-") for t in texts[1:])


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"epochs": 0}, "epochs"),
        ({"negatives": 5, "pool_size": 2}, "pool_size"),
        ({"max_length": 8}, "max_length"),
        ({"layers": 0}, "layers"),
        ({"time_budget_s": 0}, "time_budget_s"),
    ],
)
def test_training_config_refuses_nonsense(kwargs: dict[str, float], field: str) -> None:
    with pytest.raises(ValidationFailed) as info:
        TrainingConfig(**kwargs)  # type: ignore[arg-type]
    assert info.value.field == field
