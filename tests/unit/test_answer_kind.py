"""The kind of fact a question asks for (an amount, a duration) in Hebrew and English, whether a sentence
states one, and the quote mode's choice among the sentences that do."""

from __future__ import annotations

import pytest

from ragbot.chat.answer_kind import asked, states
from ragbot.chat.quote import QuoteOptions, Scored, Sentence, choose_sentences, stating


@pytest.mark.parametrize(
    ("question", "kind"),
    [
        ("כמה זמן אפשר לקבל דמי אבטלה?", "duration"),
        ("לכמה שנים ניתנת נקודת זיכוי על תואר ראשון?", "duration"),
        ("תוך כמה ימים צריך למסור טופס 101?", "duration"),
        ("בכמה שבועות מתארכת חופשת הלידה?", "duration"),
        ("עד מתי משלמים גמלת ילד נכה?", "duration"),
        ("How long is maternity leave?", "duration"),
        ("שילמתי דמי ביטוח 6 חודשים לפני הלידה. האם מגיעים לי דמי לידה, ולכמה זמן?", "duration"),
        ("Within how many days can I appeal?", "duration"),
        ("For how many months after discharge do soldiers get credit points?", "duration"),
        ("מה גובה שכר המינימום?", "amount"),
        ("כמה כסף מקבל עולה חדש בסל הקליטה?", "amount"),
        ("מה שיעור המס במדרגה הראשונה?", "amount"),
        ("כמה אחוז הנחה בארנונה מקבלים אזרחים ותיקים?", "amount"),
        ("עד איזה סכום פטורה ממס מלגת מחקר?", "amount"),
        ("How much is the birth grant for twins?", "amount"),
        # the situation comes first; the last sentence asks ("כמה חודשים" is also "a few months")
        ("הבן שלי בן 16, עבד כמה חודשים ופוטר. כמה כסף הוא יכול לקבל?", "amount"),
        ('עבדתי כמה חודשים בחו"ל. האם אני זכאי לדמי אבטלה?', None),
        ("What percentage of my salary goes to the pension fund?", "amount"),
        ("What is the highest income tax rate in Israel?", "amount"),
        # a count (any number answers it), who, how and whether ask neither kind
        ("כמה נקודות זיכוי מקבלים על תואר שני?", None),
        ("How many tax credit points does a woman get?", None),
        ("מי זכאי לדמי אבטלה?", None),
        ("How do I claim unemployment benefits?", None),
        ("האם מלגת לימודים פטורה ממס הכנסה?", None),
        ("What is the hourly minimum wage?", None),
    ],
)
def test_the_kind_a_question_asks_for(question: str, kind: str | None) -> None:
    assert asked(question) == kind


def test_a_sentence_states_a_duration_with_a_number_and_a_unit_and_an_amount_with_a_currency_or_percent() -> (
    None
):
    assert states("duration", "הזכאות היא ל-50 ימים בשנה.")
    assert states("duration", "התשלום ניתן לתקופה של שלושה חודשים.")
    assert states("duration", "ניתן לערער תוך שנתיים.")
    assert states("duration", "Maternity pay is given for 15 weeks.")
    assert not states("duration", "דמי אבטלה משולמים למי שנרשם בלשכת התעסוקה.")
    assert not states("duration", "סעיף 9(5) לפקודת מס הכנסה.")
    assert states("amount", "גובה הגמלה הוא 3,144 ₪ לחודש.")
    assert states("amount", "שיעור המס הוא 10% מההכנסה.")
    assert states("amount", 'הסכום הוא 242 ש"ח.')
    assert states("amount", "The grant is 2,000 NIS.")
    assert not states("amount", "מי שנולד לו ילד בשנת 2024 זכאי לנקודת זיכוי.")
    assert not states("amount", "The pension is paid every month by National Insurance.")


def _scored(*pairs: tuple[str, float]) -> Scored:
    return Scored([Sentence(1, i, text) for i, (text, _) in enumerate(pairs)], [s for _, s in pairs], "m")


def test_quote_quotes_only_sentences_that_state_the_asked_kind_close_to_the_best() -> None:
    options = QuoteOptions(min_score=0.8, margin=0.04, kind_margin=0.1)
    scored = _scored(
        ("The allowance is paid to every resident.", 0.95),
        ("The allowance is 1,800 NIS a month.", 0.90),
        ("An old rate was 12% of the wage.", 0.80),
    )
    assert [s.text for s in choose_sentences(scored, options, "amount")] == [
        "The allowance is 1,800 NIS a month."
    ]
    assert stating(scored, options, "amount") == [1]  # 0.80 is more than 0.1 below the best
    # nothing close enough states a duration: nothing is quoted (the turn abstains)
    assert choose_sentences(scored, options, "duration") == []
    # no kind asked, or the check off: the best sentences as before
    assert [s.position for s in choose_sentences(scored, options)] == [0]
    off = QuoteOptions(min_score=0.8, margin=0.04, kind_margin=-1.0)
    assert [s.position for s in choose_sentences(scored, off, "duration")] == [0]
