"""What kind of fact a question asks for (an amount, a duration) and whether a sentence states one.

"How much is the old-age pension?" is answered by a sentence that states an amount, not by one that
names the pension: a rights wiki's pages name many benefits whose sums they do not give, and a quote
about the right topic without the asked fact is a confident non-answer. ``asked`` reads the question's
wording, in Hebrew and English:

- ``duration``: "how long", "for how many months", "within how many days", "כמה זמן", "לכמה שנים",
  "תוך כמה ימים", "עד מתי";
- ``amount``: "how much", "what percentage", "what is the rate", "כמה כסף", "מה גובה", "מה הסכום",
  "מה שיעור", "כמה אחוז".

``states`` says whether a sentence holds such a fact: a number (or a number word) with a time unit for
a duration; a currency or a percent (or a half) for an amount. "How many credit points" asks a count,
which any number answers, so it is neither kind. The chat's decision (``ragbot.chat.answerability``)
abstains when the question asks one of these kinds and no source sentence close to the best states
it, and the quote mode quotes the sentences that do (``ragbot.chat.quote``).
"""

from __future__ import annotations

import re
from typing import Literal

__all__ = ["Kind", "asked", "states"]

Kind = Literal["amount", "duration"]

# Hebrew time units (longest first, so "ימים" is not read as "ימי").
_UNITS = "ימים|ימי|יום|שבועות|שבוע|חודשים|חודשי|חודש|שנים|שנות|שנה|שעות|שעה"
_UNITS_HE = rf"(?:זמן|{_UNITS})"
_DURATION_Q = re.compile(
    rf"(?:^|[\s,(])(?:ו?[לבמ]?|תוך |במשך |עד )כמה\s+{_UNITS_HE}(?![\u0590-\u05ff])|עד מתי"
    r"|\bhow long\b|\b(?:for|within|in|after) how many (?:days|weeks|months|years|tax years|hours)\b"
    r"|\bhow many (?:days|weeks|months|years|tax years|hours)\b",
    re.IGNORECASE,
)
_AMOUNT_Q = re.compile(
    r"(?:^|[\s,(])ו?[בל]?כמה (?:כסף|משלמים|משלם|משלמת|עולה|עולים|שווה|שווים|אחוז|אחוזים)"
    r"|מה (?:ה)?(?:גובה|סכום|שיעור)|(?:באיזה|מאיזה|עד איזה) (?:סכום|שיעור)|בכמה אחוז"
    r"|\bhow much\b|\bwhat (?:percentage|percent)\b|\bat what rate\b"
    r"|\bwhat(?:'s| is| are) the (?:\w+ ){0,3}(?:rate|rates|amount|sum)\b",
    re.IGNORECASE,
)
_NUMBER = (
    r"(?:\d+(?:[.,]\d+)*|אחד|אחת|שניים|שתיים|שני|שתי|שלוש|שלושה|ארבע|ארבעה|חמש|חמישה|שש|שישה|שבע|שבעה"
    r"|שמונה|תשע|תשעה|עשר|עשרה|עשרים|שלושים|ארבעים|חמישים|שישים|מאה|חצי|מחצית|רבע"
    r"|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|twenty|thirty|half)"
)
# A sentence ends at . ! ? before a space (not inside a number such as 2.25).
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_DURATION_S = re.compile(
    rf"(?<![\w\u0590-\u05ff]){_NUMBER}[\s-]*(?:ה)?(?:{_UNITS})|שנתיים|חודשיים|שבועיים|יומיים"
    rf"|\b{_NUMBER}[\s-]*(?:days?|weeks?|months?|years?|hours?)\b",
    re.IGNORECASE,
)
_AMOUNT_S = re.compile(r"₪|ש\"ח|ש״ח|שקל|אחוז|%|\bNIS\b|shekel|percent|מחצית|\bhalf\b", re.IGNORECASE)


def asked(question: str) -> Kind | None:
    """The kind of fact the question asks for, or None when it asks another kind (who, how, whether).
    Only the last sentence is read (a question's situation comes first: "I worked for a few months"
    is "עבדתי כמה חודשים"), and an amount before a duration ("כמה" is also "a few")."""
    parts = [p for p in _SENTENCE_END.split(question.strip()) if p.strip()]
    ask = parts[-1] if parts else question
    if _AMOUNT_Q.search(ask):
        return "amount"
    if _DURATION_Q.search(ask):
        return "duration"
    return None


def states(kind: Kind, sentence: str) -> bool:
    """Whether the sentence states a fact of that kind."""
    pattern = _DURATION_S if kind == "duration" else _AMOUNT_S
    return pattern.search(sentence) is not None
