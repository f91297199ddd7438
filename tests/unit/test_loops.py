"""The loop detector finds answers that repeat a word, a phrase, a sentence or a block."""

from __future__ import annotations

from ragbot.chat.loops import LoopDetector


def stream(text: str, size: int = 3) -> LoopDetector:
    detector = LoopDetector()
    for i in range(0, len(text), size):
        if detector.feed(text[i : i + size]):
            break
    return detector


def test_one_word_repeated_is_a_loop_and_kept_once() -> None:
    detector = stream("The allowance is paid monthly. " + "allowance " * 30)
    assert detector.looping
    assert detector.kept == "The allowance is paid monthly. allowance"


def test_a_repeated_sentence_is_a_loop() -> None:
    sentence = "You can apply at the local office of the National Insurance Institute. "
    detector = stream("Answer: " + sentence * 6)
    assert detector.looping
    assert detector.kept.count("National Insurance") == 1


def test_hebrew_phrase_loops_are_found() -> None:
    detector = stream("זכאות לדמי אבטלה " + "מגיעה לכם " * 20)
    assert detector.looping and detector.kept.endswith("מגיעה לכם")


def test_text_without_spaces_repeating_is_a_loop() -> None:
    detector = stream("ok " + "ab12" * 40)
    assert detector.looping and len(detector.kept) < 20


def test_a_normal_answer_with_repeated_words_is_not_a_loop() -> None:
    text = (
        "To claim unemployment benefits [1], register at the employment service [2]. The benefit is "
        "paid for up to 175 days, depending on age and the number of dependants [1]. Register on the "
        "first day without work, since days before registration are not paid. | a | b |\n|---|---|\n"
        "| 1 | 2 |\n| 3 | 4 |\n"
    )
    detector = stream(text)
    assert not detector.looping and detector.kept == text


def test_short_repeats_below_the_length_floor_are_not_loops() -> None:
    assert not stream("no no no no, thanks.").looping
