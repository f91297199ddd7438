"""Right-to-left text stored in visual order, found by its final letters and put back in logical order."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator, Sequence

_HEBREW = re.compile(r"[\u05d0-\u05ea]")
_HEBREW_WORD = re.compile(r"[\u05d0-\u05ea]{2,}")
_NIQQUD = re.compile(r"[\u0591-\u05c7]")
_FINALS = frozenset("ךםןףץ")
_NON_FINALS = frozenset("כמנפצ")  # the letters that take a final form at the end of a word
_MIRROR = str.maketrans("()[]{}<>«»", ")(][}{><»«")


def rtl_vote(line: str) -> int:
    """Evidence that a line's Hebrew is reversed (> 0) or in logical order (< 0); 0 when unknown.

    Hebrew writes ך ם ן ף ץ only at the end of a word and כ מ נ פ צ almost never there, so a word
    that starts with a final form, or ends with its ordinary form, was stored backwards.
    """
    score = 0
    for match in _HEBREW_WORD.finditer(_NIQQUD.sub("", line)):
        word = match.group()
        score += (word[0] in _FINALS) + (word[-1] in _NON_FINALS)
        score -= (word[-1] in _FINALS) + (word[0] in _NON_FINALS)
    return score


def fix_rtl_order(text: str) -> str:
    """``text`` with every line whose Hebrew is in visual order put back in logical order."""
    return fix_rtl_pages([text])[0]


def fix_rtl_pages(pages: Sequence[str]) -> list[str]:
    """Lines voted reversed are reordered; undecided Hebrew lines follow the document's majority."""
    split = [page.split("\n") for page in pages]
    votes = [[rtl_vote(line) for line in lines] for lines in split]
    visual_default = sum(sum(v) for v in votes) > 0
    out: list[str] = []
    for lines, line_votes in zip(split, votes, strict=True):
        fixed = [
            visual_to_logical(line)
            if vote > 0 or (vote == 0 and visual_default and _HEBREW.search(line))
            else line
            for line, vote in zip(lines, line_votes, strict=True)
        ]
        out.append("\n".join(fixed))
    return out


def visual_to_logical(line: str, *, rtl_paragraph: bool | None = None) -> str:
    """One line from visual (left-to-right display) order to logical order.

    In a right-to-left paragraph (more Hebrew than Latin letters, unless told) the whole line is
    reversed, then Latin and number runs are turned back so they read as written, and brackets
    are mirrored. In a left-to-right paragraph only the right-to-left runs are reversed in place.
    Number runs separated by spaces stay separate (a Hebrew paragraph shows "2024 2025" as
    "2025 2024"); a run with Latin letters reads as one.
    """
    classes = [_bidi_class(c) for c in line]
    if rtl_paragraph is None:
        rtl_paragraph = classes.count("R") >= classes.count("L")
    if rtl_paragraph:
        return _reverse_rtl(line)
    out: list[str] = []
    pos = 0
    for start, end in _rtl_spans(classes):
        out.append(line[pos:start])
        out.append(_reverse_rtl(line[start:end]))
        pos = end
    out.append(line[pos:])
    return "".join(out)


def _bidi_class(char: str) -> str:
    """Collapsed bidi class: L (strong left-to-right), R, D (digit), T (terminator like %), N."""
    bidi = unicodedata.bidirectional(char)
    if bidi in ("R", "AL"):
        return "R"
    if bidi in ("EN", "AN"):
        return "D"
    if bidi == "ET":
        return "T"
    if bidi == "L":
        return "L"
    return "N"


def _reverse_rtl(text: str) -> str:
    """A visual right-to-left run in logical order: reversed, its Latin and number runs turned back."""
    rev = text[::-1]
    classes = [_bidi_class(c) for c in rev]
    out: list[str] = []
    pos = 0
    for start, end in _ltr_spans(classes):
        out.append(rev[pos:start].translate(_MIRROR))
        segment = rev[start:end]
        if "L" in classes[start:end]:
            out.append(segment[::-1])
        else:
            out.append(re.sub(r"\S+", lambda m: m.group()[::-1], segment))
        pos = end
    out.append(rev[pos:].translate(_MIRROR))
    return "".join(out)


def _ltr_spans(classes: Sequence[str]) -> Iterator[tuple[int, int]]:
    """Spans from a strong or digit char to the last such char before the next right-to-left char."""
    n = len(classes)
    i = 0
    while i < n:
        if classes[i] not in ("L", "D"):
            i += 1
            continue
        start = last = i
        j = i + 1
        while j < n and classes[j] != "R":
            if classes[j] in ("L", "D"):
                last = j
            j += 1
        while start > 0 and classes[start - 1] == "T" and classes[start] == "D":
            start -= 1
        end = last + 1
        while end < n and classes[end] == "T" and classes[end - 1] in ("D", "T"):
            end += 1
        yield start, end
        i = max(j, end)


def _rtl_spans(classes: Sequence[str]) -> Iterator[tuple[int, int]]:
    """Spans from a right-to-left char to the last one before the next strong left-to-right char."""
    n = len(classes)
    i = 0
    while i < n:
        if classes[i] != "R":
            i += 1
            continue
        start = last = i
        j = i + 1
        while j < n and classes[j] != "L":
            if classes[j] == "R":
                last = j
            j += 1
        yield start, last + 1
        i = j
