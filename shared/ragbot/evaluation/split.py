"""Split a question set into a tuning half and a held-out half, the same way on every machine.

Thresholds and features are chosen on ``tune``; figures are reported on ``held_out`` only. The split
is stratified: within each stratum (the question's scope, or whether it has a gold page, and its
language) the questions are ordered by a SHA-256 of ``SALT`` and their id, and dealt alternately,
the first to ``tune``. Adding a question moves no other question from one half to the other unless
it lands in the same stratum before it in that order.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Final, Literal, TypeVar

Half = Literal["tune", "held_out"]
HALVES: Final[tuple[Half, ...]] = ("tune", "held_out")
SALT: Final = "ragbot-abstention-split-v1"
Q = TypeVar("Q")


def _order(question_id: str) -> str:
    return hashlib.sha256(f"{SALT}:{question_id}".encode()).hexdigest()


def split_halves(
    questions: Sequence[Q], *, key: Callable[[Q], str], stratum: Callable[[Q], tuple[str, ...]]
) -> dict[Half, list[Q]]:
    """The two halves, each in the questions' original order."""
    strata: dict[tuple[str, ...], list[Q]] = {}
    for q in questions:
        strata.setdefault(stratum(q), []).append(q)
    chosen: dict[str, Half] = {}
    for members in strata.values():
        for i, q in enumerate(sorted(members, key=lambda m: _order(key(m)))):
            chosen[key(q)] = HALVES[i % 2]
    return {half: [q for q in questions if chosen[key(q)] == half] for half in HALVES}
