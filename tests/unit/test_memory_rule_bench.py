"""The memory rule bench's simulation and fit (bench/answers/memory_rule.py), on made-up turns."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.answers.memory_rule import FEATURES, best_threshold, counts, fit, gated, measure, score, with_gate


def _turn(
    best: float, *, gold: int | None, cited: bool = True, abstained: bool = False, fold: int = 0
) -> dict[str, Any]:
    evidence = dict.fromkeys(FEATURES, 0.5) | {"memory_best": best, "memory_agree": float(best > 0.9)}
    return {
        "gold_page_id": gold,
        "gold_cited": cited and gold is not None,
        "abstained": abstained,
        "evidence": evidence,
        "fold": fold,
    }


def test_counts_simulate_the_rule_on_top_of_what_abstained_anyway() -> None:
    turns = [
        _turn(0.95, gold=1),
        _turn(0.95, gold=1, abstained=True),  # the gate stopped it: not cited whatever the rule says
        _turn(0.80, gold=None),
        _turn(0.85, gold=None, abstained=True),  # abstained anyway
    ]
    assert counts(turns, [True, True, True, True]) == (1, 2, 1, 2)
    assert counts(turns, [False, False, False, False]) == (0, 2, 2, 2)


def test_the_threshold_has_the_best_sum_of_shares_and_a_turn_at_it_answers() -> None:
    turns = [_turn(0.95, gold=1), _turn(0.93, gold=1), _turn(0.80, gold=None), _turn(0.70, gold=None)]
    scores = np.array([3.0, 2.0, 1.0, 0.0])
    threshold = best_threshold(turns, scores)
    assert 1.0 < threshold <= 2.0
    assert counts(turns, list(scores >= threshold)) == (2, 2, 2, 2)


def test_the_fitted_rule_weighs_a_near_remembered_question_up_and_separates_out_of_fold() -> None:
    turns = [
        _turn(b, gold=g, fold=i % 2)
        for i, (b, g) in enumerate(
            [
                (0.97, 1),
                (0.95, 2),
                (0.96, 3),
                (0.94, 1),
                (0.82, None),
                (0.80, None),
                (0.84, None),
                (0.78, None),
            ]
        )
    ]
    rule = fit(turns)
    assert rule["memory_best"] > 0
    assert all(
        (score(rule, t["evidence"]) >= rule["threshold"]) == (t["gold_page_id"] is not None) for t in turns
    )
    shipped = {"bias": 1.0, "threshold": 0.0}  # answers everything
    report = measure(turns, shipped)
    assert report["memory_rule_en_cited_memory"] == 4 and report["memory_rule_en_abstained_memory"] == 4
    assert report["memory_rule_en_cited_shipped"] == 4 and report["memory_rule_en_abstained_shipped"] == 0


def test_turns_collected_with_the_gate_off_are_measured_behind_its_bar_and_weighing_it() -> None:
    # the memory cannot tell these apart (all 0.9); the gate's probability can
    rows = [(0.8, 1), (0.7, 2), (0.3, 3), (0.35, 1), (0.2, None), (0.1, None), (0.25, None), (0.15, None)]
    turns = [_turn(0.9, gold=g, fold=i % 2) | {"gate": p} for i, (p, g) in enumerate(rows)]
    behind = gated(turns, 0.5)
    assert [t["abstained"] for t in behind] == [False, False, True, True, True, True, True, True]
    assert not any(t["abstained"] for t in turns)  # the collected turns are left as they were
    assert all("gate" not in t["evidence"] for t in turns)
    assert [t["evidence"]["gate"] for t in with_gate(turns)] == [p for p, _ in rows]
    report = measure(turns, {"bias": 1.0, "threshold": 0.0}, gate_bar=0.5)
    # behind the bar, two answerable turns under it are lost whatever the rule says
    assert report["memory_rule_en_cited_shipped"] == 2 and report["memory_rule_en_abstained_shipped"] == 4
    # the rule that weighs the probability draws its own line under 0.3, and keeps them
    assert report["memory_rule_en_cited_memory_gate"] == 4
    assert report["memory_rule_en_abstained_memory_gate"] == 4
    assert report["memory_rule_gate"] > 0  # the rule written weighs it up
