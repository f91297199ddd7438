"""Kol-Zchut's clients see one link per page, and their rating calls send null for what was not given."""

from __future__ import annotations

import pytest

from ragbot.chat.citations import StreamedNumbers, number_by_page
from ragbot.chat.feedback import merge_feedback
from ragbot.chat.schemas import Rating, Source


def sources(*pages: int) -> list[Source]:
    return [
        Source(index=i, title=f"p{p}", page_id=p, score=0.0, doc_id=str(i)) for i, p in enumerate(pages, 1)
    ]


def test_paragraph_numbers_become_the_place_of_their_page_in_docs() -> None:
    found = sources(10, 10, 20, 30, 20, 30)  # docs: [10, 20, 30]
    answer = "א [2] ב [3] ג [6]. ד [1][2] ה [1, 2] ו [99] ז [4] [6]"
    assert number_by_page(answer, found) == "א [1] ב [2] ג [3]. ד [1] ה [1] ו [99] ז [3]"
    assert number_by_page("no citations", found) == "no citations"
    assert number_by_page("[1]", []) == "[1]"


def test_a_streamed_answer_is_renumbered_even_when_a_citation_is_cut_between_pieces() -> None:
    numbers = StreamedNumbers(sources(10, 10, 20, 30, 20, 30))
    pieces = ["א [", "6", "] ב [3", "] ג [1, ", "2] ד [99", "] ה ["]
    shown = "".join(numbers.feed(p) for p in pieces) + numbers.flush()
    assert shown == "א [3] ב [2] ג [1] ד [99] ה ["


@pytest.mark.parametrize(
    ("sent", "expected"),
    [
        ({"like_sent": True, "like": False, "text": None}, ("down", "old")),
        ({"like_sent": True, "like": None, "text": "new"}, ("up", "new")),  # a follow-up text
        ({"like_sent": True, "like": None, "text": None}, (None, "old")),  # the widget's withdraw
        ({"like_sent": True, "like": None, "text": ""}, (None, "old")),
        ({"like_sent": False, "like": None, "text": None}, ("up", "old")),  # only the answer id
        ({"like_sent": False, "like": None, "text": "new"}, ("up", "new")),
    ],
)
def test_a_null_never_erases_except_the_widgets_withdraw(
    sent: dict[str, object], expected: tuple[Rating | None, str | None]
) -> None:
    assert merge_feedback(stored_rating="up", stored_comment="old", **sent) == expected  # type: ignore[arg-type]
