"""bench/answers/abstention.py --fit: one rule per language pair, its candidate chosen by cross-validation
inside the rows it is given (the tuning half), never by the held-out half."""

from __future__ import annotations

import io
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.answers import abstention  # noqa: E402
from bench.answers.abstention import choose_and_fit, cross_validate, fit_rules  # noqa: E402


def _rows(seed: int = 0) -> list[dict[str, Any]]:
    """Same-language questions answered when their dense gap is wide, cross-language ones when it is
    narrow (as on the Kol-Zchut tuning half): one line over both cannot tell them apart."""
    rng = np.random.default_rng(seed)
    rows: list[dict[str, Any]] = []
    for i in range(80):
        cross, answerable = i % 2, (i // 2) % 2 == 0
        gap = float(rng.uniform(0.05, 0.1) if answerable != bool(cross) else rng.uniform(0.0, 0.04))
        evidence = {
            "dense_top": float(rng.uniform(0.8, 0.9)),
            "dense_gap": gap,
            "bm25_gap": 0.5,
            "agree": 1.0,
            "coverage": 1.0,
            "sentence_top": 0.9,
            "cross_language": float(cross),
        }
        gold = 1 if answerable else None
        rows.append({"id": f"q{i}", "gold_page_id": gold, "gold_cited": answerable, "evidence": evidence})
    return rows


def test_each_language_pair_gets_its_own_rule_with_its_own_sign() -> None:
    rules = fit_rules(_rows(), features=("dense_gap",), l2=1.0, target=0.9)
    assert set(rules) == {"same_language", "cross_language"}
    assert rules["same_language"]["dense_gap"] > 0 > rules["cross_language"]["dense_gap"]


def test_cross_validation_separates_the_pairs_and_the_choice_meets_the_goal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cited, abstained = cross_validate(_rows(), features=("dense_gap",), l2=1.0, target=0.9)
    assert cited > 0.8 and abstained > 0.8
    # two candidates: the one that sees the gap wins
    monkeypatch.setattr(abstention, "FEATURE_SETS", {"top": ("dense_top",), "gap": ("dense_gap",)})
    monkeypatch.setattr(abstention, "L2S", (1.0,))
    monkeypatch.setattr(abstention, "TARGETS", (1.0,))
    fit = choose_and_fit(_rows(), log=io.StringIO())
    assert fit["chosen"]["features"] == "gap"
    assert fit["chosen"]["meets_goal"] is True
    assert len(fit["candidates"]) >= 2 and set(fit["rules"]) == {"same_language", "cross_language"}
