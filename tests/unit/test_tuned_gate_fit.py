"""How bench/answers/tuned_gate.py fits the gate's threshold for turns a tuned query encoder searched:
the folds as query tuning deals them, the gate refitted outside each fold, and a threshold judged out of
fold (synthetic turns; the real fit's figures: bench/results/tuned_gate_fit.json)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from support.gate_turns import gate_turn

from bench.answers.pair_gate import Turn, judged
from bench.answers.query_tuning import FOLDS, READ_FILES
from bench.answers.tuned_gate import (
    TunedTurn,
    fit,
    folds,
    out_of_fold,
    set_name,
)


def _turn(name: str, i: int, *, answerable: bool, answered: bool = True, cross: bool = True) -> Turn:
    x = 2.0 if answerable else -2.0
    return gate_turn(name, i, answerable=answerable, answered=answered, x=x, cross=cross)


def test_the_folds_deal_every_read_file_once_by_the_gate_turns_set_names() -> None:
    dealt = folds()
    assert len(dealt) == FOLDS
    names = [n for fold in dealt for n in fold]
    assert sorted(names) == sorted(set_name(p) for p in READ_FILES) and len(set(names)) == len(names)
    assert "main" in names and "fresh3" in names


def test_out_of_fold_reads_a_gate_fitted_without_the_folds_sets() -> None:
    dealt = [sorted(f) for f in folds()]
    # the gate's turns of fold 0's sets, ten times as many, say the opposite of the others': a gate
    # that read them answers backwards, one that did not (fold 0's own) the right way round
    gate_turns = [
        _turn(name, i, answerable=i % 2 == 0)
        for fold in dealt
        for name in fold
        for i in range(40 if name in dealt[0] else 4)
    ]
    for t in gate_turns:
        if t.set_name in dealt[0]:
            t.x = -t.x
    # every set of each fold answered, as the fold was dealt when its turns were answered
    tuned = [
        TunedTurn(_turn(name, 100 + i, answerable=i == 0), k, True)
        for k in range(FOLDS)
        for name in dealt[k]
        for i in range(2)
    ]
    best = out_of_fold(tuned, gate_turns)
    for k in range(FOLDS):
        for name in dealt[k]:
            yes, no = best[f"{name}:100"], best[f"{name}:101"]
            assert (yes > no) == (k == 0), (k, name)


def test_the_threshold_reaches_the_target_on_tuned_cross_language_turns_only() -> None:
    dealt = [sorted(f) for f in folds()]
    gate_turns = [_turn(name, i, answerable=i % 2 == 0) for fold in dealt for name in fold for i in range(4)]
    tuned: list[TunedTurn] = []
    for k, fold in enumerate(dealt):
        name = fold[0]
        tuned += [TunedTurn(_turn(name, i, answerable=True), k, True) for i in range(4)]
        tuned += [TunedTurn(_turn(name, 10 + i, answerable=False), k, True) for i in range(4)]
        # not searched tuned, or not cross-language: left out of the fit
        tuned.append(TunedTurn(_turn(name, 20, answerable=False), k, False))
        tuned.append(TunedTurn(_turn(name, 21, answerable=False, cross=False), k, True))
    report = fit(tuned, gate_turns, shipped_cross=0.0)
    assert report["cross_language_tuned_turns"] == 8 * FOLDS
    assert report["answerable"] == 4 * FOLDS and report["unanswerable"] == 4 * FOLDS
    assert (
        report["rule_unanswerable_abstained"] == 0.0 and report["shipped_cross_unanswerable_abstained"] == 0.0
    )
    for way in ("target", "balanced"):  # the gate separates them: both criteria stop every unanswerable one
        assert report[f"{way}_unanswerable_abstained"] == 1.0 and report[f"{way}_gold_cited"] == 1.0, way
    assert 0.0 < report["threshold"] == report["balanced_threshold"] < 1.0
    best = out_of_fold(tuned, gate_turns)
    mine = [t.turn for t in tuned if t.tuned and t.turn.cross_language]
    assert judged(mine, best, report["threshold"]) == (4 * FOLDS, 4 * FOLDS)
