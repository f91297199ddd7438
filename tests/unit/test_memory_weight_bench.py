"""The memory weight bench's replay and out-of-fold choice (bench/answers/memory_weight.py), on made-up
turns: the replay must move pages exactly as the retriever's own votes do."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.answers.memory_weight import first_page, measure, objective, tally


def _turn(cosine: float, *, gold: int | None, fold: int, language: str = "en") -> dict[str, Any]:
    """Page 1 first by the search (2.0), page 2 behind (1.2); the memory's nearest question votes for 2."""
    return {
        "fold": fold,
        "language": language,
        "gold": gold,
        "fused": [(1, 2.0), (1, 1.9), (2, 1.2)],
        "neighbours": [("remembered", (2,), cosine, 1.0)],
        "shares": {2: 1.0},
    }


def test_the_replay_moves_a_page_only_when_the_weight_is_large_enough() -> None:
    # 0.5 x 2.0 lifts page 2 to 2.2, past page 1: any positive weight of 0.4 or more moves it
    assert first_page(_turn(0.8, gold=2, fold=0), (0.0, 1.0, 0.0)) == 1
    assert first_page(_turn(0.8, gold=2, fold=0), (0.3, 1.0, 0.0)) == 1
    assert first_page(_turn(0.8, gold=2, fold=0), (0.5, 1.0, 0.0)) == 2
    # the near weight: 0.3 + 5 x (0.96 - 0.9) = 0.6 moves it, 0.3 + 5 x 0 does not
    assert first_page(_turn(0.96, gold=2, fold=0), (0.3, 0.9, 5.0)) == 2
    assert first_page(_turn(0.85, gold=2, fold=0), (0.3, 0.9, 5.0)) == 1


def test_tally_counts_gold_first_and_agreement_on_unanswerable_turns() -> None:
    turns = [_turn(0.9, gold=2, fold=0), _turn(0.9, gold=1, fold=0), _turn(0.9, gold=None, fold=0)]
    assert tally(turns, (0.5, 1.0, 0.0)) == {"answerable": 2, "gold_first": 1, "unanswerable": 1, "agree": 1}
    assert tally(turns, (0.0, 1.0, 0.0)) == {"answerable": 2, "gold_first": 1, "unanswerable": 1, "agree": 0}
    assert objective({"answerable": 2, "gold_first": 1, "unanswerable": 1, "agree": 1}) == 0.5 - 0.25


def test_the_scheme_is_chosen_on_the_other_folds_and_scored_on_the_held_one() -> None:
    # a near question's page is the gold page, a far one's is not: only the near weight gets both right
    turns = [
        turn
        for fold in range(3)
        for turn in (
            {**_turn(0.97, gold=2, fold=fold), "fused": [(1, 2.0), (2, 0.6)]},  # moves at a weight > 0.7
            {**_turn(0.86, gold=1, fold=fold), "fused": [(1, 2.0), (2, 0.9)]},  # moves at a weight > 0.55
        )
    ]
    report = measure(turns)
    # a fixed weight gets one kind right: the far ones up to 0.5, the near ones from 0.75
    assert report["memory_weight_all_fixed_0.5_gold_first"] == 3
    assert report["memory_weight_all_fixed_1.0_gold_first"] == 3
    assert report["memory_weight_oof_gold_first"] == 6 and report["memory_weight_oof_answerable"] == 6
    assert all(
        "x(cos-" in c and not c.endswith("x(cos-1.0)") for c in report["memory_weight_oof_choices"].split(",")
    )
