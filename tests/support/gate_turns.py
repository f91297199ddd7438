"""Synthetic turns for the abstention gate's fits (bench/answers/pair_gate.py, tuned_gate.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.answers.pair_gate import Turn


def gate_turn(
    name: str, i: int, *, answerable: bool, answered: bool = True, x: float = 0.0, cross: bool = False
) -> Turn:
    """A turn of set ``name`` with two paragraphs: the first at feature ``x`` (its page answers when the
    question is answerable), the second one below it and never on a gold page."""
    return Turn(
        set_name=name,
        question_id=f"{name}:{i}",
        answerable=answerable,
        x=np.array([[x, 1.0], [x - 1.0, 0.0]]),
        labels=np.array([answerable, False]),
        cross_language=cross,
        answered=answered,
        gold_cited=answerable,
    )
