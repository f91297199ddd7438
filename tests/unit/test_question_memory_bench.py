"""bench/answers/question_memory.py writes flat JSON: each file's counts under its own set's keys."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.answers.question_memory import VARIANTS, file_keys


def test_each_file_s_counts_get_flat_keys_named_by_its_set() -> None:
    counts = {
        v: {"answerable": 44, "gold_cited": 30 + i, "unanswerable": 22, "abstained": 20}
        for i, v in enumerate(VARIANTS)
    }
    main = file_keys("abstention_questions.json", {**counts, "remembered": 900})
    assert main["question_memory_main_without_gold_cited"] == 30
    assert (
        main["question_memory_main_with_gold_cited"] == 31 and main["question_memory_main_remembered"] == 900
    )
    fresh7 = file_keys("abstention_questions_fresh7.json", {**counts, "remembered": 1000})
    assert set(fresh7) == {f"question_memory_fresh7_{v}_{k}" for v in VARIANTS for k in counts[v]} | {
        "question_memory_fresh7_remembered"
    }
    assert all(isinstance(value, int) for value in {**main, **fresh7}.values())
