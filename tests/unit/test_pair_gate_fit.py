"""How bench/answers/pair_gate.py fits the abstention gate: the regression, the out-of-fold
probabilities and the thresholds that reach the target with the rule (synthetic turns; the real fit's
figures: bench/results/pair_gate_fit.json)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from support.gate_turns import gate_turn

from bench.answers.pair_gate import (
    TARGET,
    Turn,
    _logistic,
    balanced_threshold,
    choose_thresholds,
    figures,
    judged,
    out_of_fold,
    threshold_for,
)


def _turn(name: str, i: int, *, answerable: bool, answered: bool = True, x: float = 0.0) -> Turn:
    return gate_turn(name, i, answerable=answerable, answered=answered, x=x)


def test_the_regression_is_at_its_optimum_with_the_bias_unpenalised() -> None:
    rng = np.random.default_rng(3)
    x = rng.normal(size=(400, 5)) * [1.0, 5.0, 0.1, 2.0, 1.0] + 3.0
    y = (x[:, 0] + rng.normal(size=400) > 3.0).astype(float)
    w, b = _logistic(x, y, l2=10.0)
    mean, std = x.mean(axis=0), x.std(axis=0) + 1e-9
    z = (x - mean) / std
    p = 1.0 / (1.0 + np.exp(-(x @ w + b)))
    theta = w * std  # the weights on standardised features
    assert abs(float(np.mean(p - y))) < 1e-8  # the bias: no penalty
    assert np.allclose(z.T @ (p - y) / len(y) + 10.0 * theta / len(y), 0.0, atol=1e-8)
    assert w[0] > 0 and abs(w[0]) > abs(w[2]) * 0.01


def test_thresholds_stop_just_enough_of_what_the_rule_answered_to_reach_the_target() -> None:
    # 10 unanswerable questions: the rule abstains on 5, the gate must stop 4 more of the other 5
    turns = [_turn("s", i, answerable=False, answered=i >= 5) for i in range(10)]
    best = {t.question_id: 0.1 * (i - 4) for i, t in enumerate(turns)}  # answered ones: 0.1 .. 0.5
    chosen = choose_thresholds(turns, best)
    assert chosen["same_language"] == 0.45 and "cross_language" not in chosen
    stopped = sum(not (t.answered and best[t.question_id] >= chosen["same_language"]) for t in turns)
    assert stopped / len(turns) >= TARGET
    out = figures(turns, best, chosen)
    assert out["same_language_rule_unanswerable_abstained"] == 0.5
    assert out["same_language_gated_unanswerable_abstained"] == 0.9
    # the rule alone already there: the gate stops nothing
    assert choose_thresholds([_turn("s", 0, answerable=False, answered=False)], {"s:0": 0.9}) == {
        "same_language": 0.0
    }


def test_out_of_fold_probabilities_come_from_the_other_sets() -> None:
    turns = [
        _turn(name, i, answerable=i % 2 == 0, x=2.0 if i % 2 == 0 else -2.0)
        for name in ("a", "b", "c")
        for i in range(6)
    ]
    best = out_of_fold(turns)
    assert set(best) == {t.question_id for t in turns}
    assert all(0.0 < p < 1.0 for p in best.values())
    # what separates answerable from not in the other sets separates it in the held-out one
    for name in ("a", "b", "c"):
        mine = [t for t in turns if t.set_name == name]
        assert min(best[t.question_id] for t in mine if t.answerable) > max(
            best[t.question_id] for t in mine if not t.answerable
        )


def test_the_balanced_threshold_weighs_both_shares_where_the_target_would_cost_more() -> None:
    # 4 answerable turns at 0.3, 0.5, 0.6, 0.7; 4 unanswerable at 0.2, 0.25, 0.4, 0.8
    turns = [_turn("s", i, answerable=True) for i in range(4)]
    turns += [_turn("s", 10 + i, answerable=False) for i in range(4)]
    best = dict(zip([t.question_id for t in turns], [0.3, 0.5, 0.6, 0.7, 0.2, 0.25, 0.4, 0.8], strict=True))
    bar = balanced_threshold(turns, best)
    # every gold page and 2 of 4 abstained: the best sum (1.5), the lower of two (0.45 has 3 and 3)
    assert bar == 0.275 and judged(turns, best, bar) == (4, 2)
    target = threshold_for([t for t in turns if not t.answerable], best)
    assert judged(turns, best, target)[1] >= TARGET * 4 and judged(turns, best, target)[0] == 0
    # the gate's fit chooses each language pair's threshold by either criterion
    assert choose_thresholds(turns, best, "balanced") == {"same_language": 0.275}
    assert choose_thresholds(turns, best, "target") == {"same_language": target}
