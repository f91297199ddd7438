"""The learned gate on the abstention rule (``ragbot.chat.pair_gate``): its features, its file, and the turn
it ends when the best paragraph's probability is under the threshold; ``POST /v1/similarity`` with
``vectors``. The shipped gate on real models: tests/integration/test_abstention.py."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pytest
from support.chat_fakes import (
    VECTOR_DIMENSION,
    RememberingRetriever,
    ScriptedLLM,
    StaticRetriever,
    TunedRetriever,
    document,
)

from ragbot.chat.events import ChatEvent, ChatRequest, DoneEvent
from ragbot.chat.pair_gate import (
    PACKAGED_GATE,
    SCALARS,
    TUNED_PAIR,
    PairGate,
    best_probability,
    configured_gate,
    features,
    load_gate,
)
from ragbot.chat.pipeline import ChatPipeline
from ragbot.errors import ConfigurationError
from ragbot.prompts import PromptDocument, PromptLibrary
from ragbot.settings import ChatSettings

WIDTH = 2 * VECTOR_DIMENSION + len(SCALARS)


def test_features_are_the_vectors_product_and_difference_then_cosine_score_share_rank_and_language() -> None:
    q = np.array([0.6, 0.8])
    p = np.array([[1.0, 0.0], [0.0, 1.0]])
    x = features(q, p, [2.0, 0.5], cross_language=True)
    assert x.shape == (2, 2 * 2 + len(SCALARS))
    assert np.allclose(x[0], [0.6, 0.0, 0.4, 0.8, 0.6, 2.0, 1.0, 0.0, 1.0])
    assert np.allclose(x[1], [0.0, 0.8, 0.6, 0.2, 0.8, 0.5, 0.25, 1.0, 1.0])
    assert features(q, p, [0.0, 0.0], cross_language=False)[:, -3].tolist() == [0.0, 0.0]  # no division by 0


def test_a_gate_file_round_trips_and_each_language_pair_has_its_threshold(tmp_path: Path) -> None:
    gate = PairGate(np.array([1.0, -2.0]), 0.5, {"same_language": 0.4, "cross_language": 0.2}, "m")
    path = tmp_path / "gate.json"
    path.write_text(json.dumps(gate.as_json()), encoding="utf-8")
    loaded = load_gate(path)
    assert loaded.model == "m" and loaded.bias == 0.5 and loaded.weights.tolist() == [1.0, -2.0]
    assert loaded.threshold(False) == 0.4 and loaded.threshold(True) == 0.2
    assert PairGate(np.zeros(1), 0.0, {}, "m").threshold(True) == -math.inf
    assert np.allclose(loaded.probabilities(np.array([[0.0, 0.0], [1.0, 0.0]])), [0.6225, 0.8176], atol=1e-4)


def test_a_tuned_cross_language_turn_reads_its_own_threshold_only_when_the_file_has_one() -> None:
    both = {"same_language": 0.4, "cross_language": 0.2}
    gate = PairGate(np.zeros(1), 0.0, {**both, TUNED_PAIR: 0.35}, "m")
    assert gate.threshold(True, tuned=True) == 0.35
    assert gate.threshold(True) == 0.2 and gate.threshold(False, tuned=True) == 0.4
    assert PairGate(np.zeros(1), 0.0, both, "m").threshold(True, tuned=True) == 0.2


def test_a_file_that_is_not_a_gate_is_a_configuration_error_naming_the_setting(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"weights": [1.0]}', encoding="utf-8")
    with pytest.raises(ConfigurationError, match="abstention_gate_path"):
        load_gate(bad)


def test_the_settings_choose_the_gate_the_shipped_one_by_default_and_none_when_off(tmp_path: Path) -> None:
    assert configured_gate(ChatSettings(_env_file=None)) is load_gate(PACKAGED_GATE)
    assert configured_gate(ChatSettings(_env_file=None, abstention_gate_enabled=False)) is None
    assert configured_gate(ChatSettings(_env_file=None, abstention_enabled=False)) is None
    with pytest.raises(ConfigurationError, match="abstention_gate_path"):
        configured_gate(ChatSettings(_env_file=None, abstention_gate_path=tmp_path / "missing.json"))


def test_the_shipped_gate_reads_multilingual_e5_small_vectors_and_has_both_thresholds() -> None:
    gate = load_gate(PACKAGED_GATE)
    assert gate.model == "multilingual-e5-small" and len(gate.weights) == 2 * 384 + len(SCALARS)
    assert set(gate.thresholds) == {"same_language", "cross_language"}
    assert all(0.0 <= t < 1.0 for t in gate.thresholds.values())


def test_best_probability_is_silent_without_the_gates_model_or_paragraphs() -> None:
    retriever = StaticRetriever()
    gate = PairGate(np.zeros(WIDTH), 0.0, {}, "m")
    docs = [PromptDocument(number=1, title="t", text="annual leave days")]

    def best(g: PairGate, documents: list[PromptDocument]) -> float | None:
        return asyncio.run(
            best_probability(
                retriever=retriever,
                gate=g,
                question="annual leave",
                documents=documents,
                scores=[1.0],
                cross_language=False,
            )
        )

    assert best(gate, docs) == pytest.approx(0.5)
    assert retriever.similarity_requests[-1].vectors is True
    assert best(PairGate(np.zeros(WIDTH), 0.0, {}, "other-model"), docs) is None
    assert best(PairGate(np.zeros(WIDTH + 1), 0.0, {}, "m"), docs) is None  # another model's width
    assert best(gate, []) is None
    retriever.similarity_down = True
    assert best(gate, docs) is None


def _turn(tmp_path: Path, gate: PairGate, mode: str = "quote") -> list[ChatEvent]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "gate.json"
    path.write_text(json.dumps(gate.as_json()), encoding="utf-8")
    docs = [document(7, 0, "Every worker gets 16 days off a year.", title="Annual leave")]
    pipeline = ChatPipeline(
        llm=ScriptedLLM(),
        retriever=StaticRetriever(docs, [0.6]),
        prompts=PromptLibrary(),
        settings=ChatSettings(
            _env_file=None,
            abstention_rule={"bias": 1.0, "threshold": 0.0},
            abstention_branches=[],
            abstention_gate_path=path,
            quote_min_score=0.0,
        ),
    )
    request = ChatRequest(question="How many days off do I get a year?", mode=mode, language="en")  # type: ignore[arg-type]

    async def collect() -> list[ChatEvent]:
        return [e async for e in pipeline.run(request)]

    return asyncio.run(collect())


def test_a_turn_the_rule_answers_abstains_when_the_gate_is_under_its_threshold(tmp_path: Path) -> None:
    for mode in ("quote", "strict"):
        events = _turn(tmp_path / mode, PairGate(np.zeros(WIDTH), -3.0, {"same_language": 0.5}, "m"), mode)
        done = events[-1]
        assert isinstance(done, DoneEvent) and done.abstained, mode
        assert "Related pages that may help:\n- Annual leave" in done.answer
        decision = events[0].debug["answerability"]  # type: ignore[union-attr]
        assert decision["reason"] == "gate" and decision["gate"] == pytest.approx(0.047426, abs=1e-6)


def test_a_gate_over_its_threshold_or_for_another_model_lets_the_turn_go_on(tmp_path: Path) -> None:
    events = _turn(tmp_path / "a", PairGate(np.zeros(WIDTH), 3.0, {"same_language": 0.5}, "m"))
    done = events[-1]
    assert isinstance(done, DoneEvent) and not done.abstained
    assert events[0].debug["answerability"]["reason"] == "rule"  # type: ignore[union-attr]
    events = _turn(tmp_path / "b", PairGate(np.zeros(WIDTH), -3.0, {"same_language": 0.5}, "other"))
    assert isinstance(events[-1], DoneEvent) and not events[-1].abstained
    assert events[0].debug["answerability"]["gate"] is None  # type: ignore[union-attr]


def test_a_cross_language_turn_that_searched_a_tuned_list_reads_the_tuned_threshold(tmp_path: Path) -> None:
    # the gate says 0.5 for every paragraph: over the cross-language threshold, under the tuned one
    path = tmp_path / "gate.json"
    gate = PairGate(np.zeros(WIDTH), 0.0, {"cross_language": 0.3, TUNED_PAIR: 0.6}, "m")
    path.write_text(json.dumps(gate.as_json()), encoding="utf-8")
    docs = [document(7, 0, "כל עובד זכאי לחופשה שנתית.", title="חופשה"), document(8, 0, "טקסט אחר")]
    answers = {"bias": 1.0, "threshold": 0.0}

    def decision(retriever: StaticRetriever) -> dict[str, object]:
        settings = ChatSettings(
            _env_file=None,
            abstention_rule=answers,
            abstention_rule_cross_language=answers,
            abstention_rule_cross_language_tuned=answers,
            abstention_branches=[],
            abstention_gate_path=path,
            quote_min_score=0.0,
        )
        pipeline = ChatPipeline(
            llm=ScriptedLLM(), retriever=retriever, prompts=PromptLibrary(), settings=settings
        )
        request = ChatRequest(question="Who is entitled to annual leave?", mode="quote", language="en")

        async def collect() -> list[ChatEvent]:
            return [e async for e in pipeline.run(request)]

        return asyncio.run(collect())[0].debug["answerability"]  # type: ignore[union-attr,no-any-return]

    tuned = decision(TunedRetriever(docs, [0.6, 0.5]))
    assert tuned["evidence"]["cross_language"] == 1.0  # type: ignore[index]
    assert tuned["answer"] is False and tuned["reason"] == "gate" and tuned["gate"] == 0.5
    plain = decision(StaticRetriever(docs, [0.6, 0.5]))
    assert plain["answer"] is True and plain["gate"] == 0.5


def test_the_gate_reads_the_sources_as_the_search_ranked_them_not_as_the_question_memory_moved_them() -> None:
    from ragbot.chat.answerability import searched_order
    from ragbot.chat.events import Selection
    from ragbot.chat.schemas import Source

    def source(i: int, page: int, score: float) -> Source:
        return Source(index=i, title=f"t{page}", page_id=page, score=score, doc_id=f"d{i}")

    # the memory moved page 3 first: its paragraph gained 0.9 (the search gave it 0.6)
    sources = [source(1, 3, 1.5), source(2, 1, 1.2), source(3, 1, 0.7), source(4, 2, 0.8)]
    documents = [PromptDocument(number=s.index, title=s.title, text=f"text {s.index}") for s in sources]
    selection = Selection(sources, documents, [])
    fused = [
        {"_id": "d1", "page_id": 3, "score": 1.5, "raw_scores": {"dense": 0.6, "memory": 0.9}},
        {"_id": "d2", "page_id": 1, "score": 1.2, "raw_scores": {"dense": 1.2}},
    ]
    texts, scores = searched_order(selection, {"fused": fused})
    # pages by their best search score (1: 1.2, 2: 0.8, 3: 0.6), a page's paragraphs in their order
    assert [d.text for d in texts] == ["text 2", "text 3", "text 4", "text 1"]
    assert scores == pytest.approx([1.2, 0.7, 0.8, 0.6])
    # without votes the sources stay as they are, whatever their scores
    fused[0]["raw_scores"] = {"dense": 1.5}
    texts, scores = searched_order(selection, {"fused": fused})
    assert [d.text for d in texts] == ["text 1", "text 2", "text 3", "text 4"] and scores == [
        1.5,
        1.2,
        0.7,
        0.8,
    ]


def test_a_memory_rule_that_weighs_the_gate_reads_its_probability_instead_of_its_threshold(
    tmp_path: Path,
) -> None:
    docs = [document(7, 0, "כל עובד זכאי לחופשה שנתית.", title="חופשה"), document(8, 0, "טקסט אחר")]
    answers = {"bias": 1.0, "threshold": 0.0}
    weighs_gate = {"bias": -0.5, "gate": 1.0, "threshold": 0.0}  # answers at a probability of 0.5 or more

    def decision(
        question: str,
        language: Literal["he", "en"],
        bias: float,
        *,
        model: str = "m",
        enabled: bool = True,
        memory_rule: dict[str, float] = weighs_gate,
    ) -> dict[str, Any]:
        path = tmp_path / f"gate-{bias}-{model}.json"
        # every paragraph's probability is sigmoid(bias); the threshold alone would stop every turn
        gate = PairGate(np.zeros(WIDTH), bias, {"same_language": 0.9, "cross_language": 0.9}, model)
        path.write_text(json.dumps(gate.as_json()), encoding="utf-8")
        settings = ChatSettings(
            _env_file=None,
            abstention_rule=answers,
            abstention_rule_cross_language=answers,
            abstention_rule_cross_language_tuned=answers,
            abstention_rule_memory=memory_rule,
            abstention_rule_cross_language_memory=memory_rule,
            abstention_branches=[],
            abstention_gate_path=path,
            abstention_gate_enabled=enabled,
            quote_min_score=0.0,
        )
        pipeline = ChatPipeline(
            llm=ScriptedLLM(),
            retriever=RememberingRetriever(docs, [0.6, 0.5], page=7, cosine=0.9),
            prompts=PromptLibrary(),
            settings=settings,
        )
        request = ChatRequest(question=question, mode="quote", language=language)

        async def collect() -> list[ChatEvent]:
            return [e async for e in pipeline.run(request)]

        return asyncio.run(collect())[0].debug["answerability"]  # type: ignore[union-attr,no-any-return]

    asked: list[tuple[str, Literal["he", "en"]]] = [
        ("מי זכאי לחופשה שנתית?", "he"),
        ("Who gets annual leave?", "en"),
    ]
    for question, language in asked:
        likely = decision(question, language, 1.0)  # sigmoid(1) = 0.731: under the bar, the rule answers
        assert likely["answer"] is True and likely["reason"] == "rule", language
        assert likely["evidence"]["gate"] == pytest.approx(0.731059, abs=1e-6) == likely["gate"]
        assert likely["evidence"]["cross_language"] == float(language == "en")
        unlikely = decision(question, language, -1.0)  # 0.269: the rule abstains, on its own score
        assert unlikely["answer"] is False and unlikely["reason"] == "rule"
        assert unlikely["score"] == pytest.approx(-0.5 + 0.268941, abs=1e-6)
        # a gate that says nothing (another model's), or none: the next rule decides, no gate evidence
        silent = decision(question, language, 1.0, model="other")
        assert silent["answer"] is True and silent["score"] == 1.0 and silent["evidence"]["gate"] == 0.0
        off = decision(question, language, -1.0, enabled=False)
        assert off["answer"] is True and off["score"] == 1.0 and off["gate"] is None
        # a memory rule without the gate's weight: the same turn stops behind the bar
        behind = decision(question, language, 1.0, memory_rule=answers)
        assert behind["answer"] is False and behind["reason"] == "gate"
