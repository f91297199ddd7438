"""Near-paraphrases of questions already read (``ragbot.evaluation.paraphrases``): word sets, the
Jaccard overlap, each question's nearest earlier one and the threshold."""

from __future__ import annotations

import pytest

from ragbot.evaluation.paraphrases import nearest, novel, overlap, words


def test_words_are_distinct_without_short_words_or_citation_marks() -> None:
    got = words("How do I claim a tax refund? A tax refund [2]")
    assert got.every == frozenset({"how", "do", "claim", "tax", "refund"}) and len(got.forms) == 5


def test_overlap_is_the_jaccard_share_and_reads_hebrew_prefix_letters() -> None:
    a, b = words("claim tax refund"), words("tax refund form 101")
    assert overlap(a, b) == pytest.approx(2 / 5) == overlap(b, a)
    assert overlap(a, a) == 1.0
    assert overlap(words(""), words("")) == 0.0
    # "and the refund" (והחזר) is the word "refund" (החזר) with prefix letters
    assert overlap(words("החזר מס"), words("והחזר מס")) == 1.0
    assert overlap(words("החזר מס"), words("דמי אבטלה")) == 0.0


def test_each_question_gets_its_nearest_earlier_question() -> None:
    earlier = [
        "How do I claim an income tax refund?",
        "Who is entitled to unemployment benefits?",
        "How do I claim an income tax refund?",  # a repeat is compared once
    ]
    got = nearest(["How can I claim my income tax refund?", "Weather forecast for Haifa tomorrow"], earlier)
    assert got[0].earlier == earlier[0] and got[0].overlap == pytest.approx(5 / 9)  # 5 words shared of 9
    assert got[1].earlier == "" and got[1].overlap == 0.0


def test_novel_keeps_questions_below_the_threshold_only() -> None:
    earlier = ["How do I claim an income tax refund?"]
    asked = ["How can I claim my income tax refund?", "Is a scholarship exempt from income tax?"]
    assert novel(asked, earlier, 0.5) == [False, True]
    assert novel(asked, earlier, 0.7) == [True, True]
    assert novel(asked, [], 0.5) == [True, True]
    with pytest.raises(ValueError, match="overlap threshold"):
        novel(asked, earlier, 0.0)
