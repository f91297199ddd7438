"""``ragbot eval-answers --unlike``: a question that near-paraphrases one of an earlier question file is
left out of the figures and listed in the report, over the real embedded index and chat pipeline."""

from __future__ import annotations

import json
from pathlib import Path

from support.question_files import first_pages, question_file

from ragbot.cli.main import main

QUESTIONS = [
    ("Can a teenager with a summer job get income tax credit points?", 100028),
    ("How do I ask for an income tax refund?", 100005),
    ("What is the weather in Haifa?", None),
]


def _earlier(folder: Path) -> Path:
    """A question file already read, holding a near-paraphrase of the first question."""
    folder.mkdir()
    return question_file(folder, [("Can a teenager with a summer job get tax credit points?", 100028)])


def test_near_paraphrases_of_read_questions_are_left_out_and_listed(tmp_path: Path) -> None:
    pages, questions = first_pages(tmp_path), question_file(tmp_path, QUESTIONS)
    earlier, out = _earlier(tmp_path / "read"), tmp_path / "report.json"
    argv = ["eval-answers", "--questions", str(questions), "--pages", str(pages), "--half", "all"]
    assert main([*argv, "--modes", "quote", "--unlike", str(earlier), "--output", str(out)]) == 0
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["questions"] == 2
    answered = [row["question"] for row in report["answers"] if row["mode"] == "quote"]
    assert answered == [q for q, _ in QUESTIONS[1:]]
    (left,) = report["unlike"]["left_out"]
    assert left["id"] == "q0" and left["earlier"].startswith("Can a teenager") and left["overlap"] >= 0.5
    assert report["unlike"]["overlap"] == 0.5


def test_an_overlap_outside_zero_to_one_is_refused(tmp_path: Path) -> None:
    questions, earlier = question_file(tmp_path, QUESTIONS), _earlier(tmp_path / "read")
    argv = ["eval-answers", "--questions", str(questions), "--unlike", str(earlier), "--unlike-overlap", "0"]
    assert main(argv) == 2
