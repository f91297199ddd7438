"""The question memory (ragbot.retrieval.memory): votes, the file, and how the engine reorders with it.

The engine tests use the in-memory store and hashed embedders of ``support.engine_corpus``; the real
e5 and the ``ragbot remember-questions`` command are in ``tests/integration/test_question_memory_cli.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from support.engine_corpus import build

from ragbot.errors import ConfigurationError
from ragbot.retrieval.fusion import FusedHit
from ragbot.retrieval.memory import Neighbour, QuestionMemory, Votes, check_loaded, vote_weight, with_votes
from ragbot.schemas.retrieval import RetrieveRequest


def unit(*rows: list[float]) -> np.ndarray:
    m = np.asarray(rows, dtype=np.float32)
    return np.asarray(m / np.linalg.norm(m, axis=1, keepdims=True), dtype=np.float32)


def memory(**kwargs: object) -> QuestionMemory:
    return QuestionMemory(
        model="m",
        questions=["first", "second", "third"],
        pages=[[10], [20, 30], [20]],
        vectors=unit([1, 0, 0], [0.9, 0.1, 0], [0, 1, 0]),
        **kwargs,  # type: ignore[arg-type]
    )


def test_the_nearest_questions_vote_for_their_pages_weighted_by_how_much_nearer() -> None:
    votes = memory(temperature=0.05).votes(np.array([1.0, 0.0, 0.0], dtype=np.float32))
    assert [n.question for n in votes.neighbours] == ["first", "second", "third"]
    assert votes.neighbours[0].weight == 1.0 and votes.neighbours[2].weight < 1e-6
    # page 10: the nearest one's whole vote; 20 and 30 share the second's (cosine 0.994), 20 also the third's
    assert votes.shares[10] == 1.0
    assert 0.85 < votes.shares[30] < votes.shares[20] < 1.0
    # a colder temperature leaves the nearest question almost alone
    cold = memory(temperature=0.001).votes(np.array([1.0, 0.0, 0.0], dtype=np.float32))
    assert cold.shares[10] == 1.0 and cold.shares[20] < 0.01
    # fewer neighbours: only they vote
    assert set(memory(neighbours=1).votes(np.array([0, 1, 0], dtype=np.float32)).shares) == {20}


def test_a_vector_of_another_size_or_a_bad_memory_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="3-d vectors of m"):
        memory().votes(np.zeros(4, dtype=np.float32))
    with pytest.raises(ConfigurationError, match="at least one page"):
        QuestionMemory(model="m", questions=["q"], pages=[[]], vectors=unit([1, 0]))
    with pytest.raises(ConfigurationError, match="1 questions, 2 page lists"):
        QuestionMemory(model="m", questions=["q"], pages=[[1], [2]], vectors=unit([1, 0]))
    with pytest.raises(ConfigurationError, match="temperature"):
        memory(temperature=0.0)
    with pytest.raises(ConfigurationError, match="3-d vectors of m; the models loaded: \\['m'\\]"):
        check_loaded(memory(), {"m": 384})
    check_loaded(memory(), {"m": 3, "other": 384})
    empty = QuestionMemory(model="m", questions=[], pages=[], vectors=np.zeros((0, 3), dtype=np.float32))
    assert not empty.votes(np.ones(3, dtype=np.float32)).shares


def test_the_file_keeps_questions_pages_vectors_and_settings(tmp_path: Path) -> None:
    path = tmp_path / "memory" / "questions.npz"
    memory(neighbours=2, temperature=0.1, about={"files": ["a.json"]}).save(path)
    loaded = QuestionMemory.load(path)
    assert loaded.questions == ["first", "second", "third"] and loaded.pages == [(10,), (20, 30), (20,)]
    assert loaded.neighbours == 2 and loaded.temperature == 0.1 and loaded.about == {"files": ["a.json"]}
    assert np.allclose(loaded.vectors, memory().vectors, atol=1e-3)
    with pytest.raises(ConfigurationError, match="cannot read"):
        QuestionMemory.load(tmp_path / "missing.npz")
    other = tmp_path / "other.npz"
    np.savez(other, header=np.frombuffer(b'{"format": "x"}', dtype=np.uint8), vectors=np.zeros((0, 3)))
    with pytest.raises(ConfigurationError, match="not a question memory"):
        QuestionMemory.load(other)


def test_questions_the_wiki_did_not_answer_vote_for_nothing_but_say_how_near_they_are(tmp_path: Path) -> None:
    knowing = memory(unanswered=["weather", "hummus"], unanswered_vectors=unit([0, 0, 1], [0, 0.6, 0.8]))
    votes = knowing.votes(np.array([0.0, 0.6, 0.8], dtype=np.float32))
    assert votes.unanswered is not None and votes.unanswered.question == "hummus"
    assert abs(votes.unanswered.cosine - 1.0) < 1e-6
    # the answered questions' votes are those of a memory without them
    assert votes.shares == memory().votes(np.array([0.0, 0.6, 0.8], dtype=np.float32)).shares
    assert all(n.pages for n in votes.neighbours)
    debug = votes.as_debug()
    assert debug["unanswered"] == {"question": "hummus", "cosine": 1.0}
    assert "unanswered" not in memory().votes(np.ones(3, dtype=np.float32)).as_debug()
    # the file keeps them; a file written before them loads with none
    path = tmp_path / "knowing.npz"
    knowing.save(path)
    loaded = QuestionMemory.load(path)
    assert loaded.unanswered == ["weather", "hummus"]
    assert np.allclose(loaded.unanswered_vectors, knowing.unanswered_vectors, atol=1e-3)
    with np.load(path) as data:
        header = json.loads(bytes(data["header"]).decode("utf-8"))
        del header["unanswered"]
        older = tmp_path / "older.npz"
        np.savez(
            older, header=np.frombuffer(json.dumps(header).encode(), dtype=np.uint8), vectors=data["vectors"]
        )
    assert (
        QuestionMemory.load(older).unanswered == []
        and QuestionMemory.load(older).votes(np.ones(3, dtype=np.float32)).unanswered is None
    )
    with pytest.raises(ConfigurationError, match="2 unanswered questions, 1 vectors"):
        memory(unanswered=["a", "b"], unanswered_vectors=unit([0, 0, 1]))
    with pytest.raises(ConfigurationError, match="another dimension"):
        memory(unanswered=["a"], unanswered_vectors=unit([0, 1]))


def hit(doc: str, page: int, score: float) -> FusedHit:
    return FusedHit(doc_id=doc, score=score, source={"page_id": page})


def test_votes_raise_retrieved_pages_only_relative_to_the_best_retrieved_one() -> None:
    fused = [hit("a", 1, 2.0), hit("b", 1, 1.5), hit("c", 2, 1.4), hit("d", 3, 1.0)]
    votes = Votes(neighbours=[], shares={9: 1.0, 2: 0.5, 3: 0.25})
    out = with_votes(fused, votes, 0.5)
    # page 9 was not retrieved: page 2 counts as the best vote and gains 0.5 x 2.0; page 3 half that
    assert [h.doc_id for h in out] == ["c", "a", "b", "d"]
    assert [round(h.score, 3) for h in out] == [2.4, 2.0, 1.5, 1.5]
    assert {h.page_id for h in out} == {1, 2, 3}
    # what the votes added is noted beside the branches' raw scores (the chat's gate takes it off again)
    assert [h.raw_scores.get("memory") for h in out] == [1.0, None, None, 0.5]
    again = [hit("a", 1, 2.0), hit("c", 2, 1.4)]
    assert [h.doc_id for h in with_votes(again, votes, 0.0)] == ["a", "c"]
    assert [h.doc_id for h in with_votes(again, Votes(neighbours=[], shares={9: 1.0}), 1.0)] == ["a", "c"]


def test_a_very_near_remembered_question_adds_more_weight() -> None:
    def votes(cosine: float) -> Votes:
        return Votes(neighbours=[Neighbour("q", (2,), cosine, 1.0)], shares={2: 1.0})

    # the shipped 0.5, plus 5 x how far the nearest cosine passes 0.9
    assert vote_weight(votes(0.85), 0.5, 0.9, 5.0) == 0.5
    assert vote_weight(votes(0.96), 0.5, 0.9, 5.0) == pytest.approx(0.8)
    assert vote_weight(votes(0.96), 0.5, 0.9, 0.0) == 0.5
    # a weight of 0 keeps the memory off, and no neighbours add nothing
    assert vote_weight(votes(1.0), 0.0, 0.9, 5.0) == 0.0
    assert vote_weight(Votes(neighbours=[]), 0.5, 0.9, 5.0) == 0.5
    # the larger weight can move a page the fixed one could not: c gains 0.8 x 2.0 = 1.6 and passes a
    fused = [hit("a", 1, 2.0), hit("c", 2, 0.6)]
    assert [h.doc_id for h in with_votes(fused, votes(0.85), vote_weight(votes(0.85), 0.5, 0.9, 5.0))] == [
        "a",
        "c",
    ]
    fused = [hit("a", 1, 2.0), hit("c", 2, 0.6)]
    assert [h.doc_id for h in with_votes(fused, votes(0.96), vote_weight(votes(0.96), 0.5, 0.9, 5.0))] == [
        "c",
        "a",
    ]


async def test_the_engine_puts_the_page_remembered_questions_point_to_first() -> None:
    engine, _, embs = build()
    question = "benefits"
    before = await engine.retrieve(RetrieveRequest(query=question, paragraphs_per_page=[1, 1, 1, 1]))
    pages = before.debug.pages
    assert len(pages) >= 2 and before.debug.memory is None
    wanted = pages[1]  # retrieved, but not first
    vector = embs["alpha"].embed_queries(["what benefits are there"])
    engine.memory = QuestionMemory(
        model="alpha", questions=["what benefits are there"], pages=[[wanted]], vectors=vector
    )
    after = await engine.retrieve(RetrieveRequest(query=question, paragraphs_per_page=[1, 1, 1, 1]))
    assert after.debug.pages[0] == wanted and set(after.debug.pages) == set(pages)
    assert after.debug.memory is not None
    assert after.debug.memory.neighbours[0].question == "what benefits are there"
    assert after.debug.memory.shares == {str(wanted): 1.0}
    # the asked question's nearest remembered one; the weight says what its page gained
    nearest = after.debug.memory.neighbours[0].cosine
    assert after.debug.memory.weight == pytest.approx(0.5 + 5.0 * max(0.0, nearest - 0.9), abs=1e-5)

    # a page the search did not find is never added
    engine.memory = QuestionMemory(model="alpha", questions=["x"], pages=[[99]], vectors=vector)
    unfound = await engine.retrieve(RetrieveRequest(query=question, paragraphs_per_page=[1, 1, 1, 1]))
    assert unfound.debug.pages == pages and 99 not in unfound.debug.pages


async def test_a_memory_of_a_model_the_retriever_does_not_load_is_a_configuration_error() -> None:
    engine, _, _ = build()
    engine.memory = QuestionMemory(
        model="gamma", questions=["q"], pages=[[1]], vectors=unit([1.0] + [0.0] * 63)
    )
    with pytest.raises(ConfigurationError, match="gamma"):
        await engine.retrieve(RetrieveRequest(query="benefits", mode="lexical"))
