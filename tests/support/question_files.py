"""The first sample pages and a question file in eval-answers' shape, written to a test's folder."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# the first three pages of samples/kolzchut/pages.jsonl
FIRST_PAGES = (100005, 100028, 100029)


def first_pages(folder: Path) -> Path:
    """``FIRST_PAGES`` as their own JSONL file in ``folder``."""
    lines = (ROOT / "samples/kolzchut/pages.jsonl").read_text(encoding="utf-8").splitlines()[:3]
    assert [json.loads(line)["page_id"] for line in lines] == list(FIRST_PAGES)
    pages = folder / "pages.jsonl"
    pages.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return pages


def question_file(folder: Path, questions: Sequence[tuple[str, int | None]]) -> Path:
    """English ``(question, gold page or None)`` pairs as ``folder/questions.json``."""
    path = folder / "questions.json"
    rows = [
        {"id": f"q{i}", "language": "en", "question": q, "gold_page_id": gold}
        for i, (q, gold) in enumerate(questions)
    ]
    path.write_text(json.dumps({"questions": rows}), encoding="utf-8")
    return path
